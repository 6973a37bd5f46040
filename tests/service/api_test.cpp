// The service over a real socket on loopback: real models, real HTTP.
#include "api/router.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <random>
#include <thread>

#include "codec/predict_json.h"
#include "demo_dir.h"
#include "feature_store/embedded.h"
#include "graph/kernel_path.h"
#include "http/server.h"
#include "model/model.h"
#include "numaserve/common/topology.h"

namespace numaserve::api {
namespace {

using nlohmann::json;
using numaserve::testing::demo_dir;

struct Options {
  std::size_t queue_capacity = 64;
  std::size_t max_items = 2000;
  std::size_t max_body_bytes = 8u << 20;
  unsigned workers = 0;
  int admin_port = -1;
  std::chrono::microseconds max_batch_delay{0};
  std::size_t priority_levels = 1;
  std::vector<batching::LevelPolicy> policies;
  std::string ranker_a_yaml;  // lines added to ranker_a's model.yaml
};

// A service as `numaserve serve` builds it: placement read from this
// process, threads planned on this machine, both demo models, each worker
// an event loop of the server on loopback.
class Running {
 public:
  explicit Running(const Options& o = {}) {
    auto placement = discover_placement("/");
    auto topology = discover_topology(TopologySource::live());
    EXPECT_TRUE(placement && topology);
    auto plan = threads::plan_threads(*placement, *topology, {o.workers, 0});
    EXPECT_TRUE(plan.has_value()) << plan.error().message;
    PlacementReport report;
    report.plan = *plan;
    report.instance = "test";
    std::vector<std::unique_ptr<Model>> models;
    const auto ranker_a = o.ranker_a_yaml.empty() ? demo_dir() / "ranker_a" : testing::ranker_a_with(o.ranker_a_yaml);
    for (const auto& dir : {ranker_a, demo_dir() / "ranker_b"}) models.push_back(std::move(*model::TorchModel::load(dir)));
    http::ServerConfig server_config;
    server_config.host = "127.0.0.1";
    server_config.port = 0;
    server_config.workers = plan->workers.size();
    server_config.max_body_bytes = o.max_body_bytes;
    server_config.admin_port = o.admin_port;
    server_ = std::make_unique<http::Server>(server_config);
    Parts parts;
    parts.config.limits.max_items = o.max_items;
    parts.config.batching.queue_capacity = o.queue_capacity;
    parts.config.batching.max_batch_delay = o.max_batch_delay;
    parts.config.batching.priority_levels = o.priority_levels;
    parts.config.batching.policies = o.policies;
    parts.config.warmup_rounds = 1;
    parts.config.version = "test";
    parts.placement = std::move(report);
    std::vector<const features::ModelSpec*> specs;
    for (const auto& m : models) specs.push_back(&m->spec());
    parts.store = std::move(*feature_store::EmbeddedStore::open(
        std::move(*feature_store::Entities::load(demo_dir() / "store.jsonl")), specs));
    parts.models = std::move(models);
    parts.prepare_worker_thread = model::set_intra_op_threads;
    service_ = Service::create(std::move(parts)).value();
    router_ = std::make_unique<Router>(*service_, o.admin_port >= 0);
    EXPECT_TRUE(server_->start(*router_).has_value());
    EXPECT_TRUE(service_->readiness().wait_until_warm().has_value());
  }
  ~Running() { server_->stop(); }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(30, 0);
    return c;
  }
  httplib::Client admin_client() const {
    httplib::Client c("127.0.0.1", server_->admin_port());
    c.set_read_timeout(30, 0);
    return c;
  }
  Service& service() { return *service_; }

 private:
  std::unique_ptr<http::Server> server_;  // before the service, whose workers it runs
  std::unique_ptr<Service> service_;
  std::unique_ptr<Router> router_;
};

Running& shared() {
  static Running running;
  return running;
}

const char* kPredict = R"({"request_id": "r-1", "user": {"id": "u3", "features": {"age": 40}},
  "context": {"hour": 21, "device": "android"},
  "items": [{"id": "i1"}, {"id": "i42", "features": {"price": 9.5, "tags": ["t1", "t2"]}}, {"id": "not-in-store"}]})";

void expect_error(const httplib::Result& res, int status, const std::string& field) {
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, status) << res->body;
  const json body = json::parse(res->body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << res->body;
  EXPECT_TRUE(body.contains("error")) << res->body;
  EXPECT_EQ(body.value("field", ""), field) << res->body;
}

TEST(Predict, ScoresEqualADirectForwardOnTheSameTensors) {
  auto client = shared().client();
  auto res = client.Post("/predict", kPredict, "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json body = json::parse(res->body);
  EXPECT_EQ(body["model"], "ranker_a");  // the first model is the default
  EXPECT_EQ(body["model_version"], "1");
  EXPECT_EQ(body["request_id"], "r-1");

  auto request = codec::parse_predict_request(kPredict, {});
  ASSERT_TRUE(request.has_value());
  auto direct = model::TorchModel::load(demo_dir() / "ranker_a");
  auto store = feature_store::Entities::load(demo_dir() / "store.jsonl");
  auto batch = feature_store::extract((*direct)->spec(), request->features, **store);
  ASSERT_TRUE(batch.has_value());
  const auto expected = (*direct)->forward(*batch).value();
  const auto scores = body["scores"].get<std::vector<float>>();
  ASSERT_EQ(scores.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(scores[i], expected[i]) << i;
}

TEST(Predict, SelectsTheModelAndGeneratesARequestId) {
  auto client = shared().client();
  auto res = client.Post("/predict", R"({"model": "ranker_b", "user": {"id": "u1"}, "items": [{"id": "i1"}]})",
                         "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json body = json::parse(res->body);
  EXPECT_EQ(body["model"], "ranker_b");
  EXPECT_FALSE(body["request_id"].get<std::string>().empty());
  EXPECT_EQ(body["scores"].size(), 1u);
}

TEST(AdminPort, OperatorsReadMetricsAndPlacementThereAndClientsCannot) {
  Options o;
  o.admin_port = 0;
  Running running(o);
  auto data = running.client();
  auto admin = running.admin_client();
  // Data on the main port only; what the host looks like on the admin one only.
  auto scored = data.Post("/predict", kPredict, "application/json");
  ASSERT_TRUE(scored);
  EXPECT_EQ(scored->status, 200) << scored->body;
  expect_error(admin.Post("/predict", kPredict, "application/json"), 404, "path");
  expect_error(admin.Post("/v2/models/ranker_a/infer", "{}", "application/json"), 404, "path");
  for (const char* path : {"/metrics", "/placement"}) {
    auto res = admin.Get(path);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << path;
    expect_error(data.Get(path), 404, "path");
    EXPECT_NE(data.Get(path)->body.find("it is on the admin port"), std::string::npos);
  }
  // Probes answer on both, so a kubelet may use either.
  for (auto* client : {&data, &admin}) {
    for (const char* path : {"/healthz", "/readyz", "/v2/health/ready"}) {
      auto res = client->Get(path);
      ASSERT_TRUE(res);
      EXPECT_EQ(res->status, 200) << path;
    }
  }
  // The admin port's requests are counted like any other.
  EXPECT_NE(admin.Get("/metrics")->body.find("numaserve_requests_total{route=\"/predict\",code=\"200\"}"),
            std::string::npos);
}

TEST(V2, InferOnExtractedTensorsEqualsPredict) {
  auto client = shared().client();
  auto request = codec::parse_predict_request(kPredict, {});
  auto direct = model::TorchModel::load(demo_dir() / "ranker_a");
  auto store = feature_store::Entities::load(demo_dir() / "store.jsonl");
  const auto& spec = (*direct)->spec();
  const auto batch = feature_store::extract(spec, request->features, **store).value();
  json inputs = json::array();
  auto tensor = [](const std::string& name, const char* type, json shape, json data) {
    return json{{"name", name}, {"datatype", type}, {"shape", std::move(shape)}, {"data", std::move(data)}};
  };
  inputs.push_back(tensor("dense", "FP32", {batch.rows, batch.dense_width}, batch.dense));
  const auto sparse = spec.sparse_features();
  for (std::size_t k = 0; k < sparse.size(); ++k) {
    const std::string stem = std::string(features::to_string(sparse[k]->source)) + "_" + sparse[k]->name;
    inputs.push_back(tensor(stem + "_indices", "INT64", {batch.bags[k].indices.size()}, batch.bags[k].indices));
    inputs.push_back(tensor(stem + "_offsets", "INT64", {batch.rows}, batch.bags[k].offsets));
  }
  auto res = client.Post("/v2/models/ranker_a/infer", json{{"id", "v2-1"}, {"inputs", inputs}}.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json body = json::parse(res->body);
  EXPECT_EQ(body["id"], "v2-1");
  EXPECT_EQ(body["model_name"], "ranker_a");
  EXPECT_EQ(body["outputs"][0]["name"], "score");
  // The same float32 scores (each reply spells them its own way: /predict
  // as the shortest text of the float32, v2 as its double).
  const auto predicted = json::parse(client.Post("/predict", kPredict, "application/json")->body)["scores"];
  EXPECT_EQ(body["outputs"][0]["data"].get<std::vector<float>>(), predicted.get<std::vector<float>>());

  // The same tensors with one index past its table's end.
  inputs[1]["data"][0] = spec.tables.at(sparse[0]->table);
  expect_error(client.Post("/v2/models/ranker_a/infer", json{{"inputs", inputs}}.dump(), "application/json"), 400,
               "inputs[1].data[0]");
  inputs.erase(inputs.begin() + 2);
  expect_error(client.Post("/v2/models/ranker_a/infer", json{{"inputs", inputs}}.dump(), "application/json"), 400,
               "inputs");
}

TEST(Routes, HealthReadinessMetadataMetricsPlacement) {
  auto client = shared().client();
  for (const char* path : {"/healthz", "/readyz", "/v2", "/v2/health/live", "/v2/health/ready", "/v2/models/ranker_a",
                           "/v2/models/ranker_a/ready", "/v2/models/ranker_b/versions/1", "/metrics", "/placement"}) {
    auto res = client.Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 200) << path << ": " << res->body;
  }
  const json meta = json::parse(client.Get("/v2/models/ranker_a")->body);
  EXPECT_EQ(meta["name"], "ranker_a");
  EXPECT_EQ(meta["inputs"].size(), 1 + 2 * 9u);  // dense + indices/offsets per embedding-bag feature
  EXPECT_EQ(json::parse(client.Get("/v2")->body)["name"], "numaserve");

  ASSERT_EQ(client.Post("/predict", kPredict, "application/json")->status, 200);
  const std::string metrics = client.Get("/metrics")->body;
  for (const char* line : {"numaserve_requests_total{route=\"/predict\",code=\"200\"}",
                           "numaserve_stage_seconds_count{model=\"ranker_a\",stage=\"forward\"}",
                           "numaserve_stage_seconds_count{model=\"ranker_a\",stage=\"query\"}",
                           "numaserve_batch_items_count", "numaserve_queue_depth 0", "numaserve_placement_info{",
                           "numaserve_threads{kind=\"inference\"}", "numaserve_model_weights_local_ratio{model=\"ranker_a\"} 1",
                           "numaserve_model_version_precision{model=\"ranker_a\",version=\"1\",requested=\"fp32\",served=\"fp32\",tables=\"fp32\"} 1",
                           "numaserve_model_version_linear_layers{model=\"ranker_a\",version=\"1\",path=\"libtorch\"} 0",
                           "numaserve_blas_info{best=\""}) {
    EXPECT_NE(metrics.find(line), std::string::npos) << line;
  }
  EXPECT_NE(metrics.find("numaserve_model_version_linear_layers{model=\"ranker_a\",version=\"1\",path=\"" + graph::kernel_isa() +
                         "\"} 5"),
            std::string::npos);

  // /placement reports what the kernel says about this process.
  const json placement = json::parse(client.Get("/placement")->body);
  const auto own = discover_placement("/").value();
  EXPECT_EQ(placement["cpus"], own.cpus().to_list());
  EXPECT_EQ(placement["mems"], own.mems().to_list());
  std::size_t workers = 0;
  for (const auto& t : placement["threads"]) {
    if (t["name"].get<std::string>().rfind("ns-worker-", 0) != 0) continue;
    ++workers;
    const auto allowed = CpuSet::parse_list(t["allowed_cpus"].get<std::string>()).value();
    EXPECT_TRUE((allowed & own.cpus()) == allowed) << t.dump();
  }
  EXPECT_GE(workers, placement["workers"].size());
  for (const auto& m : placement["models"]) {
    EXPECT_DOUBLE_EQ(m["local_fraction"].get<double>(), 1.0) << m.dump();  // one node here: all local
    EXPECT_GT(m["weight_bytes"].get<std::size_t>(), 0u);
    EXPECT_EQ(m["precision"], json({{"requested", "fp32"}, {"served", "fp32"}, {"tables", "fp32"}})) << m.dump();  // the default
    // What --graph-optimizations did, per model: both demo models have
    // embedding bags to fuse, an MLP (ranker_a two: bottom and top) and a
    // sigmoid, and ranker_a its dot interaction.
    const bool a = m["name"] == "ranker_a";
    const auto& graph = m["graph_optimizations"];
    EXPECT_EQ(graph["state"], "optimized") << m.dump();
    const std::map<std::string, std::size_t> sites = {
        {"dot_interaction", a ? 1 : 0}, {"embedding_bags", 1}, {"linear_chains", a ? 2 : 1}, {"elementwise", 1}};
    for (const auto& rewrite : graph["rewrites"]) {
      EXPECT_EQ(rewrite["applied"].size(), sites.at(rewrite["name"].get<std::string>())) << m.dump();
    }
    // Where its linear layers run: all on numaserve's kernels, on this CPU's path.
    EXPECT_EQ(m["linear"]["own_layers"], a ? 5 : 3) << m.dump();
    EXPECT_EQ(m["linear"]["libtorch_layers"], 0) << m.dump();
    EXPECT_EQ(m["linear"]["kernels"], graph::kernel_isa()) << m.dump();
    EXPECT_NE(m["linear"]["blas"].get<std::string>().find("core "), std::string::npos) << m.dump();
  }
}

struct BadCase {
  const char* name;
  const char* method;
  const char* path;
  std::string body;
  int status;
  const char* field;
};

TEST(Errors, EachClassGetsItsStatusAndNamesTheField) {
  const std::vector<BadCase> cases = {
      {"malformed JSON", "POST", "/predict", "{\"user\": ", 400, "body"},
      {"not an object", "POST", "/predict", "[1, 2]", 400, "body"},
      {"items of the wrong type", "POST", "/predict", R"({"user": {"id": "u1"}, "items": "i1"})", 400, "items"},
      {"user id of the wrong type", "POST", "/predict", R"({"user": {"id": [1]}, "items": [{"id": "i1"}]})", 400, "user.id"},
      {"unknown feature", "POST", "/predict", R"({"user": {"id": "u1"}, "items": [{"id": "i1", "features": {"colour": "red"}}]})",
       400, "items[0].features.colour"},
      {"feature of the wrong type", "POST", "/predict",
       R"({"user": {"id": "u1"}, "items": [{"id": "i1", "features": {"price": "cheap"}}]})", 400, "items[0].features.price"},
      {"empty items", "POST", "/predict", R"({"user": {"id": "u1"}, "items": []})", 400, "items"},
      {"too many items", "POST", "/predict",
       [] {
         json items = json::array();
         for (int i = 0; i < 2001; ++i) items.push_back({{"id", i}});
         return json{{"user", {{"id", "u1"}}}, {"items", items}}.dump();
       }(),
       400, "items"},
      {"NaN", "POST", "/predict", R"({"user": {"id": "u1"}, "items": [{"id": "i1", "features": {"price": NaN}}]})", 400, "body"},
      {"Infinity", "POST", "/predict", R"({"user": {"id": "u1"}, "items": [{"id": "i1", "features": {"price": 1e999}}]})",
       400, "body"},  // nlohmann refuses numbers beyond double's range
      {"unknown model", "POST", "/predict", R"({"model": "nope", "user": {"id": "u1"}, "items": [{"id": "i1"}]})", 404, "model"},
      {"unknown v2 model", "GET", "/v2/models/nope", "", 404, "model"},
      {"wrong v2 version", "GET", "/v2/models/ranker_a/versions/9", "", 404, "version"},
      {"wrong method", "GET", "/predict", "", 405, "method"},
      {"wrong method on infer", "GET", "/v2/models/ranker_a/infer", "", 405, "method"},
      {"unknown path", "GET", "/nope", "", 404, "path"},
      {"body over the limit", "POST", "/predict", std::string(10u << 20, ' '), 413, "body"},
  };
  auto client = shared().client();
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto res = std::string(c.method) == "GET" ? client.Get(c.path) : client.Post(c.path, c.body, "application/json");
    expect_error(res, c.status, c.field);
    if (c.status == 405) {
      ASSERT_TRUE(res);
      EXPECT_TRUE(res->has_header("Allow"));
    }
  }
}

TEST(Errors, HostileBodiesNeverCrashOrHang) {
  auto client = shared().client();
  std::mt19937 rng(1);
  std::string noise(64 * 1024, '\0');
  for (auto& c : noise) c = static_cast<char>(rng());
  std::vector<std::string> bodies = {noise, std::string(100000, '[') , std::string(100000, '{'),
                                     "{\"user\": {\"id\": \"u1\"}, \"items\": [" + std::string(200000, '[') + "]}"};
  json many = json::array();
  for (int i = 0; i < 100000; ++i) many.push_back({{"id", i}});
  bodies.push_back(json{{"user", {{"id", "u1"}}}, {"items", many}}.dump());
  for (const auto& body : bodies) {
    auto res = client.Post("/predict", body, "application/json");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 400) << res->body.substr(0, 200);
    auto infer = client.Post("/v2/models/ranker_a/infer", body, "application/json");
    ASSERT_TRUE(infer);
    EXPECT_EQ(infer->status, 400);
  }
  EXPECT_EQ(client.Get("/healthz")->status, 200);
}

TEST(Overload, AFullQueueAnswers503WithRetryAfter) {
  Options o;
  o.queue_capacity = 0;  // every request finds the queue full
  Running running(o);
  auto res = running.client().Post("/predict", kPredict, "application/json");
  expect_error(res, 503, "");
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
}

// Priority levels as a client names them: "parameters" on /predict and v2
// infer, checked against the server's levels, each level counted apart; a
// request naming none takes its model's level (model.yaml), else the
// server's default.
TEST(Priority, ALevelOrTimeoutOutOfRangeIsA400NamingTheParameterAndEachLevelIsCounted) {
  Options o;
  o.admin_port = 0;
  o.priority_levels = 2;
  o.ranker_a_yaml = "priority: 1\n";
  o.policies.resize(1);
  o.policies[0].timeout = std::chrono::milliseconds(50);
  o.policies[0].allow_timeout_override = true;
  Running running(o);
  auto client = running.client();
  const auto with = [](const std::string& parameters, const std::string& model = "ranker_a") {
    return R"({"model": ")" + model + R"(", "user": {"id": "u3"}, "items": [{"id": "i1"}], "parameters": )" + parameters + "}";
  };
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"priority": 3})", "parameters.priority"},     {R"({"priority": 0})", "parameters.priority"},
      {R"({"priority": "1"})", "parameters.priority"},   {R"({"priority": 1.5})", "parameters.priority"},
      {R"({"timeout": -1})", "parameters.timeout"},      {R"({"priority": 1, "timeout": 50001})", "parameters.timeout"},
      {R"({"deadline": 5})", "parameters.deadline"},     {R"([1])", "parameters"},
  };
  for (const auto& [parameters, field] : bad) {
    SCOPED_TRACE(parameters);
    expect_error(client.Post("/predict", with(parameters), "application/json"), 400, field);
  }
  // v2 infer's parameters are read before its tensors; their range is checked as /predict's.
  const json infer{{"inputs", json::array()}, {"parameters", {{"priority", "high"}}}};
  expect_error(client.Post("/v2/models/ranker_a/infer", infer.dump(), "application/json"), 400, "parameters.priority");

  const std::vector<std::pair<std::string, std::string>> served = {
      {R"({"priority": 1, "timeout": 50000})", "ranker_a"},
      {R"({"priority": 2})", "ranker_a"},  // its own level over its model's
      {R"({})", "ranker_a"},               // its model's: 1
      {R"({})", "ranker_b"},               // the server's default: the lowest
  };
  for (const auto& [parameters, model] : served) {
    auto res = client.Post("/predict", with(parameters, model), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << parameters << ": " << res->body;
  }
  const auto metrics = running.admin_client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("numaserve_priority_answered_total{priority=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(metrics->body.find("numaserve_priority_request_seconds_count{priority=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(metrics->body.find("numaserve_priority_answered_total{priority=\"2\"} 2\n"), std::string::npos);
  EXPECT_NE(metrics->body.find("numaserve_priority_refused_total{priority=\"2\"} 0\n"), std::string::npos);
}

TEST(Drain, NotReadyButStillAnswering) {
  Running running;
  auto client = running.client();
  running.service().readiness().begin_drain();
  expect_error(client.Get("/readyz"), 503, "");
  EXPECT_EQ(json::parse(client.Get("/v2/health/ready")->body)["ready"], false);
  EXPECT_EQ(client.Get("/healthz")->status, 200);
  EXPECT_EQ(client.Post("/predict", kPredict, "application/json")->status, 200);
}

// Each of eight different requests answered alone, then all eight sent at
// once and joined into shared forwards: every reply is the same bytes as
// its request's alone. Every op of the forward reduces a row's outputs in an
// order that does not depend on the rows beside it (graph.h).
TEST(DynamicBatching, JoinedRequestsGetTheSameBytesAsAlone) {
  Options o;
  o.workers = 1;
  // A forward waits this long for more after its first request, so eight
  // clients sending at once are joined whatever the machine's speed.
  o.max_batch_delay = std::chrono::milliseconds(200);
  Running running(o);
  std::vector<std::string> bodies;
  for (int r = 0; r < 8; ++r) {
    json body = {{"request_id", "r-" + std::to_string(r)},
                 {"user", {{"id", "u" + std::to_string(r * 7)}}},
                 {"context", {{"hour", r * 3}, {"device", r % 2 == 0 ? "ios" : "android"}}},
                 {"items", json::array()}};
    for (int i = 0; i < 20 + 13 * r; ++i) body["items"].push_back({{"id", "i" + std::to_string((i * 5 + r) % 200)}});
    bodies.push_back(body.dump());
  }
  std::vector<std::string> alone;
  for (const auto& body : bodies) {
    auto res = running.client().Post("/predict", body, "application/json");
    ASSERT_TRUE(res && res->status == 200);
    alone.push_back(res->body);
  }
  const auto before = running.service().gauges().workers.at(0);
  std::vector<std::thread> threads;
  std::vector<std::string> joined(bodies.size());
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    threads.emplace_back([&, i] {
      auto res = running.client().Post("/predict", bodies[i], "application/json");
      if (res && res->status == 200) joined[i] = res->body;
    });
  }
  for (auto& t : threads) t.join();
  const auto after = running.service().gauges().workers.at(0);
  EXPECT_EQ(after.forward_requests - before.forward_requests, bodies.size());
  EXPECT_LT(after.forwards - before.forwards, bodies.size()) << "no two requests shared a forward";
  for (std::size_t i = 0; i < bodies.size(); ++i) EXPECT_EQ(joined[i], alone[i]) << "request " << i;
}

}  // namespace
}  // namespace numaserve::api
