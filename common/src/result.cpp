#include "numaserve/common/result.h"

namespace numaserve {

const char* to_string(Error::Code code) {
  switch (code) {
    case Error::Code::kInvalidArgument: return "invalid_argument";
    case Error::Code::kNotFound: return "not_found";
    case Error::Code::kIo: return "io";
    case Error::Code::kUnavailable: return "unavailable";
    case Error::Code::kNotAllowed: return "not_allowed";
    case Error::Code::kInternal: return "internal";
  }
  return "internal";
}

}  // namespace numaserve
