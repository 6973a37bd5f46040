#include "api/errors.h"

#include "api/predict_json.h"

namespace numaserve::api {

int http_status(Error::Code code) {
  switch (code) {
    case Error::Code::kInvalidArgument: return 400;
    case Error::Code::kNotFound: return 404;
    case Error::Code::kNotAllowed: return 405;
    case Error::Code::kUnavailable: return 503;
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

http::Reply error_reply(const Error& error) {
  http::Reply reply = status_reply(http_status(error.code), error);
  if (reply.status == 503) reply.headers.emplace_back("Retry-After", "1");
  return reply;
}

}  // namespace numaserve::api
