#pragma once
// A health check from inside the container: GET a path on loopback and
// return the status code. What `numaserve health` runs for the image's
// HEALTHCHECK, so the image needs neither a shell nor an HTTP client.

#include <string>

#include "numaserve/common/result.h"

namespace numaserve::http {

// HTTP/1.0 GET of `path` on 127.0.0.1:`port`; the status code of the reply,
// or an error naming what failed (connect, send, no reply within `timeout_seconds`).
Result<int> probe(int port, const std::string& path, double timeout_seconds);

}  // namespace numaserve::http
