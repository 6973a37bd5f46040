// Model versions switched under a real `numaserve serve --model-repository`:
// real LibTorch models (two versions of ranker_a whose scores differ), real
// HTTP on loopback, the repository in a temp dir; every wait bounded.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cmath>
#include <fstream>
#include <mutex>
#include <random>
#include <regex>
#include <thread>

#include "codec/predict_json.h"
#include "feature_store/embedded.h"
#include "model/demo_models.h"
#include "model/model.h"
#include "reload_support.h"

namespace numaserve::reload_testing {
namespace {

// Requests whose scores each version gives, computed in-process beforehand.
struct Expected {
  std::vector<std::string> bodies;
  std::map<std::string, std::vector<std::vector<float>>> scores;  // version -> per body
};
Expected expected_scores(std::size_t count) {
  Expected e;
  std::mt19937 rng(11);
  for (std::size_t i = 0; i < count; ++i) {
    json body{{"user", {{"id", "u" + std::to_string(rng() % 50)}}}, {"items", json::array()}};
    for (std::size_t k = 0, n = 1 + rng() % 12; k < n; ++k) body["items"].push_back({{"id", "i" + std::to_string(rng() % 200)}});
    e.bodies.push_back(body.dump());
  }
  const auto entities = feature_store::Entities::load(demo().store).value();
  for (const auto& [version, dir] : {std::pair{"1", demo().one}, std::pair{"2", demo().two}}) {
    auto model = model::TorchModel::load(dir).value();
    for (const auto& body : e.bodies) {
      const auto request = codec::parse_predict_request(body, {}).value();
      const auto batch = feature_store::extract(model->spec(), request.features, *entities).value();
      e.scores[version].push_back(model->forward(batch).value());
    }
  }
  return e;
}

struct Reply {
  std::size_t body = 0;
  Clock::time_point sent, answered;
  int status = 0;
  std::string version;
  std::vector<float> scores;
};
struct Flip {
  Clock::time_point asked, done;
  std::string to;
};

// The issue's acceptance test: 20 reloads alternating two versions under
// closed-loop load on 4 connections.
TEST(Reload, TwentySwitchesUnderLoadLoseNoRequestAndNeverMixVersions) {
  const auto expected = expected_scores(24);
  ASSERT_NE(expected.scores.at("1")[0], expected.scores.at("2")[0]) << "the two versions must score apart";
  const auto repo = make_temp_dir("numaserve-reload");
  install(repo, "1", demo().one);
  install(repo, "2", demo().two);
  write(repo / "ranker_a" / "config.yaml", "version_policy: {specific: [1]}\n");
  Service service(repo, "explicit");
  ASSERT_GT(service.served.pid, 0);
  ASSERT_EQ(service.serving(), "1");

  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::vector<Reply> replies;
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      auto client = service.data();
      client.set_keep_alive(true);
      std::vector<Reply> mine;
      for (std::size_t n = c; !stop.load(); n += 4) {
        Reply r;
        r.body = n % expected.bodies.size();
        r.sent = Clock::now();
        auto res = client.Post("/predict", expected.bodies[r.body], "application/json");
        r.answered = Clock::now();
        r.status = res ? res->status : -1;
        if (res && res->status == 200) {
          const auto body = json::parse(res->body);
          r.version = body["model_version"];
          r.scores = body["scores"].get<std::vector<float>>();
        }
        mine.push_back(std::move(r));
      }
      std::lock_guard lock(mutex);
      replies.insert(replies.end(), mine.begin(), mine.end());
    });
  }
  std::vector<Flip> flips;
  std::uint64_t rss_first = 0;
  for (int k = 1; k <= 20; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::string to = k % 2 == 1 ? "2" : "1";
    write(repo / "ranker_a" / "config.yaml", "version_policy: {specific: [" + to + "]}\n");
    Flip f{Clock::now(), {}, to};
    auto r = service.load();
    f.done = Clock::now();
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no reply") << "\n" << slurp(service.served.log);
    flips.push_back(f);
    if (k == 1) {
      service.wait_freed();
      rss_first = service.rss_kib();
    }
  }
  service.wait_freed();
  const std::uint64_t rss_last = service.rss_kib();
  stop = true;
  for (auto& t : clients) t.join();

  // The version a request must get when it ran wholly between two flips.
  auto stable_version = [&flips](const Reply& r) -> std::optional<std::string> {
    std::string current = "1";
    for (const auto& f : flips) {
      if (r.answered < f.asked) return current;
      if (r.sent < f.done) return std::nullopt;  // overlaps this reload: either
      current = f.to;
    }
    return current;
  };
  std::size_t during = 0, per_version[2] = {0, 0};
  for (const auto& r : replies) {
    ASSERT_EQ(r.status, 200) << "a request failed during the reloads";
    ASSERT_TRUE(r.version == "1" || r.version == "2") << r.version;
    ASSERT_TRUE(same_scores(r.scores, expected.scores.at(r.version)[r.body]))
        << "reply labelled version " << r.version << " does not carry its scores (body " << r.body << ")";
    const auto must = stable_version(r);
    if (must) {
      ASSERT_EQ(r.version, *must) << "a request after a switch got the version switched from";
    } else {
      ++during;
    }
    ++per_version[r.version == "2"];
  }
  // Both versions answered many requests (about 120 each here; a slow machine fewer).
  EXPECT_GT(per_version[0], 20u);
  EXPECT_GT(per_version[1], 20u);
  EXPECT_GT(during, 0u) << "no request overlapped a reload: the test did not test the switch";
  // Each reload frees the version it replaced: RSS after 20 is that after 1, within 10%.
  EXPECT_LE(rss_last, rss_first + rss_first / 10) << "RSS after the first reload " << rss_first << " KiB, after 20 " << rss_last;
  std::cout << "[ reload   ] " << replies.size() << " replies, " << during << " across a reload; RSS after 1 reload " << rss_first
            << " KiB, after 20 " << rss_last << " KiB\n";
  const auto metrics = service.control().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find(R"(numaserve_model_loads_total{model="ranker_a",result="ok"} 20)"), std::string::npos);
  fs::remove_all(repo);
}

// A TorchScript module that is no ranking model: forward(x) only (scripted
// by Debian's PyTorch, which needs the source in a file).
bool script_wrong_signature(const fs::path& file) {
  const fs::path script = file.parent_path() / "make.py";
  write(script,
        "import sys, torch\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
        "        return x\n"
        "torch.jit.script(M()).save(sys.argv[1])\n");
  const std::string command = "/usr/bin/python3 " + script.string() + " " + file.string() + " 2>/dev/null";
  const bool made = std::system(command.c_str()) == 0;
  fs::remove(script);
  return made;
}

TEST(Reload, BadVersionsAreRefusedWithTheReasonWhileTheOldServes) {
  const auto repo = make_temp_dir("numaserve-reload-bad");
  install(repo, "1", demo().one);
  Service service(repo, "explicit", {"--reload-priority", "idle"});  // the default, below the workers
  ASSERT_GT(service.served.pid, 0);
  const fs::path yaml = demo().one / "model.yaml";
  struct Bad {
    std::string number, why;
    std::function<bool(const fs::path&)> make;
  };
  const std::vector<Bad> bad = {
      {"2", "not a TorchScript",
       [](const fs::path& d) {
         write(d / "model.pt", "these are not weights");
         return true;
       }},
      {"3", "rows in model.yaml",  // a model.yaml whose table is not the size of model.pt's
       [](const fs::path& d) {
         fs::copy_file(demo().two / "model.pt", d / "model.pt");
         write(d / "model.yaml", std::regex_replace(slurp(d / "model.yaml"), std::regex("\n  brand: [0-9]+"), "\n  brand: 7"));
         return true;
       }},
      {"4", "forward", [](const fs::path& d) { return script_wrong_signature(d / "model.pt"); }},
  };
  for (const auto& b : bad) {
    const fs::path staging = repo / ("." + b.number);
    fs::create_directories(staging);
    fs::copy_file(yaml, staging / "model.yaml");
    if (!b.make(staging)) {
      std::cout << "[ skipped  ] version " << b.number << ": Debian's python3 with torch is needed to script it\n";
      fs::remove_all(staging);
      continue;
    }
    fs::rename(staging, repo / "ranker_a" / b.number);
    auto r = service.load();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_FALSE(json::parse(r->body).value("field", "").empty()) << r->body;
    const auto e = service.entry(b.number);
    EXPECT_EQ(e.value("state", ""), "UNAVAILABLE") << e;
    EXPECT_NE(e.value("reason", "").find(b.why), std::string::npos) << e;
    EXPECT_EQ(service.serving(), "1") << "the old version must keep serving";
    fs::remove_all(repo / "ranker_a" / b.number);
  }
  // ...and the next good version is still taken.
  install(repo, "5", demo().two);
  auto r = service.load();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(service.serving(), "5");
  const auto metrics = service.control().Get("/metrics")->body;
  EXPECT_NE(metrics.find(R"(numaserve_model_loads_total{model="ranker_a",result="load"})"), std::string::npos) << metrics;
  const auto log = slurp(service.served.log);
  EXPECT_NE(log.find("version refused; what served still serves"), std::string::npos);
  // The defaults: idle priority, a quarter of one CPU (the loading thread says both).
  EXPECT_NE(log.find("version=5 complete=\"named by a load call\" priority=idle cpu_share=0.25"), std::string::npos) << log;
  fs::remove_all(repo);
}

TEST(Reload, PollModeWaitsForACopyInPlaceToFinishAndSeesItsMarker) {
  const auto repo = make_temp_dir("numaserve-reload-slow");
  install(repo, "1", demo().one);
  Service service(repo, "poll", {"--repository-rescan", "0.3"});
  ASSERT_GT(service.served.pid, 0);
  const fs::path v = repo / "ranker_a" / "2";
  fs::create_directories(v);
  fs::copy_file(demo().two / "model.yaml", v / "model.yaml");
  copy_slowly(demo().two / "model.pt", v / "model.pt", std::chrono::milliseconds(150),
              [&] { EXPECT_EQ(service.serving(), "1") << "loaded while still being copied"; });
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // rescans and events come and go
  EXPECT_EQ(service.serving(), "1") << "a copy in place without its marker was loaded";
  EXPECT_EQ(service.entry("2").value("state", ""), "UNAVAILABLE") << service.index();
  EXPECT_NE(service.entry("2").value("reason", "").find("COMPLETE"), std::string::npos) << service.index();
  EXPECT_EQ(slurp(service.served.log).find("msg=\"loading version\" model=ranker_a version=2"), std::string::npos);
  write(v / "COMPLETE", "");
  EXPECT_TRUE(service.wait_serving("2", 30)) << slurp(service.served.log);
  EXPECT_NE(slurp(service.served.log).find("version=2 complete=\"marker COMPLETE\" priority=normal"), std::string::npos)
      << slurp(service.served.log);
  // latest: 1, so version 1 is unloaded (freed once its last request answered).
  EXPECT_TRUE(eventually(30, [&] {
    const auto e = service.entry("1");
    return e.value("state", "") == "UNAVAILABLE" && e.value("reason", "") == "not wanted by the version policy";
  })) << service.index();
  fs::remove_all(repo);
}

// A configMap-style volume: the kubelet writes a new "..<timestamp>"
// directory, points "..data_tmp" at it and renames that over "..data".
TEST(Reload, PollModeSeesAnAtomicWriterSwapWithinASecond) {
  const auto repo = make_temp_dir("numaserve-reload-volume");
  fs::create_directories(repo / "..2026_12_03_01" / "ranker_a");
  fs::copy(demo().one, repo / "..2026_12_03_01" / "ranker_a" / "1", fs::copy_options::recursive);
  fs::create_directory_symlink("..2026_12_03_01", repo / "..data");
  fs::create_directory_symlink("..data/ranker_a", repo / "ranker_a");
  Service service(repo, "poll", {"--repository-rescan", "60"});  // the event, not a rescan
  ASSERT_GT(service.served.pid, 0);
  ASSERT_EQ(service.serving(), "1");
  const fs::path next = repo / "..2026_12_03_02" / "ranker_a";
  fs::create_directories(next);
  fs::copy(demo().one, next / "1", fs::copy_options::recursive);
  fs::copy(demo().two, next / "2", fs::copy_options::recursive);
  fs::create_directory_symlink("..2026_12_03_02", repo / "..data_tmp");
  const auto swapped = Clock::now();
  fs::rename(repo / "..data_tmp", repo / "..data");
  // Seen: the service is loading version 2 (or serves it already). How
  // long the load itself takes depends on what else runs on these CPUs.
  const bool seen = eventually(1.0, [&] {
    const auto state = service.entry("2").value("state", "");
    return state == "LOADING" || state == "READY";
  });
  const double seen_after = std::chrono::duration<double>(Clock::now() - swapped).count();
  EXPECT_TRUE(seen) << "version 2 not seen " << seen_after << " s after the swap\n" << slurp(service.served.log);
  EXPECT_TRUE(service.wait_serving("2", 30)) << slurp(service.served.log);
  const double serving_after = std::chrono::duration<double>(Clock::now() - swapped).count();
  std::cout << "[ reload   ] ..data swap: version 2 seen after " << seen_after * 1000 << " ms, serving after " << serving_after * 1000
            << " ms\n";
  fs::remove_all(repo / "..2026_12_03_01");  // as the kubelet does after the swap
  EXPECT_EQ(service.serving(), "2");
  fs::remove_all(repo);
}

}  // namespace
}  // namespace numaserve::reload_testing
