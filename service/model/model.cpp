// The only place (with demo_models.cpp and graph.cpp) that includes LibTorch.
#include "model/model.h"

#include <torch/script.h>

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/version.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <cmath>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "blas/blas.h"
#include "kernels/kernels.h"
#include "model/graph.h"
#include "model/rows.h"
#include "numa/huge_pages.h"
#include "numaserve/common/options.h"
#include "numaserve/common/paced_file.h"

namespace numaserve::model {
namespace {

// The memory a re-homed weight lives in, freed with the storage that points into it.
struct HugeStorage {
  void* data;
  std::size_t bytes;
  static void free(void* self) {
    auto* m = static_cast<HugeStorage*>(self);
    numa::free_huge_pages(m->data, m->bytes);
    delete m;
  }
};

// Random gathers from embedding tables of hundreds of MB miss the TLB on
// nearly every row with 4 KiB pages, and a tensor LibTorch allocated and
// filled while loading never asked for huge pages (numa/huge_pages.h). So
// each large storage is copied into memory that did, first touched here —
// on this thread's NUMA node, as the load's other pages — and its storage
// is pointed there in place, so that every tensor viewing it, the frozen
// copy's constants included, follows.
void move_weights_to_huge_pages(const torch::jit::Module& module) {
  std::vector<c10::StorageImpl*> storages;
  auto add = [&storages](const at::Tensor& t) {
    if (!t.defined() || !t.has_storage() || t.storage().nbytes() < kHugePageWeightBytes) return;
    c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
    if (std::find(storages.begin(), storages.end(), storage) == storages.end()) storages.push_back(storage);
  };
  for (const auto& p : module.named_parameters()) add(p.value);
  for (const auto& b : module.named_buffers()) add(b.value);
  for (c10::StorageImpl* storage : storages) {
    const std::size_t bytes = storage->nbytes();
    void* data = numa::allocate_huge_pages(bytes);
    if (data == nullptr) continue;
    std::memcpy(data, storage->data(), bytes);
    // The loader's allocation is freed as the DataPtr it gets back goes.
    storage->set_data_ptr(at::DataPtr(data, new HugeStorage{data, bytes}, &HugeStorage::free, storage->device()));
  }
}

Error torch_error(const std::string& what, const std::exception& e) {
  // c10 messages carry a C++ backtrace after the first line; the first line
  // is what a user can act on.
  // The TorchScript interpreter's own failures open with a generic line and
  // end with the model's exception ("RuntimeError: offsets must be int32").
  const std::string text = e.what();
  std::string message = text.substr(0, text.find('\n'));
  if (message.rfind("The following operation failed in the TorchScript interpreter", 0) == 0) {
    for (std::size_t start = 0; start < text.size();) {
      const std::size_t end = std::min(text.find('\n', start), text.size());
      const std::string line = text.substr(start, end - start);
      if (line.find("Error: ") != std::string::npos) message = line;
      start = end + 1;
    }
  }
  return Error{Error::Code::kInvalidArgument, what + ": " + message, ""};
}

// The tensors below borrow the batch's memory: forward() never writes its
// inputs, and they do not outlive the call.
at::Tensor borrow(const std::vector<std::int64_t>& values) {
  return torch::from_blob(const_cast<std::int64_t*>(values.data()), {static_cast<std::int64_t>(values.size())},
                          torch::kLong);
}

// forward's arguments for `batch`: dense [N, D], then the bags' indices
// and offsets, borrowing the batch's memory.
std::vector<c10::IValue> inputs_of(const features::Batch& batch) {
  c10::List<at::Tensor> indices;
  c10::List<at::Tensor> offsets;
  for (const auto& bag : batch.bags) {
    indices.push_back(borrow(bag.indices));
    offsets.push_back(borrow(bag.offsets));
  }
  const at::Tensor dense = torch::from_blob(const_cast<float*>(batch.dense.data()),
                                            {static_cast<std::int64_t>(batch.rows), static_cast<std::int64_t>(batch.dense_width)},
                                            torch::kFloat);
  return {dense, indices, offsets};
}

// The process's resident set, from /proc/self/statm (pages); 0 if unreadable.
std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// "(dense: Tensor, indices: List[Tensor], offsets: List[Tensor]) -> Tensor", without self.
std::string signature_of(const c10::FunctionSchema& schema) {
  std::string out = "(";
  for (std::size_t i = 1; i < schema.arguments().size(); ++i) {
    const auto& a = schema.arguments()[i];
    out += (i > 1 ? ", " : "") + a.name() + ": " + a.type()->annotation_str();
  }
  out += ") -> ";
  for (std::size_t i = 0; i < schema.returns().size(); ++i) out += (i > 0 ? ", " : "") + schema.returns()[i].type()->annotation_str();
  return out;
}

// The module's embedding tables and their rows: a parameter emb_<table>, or
// the weight of a submodule emb_<table> (an nn.EmbeddingBag), as the Python
// package's export() reads them.
std::vector<std::pair<std::string, std::int64_t>> embedding_tables(const torch::jit::Module& module) {
  std::vector<std::pair<std::string, std::int64_t>> out;
  auto add = [&out](const std::string& name, const at::Tensor& weight) {
    if (name.rfind("emb_", 0) == 0) out.emplace_back(name.substr(4), weight.dim() > 0 ? weight.size(0) : 0);
  };
  for (const auto& param : module.named_parameters(/*recurse=*/false)) add(param.name, param.value);
  for (const auto& child : module.named_children()) {
    if (child.value.hasattr("weight") && child.value.attr("weight").isTensor()) {
      add(child.name, child.value.attr("weight").toTensor());
    }
  }
  return out;
}

constexpr const char* kForward = "(dense: Tensor, indices: List[Tensor], offsets: List[Tensor]) -> Tensor";

}  // namespace

struct TorchModel::Impl {
  torch::jit::Module module;                    // as written; its parameters are the weights
  std::optional<torch::jit::Module> optimized;  // sharing them, when a rewrite applied and checked out
  api::GraphReport report;
  api::PrecisionReport precision;
  LinearLayers linear;  // of the running forward

  const torch::jit::Module& running() const { return optimized ? *optimized : module; }
};

namespace {

Result<at::Tensor> run(const torch::jit::Module& m, const features::Batch& batch, const std::string& what) {
  try {
    c10::InferenceMode inference;
    torch::jit::Module module = m;  // a handle: shares the weights
    return module.forward(inputs_of(batch)).toTensor();
  } catch (const std::exception& e) {
    return tl::unexpected(torch_error(what, e));
  }
}

// The largest difference of two score tensors in units of `tolerance`:
// relative to the score (absolute below a magnitude of 1) when `relative`,
// else absolute. A NaN against a number, or another count: infinity.
double score_distance(const at::Tensor& a, const at::Tensor& b, double tolerance, bool relative) {
  const at::Tensor x = a.to(torch::kDouble).reshape({-1}), y = b.to(torch::kDouble).reshape({-1});
  if (x.numel() != y.numel()) return INFINITY;
  if (x.numel() == 0) return 0;
  const at::Tensor scale =
      relative ? at::clamp_min(at::maximum(x.abs(), y.abs()), 1.0) * tolerance : at::full_like(x, tolerance);
  const at::Tensor distance = ((x - y).abs() / scale).nan_to_num(INFINITY, INFINITY, INFINITY);
  // Both NaN (or both the same infinity) is equal.
  const at::Tensor same = (x == y) | (at::isnan(x) & at::isnan(y));
  return at::where(same, at::zeros_like(distance), distance).max().item<double>();
}

// Optimizes `module`, and keeps the result only if its forward gives the
// original's scores on random rows of several sizes.
Optimized optimize_checked(const torch::jit::Module& module, const features::ModelSpec& spec, bool linear_kernels) {
  Optimized optimized = optimize(module, linear_kernels);
  if (!optimized.module) return optimized;
  std::uint64_t seed = 1;
  for (std::size_t rows : {1, 7, 64}) {
    const features::Batch batch = random_rows(spec, rows, seed++);
    auto want = run(module, batch, "forward");
    // A model whose own forward fails on random rows cannot be checked: it
    // runs as written, and fails (or not) per request as before.
    auto got = want ? run(*optimized.module, batch, "optimized forward") : want;
    const double distance = want && got ? score_distance(*want, *got, kScoreTolerance, true) : INFINITY;
    if (!(distance <= 1)) {
      auto& report = optimized.report;
      report.state = "failed";
      report.reason = !want ? "the model's forward failed on random rows (" + want.error().message + ")"
                      : !got ? got.error().message
                             : "the optimized forward's scores differed from the original's by " +
                                   std::to_string(distance * kScoreTolerance) + " on " + std::to_string(rows) +
                                   " random rows";
      report.reason += "; running as written";
      optimized.module.reset();
      return optimized;
    }
  }
  return optimized;
}

// The tensors a forward graph holds as constants (a frozen module's weights).
void constant_tensors(torch::jit::Block* block, std::vector<at::Tensor>& out) {
  for (torch::jit::Node* n : block->nodes()) {
    for (torch::jit::Block* inner : n->blocks()) constant_tensors(inner, out);
    if (n->kind() != c10::prim::Constant) continue;
    if (auto value = torch::jit::toIValue(n->output()); value && value->isTensor()) out.push_back(value->toTensor());
  }
}

// A bf16 copy of an fp32 weight, rounded to nearest even by the kernels'
// conversion; a large one in memory that asked for huge pages, as the
// fp32 weights were (first touched here: on the loading thread's node).
at::Tensor narrow_to_bf16(const at::Tensor& weight, bool huge_pages) {
  const at::Tensor in = weight.contiguous();
  const auto bytes = static_cast<std::size_t>(in.numel()) * 2;
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16);
  at::Tensor out;
  void* data = huge_pages && bytes >= kHugePageWeightBytes ? numa::allocate_huge_pages(bytes) : nullptr;
  out = data != nullptr ? torch::from_blob(data, in.sizes(), [bytes](void* p) { numa::free_huge_pages(p, bytes); }, bf16)
                        : at::empty(in.sizes(), bf16);
  kernels::to_bf16(kernels::best_isa(), in.data_ptr<float>(), reinterpret_cast<std::uint16_t*>(out.data_ptr<at::BFloat16>()),
                   static_cast<std::size_t>(in.numel()));
  return out;
}

// Serves `impl` in bf16 where the CPU and the model allow it and its scores
// stay within the drift bound, else refuses (precision bf16) or leaves it
// fp32 saying why (bf16-if-available).
// `graph` is the model's graph report: the bf16 rewrite's lines join it.
Status serve_in_bf16(const torch::jit::Module& module, std::optional<torch::jit::Module>& optimized,
                     api::GraphReport& graph, api::PrecisionReport& report, const features::ModelSpec& spec,
                     const std::filesystem::path& dir, features::Precision precision, const LoadOptions& options) {
  const std::string where = dir.string() + ": precision bf16: ";
  auto unavailable = [&](const std::string& why) -> Status {
    if (precision == features::Precision::kBf16) {
      return make_error(Error::Code::kInvalidArgument, where + why + " (precision bf16-if-available serves it in fp32 instead)",
                        "precision");
    }
    report.reason = why;
    return {};
  };
  const kernels::Bf16Support cpu = kernels::bf16_support();
  if (!cpu.usable) return unavailable(cpu.missing);
  if (!optimized) {
    return unavailable("bf16 runs in the rewritten forward, and there is none (graph optimizations " + graph.state +
                       (graph.reason.empty() ? "" : ": " + graph.reason) + ")");
  }
  // Having the instructions is not being faster (a CPU may run bf16 products
  // no faster than fp32's, and each layer converts its inputs): the model's
  // own linear chains timed in both precisions decide bf16-if-available.
  const ChainTiming timing = time_linear_chains(*optimized, kBf16TimingRows);
  report.fp32_us = timing.fp32_us;
  report.bf16_us = timing.bf16_us;
  if (precision == features::Precision::kBf16IfAvailable && timing.chains > 0 && !(timing.bf16_us < timing.fp32_us)) {
    return unavailable("bf16 is not faster on this CPU: the linear layers took " + format_number(timing.bf16_us) +
                       " us in bf16 and " + format_number(timing.fp32_us) + " us in fp32 on " + std::to_string(kBf16TimingRows) +
                       " rows");
  }
  // fp32's scores on the check rows first: the conversion frees each fp32
  // weight as soon as the graph stops reading it, and the model as written
  // reads them.
  std::vector<std::pair<features::Batch, at::Tensor>> checks;
  std::uint64_t seed = 101;
  for (const std::size_t rows : {std::size_t{1}, std::size_t{7}, kBf16CheckRows}) {
    features::Batch batch = random_rows(spec, rows, seed++);
    auto want = run(module, batch, where + "the fp32 forward failed on random rows");
    if (!want) return tl::unexpected(want.error());
    checks.emplace_back(std::move(batch), std::move(*want));
  }
  // On a fresh frozen copy, never run: a forward that has run keeps the
  // plan its first call compiled, with the fp32 weights in it.
  Optimized fresh = optimize(module, options.linear_kernels);
  if (!fresh.module) return unavailable("the forward could not be rewritten again: " + fresh.report.reason);
  // Past here the fp32 weights go: any refusal fails the load.
  const Bf16Memory memory{[&options](const at::Tensor& weight) { return narrow_to_bf16(weight, options.huge_pages); },
                          [](const at::Tensor& weight) { weight.storage().unsafeGetStorageImpl()->reset(); }};
  auto drift_of = [&](const torch::jit::Module& bf16) -> Result<double> {
    double drift = 0;
    for (const auto& [batch, want] : checks) {
      auto got = run(bf16, batch, where + "the bf16 forward failed on random rows");
      if (!got) return tl::unexpected(got.error());
      drift = std::max(drift, score_distance(want, *got, 1.0, false));
    }
    return drift;
  };
  // Which layers of the chains can be bf16, tried on the chains alone while
  // nothing is released yet: every layer, unless that moves the scores past
  // half the bound (the tables' rounding takes the rest); then each chain's
  // first layer stays fp32.
  Bf16Parts parts;
  try {
    Optimized trial = optimize(module, options.linear_kernels);
    if (trial.module) {
      to_bf16(*trial.module, Bf16Memory{memory.narrow, [](const at::Tensor&) {}}, Bf16Parts{false, true});
      auto drift = drift_of(*trial.module);
      if (!drift) return tl::unexpected(drift.error());
      parts.first_layers = *drift <= spec.precision_max_drift / 2;
    }
  } catch (const std::exception& e) {
    return tl::unexpected(torch_error(where + "cannot convert the forward", e));
  }
  api::GraphRewrite rewrite;
  try {
    rewrite = to_bf16(*fresh.module, memory, parts);
  } catch (const std::exception& e) {
    return tl::unexpected(torch_error(where + "cannot convert the forward", e));
  }
  auto measured = drift_of(*fresh.module);
  if (!measured) return tl::unexpected(measured.error());
  const double drift = *measured;
  if (!(drift <= spec.precision_max_drift)) {
    return make_error(Error::Code::kInvalidArgument,
                      where + "its scores differ from fp32's by up to " + format_number(drift) + " on " +
                          std::to_string(kBf16CheckRows) + " random rows, above precision_max_drift " +
                          format_number(spec.precision_max_drift) + " (serve it in fp32, or raise the bound in model.yaml)",
                      "precision_max_drift");
  }
  report.served = "bf16";
  report.instructions = cpu.instructions;
  report.max_drift = drift;
  report.drift_bound = spec.precision_max_drift;
  optimized = std::move(fresh.module);
  graph.rewrites.push_back(std::move(rewrite));
  return {};
}

}  // namespace

TorchModel::TorchModel(std::filesystem::path dir, features::ModelSpec spec, std::unique_ptr<Impl> impl)
    : dir_(std::move(dir)), spec_(std::move(spec)), impl_(std::move(impl)) {}

TorchModel::~TorchModel() = default;

Result<std::unique_ptr<TorchModel>> TorchModel::load(const std::filesystem::path& dir, const LoadOptions& options) {
  // Before the process's first forward: the BLAS's kernels set to the CPU's (blas.h).
  blas::apply();
  auto spec = features::read_model_spec(dir.string());
  if (!spec) return tl::unexpected(spec.error());
  if (!options.version.empty()) spec->version = options.version;

  const auto pt_path = dir / "model.pt";
  if (!std::filesystem::is_regular_file(pt_path)) {
    return make_error(Error::Code::kNotFound, pt_path.string() + ": no such file (a model directory holds model.pt and model.yaml)");
  }
  CpuPacer pacer(options.cpu_share);
  auto file = PacedFile::open(pt_path, pacer);
  if (!file) return tl::unexpected(file.error());
  auto impl = std::make_unique<Impl>();
  try {
    std::istream in(file->get());
    impl->module = torch::jit::load(in, torch::kCPU);
    impl->module.eval();
  } catch (const std::exception& e) {
    return tl::unexpected(torch_error(pt_path.string() + ": not a TorchScript model", e));
  }
  if (!impl->module.find_method("forward")) {
    return make_error(Error::Code::kInvalidArgument, pt_path.string() + ": has no forward method");
  }
  // Before the rewrites: the frozen copy then shares the moved storages.
  if (options.huge_pages) {
    move_weights_to_huge_pages(impl->module);
    pacer.pace();  // the copy
  }
  // Every emb_<table> of model.pt must be one of model.yaml's tables, of its
  // rows: a model.pt exported for another contract fails here, not on its
  // first request. (model.yaml may declare tables the module holds otherwise.)
  for (const auto& [table, size] : embedding_tables(impl->module)) {
    const auto declared = spec->tables.find(table);
    if (declared == spec->tables.end()) {
      return make_error(Error::Code::kInvalidArgument,
                        dir.string() + ": model.pt's emb_" + table + " is not among model.yaml's tables", "tables." + table);
    }
    const auto rows = static_cast<std::uint64_t>(size);
    if (rows != declared->second) {
      return make_error(Error::Code::kInvalidArgument,
                        dir.string() + ": table '" + table + "' has " + std::to_string(declared->second) +
                            " rows in model.yaml but " + std::to_string(rows) + " in model.pt",
                        "tables." + table);
    }
  }
  if (options.graph_optimizations) {
    Optimized optimized = optimize_checked(impl->module, *spec, options.linear_kernels);
    impl->optimized = std::move(optimized.module);
    impl->report = std::move(optimized.report);
    pacer.pace();  // the rewrites and their check forward
  }
  const features::Precision precision = options.precision.value_or(spec->precision);
  impl->precision.requested = std::string(features::kPrecisionNames.name(precision));
  if (precision != features::Precision::kFp32) {
    if (auto bf16 = serve_in_bf16(impl->module, impl->optimized, impl->report, impl->precision, *spec, dir, precision, options);
        !bf16) {
      return tl::unexpected(bf16.error());
    }
    pacer.pace();  // the conversion and the drift check
  }
  impl->linear = linear_layers(impl->running(), impl->optimized.has_value());
  return std::unique_ptr<TorchModel>(new TorchModel(dir, std::move(*spec), std::move(impl)));
}

namespace {

Result<std::vector<float>> scores_of(const torch::jit::Module& module, const features::Batch& batch, const std::string& name) {
  auto out = run(module, batch, name + ": forward failed");
  if (!out) return tl::unexpected(out.error());
  const auto rows = static_cast<std::int64_t>(batch.rows);
  try {
    const at::Tensor scores = out->to(torch::kFloat).reshape({-1}).contiguous();
    if (scores.numel() != rows) {
      return make_error(Error::Code::kInternal, name + ": forward returned " + std::to_string(scores.numel()) +
                                                    " scores for " + std::to_string(rows) + " rows");
    }
    const float* data = scores.data_ptr<float>();
    return std::vector<float>(data, data + rows);
  } catch (const std::exception& e) {
    return tl::unexpected(torch_error(name + ": forward failed", e));
  }
}

}  // namespace

Result<std::vector<float>> TorchModel::forward(const features::Batch& batch) const {
  return scores_of(impl_->running(), batch, spec_.name);
}

Result<std::vector<float>> TorchModel::forward_as_written(const features::Batch& batch) const {
  if (impl_->precision.served != "fp32") {
    return make_error(Error::Code::kUnavailable, spec_.name + ": served in bf16, its fp32 weights were released at load");
  }
  return scores_of(impl_->module, batch, spec_.name);
}

api::GraphReport TorchModel::graph_report() const {
  api::GraphReport report = impl_->report;
  report.linear.own = impl_->linear.own;
  report.linear.kernels = impl_->linear.own > 0 ? linear_kernels(impl_->linear.bf16) : "";
  report.linear.libtorch = impl_->linear.libtorch;
  report.linear.blas = blas_summary();
  return report;
}

api::PrecisionReport TorchModel::precision() const { return impl_->precision; }

namespace {

// RecordFunction takes plain function pointers: the count in progress is
// the calling thread's.
thread_local TorchModel::Workload* counting = nullptr;
thread_local int counted_depth = 0;  // inside a counted op, its own inner ops are not counted again

struct Counted : at::ObserverContext {};

double numel(const c10::IValue& v) { return v.isTensor() ? static_cast<double>(v.toTensor().numel()) : 0; }
std::int64_t size(const c10::IValue& v, std::int64_t dim) {
  if (!v.isTensor() || v.toTensor().dim() == 0) return 0;
  const at::Tensor& t = v.toTensor();
  return t.size(dim < 0 ? dim + t.dim() : dim);
}

// The most ids one bag of `offsets` (one start per bag) over `indices` sums.
double longest_bag(const c10::IValue& indices, const c10::IValue& offsets) {
  if (!indices.isTensor() || !offsets.isTensor() || offsets.toTensor().scalar_type() != at::kLong) return 0;
  const at::Tensor starts = offsets.toTensor().reshape({-1}).contiguous();
  const std::int64_t count = starts.numel(), n = indices.toTensor().numel();
  const auto* start = starts.data_ptr<std::int64_t>();
  std::int64_t longest = 0;
  for (std::int64_t b = 0; b < count; ++b) longest = std::max(longest, (b + 1 < count ? start[b + 1] : n) - start[b]);
  return static_cast<double>(longest);
}

// The work of one op from its inputs; false if it is not one that counts.
bool count(std::string_view op, c10::ArrayRef<const c10::IValue> in, TorchModel::Workload& w) {
  // LibTorch 1.13 hands a custom op's observers one value more than its
  // arguments, in front (measured): its arguments are the last ones.
  if (op.substr(0, 11) == "numaserve::") {
    const std::size_t arity = op == "numaserve::dot_interaction"        ? 3
                              : op == "numaserve::dot_interaction_flat" ? 2
                              : op == "numaserve::linear_chain"         ? 5
                                                                        : 6;
    if (in.size() < arity) return false;
    in = in.slice(in.size() - arity);
  }
  auto arg = [&in](std::size_t k) -> const c10::IValue& { return in[k]; };
  if (op == "aten::linear" && in.size() >= 2) {
    w.multiply_adds += numel(arg(0)) * static_cast<double>(size(arg(1), 0));
    w.reduction_length += static_cast<double>(size(arg(1), 1));
  } else if (op == "numaserve::linear_chain" && in.size() >= 2 && arg(1).isTensorList()) {
    const auto weights = arg(1).toTensorVector();
    const double rows = weights.empty() || weights[0].size(1) == 0 ? 0 : numel(arg(0)) / static_cast<double>(weights[0].size(1));
    for (const auto& weight : weights) {
      w.multiply_adds += rows * static_cast<double>(weight.numel());
      w.reduction_length += static_cast<double>(weight.size(1));
    }
  } else if ((op == "aten::addmm" && in.size() >= 3) || ((op == "aten::mm" || op == "aten::matmul") && in.size() >= 2)) {
    const std::size_t a = op == "aten::addmm" ? 1 : 0;
    w.multiply_adds += numel(arg(a)) * static_cast<double>(size(arg(a + 1), -1));
    w.reduction_length += static_cast<double>(size(arg(a), -1));
  } else if (op == "aten::bmm" && in.size() >= 2) {
    w.multiply_adds += numel(arg(0)) * static_cast<double>(size(arg(1), -1));
    w.reduction_length += static_cast<double>(size(arg(0), -1));
  } else if ((op == "numaserve::dot_interaction" || op == "numaserve::dot_interaction_flat") && in.size() >= 2) {
    w.multiply_adds += static_cast<double>(size(arg(0), 0) * size(arg(0), 2)) * numel(arg(1));
    w.reduction_length += static_cast<double>(size(arg(0), 2));
  } else if (op == "aten::embedding_bag" && in.size() >= 3) {
    w.gathered_bytes += numel(arg(1)) * static_cast<double>(size(arg(0), 1)) * 4;  // ATen's bags are fp32
    w.reduction_length += longest_bag(arg(1), arg(2)) + 1;                         // + a mean's division
  } else if (op == "numaserve::embedding_bags" && in.size() >= 3 && arg(0).isTensorList() && arg(1).isTensorList() &&
             arg(2).isTensorList()) {
    const auto tables = arg(0).toTensorVector(), indices = arg(1).toTensorVector(), offsets = arg(2).toTensorVector();
    double longest = 0;
    for (std::size_t k = 0; k < tables.size() && k < indices.size() && k < offsets.size(); ++k) {
      w.gathered_bytes += static_cast<double>(indices[k].numel() * tables[k].size(1)) * static_cast<double>(tables[k].element_size());
      longest = std::max(longest, longest_bag(indices[k], offsets[k]) + 1);
    }
    w.reduction_length += longest;  // the bags of one call are side by side, not one after another
  } else {
    return false;
  }
  return true;
}

std::unique_ptr<at::ObserverContext> count_start(const at::RecordFunction& fn) {
  if (counting == nullptr) return nullptr;
  TorchModel::Workload inner;
  if (!count(fn.name(), fn.inputs(), inner)) return nullptr;
  if (counted_depth++ == 0) {
    counting->multiply_adds += inner.multiply_adds;
    counting->gathered_bytes += inner.gathered_bytes;
    counting->reduction_length += inner.reduction_length;
  }
  return std::make_unique<Counted>();
}

void count_end(const at::RecordFunction&, at::ObserverContext* counted) {
  if (counted != nullptr) --counted_depth;
}

// What the ops of one forward of `module` ask (count()).
Result<TorchModel::Workload> observe(const torch::jit::Module& module, const features::Batch& batch, const std::string& name) {
  TorchModel::Workload w;
  counting = &w;
  counted_depth = 0;
  const auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(count_start, count_end).needsInputs(true));
  auto ran = run(module, batch, name + ": forward failed");
  at::removeCallback(handle);
  counting = nullptr;
  if (!ran) return tl::unexpected(ran.error());
  return w;
}

// The model as written, frozen, with every floating constant, every bag's
// per-sample weights and the dense input replaced by their magnitudes and
// sigmoid by x / 4 (its slope's bound): run, it gives the sums of
// magnitudes rounding errors scale with (rounding_bound). In fp32, as the
// model: its own rounding is far below the bound's slack.
torch::jit::Module magnitude_model(const torch::jit::Module& module) {
  torch::jit::Module frozen = torch::jit::freeze_module(module);
  const std::shared_ptr<torch::jit::Graph> graph = frozen.get_method("forward").graph();
  std::vector<torch::jit::Block*> blocks = {graph->block()};
  std::vector<torch::jit::Node*> nodes;
  while (!blocks.empty()) {
    torch::jit::Block* block = blocks.back();
    blocks.pop_back();
    for (torch::jit::Node* n : block->nodes()) {
      nodes.push_back(n);
      for (torch::jit::Block* inner : n->blocks()) blocks.push_back(inner);
    }
  }
  for (torch::jit::Node* n : nodes) {
    torch::jit::WithInsertPoint here(n);
    if (n->kind() == c10::prim::Constant) {
      auto value = torch::jit::toIValue(n->output());
      if (!value || !value->isTensor() || !value->toTensor().is_floating_point()) continue;
      n->output()->replaceAllUsesWith(graph->insertConstant(value->toTensor().abs()));
    } else if (n->kind() == c10::aten::sigmoid) {
      n->output()->replaceAllUsesWith(graph->insert(c10::aten::mul, {n->input(0), 0.25}));
    } else if (n->kind() == c10::aten::embedding_bag && n->inputs().size() > 6 &&
               n->input(6)->type()->kind() != c10::TypeKind::NoneType) {
      // Typed Tensor? there: unwrapped (it is not None) for abs.
      n->replaceInput(6, graph->insert(c10::aten::abs, {graph->insertUncheckedCast(n->input(6), c10::TensorType::get())}));
    }
  }
  torch::jit::EliminateDeadCode(graph);
  return frozen;
}

}  // namespace

Result<TorchModel::Workload> TorchModel::workload(const features::Batch& batch) const {
  return observe(impl_->running(), batch, spec_.name);
}

Result<std::vector<double>> TorchModel::rounding_bound(const features::Batch& batch) const {
  if (impl_->precision.served != "fp32") {
    return make_error(Error::Code::kUnavailable, spec_.name + ": served in bf16, its fp32 weights were released at load");
  }
  auto scores = forward(batch);
  if (!scores) return tl::unexpected(scores.error());
  auto work = observe(impl_->module, batch, spec_.name);
  if (!work) return tl::unexpected(work.error());
  try {
    c10::InferenceMode inference;
    torch::jit::Module magnitude = magnitude_model(impl_->module);
    std::vector<c10::IValue> inputs = inputs_of(batch);
    inputs[0] = inputs[0].toTensor().abs();
    const at::Tensor m = magnitude.forward(inputs).toTensor().to(at::kDouble).reshape({-1}).contiguous();
    if (m.numel() != static_cast<std::int64_t>(batch.rows)) {
      return make_error(Error::Code::kInternal, spec_.name + ": the magnitude forward returned " + std::to_string(m.numel()) + " values");
    }
    constexpr double kUnit = 0x1p-24;
    const double lu = work->reduction_length * kUnit;
    std::vector<double> bound(batch.rows);
    for (std::size_t r = 0; r < batch.rows; ++r) {
      // (1 + 2^-10): the magnitude forward's own rounding, at most gamma_L of it.
      bound[r] = 2 * lu / (1 - lu) * m.data_ptr<double>()[r] * (1 + 0x1p-10) + 16 * kUnit * std::abs((*scores)[r]);
    }
    return bound;
  } catch (const std::exception& e) {
    return tl::unexpected(torch_error(spec_.name + ": the magnitude forward failed", e));
  }
}

std::map<std::string, int> TorchModel::fused_ops() const {
  return impl_->optimized ? model::fused_ops(*impl_->optimized) : std::map<std::string, int>{};
}

Status TorchModel::warm_up(std::size_t rows, unsigned rounds) const {
  auto batch = default_rows(spec_, rows);
  if (!batch) return tl::unexpected(batch.error());
  for (unsigned i = 0; i < rounds; ++i) {
    auto scores = forward(*batch);
    if (!scores) return tl::unexpected(std::move(scores.error()).with_context("warm-up"));
  }
  return {};
}

Status TorchModel::check(std::size_t rows) const {
  const std::string pt = (dir_ / "model.pt").string();
  const std::string signature = signature_of(impl_->module.get_method("forward").function().getSchema());
  if (signature != kForward) {
    return make_error(Error::Code::kInvalidArgument, pt + ": forward" + signature + ", want forward" + kForward, "forward");
  }
  auto batch = default_rows(spec_, rows);
  if (!batch) return tl::unexpected(batch.error());
  auto ran = run(impl_->running(), *batch, pt + ": forward failed on " + std::to_string(rows) + " default rows");
  if (!ran) {
    Error failed = ran.error();
    failed.field = "forward";
    return tl::unexpected(std::move(failed));
  }
  const at::Tensor out = *ran;
  const auto n = static_cast<std::int64_t>(rows);
  if (!(out.dim() == 1 && out.size(0) == n) && !(out.dim() == 2 && out.size(0) == n && out.size(1) == 1)) {
    return make_error(Error::Code::kInvalidArgument,
                      pt + ": forward returned " + c10::str(out.sizes()) + " for " + std::to_string(rows) +
                          " rows, want [" + std::to_string(rows) + "] or [" + std::to_string(rows) + ", 1]",
                      "output");
  }
  if (!out.is_floating_point()) {
    return make_error(Error::Code::kInvalidArgument, pt + ": forward returned " + std::string(c10::toString(out.scalar_type())) +
                                                         " scores, want floating point", "output");
  }
  if (!at::isfinite(out).all().item<bool>()) {
    return make_error(Error::Code::kInvalidArgument, pt + ": forward returned NaN or infinite scores on default rows", "output");
  }
  return {};
}

Result<ModelCheck> check_model(const std::filesystem::path& dir, const LoadOptions& options, std::size_t rows) {
  const std::size_t before = resident_bytes();
  auto model = TorchModel::load(dir, options);
  if (!model) return tl::unexpected(model.error());
  if (auto checked = (*model)->check(rows); !checked) return tl::unexpected(checked.error());
  const std::size_t after = resident_bytes();
  const auto& spec = (*model)->spec();
  return ModelCheck{spec.name,
                    spec.version,
                    (*model)->graph_report(),
                    std::string("forward") + kForward,
                    rows,
                    (*model)->weight_bytes(),
                    after > before ? after - before : 0,
                    (*model)->precision()};
}

Result<drift::Report> precision_drift(const std::filesystem::path& dir, LoadOptions options,
                                      const std::vector<features::Batch>& requests,
                                      const std::vector<std::vector<float>>& labels) {
  if (!labels.empty() && labels.size() != requests.size()) {
    return make_error(Error::Code::kInvalidArgument,
                      "labels: " + std::to_string(labels.size()) + " lines for " + std::to_string(requests.size()) + " requests",
                      "labels");
  }
  options.precision = features::Precision::kFp32;
  auto fp32 = TorchModel::load(dir, options);
  if (!fp32) return tl::unexpected(fp32.error());
  options.precision = features::Precision::kBf16;
  auto bf16 = TorchModel::load(dir, options);
  if (!bf16) return tl::unexpected(bf16.error());
  std::vector<drift::Scored> scored;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto reference = (*fp32)->forward(requests[i]);
    if (!reference) return tl::unexpected(reference.error());
    auto candidate = (*bf16)->forward(requests[i]);
    if (!candidate) return tl::unexpected(candidate.error());
    if (!labels.empty() && labels[i].size() != requests[i].rows) {
      return make_error(Error::Code::kInvalidArgument,
                        "labels line " + std::to_string(i + 1) + ": " + std::to_string(labels[i].size()) + " labels for " +
                            std::to_string(requests[i].rows) + " items",
                        "labels");
    }
    scored.push_back({std::move(*reference), std::move(*candidate), labels.empty() ? std::vector<float>{} : labels[i]});
  }
  return drift::compare(scored);
}

// Each storage once: the optimized forward's constants share the
// parameters' storage, except those it made (bf16 copies, folded weights).
std::vector<numa::MemoryRange> TorchModel::weights() const {
  std::vector<numa::MemoryRange> out;
  std::vector<const void*> seen;
  auto add = [&](const at::Tensor& t) {
    if (!t.defined() || !t.has_storage() || t.storage().nbytes() == 0) return;
    void* data = t.storage().data();
    if (std::find(seen.begin(), seen.end(), data) != seen.end()) return;
    seen.push_back(data);
    out.push_back({data, t.storage().nbytes()});
  };
  for (const auto& p : impl_->module.named_parameters()) add(p.value);
  for (const auto& b : impl_->module.named_buffers()) add(b.value);
  if (impl_->optimized) {
    std::vector<at::Tensor> constants;
    constant_tensors(impl_->optimized->get_method("forward").graph()->block(), constants);
    for (const auto& t : constants) add(t);
  }
  return out;
}

std::size_t TorchModel::weight_bytes() const {
  std::size_t total = 0;
  for (const auto& range : weights()) total += range.bytes;
  return total;
}

void set_intra_op_threads(unsigned threads) { at::set_num_threads(static_cast<int>(threads == 0 ? 1 : threads)); }

namespace {

// What precision bf16 would run on here: "avx512_bf16", or "none (why)".
std::string bf16_summary() {
  const auto cpu = kernels::bf16_support();
  return cpu.usable ? cpu.instructions : "none (" + cpu.missing + ")";
}

}  // namespace

std::string blas_summary() {
  // Which BLAS the dynamic linker picked decides forward speed (the
  // reference BLAS is ~17x slower; the pthread OpenBLAS fights OpenMP for
  // cores), so name the file actually mapped, and the core it runs.
  const std::string core = blas::summary(blas::apply());
  std::string library = "unknown";
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (path.find("libblas.so") != std::string::npos || path.find("libopenblas") != std::string::npos) {
      library = std::filesystem::path(path).parent_path().filename().string();
      break;
    }
  }
  return library + (core.empty() ? "" : " " + core);
}

std::string runtime_summary() {
  return std::string("LibTorch ") + TORCH_VERSION + " (" +
         (at::get_parallel_info().find("OpenMP") != std::string::npos ? "OpenMP" : "native") + "), BLAS " + blas_summary() +
         ", fused kernels " + kernel_isa() + ", bf16 " + bf16_summary();
}

}  // namespace numaserve::model
