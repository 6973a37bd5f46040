#pragma once
// The one place an error becomes an HTTP reply: routes return our Error, and
// only here does its code turn into a status, its message and field into the
// JSON body {"error": ..., "field": ...}.

#include "http/message.h"
#include "numaserve/common/result.h"

namespace numaserve::api {

// kInvalidArgument 400, kNotFound 404, kNotAllowed 405, kUnavailable 503,
// kIo and kInternal 500.
int http_status(Error::Code code);

// With Retry-After on a 503: well-behaved clients come back later instead
// of at once.
http::Reply error_reply(const Error& error);

// The error's body under a status of HTTP's own (the transport's 408, 413,
// 431...), so every error a client sees has one shape.
http::Reply status_reply(int status, const Error& error);

}  // namespace numaserve::api
