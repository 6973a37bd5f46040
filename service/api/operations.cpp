// What an operator asks of the service: liveness, readiness, Prometheus
// metrics, and where the process runs (/placement: its cpuset, threads and
// the pages of its model weights, asked of the kernel).
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "api/handlers.h"
#include "blas/blas.h"
#include "numaserve/common/numa_maps.h"
#include "numaserve/common/text_file.h"

namespace numaserve::api {
namespace {

using nlohmann::json;

http::Reply text_reply(std::string body, std::string content_type = "text/plain; charset=utf-8") {
  http::Reply reply;
  reply.body = std::move(body);
  reply.content_type = std::move(content_type);
  return reply;
}

json pages_json(const std::map<unsigned, std::uint64_t>& per_node) {
  json out = json::object();
  for (const auto& [node, pages] : per_node) out[std::to_string(node)] = pages;
  return out;
}

json precision_json(const PrecisionReport& p) {
  json out = {{"requested", p.requested}, {"served", p.served}, {"tables", p.tables}};
  if (!p.reason.empty()) out["reason"] = p.reason;
  // The load's timing, by the precision asked ("bf16-if-available" -> "bf16").
  if (p.fp32_us > 0) out["linear_us"] = {{"fp32", p.fp32_us}, {p.requested.substr(0, 4), p.candidate_us}};
  if (p.narrowed()) {
    if (!p.instructions.empty()) out["instructions"] = p.instructions;
    out["max_drift"] = p.max_drift;  // on the load's random rows
    out["drift_bound"] = p.drift_bound;
  }
  return out;
}

// Each version served: its labels, weights, graph rewrites and where its
// pages are (the share on `nodes`, the service's).
json versions_json(const lifecycle::ModelTable& table, const CpuSet& nodes) {
  json models = json::array();
  for (const auto& v : table.all()) {
    const Model* m = v->model.get();
    const auto graph = m->graph_report();
    json rewrites = json::array();
    for (const auto& r : graph.rewrites) rewrites.push_back({{"name", r.name}, {"applied", r.applied}, {"not_applied", r.not_applied}});
    json labels = json::array();
    for (const auto& [label, version] : table.labels(v->name)) {
      if (version == v->version) labels.push_back(label);
    }
    json entry = {{"name", v->name},
                  {"version", v->version},
                  {"default", table.default_version(v->name) == v},
                  {"labels", labels},
                  {"weight_bytes", m->weight_bytes()},
                  {"graph_optimizations", {{"state", graph.state}, {"reason", graph.reason}, {"rewrites", rewrites}}},
                  {"linear", {{"own_layers", graph.linear.own},
                              {"kernels", graph.linear.kernels},
                              {"libtorch_layers", graph.linear.libtorch},
                              {"blas", graph.linear.blas}}},
                  {"precision", precision_json(m->precision())}};
    if (auto pages = numa::locate_pages(m->weights())) {
      entry["pages_method"] = pages->method;
      entry["pages_per_node"] = pages_json(pages->pages_per_node);
      entry["pages_not_resident"] = pages->not_resident;
      entry["local_fraction"] = pages->share_on(nodes);
    } else {
      entry["pages_error"] = pages.error().message;
    }
    models.push_back(std::move(entry));
  }
  return models;
}

}  // namespace

Answer healthz(Service&, Call&) { return text_reply("ok\n"); }

Answer readyz(Service& service, Call&) {
  if (auto ready = service.ready(); !ready) return tl::unexpected(ready.error());
  return text_reply("ready\n");
}

Answer prometheus_metrics(Service& service, Call&) {
  return text_reply(service.metrics().render(service.gauges()), "text/plain; version=0.0.4; charset=utf-8");
}

Answer placement(Service& service, Call&) {
  http::Reply reply;
  reply.body = service.placement_json();
  return reply;
}

// Keyed "name@version".
std::map<std::string, double> Service::model_locality() const {
  std::map<std::string, double> out;
  for (const auto& v : models_.all()) {
    auto pages = numa::locate_pages(v->model->weights());
    if (pages) out[v->name + "@" + v->version] = pages->share_on(placement_.plan.numa_nodes);
  }
  return out;
}

metrics::Gauges Service::gauges() const {
  metrics::Gauges g;
  g.queue_depth = batcher_.queue_depth();
  g.in_flight = in_flight_;
  g.busy_workers = batcher_.busy_workers();
  g.ready = ready().has_value();
  const auto& plan = placement_.plan;
  g.placement = {{"cpus", plan.cpus.to_list()},
                 {"mems", plan.mems.to_list()},
                 {"numa_nodes", plan.numa_nodes.to_list()},
                 {"workers", std::to_string(plan.workers.size())},
                 {"intra_op_threads", std::to_string(plan.intra_op_threads)},
                 {"instance", placement_.instance}};
  if (const auto& core = blas::apply(); !core.core.empty()) {
    g.blas = {{"core", core.core},
              {"chosen", core.corrected ? core.chosen : core.core},
              {"best", core.best},
              {"warning", core.warning ? "true" : "false"}};
  }
  const auto page_bytes = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  for (const auto& v : models_.all()) {
    const auto precision = v->model->precision();
    const auto linear = v->model->graph_report().linear;
    metrics::VersionGauges version{v->name,      v->version, models_.default_version(v->name) == v, v->model->weight_bytes(), {},
                                   precision.requested, precision.served, precision.tables, linear.kernels, linear.own,
                                   linear.libtorch};
    if (auto pages = numa::locate_pages(v->model->weights())) {
      // locate_pages counts pages of the kernel's page size, not always 4 KiB.
      for (const auto& [node, n] : pages->pages_per_node) version.bytes_per_node[node] = n * page_bytes;
      if (version.is_default) g.model_local_ratio[v->name] = pages->share_on(plan.numa_nodes);
    }
    g.versions.push_back(std::move(version));
  }
  for (const auto& t : numa::list_threads()) {
    ++g.threads[t.name.rfind("ns-worker", 0) == 0 ? "inference" : t.name.rfind("ns-accept", 0) == 0 ? "accept" : "other"];
  }
  const auto batches = batcher_.stats();
  g.workers.resize(batches.size());
  if (transport_gauges_) transport_gauges_(g);  // connections per worker, refusals
  for (std::size_t i = 0; i < batches.size(); ++i) {
    metrics::WorkerGauges& w = g.workers[i];
    w.forwards = batches[i].forwards;
    w.forward_rows = batches[i].rows;
    w.forward_requests = batches[i].requests;
    w.stolen = batches[i].stolen;
    w.forward_seconds = batches[i].forward_seconds;
    w.queued = batches[i].queued;
  }
  for (const auto& level : batcher_.level_stats()) {
    g.levels.push_back({level.queued, level.answered, level.refused, level.wait_seconds});
  }
  g.feature_store = store_->stats();
  return g;
}

std::string Service::placement_json() const {
  const auto& plan = placement_.plan;
  json workers = json::array();
  for (std::size_t i = 0; i < plan.workers.size(); ++i) {
    workers.push_back({{"worker", i}, {"cpus", plan.workers[i].cpus.to_list()}});
  }
  json threads = json::array();
  for (const auto& t : numa::list_threads()) {
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
              {"models", versions_json(models_, plan.numa_nodes)},
              {"runtime", placement_.runtime},
              {"notes", plan.notes}};
  if (placement_.cgroup) {
    out["cgroup"] = {{"version", placement_.cgroup->version}, {"path", placement_.cgroup->path}};
  }
  return out.dump(2);
}

}  // namespace numaserve::api
