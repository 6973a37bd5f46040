// A table file shipped in a model directory (kernels/rowwise_file.h), whole:
// never a crash or a read past the input; a header accepted says exactly the
// input's size; a row refused has a scale or bias no fp16 finite value
// holds, and rows accepted widen to finite values.
#include <cmath>
#include <vector>

#include "fuzz.h"
#include "kernels/kernels.h"
#include "kernels/rowwise_file.h"

using namespace numaserve;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto file = kernels::parse_rowwise_header(data, size, size, "t.rowwise");
  if (!file) {
    FUZZ_CHECK(file.error().message.rfind("t.rowwise: ", 0) == 0, "a refusal not naming the file: %s", file.error().message.c_str());
    return 0;
  }
  const auto body = static_cast<std::uint64_t>(file->rows) * static_cast<std::uint64_t>(file->row_bytes());
  FUZZ_CHECK(kernels::kRowwiseFileHeader + body == size, "a header of %lld rows of dim %lld accepted for %zu bytes",
             static_cast<long long>(file->rows), static_cast<long long>(file->dim), size);
  const std::uint8_t* rows = data + kernels::kRowwiseFileHeader;
  const std::int64_t bad = kernels::first_bad_rowwise_row(rows, *file);
  const std::int64_t good_rows = bad < 0 ? file->rows : bad;
  std::vector<float> values(static_cast<std::size_t>(file->dim));
  for (std::int64_t r = 0; r < good_rows; ++r) {
    kernels::dequantize_rows(rows + r * file->row_bytes(), 1, file->dim, file->bits, values.data());
    for (const float v : values) FUZZ_CHECK(std::isfinite(v), "row %lld, accepted, widens to %g", static_cast<long long>(r), v);
  }
  if (bad >= 0) {
    const std::uint8_t* tail = rows + bad * file->row_bytes() + file->row_bytes() - kernels::kRowwiseTail;
    const unsigned scale = tail[0] | tail[1] << 8, bias = tail[2] | tail[3] << 8;
    FUZZ_CHECK((scale & 0x7C00u) == 0x7C00u || (bias & 0x7C00u) == 0x7C00u || (scale & 0x8000u) != 0,
               "row %lld refused with scale %04x and bias %04x", static_cast<long long>(bad), scale, bias);
  }
  return 0;
}
