// The agent's status server: its routes over a real socket on loopback.
#include "http/http.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include "agent_node.h"
#include "serve/metrics.h"
#include "updater/updater.h"

namespace numaserve::agent {
namespace {

TEST_F(Agent, HttpEndpointServesEachRoute) {
  kube::http::StatusServer server;
  ASSERT_TRUE(server.start("127.0.0.1", 0).has_value());
  httplib::Client client("127.0.0.1", server.port());

  auto before = client.Get("/healthz");
  ASSERT_TRUE(before);
  EXPECT_EQ(before->status, 200);  // nothing published yet is not a failure
  auto no_topology = client.Get("/topology");
  ASSERT_TRUE(no_topology);
  EXPECT_EQ(no_topology->status, 503);

  updater::Updater agent(config_in(hints_));
  const auto result = agent.run_cycle();
  server.publish(serve::snapshot_of(result, agent.counters()));

  auto topology = client.Get("/topology");
  ASSERT_TRUE(topology);
  EXPECT_EQ(topology->status, 200);
  EXPECT_EQ(nlohmann::json::parse(topology->body)["topology"]["nodes"].size(), 2u);
  auto plan = client.Get("/plan");
  ASSERT_TRUE(plan);
  EXPECT_EQ(nlohmann::json::parse(plan->body)["pod"]["cpus"], 14);
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->get_header_value("Content-Type"), "text/plain; version=0.0.4");
  EXPECT_NE(metrics->body.find("numaserve_node_cpus{numa_node=\"1\"} 16"), std::string::npos) << metrics->body;
  EXPECT_NE(metrics->body.find("# TYPE numaserve_agent_cycles_total counter"), std::string::npos);
  auto missing = client.Get("/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(nlohmann::json::parse(missing->body)["error"], "no route GET /nope");

  server.publish({"", "", "", "discover: hwloc could not load"});
  auto unhealthy = client.Get("/healthz");
  ASSERT_TRUE(unhealthy);
  EXPECT_EQ(unhealthy->status, 503);
  server.stop();
}

TEST(StatusServer, PortInUseIsAClearError) {
  kube::http::StatusServer first, second;
  ASSERT_TRUE(first.start("127.0.0.1", 0).has_value());
  auto taken = second.start("127.0.0.1", first.port());
  ASSERT_FALSE(taken.has_value());
  EXPECT_NE(taken.error().message.find("cannot listen on 127.0.0.1:" + std::to_string(first.port())),
            std::string::npos);
}

}  // namespace
}  // namespace numaserve::agent
