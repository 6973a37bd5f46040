#include "api/service.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "http/predict_json.h"
#include "http/v2_json.h"
#include "numaserve/common/numa_maps.h"
#include "numaserve/common/text_file.h"

namespace numaserve::api {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

http::Reply json_reply(int status, std::string body) {
  http::Reply reply;
  reply.status = status;
  reply.body = std::move(body);
  return reply;
}

http::Reply error_reply(int status, const std::string& message, const std::string& field = {}) {
  return json_reply(status, http::error_json(Error{Error::Code::kInvalidArgument, message, field}));
}

http::Reply error_reply(int status, const Error& error) { return json_reply(status, http::error_json(error)); }

// 503s tell well-behaved clients when to come back.
http::Reply unavailable(const std::string& message) {
  auto reply = error_reply(503, message);
  reply.headers.emplace_back("Retry-After", "1");
  return reply;
}

http::Reply text_reply(std::string body, std::string content_type = "text/plain; charset=utf-8") {
  http::Reply reply;
  reply.body = std::move(body);
  reply.content_type = std::move(content_type);
  return reply;
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::size_t start = 1;
  while (start <= path.size()) {
    const auto end = path.find('/', start);
    parts.push_back(path.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return parts;
}

json pages_json(const std::map<unsigned, std::uint64_t>& per_node) {
  json out = json::object();
  for (const auto& [node, pages] : per_node) out[std::to_string(node)] = pages;
  return out;
}

}  // namespace

Service::Service(ServiceConfig config, PlacementReport placement, std::vector<std::unique_ptr<model::Model>> models,
                 std::unique_ptr<features::FeatureStore> store)
    : config_(std::move(config)),
      placement_(std::move(placement)),
      models_(std::move(models)),
      store_(std::move(store)),
      request_id_prefix_("ns-" + std::to_string(getpid()) + "-"),
      metrics_([this] {
        std::vector<std::string> names;
        for (const auto& m : models_) names.push_back(m->spec().name);
        return names;
      }()) {
  for (const auto& m : models_) {
    auto cache = features::ItemCache::build(m->spec(), *store_);
    if (!cache) {
      // A store value the model cannot read ("model ranker_a: feature store
      // item 'i7' price: want a number"): refuse to turn ready.
      warm_error_ = cache.error();
      item_caches_.emplace_back();
      continue;
    }
    item_caches_.emplace_back(std::move(*cache));
  }
  auto scheduler = config_.scheduler;
  scheduler.workers = placement_.plan.workers.size();
  scheduler_ = std::make_unique<batching::Scheduler>(
      scheduler,
      [this](std::size_t model, const features::Batch& batch, std::size_t requests) {
        metrics_.observe_batch(batch.rows, requests);
        return models_[model]->forward(batch);
      },
      [this](std::size_t worker) { worker_start(worker); });
}

Service::~Service() { stop_workers(); }

void Service::worker_start(std::size_t worker) {
  // Pin first: the OpenMP team the first forward creates inherits the
  // worker's CPUs, and the buffers it touches land on the worker's node.
  std::optional<Error> failed;
  if (auto bound = placement::bind_current_thread(placement_.plan.workers[worker].cpus); !bound) failed = bound.error();
  model::set_intra_op_threads(placement_.plan.intra_op_threads);
  for (const auto& m : models_) {
    if (failed) break;
    if (auto warm = m->warm_up(config_.warmup_rows, config_.warmup_rounds); !warm) failed = warm.error();
  }
  std::lock_guard lock(warm_mutex_);
  if (failed && !warm_error_) warm_error_ = *failed;
  ++warm_workers_;
  warm_cv_.notify_all();
}

Status Service::wait_until_warm() {
  std::unique_lock lock(warm_mutex_);
  warm_cv_.wait(lock, [this] { return warm_workers_ == placement_.plan.workers.size(); });
  if (warm_error_) return tl::unexpected(*warm_error_);
  warm_ = true;
  update_ready();
  return {};
}

void Service::open_group() {
  group_open_ = true;
  update_ready();
}

void Service::begin_drain() {
  draining_ = true;
  update_ready();
}

void Service::update_ready() { ready_ = warm_ && (group_open_ || !config_.wait_for_group) && !draining_; }

void Service::stop_workers() {
  if (scheduler_) scheduler_->stop();
}

std::optional<std::size_t> Service::find_model(const std::string& name) const {
  for (std::size_t i = 0; i < models_.size(); ++i) {
    if (models_[i]->spec().name == name) return i;
  }
  return std::nullopt;
}

http::Reply Service::handle(const http::Request& request) {
  ++in_flight_;
  std::string route_name = "other";
  http::Reply reply = route(request, route_name);
  --in_flight_;
  metrics_.count_request(route_name, reply.status);
  return reply;
}

http::Reply Service::route(const http::Request& request, std::string& route_name) {
  const auto parts = split_path(request.path);
  // Known paths with a wrong method get 405 and the methods they take.
  auto only = [&request](const char* method) -> std::optional<http::Reply> {
    if (request.method == method || (std::string(method) == "GET" && request.method == "HEAD")) return std::nullopt;
    auto reply = error_reply(405, request.method + " not allowed on " + request.path + "; use " + method, "method");
    reply.headers.emplace_back("Allow", method);
    return reply;
  };
  auto served = [&](const char* name, const char* method) -> std::optional<http::Reply> {
    route_name = name;
    return only(method);
  };

  if (request.path == "/predict") {
    if (auto refused = served("/predict", "POST")) return *refused;
    return predict(request);
  }
  if (request.path == "/healthz" || request.path == "/v2/health/live") {
    if (auto refused = served(request.path == "/healthz" ? "/healthz" : "/v2/health/live", "GET")) return *refused;
    return request.path == "/healthz" ? text_reply("ok\n") : json_reply(200, R"({"live":true})");
  }
  if (request.path == "/readyz" || request.path == "/v2/health/ready") {
    if (auto refused = served(request.path == "/readyz" ? "/readyz" : "/v2/health/ready", "GET")) return *refused;
    const bool ok = ready_;
    const std::string why = draining_ ? "draining" : !warm_ ? "warming up" : "waiting for the other workers";
    if (request.path == "/readyz") return ok ? text_reply("ready\n") : unavailable("not ready: " + why);
    return json_reply(ok ? 200 : 503, json{{"ready", ok}}.dump());
  }
  if (request.path == "/metrics") {
    if (auto refused = served("/metrics", "GET")) return *refused;
    return text_reply(metrics_.render(gauges()), "text/plain; version=0.0.4; charset=utf-8");
  }
  if (request.path == "/placement") {
    if (auto refused = served("/placement", "GET")) return *refused;
    return json_reply(200, placement_json());
  }
  if (request.path == "/v2") {
    if (auto refused = served("/v2", "GET")) return *refused;
    return json_reply(200, http::v2_server_metadata(config_.version));
  }
  // /v2/models/{name}[/versions/{version}][/ready|/infer]
  if (parts.size() >= 3 && parts[0] == "v2" && parts[1] == "models") {
    const auto index = find_model(parts[2]);
    const model::Model* m = index ? models_[*index].get() : nullptr;
    std::size_t next = 3;
    if (m && parts.size() >= 5 && parts[3] == "versions") {
      if (parts[4] != m->spec().version) {
        route_name = "/v2/models/{name}";
        return error_reply(404, "model " + parts[2] + " has version " + m->spec().version + ", not " + parts[4], "version");
      }
      next = 5;
    }
    const std::string action = parts.size() > next ? parts[next] : "";
    if (parts.size() > next + 1 || (action != "" && action != "ready" && action != "infer")) {
      route_name = "other";
      return error_reply(404, "no route " + request.method + " " + request.path, "path");
    }
    const std::string template_name = "/v2/models/{name}" + (action.empty() ? "" : "/" + action);
    route_name = template_name;
    if (!m) return error_reply(404, "model '" + parts[2] + "' is not served here", "model");
    if (action == "infer") {
      if (auto refused = only("POST")) return *refused;
      return infer(*index, request);
    }
    if (auto refused = only("GET")) return *refused;
    if (action == "ready") {
      const bool ok = ready_;
      return json_reply(ok ? 200 : 503, json{{"name", m->spec().name}, {"ready", ok}}.dump());
    }
    return json_reply(200, http::v2_model_metadata(m->spec()));
  }
  return error_reply(404, "no route " + request.method + " " + request.path, "path");
}

http::Reply Service::predict(const http::Request& request) {
  const auto start = Clock::now();
  auto parsed = http::parse_predict_request(request.body, config_.limits);
  if (!parsed) return error_reply(400, parsed.error());
  if (!warm_) return unavailable("not ready: warming up");

  std::size_t index = 0;  // the first model is the default
  if (parsed->model) {
    const auto found = find_model(*parsed->model);
    if (!found) return error_reply(404, "model '" + *parsed->model + "' is not served here", "model");
    index = *found;
  }
  const model::Model& m = *models_[index];
  const std::string& name = m.spec().name;

  const features::ItemCache* cache = item_caches_[index] ? &*item_caches_[index] : nullptr;
  auto t = Clock::now();
  const auto stored = features::query(parsed->features, *store_, cache);
  metrics_.observe(metrics::Stage::kQuery, name, since(t));
  t = Clock::now();
  auto batch = features::extract(m.spec(), parsed->features, stored, cache);
  if (!batch) return error_reply(400, batch.error());
  metrics_.observe(metrics::Stage::kExtract, name, since(t));

  auto scores = run(index, std::move(*batch));
  if (!scores) return scores.error();

  http::PredictResponse response;
  response.model = name;
  response.version = m.spec().version;
  response.request_id = !parsed->request_id.empty() ? parsed->request_id
                                                    : request_id_prefix_ + std::to_string(next_request_id_++);
  response.scores = std::move(*scores);
  metrics_.observe(metrics::Stage::kTotal, name, since(start));
  return json_reply(200, http::to_json(response));
}

http::Reply Service::infer(std::size_t index, const http::Request& request) {
  const auto start = Clock::now();
  const features::ModelSpec& spec = models_[index]->spec();
  auto parsed = http::parse_infer_request(request.body, spec, config_.limits);
  if (!parsed) return error_reply(400, parsed.error());
  if (!warm_) return unavailable("not ready: warming up");
  auto scores = run(index, std::move(parsed->batch));
  if (!scores) return scores.error();
  metrics_.observe(metrics::Stage::kTotal, spec.name, since(start));
  return json_reply(200, http::v2_infer_response(spec, parsed->id, *scores));
}

tl::expected<std::vector<float>, http::Reply> Service::run(std::size_t index, features::Batch batch) {
  auto submitted = scheduler_->submit(index, std::move(batch));
  if (!submitted) return tl::unexpected(unavailable(submitted.error().message));
  batching::Outcome outcome = submitted->get();
  if (!outcome.scores) return tl::unexpected(error_reply(500, outcome.scores.error()));
  const std::string& name = models_[index]->spec().name;
  metrics_.observe(metrics::Stage::kQueue, name, outcome.timing.queue_seconds);
  metrics_.observe(metrics::Stage::kForward, name, outcome.timing.forward_seconds);
  return std::move(*outcome.scores);
}

std::map<std::string, double> Service::model_locality() const {
  std::map<std::string, double> out;
  for (const auto& m : models_) {
    auto pages = placement::locate_pages(m->weights());
    if (pages) out[m->spec().name] = pages->share_on(placement_.plan.numa_nodes);
  }
  return out;
}

metrics::Gauges Service::gauges() const {
  metrics::Gauges g;
  g.queue_depth = scheduler_->queue_depth();
  g.in_flight = in_flight_;
  g.busy_workers = scheduler_->busy_workers();
  g.ready = ready_;
  const auto& plan = placement_.plan;
  g.placement = {{"cpus", plan.cpus.to_list()},
                 {"mems", plan.mems.to_list()},
                 {"numa_nodes", plan.numa_nodes.to_list()},
                 {"workers", std::to_string(plan.workers.size())},
                 {"intra_op_threads", std::to_string(plan.intra_op_threads)},
                 {"instance", placement_.instance}};
  g.model_local_ratio = model_locality();
  for (const auto& t : placement::list_threads()) {
    ++g.threads[t.name.rfind("ns-worker", 0) == 0 ? "inference" : t.name.rfind("ns-http", 0) == 0 ? "http" : "other"];
  }
  return g;
}

std::string Service::placement_json() const {
  const auto& plan = placement_.plan;
  json workers = json::array();
  for (std::size_t i = 0; i < plan.workers.size(); ++i) {
    workers.push_back({{"worker", i}, {"cpus", plan.workers[i].cpus.to_list()}});
  }
  json threads = json::array();
  for (const auto& t : placement::list_threads()) {
    threads.push_back({{"tid", t.tid}, {"name", t.name}, {"allowed_cpus", t.allowed_cpus.to_list()}});
  }
  json process_pages = json::object();
  if (auto text = read_text_file("/proc/self/numa_maps")) {
    if (auto maps = parse_numa_maps(*text)) {
      std::map<unsigned, std::uint64_t> pages;
      for (const auto& mapping : *maps) {
        for (const auto& [node, n] : mapping.pages_per_node) pages[node] += n * mapping.page_bytes / 4096;
      }
      process_pages = pages_json(pages);
    }
  }
  json models = json::array();
  for (const auto& m : models_) {
    json entry = {{"name", m->spec().name}, {"version", m->spec().version}, {"weight_bytes", m->weight_bytes()}};
    if (auto pages = placement::locate_pages(m->weights())) {
      entry["pages_per_node"] = pages_json(pages->pages_per_node);
      entry["pages_not_resident"] = pages->not_resident;
      entry["local_fraction"] = pages->share_on(plan.numa_nodes);
    } else {
      entry["pages_error"] = pages.error().message;
    }
    models.push_back(std::move(entry));
  }
  json out = {{"instance", placement_.instance},
              {"cpus", plan.cpus.to_list()},
              {"mems", plan.mems.to_list()},
              {"numa_nodes", plan.numa_nodes.to_list()},
              {"workers", workers},
              {"intra_op_threads", plan.intra_op_threads},
              {"threads", threads},
              {"memory_policy",
               {{"bind", placement_.memory_policy.applied},
                {"nodes", plan.memory_nodes.to_list()},
                {"reason", placement_.memory_policy.reason}}},
              {"process_pages_per_node", process_pages},
              {"page_size_note", "process pages are counted in 4 KiB units"},
              {"models", models},
              {"runtime", placement_.runtime},
              {"notes", plan.notes}};
  if (placement_.cgroup) {
    out["cgroup"] = {{"version", placement_.cgroup->version}, {"path", placement_.cgroup->path}};
  }
  return out.dump(2);
}

std::string Service::startup_summary() const {
  const auto& plan = placement_.plan;
  std::string models;
  const auto locality = model_locality();
  for (const auto& m : models_) {
    char share[32] = "n/a";
    if (auto it = locality.find(m->spec().name); it != locality.end()) std::snprintf(share, sizeof share, "%.1f%%", 100 * it->second);
    models += (models.empty() ? "" : ",") + m->spec().name + "@" + m->spec().version + "(" +
              std::to_string(m->weight_bytes() >> 20) + "MiB local=" + share + ")";
  }
  return "cpus=" + plan.cpus.to_list() + " mems=" + plan.mems.to_list() + " numa_nodes=" + plan.numa_nodes.to_list() +
         " workers=" + std::to_string(plan.workers.size()) + " intra_op_threads=" + std::to_string(plan.intra_op_threads) +
         " membind=" + (placement_.memory_policy.applied ? "yes" : "no") + " runtime=\"" + placement_.runtime +
         "\" models=" + models;
}

}  // namespace numaserve::api
