#pragma once
// The one place an error becomes a reply: routes return our Error, and only
// here does its code turn into a status, its message and field into the
// JSON body {"error": ..., "field": ...} — or, for a gRPC call, into a gRPC
// status and its message.

#include "http/message.h"
#include "numaserve/common/result.h"

namespace numaserve::codec {

// kInvalidArgument 400, kNotFound 404, kNotAllowed 405, kUnavailable 503,
// kDeadlineExceeded 504, kIo and kInternal 500.
int http_status(Error::Code code);
// INVALID_ARGUMENT, NOT_FOUND, UNIMPLEMENTED, UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL.
int grpc_code(Error::Code code);

// With Retry-After on a 503: well-behaved clients come back later instead
// of at once. A gRPC call's: its status code and message.
http::Reply error_reply(const Error& error, http::Protocol protocol = http::Protocol::kHttp);

// The error's body under a status of HTTP's own (the transport's 408, 413,
// 431...), so every error a client sees has one shape.
http::Reply status_reply(int status, const Error& error);

}  // namespace numaserve::codec
