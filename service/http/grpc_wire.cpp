#include "http/grpc_wire.h"

#include <cstdint>

namespace numaserve::http::grpc {

const char* code_name(int code) {
  switch (code) {
    case kOk: return "OK";
    case kCancelled: return "CANCELLED";
    case kUnknown: return "UNKNOWN";
    case kInvalidArgument: return "INVALID_ARGUMENT";
    case kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case kNotFound: return "NOT_FOUND";
    case kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case kFailedPrecondition: return "FAILED_PRECONDITION";
    case kUnimplemented: return "UNIMPLEMENTED";
    case kInternal: return "INTERNAL";
    case kUnavailable: return "UNAVAILABLE";
    default: return "UNKNOWN";
  }
}

int code_of_status(int http_status) {
  switch (http_status) {
    case 200: return kOk;
    case 408: return kDeadlineExceeded;
    case 413: return kResourceExhausted;
    case 503: return kUnavailable;
    default: return kInternal;
  }
}

Unframed unframe(std::string_view body, std::size_t max_bytes) {
  constexpr std::size_t kPrefix = 5;
  if (body.size() < kPrefix) return {{}, kInternal, "a unary call needs one request message; got " + std::to_string(body.size()) + " bytes"};
  const auto byte = [&](std::size_t i) { return static_cast<std::uint8_t>(body[i]); };
  if (byte(0) > 1) return {{}, kInternal, "message flag " + std::to_string(byte(0)) + ": want 0 or 1"};
  // No grpc-accept-encoding is announced, so a compressed message is one
  // the client should not have sent.
  if (byte(0) == 1) return {{}, kUnimplemented, "compressed messages are not supported: send them uncompressed"};
  const std::uint64_t length = (std::uint64_t{byte(1)} << 24) | (std::uint64_t{byte(2)} << 16) |
                               (std::uint64_t{byte(3)} << 8) | std::uint64_t{byte(4)};
  if (length > max_bytes) {
    return {{}, kResourceExhausted,
            "request message of " + std::to_string(length) + " bytes; the limit is " + std::to_string(max_bytes)};
  }
  if (body.size() - kPrefix != length) {
    return {{}, kInternal,
            body.size() - kPrefix < length ? "request message cut short: " + std::to_string(body.size() - kPrefix) +
                                                 " of its " + std::to_string(length) + " bytes"
                                           : "more than one request message for a unary call"};
  }
  return {body.substr(kPrefix), kOk, {}};
}

std::string frame(std::string_view message) {
  const auto n = static_cast<std::uint32_t>(message.size());
  std::string out;
  out.reserve(5 + message.size());
  out += '\0';
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((n >> shift) & 0xff);
  out += message;
  return out;
}

std::optional<std::chrono::nanoseconds> parse_timeout(std::string_view value) {
  if (value.size() < 2 || value.size() > 9) return std::nullopt;
  std::int64_t n = 0;
  for (const char c : value.substr(0, value.size() - 1)) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  using namespace std::chrono;
  switch (value.back()) {
    case 'H': return duration_cast<nanoseconds>(hours(n));
    case 'M': return duration_cast<nanoseconds>(minutes(n));
    case 'S': return duration_cast<nanoseconds>(seconds(n));
    case 'm': return duration_cast<nanoseconds>(milliseconds(n));
    case 'u': return duration_cast<nanoseconds>(microseconds(n));
    case 'n': return nanoseconds(n);
    default: return std::nullopt;
  }
}

std::string percent_encode(std::string_view message) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(message.size());
  for (const char c : message) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b <= 0x7e && b != '%') {
      out += c;
    } else {
      out += '%';
      out += kHex[b >> 4];
      out += kHex[b & 0xf];
    }
  }
  return out;
}

}  // namespace numaserve::http::grpc
