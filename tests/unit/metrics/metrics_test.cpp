#include "metrics/metrics.h"

#include <gtest/gtest.h>

namespace numaserve::metrics {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

TEST(Histogram, BucketsAreCumulativeWithSumAndCount) {
  Histogram h({0.001, 0.01, 0.1});
  for (double v : {0.0005, 0.001, 0.005, 0.05, 5.0}) h.observe(v);
  std::string out;
  h.render(out, "x_seconds", "stage=\"forward\"");
  EXPECT_TRUE(has_line(out, "x_seconds_bucket{stage=\"forward\",le=\"0.001\"} 2")) << out;  // le is inclusive
  EXPECT_TRUE(has_line(out, "x_seconds_bucket{stage=\"forward\",le=\"0.01\"} 3")) << out;
  EXPECT_TRUE(has_line(out, "x_seconds_bucket{stage=\"forward\",le=\"0.1\"} 4")) << out;
  EXPECT_TRUE(has_line(out, "x_seconds_bucket{stage=\"forward\",le=\"+Inf\"} 5")) << out;
  EXPECT_TRUE(has_line(out, "x_seconds_sum{stage=\"forward\"} 5.0565")) << out;
  EXPECT_TRUE(has_line(out, "x_seconds_count{stage=\"forward\"} 5")) << out;
}

TEST(Metrics, RequestsStagesBatchesAndGauges) {
  Metrics m({"ranker_a"});
  m.count_request("/predict", 200);
  m.count_request("/predict", 200);
  m.count_request("/predict", 400);
  m.observe(Stage::kForward, "ranker_a", 0.002);
  m.observe(Stage::kForward, "not-served", 1);  // dropped, never a new series per client-chosen name
  m.observe_batch(300, 2);
  Gauges g;
  g.queue_depth = 3;
  g.ready = true;
  g.placement = {{"cpus", "0-3"}, {"mems", "1"}};
  g.model_local_ratio = {{"ranker_a", 0.995}};
  const std::string out = m.render(g);
  EXPECT_TRUE(has_line(out, "numaserve_requests_total{route=\"/predict\",code=\"200\"} 2")) << out;
  EXPECT_TRUE(has_line(out, "numaserve_requests_total{route=\"/predict\",code=\"400\"} 1")) << out;
  EXPECT_TRUE(has_line(out, "numaserve_stage_seconds_count{model=\"ranker_a\",stage=\"forward\"} 1")) << out;
  EXPECT_TRUE(has_line(out, "numaserve_stage_seconds_count{model=\"ranker_a\",stage=\"query\"} 0")) << out;
  EXPECT_EQ(out.find("not-served"), std::string::npos);
  EXPECT_TRUE(has_line(out, "numaserve_batch_items_bucket{le=\"256\"} 0")) << out;
  EXPECT_TRUE(has_line(out, "numaserve_batch_items_bucket{le=\"512\"} 1")) << out;
  EXPECT_TRUE(has_line(out, "numaserve_batch_requests_sum 2")) << out;
  EXPECT_TRUE(has_line(out, "numaserve_queue_depth 3")) << out;
  EXPECT_TRUE(has_line(out, "numaserve_ready 1")) << out;
  EXPECT_TRUE(has_line(out, "numaserve_placement_info{cpus=\"0-3\",mems=\"1\"} 1")) << out;
  EXPECT_TRUE(has_line(out, "numaserve_model_weights_local_ratio{model=\"ranker_a\"} 0.995")) << out;
  // Every family is declared once, before its samples.
  EXPECT_NE(out.find("# TYPE numaserve_stage_seconds histogram\n"), std::string::npos);
}

TEST(Metrics, EachPriorityLevelHasItsLatencyHistogram) {
  Metrics m({"ranker_a"}, 2);
  m.observe_level(1, 0.0003);
  m.observe_level(1, 0.0004);
  m.observe_level(2, 0.02);
  m.observe_level(3, 1);  // not a level: dropped
  const std::string out = m.render(Gauges{});
  EXPECT_TRUE(has_line(out, "numaserve_priority_request_seconds_bucket{priority=\"1\",le=\"0.00025\"} 0")) << out;
  EXPECT_TRUE(has_line(out, "numaserve_priority_request_seconds_bucket{priority=\"1\",le=\"0.0005\"} 2")) << out;
  EXPECT_TRUE(has_line(out, "numaserve_priority_request_seconds_bucket{priority=\"2\",le=\"0.01\"} 0")) << out;
  EXPECT_TRUE(has_line(out, "numaserve_priority_request_seconds_count{priority=\"2\"} 1")) << out;
  EXPECT_EQ(out.find("priority=\"3\""), std::string::npos);
}

TEST(Metrics, LabelValuesAreEscaped) {
  Metrics m({});
  m.count_request("/a\"b\\c\nd", 404);
  EXPECT_NE(m.render({}).find(R"(route="/a\"b\\c\nd")"), std::string::npos);
}

}  // namespace
}  // namespace numaserve::metrics
