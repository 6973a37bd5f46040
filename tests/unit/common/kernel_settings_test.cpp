#include "numaserve/common/kernel_settings.h"

#include <gtest/gtest.h>

#include "fixture_paths.h"
#include "numaserve/common/text_file.h"

namespace numaserve {
namespace {

std::filesystem::path tree(const std::string& name) { return testing::fixtures_dir() / "kernel" / name; }

TEST(KernelSettings, TunedNodeHasNothingToReport) {
  auto s = discover_kernel_settings(tree("tuned"));
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_EQ(s->numa_balancing, 0);
  EXPECT_EQ(s->transparent_hugepage, "madvise");
  EXPECT_EQ(s->transparent_hugepage_defrag, "madvise");
  EXPECT_TRUE(s->isolated_cpus.empty());
  EXPECT_TRUE(s->nohz_full_cpus.empty());  // "(null)"
  EXPECT_TRUE(check_kernel_settings(*s).empty());
}

TEST(KernelSettings, DistroDefaultsAreWarnedAbout) {
  auto s = discover_kernel_settings(tree("distro-defaults"));
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_EQ(s->numa_balancing, 1);
  EXPECT_EQ(s->transparent_hugepage, "always");
  EXPECT_EQ(s->isolated_cpus.to_list(), "2-3,18-19");
  const auto warnings = check_kernel_settings(*s);
  ASSERT_EQ(warnings.size(), 3u);
  EXPECT_NE(warnings[0].find("kernel.numa_balancing is 1"), std::string::npos);
  EXPECT_NE(warnings[2].find("CPUs 2-3,18-19 are isolated"), std::string::npos);
}

TEST(KernelSettings, MissingFilesMeanFeatureAbsent) {
  auto s = discover_kernel_settings(tree("empty"));
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_FALSE(s->numa_balancing.has_value());
  EXPECT_TRUE(s->transparent_hugepage.empty());
  EXPECT_TRUE(check_kernel_settings(*s).empty());
}

TEST(KernelSettings, MalformedFileIsNamed) {
  auto s = discover_kernel_settings(tree("malformed"));
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("numa_balancing: want a number, got 'on'"), std::string::npos)
      << s.error().message;
}

// The bracketed choice of a THP file ("always [madvise] never"), read
// here by hand: the live values must be what the kernel's files say.
std::string selected(const std::string& file) {
  const auto text = read_text_file(file);
  if (!text) return {};
  const auto open = text->find('['), close = text->find(']');
  return open == std::string::npos || close < open ? std::string() : text->substr(open + 1, close - open - 1);
}

TEST(KernelSettings, LiveSystemReadsWhatTheKernelFilesSay) {
  auto s = discover_kernel_settings();
  ASSERT_TRUE(s.has_value()) << s.error().message;
  if (const auto balancing = read_text_file("/proc/sys/kernel/numa_balancing")) {
    ASSERT_TRUE(s->numa_balancing.has_value());
    EXPECT_EQ(*s->numa_balancing, std::stoi(*balancing));
  } else {
    EXPECT_FALSE(s->numa_balancing.has_value());
  }
  EXPECT_EQ(s->transparent_hugepage, selected("/sys/kernel/mm/transparent_hugepage/enabled"));
  EXPECT_EQ(s->transparent_hugepage_defrag, selected("/sys/kernel/mm/transparent_hugepage/defrag"));
  if (const auto isolated = read_text_file("/sys/devices/system/cpu/isolated")) {
    const auto cpus = CpuSet::parse_list(*isolated);
    ASSERT_TRUE(cpus.has_value()) << *isolated;
    EXPECT_EQ(s->isolated_cpus, *cpus);
  }
}

}  // namespace
}  // namespace numaserve
