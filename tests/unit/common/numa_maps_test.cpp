#include "numaserve/common/numa_maps.h"

#include <gtest/gtest.h>

namespace numaserve {
namespace {

// Lines as Linux 6.1 prints them (proc(5)).
constexpr const char* kSample =
    "55d0c5a00000 default file=/usr/bin/numaserve mapped=12 N0=12 kernelpagesize_kB=4\n"
    "7f3a40000000 bind:1 anon=16384 dirty=16384 N1=16384 kernelpagesize_kB=4\n"
    "7f3a80000000 interleave:0-1 anon=8 dirty=8 N0=4 N1=4 kernelpagesize_kB=4\n"
    "7f3b00000000 default file=/dev/hugepages/w huge dirty=2 N0=2 kernelpagesize_kB=2048\n"
    "7ffd1c000000 default stack anon=3 dirty=3 active=0 N0=3 kernelpagesize_kB=4\n";

TEST(NumaMaps, ParsesPerNodeCountsAndPageSize) {
  auto maps = parse_numa_maps(kSample);
  ASSERT_TRUE(maps.has_value()) << maps.error().message;
  ASSERT_EQ(maps->size(), 5u);
  EXPECT_EQ((*maps)[1].start, 0x7f3a40000000u);
  EXPECT_EQ((*maps)[1].pages_per_node.at(1), 16384u);
  EXPECT_FALSE((*maps)[1].pages_per_node.contains(0));
  EXPECT_EQ((*maps)[2].pages_per_node.at(0), 4u);
  EXPECT_EQ((*maps)[3].page_bytes, 2048u * 1024);
}

TEST(NumaMaps, SumsBytesPerNodeAcrossPageSizes) {
  const auto bytes = bytes_per_node(parse_numa_maps(kSample).value());
  EXPECT_EQ(bytes.at(1), (16384u + 4u) * 4096u);
  EXPECT_EQ(bytes.at(0), (12u + 4u + 3u) * 4096u + 2u * 2048u * 1024u);
}

TEST(NumaMaps, EmptyTextHasNoMappings) { EXPECT_TRUE(parse_numa_maps("").value().empty()); }

TEST(NumaMaps, BadLinesNameTheLineAndToken) {
  auto bad_address = parse_numa_maps("zz00 default N0=1\n");
  ASSERT_FALSE(bad_address.has_value());
  EXPECT_NE(bad_address.error().message.find("line 1"), std::string::npos);
  auto bad_counter = parse_numa_maps("7f00 default N0=1\n7f01 default N1=x\n");
  ASSERT_FALSE(bad_counter.has_value());
  EXPECT_NE(bad_counter.error().message.find("line 2"), std::string::npos);
  EXPECT_EQ(bad_counter.error().field, "N1=x");
}

// What the kernel cannot have written: refused rather than turned into a
// byte count that is zero or wraps (found by fuzz_numa_maps).
TEST(NumaMaps, ImpossibleSizesAndCountsAreRefused) {
  for (const char* line : {"7f00 default N0=1 kernelpagesize_kB=0\n", "7f00 default N0=1 kernelpagesize_kB=x\n",
                           "7f00 default N0=1 kernelpagesize_kB=33554432\n", "7f00 default N0=1 N0=2\n",
                           "7f00 default N0=36028797018963968 kernelpagesize_kB=4\n",
                           "7f00 default N0=9007199254740992 N1=9007199254740992 kernelpagesize_kB=4\n"}) {
    const auto maps = parse_numa_maps(line);
    ASSERT_FALSE(maps.has_value()) << line;
    EXPECT_NE(maps.error().message.find("line 1"), std::string::npos) << maps.error().message;
  }
  // Each line fits; together they would not.
  std::string many;
  for (int i = 0; i < 3; ++i) many += "7f00 default N0=17592186044416 kernelpagesize_kB=4\n";
  EXPECT_FALSE(parse_numa_maps(many).has_value());
  EXPECT_TRUE(parse_numa_maps("7f00 default N0=17592186044416 kernelpagesize_kB=4\n").has_value());
}

}  // namespace
}  // namespace numaserve
