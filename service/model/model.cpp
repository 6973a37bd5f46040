// Loading a model and running its forward (LibTorch: see CMakeLists.txt for
// the few files that include it).
#include "model/model.h"
#include "model/torch_model.h"

#include <torch/script.h>

#include <ATen/Parallel.h>
#include <torch/version.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "blas/blas.h"
#include "kernels/kernels.h"
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

constexpr const char* kForward = "(dense: Tensor, indices: List[Tensor], offsets: List[Tensor]) -> Tensor";

// The tensors below borrow the batch's memory: forward() never writes its
// inputs, and they do not outlive the call.
at::Tensor borrow(const std::vector<std::int64_t>& values) {
  return torch::from_blob(const_cast<std::int64_t*>(values.data()), {static_cast<std::int64_t>(values.size())},
                          torch::kLong);
}

}  // namespace

std::vector<ModuleTable> embedding_tables(const torch::jit::Module& module) {
  std::vector<ModuleTable> out;
  auto add = [&out](const std::string& name, const at::Tensor& weight, const torch::jit::Module& owner, const std::string& attribute) {
    if (name.rfind("emb_", 0) == 0) out.push_back({name.substr(4), weight, owner, attribute});
  };
  for (const auto& param : module.named_parameters(/*recurse=*/false)) add(param.name, param.value, module, param.name);
  for (const auto& child : module.named_children()) {
    if (child.value.hasattr("weight") && child.value.attr("weight").isTensor()) {
      add(child.name, child.value.attr("weight").toTensor(), child.value, "weight");
    }
  }
  return out;
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

Result<at::Tensor> run(const torch::jit::Module& m, const features::Batch& batch, const std::string& what) {
  try {
    c10::InferenceMode inference;
    torch::jit::Module module = m;  // a handle: shares the weights
    return module.forward(inputs_of(batch)).toTensor();
  } catch (const std::exception& e) {
    return tl::unexpected(torch_error(what, e));
  }
}

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

namespace {

// Optimizes `module`, and keeps the result only if its forward gives the
// original's scores on random rows of several sizes.
graph::Optimized optimize_checked(const torch::jit::Module& module, const features::ModelSpec& spec, bool linear_kernels) {
  graph::Optimized optimized = graph::optimize(module, linear_kernels);
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

// Every emb_<table> of model.pt must be one of model.yaml's tables, of its
// rows: a model.pt exported for another contract fails here, not on its
// first request. (model.yaml may declare tables the module holds otherwise.)
Status check_tables(const torch::jit::Module& module, const features::ModelSpec& spec, const std::filesystem::path& dir) {
  for (const auto& t : embedding_tables(module)) {
    const auto declared = spec.tables.find(t.table);
    if (declared == spec.tables.end()) {
      return make_error(Error::Code::kInvalidArgument,
                        dir.string() + ": model.pt's emb_" + t.table + " is not among model.yaml's tables", "tables." + t.table);
    }
    const auto rows = static_cast<std::uint64_t>(t.weight.dim() > 0 ? t.weight.size(0) : 0);
    if (rows != declared->second) {
      return make_error(Error::Code::kInvalidArgument,
                        dir.string() + ": table '" + t.table + "' has " + std::to_string(declared->second) +
                            " rows in model.yaml but " + std::to_string(rows) + " in model.pt",
                        "tables." + t.table);
    }
  }
  return {};
}

// serve --precision stands for both of model.yaml's keys unless
// --embedding-precision is given too.
Asked asked_of(const features::ModelSpec& spec, const LoadOptions& options) {
  Asked asked;
  asked.precision = options.precision.value_or(spec.precision);
  asked.tables = features::tables_following(asked.precision);
  if (options.embedding_precision) {
    asked.tables = *options.embedding_precision;
    asked.tables_written = true;
  } else if (!options.precision && spec.embedding_precision) {
    asked.tables = *spec.embedding_precision;
    asked.tables_written = true;
  }
  return asked;
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
  if (auto s = check_tables(impl->module, *spec, dir); !s) return tl::unexpected(s.error());
  auto shipped = read_shipped_tables(impl->module, *spec, dir, options.huge_pages);
  if (!shipped) return tl::unexpected(shipped.error());
  impl->shipped = std::move(*shipped);
  if (options.graph_optimizations) {
    graph::Optimized optimized = optimize_checked(impl->module, *spec, options.linear_kernels);
    impl->optimized = std::move(optimized.module);
    impl->report = std::move(optimized.report);
    pacer.pace();  // the rewrites and their check forward
  }
  if (!impl->shipped.empty()) {
    if (auto s = serve_shipped(*impl, dir, options); !s) return tl::unexpected(s.error());
  }
  const Asked asked = asked_of(*spec, options);
  impl->precision.requested = std::string(features::kPrecisionNames.name(asked.precision));
  if (asked.precision != features::Precision::kFp32 || asked.tables != features::TablePrecision::kFp32) {
    if (auto s = serve_narrowed(*impl, *spec, dir, asked, options); !s) {
      return tl::unexpected(s.error());
    }
    pacer.pace();  // the conversion and the drift check
  }
  impl->linear = graph::linear_layers(impl->running(), impl->optimized.has_value());
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

Status fp32_weights_kept(const api::PrecisionReport& precision, const std::string& model) {
  if (!precision.narrowed()) return {};
  return make_error(Error::Code::kUnavailable, model + ": served in " + precision.served + " with " + precision.tables +
                                                   " tables, its fp32 weights were released at load");
}

Result<std::vector<float>> TorchModel::forward(const features::Batch& batch) const {
  return scores_of(impl_->running(), batch, spec_.name);
}

Result<std::vector<float>> TorchModel::forward_as_written(const features::Batch& batch) const {
  if (auto kept = fp32_weights_kept(impl_->precision, spec_.name); !kept) return tl::unexpected(kept.error());
  return scores_of(impl_->module, batch, spec_.name);
}

api::GraphReport TorchModel::graph_report() const {
  api::GraphReport report = impl_->report;
  report.linear.own = impl_->linear.own;
  report.linear.kernels = impl_->linear.own > 0 ? graph::linear_kernels(impl_->linear.precision) : "";
  report.linear.libtorch = impl_->linear.libtorch;
  report.linear.blas = blas_summary();
  return report;
}

api::PrecisionReport TorchModel::precision() const { return impl_->precision; }

std::map<std::string, int> TorchModel::fused_ops() const {
  return impl_->optimized ? graph::fused_ops(*impl_->optimized) : std::map<std::string, int>{};
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
         ", fused kernels " + graph::kernel_isa() + ", bf16 " +
         instructions_summary(kernels::LinearPrecision::kBf16) + ", int8 " + instructions_summary(kernels::LinearPrecision::kInt8);
}

}  // namespace numaserve::model
