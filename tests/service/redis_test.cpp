// The Redis feature store (Feast's online format) against a real
// redis-server from Debian, started per test in a temp dir on a unix socket
// (and a loopback port for the password test), and the real `numaserve`
// binary. What a user relies on: scores equal to the embedded store's with
// the same features, the bytes Feast's own Python writes read back exactly,
// and every failure of Redis answered within the deadline with the policy
// the operator chose, counted, and recovered from without a restart.
#include <atomic>
#include <thread>
#include <tuple>

#include "redis_support.h"

namespace {

using namespace numaserve::testing;

// A redis-server of our own, killed with the test.
class RedisServer {
 public:
  explicit RedisServer(std::string password = {}, bool tcp = false)
      : dir_(make_temp_dir("numaserve-redis")), password_(std::move(password)), port_(tcp ? free_port() : 0) {
    start();
  }
  ~RedisServer() {
    kill_now();
    fs::remove_all(dir_);
  }
  void start() {
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<std::string> args = {"redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                       "--unixsocket", socket().string(), "--save", "", "--appendonly", "no",
                                       "--enable-debug-command", "local", "--dir", dir_.string(),
                                       "--logfile", (dir_ / "redis.log").string()};
      if (!password_.empty()) args.insert(args.end(), {"--requirepass", password_});
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp("redis-server", argv.data());
      _exit(127);
    }
    for (auto deadline = Clock::now() + std::chrono::seconds(10); Clock::now() < deadline;) {
      if (cli("PING").find("PONG") != std::string::npos) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "redis-server did not start: " << slurp(dir_ / "redis.log");
  }
  void kill_now() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    fs::remove(socket());
  }
  std::string cli(const std::string& args) const {
    const std::string auth = password_.empty() ? "" : " --no-auth-warning -a " + password_;
    return run("redis-cli -s " + socket().string() + auth + " " + args).output;
  }
  fs::path socket() const { return dir_ / "redis.sock"; }
  std::string url(int db = 0) const { return "unix://" + socket().string() + (db ? "?db=" + std::to_string(db) : ""); }
  int port() const { return port_; }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
  std::string password_;
  int port_;
  pid_t pid_ = -1;
};

// The Python writer/reader, with feast.types.Value compiled for Python.
Ran python(const RedisServer& redis, const std::string& args) {
  const fs::path pb = redis.dir() / "pb";
  fs::create_directories(pb);
  const auto protoc = run("protoc --proto_path=" + std::string(NUMASERVE_SOURCE_DIR) + "/service/feature_store --python_out=" +
                          pb.string() + " " + NUMASERVE_SOURCE_DIR + "/service/feature_store/value.proto");
  EXPECT_EQ(protoc.status, 0) << protoc.output;
  return run(std::string(NUMASERVE_SOURCE_DIR) + "/tests/service/feast_writer.py " + args + " --socket " +
             redis.socket().string() + " --pb " + pb.string());
}

std::string errors(const std::string& url, const std::string& kind) {
  return counter("numaserve_feature_store_errors_total", url, "kind=\"" + kind + "\"");
}

TEST(FeastRedis, ScoresEqualTheEmbeddedStoreWithTheSameFeatures) {
  RedisServer redis;
  load(redis.url());
  const Serving embedded = serve((demo_dir() / "store.jsonl").string());
  const Serving remote = serve(redis.url());
  ASSERT_GT(embedded.pid, 0);
  ASSERT_GT(remote.pid, 0);
  for (int r = 0; r < 12; ++r) {
    const std::string body = request(r == 11 ? "nobody" : "u" + std::to_string(r * 4), some_items(r * 13, 40));
    const json want = scores(embedded.port, body);
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(scores(remote.port, body), want) << body;  // twice: fetched, then from the item cache
    EXPECT_EQ(scores(remote.port, body), want) << body;
  }
  EXPECT_GT(metric(remote.port, "numaserve_item_cache_total{store=\"" + redis.url() + "\",result=\"hit\"}"), 0);
  EXPECT_EQ(metric(remote.port, "numaserve_feature_store_degraded_total{store=\"" + redis.url() + "\"}"), 0);
}

// A model added to the repository after start is served from Redis when it
// reads fields the start-up models already read; one that reads others is
// refused with the reason (the pipelines ask for the layout built at start).
TEST(FeastRedis, AModelAddedAfterStartIsServedWhenItsFieldsAreInTheLayout) {
  RedisServer redis;
  load(redis.url());
  const Serving embedded = serve((demo_dir() / "store.jsonl").string(), {"--model-dir", (demo_dir() / "ranker_b").string()});
  ASSERT_GT(embedded.pid, 0);
  for (const auto& [first, added, served] : {std::tuple{"ranker_a", "ranker_b", true}, std::tuple{"ranker_b", "ranker_a", false}}) {
    SCOPED_TRACE(std::string(added) + " added to " + first);
    const fs::path repo = make_temp_dir("numaserve-redis-repo");
    auto install = [&](const std::string& model) {  // written beside, then moved in whole
      fs::create_directories(repo / ("." + model));
      fs::copy(demo_dir() / model, repo / ("." + model) / "1", fs::copy_options::recursive);
      fs::rename(repo / ("." + model), repo / model);
    };
    install(first);
    const int admin = free_port();
    const Serving remote{start_served(binary(), {"serve", "--model-repository", repo.string(), "--model-control-mode", "poll",
                                                 "--repository-rescan", "0.3", "--admin-port", std::to_string(admin),
                                                 "--reload-priority", "normal", "--feature-store", redis.url(), "--port", "0",
                                                 "--listen-address", "127.0.0.1", "--workers", "1", "--warmup-rounds", "1"},
                                      "msg=ready")};
    ASSERT_GT(remote.pid, 0);
    install(added);
    json body = json::parse(request("u4", some_items(3, 30)));
    body["model"] = added;
    bool ended = false;
    std::string last;
    for (auto deadline = Clock::now() + std::chrono::seconds(30); Clock::now() < deadline && !ended;) {
      const Answer a = post(remote.port, body.dump());
      httplib::Client control("127.0.0.1", admin);
      auto index = control.Post("/v2/repository/index", "", "application/json");
      last = index ? index->body : "";
      ended = a.status == 200 || last.find("UNAVAILABLE") != std::string::npos;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(ended) << slurp(remote.log);
    if (served) {
      EXPECT_EQ(scores(remote.port, body.dump()), scores(embedded.port, body.dump()));
    } else {
      EXPECT_NE(last.find("the store's layout is fixed at start, so serving it needs a restart"), std::string::npos) << last;
      EXPECT_EQ(post(remote.port, body.dump()).status, 404);
      EXPECT_EQ(metric(admin, "numaserve_model_loads_total{model=\"ranker_a\",result=\"store\"}"), 1);
    }
    fs::remove_all(repo);
  }
}

TEST(FeastRedis, WhatTheLoaderWroteReadsBackInPythonAsFeastWouldReadIt) {
  RedisServer redis;
  load(redis.url(3), demo_dir() / "store.jsonl", "--project shop");
  const Ran read = python(redis, "read --db 3 --project shop --store " + (demo_dir() / "store.jsonl").string());
  EXPECT_EQ(read.status, 0) << read.output;
  EXPECT_NE(read.output.find("read back 250 entities"), std::string::npos) << read.output;
}

TEST(FeastRedis, ReadsExactlyWhatAFeastWriterWroteAndDropsStaleViews) {
  RedisServer redis;
  // Python writes every demo feature as another Feast type (int64, int32,
  // float, double, string, string list) and u7 two days old; py.jsonl holds
  // the same model input for the embedded store (and u7 without features).
  const fs::path written = redis.dir() / "py.jsonl";
  const Ran write = python(redis, "write --source " + (demo_dir() / "store.jsonl").string() + " --out " +
                                      written.string() + " --stale u7");
  ASSERT_EQ(write.status, 0) << write.output;
  const Serving embedded = serve(written.string());
  const Serving remote = serve(redis.url(), {"--max-feature-age", "1h"});
  ASSERT_GT(remote.pid, 0);
  for (const std::string user : {"u3", "u7", "u12", "nobody"}) {
    const std::string body = request(user, some_items(5, 30));
    EXPECT_EQ(scores(remote.port, body), scores(embedded.port, body)) << user;
  }
}

// Every request during a failure is answered in time: the deadline plus a
// forward (of a tiny model) and a generous margin for a loaded CI machine.
constexpr double kTimeoutSeconds = 0.05;
constexpr double kAnswerBound = kTimeoutSeconds + 1.0;

TEST(FeastRedis, FailuresAnswerWithDefaultsInTimeAndRecoverByThemselves) {
  RedisServer redis;
  load(redis.url());
  const Serving embedded = serve((demo_dir() / "store.jsonl").string());
  const Serving remote = serve(redis.url(), {"--feature-query-timeout", "50ms", "--item-cache-ttl", "0"});
  ASSERT_GT(remote.pid, 0);
  const std::string body = request("u5", some_items(3, 20));
  const json healthy = scores(embedded.port, body);
  ASSERT_EQ(scores(remote.port, body), healthy);

  // Redis stops answering past the deadline.
  redis.cli("CLIENT PAUSE 800 ALL");
  Answer paused = post(remote.port, body);
  EXPECT_EQ(paused.status, 200) << paused.body;
  EXPECT_LT(paused.seconds, kAnswerBound);
  EXPECT_GE(metric(remote.port, errors(redis.url(), "timeout")), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(900));

  // Killed under load, then back: no request goes unanswered or late.
  std::atomic<bool> done{false};
  std::atomic<int> answered{0}, bad{0}, late{0};
  std::thread client([&] {
    while (!done) {
      const Answer a = post(remote.port, body);
      ++answered;
      if (a.status != 200) ++bad;
      if (a.seconds > kAnswerBound) ++late;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  redis.kill_now();
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  redis.start();
  load(redis.url());
  const json recovered = scores_once_back(remote.port, body, healthy, 15);
  done = true;
  client.join();
  EXPECT_EQ(recovered, healthy) << "the service did not recover after Redis came back";
  EXPECT_GT(answered, 5);
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(late, 0);
  EXPECT_GE(metric(remote.port, errors(redis.url(), "disconnected")), 1);
  EXPECT_GE(metric(remote.port, "numaserve_feature_store_degraded_total{store=\"" + redis.url() + "\"}"), 2);
  EXPECT_EQ(metric(remote.port, "numaserve_feature_store_connected{store=\"" + redis.url() + "\",worker=\"0\"}"), 1);

  // Values the model cannot read: a broken protobuf, a key that is no hash.
  ASSERT_EQ(python(redis, "corrupt --kind user --id u5 --feature age --view user").status, 0);
  ASSERT_EQ(python(redis, "wrongtype --kind item --id " + some_items(3, 1)[0]).status, 0);
  const Answer unreadable = post(remote.port, body);
  EXPECT_EQ(unreadable.status, 200) << unreadable.body;
  EXPECT_GE(metric(remote.port, errors(redis.url(), "unreadable")), 1);


  // A key that expired is a missing entity: the model's defaults, as the
  // embedded store answers for a user it holds no features of.
  ASSERT_EQ(python(redis, "expire --kind item --id " + some_items(3, 1)[0] + " --ms 1").status, 0);  // HSET cannot replace a string
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  load(redis.url());
  ASSERT_EQ(python(redis, "expire --kind user --id u5 --ms 100").status, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const fs::path without = redis.dir() / "without-u5.jsonl";
  {
    std::ifstream in(demo_dir() / "store.jsonl");
    std::ofstream out(without);
    for (std::string line; std::getline(in, line);) {
      if (json::parse(line)["id"] != "u5") out << line << "\n";
    }
  }
  const Serving expired = serve(without.string());
  EXPECT_EQ(scores(remote.port, body), scores(expired.port, body));
  EXPECT_NE(scores(remote.port, body), healthy);
}

TEST(FeastRedis, AHungRedisIsDroppedAndDialledAgainWhileEveryRequestIsAnsweredInTime) {
  RedisServer redis;
  load(redis.url());
  const Serving remote = serve(redis.url(), {"--feature-query-timeout", "50ms", "--item-cache-ttl", "0"});
  ASSERT_GT(remote.pid, 0);
  const std::string body = request("u6", some_items(4, 20));
  const json healthy = scores(remote.port, body);
  ASSERT_FALSE(healthy.empty());
  // DEBUG SLEEP blocks the server with the connection open: no FIN, no
  // reply, the way a partitioned or wedged Redis looks.
  std::thread sleeper([&] { redis.cli("DEBUG SLEEP 3.5"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  int late = 0, bad = 0;
  const auto until = Clock::now() + std::chrono::seconds(3);
  while (Clock::now() < until) {
    const Answer a = post(remote.port, body);
    late += a.seconds > kAnswerBound;
    bad += a.status != 200;
  }
  sleeper.join();
  EXPECT_EQ(late, 0);
  EXPECT_EQ(bad, 0);
  EXPECT_NE(slurp(remote.log).find("feature store connection dropped"), std::string::npos) << slurp(remote.log);
  EXPECT_EQ(scores_once_back(remote.port, body, healthy, 10), healthy);
}

TEST(FeastRedis, FailPolicyAnswers503WithRetryAfterAndTheBreakerOpensAndCloses) {
  RedisServer redis;
  load(redis.url());
  const Serving remote = serve(redis.url(), {"--feature-query-timeout", "50ms", "--on-feature-store-error", "fail"});
  ASSERT_GT(remote.pid, 0);
  const std::string body = request("u2", some_items(1, 10));
  ASSERT_EQ(post(remote.port, body).status, 200);
  redis.cli("CLIENT PAUSE 1500 ALL");
  for (int i = 0; i < 7; ++i) {
    const Answer a = post(remote.port, body);
    EXPECT_EQ(a.status, 503) << a.body;
    EXPECT_EQ(a.retry_after, "1");
    EXPECT_LT(a.seconds, kAnswerBound);
    EXPECT_NE(a.body.find("\"field\":\"feature_store\""), std::string::npos) << a.body;
  }
  EXPECT_GE(metric(remote.port, errors(redis.url(), "breaker_open")), 1);
  EXPECT_EQ(metric(remote.port, "numaserve_feature_store_breaker{store=\"" + redis.url() + "\",worker=\"0\",state=\"open\"}"), 1);
  EXPECT_NE(slurp(remote.log).find("feature store breaker open"), std::string::npos);
  // Readiness does not follow Redis: every replica unready at once would
  // empty the Service.
  httplib::Client probe("127.0.0.1", remote.port);
  EXPECT_EQ(probe.Get("/readyz")->status, 200);
  int status = 0;
  for (auto deadline = Clock::now() + std::chrono::seconds(10); Clock::now() < deadline && status != 200;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    status = post(remote.port, body).status;
  }
  EXPECT_EQ(status, 200) << "the breaker did not close after Redis came back";
  EXPECT_EQ(metric(remote.port, "numaserve_feature_store_breaker{store=\"" + redis.url() + "\",worker=\"0\",state=\"closed\"}"), 1);
}

TEST(FeastRedis, PasswordAndDbOverTcpAndAWrongPasswordIsAClearStartUpError) {
  RedisServer redis("s3cret-pw", true);
  const std::string plain = "redis://127.0.0.1:" + std::to_string(redis.port()) + "/2";
  const fs::path password = redis.dir() / "password";
  std::ofstream(password) << "s3cret-pw\n";
  load(plain, demo_dir() / "store.jsonl", "--password-file " + password.string());
  EXPECT_NE(redis.cli("-n 2 DBSIZE").find("250"), std::string::npos);
  EXPECT_NE(redis.cli("-n 0 DBSIZE").find("0"), std::string::npos);

  const Serving remote = serve(plain, {"--feature-store-password-file", password.string()});
  ASSERT_GT(remote.pid, 0);
  const Serving embedded = serve((demo_dir() / "store.jsonl").string());
  const std::string body = request("u8", some_items(2, 15));
  EXPECT_EQ(scores(remote.port, body), scores(embedded.port, body));

  const std::string wrong = "redis://app:not-the-pw@127.0.0.1:" + std::to_string(redis.port()) + "/2";
  const auto refused = run("timeout 20 " + binary() + " serve --model-dir " + (demo_dir() / "ranker_a").string() +
                           " --feature-store '" + wrong + "' --port 0 --workers 1");
  EXPECT_EQ(refused.status, 1) << refused.output;
  EXPECT_NE(refused.output.find("redis://app:****@127.0.0.1:" + std::to_string(redis.port()) + "/2"), std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("AUTH refused"), std::string::npos) << refused.output;
  EXPECT_EQ(refused.output.find("not-the-pw"), std::string::npos) << refused.output;
}

}  // namespace
