// numaserve-bench: the measurements behind bench/*.sh.
//   forward  in-process forward throughput of a model on pinned CPUs: the
//            limit that serving over HTTP is compared with
//   load     an HTTP load generator (closed loop or constant rate)
//   sgemm    single-precision matrix multiply GFLOP/s of the BLAS LibTorch
//            uses, on pinned CPUs: the machine's arithmetic limit
//   stages   /predict without HTTP: JSON parse, store query, extraction,
//            forward and reply in turn on one pinned thread — what each
//            stage costs beside the forward, and the items/s no transport
//            can exceed
//   bodies   the /predict bodies `load` sends, one per line (for wrk)
// Each prints one JSON object on stdout, but bodies.
#include <dlfcn.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "api/predict_json.h"
#include "feature_store/embedded.h"
#include "loadgen.h"
#include "model/model.h"
#include "numa/numa.h"
#include "numaserve/common/duration.h"
#include "requests.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// The requests `load` sends (and `stages` and `bodies` reproduce): this
// many distinct bodies from this seed.
constexpr std::size_t kLoadBodies = 256;
constexpr std::uint64_t kLoadSeed = 2;

int fail(const std::string& message) {
  std::cerr << "numaserve-bench: " << message << "\n";
  return 1;
}

// Runs `body` on a thread set up as a service worker is — pinned to `cpus`
// (list form; empty: not pinned) before anything else — and returns what it
// measured, or {"error": ...}.
json on_pinned_thread(const std::string& cpus, const std::function<json()>& body) {
  json out;
  std::thread worker([&] {
    if (!cpus.empty()) {
      auto set = numaserve::CpuSet::parse_list(cpus);
      if (!set || !numaserve::numa::bind_current_thread(*set)) {
        out = {{"error", "cannot pin to " + cpus}};
        return;
      }
    }
    out = body();
  });
  worker.join();
  return out;
}

int print(const json& out) {
  if (out.contains("error")) return fail(out["error"].get<std::string>());
  std::cout << out.dump() << "\n";
  return 0;
}

struct ForwardOptions {
  std::string model_dir, store, cpus;
  std::size_t items = 200;
  unsigned threads = 1;
  double seconds = 10, warmup = 2;
  double rate = 0;  // calls/s, each due at its time (the thread sleeps between); 0: back to back
  bool with_extraction = false;
  std::string graph_optimizations = "on";  // on, off, or both side by side
  bool roofline = false;
  std::string kernels;  // empty: the CPU's best path
  // What a call's rows share: "request" (one request of `items` items: every
  // row has its user's bags) or "nothing" (`items` one-item requests of
  // different users joined).
  std::string rows_share = "request";
  std::size_t join = 1;  // requests of --items items joined into one call
  bool huge_pages = true;  // LoadOptions::huge_pages
  bool bag_reuse_both = false;  // also the optimized forward pooling every bag (model::set_bag_reuse)
};

// The Fortran BLAS entry point, from the library the alternatives system
// names for libblas.so.3 — the one LibTorch itself calls.
using SgemmFn = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                         const int*, const float*, const int*, const float*, float*, const int*);

// GFLOP/s of n x n sgemm calls for `seconds` on the calling thread; 0
// without a BLAS.
double sgemm_gflops(int n, double seconds, std::size_t* calls_out = nullptr) {
  void* blas = dlopen("libblas.so.3", RTLD_NOW);
  auto sgemm = blas ? reinterpret_cast<SgemmFn>(dlsym(blas, "sgemm_")) : nullptr;
  if (sgemm == nullptr) return 0;
  std::vector<float> a(static_cast<std::size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  const float alpha = 1, beta = 0;
  std::size_t calls = 0;
  const auto start = Clock::now();
  const auto end = start + numaserve::to_duration(seconds);
  while (Clock::now() < end) {
    sgemm("N", "N", &n, &n, &n, &alpha, a.data(), &n, b.data(), &n, &beta, c.data(), &n);
    ++calls;
  }
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  if (calls_out != nullptr) *calls_out = calls;
  return 2.0 * n * n * static_cast<double>(n) * static_cast<double>(calls) / took / 1e9;
}

// Bytes/s of summing 128-byte rows read at random from 512 MiB, as
// embedding bags read their tables (rows independent, so many misses are in
// flight at once): the memory side of the roofline.
double gather_bytes_per_s(double seconds) {
  constexpr std::size_t kRow = 32;  // floats: 128 bytes
  const std::size_t rows = (512u << 20) / (kRow * sizeof(float));
  std::vector<float> table(rows * kRow, 1.f);
  std::mt19937_64 rng(5);
  std::vector<std::uint32_t> order(1 << 20);
  for (auto& i : order) i = static_cast<std::uint32_t>(rng() % rows);
  float sum[kRow] = {};
  std::size_t gathered = 0;
  const auto start = Clock::now();
  while (Clock::now() - start < numaserve::to_duration(seconds)) {
    for (const auto i : order) {
      const float* row = table.data() + static_cast<std::size_t>(i) * kRow;
      for (std::size_t d = 0; d < kRow; ++d) sum[d] += row[d];
    }
    gathered += order.size();
  }
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  volatile float keep = sum[0];  // the sums are the point of the loop: keep them
  (void)keep;
  return static_cast<double>(gathered * kRow * sizeof(float)) / took;
}

// One side of `forward`: a model loaded with or without graph rewrites, and
// what its calls measured.
struct ForwardSide {
  bool optimized = true;
  bool bag_reuse = true;
  std::shared_ptr<numaserve::model::TorchModel> model;
  std::vector<double> ms;
  double seconds = 0;
};

int run_forward(const ForwardOptions& o) {
  if (!o.kernels.empty()) {
    if (auto set = numaserve::model::set_kernel_isa(o.kernels); !set) return fail(set.error().message);
  }
  std::vector<ForwardSide> sides;
  for (bool optimized : {true, false}) {
    if (o.graph_optimizations != "both" && (o.graph_optimizations == "on") != optimized) continue;
    numaserve::model::LoadOptions load;
    load.graph_optimizations = optimized;
    load.huge_pages = o.huge_pages;
    auto model = numaserve::model::TorchModel::load(o.model_dir, load);
    if (!model) return fail(model.error().message);
    sides.push_back({optimized, true, std::move(*model), {}, 0});
  }
  // The same model, its weights at the same addresses: random gathers of
  // another copy of the tables may meet other pages (huge or not).
  if (o.bag_reuse_both && sides.front().optimized) sides.push_back({true, false, sides.front().model, {}, 0});
  const auto& spec = sides.front().model->spec();
  auto store = numaserve::feature_store::Entities::load(o.store);
  if (!store) return fail(store.error().message);
  // A call joins `requests` requests of `per_request` items, as a worker
  // joins what arrived together.
  const bool share_nothing = o.rows_share == "nothing";
  const std::size_t requests = share_nothing ? o.items : o.join;
  const std::size_t per_request = share_nothing ? 1 : o.items;
  if (requests > 1 && o.with_extraction) return fail("--rows-share nothing and --join join extracted rows: not with --with-extraction");
  constexpr std::size_t kBatches = 64;
  auto set = numaserve::bench::make_requests(o.store, kBatches * requests, per_request, 1);
  if (!set) return fail(set.error().message);
  std::vector<numaserve::features::Batch> rows;
  for (const auto& r : set->requests) rows.push_back(*numaserve::feature_store::extract(spec, r, **store));
  std::vector<numaserve::features::Batch> batches;
  if (requests > 1) {
    for (std::size_t b = 0; b < kBatches; ++b) {
      std::vector<const numaserve::features::Batch*> parts;
      for (std::size_t i = 0; i < requests; ++i) parts.push_back(&rows[b * requests + i]);
      batches.push_back(numaserve::features::concat(parts));
    }
  } else {
    batches = std::move(rows);
  }
  const std::size_t items_per_call = requests * per_request;

  return print(on_pinned_thread(o.cpus, [&]() -> json {
    numaserve::model::set_intra_op_threads(o.threads);
    // Calls of `side` for `seconds` after `warmup`, their latencies kept.
    auto measure = [&](ForwardSide& side, double warmup, double seconds) {
      const auto start = Clock::now();
      const auto from = start + numaserve::to_duration(warmup);
      const auto end = from + numaserve::to_duration(seconds);
      const auto interval = o.rate > 0 ? numaserve::to_duration(1 / o.rate) : Clock::duration{};
      numaserve::model::set_bag_reuse(side.bag_reuse);
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
          const auto& request = set->requests[i % set->requests.size()];
          auto batch = numaserve::feature_store::extract(spec, request, **store);
          (void)side.model->forward(*batch);
        } else {
          (void)side.model->forward(batches[i % batches.size()]);
        }
        const auto t1 = Clock::now();
        if (t0 >= from) side.ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
      side.seconds += seconds;
    };
    // Side by side: alternating rounds, so drift on a noisy machine falls on both.
    const int rounds = sides.size() > 1 ? 5 : 1;
    for (auto& side : sides) measure(side, o.warmup, 0);
    for (int r = 0; r < rounds; ++r) {
      for (auto& side : sides) measure(side, 0, o.seconds / rounds);
    }
    json roofline = nullptr;
    double roofline_items_per_s = 0;
    if (o.roofline) {
      std::size_t calls = 0;
      const double gflops = sgemm_gflops(1024, 1, &calls);
      const double gather = gather_bytes_per_s(1);
      auto work = sides.front().model->workload(batches.front());
      if (!work) return {{"error", work.error().message}};
      const double seconds = 2 * work->multiply_adds / (gflops * 1e9) + work->gathered_bytes / gather;
      roofline_items_per_s = static_cast<double>(items_per_call) / seconds;
      roofline = {{"sgemm_gflops", gflops},
                  {"gather_gb_per_s", gather / 1e9},
                  {"multiply_adds_per_call", work->multiply_adds},
                  {"gathered_bytes_per_call", work->gathered_bytes},
                  {"compute_us", 2e6 * work->multiply_adds / (gflops * 1e9)},
                  {"memory_us", 1e6 * work->gathered_bytes / gather},
                  {"items_per_s", roofline_items_per_s}};
    }
    auto stats = [&](ForwardSide& side) {
      std::sort(side.ms.begin(), side.ms.end());
      const auto& ms = side.ms;
      const double items_per_s = static_cast<double>(ms.size() * items_per_call) / side.seconds;
      json out = {{"graph_optimizations", side.optimized ? "on" : "off"},
                  {"graph", side.model->graph_report().state},
                  {"calls", ms.size()},
                  {"seconds", side.seconds},
                  {"calls_per_s", static_cast<double>(ms.size()) / side.seconds},
                  {"items_per_s", items_per_s},
                  {"p50_ms", ms.empty() ? 0 : ms[ms.size() / 2]},
                  {"p99_ms", ms.empty() ? 0 : ms[std::min(ms.size() - 1, ms.size() * 99 / 100)]}};
      if (roofline_items_per_s > 0) out["of_roofline"] = items_per_s / roofline_items_per_s;
      return out;
    };
    json out = stats(sides.front());
    // Issue 41's third part: does a call's score depend on the calls joined
    // with it? The first call's rows alone against the same rows ahead of
    // three others in one forward.
    if (batches.size() >= 4) {
      const auto alone = sides.front().model->forward(batches[0]);
      const auto joined = sides.front().model->forward(
          numaserve::features::concat({&batches[0], &batches[1], &batches[2], &batches[3]}));
      if (alone && joined) {
        std::vector<std::size_t> differing;
        double largest = 0;
        for (std::size_t r = 0; r < alone->size(); ++r) {
          const float a = (*alone)[r], b = (*joined)[r];
          if (std::memcmp(&a, &b, sizeof a) != 0) differing.push_back(r);
          largest = std::max(largest, static_cast<double>(std::abs(a - b)));
        }
        out["joined_scores"] = {{"rows", alone->size()}, {"rows_differing", differing}, {"largest_difference", largest}};
      }
    }
    out.update(json{{"what", o.with_extraction ? "extract+forward" : "forward"},
                    {"rate", o.rate},
                    {"model", spec.name},
                    {"cpus", o.cpus},
                    {"intra_op_threads", o.threads},
                    {"items_per_call", items_per_call}, {"requests_per_call", requests}, {"huge_pages", o.huge_pages},
                    {"kernels", numaserve::model::kernel_isa()},
                    {"runtime", numaserve::model::runtime_summary()}});
    if (!roofline.is_null()) out["roofline"] = roofline;
    out["rows_share"] = o.rows_share;
    for (std::size_t i = 1; i < sides.size(); ++i) {
      const char* name = sides[i].optimized ? "no_bag_reuse" : "off";
      out[name] = stats(sides[i]);
      const double ratio = out["items_per_s"].get<double>() / out[name]["items_per_s"].get<double>();
      out[sides[i].optimized ? "bag_reuse_speedup" : "speedup"] = ratio;
    }
    numaserve::model::set_bag_reuse(true);
    return out;
  }));
}

struct SgemmOptions {
  std::string cpus;
  int size = 1024;
  double seconds = 5;
};

int run_sgemm(const SgemmOptions& o) {
  return print(on_pinned_thread(o.cpus, [&]() -> json {
    std::size_t calls = 0;
    const double gflops = sgemm_gflops(o.size, o.seconds, &calls);
    if (gflops == 0) return {{"error", "cannot find sgemm_ in libblas.so.3"}};
    return {{"what", "sgemm"}, {"cpus", o.cpus}, {"size", o.size}, {"calls", calls}, {"seconds", o.seconds},
            {"gflops", gflops}};
  }));
}

struct StagesOptions {
  std::string model_dir, store, cpus;
  std::size_t items = 200;
  double seconds = 5;
};

// /predict's stages in turn, on the bodies the load generator sends: the
// median microseconds of each, and the items/s of the whole pipeline. The
// forward runs between requests as in the server, so the stages pay for
// the caches it evicts (they cost about twice as much warm in a loop of
// their own), and the forward for theirs.
int run_stages(const StagesOptions& o) {
  auto model = numaserve::model::TorchModel::load(o.model_dir);
  if (!model) return fail(model.error().message);
  auto store = numaserve::feature_store::Entities::load(o.store);
  if (!store) return fail(store.error().message);
  const auto& spec = (*model)->spec();
  auto cache = numaserve::features::ItemCache::build(
      spec, [&](const numaserve::features::EntityVisitor& visit) { (*store)->for_each_item(visit); });
  if (!cache) return fail(cache.error().message);
  auto set = numaserve::bench::make_requests(o.store, kLoadBodies, o.items, kLoadSeed);  // what `load` sends
  if (!set) return fail(set.error().message);
  return print(on_pinned_thread(o.cpus, [&]() -> json {
    std::vector<double> parse, query, extract, forward, reply;
    const numaserve::api::RequestLimits limits;
    const auto start = Clock::now();
    const auto end = start + numaserve::to_duration(o.seconds);
    auto micros = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); };
    for (std::size_t i = 0; Clock::now() < end; ++i) {
      const std::string& body = set->bodies[i % set->bodies.size()];
      const auto t0 = Clock::now();
      auto request = numaserve::api::parse_predict_request(body, limits);
      const auto t1 = Clock::now();
      if (!request) return {{"error", request.error().message}};
      const auto stored = (*store)->query(request->features, &*cache);
      const auto t2 = Clock::now();
      auto batch = numaserve::features::extract(spec, request->features, stored, &*cache);
      const auto t3 = Clock::now();
      if (!batch) return {{"error", batch.error().message}};
      auto scores = (*model)->forward(*batch);
      const auto t4 = Clock::now();
      if (!scores) return {{"error", scores.error().message}};
      numaserve::api::PredictResponse response{spec.name, spec.version, "ns-1-" + std::to_string(i), std::move(*scores)};
      const std::string text = numaserve::api::to_json(response);
      const auto t5 = Clock::now();
      parse.push_back(micros(t0, t1));
      query.push_back(micros(t1, t2));
      extract.push_back(micros(t2, t3));
      forward.push_back(micros(t3, t4));
      reply.push_back(micros(t4, t5));
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    auto median = [](std::vector<double>& v) {
      std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
      return v[v.size() / 2];
    };
    return {{"what", "stages"}, {"model", spec.name}, {"cpus", o.cpus}, {"items_per_request", o.items},
            {"requests", parse.size()}, {"body_bytes", set->bodies.front().size()},
            {"items_per_s", static_cast<double>(parse.size() * o.items) / seconds},
            {"parse_us", median(parse)}, {"query_us", median(query)}, {"extract_us", median(extract)},
            {"forward_us", median(forward)}, {"reply_us", median(reply)}};
  }));
}

struct LoadOptions {
  numaserve::bench::LoadConfig config;
  std::string store, model, cpus;
  std::size_t items = 200;
};

struct BodiesOptions {
  std::string store;
  std::size_t items = 200;
};

int run_bodies(const BodiesOptions& o) {
  auto set = numaserve::bench::make_requests(o.store, kLoadBodies, o.items, kLoadSeed);
  if (!set) return fail(set.error().message);
  for (const auto& body : set->bodies) std::cout << body << "\n";
  return 0;
}

int run_load(LoadOptions& o) {
  if (!o.cpus.empty()) {
    auto cpus = numaserve::CpuSet::parse_list(o.cpus);
    if (!cpus) return fail(cpus.error().message);
    // Pins this thread before the client threads exist; they inherit it.
    if (auto bound = numaserve::numa::bind_current_thread(*cpus); !bound) return fail(bound.error().message);
  }
  auto set = numaserve::bench::make_requests(o.store, kLoadBodies, o.items, kLoadSeed);
  if (!set) return fail(set.error().message);
  for (auto& body : set->bodies) {
    if (!o.model.empty()) body.insert(1, "\"model\":" + json(o.model).dump() + ",");
  }
  o.config.bodies = std::move(set->bodies);
  const auto r = numaserve::bench::run_load(o.config);
  json statuses = json::object();
  for (const auto& [status, n] : r.statuses) statuses[std::to_string(status)] = n;
  json latencies = json::object();
  for (const auto& [status, l] : r.latencies) {
    latencies[std::to_string(status)] = {{"p50_ms", l.p50_ms}, {"p99_ms", l.p99_ms}, {"max_ms", l.max_ms}};
  }
  std::cout << json{{"what", o.config.rate > 0 ? "open-loop" : "closed-loop"},
                    {"connections", o.config.connections},
                    {"offered_rps", o.config.rate},
                    {"items_per_request", o.items},
                    {"requests", r.requests},
                    {"errors", r.errors},
                    {"statuses", statuses},
                    {"latencies_by_status", latencies},
                    {"seconds", r.seconds},
                    {"rps", r.requests_per_second},
                    {"items_per_s", r.requests_per_second * static_cast<double>(o.items)},
                    {"p50_ms", r.p50_ms},
                    {"p90_ms", r.p90_ms},
                    {"p99_ms", r.p99_ms},
                    {"max_ms", r.max_ms},
                    {"late", r.late}}
                   .dump()
            << "\n";
  return r.requests > 0 ? 0 : fail("no request was answered with 200 (is the server up on port " +
                                   std::to_string(o.config.port) + "?)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"numaserve-bench: forward limits and HTTP load for the benchmark scripts"};
  app.require_subcommand(1);

  ForwardOptions f;
  auto* forward = app.add_subcommand("forward", "In-process forward throughput on pinned CPUs");
  forward->add_option("--model-dir", f.model_dir)->required();
  forward->add_option("--feature-store", f.store)->required();
  forward->add_option("--items", f.items)->capture_default_str();
  forward->add_option("--cpus", f.cpus, "Pin to these CPUs (list form)");
  forward->add_option("--intra-op-threads", f.threads)->capture_default_str();
  forward->add_option("--seconds", f.seconds)->capture_default_str();
  forward->add_option("--warmup", f.warmup)->capture_default_str();
  forward->add_flag("--with-extraction", f.with_extraction, "Extract features from the store on each call too");
  forward->add_option("--graph-optimizations", f.graph_optimizations,
                      "on, off (as serve's option), or both side by side in alternating rounds")
      ->check(CLI::IsMember({"on", "off", "both"}))
      ->capture_default_str();
  forward->add_option("--kernels", f.kernels, "The fused ops' path: avx512, avx2 or portable (default: the CPU's best)");
  forward->add_flag("--roofline", f.roofline,
                    "Also measure sgemm GFLOP/s and random-gather bandwidth here and report the model's roofline");
  forward->add_option("--rate", f.rate, "Calls per second, each at its due time (latency from then); 0: back to back")
      ->capture_default_str();
  forward->add_option("--rows-share", f.rows_share,
                      "request: a call is one request of --items items (its rows share the user's bags); nothing: "
                      "--items one-item requests of different users joined")
      ->check(CLI::IsMember({"request", "nothing"}))
      ->capture_default_str();
  forward->add_option("--huge-pages", f.huge_pages, "Weights of 4 MiB and more in transparent huge pages (as serve loads them)")
      ->capture_default_str();
  forward->add_option("--join", f.join, "Requests of --items items joined into each call, as a worker joins them")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  forward->add_flag("--bag-reuse-both", f.bag_reuse_both,
                    "Also run the optimized forward pooling every bag, even one repeating the row before's ids");

  LoadOptions l;
  auto* load = app.add_subcommand("load", "HTTP load: closed loop, or open loop at --rate");
  load->add_option("--port", l.config.port)->required();
  load->add_option("--host", l.config.host)->capture_default_str();
  load->add_option("--path", l.config.path)->capture_default_str();
  load->add_option("--feature-store", l.store, "Where request ids come from")->required();
  load->add_option("--model", l.model, "Ask for this model in each /predict body");
  load->add_option("--items", l.items)->capture_default_str();
  load->add_option("--connections", l.config.connections)->capture_default_str();
  load->add_option("--rate", l.config.rate, "Requests/s, open loop; 0: closed loop")->capture_default_str();
  load->add_option("--seconds", l.config.seconds)->capture_default_str();
  load->add_option("--warmup", l.config.warmup_seconds)->capture_default_str();
  load->add_option("--cpus", l.cpus, "Pin the load generator to these CPUs");

  SgemmOptions g;
  auto* sgemm = app.add_subcommand("sgemm", "BLAS sgemm GFLOP/s on pinned CPUs");
  sgemm->add_option("--cpus", g.cpus, "Pin to these CPUs (list form)");
  sgemm->add_option("--size", g.size, "Square matrix size")->capture_default_str();
  sgemm->add_option("--seconds", g.seconds)->capture_default_str();

  StagesOptions st;
  auto* stages = app.add_subcommand("stages", "/predict's stages in process, without HTTP: each one's cost and the pipeline's items/s");
  stages->add_option("--model-dir", st.model_dir)->required();
  stages->add_option("--feature-store", st.store)->required();
  stages->add_option("--items", st.items)->capture_default_str();
  stages->add_option("--cpus", st.cpus, "Pin to these CPUs (list form)");
  stages->add_option("--seconds", st.seconds)->capture_default_str();

  BodiesOptions b;
  auto* bodies = app.add_subcommand("bodies", "Print the /predict bodies `load` sends, one per line");
  bodies->add_option("--feature-store", b.store, "Where request ids come from")->required();
  bodies->add_option("--items", b.items)->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (forward->parsed()) return run_forward(f);
  if (sgemm->parsed()) return run_sgemm(g);
  if (stages->parsed()) return run_stages(st);
  if (bodies->parsed()) return run_bodies(b);
  return run_load(l);
}

