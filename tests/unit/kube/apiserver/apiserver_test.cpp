#include "apiserver/apiserver.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <fstream>
#include <mutex>
#include <thread>

#include "fixture_paths.h"
#include "updater/updater.h"

namespace numaserve::kube::apiserver {
namespace {

namespace fs = std::filesystem;

// A self-signed certificate for 127.0.0.1, made fresh for the test run.
struct Certificate {
  fs::path cert, key;
};

Certificate make_certificate(const fs::path& dir, const std::string& name) {
  Certificate c{dir / (name + ".crt"), dir / (name + ".key")};
  const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
                          "-addext subjectAltName=IP:127.0.0.1 -keyout " + c.key.string() + " -out " +
                          c.cert.string() + " >/dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "openssl could not make a certificate";
  return c;
}

// Answers PATCH requests the way the API server checks them, and records them.
class FakeApiServer {
 public:
  struct Request {
    std::string path, field_manager, force, content_type, authorization;
    nlohmann::json body;
  };

  FakeApiServer(const Certificate& cert, std::string token)
      : server_(cert.cert.c_str(), cert.key.c_str()), token_(std::move(token)) {
    server_.Patch(".*", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res); });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeApiServer() {
    server_.stop();
    thread_.join();
  }

  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_); }
  // Statuses to answer with, in order; 200 once they run out.
  void script(std::deque<int> statuses) {
    std::lock_guard lock(mutex_);
    script_ = std::move(statuses);
  }
  void delay(std::chrono::milliseconds d) { delay_ = d; }
  std::vector<Request> requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  static void status(httplib::Response& res, int code, const std::string& message) {
    res.status = code;
    res.set_content(nlohmann::json{{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Failure"},
                                   {"message", message}, {"code", code}}
                        .dump(),
                    "application/json");
  }

  void handle(const httplib::Request& req, httplib::Response& res) {
    std::this_thread::sleep_for(delay_.load());
    Request r{req.path, req.get_param_value("fieldManager"), req.get_param_value("force"),
              req.get_header_value("Content-Type"), req.get_header_value("Authorization"),
              nlohmann::json::parse(req.body, nullptr, false)};
    int code = 200;
    {
      std::lock_guard lock(mutex_);
      requests_.push_back(r);
      if (!script_.empty()) {
        code = script_.front();
        script_.pop_front();
      }
    }
    if (r.authorization != "Bearer " + token_) return status(res, 401, "Unauthorized");
    if (r.content_type != "application/apply-patch+yaml") return status(res, 415, "unsupported media type");
    if (r.field_manager.empty()) return status(res, 422, "fieldManager is required for apply requests");
    const std::string name = req.path.substr(req.path.rfind('/') + 1);
    if (r.body.is_discarded() || r.body["metadata"]["name"] != name || !r.body.contains("apiVersion") ||
        !r.body.contains("kind")) {
      return status(res, 400, "body does not name " + name);
    }
    if (code != 200) return status(res, code, "scripted failure " + std::to_string(code));
    res.set_content(r.body.dump(), "application/json");
  }

  httplib::SSLServer server_;
  std::string token_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::deque<int> script_;
  std::vector<Request> requests_;
  std::atomic<std::chrono::milliseconds> delay_{std::chrono::milliseconds(0)};
};

class ApiServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("numaserve-apiserver-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    cert_ = make_certificate(dir_, "apiserver");
    other_ = make_certificate(dir_, "other");
    std::ofstream(dir_ / "token") << "s3cret-token\n";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  ApiServerConfig config_for(const FakeApiServer& server) const {
    ApiServerConfig c;
    c.url = server.url();
    c.token_file = (dir_ / "token").string();
    c.ca_file = cert_.cert.string();
    c.timeout_seconds = 2;
    c.attempts = 3;
    c.first_backoff_seconds = 0.01;
    return c;
  }

  static nlohmann::json nrt() {
    return {{"apiVersion", "topology.node.k8s.io/v1alpha2"},
            {"kind", "NodeResourceTopology"},
            {"metadata", {{"name", "worker-1"}}},
            {"zones", nlohmann::json::array()}};
  }

  static inline fs::path dir_;
  static inline Certificate cert_, other_;
};

TEST_F(ApiServerTest, ServerSideAppliesTheNrtAndTheLabels) {
  FakeApiServer server(cert_, "s3cret-token");
  ApiServer api(config_for(server));
  ASSERT_TRUE(api.apply_node_resource_topology(nrt()).has_value());
  ASSERT_TRUE(api.apply_node_labels("worker-1", {{"numaserve.io/numa-nodes", "2"}}).has_value());
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].path, "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies/worker-1");
  EXPECT_EQ(requests[0].body, nrt());
  EXPECT_EQ(requests[0].field_manager, "numaserve-topology-agent");
  EXPECT_EQ(requests[0].force, "true");
  EXPECT_EQ(requests[1].path, "/api/v1/nodes/worker-1");
  EXPECT_EQ(requests[1].body["metadata"]["labels"]["numaserve.io/numa-nodes"], "2");
  EXPECT_EQ(requests[1].body.size(), 3u);  // apiVersion, kind, metadata: nothing else is claimed
  EXPECT_EQ(api.retries(), 0u);
}

TEST_F(ApiServerTest, TransientFailuresAreRetriedWithBackoff) {
  FakeApiServer server(cert_, "s3cret-token");
  server.script({503, 429});
  ApiServer api(config_for(server));
  ASSERT_TRUE(api.apply_node_resource_topology(nrt()).has_value());
  EXPECT_EQ(server.requests().size(), 3u);
  EXPECT_EQ(api.retries(), 2u);
}

TEST_F(ApiServerTest, PersistentFailureGivesUpWithTheServersReason) {
  FakeApiServer server(cert_, "s3cret-token");
  server.script({500, 500, 500, 500});
  ApiServer api(config_for(server));
  auto result = api.apply_node_resource_topology(nrt());
  ASSERT_FALSE(result.has_value());
  EXPECT_NE(result.error().message.find("HTTP 500: scripted failure 500 (gave up after 3 attempts)"),
            std::string::npos)
      << result.error().message;
  EXPECT_EQ(server.requests().size(), 3u);
}

TEST_F(ApiServerTest, RefusalsAreNotRetried) {
  FakeApiServer server(cert_, "another-token");
  ApiServer api(config_for(server));
  auto result = api.apply_node_labels("worker-1", {});
  ASSERT_FALSE(result.has_value());
  EXPECT_NE(result.error().message.find("HTTP 401: Unauthorized"), std::string::npos) << result.error().message;
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST_F(ApiServerTest, AServerWithAnotherCertificateIsNotTrusted) {
  FakeApiServer server(other_, "s3cret-token");
  ApiServer api(config_for(server));  // trusts cert_, not other_
  auto result = api.apply_node_resource_topology(nrt());
  ASSERT_FALSE(result.has_value());
  EXPECT_TRUE(server.requests().empty());
  EXPECT_NE(result.error().message.find("gave up after 3 attempts"), std::string::npos) << result.error().message;
}

TEST_F(ApiServerTest, TimeoutsAreRetriedThenReported) {
  FakeApiServer server(cert_, "s3cret-token");
  server.delay(std::chrono::milliseconds(1500));
  auto config = config_for(server);
  config.timeout_seconds = 0.3;
  config.attempts = 2;
  ApiServer api(config);
  const auto start = std::chrono::steady_clock::now();
  auto result = api.apply_node_resource_topology(nrt());
  EXPECT_FALSE(result.has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  server.delay(std::chrono::milliseconds(0));
}

TEST_F(ApiServerTest, InClusterConfigComesFromTheServiceAccount) {
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_FALSE(in_cluster_config(dir_).has_value());
  ::setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "6443", 1);
  const auto config = in_cluster_config(dir_);
  ::setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  const auto v6 = in_cluster_config(dir_);
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  ::unsetenv("KUBERNETES_SERVICE_PORT");
  ASSERT_TRUE(config.has_value());
  EXPECT_EQ(config->url, "https://10.96.0.1:6443");
  EXPECT_EQ(config->token_file, (dir_ / "token").string());
  EXPECT_EQ(config->ca_file, (dir_ / "ca.crt").string());
  EXPECT_EQ(v6->url, "https://[fd00::1]:6443");
}

// The agent's cycle through this client, here beside the fake API server it needs.
TEST_F(ApiServerTest, UpdaterPublishesThroughTheApiServerAndSurvivesItsFailures) {
  FakeApiServer server(cert_, "s3cret-token");
  agent::updater::UpdaterConfig config;
  config.discover = agent::discover::DiscoverConfig::of(TopologySource::synthetic("pack:2 numa:1(memory=32GiB) core:4 pu:1"));
  config.node_name = "worker-9";
  config.hints_dir = dir_ / "hints";
  config.apiserver = config_for(server);
  agent::updater::Updater agent(config);
  server.script({403, 403});
  const auto failed = agent.run_cycle();
  EXPECT_FALSE(failed.ok());
  EXPECT_TRUE(failed.plan.has_value());
  EXPECT_EQ(agent.counters().failures.at("apiserver"), 2u);
  EXPECT_TRUE(fs::exists(dir_ / "hints" / "plan.json"));

  // Refused objects are applied again next cycle.
  ASSERT_TRUE(agent.run_cycle().ok());
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 4u);
  EXPECT_EQ(requests[2].body["zones"].size(), 2u);
  EXPECT_EQ(requests[3].body["metadata"]["labels"]["numaserve.io/numa-nodes"], "2");

  // Applied and unchanged: the API server is not asked again.
  ASSERT_TRUE(agent.run_cycle().ok());
  EXPECT_EQ(server.requests().size(), 4u);
  EXPECT_EQ(agent.counters().apiserver_unchanged, 2u);
}

}  // namespace
}  // namespace numaserve::kube::apiserver
