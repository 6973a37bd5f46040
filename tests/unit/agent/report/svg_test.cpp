#include "report/svg.h"

#include <gtest/gtest.h>

#include "fixture_paths.h"
#include "golden.h"

namespace numaserve::agent::report {
namespace {

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
  return n;
}

struct Drawn {
  discover::NodeReport report;
  plan::NodePlan plan;
  std::string svg;
};

Drawn draw(const std::string& xml, unsigned replicas_per_numa_node) {
  auto report = discover::discover_node(discover::DiscoverConfig::of(
      TopologySource::xml((testing::fixtures_dir() / "topologies/xml" / xml).string())));
  EXPECT_TRUE(report.has_value());
  plan::PlanConfig config;
  config.replicas_per_numa_node = replicas_per_numa_node;
  auto p = plan::plan_node(report->topology, config);
  EXPECT_TRUE(p.has_value());
  return {*report, *p, render_svg(*report, *p)};
}

TEST(Svg, DrawsEveryCoreWithReservedCpusAndReplicaSlots) {
  const auto d = draw("24em64t-2n6c2t-pci.xml", 2);
  EXPECT_EQ(count(d.svg, "<g class=\"core\">"), d.report.topology.core_count());
  EXPECT_EQ(count(d.svg, "<g class=\"numa-node\">"), 2u);
  EXPECT_EQ(count(d.svg, ", reserved for the system</title>"), 2u);  // one core per node
  // 2 replicas x 4 CPUs (2 cores each) per node: 8 slot cores.
  EXPECT_EQ(count(d.svg, "replica slot 0</title>"), 4u);
  EXPECT_EQ(count(d.svg, "replica slot 1</title>"), 4u);
  EXPECT_NE(d.svg.find("core 0,12, reserved for the system"), std::string::npos);
  EXPECT_EQ(count(d.svg, "<g"), count(d.svg, "</g>"));
  EXPECT_TRUE(d.svg.ends_with("</svg>\n"));
  testing::expect_matches_golden(d.svg, testing::fixtures_dir() / "plan/24em64t-2n6c2t-pci.two-per-node.svg");
}

TEST(Svg, MemoryOnlyNodesAreDrawnWithTheirLocality) {
  const auto d = draw("64intel64-fakeKNL-SNC4-hybrid.xml", 1);
  EXPECT_EQ(count(d.svg, "stroke-dasharray"), 4u);
  EXPECT_NE(d.svg.find("NUMA node 4 (MCDRAM) · 2 GiB · memory only, near CPUs 4-7,20-23,36-39,52-55"),
            std::string::npos);
}

TEST(Svg, WithoutAPlanNothingIsReserved) {
  const auto d = draw("32em64t-2n8c2t-pci-normalio.xml", 1);
  const std::string bare = render_svg(d.report, std::nullopt);
  EXPECT_EQ(count(bare, "reserved for the system</title>"), 0u);
  EXPECT_EQ(count(bare, "<g class=\"core\">"), 16u);
}

TEST(Svg, TextIsEscaped) {
  auto d = draw("32em64t-2n8c2t-pci-normalio.xml", 1);
  d.report.topology.nodes[0].kind = "<HBM&>";
  const std::string svg = render_svg(d.report, d.plan);
  EXPECT_NE(svg.find("(&lt;HBM&amp;&gt;)"), std::string::npos);
  EXPECT_EQ(svg.find("<HBM&>"), std::string::npos);
}

}  // namespace
}  // namespace numaserve::agent::report
