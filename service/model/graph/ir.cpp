// Reading a frozen graph's constants (ir.h).
#include "graph/ir.h"

#include <torch/csrc/jit/ir/constants.h>

#include <string>
#include <vector>

namespace numaserve::graph::ir {

std::optional<std::int64_t> constant_int(Value* v) {
  auto value = torch::jit::toIValue(v);
  if (!value || !value->isInt()) return std::nullopt;
  return value->toInt();
}

bool constant_none(Value* v) {
  auto value = torch::jit::toIValue(v);
  return value && value->isNone();
}

std::optional<std::vector<std::int64_t>> constant_long_vector(Value* v) {
  auto value = torch::jit::toIValue(v);
  if (!value || !value->isTensor() || !is_long_vector(value->toTensor())) return std::nullopt;
  const at::Tensor t = value->toTensor().contiguous();
  return std::vector<std::int64_t>(t.data_ptr<std::int64_t>(), t.data_ptr<std::int64_t>() + t.numel());
}

std::optional<at::Tensor> constant_tensor(Value* v) {
  auto value = torch::jit::toIValue(v);
  if (!value || !value->isTensor()) return std::nullopt;
  return value->toTensor();
}

// The elements of a constant list, or of a ListConstruct of constants.
std::optional<std::vector<c10::IValue>> constant_list(Value* v) {
  if (auto value = torch::jit::toIValue(v); value && value->isList()) return value->toListRef().vec();
  if (v->node()->kind() != prim::ListConstruct) return std::nullopt;
  std::vector<c10::IValue> out;
  for (Value* input : v->node()->inputs()) {
    auto value = torch::jit::toIValue(input);
    if (!value) return std::nullopt;
    out.push_back(*value);
  }
  return out;
}

std::string name_of(const Value* v) { return "%" + v->debugName(); }

Node* only_user(Value* v) { return v->uses().size() == 1 ? v->uses()[0].user : nullptr; }

std::string shape_of(const at::Tensor& t) {
  std::string out;
  for (const auto size : t.sizes()) out += (out.empty() ? "" : " x ") + std::to_string(size);
  return out;
}

void nodes_of_kind(torch::jit::Block* block, c10::Symbol kind, std::vector<Node*>& out) {
  for (Node* n : block->nodes()) {
    for (torch::jit::Block* inner : n->blocks()) nodes_of_kind(inner, kind, out);
    if (n->kind() == kind) out.push_back(n);
  }
}

}  // namespace numaserve::graph::ir
