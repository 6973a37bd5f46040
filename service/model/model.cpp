// The only place (with demo_models.cpp) that includes LibTorch.
#include "model/model.h"

#include <torch/script.h>

#include <ATen/Parallel.h>
#include <torch/version.h>

#include <unistd.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "numaserve/common/text_file.h"

namespace numaserve::model {
namespace {

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

// `rows` rows at every feature's declared default: the shapes a request
// makes, without one.
Result<features::Batch> default_rows(const features::ModelSpec& spec, std::size_t rows) {
  features::Request request;
  request.items.resize(rows);
  features::StoredFeatures nothing_stored;
  nothing_stored.items.resize(rows);
  return features::extract(spec, request, nothing_stored);
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
  torch::jit::Module module;
};

TorchModel::TorchModel(std::filesystem::path dir, features::ModelSpec spec, std::unique_ptr<Impl> impl)
    : dir_(std::move(dir)), spec_(std::move(spec)), impl_(std::move(impl)) {}

TorchModel::~TorchModel() = default;

Result<std::unique_ptr<TorchModel>> TorchModel::load(const std::filesystem::path& dir) {
  const auto yaml_path = dir / "model.yaml";
  auto yaml = read_text_file(yaml_path);
  if (!yaml) return tl::unexpected(yaml.error());
  auto spec = features::parse_model_spec(*yaml, yaml_path.string());
  if (!spec) return tl::unexpected(spec.error());

  const auto pt_path = dir / "model.pt";
  if (!std::filesystem::is_regular_file(pt_path)) {
    return make_error(Error::Code::kNotFound, pt_path.string() + ": no such file (a model directory holds model.pt and model.yaml)");
  }
  auto impl = std::make_unique<Impl>();
  try {
    impl->module = torch::jit::load(pt_path.string(), torch::kCPU);
    impl->module.eval();
  } catch (const std::exception& e) {
    return tl::unexpected(torch_error(pt_path.string() + ": not a TorchScript model", e));
  }
  if (!impl->module.find_method("forward")) {
    return make_error(Error::Code::kInvalidArgument, pt_path.string() + ": has no forward method");
  }
  for (const auto& [table, size] : embedding_tables(impl->module)) {
    const auto declared = spec->tables.find(table);
    if (declared == spec->tables.end()) continue;
    const auto rows = static_cast<std::uint64_t>(size);
    if (rows != declared->second) {
      return make_error(Error::Code::kInvalidArgument,
                        dir.string() + ": table '" + table + "' has " + std::to_string(declared->second) +
                            " rows in model.yaml but " + std::to_string(rows) + " in model.pt",
                        "tables." + table);
    }
  }
  return std::unique_ptr<TorchModel>(new TorchModel(dir, std::move(*spec), std::move(impl)));
}

Result<std::vector<float>> TorchModel::forward(const features::Batch& batch) const {
  const auto rows = static_cast<std::int64_t>(batch.rows);
  try {
    c10::InferenceMode inference;
    torch::jit::Module module = impl_->module;  // a handle: shares the weights
    const at::Tensor out = module.forward(inputs_of(batch)).toTensor().to(torch::kFloat).reshape({-1}).contiguous();
    if (out.numel() != rows) {
      return make_error(Error::Code::kInternal, spec_.name + ": forward returned " + std::to_string(out.numel()) +
                                                    " scores for " + std::to_string(rows) + " rows");
    }
    const float* data = out.data_ptr<float>();
    return std::vector<float>(data, data + rows);
  } catch (const std::exception& e) {
    return tl::unexpected(torch_error(spec_.name + ": forward failed", e));
  }
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
  at::Tensor out;
  try {
    c10::InferenceMode inference;
    torch::jit::Module module = impl_->module;
    out = module.forward(inputs_of(*batch)).toTensor();
  } catch (const std::exception& e) {
    Error failed = torch_error(pt + ": forward failed on " + std::to_string(rows) + " default rows", e);
    failed.field = "forward";
    return tl::unexpected(std::move(failed));
  }
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

Result<ModelCheck> check_model(const std::filesystem::path& dir, std::size_t rows) {
  const std::size_t before = resident_bytes();
  auto model = TorchModel::load(dir);
  if (!model) return tl::unexpected(model.error());
  if (auto checked = (*model)->check(rows); !checked) return tl::unexpected(checked.error());
  const std::size_t after = resident_bytes();
  const auto& spec = (*model)->spec();
  return ModelCheck{spec.name, spec.version, std::string("forward") + kForward, rows, (*model)->weight_bytes(),
                    after > before ? after - before : 0};
}

std::vector<numa::MemoryRange> TorchModel::weights() const {
  std::vector<numa::MemoryRange> out;
  auto add = [&out](const at::Tensor& t) {
    if (t.defined() && t.nbytes() > 0) out.push_back({t.data_ptr(), t.nbytes()});
  };
  for (const auto& p : impl_->module.named_parameters()) add(p.value);
  for (const auto& b : impl_->module.named_buffers()) add(b.value);
  return out;
}

std::size_t TorchModel::weight_bytes() const {
  std::size_t total = 0;
  for (const auto& range : weights()) total += range.bytes;
  return total;
}

void set_intra_op_threads(unsigned threads) { at::set_num_threads(static_cast<int>(threads == 0 ? 1 : threads)); }

std::string runtime_summary() {
  // Which BLAS the dynamic linker picked decides forward speed (the
  // reference BLAS is ~17x slower; the pthread OpenBLAS fights OpenMP for
  // cores), so name the file actually mapped.
  std::string blas = "unknown";
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (path.find("libblas.so") != std::string::npos || path.find("libopenblas") != std::string::npos) {
      blas = std::filesystem::path(path).parent_path().filename().string();
      break;
    }
  }
  return std::string("LibTorch ") + TORCH_VERSION + " (" +
         (at::get_parallel_info().find("OpenMP") != std::string::npos ? "OpenMP" : "native") + "), BLAS " + blas;
}

}  // namespace numaserve::model
