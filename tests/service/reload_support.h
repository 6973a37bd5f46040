#pragma once
// What the reload tests share (reload_test.cpp: versions switched, refused,
// polled; reload_repository_test.cpp: what the repository holds at start,
// models added and removed, the cgroup's limit): two versions of a real
// demo model, a repository written as pullers write one, and
// `numaserve serve --model-repository` with its admin port.

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "model/demo_models.h"
#include "served.h"

namespace numaserve::reload_testing {

namespace fs = std::filesystem;
using nlohmann::json;
using numaserve::testing::make_temp_dir;
using numaserve::testing::slurp;
using Clock = std::chrono::steady_clock;

// ranker_a twice, seeds 42 and 7: the same contract (model.yaml), other
// weights. 16 MiB of tables each, so a version left behind per reload would
// show in the RSS.
struct Demo {
  fs::path one, two;  // ranker_a directories
  fs::path store;     // the seed-42 store both read
};
inline const Demo& demo() {
  static const Demo d = [] {
    const auto dir = make_temp_dir("numaserve-reload-demo");
    for (const auto& [sub, seed] : {std::pair{"a", 42}, std::pair{"b", 7}}) {
      model::DemoConfig config;
      config.embedding_mb = 16;
      config.users = 50;
      config.items = 200;
      config.seed = static_cast<std::uint64_t>(seed);
      auto made = model::make_demo_models(dir / sub, config);
      EXPECT_TRUE(made) << made.error().message;
    }
    return Demo{dir / "a" / "ranker_a", dir / "b" / "ranker_a", dir / "a" / "store.jsonl"};
  }();
  return d;
}

inline void write(const fs::path& file, const std::string& text) { std::ofstream(file, std::ios::binary) << text; }

// A version as a model puller writes it: beside the model, then renamed in.
inline void install(const fs::path& repo, const std::string& number, const fs::path& from) {
  fs::create_directories(repo / "ranker_a");
  const fs::path staging = repo / "ranker_a" / (".incoming-" + number);
  fs::copy(from, staging, fs::copy_options::recursive);
  fs::rename(staging, repo / "ranker_a" / number);
}

// Copies `from` to `to` as a slow `cp` does: in 8 chunks, `pause` after each
// (many kernel timestamp ticks in all), then `after_chunk()`.
inline void copy_slowly(const fs::path& from, const fs::path& to, std::chrono::milliseconds pause,
                 const std::function<void()>& after_chunk = [] {}) {
  std::ifstream in(from, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream out(to, std::ios::binary);
  const std::size_t chunk = bytes.size() / 8 + 1;
  for (std::size_t at = 0; at < bytes.size(); at += chunk) {
    out.write(bytes.data() + at, static_cast<std::streamsize>(std::min(chunk, bytes.size() - at)));
    out.flush();
    std::this_thread::sleep_for(pause);
    after_chunk();
  }
}

// Polls `done` every 10 ms until it holds; false after `seconds`.
inline bool eventually(double seconds, const std::function<bool()>& done) {
  for (auto deadline = Clock::now() + std::chrono::duration<double>(seconds); Clock::now() < deadline;) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

// The service and its admin port, stopped (SIGTERM, reaped) at the end.
// Its loads run at --reload-priority normal unless `extra` says idle: the
// tests share these CPUs with other tests, and at idle priority a load
// waits for them as it would for this service's saturated workers (two busy
// loops beside it held a 16 MiB load off for over 20 s); these tests are
// about which versions load and serve, bench/reload.sh about the priority.
struct Service {
  testing::Served served;
  int admin = 0;
  Service(const fs::path& repo, const std::string& mode, std::vector<std::string> extra = {},
          const std::function<void()>& in_child = {}) {
    admin = testing::free_port();
    std::vector<std::string> args = {"serve", "--model-repository", repo.string(), "--model-control-mode", mode,
                                     "--port", "0", "--admin-port", std::to_string(admin), "--feature-store",
                                     demo().store.string(), "--log-level", "info"};
    if (std::find(extra.begin(), extra.end(), "--reload-priority") == extra.end()) extra.insert(extra.end(), {"--reload-priority", "normal"});
    args.insert(args.end(), extra.begin(), extra.end());
    served = testing::start_served(NUMASERVE_BINARY, args, "msg=ready", -1, in_child);
  }
  ~Service() {
    if (served.pid > 0) {
      kill(served.pid, SIGTERM);
      EXPECT_EQ(testing::wait_exit(served.pid, 30), 0) << slurp(served.log);
    }
  }
  httplib::Client data() const {
    httplib::Client c("127.0.0.1", served.port);
    c.set_read_timeout(30, 0);
    return c;
  }
  httplib::Client control() const {
    httplib::Client c("127.0.0.1", admin);
    c.set_read_timeout(60, 0);
    return c;
  }
  httplib::Result load() const { return control().Post("/v2/repository/models/ranker_a/load", "", "application/json"); }
  json index() const {
    auto r = control().Post("/v2/repository/index", "", "application/json");
    return r ? json::parse(r->body) : json::array();
  }
  json entry(const std::string& version) const {
    for (const auto& e : index()) {
      if (e["version"] == version) return e;
    }
    return json::object();
  }
  std::string serving() const {  // the version a request without one gets
    auto r = data().Post("/predict", R"({"user": {"id": "u1"}, "items": [{"id": "i1"}]})", "application/json");
    if (!r || r->status != 200) return r ? "status " + std::to_string(r->status) : "no reply";
    return json::parse(r->body)["model_version"].get<std::string>();
  }
  // Polls until the default version is `version`; false after `seconds`.
  bool wait_serving(const std::string& version, double seconds) const {
    return eventually(seconds, [&] { return serving() == version; });
  }
  // Until no version is left UNLOADING (its last request answered, freed).
  void wait_freed() const {
    const bool freed = eventually(30, [&] {
      const auto entries = index();
      return std::none_of(entries.begin(), entries.end(), [](const json& e) { return e["state"] == "UNLOADING"; });
    });
    if (!freed) ADD_FAILURE() << "a version stayed UNLOADING: " << index();
  }
  std::uint64_t rss_kib() const {
    std::ifstream in("/proc/" + std::to_string(served.pid) + "/status");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
    }
    return 0;
  }
};

// Scores equal within float rounding (the service's forward may batch).
inline bool same_scores(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > 1e-5f * std::max(1.f, std::fabs(want[i]))) return false;
  }
  return true;
}

}  // namespace numaserve::reload_testing
