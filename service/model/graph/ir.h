#pragma once
// What graph/'s files share (the passes, ops.cpp: the fused ops, narrow.cpp:
// serving below fp32): reading constants off a frozen graph (ir.cpp), the
// kernels' path and packing a linear layer (ops.cpp). Brings LibTorch:
// included only by graph/'s own files.

#include <torch/script.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/linear.h"

namespace numaserve::graph::ir {

using torch::jit::Node;
using torch::jit::Value;
namespace aten = c10::aten;
namespace prim = c10::prim;

inline bool is_long_vector(const at::Tensor& t) { return t.scalar_type() == at::kLong && t.dim() == 1; }

std::optional<std::int64_t> constant_int(Value* v);
bool constant_none(Value* v);
std::optional<std::vector<std::int64_t>> constant_long_vector(Value* v);
std::optional<at::Tensor> constant_tensor(Value* v);
// The elements of a constant list, or of a ListConstruct of constants.
std::optional<std::vector<c10::IValue>> constant_list(Value* v);
std::string name_of(const Value* v);  // "%x"
std::string shape_of(const at::Tensor& t);  // "1000 x 64"
Node* only_user(Value* v);
// Every node of `kind` in `block` and the blocks inside it.
void nodes_of_kind(torch::jit::Block* block, c10::Symbol kind, std::vector<Node*>& out);

// The kernels' path: the CPU's best, unless the benchmark narrowed it.
kernels::Isa kernel_path();

// A packed layer's precision, from its tensor's dtype (float, bfloat16, int8).
kernels::LinearPrecision precision_of(const at::Tensor& packed);

// A linear layer's fp32 weight [outputs][inputs] packed for the kernels
// (kernels/linear.h) in `precision`, as a tensor the graph holds as a
// constant (float, bfloat16 or int8 elements). Made by the calling thread:
// on its NUMA node.
at::Tensor pack(const at::Tensor& weight, kernels::LinearPrecision precision);

}  // namespace numaserve::graph::ir
