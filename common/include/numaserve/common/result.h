#pragma once
// The one error idiom of numaserve: functions that can fail return
// Result<T>; nothing in our code throws. Messages name both sides of a
// mismatch ("needs 8 CPUs, cpuset has 4") and, for bad input, the offending
// token, file or field.

#include <string>
#include <utility>

#include <tl/expected.hpp>

namespace numaserve {

struct Error {
  enum class Code {
    kInvalidArgument,  // malformed input: a cpulist token, a flag, a field
    kNotFound,         // a file or object that should exist does not
    kIo,               // the OS refused a read
    kUnavailable,      // the facility exists but cannot be used here, or not now
    kNotAllowed,       // it exists, but not in this form (an HTTP method a route does not take)
    kDeadlineExceeded,  // the caller's deadline passed before the work could be done
    kResourceExhausted,  // refused for load (a queue full, a wait too long): the caller may retry later
    kInternal,         // a library call failed in a way we did not expect
  };

  Code code = Code::kInternal;
  std::string message;
  std::string field;  // offending field or token, empty when not applicable

  // Prefixes context, e.g. the file an error came from: "cpulist: bad token".
  [[nodiscard]] Error with_context(const std::string& context) && {
    message = context + ": " + message;
    return std::move(*this);
  }
};

template <typename T>
using Result = tl::expected<T, Error>;

using Status = Result<void>;

inline tl::unexpected<Error> make_error(Error::Code code, std::string message,
                                        std::string field = {}) {
  return tl::unexpected<Error>(Error{code, std::move(message), std::move(field)});
}

const char* to_string(Error::Code code);

}  // namespace numaserve
