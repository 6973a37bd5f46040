#pragma once
// What the Redis store's process tests share, one server or a cluster: the
// real binary serving ranker_a from a store, `feature-store load`, requests
// of the demo store's ids, their answers, timing and /metrics.

#include <httplib.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "demo_dir.h"
#include "served.h"

namespace numaserve::testing {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Ran {
  int status;
  std::string output;
};

inline Ran run(const std::string& command) {
  Ran r{-1, {}};
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  while (std::size_t n = fread(buffer, 1, sizeof buffer, pipe)) r.output.append(buffer, n);
  const int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline std::string binary() { return NUMASERVE_BINARY; }

// Writes the JSON Lines store into Redis with `numaserve feature-store load`.
inline void load(const std::string& url, const fs::path& store = demo_dir() / "store.jsonl", const std::string& extra = "") {
  const auto r = run(binary() + " feature-store load " + store.string() + " --to '" + url + "' " + extra);
  ASSERT_EQ(r.status, 0) << r.output;
}

// A service that is stopped however its test ends, a failed assertion included.
struct Serving : Served {
  ~Serving() {
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    wait_exit(pid, 20);
  }
};

inline Serving serve(const std::string& store, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"serve", "--model-dir", (demo_dir() / "ranker_a").string(), "--feature-store", store,
                                   "--port", "0", "--listen-address", "127.0.0.1", "--workers", "1", "--warmup-rounds",
                                   "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return Serving{start_served(binary(), args, "msg=ready")};
}

inline std::string request(const std::string& user, const std::vector<std::string>& items) {
  json body{{"user", {{"id", user}}}, {"context", {{"hour", 9}}}, {"items", json::array()}};
  for (const auto& id : items) body["items"].push_back({{"id", id}});
  return body.dump();
}

struct Answer {
  int status = 0;  // 0: no answer
  std::string body;
  std::string retry_after;
  double seconds = 0;
};

inline Answer post(int port, const std::string& body) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(10, 0);
  const auto start = Clock::now();
  auto res = client.Post("/predict", body, "application/json");
  Answer a;
  a.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!res) return a;
  a.status = res->status;
  a.body = res->body;
  a.retry_after = res->get_header_value("Retry-After");
  return a;
}

inline json scores(int port, const std::string& body) {
  const Answer a = post(port, body);
  EXPECT_EQ(a.status, 200) << a.body;
  return a.status == 200 ? json::parse(a.body)["scores"] : json();
}

// The scores of `body` once they are `healthy` again, or the last ones
// after `seconds`: a service recovering by itself.
inline json scores_once_back(int port, const std::string& body, const json& healthy, int seconds) {
  json got;
  for (auto deadline = Clock::now() + std::chrono::seconds(seconds); Clock::now() < deadline && got != healthy;) {
    got = scores(port, body);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return got;
}

// One sample of the service's /metrics, by its name and labels' text.
inline double metric(int port, const std::string& sample) {
  httplib::Client client("127.0.0.1", port);
  auto res = client.Get("/metrics");
  if (!res) return -1;
  const auto at = res->body.find("\n" + sample + " ");
  if (at == std::string::npos) return -1;
  return std::stod(res->body.substr(at + sample.size() + 2));
}

// A sample of /metrics's feature store families by its name: the store's
// URL (redacted) and more labels.
inline std::string counter(const std::string& family, const std::string& url, const std::string& labels = "") {
  return family + "{store=\"" + url + "\"" + (labels.empty() ? "" : "," + labels) + "}";
}

// Users and items of the demo store, some unknown to it.
inline std::vector<std::string> some_items(int from, int count) {
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) out.push_back("i" + std::to_string((from + 7 * i) % 230));  // i200.. are unknown
  return out;
}

}  // namespace numaserve::testing
