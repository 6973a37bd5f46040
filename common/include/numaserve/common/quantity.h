#pragma once
// Kubernetes resource quantities for memory: "1Gi", "512Mi", "100M", "1.5Gi",
// "1048576". The same spelling as in pod specs and KubeletConfiguration, so
// operators can paste values between them.

#include <cstdint>
#include <string>
#include <string_view>

#include "numaserve/common/result.h"

namespace numaserve {

// Bytes; binary suffixes Ki Mi Gi Ti Pi, decimal k M G T P, or none. A
// fraction must come out to whole bytes ("1.5Gi" yes, "0.1" no).
Result<std::uint64_t> parse_quantity(std::string_view text);

// The shortest exact form: the largest binary suffix that divides evenly
// ("1Gi", "1536Mi"), else plain bytes.
std::string format_quantity(std::uint64_t bytes);

// a + b, or the largest value when the sum would not fit: for sizes read
// off the wire, where a sum must not wrap round to a small number.
inline std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  return b > ~std::uint64_t{0} - a ? ~std::uint64_t{0} : a + b;
}

}  // namespace numaserve
