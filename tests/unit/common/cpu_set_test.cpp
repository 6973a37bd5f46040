#include "numaserve/common/cpu_set.h"

#include <gtest/gtest.h>

namespace numaserve {
namespace {

CpuSet list(std::string_view text) {
  auto set = CpuSet::parse_list(text);
  EXPECT_TRUE(set.has_value()) << text << ": " << set.error().message;
  return set.value_or(CpuSet{});
}

TEST(CpuSet, ParsesKernelListForm) {
  EXPECT_EQ(list("0-3,8,10-11").ids(), (std::vector<unsigned>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(list("5").ids(), (std::vector<unsigned>{5}));
  EXPECT_EQ(list("7-7").ids(), (std::vector<unsigned>{7}));
}

TEST(CpuSet, EmptyAndBlankTextIsTheEmptySet) {
  EXPECT_TRUE(list("").empty());
  EXPECT_TRUE(list("\n").empty());
  EXPECT_TRUE(list("  \t\n").empty());
}

TEST(CpuSet, ToleratesWhitespaceAndTrailingNewline) {
  EXPECT_EQ(list(" 0-1 , 4 \n"), (CpuSet{0, 1, 4}));
  EXPECT_EQ(list("2-5\n"), CpuSet::range(2, 5));
}

TEST(CpuSet, OverlappingAndUnorderedRangesMerge) {
  EXPECT_EQ(list("8,0-3,2-5").to_list(), "0-5,8");
}

TEST(CpuSet, RangesCrossWordBoundaries) {
  const auto set = list("60-130");
  EXPECT_EQ(set.count(), 71u);
  EXPECT_TRUE(set.contains(63));
  EXPECT_TRUE(set.contains(64));
  EXPECT_TRUE(set.contains(128));
  EXPECT_FALSE(set.contains(131));
  EXPECT_EQ(set.to_list(), "60-130");
}

TEST(CpuSet, BadTokensAreNamedInTheError) {
  struct Case {
    const char* text;
    const char* token;
  };
  for (const auto& c : {Case{"0-3,x", "x"}, Case{"0-3,,4", ""}, Case{"1-", "1-"}, Case{"-2", "-2"},
                        Case{"5-2", "5-2"}, Case{"0-3 4", "0-3 4"}, Case{"0x3", "0x3"},
                        Case{"1,2,", ""}, Case{"99999999999", "99999999999"}}) {
    auto set = CpuSet::parse_list(c.text);
    ASSERT_FALSE(set.has_value()) << c.text;
    EXPECT_EQ(set.error().code, Error::Code::kInvalidArgument) << c.text;
    EXPECT_EQ(set.error().field, c.token) << c.text;
    EXPECT_NE(set.error().message.find("'" + std::string(c.token) + "'"), std::string::npos)
        << set.error().message;
  }
}

TEST(CpuSet, RefusesIdsBeyondTheLimitInsteadOfAllocating) {
  auto set = CpuSet::parse_list("0-4294967295");
  ASSERT_FALSE(set.has_value());
  EXPECT_NE(set.error().message.find("exceeds the limit"), std::string::npos) << set.error().message;
}

TEST(CpuSet, ParsesKernelMaskForm) {
  auto set = CpuSet::parse_mask("ff,00000001\n");
  ASSERT_TRUE(set.has_value()) << set.error().message;
  EXPECT_EQ(set->to_list(), "0,32-39");
  EXPECT_EQ(CpuSet::parse_mask("0x00e0000f")->to_list(), "0-3,21-23");
  EXPECT_EQ(CpuSet::parse_mask("00000000,00000000")->count(), 0u);
  EXPECT_EQ(CpuSet::parse_mask("3")->to_list(), "0-1");
}

TEST(CpuSet, ParsesHwlocMaskFormWithPrefixPerWord) {
  // hwloc_bitmap_snprintf writes "0x" before every 32-bit word.
  auto set = CpuSet::parse_mask("0x00000001,0xffffffc0");
  ASSERT_TRUE(set.has_value()) << set.error().message;
  EXPECT_EQ(set->to_list(), "6-32");
}

TEST(CpuSet, BadMaskWordsAreNamedInTheError) {
  for (const char* text : {"", "xyz", "ff,,00000001", "123456789", "ff,g0000000"}) {
    auto set = CpuSet::parse_mask(text);
    EXPECT_FALSE(set.has_value()) << text;
    if (!set) {
      EXPECT_EQ(set.error().code, Error::Code::kInvalidArgument);
    }
  }
  EXPECT_EQ(CpuSet::parse_mask("ff,g0000000").error().field, "g0000000");
}

TEST(CpuSet, MaskRoundTripsThroughKernelFormat) {
  const auto set = list("0,5,31-33,95");
  EXPECT_EQ(set.to_mask(), "80000000,00000003,80000021");
  EXPECT_EQ(CpuSet::parse_mask(set.to_mask()).value(), set);
  EXPECT_EQ(CpuSet{}.to_mask(), "00000000");
}

TEST(CpuSet, ListRoundTrips) {
  for (const char* text : {"0", "0-3,8,10-11", "1,3,5,7", "0-127", "63-64"}) {
    EXPECT_EQ(list(text).to_list(), text);
  }
}

TEST(CpuSet, SetAlgebra) {
  const auto a = list("0-7");
  const auto b = list("4-11");
  EXPECT_EQ((a | b).to_list(), "0-11");
  EXPECT_EQ((a & b).to_list(), "4-7");
  EXPECT_EQ((a - b).to_list(), "0-3");
  EXPECT_EQ((b - a).to_list(), "8-11");
  EXPECT_TRUE(list("4-5").is_subset_of(a));
  EXPECT_FALSE(b.is_subset_of(a));
  EXPECT_TRUE(a.intersects(b));
  EXPECT_FALSE(list("0-3").intersects(list("64-70")));
  EXPECT_TRUE((list("0-3") & list("64-70")).empty());
  EXPECT_TRUE(CpuSet{}.is_subset_of(a));
}

TEST(CpuSet, EqualityIgnoresCapacity) {
  auto a = list("0-100");
  a -= list("64-100");
  EXPECT_EQ(a, list("0-63"));
  CpuSet b{200};
  b.erase(200);
  EXPECT_EQ(b, CpuSet{});
  EXPECT_TRUE(b.empty());
}

TEST(CpuSet, FirstCountAndIds) {
  const auto set = list("70,3,9");
  EXPECT_EQ(set.first(), 3u);
  EXPECT_EQ(set.count(), 3u);
  EXPECT_EQ(set.ids(), (std::vector<unsigned>{3, 9, 70}));
}

}  // namespace
}  // namespace numaserve
