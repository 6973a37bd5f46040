#include "numaserve/common/quantity.h"

#include <gtest/gtest.h>

namespace numaserve {
namespace {

TEST(Quantity, ParsesKubernetesMemorySpellings) {
  EXPECT_EQ(parse_quantity("1Gi").value(), 1ull << 30);
  EXPECT_EQ(parse_quantity("512Mi").value(), 512ull << 20);
  EXPECT_EQ(parse_quantity("100M").value(), 100'000'000u);
  EXPECT_EQ(parse_quantity("4k").value(), 4000u);
  EXPECT_EQ(parse_quantity("1048576").value(), 1048576u);
  EXPECT_EQ(parse_quantity("1.5Gi").value(), 3ull << 29);
  EXPECT_EQ(parse_quantity("0.5Ki").value(), 512u);
  EXPECT_EQ(parse_quantity("2Ti").value(), 2ull << 40);
  EXPECT_EQ(parse_quantity("0").value(), 0u);
}

TEST(Quantity, RejectsWhatKubernetesWouldNotMeanAsBytes) {
  for (const char* bad : {"", "Gi", "1GB", "1 Gi", "-1Gi", "1.Gi", ".5Gi", "0.1", "1e3", "abc",
                          "99999999999999999999", "20000Pi", "0.0000000000000000001Ki"}) {
    auto q = parse_quantity(bad);
    EXPECT_FALSE(q.has_value()) << bad;
    if (!q) {
      EXPECT_NE(q.error().message.find(std::string("'") + bad + "'"), std::string::npos) << q.error().message;
    }
  }
}

TEST(Quantity, FormatsWithTheLargestExactBinarySuffix) {
  EXPECT_EQ(format_quantity(1ull << 30), "1Gi");
  EXPECT_EQ(format_quantity(1536ull << 20), "1536Mi");
  EXPECT_EQ(format_quantity(100ull << 20), "100Mi");
  EXPECT_EQ(format_quantity(1000), "1000");
  EXPECT_EQ(format_quantity(0), "0");
  for (std::uint64_t bytes : {1ull, 1024ull, 3ull << 29, 123456789ull, 5ull << 40}) {
    EXPECT_EQ(parse_quantity(format_quantity(bytes)).value(), bytes);
  }
}

}  // namespace
}  // namespace numaserve
