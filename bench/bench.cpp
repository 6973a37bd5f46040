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
//   bags     the embedding-bag kernel alone on a float table and its bf16,
//            int8 and int4 copies, every path (bags.cpp)
// Each prints one JSON object on stdout, but bodies. forward is in
// forward.cpp; what they all measure with in measure.cpp.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bags.h"
#include "codec/grpc_codec.h"
#include "codec/predict_json.h"
#include "codec/v2_json.h"
#include "feature_store/embedded.h"
#include "forward.h"
#include "levels.h"
#include "loadgen.h"
#include "measure.h"
#include "model/model.h"
#include "numa/numa.h"
#include "numaserve/common/duration.h"
#include "requests.h"

namespace numaserve::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// The requests `load` sends (and `stages` and `bodies` reproduce): this
// many distinct bodies from this seed.
constexpr std::size_t kLoadBodies = 256;
constexpr std::uint64_t kLoadSeed = 2;

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

// The store file's entities and the model's item cache over them, as a
// server builds them at start.
struct LoadedStore {
  std::unique_ptr<feature_store::Entities> entities;
  features::ItemCache cache;
};

Result<LoadedStore> load_store(const std::string& file, const features::ModelSpec& spec) {
  auto entities = feature_store::Entities::load(file);
  if (!entities) return tl::unexpected(entities.error());
  auto cache = features::ItemCache::build(
      spec, [&](const features::EntityVisitor& visit) { (*entities)->for_each_item(visit); });
  if (!cache) return tl::unexpected(cache.error());
  return LoadedStore{std::move(*entities), std::move(*cache)};
}

// /predict's stages in turn, on the bodies the load generator sends: the
// median microseconds of each, and the items/s of the whole pipeline. The
// forward runs between requests as in the server, so the stages pay for
// the caches it evicts (they cost about twice as much warm in a loop of
// their own), and the forward for theirs.
int run_stages(const StagesOptions& o) {
  auto model = numaserve::model::TorchModel::load(o.model_dir);
  if (!model) return fail(model.error().message);
  const auto& spec = (*model)->spec();
  auto store = load_store(o.store, spec);
  if (!store) return fail(store.error().message);
  auto set = make_requests(o.store, kLoadBodies, o.items, kLoadSeed);  // what `load` sends
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
      auto request = numaserve::codec::parse_predict_request(body, limits);
      const auto t1 = Clock::now();
      if (!request) return {{"error", request.error().message}};
      const auto stored = store->entities->query(request->features, &store->cache);
      const auto t2 = Clock::now();
      auto batch = numaserve::features::extract(spec, request->features, stored, &store->cache);
      const auto t3 = Clock::now();
      if (!batch) return {{"error", batch.error().message}};
      auto scores = (*model)->forward(*batch);
      const auto t4 = Clock::now();
      if (!scores) return {{"error", scores.error().message}};
      numaserve::codec::PredictResponse response{spec.name, spec.version, "ns-1-" + std::to_string(i), std::move(*scores)};
      const std::string text = numaserve::codec::to_json(response);
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
  LoadConfig config;
  std::string store, model, cpus;
  std::size_t items = 200;
  bool grpc = false;  // numaserve.v1.Ranking/Predict on --port, the same requests as protobuf
  std::string v2_infer;   // json | binary: the same requests as v2 infer bodies of the model in model_dir
  std::string model_dir;
  LevelOptions levels;
};

// The requests as KServe v2 infer bodies: the tensors the server extracts
// for each (its own code: the store's query, the item cache, extraction),
// as JSON data or as Triton's binary tensor data, the scores asked back the
// same way, as tritonclient.http sends them by default.
Status v2_infer_bodies(LoadOptions& o, RequestSet& set) {
  auto spec = features::read_model_spec(o.model_dir);
  if (!spec) return tl::unexpected(spec.error());
  auto store = load_store(o.store, *spec);
  if (!store) return tl::unexpected(store.error());
  const bool binary = o.v2_infer == "binary";
  set.bodies.clear();
  for (const auto& request : set.requests) {
    const auto stored = store->entities->query(request, &store->cache);
    auto batch = features::extract(*spec, request, stored, &store->cache);
    if (!batch) return tl::unexpected(batch.error());
    json inputs = json::array();
    std::string raw;
    auto add = [&](const codec::TensorSpec& t, const auto& values, std::vector<std::int64_t> shape) {
      json input{{"name", t.name}, {"datatype", t.datatype}, {"shape", shape}};
      if (binary) {
        const std::size_t bytes = values.size() * sizeof(values[0]);
        input["parameters"] = {{"binary_data_size", bytes}};
        raw.append(reinterpret_cast<const char*>(values.data()), bytes);
      } else {
        input["data"] = values;
      }
      inputs.push_back(std::move(input));
    };
    const auto names = codec::v2_inputs(*spec);
    add(names[0], batch->dense, {static_cast<std::int64_t>(batch->rows), static_cast<std::int64_t>(batch->dense_width)});
    for (std::size_t k = 0; k < batch->bags.size(); ++k) {
      const auto& bag = batch->bags[k];
      add(names[1 + 2 * k], bag.indices, {static_cast<std::int64_t>(bag.indices.size())});
      add(names[2 + 2 * k], bag.offsets, {static_cast<std::int64_t>(bag.offsets.size())});
    }
    json body{{"inputs", std::move(inputs)}};
    if (binary) body["outputs"] = json::array({{{"name", "score"}, {"parameters", {{"binary_data", true}}}}});
    std::string text = body.dump();
    if (binary) o.config.body_headers.emplace_back("Inference-Header-Content-Length", std::to_string(text.size()));
    set.bodies.push_back(std::move(text) + raw);
  }
  o.config.path = "/v2/models/" + spec->name + "/infer";
  if (binary) o.config.content_type = "application/octet-stream";
  return {};
}

struct BodiesOptions {
  std::string store;
  std::size_t items = 200;
  std::size_t requests = kLoadBodies;
  std::uint64_t seed = kLoadSeed;
};

int run_bodies(const BodiesOptions& o) {
  auto set = make_requests(o.store, o.requests, o.items, o.seed);
  if (!set) return fail(set.error().message);
  for (const auto& body : set->bodies) std::cout << body << "\n";
  return 0;
}

// One load's JSON line: its statuses, latencies, throughput and, with a mix, each level's.
json load_report(const LoadOptions& o, const LoadResult& r) {
  json statuses = json::object();
  for (const auto& [status, n] : r.statuses) statuses[std::to_string(status)] = n;
  json latencies = json::object();
  for (const auto& [status, l] : r.latencies) {
    latencies[std::to_string(status)] = {{"p50_ms", l.p50_ms}, {"p99_ms", l.p99_ms}, {"max_ms", l.max_ms}};
  }
  const std::string what = o.grpc ? "closed-loop-grpc" : o.config.rate > 0 ? "open-loop" : "closed-loop";
  return json{{"what", o.v2_infer.empty() ? what : what + "-v2-infer-" + o.v2_infer},
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
              {"late", r.late},
              {"cut", r.cut},
              {"reconnects", r.reconnects},
              {"by_priority", by_level(r)}};
}

int run_load(LoadOptions& o) {
  if (!o.cpus.empty()) {
    auto cpus = numaserve::CpuSet::parse_list(o.cpus);
    if (!cpus) return fail(cpus.error().message);
    // Pins this thread before the client threads exist; they inherit it.
    if (auto bound = numaserve::numa::bind_current_thread(*cpus); !bound) return fail(bound.error().message);
  }
  auto set = make_requests(o.store, kLoadBodies, o.items, kLoadSeed);
  if (!set) return fail(set.error().message);
  for (auto& body : set->bodies) {
    if (!o.model.empty()) body.insert(1, "\"model\":" + json(o.model).dump() + ",");
  }
  if (auto applied = apply_levels(o.levels, set->bodies, o.config); !applied) return fail(applied.error().message);
  if (o.grpc) {
    if (o.config.rate > 0) return fail("--grpc: closed loop only (no --rate, no --mix)");
    if (o.levels.timeout_us >= 0) return fail("--grpc: a call's timeout is its deadline (no --timeout-us)");
    for (auto& body : set->bodies) {
      auto request = codec::parse_predict_request(body, api::RequestLimits{});
      if (!request) return fail(request.error().message);
      body = codec::grpc::predict_message(*request);
    }
    o.config.path = "/numaserve.v1.Ranking/Predict";
  }
  if (!o.v2_infer.empty()) {
    if (o.model_dir.empty()) return fail("--v2-infer needs --model-dir");
    if (!o.levels.mix.empty() || o.levels.priority > 0) return fail("--v2-infer: no --priority or --mix");
    if (auto made = v2_infer_bodies(o, *set); !made) return fail(made.error().message);
  }
  o.config.bodies = std::move(set->bodies);
  const auto r = o.grpc ? bench::run_grpc_load(o.config) : bench::run_load(o.config);
  std::cout << load_report(o, r).dump() << "\n";
  return r.requests > 0 ? 0 : fail("no request was answered with 200 (is the server up on port " +
                                   std::to_string(o.config.port) + "?)");
}

CLI::App* add_forward(CLI::App& app, ForwardOptions& f) {
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
  std::vector<std::string> narrowings;
  for (const auto& n : kNarrowings) narrowings.emplace_back(n.name);
  forward->add_option("--beside", f.beside,
                      "Also run the optimized forward narrowed, each beside fp32 in the same rounds (comma-separated): "
                      "bf16 (linear layers and tables), int8 (int8 linear layers and rowwise int8 tables), int8-tables, "
                      "int4-tables (rowwise tables, fp32 linear layers); where the load refuses (no bf16 or VNNI "
                      "instructions, the drift bound) the results say why")
      ->delimiter(',')
      ->check(CLI::IsMember(narrowings));
  forward->add_option("--linear", f.linear,
                      "The optimized forward's linear layers on numaserve's kernels (own), on LibTorch and its BLAS "
                      "(libtorch), or both side by side in alternating rounds")
      ->check(CLI::IsMember({"own", "libtorch", "both"}))
      ->capture_default_str();
  forward->add_option("--precision", f.precision,
                      "The optimized forward's linear layers, as serve's option (bf16, int8: where the CPU has bf16 or "
                      "VNNI instructions)")
      ->check(CLI::IsMember({"fp32", "bf16", "int8"}))
      ->capture_default_str();
  forward->add_option("--embedding-precision", f.embedding_precision,
                      "The optimized forward's embedding tables, as serve's option (int8, int4: rowwise); default: as "
                      "--precision")
      ->check(CLI::IsMember({"fp32", "bf16", "int8", "int4"}));

  return forward;
}

CLI::App* add_load(CLI::App& app, LoadOptions& l) {
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
  load->add_option("--reconnect", l.config.reconnect_per_second,
                   "Open loop: this fraction of the connections closed and opened anew each second, and those the "
                   "server closed opened again")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  load->add_flag("--grpc", l.grpc, "Call numaserve.v1.Ranking/Predict on --port (a --grpc-port) with the same requests");
  load->add_option("--priority", l.levels.priority, "Name this priority level in each request (1 the highest)");
  load->add_option("--timeout-us", l.levels.timeout_us, "Ask for this queue timeout in each request (parameters.timeout)");
  load->add_option("--mix", l.levels.mix,
                   "Open loop of several levels at once, LEVEL:RATE,... (requests/s each; their sum is the rate), each "
                   "level's answers reported apart under by_priority");
  load->add_flag("--mix-unnamed", l.levels.unnamed,
                 "With --mix: the levels reported apart but not named in the requests (for a server without levels)");
  load->add_option("--v2-infer", l.v2_infer,
                   "Send the same requests to the v2 infer route of --model-dir's model, as the tensors the server "
                   "extracts: JSON data, or Triton's binary tensor data")
      ->check(CLI::IsMember({"json", "binary"}));
  load->add_option("--model-dir", l.model_dir, "The model --v2-infer extracts for (its model.yaml)");

  return load;
}

CLI::App* add_sgemm(CLI::App& app, SgemmOptions& g) {
  auto* sgemm = app.add_subcommand("sgemm", "BLAS sgemm GFLOP/s on pinned CPUs");
  sgemm->add_option("--cpus", g.cpus, "Pin to these CPUs (list form)");
  sgemm->add_option("--size", g.size, "Square matrix size")->capture_default_str();
  sgemm->add_option("--seconds", g.seconds)->capture_default_str();

  return sgemm;
}

CLI::App* add_stages(CLI::App& app, StagesOptions& st) {
  auto* stages = app.add_subcommand("stages", "/predict's stages in process, without HTTP: each one's cost and the pipeline's items/s");
  stages->add_option("--model-dir", st.model_dir)->required();
  stages->add_option("--feature-store", st.store)->required();
  stages->add_option("--items", st.items)->capture_default_str();
  stages->add_option("--cpus", st.cpus, "Pin to these CPUs (list form)");
  stages->add_option("--seconds", st.seconds)->capture_default_str();

  return stages;
}

CLI::App* add_bodies(CLI::App& app, BodiesOptions& b) {
  auto* bodies = app.add_subcommand("bodies", "Print the /predict bodies `load` sends, one per line");
  bodies->add_option("--feature-store", b.store, "Where request ids come from")->required();
  bodies->add_option("--items", b.items)->capture_default_str();
  bodies->add_option("--requests", b.requests, "How many (the first are the ones `load` sends)")->capture_default_str();
  bodies->add_option("--seed", b.seed, "Another seed: other requests")->capture_default_str();

  return bodies;
}

CLI::App* add_bags(CLI::App& app, BagsOptions& o) {
  auto* bags = app.add_subcommand("bags", "The embedding-bag kernel on a float table and its bf16, int8 and int4 copies, every path");
  bags->add_option("--cpus", o.cpus, "Pin to these CPUs (list form)");
  bags->add_option("--table-mb", o.table_mb, "The float table's size (the bf16 copy is half; rowwise int8 and int4 copies beside it)")->capture_default_str();
  bags->add_option("--dim", o.dim)->capture_default_str();
  bags->add_option("--bags", o.bags, "Bags per call (a request's rows)")->capture_default_str();
  bags->add_option("--ids", o.ids, "Ids per bag in the second run (the first has one)")->capture_default_str();
  bags->add_option("--seconds", o.seconds, "For each bag size, shared by every side")->capture_default_str();
  return bags;
}

}  // namespace
}  // namespace numaserve::bench

int main(int argc, char** argv) {
  using namespace numaserve::bench;
  CLI::App app{"numaserve-bench: forward limits and HTTP load for the benchmark scripts"};
  app.require_subcommand(1);
  ForwardOptions f;
  LoadOptions l;
  SgemmOptions g;
  StagesOptions st;
  BodiesOptions b;
  BagsOptions bg;
  CLI::App* forward = add_forward(app, f);
  add_load(app, l);  // what runs when no other subcommand did
  CLI::App* sgemm = add_sgemm(app, g);
  CLI::App* stages = add_stages(app, st);
  CLI::App* bodies = add_bodies(app, b);
  CLI::App* bags = add_bags(app, bg);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (forward->parsed()) return run_forward(f);
  if (sgemm->parsed()) return run_sgemm(g);
  if (stages->parsed()) return run_stages(st);
  if (bodies->parsed()) return run_bodies(b);
  if (bags->parsed()) return run_bags(bg);
  return run_load(l);
}

