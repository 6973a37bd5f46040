// A repository's models as the service meets them beyond a version switch:
// what is there at start, models added and removed while it runs, the
// explicit mode's needs, a version too large for the cgroup. The real
// binary, real LibTorch models, loopback HTTP; every wait bounded.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "codec/predict_json.h"
#include "feature_store/embedded.h"
#include "model/model.h"
#include "reload_support.h"

namespace numaserve::reload_testing {
namespace {

// A child memory cgroup of the test's own, v1 or v2; empty when this
// machine does not let the test make one.
struct MemoryCgroup {
  fs::path dir;
  std::string limit_file;
  MemoryCgroup() {
    std::ifstream in("/proc/self/cgroup");
    for (std::string line; std::getline(in, line);) {
      const auto a = line.find(':'), b = line.find(':', a + 1);
      const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
      fs::path candidate;
      if (controllers == "memory") {
        candidate = fs::path("/sys/fs/cgroup/memory") / path.substr(1);
        limit_file = "memory.limit_in_bytes";
      } else if (controllers.empty() && line.rfind("0::", 0) == 0 && fs::exists("/sys/fs/cgroup/cgroup.controllers")) {
        candidate = fs::path("/sys/fs/cgroup") / path.substr(1);
        limit_file = "memory.max";
      } else {
        continue;
      }
      candidate /= "numaserve-reload-" + std::to_string(getpid());
      std::error_code ec;
      if (fs::create_directory(candidate, ec) && fs::exists(candidate / limit_file)) {
        dir = candidate;
        return;
      }
      fs::remove(candidate, ec);
      if (controllers == "memory") return;
    }
  }
  ~MemoryCgroup() {
    std::error_code ec;
    if (!dir.empty()) fs::remove(dir, ec);
  }
  bool set_limit(std::uint64_t bytes) const {
    std::ofstream out(dir / limit_file);
    out << bytes;
    out.flush();
    return out.good();
  }
  std::uint64_t usage() const {
    std::ifstream in(dir / (limit_file == "memory.max" ? "memory.current" : "memory.usage_in_bytes"));
    std::uint64_t v = 0;
    in >> v;
    return v;
  }
};

TEST(Reload, AVersionThatDoesNotFitTheCgroupLimitIsRefused) {
  MemoryCgroup cgroup;
  if (cgroup.dir.empty() || !cgroup.set_limit(4ull << 30)) {
    GTEST_SKIP() << "this machine does not let the test make a memory cgroup (needs a writable memory hierarchy)";
  }
  const auto repo = make_temp_dir("numaserve-reload-memory");
  install(repo, "1", demo().one);
  {
    const std::string procs = (cgroup.dir / "cgroup.procs").string();
    Service service(repo, "explicit", {}, [procs] {
      std::ofstream(procs) << getpid();  // before exec: the service starts in the limited cgroup
    });
    ASSERT_GT(service.served.pid, 0);
    ASSERT_GT(cgroup.usage(), 0u) << "the service is not in the test's cgroup";
    // Room for 32 MiB more: less than the 16 MiB weights and the 64 MiB a load reserves beside them.
    ASSERT_TRUE(cgroup.set_limit(cgroup.usage() + (32ull << 20)));
    install(repo, "2", demo().two);
    auto r = service.load();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503) << r->body;
    EXPECT_EQ(json::parse(r->body).value("field", ""), "memory") << r->body;
    EXPECT_NE(service.entry("2").value("reason", "").find("memory"), std::string::npos) << service.index();
    EXPECT_EQ(service.serving(), "1");
    ASSERT_TRUE(cgroup.set_limit(4ull << 30));
    r = service.load();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(service.serving(), "2");
  }
  fs::remove_all(repo);
}

// What a new user does, Triton's habit: `cp -r` a model into repo/<model>/1
// (no marker, no rename), then start. The copy takes many kernel ticks
// (model.pt written in chunks, a pause between): whatever its timing, what
// is there at start-up is served.
TEST(Reload, ACopyInPlaceBeforeStartIsServed) {
  const auto repo = make_temp_dir("numaserve-reload-copied");
  const fs::path v = repo / "ranker_a" / "1";
  fs::create_directories(v);
  fs::copy_file(demo().one / "model.yaml", v / "model.yaml");
  copy_slowly(demo().one / "model.pt", v / "model.pt", std::chrono::milliseconds(20));
  Service service(repo, "explicit");
  ASSERT_GT(service.served.pid, 0) << "never became ready";
  EXPECT_EQ(service.serving(), "1");
  EXPECT_NE(slurp(service.served.log).find("complete=\"present at start-up\""), std::string::npos) << slurp(service.served.log);
  fs::remove_all(repo);
}

// Triton's poll mode serves a model whose directory appears, and unloads
// one whose directory goes, without a restart: the feature store's item
// cache for it is built at its load.
TEST(Reload, AModelAddedAfterStartIsServedAndARemovedOneUnloaded) {
  const auto repo = make_temp_dir("numaserve-reload-models");
  install(repo, "1", demo().one);
  Service service(repo, "poll", {"--repository-rescan", "0.3"});
  ASSERT_GT(service.served.pid, 0);
  const fs::path ranker_b = demo().one.parent_path() / "ranker_b";
  auto model = model::TorchModel::load(ranker_b).value();
  const auto entities = feature_store::Entities::load(demo().store).value();
  const std::string body = R"({"model": "ranker_b", "user": {"id": "u3"}, "items": [{"id": "i5"}, {"id": "i17"}, {"id": "i150"}]})";
  const auto request = codec::parse_predict_request(body, {}).value();
  const auto want = model->forward(feature_store::extract(model->spec(), request.features, *entities).value()).value();
  auto predict = [&] { return service.data().Post("/predict", body, "application/json"); };
  auto r = predict();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404) << r->body;

  // Written beside the repository's models (hidden), then moved in whole.
  fs::create_directories(repo / ".incoming-ranker_b");
  fs::copy(ranker_b, repo / ".incoming-ranker_b" / "1", fs::copy_options::recursive);
  fs::rename(repo / ".incoming-ranker_b", repo / "ranker_b");
  ASSERT_TRUE(eventually(30, [&] {
    auto got = predict();
    return got && got->status == 200;
  })) << slurp(service.served.log);
  r = predict();
  ASSERT_TRUE(r && r->status == 200);
  const json reply = json::parse(r->body);
  EXPECT_EQ(reply["model"], "ranker_b");
  EXPECT_TRUE(same_scores(reply["scores"].get<std::vector<float>>(), want)) << r->body;
  EXPECT_EQ(service.serving(), "1");  // the default model is still ranker_a
  const auto metrics = service.control().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find(R"(numaserve_stage_seconds_count{model="ranker_b",stage="forward"})"), std::string::npos);

  fs::remove_all(repo / "ranker_b");
  EXPECT_TRUE(eventually(30, [&] {
    auto got = predict();
    return got && got->status == 404;
  })) << slurp(service.served.log);
  EXPECT_TRUE(eventually(30, [&] {
    for (const auto& e : service.index()) {
      if (e["name"] == "ranker_b") return e.value("state", "") == "UNAVAILABLE" && e.value("reason", "") == "its model directory was removed";
    }
    return false;
  })) << service.index();
  const auto ready = service.data().Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200) << ready->body;  // a removed model does not make the replica unready
  EXPECT_EQ(service.serving(), "1");
  fs::remove_all(repo);
}

TEST(Reload, ExplicitModeNeedsTheAdminPortAndARepositoryItsNames) {
  const auto repo = make_temp_dir("numaserve-reload-cli");
  install(repo, "1", demo().one);
  const std::string err = (repo / "err").string();
  const std::string base = std::string(NUMASERVE_BINARY) + " serve --port 0 --feature-store " + demo().store.string();
  EXPECT_EQ(WEXITSTATUS(std::system((base + " --model-repository " + repo.string() + " --model-control-mode explicit 2>" + err).c_str())), 1);
  EXPECT_NE(slurp(err).find("--admin-port"), std::string::npos) << slurp(err);
  EXPECT_EQ(WEXITSTATUS(std::system((base + " --model-dir " + demo().one.string() + " --model-control-mode poll 2>" + err).c_str())), 1);
  EXPECT_NE(slurp(err).find("needs --model-repository"), std::string::npos) << slurp(err);
  write(repo / "ranker_a" / "config.yaml", "version_policy: {latest: zero}\n");
  EXPECT_EQ(WEXITSTATUS(std::system((base + " --model-repository " + repo.string() + " 2>" + err).c_str())), 1);
  EXPECT_NE(slurp(err).find("ranker_a/config.yaml line 1"), std::string::npos) << slurp(err);
  fs::remove_all(repo);
}

}  // namespace
}  // namespace numaserve::reload_testing
