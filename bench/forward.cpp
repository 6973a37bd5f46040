#include "forward.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "feature_store/embedded.h"
#include "graph/kernel_path.h"
#include "measure.h"
#include "model/model.h"
#include "numaserve/common/duration.h"
#include "requests.h"

namespace numaserve::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// One side of `forward`: a model loaded with or without graph rewrites, in
// some precision, and what its calls measured.
struct ForwardSide {
  // Where its results go: "" the first side's (the top level), else the key
  // naming what sets it apart from the first ("off", "libtorch_linear",
  // "no_bag_reuse", or a narrowing's: "int8").
  std::string key;
  // Its ratio to the first side's items/s: a narrowing's is it over the
  // first (its speedup over fp32), every other one's the first over it.
  std::string speedup_key;
  bool narrowed = false;
  bool optimized = true;
  bool bag_reuse = true;
  std::shared_ptr<model::TorchModel> model;
  std::vector<double> ms;
  double seconds = 0;
};

// What the calls are given: prepared batches, or (--with-extraction) the
// requests and the store to extract each call's batch from.
struct ForwardInput {
  std::unique_ptr<feature_store::Entities> store;
  RequestSet set;
  std::vector<features::Batch> batches;
  std::size_t requests = 1;        // joined into one call
  std::size_t items_per_call = 0;
};

// What each load is given: precision set even where fp32 (model.yaml's is
// not what a side measures); the optimized forward's is --precision's.
model::LoadOptions load_options(const ForwardOptions& o, bool optimized, bool linear_own) {
  model::LoadOptions load;
  load.graph_optimizations = optimized;
  load.huge_pages = o.huge_pages;
  load.linear_kernels = linear_own;
  load.precision = features::Precision::kFp32;
  return load;
}

Result<ForwardSide> load_side(const ForwardOptions& o, const model::LoadOptions& load, std::string key, std::string speedup_key) {
  auto loaded = model::TorchModel::load(o.model_dir, load);
  if (!loaded) return tl::unexpected(loaded.error());
  ForwardSide side;
  side.key = std::move(key);
  side.speedup_key = std::move(speedup_key);
  side.optimized = load.graph_optimizations;
  side.model = std::move(*loaded);
  return side;
}

// The optimized sides first (--linear: own, libtorch or both), then the
// model as written; --precision and --embedding-precision apply to the
// optimized ones.
Result<std::vector<ForwardSide>> load_sides(const ForwardOptions& o) {
  const auto precision = features::kPrecisionNames.parse(o.precision);
  if (!precision) return make_error(Error::Code::kInvalidArgument, "--precision " + o.precision + ": not a precision");
  std::optional<features::TablePrecision> tables;
  if (!o.embedding_precision.empty()) {
    tables = features::kTablePrecisionNames.parse(o.embedding_precision);
    if (!tables) {
      return make_error(Error::Code::kInvalidArgument, "--embedding-precision " + o.embedding_precision + ": not a table precision");
    }
  }
  std::vector<ForwardSide> sides;
  for (bool optimized : {true, false}) {
    if (o.graph_optimizations != "both" && (o.graph_optimizations == "on") != optimized) continue;
    for (bool own : {true, false}) {
      if (optimized ? o.linear != "both" && (o.linear == "own") != own : own) continue;
      auto load = load_options(o, optimized, own);
      if (optimized) {
        load.precision = *precision;
        load.embedding_precision = tables;
      }
      const bool first = sides.empty();
      auto side = load_side(o, load, first ? "" : optimized ? "libtorch_linear" : "off",
                            first ? "" : optimized ? "linear_speedup" : "speedup");
      if (!side) return tl::unexpected(side.error());
      sides.push_back(std::move(*side));
    }
  }
  // The same model, its weights at the same addresses: random gathers of
  // another copy of the tables may meet other pages (huge or not).
  if (o.bag_reuse_both && sides.front().optimized) {
    ForwardSide every_bag = sides.front();
    every_bag.key = "no_bag_reuse";
    every_bag.speedup_key = "bag_reuse_speedup";
    every_bag.bag_reuse = false;
    sides.push_back(std::move(every_bag));
  }
  return sides;
}

// --beside: each narrowing of the optimized forward (its linear layers as
// the first side's), appended to `sides`; {key + "_error": why} for each
// the load refused (no bf16 or VNNI instructions, the drift bound).
Result<json> load_narrowed(const ForwardOptions& o, std::vector<ForwardSide>& sides) {
  json refused = json::object();
  if (o.beside.empty()) return refused;
  if (o.precision != "fp32" || (!o.embedding_precision.empty() && o.embedding_precision != "fp32") || !sides.front().optimized) {
    return make_error(Error::Code::kInvalidArgument,
                      "--beside measures narrowed forwards beside the fp32 optimized one: not with --precision " + o.precision +
                          (o.embedding_precision.empty() ? "" : " --embedding-precision " + o.embedding_precision) +
                          " --graph-optimizations " + o.graph_optimizations);
  }
  for (const auto& name : o.beside) {
    const auto n = std::find_if(kNarrowings.begin(), kNarrowings.end(), [&](const Narrowing& x) { return x.name == name; });
    if (n == kNarrowings.end()) return make_error(Error::Code::kInvalidArgument, "--beside " + name + ": not a narrowing");
    const std::string key(n->key);
    if (std::any_of(sides.begin(), sides.end(), [&](const ForwardSide& s) { return s.key == key; }) || refused.contains(key + "_error")) {
      continue;
    }
    auto load = load_options(o, true, o.linear != "libtorch");
    load.precision = n->precision;
    load.embedding_precision = n->tables;
    auto side = load_side(o, load, key, key + "_speedup");
    if (!side) {
      refused[key + "_error"] = side.error().message;
      continue;
    }
    side->narrowed = true;
    sides.push_back(std::move(*side));
  }
  return refused;
}

// A call joins `requests` requests of `per_request` items, as a worker
// joins what arrived together.
Result<ForwardInput> forward_input(const ForwardOptions& o, const features::ModelSpec& spec) {
  ForwardInput in;
  auto store = feature_store::Entities::load(o.store);
  if (!store) return tl::unexpected(store.error());
  in.store = std::move(*store);
  const bool share_nothing = o.rows_share == "nothing";
  in.requests = share_nothing ? o.items : o.join;
  const std::size_t per_request = share_nothing ? 1 : o.items;
  in.items_per_call = in.requests * per_request;
  if (in.requests > 1 && o.with_extraction) {
    return make_error(Error::Code::kInvalidArgument,
                      "--rows-share nothing and --join join extracted rows: not with --with-extraction");
  }
  constexpr std::size_t kBatches = 64;
  auto set = make_requests(o.store, kBatches * in.requests, per_request, 1);
  if (!set) return tl::unexpected(set.error());
  in.set = std::move(*set);
  std::vector<features::Batch> rows;
  for (const auto& r : in.set.requests) rows.push_back(*feature_store::extract(spec, r, *in.store));
  if (in.requests == 1) {
    in.batches = std::move(rows);
    return in;
  }
  for (std::size_t b = 0; b < kBatches; ++b) {
    std::vector<const features::Batch*> parts;
    for (std::size_t i = 0; i < in.requests; ++i) parts.push_back(&rows[b * in.requests + i]);
    in.batches.push_back(features::concat(parts));
  }
  return in;
}

// Calls of `side` for `seconds` after `warmup`, their latencies kept.
void measure(const ForwardOptions& o, const ForwardInput& in, ForwardSide& side, double warmup, double seconds) {
  const auto start = Clock::now();
  const auto from = start + to_duration(warmup);
  const auto end = from + to_duration(seconds);
  const auto interval = o.rate > 0 ? to_duration(1 / o.rate) : Clock::duration{};
  graph::set_bag_reuse(side.bag_reuse);
  const auto& spec = side.model->spec();
  for (std::size_t i = 0;; ++i) {
    // Paced, a call's latency counts from when it was due, as a server's
    // does from when its request came: the thread's wake-up included.
    auto t0 = Clock::now();
    if (o.rate > 0) {
      t0 = start + interval * static_cast<long>(i);
      std::this_thread::sleep_until(t0);
    }
    if (t0 >= end) break;
    if (o.with_extraction) {
      auto batch = feature_store::extract(spec, in.set.requests[i % in.set.requests.size()], *in.store);
      (void)side.model->forward(*batch);
    } else {
      (void)side.model->forward(in.batches[i % in.batches.size()]);
    }
    const auto t1 = Clock::now();
    if (t0 >= from) side.ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  side.seconds += seconds;
}

// The model's roofline here: its multiply-adds at this machine's sgemm
// rate plus its gathered bytes at its random-gather bandwidth.
Result<json> roofline(const model::TorchModel& m, const ForwardInput& in) {
  std::size_t calls = 0;
  const double gflops = sgemm_gflops(1024, 1, &calls);
  const double gather = gather_bytes_per_s(1);
  auto work = m.workload(in.batches.front());
  if (!work) return tl::unexpected(work.error());
  const double seconds = 2 * work->multiply_adds / (gflops * 1e9) + work->gathered_bytes / gather;
  return json{{"sgemm_gflops", gflops},
              {"gather_gb_per_s", gather / 1e9},
              {"multiply_adds_per_call", work->multiply_adds},
              {"gathered_bytes_per_call", work->gathered_bytes},
              {"compute_us", 2e6 * work->multiply_adds / (gflops * 1e9)},
              {"memory_us", 1e6 * work->gathered_bytes / gather},
              {"items_per_s", static_cast<double>(in.items_per_call) / seconds}};
}

json side_stats(ForwardSide& side, std::size_t items_per_call, double roofline_items_per_s) {
  std::sort(side.ms.begin(), side.ms.end());
  const auto& ms = side.ms;
  const double items_per_s = static_cast<double>(ms.size() * items_per_call) / side.seconds;
  const auto linear = side.model->graph_report().linear;
  json out = {{"graph_optimizations", side.optimized ? "on" : "off"},
              {"graph", side.model->graph_report().state},
              {"precision", side.model->precision().served},
              {"tables", side.model->precision().tables},
              {"linear", {{"own_layers", linear.own}, {"kernels", linear.kernels}, {"libtorch_layers", linear.libtorch}}},
              {"weight_bytes", side.model->weight_bytes()},
              {"calls", ms.size()},
              {"seconds", side.seconds},
              {"calls_per_s", static_cast<double>(ms.size()) / side.seconds},
              {"items_per_s", items_per_s},
              {"p50_ms", ms.empty() ? 0 : ms[ms.size() / 2]},
              {"p99_ms", ms.empty() ? 0 : ms[std::min(ms.size() - 1, ms.size() * 99 / 100)]}};
  if (roofline_items_per_s > 0) out["of_roofline"] = items_per_s / roofline_items_per_s;
  return out;
}

// Does a call's score depend on the calls joined with it? The first call's
// rows alone against the same rows ahead of three others in one forward.
json joined_scores(model::TorchModel& m, const std::vector<features::Batch>& batches) {
  if (batches.size() < 4) return nullptr;
  const auto alone = m.forward(batches[0]);
  const auto joined = m.forward(features::concat({&batches[0], &batches[1], &batches[2], &batches[3]}));
  if (!alone || !joined) return nullptr;
  std::vector<std::size_t> differing;
  double largest = 0;
  for (std::size_t r = 0; r < alone->size(); ++r) {
    const float a = (*alone)[r], b = (*joined)[r];
    if (std::memcmp(&a, &b, sizeof a) != 0) differing.push_back(r);
    largest = std::max(largest, static_cast<double>(std::abs(a - b)));
  }
  return {{"rows", alone->size()}, {"rows_differing", differing}, {"largest_difference", largest}};
}

json measure_sides(const ForwardOptions& o, const ForwardInput& in, std::vector<ForwardSide>& sides) {
  model::set_intra_op_threads(o.threads);
  // Side by side: alternating rounds, so drift on a noisy machine falls on every side.
  const int rounds = sides.size() > 1 ? 5 : 1;
  for (auto& side : sides) measure(o, in, side, o.warmup, 0);
  for (int r = 0; r < rounds; ++r) {
    for (auto& side : sides) measure(o, in, side, 0, o.seconds / rounds);
  }
  json line = nullptr;
  if (o.roofline) {
    auto drawn = roofline(*sides.front().model, in);
    if (!drawn) return {{"error", drawn.error().message}};
    line = std::move(*drawn);
  }
  const double roofline_items_per_s = line.is_null() ? 0 : line["items_per_s"].get<double>();
  json out = side_stats(sides.front(), in.items_per_call, roofline_items_per_s);
  if (json joined = joined_scores(*sides.front().model, in.batches); !joined.is_null()) out["joined_scores"] = joined;
  out.update(json{{"what", o.with_extraction ? "extract+forward" : "forward"},
                  {"rate", o.rate},
                  {"model", sides.front().model->spec().name},
                  {"cpus", o.cpus},
                  {"intra_op_threads", o.threads},
                  {"items_per_call", in.items_per_call}, {"requests_per_call", in.requests}, {"huge_pages", o.huge_pages},
                  {"kernels", graph::kernel_isa()},
                  {"blas", model::blas_summary()},
                  {"runtime", model::runtime_summary()}});
  if (!line.is_null()) out["roofline"] = line;
  out["rows_share"] = o.rows_share;
  const double first_items_per_s = out["items_per_s"].get<double>();
  for (auto& side : sides) {
    json& where = side.key.empty() ? out : out[side.key];
    if (!side.key.empty()) {
      where = side_stats(side, in.items_per_call, roofline_items_per_s);
      const double ratio = first_items_per_s / where["items_per_s"].get<double>();
      out[side.speedup_key] = side.narrowed ? 1 / ratio : ratio;
    }
    // What a narrowed load found: its instructions, its drift from fp32 on
    // the load's random rows, and (-if-available) the linear layers' timing.
    const auto p = side.model->precision();
    if (!p.narrowed()) continue;
    where["instructions"] = p.instructions;
    where["max_drift_random_rows"] = p.max_drift;
    where["drift_bound"] = p.drift_bound;
    if (!p.reason.empty()) where["reason"] = p.reason;  // why the linear layers stayed fp32
    if (p.fp32_us > 0) where["linear_us_at_load"] = {{"fp32", p.fp32_us}, {p.served, p.candidate_us}};
  }
  graph::set_bag_reuse(true);
  return out;
}

}  // namespace

int run_forward(const ForwardOptions& o) {
  if (!o.kernels.empty()) {
    if (auto set = graph::set_kernel_isa(o.kernels); !set) return fail(set.error().message);
  }
  auto sides = load_sides(o);
  if (!sides) return fail(sides.error().message);
  auto refused = load_narrowed(o, *sides);
  if (!refused) return fail(refused.error().message);
  auto in = forward_input(o, sides->front().model->spec());
  if (!in) return fail(in.error().message);
  return print(on_pinned_thread(o.cpus, [&]() -> json {
    json out = measure_sides(o, *in, *sides);
    out.update(*refused);
    return out;
  }));
}

}  // namespace numaserve::bench
