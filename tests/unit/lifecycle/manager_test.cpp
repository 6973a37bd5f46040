// The repository's manager on its own thread, acting on a real repository
// in a temp dir for a real Service (router-less: the model table, warm-up,
// metrics), with a fake loader in place of LibTorch: what the repository
// and the load calls do to what serves and to the index, in milliseconds.
// The rules themselves are plan_test.cpp's; this checks they are acted on.
#include "lifecycle/manager.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <thread>

#include "api/service.h"
#include "fake_model.h"
#include "test_dir.h"
#include "feature_store/embedded.h"

namespace numaserve::lifecycle {
namespace {

namespace fs = std::filesystem;
using lifecycle::VersionState;

class ManagerTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (manager_) manager_->stop();
    service_.reset();
  }

  // A version written elsewhere and moved into place (complete while polling
  // too); `weights` "corrupt" makes the fake loader refuse it.
  void put(const std::string& number, const std::string& weights = "weights", const std::string& model = "m") {
    const fs::path staging = root_ / ("." + model + "-" + number + "-" + weights);
    fs::create_directories(staging);
    std::ofstream(staging / "model.pt") << weights;
    std::ofstream(staging / "model.yaml") << "name: " << model << "\n";
    fs::create_directories(root_ / model);
    fs::rename(staging, root_ / model / number);
  }

  // Loads DIR as the fixture's model, named as DIR's model directory, at
  // `version`, counting calls.
  Loader loader() {
    return [this](const fs::path& dir, const std::string& version, double) -> Result<std::unique_ptr<api::Model>> {
      std::ifstream in(dir / "model.pt");
      std::string weights((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      {
        std::lock_guard lock(mutex_);
        ++loads_[version];
      }
      if (weights == "corrupt") return make_error(Error::Code::kInvalidArgument, "model.pt: not a TorchScript archive", "model");
      auto spec = api::fixture_spec();
      spec.name = dir.parent_path().filename().string();
      spec.version = version;
      return std::unique_ptr<api::Model>(std::make_unique<api::FakeModel>(spec));
    };
  }

  // Start-up as startup.cpp runs it: the manager's first load, the service
  // on what it loaded, then the manager's thread.
  void start(ControlMode mode, bool availability = true) {
    ReloadConfig config;
    config.repository = root_.string();
    config.control_mode = mode;
    config.availability = availability;
    config.idle_priority = false;
    config.rescan_seconds = 0.05;
    manager_ = std::make_unique<Manager>(config, loader());
    auto models = manager_->load_initial();
    ASSERT_TRUE(models.has_value()) << models.error().message;
    cpu_set_t mask;
    ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof mask, &mask), 0);
    CpuSet own;
    for (unsigned c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &mask)) own.insert(c);
    }
    api::Parts parts;
    parts.config.warmup_rounds = 0;  // a version serves once prepared: no worker turns here
    parts.placement.plan.cpus = own;
    parts.placement.plan.workers.push_back({own});
    const auto store = testing::fixtures_dir() / "features/store.jsonl";
    parts.store = feature_store::EmbeddedStore::open(feature_store::Entities::load(store).value(), {&(*models)[0]->spec()}).value();
    parts.models = std::move(*models);
    service_ = api::Service::create(std::move(parts)).value();
    ASSERT_TRUE(manager_->start(service_->lifecycle_hooks()).has_value());
  }

  Status call(bool load, const std::string& model = "m") {
    auto promise = std::make_shared<std::promise<Status>>();
    auto done = [promise](Status s) { promise->set_value(std::move(s)); };
    if (load) manager_->load(model, done);
    else manager_->unload(model, done);
    auto future = promise->get_future();
    if (future.wait_for(std::chrono::seconds(10)) != std::future_status::ready) return make_error(Error::Code::kUnavailable, "no answer in 10 s");
    return future.get();
  }

  std::vector<std::string> serving(const std::string& model = "m") const {
    std::vector<std::string> out;
    for (const auto& v : service_->models().versions(model)) out.push_back(v->version);
    return out;
  }

  // The index's entry for version `number`, once it shows `state` (up to 5 s).
  std::optional<lifecycle::RepositoryEntry> shown(const std::string& number, VersionState state) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    do {
      for (const auto& e : manager_->index()) {
        if (e.version == number && e.state == state) return e;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } while (std::chrono::steady_clock::now() < deadline);
    return std::nullopt;
  }

  int loads(const std::string& version) {
    std::lock_guard lock(mutex_);
    return loads_[version];
  }

  testing_support::TestDir dir_{"numaserve-manager"};
  const fs::path root_ = dir_.path();
  std::unique_ptr<Manager> manager_;
  std::unique_ptr<api::Service> service_;
  std::mutex mutex_;
  std::map<std::string, int> loads_;
};

TEST_F(ManagerTest, ALoadCallServesTheNewVersionAndFreesTheOld) {
  put("1");
  start(ControlMode::kExplicit);
  EXPECT_EQ(serving(), std::vector<std::string>{"1"});
  put("2");
  ASSERT_TRUE(call(true).has_value());
  EXPECT_EQ(serving(), std::vector<std::string>{"2"});
  ASSERT_TRUE(shown("2", VersionState::kReady));
  const auto old = shown("1", VersionState::kUnavailable);
  ASSERT_TRUE(old);
  EXPECT_EQ(old->reason, lifecycle::kNotWanted);
}

TEST_F(ManagerTest, AVersionThatFailsLeavesWhatServesAndALoadCallTriesItAgain) {
  put("1");
  start(ControlMode::kExplicit);
  put("2", "corrupt");
  const Status first = call(true);
  ASSERT_FALSE(first.has_value());
  EXPECT_NE(first.error().message.find("model m version 2: model.pt: not a TorchScript archive"), std::string::npos) << first.error().message;
  EXPECT_EQ(serving(), std::vector<std::string>{"1"});
  const auto entry = shown("2", VersionState::kUnavailable);
  ASSERT_TRUE(entry);
  EXPECT_NE(entry->reason.find("not a TorchScript archive"), std::string::npos);
  EXPECT_FALSE(call(true).has_value());
  EXPECT_EQ(loads("2"), 2);  // a load call is the operator asking again
}

TEST_F(ManagerTest, PollingLoadsWhatAppearsAndRetriesAFailureOnlyOnceItsFilesChange) {
  put("1");
  start(ControlMode::kPoll);
  put("2", "corrupt");
  ASSERT_TRUE(shown("2", VersionState::kUnavailable));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // several rescans
  EXPECT_EQ(loads("2"), 1);
  EXPECT_EQ(serving(), std::vector<std::string>{"1"});
  fs::remove_all(root_ / "m" / "2");
  put("2");  // rewritten: new files, new fingerprint
  ASSERT_TRUE(shown("2", VersionState::kReady));
  // Version 1 is retired after version 2 is ready (the availability
  // policy): shown unavailable once it no longer serves.
  ASSERT_TRUE(shown("1", VersionState::kUnavailable));
  EXPECT_EQ(serving(), std::vector<std::string>{"2"});
}

TEST_F(ManagerTest, ResourcePolicyLoadsTheOldVersionBackWhenTheNewOneFails) {
  put("1");
  start(ControlMode::kExplicit, /*availability=*/false);
  put("2", "corrupt");
  EXPECT_FALSE(call(true).has_value());
  EXPECT_EQ(serving(), std::vector<std::string>{"1"});
  EXPECT_EQ(loads("1"), 2);  // at start, then back after 2 failed
}

TEST_F(ManagerTest, AnUnloadHoldsUntilALoadCall) {
  put("1");
  start(ControlMode::kExplicit);
  ASSERT_TRUE(call(false).has_value());
  EXPECT_TRUE(serving().empty());
  EXPECT_TRUE(service_->models().missing().empty());  // an operator's unload does not make it unready
  ASSERT_TRUE(shown("1", VersionState::kUnavailable));
  ASSERT_TRUE(call(true).has_value());
  EXPECT_EQ(serving(), std::vector<std::string>{"1"});
}

TEST_F(ManagerTest, AModelAddedAfterStartGetsItsStoreAndMetricsBeforeItServes) {
  put("1");
  start(ControlMode::kExplicit);
  EXPECT_FALSE(call(true, "n").has_value());  // no such directory yet
  put("1", "weights", "n");
  ASSERT_TRUE(call(true, "n").has_value());
  const auto held = service_->models().resolve("n");
  ASSERT_TRUE(held.has_value()) << held.error().message;
  EXPECT_EQ((*held)->model_index, 1u);
  // The store answers for its number with an item cache of its own.
  features::Request request;
  request.items.push_back({"i1", {}});
  std::optional<Result<feature_store::Found>> found;
  service_->store().fetch(0, 1, request, [&](Result<feature_store::Found>&& f) { found = std::move(f); });
  ASSERT_TRUE(found && found->has_value());
  EXPECT_NE((*found)->cache, nullptr);
  service_->metrics().observe(metrics::Stage::kForward, "n", 0.001);
  EXPECT_NE(service_->metrics().render({}).find(R"(numaserve_stage_seconds_count{model="n",stage="forward"} 1)"), std::string::npos);
  EXPECT_EQ(serving(), std::vector<std::string>{"1"});  // the first model is untouched
}

TEST_F(ManagerTest, AModelWhoseDirectoryGoesIsUnloadedAndComesBackWithIt) {
  put("1");
  put("1", "weights", "n");
  start(ControlMode::kPoll);
  ASSERT_EQ(serving("n"), std::vector<std::string>{"1"});
  fs::rename(root_ / "n", root_ / ".n-away");
  const auto gone = shown("1", VersionState::kUnavailable);
  ASSERT_TRUE(gone);
  EXPECT_TRUE(serving("n").empty());
  EXPECT_TRUE(service_->models().missing().empty());  // it no longer counts for readiness
  EXPECT_EQ(serving(), std::vector<std::string>{"1"});
  fs::rename(root_ / ".n-away", root_ / "n");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (serving("n").empty() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(serving("n"), std::vector<std::string>{"1"});
}

}  // namespace
}  // namespace numaserve::lifecycle
