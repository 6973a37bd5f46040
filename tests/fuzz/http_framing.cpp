// The service transport's request framing (request line, headers, chunked
// and sized bodies, pipelined requests), through its own parser entry
// without a socket. The first byte of the input says where to cut the rest
// into pieces, as a network delivers them: whatever the cuts, the same
// requests, the same refusal; bodies within their limit; refusals only
// 400, 413 or 431, each naming its field where it has one.
#include "fuzz.h"
#include "http/framing.h"

using namespace numaserve;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  http::ServerConfig config;  // small limits, so they are reached
  config.max_header_bytes = 512;
  config.max_body_bytes = 1024;
  const auto bytes = fuzz::text(data + 1, size - 1);
  const std::size_t step = data[0] % 64 + 1;
  std::vector<std::size_t> cuts;
  for (std::size_t at = step; at < bytes.size(); at += step + (at % 7)) cuts.push_back(at);

  const auto whole = http::frame_requests(bytes, config);
  const auto pieces = http::frame_requests(bytes, config, cuts);
  FUZZ_CHECK(whole.refusal == 0 || whole.refusal == 400 || whole.refusal == 413 || whole.refusal == 431, "refusal %d",
             whole.refusal);
  FUZZ_CHECK(whole.refusal != 413 || whole.refusal_field == "body", "413 naming '%s'", whole.refusal_field.c_str());
  FUZZ_CHECK(whole.refusal != 431 || whole.refusal_field == "headers", "431 naming '%s'", whole.refusal_field.c_str());
  for (const auto& request : whole.requests) {
    FUZZ_CHECK(request.body.size() <= config.max_body_bytes, "a body of %zu bytes", request.body.size());
    FUZZ_CHECK(!request.method.empty(), "a request without a method");
  }
  FUZZ_CHECK(pieces.requests.size() == whole.requests.size(), "%zu requests in pieces (step %zu), %zu whole",
             pieces.requests.size(), step, whole.requests.size());
  for (std::size_t i = 0; i < whole.requests.size(); ++i) {
    const auto& a = whole.requests[i];
    const auto& b = pieces.requests[i];
    FUZZ_CHECK(a.method == b.method && a.path == b.path && a.body == b.body, "request %zu differs in pieces", i);
  }
  FUZZ_CHECK(pieces.refusal == whole.refusal, "refusal %d in pieces, %d whole", pieces.refusal, whole.refusal);
  FUZZ_CHECK(pieces.incomplete == whole.incomplete, "incomplete %d in pieces, %d whole", pieces.incomplete,
             whole.incomplete);
  return 0;
}
