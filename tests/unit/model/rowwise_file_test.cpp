// Tables shipped rowwise (kernels/rowwise_file.h): what the service reads
// back is what was quantized, and every malformed header or row is refused
// naming the file (its Python writer is checked against the service in
// tests/python/test_quantized_tables.py).
#include "kernels/rowwise_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/kernels.h"
#include "test_dir.h"

namespace numaserve::kernels {
namespace {

std::vector<std::uint8_t> quantized(const RowwiseFile& file, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> value(0.f, 0.3f);
  std::vector<float> table(static_cast<std::size_t>(file.rows * file.dim));
  for (auto& x : table) x = value(rng);
  std::vector<std::uint8_t> rows(static_cast<std::size_t>(file.rows * file.row_bytes()));
  EXPECT_TRUE(quantize_rows(table.data(), file.rows, file.dim, file.bits, rows.data()));
  return rows;
}

// A header as the format writes it, with the given fields.
std::vector<std::uint8_t> header(const char* magic, std::uint32_t version, std::uint32_t bits, std::uint64_t rows, std::uint64_t dim) {
  std::vector<std::uint8_t> h(kRowwiseFileHeader);
  std::memcpy(h.data(), magic, 8);
  for (int i = 0; i < 4; ++i) h[8 + i] = static_cast<std::uint8_t>(version >> (8 * i));
  for (int i = 0; i < 4; ++i) h[12 + i] = static_cast<std::uint8_t>(bits >> (8 * i));
  for (int i = 0; i < 8; ++i) h[16 + i] = static_cast<std::uint8_t>(rows >> (8 * i));
  for (int i = 0; i < 8; ++i) h[24 + i] = static_cast<std::uint8_t>(dim >> (8 * i));
  return h;
}

TEST(RowwiseFile, ReadsBackWhatWasWritten) {
  testing_support::TestDir dir("numaserve-rowwise");
  for (const RowwiseFile file : {RowwiseFile{8, 1000, 32}, RowwiseFile{4, 333, 64}, RowwiseFile{8, 1, 1}}) {
    const auto rows = quantized(file, 7);
    const std::string path = (dir.path() / ("t" + std::to_string(file.bits) + ".rowwise")).string();
    ASSERT_TRUE(write_rowwise_file(path, file, rows.data()));
    auto opened = open_rowwise_file(path);
    ASSERT_TRUE(opened) << opened.error().message;
    EXPECT_EQ(*opened, file);
    std::vector<std::uint8_t> back(rows.size());
    ASSERT_TRUE(read_rowwise_rows(path, *opened, back.data()));
    EXPECT_EQ(back, rows);
  }
}

TEST(RowwiseFile, RefusesAMalformedHeaderNamingTheFile) {
  const std::uint64_t row8 = 32 + kRowwiseTail;  // dim 32, 8-bit
  struct Case {
    std::vector<std::uint8_t> header;
    std::uint64_t file_bytes;
    std::string says;
  };
  const std::vector<Case> cases = {
      {header("NUMAROWS", 1, 8, 10, 32), 20, "shorter than the 32-byte header"},
      {header("NUMAROWZ", 1, 8, 10, 32), 32 + 10 * row8, "it does not start with NUMAROWS"},
      {header("NUMAROWS", 2, 8, 10, 32), 32 + 10 * row8, "format version 2"},
      {header("NUMAROWS", 1, 5, 10, 32), 32 + 10 * row8, "5-bit codes, want 8 or 4"},
      {header("NUMAROWS", 1, 8, 0, 32), 32, "0 rows of dim 32"},
      {header("NUMAROWS", 1, 8, 10, 0), 32 + 40, "10 rows of dim 0"},
      {header("NUMAROWS", 1, 8, 10, std::uint64_t{1} << 40), 32 + 10 * row8, "want rows >= 1 and 1 <= dim"},
      {header("NUMAROWS", 1, 4, 10, 31), 32 + 10 * 20, "int4 rows of odd dim 31"},
      {header("NUMAROWS", 1, 8, 10, 32), 32 + 10 * row8 - 1, "want the header and 10 rows of 36 bytes"},
      {header("NUMAROWS", 1, 8, 10, 32), 32 + 10 * row8 + 1, "want the header and 10 rows of 36 bytes"},
      // rows * row bytes past 2^64 must not wrap around to the file's size.
      {header("NUMAROWS", 1, 8, (~std::uint64_t{0} / row8) + 2, 32), 32 + row8, "want the header and"},
  };
  for (const auto& c : cases) {
    auto got = parse_rowwise_header(c.header.data(), c.file_bytes < c.header.size() ? c.file_bytes : c.header.size(), c.file_bytes,
                                    "tables/t.rowwise");
    ASSERT_FALSE(got) << c.says;
    EXPECT_EQ(got.error().message.rfind("tables/t.rowwise: ", 0), 0u) << got.error().message;
    EXPECT_NE(got.error().message.find(c.says), std::string::npos) << got.error().message;
    EXPECT_EQ(got.error().field, "tables/t.rowwise");
  }
  auto good = parse_rowwise_header(header("NUMAROWS", 1, 4, 10, 32).data(), kRowwiseFileHeader, 32 + 10 * 20, "t");
  ASSERT_TRUE(good) << good.error().message;
  EXPECT_EQ(*good, (RowwiseFile{4, 10, 32}));
}

TEST(RowwiseFile, FindsTheFirstRowWhoseScaleOrBiasIsWrong) {
  const RowwiseFile file{8, 6, 4};
  auto rows = quantized(file, 3);
  EXPECT_EQ(first_bad_rowwise_row(rows.data(), file), -1);
  auto tail = [&](std::int64_t row) { return rows.data() + row * file.row_bytes() + file.dim; };
  for (const auto& [offset, fp16, row] : std::vector<std::tuple<int, std::uint16_t, std::int64_t>>{
           {0, 0x7E00, 4},    // a NaN scale
           {2, 0xFC00, 2},    // a bias of -infinity
           {0, 0x8001, 1}}) {  // a negative scale
    tail(row)[offset] = static_cast<std::uint8_t>(fp16);
    tail(row)[offset + 1] = static_cast<std::uint8_t>(fp16 >> 8);
    EXPECT_EQ(first_bad_rowwise_row(rows.data(), file), row);
  }
}

TEST(RowwiseFile, ABadRowOrAMissingFileIsRefusedNamingIt) {
  testing_support::TestDir dir("numaserve-rowwise");
  const RowwiseFile file{8, 5, 8};
  auto rows = quantized(file, 11);
  rows[static_cast<std::size_t>(3 * file.row_bytes() + file.dim + 1)] = 0x7C;  // row 3's scale: infinity
  const std::string path = (dir.path() / "t.rowwise").string();
  ASSERT_TRUE(write_rowwise_file(path, file, rows.data()));
  std::vector<std::uint8_t> back(rows.size());
  auto refused = read_rowwise_rows(path, file, back.data());
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message, path + ": row 3's scale or bias is not a finite fp16, or its scale is negative");
  auto missing = open_rowwise_file((dir.path() / "none.rowwise").string());
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, Error::Code::kNotFound);
  EXPECT_NE(missing.error().message.find("none.rowwise: no such file"), std::string::npos);
  auto directory = open_rowwise_file(dir.path().string());
  ASSERT_FALSE(directory);
  EXPECT_NE(directory.error().message.find("not a regular file"), std::string::npos);
}

}  // namespace
}  // namespace numaserve::kernels
