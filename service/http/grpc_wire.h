#pragma once
// gRPC's own framing over HTTP/2 (gRPC's PROTOCOL-HTTP2.md), as pure
// functions: a unary call's length-prefixed message, the grpc-timeout
// header, the status codes and the percent-encoded grpc-message. What
// http2_connection.cpp frames with, and what fuzz_grpc_wire runs.

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "http/message.h"

namespace numaserve::http::grpc {

// The status codes (grpc/status.h), by number.
enum Code : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
};

// "OK", "INVALID_ARGUMENT", ...: the name a metric labels a code with.
const char* code_name(int code);

// The code an HTTP status of the transport's own maps to (a reply the
// application did not make): 408 DEADLINE_EXCEEDED, 413 RESOURCE_EXHAUSTED,
// 503 UNAVAILABLE, any other error INTERNAL.
int code_of_status(int http_status);

// A unary call's request: exactly one uncompressed message of at most
// `max_bytes`. A failure is the status to answer with and why.
struct Unframed {
  std::string_view message;
  int code = kOk;
  std::string error;
};
Unframed unframe(std::string_view body, std::size_t max_bytes);

// One message with its 5-byte prefix (uncompressed, big-endian length).
std::string frame(std::string_view message);

// grpc-timeout: 1 to 8 digits and a unit (H, M, S, m, u, n); nothing for
// anything else (the call then has no deadline, as gRPC's own servers do).
std::optional<std::chrono::nanoseconds> parse_timeout(std::string_view value);

// grpc-message: percent-encoded UTF-8, every byte outside 0x20..0x7E and '%'.
std::string percent_encode(std::string_view message);

}  // namespace numaserve::http::grpc
