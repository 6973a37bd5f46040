// Runs inside a multi-NUMA VM (tests/vm/numa-vm.sh), as vm_placement_test.cpp:
// the service's own start-up (startup::serve) with a fake, torch-free model
// in a cgroup of one node keeps its workers and its weights' pages there,
// and so does a version reloaded later.

#include <gtest/gtest.h>

#include "vm_support.h"

namespace numaserve::vm_testing {
namespace {

// A port nothing listens on now: the kernel's pick, released at once (the
// VM runs nothing else that could take it in between).
int free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// Polls GET /readyz until 200, for at most `bound`; false as soon as the
// child has exited.
bool wait_until_ready(httplib::Client& client, RunningChild& child, std::chrono::milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < deadline && !child.exit_status()) {
    if (const auto reply = client.Get("/readyz"); reply && reply->status == 200) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// Stands in for LibTorch's model: its "weights" are 8 MiB it maps and
// touches while loading, on the thread start-up has bound, as LibTorch's
// first touch does, so its pages land where start-up's memory policy puts
// them. The feature contract is the features fixture's.
class TouchedWeightsModel final : public api::Model {
 public:
  static constexpr std::size_t kWeightBytes = 8u << 20;

  static Result<std::unique_ptr<api::Model>> load(const std::filesystem::path&, const std::string& version, double) {
    const std::filesystem::path file = std::filesystem::path(NUMASERVE_FIXTURES_DIR) / "features/model.yaml";
    auto text = read_text_file(file);
    if (!text) return tl::unexpected(text.error());
    auto spec = features::parse_model_spec(*text, file.string());
    if (!spec) return tl::unexpected(spec.error());
    if (!version.empty()) spec->version = version;
    void* weights = mmap(nullptr, kWeightBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (weights == MAP_FAILED) return make_error(Error::Code::kInternal, std::string("mmap: ") + std::strerror(errno));
    std::memset(weights, 0x5a, kWeightBytes);  // first touch decides placement
    return std::unique_ptr<api::Model>(new TouchedWeightsModel(std::move(*spec), weights));
  }
  ~TouchedWeightsModel() override { munmap(weights_, kWeightBytes); }

  const features::ModelSpec& spec() const override { return spec_; }
  Result<std::vector<float>> forward(const features::Batch& batch) const override {
    return std::vector<float>(batch.rows, 0.f);
  }
  Status warm_up(std::size_t, unsigned) const override { return {}; }
  std::vector<numa::MemoryRange> weights() const override { return {{weights_, kWeightBytes}}; }
  std::size_t weight_bytes() const override { return kWeightBytes; }
  api::GraphReport graph_report() const override { return {}; }
  api::PrecisionReport precision() const override { return {}; }

 private:
  TouchedWeightsModel(features::ModelSpec spec, void* weights) : spec_(std::move(spec)), weights_(weights) {}
  features::ModelSpec spec_;
  void* weights_;
};

startup::Runtime fake_runtime() {
  return {TouchedWeightsModel::load, [](unsigned) {}, [] { return std::string("fake runtime (tests/vm)"); }};
}

// What both start-up tests serve with: loopback, one warm-up round, quiet logs.
options::ServeOptions loopback_options(int port) {
  options::ServeOptions options;
  options.http.host = "127.0.0.1";
  options.http.port = port;
  options.service.warmup_rounds = 1;
  options.log.level = LogLevel::kWarning;
  return options;
}

// SIGTERM, then the drain must end with exit 0 within 30 s.
void expect_clean_stop(RunningChild& child, const std::string& log_path) {
  ASSERT_TRUE(child.signal(SIGTERM));
  const auto status = child.wait(std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value()) << "still running 30 s after SIGTERM; log:\n" << read_log(log_path);
  EXPECT_EQ(describe(*status), "exit 0") << "log:\n" << read_log(log_path);
}

TEST_F(InVm, StartUpKeepsWorkersAndPagesOnTheNode) {
  const unsigned node = nodes_ - 1;
  const CpuSet node_cpus = cpus_of(node);
  const std::string dir = make_cgroup("numaserve-service", node_cpus, node);
  const int port = free_loopback_port();
  ASSERT_GT(port, 0) << "no free port on 127.0.0.1";
  options::ServeOptions options = loopback_options(port);
  options.model_dirs = {"touched-weights"};  // the fake runtime loads no file from it
  const std::string log_path = "/tmp/numaserve-startup.log";
  RunningChild child(dir, log_path, [&options] { return startup::serve(options, "vm-test", fake_runtime()); });
  ASSERT_TRUE(child.started()) << "fork failed";

  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(1);
  client.set_read_timeout(10);
  const auto ready = wait_until_ready(client, child, std::chrono::seconds(60));
  ASSERT_TRUE(ready) << (child.exit_status() ? "exited before ready: " + describe(*child.exit_status())
                                              : std::string("not ready within 60 s"))
                     << "; log:\n" << read_log(log_path);

  const auto reply = client.Get("/placement");
  ASSERT_TRUE(reply) << "GET /placement: " << httplib::to_string(reply.error());
  ASSERT_EQ(reply->status, 200) << reply->body;
  const auto placement = nlohmann::json::parse(reply->body, nullptr, false);
  ASSERT_FALSE(placement.is_discarded()) << reply->body;
  const std::string& body = reply->body;
  EXPECT_EQ(placement["cpus"], node_cpus.to_list()) << body;
  EXPECT_EQ(placement["mems"], std::to_string(node)) << body;
  EXPECT_EQ(placement["numa_nodes"], std::to_string(node)) << body;
  EXPECT_EQ(placement["memory_policy"]["bind"], true) << body;
  EXPECT_EQ(placement["memory_policy"]["nodes"], std::to_string(node)) << body;

  ASSERT_FALSE(placement["workers"].empty()) << body;
  CpuSet worker_cpus;
  for (const auto& w : placement["workers"]) worker_cpus |= CpuSet::parse_list(w["cpus"].get<std::string>()).value();
  EXPECT_EQ(worker_cpus.to_list(), node_cpus.to_list()) << body;
  std::size_t worker_threads = 0;
  for (const auto& t : placement["threads"]) {
    if (t["name"].get<std::string>().rfind("ns-worker", 0) != 0) continue;
    ++worker_threads;
    const auto allowed = CpuSet::parse_list(t["allowed_cpus"].get<std::string>());
    ASSERT_TRUE(allowed.has_value()) << t.dump();
    EXPECT_TRUE(allowed->is_subset_of(node_cpus)) << t.dump() << " is not only on " << node_cpus.to_list();
  }
  EXPECT_EQ(worker_threads, placement["workers"].size()) << body;

  ASSERT_EQ(placement["models"].size(), 1u) << body;
  const auto& model = placement["models"][0];
  EXPECT_EQ(model["weight_bytes"], TouchedWeightsModel::kWeightBytes) << body;
  EXPECT_EQ(model["pages_per_node"].size(), 1u) << body;
  EXPECT_TRUE(model["pages_per_node"].contains(std::to_string(node))) << body;
  EXPECT_GE(model["local_fraction"].get<double>(), 0.99) << body;

  expect_clean_stop(child, log_path);
}

TEST_F(InVm, AReloadedVersionsPagesAreOnThePodsNode) {
  const unsigned node = nodes_ - 1;
  const std::string dir = make_cgroup("numaserve-reload", cpus_of(node), node);
  const int port = free_loopback_port(), admin = free_loopback_port();
  ASSERT_GT(port, 0);
  ASSERT_GT(admin, 0);
  const std::filesystem::path repo = "/tmp/numaserve-vm-repository";
  std::filesystem::remove_all(repo);
  for (const char* version : {"1", "2"}) {
    const auto v = repo / "tiny_ranker" / version;  // the fixture model.yaml's name
    std::filesystem::create_directories(v);
    std::filesystem::copy_file(std::filesystem::path(NUMASERVE_FIXTURES_DIR) / "features/model.yaml", v / "model.yaml");
    std::ofstream(v / "model.pt") << "the fake runtime reads no weights";
    std::ofstream(v / "COMPLETE");
  }
  std::ofstream(repo / "tiny_ranker" / "config.yaml") << "version_policy: {specific: [1]}\n";
  options::ServeOptions options = loopback_options(port);
  options.reload.repository = repo.string();
  options.reload.control_mode = lifecycle::ControlMode::kExplicit;
  options.http.admin_port = admin;
  const std::string log_path = "/tmp/numaserve-reload.log";
  RunningChild child(dir, log_path, [&options] { return startup::serve(options, "vm-test", fake_runtime()); });
  ASSERT_TRUE(child.started()) << "fork failed";
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(1);
  client.set_read_timeout(10);
  ASSERT_TRUE(wait_until_ready(client, child, std::chrono::seconds(60))) << "log:\n" << read_log(log_path);

  httplib::Client control("127.0.0.1", admin);
  control.set_read_timeout(30);
  std::ofstream(repo / "tiny_ranker" / "config.yaml") << "version_policy: {specific: [2]}\n";
  const auto loaded = control.Post("/v2/repository/models/tiny_ranker/load", "", "application/json");
  ASSERT_TRUE(loaded) << httplib::to_string(loaded.error());
  ASSERT_EQ(loaded->status, 200) << loaded->body << "\nlog:\n" << read_log(log_path);

  const auto reply = control.Get("/placement");
  ASSERT_TRUE(reply && reply->status == 200);
  const auto placement = nlohmann::json::parse(reply->body, nullptr, false);
  ASSERT_EQ(placement["models"].size(), 1u) << reply->body;  // version 1 unloaded
  const auto& model = placement["models"][0];
  EXPECT_EQ(model["version"], "2") << reply->body;
  EXPECT_EQ(model["pages_per_node"].size(), 1u) << reply->body;
  EXPECT_TRUE(model["pages_per_node"].contains(std::to_string(node))) << reply->body;
  EXPECT_GE(model["local_fraction"].get<double>(), 0.99) << reply->body;

  expect_clean_stop(child, log_path);
  std::filesystem::remove_all(repo);
}

}  // namespace
}  // namespace numaserve::vm_testing
