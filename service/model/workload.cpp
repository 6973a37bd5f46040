// The work a forward asks of the machine (the benchmark's roofline) and the
// rounding bound of an fp32 forward (the tests'), both from the ops it calls.
#include <ATen/record_function.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/freeze_module.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/torch_model.h"

namespace numaserve::model {
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
  if (auto kept = fp32_weights_kept(impl_->precision, spec_.name); !kept) return tl::unexpected(kept.error());
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

}  // namespace numaserve::model
