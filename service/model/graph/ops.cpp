// The fused ops, registered as TorchScript operators numaserve::*, and the
// kernels' path they run on (kernel_path.h). See graph.h; the passes put
// them into graphs.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/ir.h"
#include "graph/kernel_path.h"
#include "kernels/kernels.h"
#include "kernels/linear.h"

namespace numaserve::graph {
namespace {

// The kernels' path: the CPU's best, unless the benchmark narrowed it.
std::atomic<kernels::Isa> isa{kernels::best_isa()};
std::atomic<bool> bag_reuse{true};  // set_bag_reuse()

// Rows per task when an op's rows are split over the intra-op threads: a
// row of either kernel is well under a microsecond, so smaller tasks would
// cost more to hand out than they save.
constexpr std::int64_t kGrain = 32;

using ir::is_long_vector;

// ---- The ops.

// out[n, p] = <v[n, rows[p]], v[n, cols[p]]>, rows and cols already in [0, F).
at::Tensor run_dot_pairs(const at::Tensor& vectors, std::vector<std::int64_t> rows, std::vector<std::int64_t> cols) {
  const at::Tensor v = vectors.contiguous();
  const auto n = v.size(0), pairs = static_cast<std::int64_t>(rows.size());
  at::Tensor out = at::empty({n, pairs}, v.options());
  const kernels::DotPairs job{v.data_ptr<float>(), v.size(1), v.size(2), rows.data(), cols.data(), pairs, out.data_ptr<float>()};
  at::parallel_for(0, n, kGrain, [&](std::int64_t begin, std::int64_t end) { kernels::dot_pairs(isa.load(std::memory_order_relaxed), job, begin, end); });
  return out;
}

bool kernel_takes(const at::Tensor& vectors) { return vectors.scalar_type() == at::kFloat && vectors.dim() == 3; }

// bmm(v, v^T)[:, rows, cols]
at::Tensor dot_interaction(const at::Tensor& vectors, const at::Tensor& rows, const at::Tensor& cols) {
  auto original = [&] {
    return at::index(at::bmm(vectors, vectors.transpose(1, 2)), c10::List<c10::optional<at::Tensor>>({c10::nullopt, rows, cols}));
  };
  if (!kernel_takes(vectors) || !is_long_vector(rows) || !is_long_vector(cols) || rows.numel() != cols.numel()) return original();
  const auto f = vectors.size(1);
  const at::Tensor rc = rows.contiguous(), cc = cols.contiguous();
  std::vector<std::int64_t> r(rc.data_ptr<std::int64_t>(), rc.data_ptr<std::int64_t>() + rc.numel());
  std::vector<std::int64_t> c(cc.data_ptr<std::int64_t>(), cc.data_ptr<std::int64_t>() + cc.numel());
  for (auto* index : {&r, &c}) {
    for (auto& i : *index) {
      if (i < -f || i >= f) return original();  // ATen's error
      if (i < 0) i += f;
    }
  }
  return run_dot_pairs(vectors, std::move(r), std::move(c));
}

// bmm(v, v^T).flatten(1).index_select(1, pairs): pair p is row p / F, column p % F.
at::Tensor dot_interaction_flat(const at::Tensor& vectors, const at::Tensor& pairs) {
  auto original = [&] { return at::bmm(vectors, vectors.transpose(1, 2)).flatten(1).index_select(1, pairs); };
  if (!kernel_takes(vectors) || !is_long_vector(pairs)) return original();
  const auto f = vectors.size(1);
  const at::Tensor p = pairs.contiguous();
  std::vector<std::int64_t> r, c;
  for (std::int64_t k = 0; k < p.numel(); ++k) {
    const auto flat = p.data_ptr<std::int64_t>()[k];
    if (flat < 0 || flat >= f * f) return original();
    r.push_back(flat / f);
    c.push_back(flat % f);
  }
  return run_dot_pairs(vectors, std::move(r), std::move(c));
}

// One bag as the kernel takes it, or nullopt where ATen must run it: checks
// what ATen checks (and more: offsets that decrease, an index past the
// table), so that every input the kernel sees is one ATen accepts.
// A table is float, bf16, or rowwise-quantized: uint8 rows of `row_bits`
// (8 or 4; kernels.h), [rows][rowwise_row_bytes], an int4 table's dim even.
std::int64_t table_dim(const at::Tensor& table, std::int64_t row_bits) {
  if (row_bits == 0) return table.size(1);
  const std::int64_t codes = table.size(1) - kernels::kRowwiseTail;
  return row_bits == 4 ? 2 * codes : codes;
}

bool table_takes(const at::Tensor& table, std::int64_t row_bits) {
  if (table.dim() != 2 || !table.is_contiguous()) return false;
  if (row_bits == 0) return table.scalar_type() == at::kFloat || table.scalar_type() == at::kBFloat16;
  return (row_bits == 8 || row_bits == 4) && table.scalar_type() == at::kByte && table.size(1) > kernels::kRowwiseTail;
}

std::optional<kernels::Bag> kernel_bag(const at::Tensor& weight, std::int64_t row_bits, const at::Tensor& indices,
                                       const at::Tensor& offsets, const c10::optional<at::Tensor>& weights, std::int64_t mode,
                                       bool include_last) {
  if (!table_takes(weight, row_bits)) return std::nullopt;
  if (!is_long_vector(indices) || !is_long_vector(offsets) || !indices.is_contiguous() || !offsets.is_contiguous()) return std::nullopt;
  if (mode != 0 && mode != 1) return std::nullopt;
  const bool weighted = weights.has_value() && weights->defined();
  if (weighted && (mode != 0 || weights->scalar_type() != at::kFloat || weights->dim() != 1 ||
                   weights->numel() != indices.numel() || !weights->is_contiguous())) {
    return std::nullopt;
  }
  // numel() once: it is an out-of-line call (a size-policy check), and the
  // walk below ran it per offset, 1% of a forward.
  const std::int64_t n = indices.numel(), table_rows = weight.size(0), offset_count = offsets.numel();
  const std::int64_t bags = offset_count - (include_last ? 1 : 0);
  if (bags < 0 || (include_last && offset_count == 0)) return std::nullopt;
  const auto* off = offsets.data_ptr<std::int64_t>();
  const auto* idx = indices.data_ptr<std::int64_t>();
  const std::int64_t last_end = include_last ? off[bags] : n;
  if (offset_count > 0 && off[0] != 0) return std::nullopt;
  if (last_end > n) return std::nullopt;
  for (std::int64_t b = 1; b < offset_count; ++b) {
    if (off[b] < off[b - 1] || off[b] > last_end) return std::nullopt;
  }
  for (std::int64_t i = 0; i < last_end; ++i) {
    if (idx[i] < 0 || idx[i] >= table_rows) return std::nullopt;
  }
  kernels::Bag bag;
  if (row_bits != 0) {
    bag.table_rowwise = weight.data_ptr<std::uint8_t>();
    bag.row_bits = static_cast<int>(row_bits);
  } else if (weight.scalar_type() == at::kBFloat16) {
    bag.table_bf16 = reinterpret_cast<const std::uint16_t*>(weight.data_ptr<at::BFloat16>());
  } else {
    bag.table = weight.data_ptr<float>();
  }
  bag.dim = table_dim(weight, row_bits);
  bag.indices = idx;
  bag.offsets = off;
  bag.bags = bags;
  bag.last_end = last_end;
  bag.weights = weighted ? weights->data_ptr<float>() : nullptr;
  bag.mode = mode == 1 ? kernels::Bag::Mode::kMean : kernels::Bag::Mode::kSum;
  return bag;
}

// ATen's embedding_bag, for a bag the kernel does not take. ATen 1.13
// refuses bf16 tables and knows no rowwise ones, so such a table's bag runs
// on the rows it reads, gathered and widened (an id past the table fails in
// the gather, as ATen's own check would): the same pooling of the same values.
at::Tensor aten_bag(const at::Tensor& table, std::int64_t row_bits, const at::Tensor& indices, const at::Tensor& offsets,
                    const c10::optional<at::Tensor>& weights, std::int64_t mode, bool include_last) {
  if (table.scalar_type() != at::kBFloat16 && row_bits == 0) {
    return std::get<0>(at::embedding_bag(table, indices, offsets, false, mode, false, weights, include_last, c10::nullopt));
  }
  at::Tensor rows = table.index_select(0, indices.reshape({-1}));
  if (row_bits != 0) {
    TORCH_CHECK(table_takes(table, row_bits), "numaserve::embedding_bags: a rowwise table must be contiguous uint8 rows");
    const at::Tensor codes = rows.contiguous();
    rows = at::empty({codes.size(0), table_dim(table, row_bits)}, table.options().dtype(at::kFloat));
    kernels::dequantize_rows(codes.data_ptr<std::uint8_t>(), codes.size(0), rows.size(1), static_cast<int>(row_bits),
                             rows.data_ptr<float>());
  } else {
    rows = rows.to(at::kFloat);
  }
  const at::Tensor each = at::arange(rows.size(0), indices.options()).reshape(indices.sizes());
  return std::get<0>(at::embedding_bag(rows, each, offsets, false, mode, false, weights, include_last, c10::nullopt));
}

std::vector<at::Tensor> embedding_bags(at::TensorList tables, at::TensorList indices, at::TensorList offsets,
                                       const c10::List<c10::optional<at::Tensor>>& per_sample_weights,
                                       at::IntArrayRef modes, at::IntArrayRef include_last, at::IntArrayRef row_bits) {
  const std::size_t count = tables.size();
  TORCH_CHECK(indices.size() == count && offsets.size() == count && per_sample_weights.size() == count &&
                  modes.size() == count && include_last.size() == count && row_bits.size() == count,
              "numaserve::embedding_bags: one index, offset, weight, mode, include_last_offset and row_bits per table");
  std::vector<at::Tensor> out(count);
  std::vector<kernels::Bag> fused;
  std::int64_t rows = 0;
  for (std::size_t k = 0; k < count; ++k) {
    const c10::optional<at::Tensor> weights = per_sample_weights.get(k);
    auto bag = kernel_bag(tables[k], row_bits[k], indices[k], offsets[k], weights, modes[k], include_last[k] != 0);
    if (!bag) {
      out[k] = aten_bag(tables[k], row_bits[k], indices[k], offsets[k], weights, modes[k], include_last[k] != 0);
      continue;
    }
    out[k] = at::empty({bag->bags, bag->dim}, tables[k].options().dtype(at::kFloat));
    bag->out = out[k].data_ptr<float>();
    rows = std::max(rows, bag->bags);
    fused.push_back(*bag);
  }
  at::parallel_for(0, rows, kGrain, [&](std::int64_t begin, std::int64_t end) {
    kernels::embedding_bags(isa.load(std::memory_order_relaxed), fused.data(), fused.size(), begin, end,
                            bag_reuse.load(std::memory_order_relaxed));
  });
  return out;
}

// A chain's layers as the kernels take them: each packed tensor's dtype
// says its layer's precision (float: fp32, bfloat16: bf16, int8: int8).
kernels::LinearChain chain_of(at::TensorList weights, const c10::List<c10::optional<at::Tensor>>& biases, at::TensorList packed,
                              at::IntArrayRef relu) {
  kernels::LinearChain chain;
  for (std::size_t l = 0; l < weights.size(); ++l) {
    const c10::optional<at::Tensor> bias = biases.get(l);
    chain.layers.push_back({packed[l].data_ptr(), bias && bias->defined() ? bias->data_ptr<float>() : nullptr, weights[l].size(1),
                            weights[l].size(0), relu[l] != 0, ir::precision_of(packed[l])});
  }
  return chain;
}

// linear (+ relu), one after another, on weights packed at load
// (kernels/linear.h). An input the kernels do not take (another dtype, a
// width that is not the first layer's) runs ATen's linear with the same
// weights, so errors stay ATen's; a bf16 layer's weight is bf16 there, an
// int8 layer's its packed codes dequantized (its weight constant is only
// its shape: no fp32 copy is kept).
at::Tensor linear_chain(const at::Tensor& input, at::TensorList weights, const c10::List<c10::optional<at::Tensor>>& biases,
                        at::TensorList packed, at::IntArrayRef relu) {
  const std::size_t count = weights.size();
  TORCH_CHECK(count > 0 && biases.size() == count && packed.size() == count && relu.size() == count,
              "numaserve::linear_chain: one weight, bias, packed weight and activation per layer");
  const std::int64_t inputs = weights[0].size(1);
  if (input.scalar_type() != at::kFloat || input.dim() == 0 || input.size(-1) != inputs) {
    at::Tensor x = input;
    for (std::size_t l = 0; l < count; ++l) {
      c10::optional<at::Tensor> bias = biases.get(l);
      const bool narrow = weights[l].scalar_type() == at::kBFloat16;
      if (narrow && bias && bias->defined()) bias = bias->to(at::kBFloat16);
      at::Tensor weight = weights[l];
      if (ir::precision_of(packed[l]) == kernels::LinearPrecision::kInt8) {
        weight = at::empty(weights[l].sizes(), x.options().dtype(at::kFloat));
        kernels::unpack_int8(packed[l].data_ptr(), weight.size(1), weight.size(0), weight.data_ptr<float>());
      }
      x = at::linear(narrow ? x.to(at::kBFloat16) : x, weight, bias);
      if (narrow) x = x.to(at::kFloat);
      if (relu[l] != 0) x = at::relu(x);
    }
    return x;
  }
  const at::Tensor x = input.contiguous();
  const kernels::LinearChain chain = chain_of(weights, biases, packed, relu);
  std::vector<std::int64_t> sizes = input.sizes().vec();
  sizes.back() = chain.layers.back().outputs;
  at::Tensor out = at::empty(sizes, x.options());
  const std::int64_t rows = inputs == 0 ? 0 : x.numel() / inputs;
  at::parallel_for(0, rows, kGrain, [&](std::int64_t begin, std::int64_t end) {
    kernels::run_chain(isa.load(std::memory_order_relaxed), chain, x.data_ptr<float>(), out.data_ptr<float>(), begin, end);
  });
  return out;
}

// f(x) elementwise by a position-independent kernel (kernels.h sigmoid);
// another dtype or layout runs ATen's.
template <void (*kernel)(const float*, float*, std::size_t), at::Tensor (*aten_op)(const at::Tensor&)>
at::Tensor elementwise(const at::Tensor& x) {
  if (x.scalar_type() != at::kFloat) return aten_op(x);
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty_like(in);
  kernel(in.data_ptr<float>(), out.data_ptr<float>(), static_cast<std::size_t>(in.numel()));
  return out;
}

at::Tensor sigmoid(const at::Tensor& x) { return elementwise<kernels::sigmoid, at::sigmoid>(x); }
at::Tensor tanh(const at::Tensor& x) { return elementwise<kernels::tanh, at::tanh>(x); }

TORCH_LIBRARY(numaserve, m) {
  m.def("linear_chain(Tensor input, Tensor[] weights, Tensor?[] biases, Tensor[] packed, int[] relu) -> Tensor", &linear_chain);
  m.def("sigmoid(Tensor x) -> Tensor", &sigmoid);
  m.def("tanh(Tensor x) -> Tensor", &tanh);
  m.def("dot_interaction(Tensor vectors, Tensor rows, Tensor cols) -> Tensor", &dot_interaction);
  m.def("dot_interaction_flat(Tensor vectors, Tensor pairs) -> Tensor", &dot_interaction_flat);
  m.def("embedding_bags(Tensor[] tables, Tensor[] indices, Tensor[] offsets, Tensor?[] per_sample_weights, int[] modes, "
        "int[] include_last_offset, int[] row_bits) -> Tensor[]",
        &embedding_bags);
}

}  // namespace

namespace ir {

kernels::Isa kernel_path() { return isa.load(std::memory_order_relaxed); }

kernels::LinearPrecision precision_of(const at::Tensor& packed) {
  switch (packed.scalar_type()) {
    case at::kBFloat16: return kernels::LinearPrecision::kBf16;
    case at::kChar: return kernels::LinearPrecision::kInt8;
    default: return kernels::LinearPrecision::kFp32;
  }
}

at::Tensor pack(const at::Tensor& weight, kernels::LinearPrecision precision) {
  const at::Tensor w = weight.contiguous();
  const auto inputs = w.size(1), outputs = w.size(0);
  const auto elements = static_cast<std::int64_t>(kernels::packed_elements(inputs, outputs, precision));
  switch (precision) {
    case kernels::LinearPrecision::kBf16: {
      at::Tensor out = at::empty({elements}, w.options().dtype(at::kBFloat16));
      kernels::pack_bf16(w.data_ptr<float>(), inputs, outputs, reinterpret_cast<std::uint16_t*>(out.data_ptr<at::BFloat16>()));
      return out;
    }
    case kernels::LinearPrecision::kInt8: {
      at::Tensor out = at::empty({elements}, w.options().dtype(at::kChar));
      kernels::pack_int8(w.data_ptr<float>(), inputs, outputs, out.data_ptr<std::int8_t>());
      return out;
    }
    case kernels::LinearPrecision::kFp32: break;
  }
  at::Tensor out = at::empty({elements}, w.options().dtype(at::kFloat));
  kernels::pack_fp32(w.data_ptr<float>(), inputs, outputs, out.data_ptr<float>());
  return out;
}

}  // namespace ir

std::string kernel_isa() { return std::string(kernels::isa_name(isa.load())); }

void set_bag_reuse(bool reuse) { bag_reuse.store(reuse); }

Status set_kernel_isa(const std::string& name) {
  std::string names;
  for (const auto path : kernels::supported_isas()) {
    if (kernels::isa_name(path) == name) {
      isa.store(path);
      return {};
    }
    names += (names.empty() ? "" : ", ") + std::string(kernels::isa_name(path));
  }
  return make_error(Error::Code::kInvalidArgument, "kernels: '" + name + "' is not a path this CPU runs (" + names + ")");
}

std::string linear_kernels(kernels::LinearPrecision precision) { return std::string(kernels::linear_path(isa.load(), precision)); }

}  // namespace numaserve::graph
