#pragma once
// A table shipped already rowwise-quantized (model.yaml `quantized_tables`):
// tables/<name>.rowwise in the model directory, so that a table larger than
// a node's memory in fp32 is never read in fp32. Here, beside the rows'
// layout (kernels.h), so the unit binary and the fuzzer test it torch-free.
//
// The file, little-endian: a 32-byte header — the magic "NUMAROWS", the
// format's version (u32, 1), the bits of a code (u32: 8 or 4), the rows (u64)
// and the dim (u64) — then `rows` rows of rowwise_row_bytes(dim, bits): the
// codes, then the fp16 scale and bias. Python's numaserve.export writes it.

#include <cstddef>
#include <cstdint>
#include <string>

#include "numaserve/common/result.h"

namespace numaserve::kernels {

inline constexpr std::size_t kRowwiseFileHeader = 32;

struct RowwiseFile {
  int bits = 8;
  std::int64_t rows = 0, dim = 0;
  std::int64_t row_bytes() const;
  bool operator==(const RowwiseFile&) const = default;
};

// The header of a file of `file_bytes` bytes (`header`: its first `size`
// bytes); errors name `path` and what is wrong, the size the header implies
// included.
Result<RowwiseFile> parse_rowwise_header(const std::uint8_t* header, std::size_t size, std::uint64_t file_bytes,
                                         const std::string& path);
// The first row whose scale or bias is not a finite fp16, or whose scale is
// negative; -1 when every row's are good.
std::int64_t first_bad_rowwise_row(const std::uint8_t* rows, const RowwiseFile& file);
// `path`'s header, read and checked.
Result<RowwiseFile> open_rowwise_file(const std::string& path);
// Its rows into `out` (file.rows * file.row_bytes() bytes), each row's scale
// and bias checked.
Status read_rowwise_rows(const std::string& path, const RowwiseFile& file, std::uint8_t* out);
// `rows` as a file `path` (written whole, then renamed into place).
Status write_rowwise_file(const std::string& path, const RowwiseFile& file, const std::uint8_t* rows);

}  // namespace numaserve::kernels
