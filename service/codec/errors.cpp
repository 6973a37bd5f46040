#include "codec/errors.h"

#include "codec/predict_json.h"
#include "http/grpc_wire.h"

namespace numaserve::codec {

int http_status(Error::Code code) {
  switch (code) {
    case Error::Code::kInvalidArgument: return 400;
    case Error::Code::kNotFound: return 404;
    case Error::Code::kNotAllowed: return 405;
    case Error::Code::kUnavailable:
    case Error::Code::kResourceExhausted: return 503;
    case Error::Code::kDeadlineExceeded: return 504;
    case Error::Code::kIo:
    case Error::Code::kInternal: return 500;
  }
  return 500;
}

http::Reply status_reply(int status, const Error& error) {
  http::Reply reply;
  reply.status = status;
  reply.body = error_json(error);
  return reply;
}

int grpc_code(Error::Code code) {
  switch (code) {
    case Error::Code::kInvalidArgument: return http::grpc::kInvalidArgument;
    case Error::Code::kNotFound: return http::grpc::kNotFound;
    case Error::Code::kNotAllowed: return http::grpc::kUnimplemented;
    case Error::Code::kUnavailable: return http::grpc::kUnavailable;
    case Error::Code::kResourceExhausted: return http::grpc::kResourceExhausted;
    case Error::Code::kDeadlineExceeded: return http::grpc::kDeadlineExceeded;
    case Error::Code::kIo:
    case Error::Code::kInternal: return http::grpc::kInternal;
  }
  return http::grpc::kInternal;
}

http::Reply error_reply(const Error& error, http::Protocol protocol) {
  if (protocol == http::Protocol::kGrpc) {
    // gRPC carries a status and a message, no body: the field leads the
    // message as it does in every refusal ("items[3].id: required").
    http::Reply reply;
    reply.status = http_status(error.code);
    reply.grpc_status = grpc_code(error.code);
    reply.body = error.message;
    return reply;
  }
  http::Reply reply = status_reply(http_status(error.code), error);
  if (reply.status == 503) reply.headers.emplace_back("Retry-After", "1");
  return reply;
}

}  // namespace numaserve::codec
