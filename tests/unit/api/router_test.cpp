// The service's routes without a socket or LibTorch: the real router,
// handlers, batcher and embedded store around a fake model, driven as a
// worker drives them (a request, then turns), each reply caught by a test
// ReplySink. What a client relies on: statuses, bodies, headers, the order
// of the checks, readiness.
#include "api/router.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <nlohmann/json.hpp>

#include "codec/predict_json.h"
#include "fake_model.h"
#include "feature_store/embedded.h"
#include "fixture_paths.h"
#include "numaserve/common/text_file.h"

namespace numaserve::api {
namespace {

using nlohmann::json;

struct Caught {
  std::optional<http::Reply> reply;
  bool dropped = false;
};

class Sink final : public http::ReplySink {
 public:
  explicit Sink(std::shared_ptr<Caught> caught) : caught_(std::move(caught)) {}
  void send(http::Reply reply) override { caught_->reply = std::move(reply); }
  void dropped() override { caught_->dropped = true; }

 private:
  std::shared_ptr<Caught> caught_;
};

struct Setup {
  std::size_t queue_capacity = 64;
  bool admin_port = false;
  bool warm = true;
  // More versions of the fixture's model, each scoring 1000 x its number above it.
  std::vector<std::string> versions{};
};

// A one-worker service on this thread's own CPUs (so pinning changes nothing).
class Harness {
 public:
  explicit Harness(const Setup& s = {}) {
    cpu_set_t mask;
    EXPECT_EQ(pthread_getaffinity_np(pthread_self(), sizeof mask, &mask), 0);
    CpuSet own;
    for (unsigned c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &mask)) own.insert(c);
    }
    Parts parts;
    parts.config.batching.queue_capacity = s.queue_capacity;
    parts.config.warmup_rounds = 1;
    parts.config.version = "test";
    parts.placement.plan.cpus = own;
    parts.placement.plan.workers.push_back({own});
    auto model = std::make_unique<FakeModel>(fixture_spec());
    model_ = model.get();
    const auto store = testing::fixtures_dir() / "features/store.jsonl";
    entities_ = feature_store::Entities::load(store).value();  // what the test computes expected scores from
    parts.store = feature_store::EmbeddedStore::open(feature_store::Entities::load(store).value(), {&model->spec()}).value();
    parts.models.push_back(std::move(model));
    for (const auto& version : s.versions) {
      auto spec = fixture_spec();
      spec.version = version;
      auto other = std::make_unique<FakeModel>(spec);
      other->offset = 1000.f * std::stof(version);
      parts.models.push_back(std::move(other));
    }
    service_ = Service::create(std::move(parts)).value();
    router_ = std::make_unique<Router>(*service_, s.admin_port);
    router_->on_worker_start(0);
    for (std::size_t v = 0; v <= s.versions.size(); ++v) router_->on_turn(0);  // one warm-up forward per version
    if (s.warm) {
      EXPECT_TRUE(service_->readiness().wait_until_warm().has_value());
    }
  }

  // Hands a request to the router; the reply, once the worker has run the turns it needs.
  std::shared_ptr<Caught> send(std::string method, std::string path, std::string body = {}, bool admin = false) {
    auto caught = std::make_shared<Caught>();
    router_->on_request(0, http::Request{std::move(method), std::move(path), std::move(body), admin, {}},
                        http::Responder(std::make_shared<Sink>(caught)));
    return caught;
  }
  http::Reply ask(std::string method, std::string path, std::string body = {}, bool admin = false) {
    auto caught = send(std::move(method), std::move(path), std::move(body), admin);
    for (int turn = 0; turn < 10 && !caught->reply; ++turn) router_->on_turn(0);
    EXPECT_TRUE(caught->reply.has_value()) << "no reply after 10 turns";
    return caught->reply.value_or(http::Reply{});
  }
  void run_turns() {
    for (int turn = 0; turn < 10; ++turn) router_->on_turn(0);
  }

  Service& service() { return *service_; }
  Router& router() { return *router_; }
  FakeModel& model() { return *model_; }
  const feature_store::Entities& entities() const { return *entities_; }

 private:
  FakeModel* model_ = nullptr;
  std::unique_ptr<feature_store::Entities> entities_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<Router> router_;
};

const char* kPredict = R"({"request_id": "r-1", "user": {"id": "u1"}, "context": {"hour": 3},
  "items": [{"id": "i1"}, {"id": "i2", "features": {"price": 2.5}}, {"id": "nowhere"}]})";

void expect_error(const http::Reply& reply, int status, const std::string& field) {
  EXPECT_EQ(reply.status, status) << reply.body;
  EXPECT_EQ(reply.content_type, "application/json");
  const json body = json::parse(reply.body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << reply.body;
  EXPECT_TRUE(body.contains("error")) << reply.body;
  EXPECT_EQ(body.value("field", ""), field) << reply.body;
}

bool has_header(const http::Reply& reply, const std::string& name, const std::string& value) {
  for (const auto& [n, v] : reply.headers) {
    if (n == name && v == value) return true;
  }
  return false;
}

TEST(Router, PredictScoresTheRowsExtractionBuildsInRequestOrder) {
  Harness h;
  const auto reply = h.ask("POST", "/predict", kPredict);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json body = json::parse(reply.body);
  EXPECT_EQ(body["model"], h.model().spec().name);
  EXPECT_EQ(body["model_version"], h.model().spec().version);
  EXPECT_EQ(body["request_id"], "r-1");
  const auto request = codec::parse_predict_request(kPredict, {}).value();
  const auto expected = FakeModel::scores(feature_store::extract(h.model().spec(), request.features, h.entities()).value());
  EXPECT_EQ(body["scores"].get<std::vector<float>>(), expected);
}

TEST(Router, ARequestIsScoredByTheVersionItNamesOrTheLatest) {
  Harness h({.versions = {"2", "10"}});
  const auto request = codec::parse_predict_request(kPredict, {}).value();
  const auto rows = FakeModel::scores(feature_store::extract(h.model().spec(), request.features, h.entities()).value());
  auto scored = [&](const std::string& version, float offset) {
    std::string body = kPredict;
    if (!version.empty()) body.insert(1, "\"version\": " + version + ", ");
    const auto reply = h.ask("POST", "/predict", body);
    EXPECT_EQ(reply.status, 200) << reply.body;
    const json out = json::parse(reply.body);
    std::vector<float> want = rows;
    for (auto& score : want) score += offset;
    EXPECT_EQ(out["scores"].get<std::vector<float>>(), want) << version;
    return out["model_version"].get<std::string>();
  };
  EXPECT_EQ(scored("", 10000.f), "10");  // the latest by number, not by text
  EXPECT_EQ(scored("\"2\"", 2000.f), "2");
  EXPECT_EQ(scored("2", 2000.f), "2");  // a JSON number
  EXPECT_EQ(scored("\"01\"", 0.f), "01");
  expect_error(h.ask("POST", "/predict", std::string(kPredict).insert(1, "\"version\": \"7\", ")), 404, "version");
  expect_error(h.ask("POST", "/predict", std::string(kPredict).insert(1, "\"version\": [1], ")), 400, "version");
  // A label that points at a served version is a name for it, and "stable" is the default.
  EXPECT_TRUE(h.service().models().set_labels(h.model().spec().name, {{"stable", "2"}, {"canary", "10"}}).empty());
  EXPECT_EQ(scored("", 2000.f), "2");
  EXPECT_EQ(scored("\"canary\"", 10000.f), "10");
  const auto refused = h.service().models().set_labels(h.model().spec().name, {{"stable", "9"}});
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_NE(refused[0].find("version 9"), std::string::npos) << refused[0];
  EXPECT_EQ(scored("", 10000.f), "10");
  // The v2 routes per version, and the model's metadata lists every version served.
  const auto name = h.model().spec().name;
  EXPECT_EQ(h.ask("GET", "/v2/models/" + name + "/versions/2/ready").status, 200);
  expect_error(h.ask("GET", "/v2/models/" + name + "/versions/3/ready"), 404, "version");
  EXPECT_EQ(json::parse(h.ask("GET", "/v2/models/" + name).body)["versions"], json({"01", "2", "10"}));
  // Requests are counted by the version that scored them.
  const auto metrics = h.ask("GET", "/metrics").body;
  EXPECT_NE(metrics.find("numaserve_model_version_requests_total{model=\"" + name + "\",version=\"2\"} 3"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("numaserve_model_version_served{model=\"" + name + "\",version=\"10\",default=\"true\"} 1"), std::string::npos);
}

// A version removed while requests hold it: they are scored by it; new
// ones are not; it is freed when the last one has answered.
TEST(Router, ARemovedVersionFinishesTheRequestsThatHoldIt) {
  Harness h({.versions = {"2"}});
  const auto name = h.model().spec().name;
  auto held = h.send("POST", "/predict", kPredict);  // resolved to version 2, queued
  std::weak_ptr<const lifecycle::ServedVersion> removed = h.service().models().remove(name, "2");
  EXPECT_FALSE(removed.expired()) << "the queued request holds it";
  h.run_turns();
  ASSERT_TRUE(held->reply);
  EXPECT_EQ(json::parse(held->reply->body)["model_version"], "2") << held->reply->body;
  EXPECT_TRUE(removed.expired()) << "nothing holds it after its reply";
  EXPECT_EQ(json::parse(h.ask("POST", "/predict", kPredict).body)["model_version"], "01");
  expect_error(h.ask("POST", "/predict", std::string(kPredict).insert(1, "\"version\": \"2\", ")), 404, "version");
}

TEST(ModelTable, RefusesAnUnknownNameATakenVersionAndAnotherFeatureContract) {
  lifecycle::ModelTable table({fixture_spec().name});
  ASSERT_TRUE(table.add(std::make_unique<FakeModel>(fixture_spec())));
  auto other_name = fixture_spec();
  other_name.name = "elsewhere";
  other_name.version = "2";
  EXPECT_EQ(table.prepare(std::make_unique<FakeModel>(other_name)).error().field, "model");
  EXPECT_EQ(table.prepare(std::make_unique<FakeModel>(fixture_spec())).error().field, "version");
  auto reseeded = fixture_spec();
  reseeded.version = "2";
  reseeded.hash_seed += 1;
  const auto refused = table.prepare(std::make_unique<FakeModel>(reseeded));
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("hash_seed"), std::string::npos) << refused.error().message;
  auto bucketed = fixture_spec();
  bucketed.version = "3";
  bucketed.features.back().default_value = 42.0;
  EXPECT_NE(table.prepare(std::make_unique<FakeModel>(bucketed)).error().message.find("features." + bucketed.features.back().name),
            std::string::npos);
  // Prepared is not served until published.
  auto same = fixture_spec();
  same.version = "4";
  auto prepared = table.prepare(std::make_unique<FakeModel>(same)).value();
  EXPECT_FALSE(table.resolve(std::nullopt, "4"));
  table.publish(prepared);
  EXPECT_EQ(table.resolve(std::nullopt, "4").value(), prepared);
}

// What the table refuses at start is an error from Service::create, not an
// exception escaping start-up unlogged.
TEST(ModelTable, AServiceWhoseModelsItRefusesIsAnError) {
  const auto spec = fixture_spec();
  Parts parts;
  parts.placement.plan.workers.push_back({CpuSet{0}});
  parts.store = feature_store::EmbeddedStore::open(feature_store::Entities::load(testing::fixtures_dir() / "features/store.jsonl").value(),
                                                   {&spec}).value();
  auto reseeded = fixture_spec();
  reseeded.version = "2";
  reseeded.hash_seed += 1;
  parts.models.push_back(std::make_unique<FakeModel>(fixture_spec()));
  parts.models.push_back(std::make_unique<FakeModel>(reseeded));
  const auto made = Service::create(std::move(parts));
  ASSERT_FALSE(made);
  EXPECT_NE(made.error().message.find("hash_seed"), std::string::npos) << made.error().message;
}

TEST(Router, ARequestWithoutAnIdGetsOneOfItsOwn) {
  Harness h;
  const auto a = json::parse(h.ask("POST", "/predict", R"({"user": {"id": "u1"}, "items": [{"id": "i1"}]})").body);
  const auto b = json::parse(h.ask("POST", "/predict", R"({"user": {"id": "u1"}, "items": [{"id": "i1"}]})").body);
  EXPECT_EQ(a["request_id"].get<std::string>().rfind("ns-", 0), 0u) << a;
  EXPECT_NE(a["request_id"], b["request_id"]);
}

TEST(Router, RequestsThatArriveTogetherShareOneForward) {
  Harness h;
  auto first = h.send("POST", "/predict", kPredict);
  auto second = h.send("POST", "/predict", R"({"user": {"id": "u2"}, "items": [{"id": "i3"}]})");
  const std::size_t before = h.model().forwards;
  h.run_turns();
  ASSERT_TRUE(first->reply && second->reply);
  EXPECT_EQ(first->reply->status, 200) << first->reply->body;
  EXPECT_EQ(second->reply->status, 200) << second->reply->body;
  EXPECT_EQ(h.model().forwards - before, 1u);
  EXPECT_EQ(json::parse(first->reply->body)["scores"].size(), 3u);
  EXPECT_EQ(json::parse(second->reply->body)["scores"].size(), 1u);
}

TEST(Router, BadBodiesAndUnknownModelsNameTheirField) {
  Harness h;
  expect_error(h.ask("POST", "/predict", "{"), 400, "body");
  expect_error(h.ask("POST", "/predict", R"({"user": {"id": "u1"}, "items": [{"id": "i1", "features": {"price": [1]}}]})"),
               400, "items[0].features.price");
  expect_error(h.ask("POST", "/predict", R"({"model": "nope", "user": {"id": "u1"}, "items": [{"id": "i1"}]})"), 404,
               "model");
  expect_error(h.ask("POST", "/v2/models/nope/infer", "{}"), 404, "model");
  expect_error(h.ask("GET", "/v2/models/" + h.model().spec().name + "/versions/999"), 404, "version");
}

// Both inference routes admit before anything else: a full queue is a 503
// whatever the request names.
TEST(Router, AFullQueueRefusesBothRoutesBeforeTheModelIsLookedUp) {
  Harness h({.queue_capacity = 1});
  auto queued = h.send("POST", "/predict", kPredict);  // waits for the turn that never came
  for (const auto& [path, body] : std::vector<std::pair<std::string, std::string>>{
           {"/predict", R"({"model": "nope", "user": {"id": "u1"}, "items": [{"id": "i1"}]})"},
           {"/v2/models/nope/infer", "{}"}}) {
    auto refused = h.send("POST", path, body);
    ASSERT_TRUE(refused->reply.has_value()) << path;
    expect_error(*refused->reply, 503, "");
    EXPECT_TRUE(has_header(*refused->reply, "Retry-After", "1")) << path;
  }
  h.run_turns();
  ASSERT_TRUE(queued->reply.has_value());
  EXPECT_EQ(queued->reply->status, 200);
}

TEST(Router, AFailedForwardIsA500WithTheReason) {
  Harness h;
  h.model().fail = true;
  const auto reply = h.ask("POST", "/predict", kPredict);
  expect_error(reply, 500, "");
  EXPECT_NE(reply.body.find("forward failed: fake"), std::string::npos) << reply.body;
}

TEST(Router, ReadinessFollowsWarmUpAndTheDrain) {
  Harness h({.warm = false});
  EXPECT_EQ(h.ask("GET", "/healthz").status, 200);
  const auto cold = h.ask("GET", "/readyz");
  expect_error(cold, 503, "");
  EXPECT_NE(cold.body.find("warming up"), std::string::npos) << cold.body;
  expect_error(h.ask("POST", "/predict", kPredict), 503, "");
  EXPECT_EQ(h.ask("GET", "/v2/health/ready").status, 503);

  ASSERT_TRUE(h.service().readiness().wait_until_warm().has_value());
  EXPECT_EQ(h.ask("GET", "/readyz").status, 200);
  EXPECT_EQ(h.ask("GET", "/v2/health/ready").body, R"({"ready":true})");

  h.service().readiness().begin_drain();
  const auto draining = h.ask("GET", "/readyz");
  EXPECT_NE(draining.body.find("draining"), std::string::npos) << draining.body;
  EXPECT_EQ(h.ask("POST", "/predict", kPredict).status, 200);  // still served while draining
}

TEST(Router, UnknownPathsAndMethodsAreRefusedByName) {
  Harness h;
  expect_error(h.ask("GET", "/nowhere"), 404, "path");
  const auto wrong = h.ask("GET", "/predict");
  expect_error(wrong, 405, "method");
  EXPECT_TRUE(has_header(wrong, "Allow", "POST"));
  EXPECT_EQ(h.ask("HEAD", "/healthz").status, 200);  // a GET route answers HEAD
}

TEST(Router, WithAnAdminPortEachRouteAnswersOnItsOwnPort) {
  Harness h({.admin_port = true});
  const auto metrics_on_main = h.ask("GET", "/metrics");
  expect_error(metrics_on_main, 404, "path");
  EXPECT_NE(metrics_on_main.body.find("it is on the admin port"), std::string::npos) << metrics_on_main.body;
  expect_error(h.ask("POST", "/predict", kPredict, true), 404, "path");
  EXPECT_EQ(h.ask("GET", "/metrics", {}, true).status, 200);
  EXPECT_EQ(h.ask("GET", "/healthz", {}, true).status, 200);
  EXPECT_EQ(h.ask("GET", "/healthz").status, 200);
}

TEST(Router, MetricsCountEveryReplyByRouteAndStatus) {
  Harness h;
  h.ask("POST", "/predict", kPredict);
  h.ask("POST", "/predict", "{");
  h.ask("GET", "/nowhere");
  const auto text = h.ask("GET", "/metrics").body;
  EXPECT_NE(text.find(R"(numaserve_requests_total{route="/predict",code="200"} 1)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(numaserve_requests_total{route="/predict",code="400"} 1)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(numaserve_requests_total{route="other",code="404"} 1)"), std::string::npos) << text;
}

TEST(Router, TheTransportsRefusalsHaveTheServicesErrorShape) {
  Harness h;
  const auto reply = h.router().refusal(431, "header too large", "header");
  EXPECT_EQ(reply.status, 431);
  EXPECT_EQ(reply.body, R"({"error":"header too large","field":"header"})");
  EXPECT_EQ(h.router().refusal(408, "too slow", "").body, R"({"error":"too slow"})");
}

// What the repository routes ask of the manager, recorded; each call answered
// at once, the load of "broken" with an error.
class FakeControl final : public lifecycle::RepositoryControl {
 public:
  std::vector<lifecycle::RepositoryEntry> index() const override {
    return {{"ranker", "1", lifecycle::VersionState::kReady, ""},
            {"ranker", "2", lifecycle::VersionState::kUnavailable, "model.pt: not a TorchScript archive"}};
  }
  void load(const std::string& name, std::function<void(Status)> done) override {
    calls.push_back("load " + name);
    done(name == "broken" ? Status(make_error(Error::Code::kInvalidArgument, "broken: version 3: no model.pt", "version")) : Status{});
  }
  void unload(const std::string& name, std::function<void(Status)> done) override {
    calls.push_back("unload " + name);
    done({});
  }
  std::vector<std::string> calls;
};

TEST(Router, RepositoryRoutesAreOnTheAdminPortOnlyAndTakeNamesNotPaths) {
  for (const bool admin_port : {false, true}) {
    Harness h({.admin_port = admin_port});
    FakeControl control;
    h.service().attach(control);
    // Without an admin port nobody may change what is served; with one, only there.
    expect_error(h.ask("POST", "/v2/repository/index"), 404, "path");
    expect_error(h.ask("POST", "/v2/repository/models/ranker/load"), 404, "path");
    expect_error(h.ask("POST", "/v2/repository/models/ranker/unload"), 404, "path");
    if (!admin_port) continue;
    const auto index = h.ask("POST", "/v2/repository/index", {}, true);
    ASSERT_EQ(index.status, 200) << index.body;
    const json entries = json::parse(index.body);
    ASSERT_EQ(entries.size(), 2u);
    EXPECT_EQ(entries[1]["state"], "UNAVAILABLE");
    EXPECT_EQ(entries[1]["reason"], "model.pt: not a TorchScript archive");
    EXPECT_FALSE(entries[0].contains("reason"));
    const auto ready = json::parse(h.ask("POST", "/v2/repository/index", R"({"ready": true})", true).body);
    ASSERT_EQ(ready.size(), 1u);
    EXPECT_EQ(ready[0]["version"], "1");
    expect_error(h.ask("POST", "/v2/repository/index", R"({"ready": 1})", true), 400, "ready");
    expect_error(h.ask("POST", "/v2/repository/index", "[", true), 400, "body");

    EXPECT_EQ(h.ask("POST", "/v2/repository/models/ranker/load", {}, true).status, 200);
    EXPECT_EQ(h.ask("POST", "/v2/repository/models/ranker/unload", {}, true).status, 200);
    expect_error(h.ask("POST", "/v2/repository/models/broken/load", {}, true), 400, "version");
    for (const char* name : {"..", ".hidden"}) {
      expect_error(h.ask("POST", std::string("/v2/repository/models/") + name + "/load", {}, true), 400, "name");
    }
    expect_error(h.ask("POST", "/v2/repository/models/a/b/load", {}, true), 404, "path");
    EXPECT_EQ(control.calls, (std::vector<std::string>{"load ranker", "unload ranker", "load broken"}));
    expect_error(h.ask("GET", "/v2/repository/index", {}, true), 405, "method");
  }
}

TEST(Router, WithoutARepositoryTheRoutesSaySo) {
  Harness h({.admin_port = true});
  const auto reply = h.ask("POST", "/v2/repository/index", {}, true);
  expect_error(reply, 404, "model_repository");
}

}  // namespace
}  // namespace numaserve::api
