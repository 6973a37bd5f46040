#include "numaserve/common/result.h"

#include "numaserve/common/names.h"

namespace numaserve {
namespace {

constexpr auto kCodeNames = make_names<Error::Code>({{Error::Code::kInvalidArgument, "invalid_argument"},
                                                     {Error::Code::kNotFound, "not_found"},
                                                     {Error::Code::kIo, "io"},
                                                     {Error::Code::kUnavailable, "unavailable"},
                                                     {Error::Code::kNotAllowed, "not_allowed"},
                                                     {Error::Code::kInternal, "internal"}});

}  // namespace

// Every name is a string literal, so data() is NUL-terminated; a code
// without a row (an integer cast from a child's reply) reads as internal.
const char* to_string(Error::Code code) {
  const std::string_view name = kCodeNames.name(code);
  return name.empty() ? "internal" : name.data();
}

}  // namespace numaserve
