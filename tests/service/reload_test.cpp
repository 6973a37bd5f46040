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

#include "api/predict_json.h"
#include "feature_store/embedded.h"
#include "model/demo_models.h"
#include "model/model.h"
#include "served.h"

namespace numaserve {
namespace {

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
const Demo& demo() {
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

void write(const fs::path& file, const std::string& text) { std::ofstream(file, std::ios::binary) << text; }

// A version as a model puller writes it: beside the model, then renamed in.
void install(const fs::path& repo, const std::string& number, const fs::path& from) {
  fs::create_directories(repo / "ranker_a");
  const fs::path staging = repo / "ranker_a" / (".incoming-" + number);
  fs::copy(from, staging, fs::copy_options::recursive);
  fs::rename(staging, repo / "ranker_a" / number);
}

// Copies `from` to `to` as a slow `cp` does: in 8 chunks, `pause` after each
// (many kernel timestamp ticks in all), then `after_chunk()`.
void copy_slowly(const fs::path& from, const fs::path& to, std::chrono::milliseconds pause,
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
bool eventually(double seconds, const std::function<bool()>& done) {
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
      const auto request = api::parse_predict_request(body, {}).value();
      const auto batch = feature_store::extract(model->spec(), request.features, *entities).value();
      e.scores[version].push_back(model->forward(batch).value());
    }
  }
  return e;
}

bool same_scores(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > 1e-5f * std::max(1.f, std::fabs(want[i]))) return false;
  }
  return true;
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
  const auto request = api::parse_predict_request(body, {}).value();
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
}  // namespace numaserve
