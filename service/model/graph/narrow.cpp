// Serving below fp32: the narrowing rewrite and the timing that decides
// -if-available. See graph.h.
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/freeze_module.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/ir.h"
#include "kernels/kernels.h"
#include "kernels/linear.h"

namespace numaserve::graph {
namespace {

using namespace ir;

// Whether every use of `table` is as a table of numaserve::embedding_bags
// (through the list it is passed in), so that it may be narrowed.
bool only_bags_read(Value* table) {
  for (const auto& use : table->uses()) {
    if (use.user->kind() != prim::ListConstruct) return false;
    for (const auto& list_use : use.user->output()->uses()) {
      if (list_use.user->kind().toQualString() != std::string("numaserve::embedding_bags") || list_use.offset != 0) return false;
    }
  }
  return true;
}

// Whether a constant of `block` that is still used holds memory of `storage`.
bool still_read(torch::jit::Block* block, const c10::StorageImpl* storage) {
  for (Node* n : block->nodes()) {
    for (torch::jit::Block* inner : n->blocks()) {
      if (still_read(inner, storage)) return true;
    }
    if (n->kind() != prim::Constant || !n->output()->hasUses()) continue;
    const auto t = constant_tensor(n->output());
    if (t && t->has_storage() && t->storage().unsafeGetStorageImpl() == storage) return true;
  }
  return false;
}

// The precision a chain's layer runs in when its chain is narrowed to
// `chains`: an int8 chain keeps its narrow layers (a score's last, of at
// most kNarrowOutputs outputs) in fp32: they cost nothing, and an 8-bit
// product there would move the score itself; and a layer too wide for an
// exact int32 sum.
kernels::LinearPrecision layer_precision(kernels::LinearPrecision chains, std::int64_t inputs, std::int64_t outputs) {
  const bool int8 = chains == kernels::LinearPrecision::kInt8;
  return int8 && (outputs <= kernels::kNarrowOutputs || inputs > kernels::kInt8MaxInputs) ? kernels::LinearPrecision::kFp32 : chains;
}

std::string_view precision_name(kernels::LinearPrecision p) {
  switch (p) {
    case kernels::LinearPrecision::kBf16: return "bf16";
    case kernels::LinearPrecision::kInt8: return "int8";
    case kernels::LinearPrecision::kFp32: break;
  }
  return "fp32";
}

// A contiguous fp32 tensor rounded to bf16 (to nearest even, kernels.h).
at::Tensor bf16_copy(const at::Tensor& fp32, const NarrowMemory& memory) {
  at::Tensor copy = memory.allocate(fp32.sizes(), at::kBFloat16);
  kernels::to_bf16(kernels::best_isa(), fp32.data_ptr<float>(), reinterpret_cast<std::uint16_t*>(copy.data_ptr<at::BFloat16>()),
                   static_cast<std::size_t>(fp32.numel()));
  return copy;
}

// Calls `visit` for each table listed to each numaserve::embedding_bags op
// of `graph`, with the op's row bits for it, and writes the op's row bits
// back; an error from `visit` stops the walk. `visit` answers the value it
// put in the table's place (nullptr: none); an entry that lists that value
// (the table listed again) takes its bits without a visit.
Status each_listed_table(torch::jit::Graph& graph, const std::function<Result<Value*>(Value* table, std::int64_t& bits)>& visit) {
  std::map<Value*, std::int64_t> replaced;  // a table's replacement -> its row bits
  std::vector<Node*> bags;
  nodes_of_kind(graph.block(), c10::Symbol::fromQualString("numaserve::embedding_bags"), bags);
  for (Node* op : bags) {
    Node* list = op->input(0)->node();
    const auto listed = constant_list(op->input(6));
    if (list->kind() != prim::ListConstruct || !listed) continue;
    std::vector<std::int64_t> row_bits;
    for (const auto& b : *listed) row_bits.push_back(b.toInt());
    for (std::size_t k = 0; k < list->inputs().size(); ++k) {
      if (const auto again = replaced.find(list->input(k)); again != replaced.end()) {
        row_bits[k] = again->second;
        continue;
      }
      auto put = visit(list->input(k), row_bits[k]);
      if (!put) return tl::unexpected(put.error());
      if (*put != nullptr) replaced[*put] = row_bits[k];
    }
    op->replaceInput(6, graph.insertConstant(row_bits));
  }
  return {};
}

// Each table numaserve::embedding_bags alone reads, in `precision`: its
// constant replaced (a table read twice is narrowed once), and its fp32
// memory released as soon as nothing reads it, before the next table.
void narrow_tables(torch::jit::Graph& graph, features::TablePrecision precision, const NarrowMemory& memory,
                   api::GraphRewrite& report) {
  std::map<const void*, std::pair<Value*, int>> narrowed;  // fp32 data -> (its copy, its row bits)
  (void)each_listed_table(graph, [&](Value* table, std::int64_t& row_bits) -> Result<Value*> {
    const auto weight = constant_tensor(table);
    if (!weight || weight->scalar_type() != at::kFloat || weight->dim() != 2) return nullptr;
    const std::string what = "embedding table " + name_of(table) + " (" + shape_of(*weight) + ")";
    if (!only_bags_read(table)) {
      report.not_applied.push_back(what + ": also read by another op, kept fp32");
      return nullptr;
    }
    auto done = narrowed.find(weight->data_ptr());
    if (done == narrowed.end()) {
      const at::Tensor in = weight->contiguous();
      const std::int64_t rows = in.size(0), dim = in.size(1);
      int bits = features::rowwise_bits(precision);
      if (bits == 4 && dim % 2 != 0) {
        report.not_applied.push_back(what + ": an odd dim has no int4 layout here, int8 instead");
        bits = 8;
      }
      at::Tensor copy;
      if (bits == 0) {
        copy = bf16_copy(in, memory);
      } else {
        copy = memory.allocate({rows, kernels::rowwise_row_bytes(dim, bits)}, at::kByte);
        if (!kernels::quantize_rows(in.data_ptr<float>(), rows, dim, bits, copy.data_ptr<std::uint8_t>())) {
          report.not_applied.push_back(what + ": holds values that are not finite or beyond fp16's range (the rows' scale "
                                       "and bias), kept fp32");
          return nullptr;
        }
      }
      const std::string to = bits == 0 ? "bf16" : bits == 8 ? "int8 rowwise" : "int4 rowwise";
      done = narrowed.emplace(weight->data_ptr(), std::pair{graph.insertConstant(copy), bits}).first;
      report.applied.push_back(what + " -> " + to);
    }
    table->replaceAllUsesWith(done->second.first);
    row_bits = done->second.second;
    if (!still_read(graph.block(), weight->storage().unsafeGetStorageImpl())) memory.unread(*weight);
    return done->second.first;
  });
}

// The graph report's line for chain `op`'s layer `l` left fp32, and why.
std::string kept_fp32(Node* op, std::size_t l, std::int64_t inputs, std::int64_t outputs, kernels::LinearPrecision precision) {
  const std::string layer = "linear_chain " + name_of(op->output()) + ": its " + (l == 0 ? "first layer" : "layer " + std::to_string(l)) +
                            " (" + std::to_string(inputs) + " -> " + std::to_string(outputs) + ")";
  if (precision != kernels::LinearPrecision::kFp32) return layer + " reads features, not the model's activations: kept fp32 (the drift bound)";
  return layer + (outputs <= kernels::kNarrowOutputs ? ", a score's, kept fp32" : ", too wide for int8's int32 sums, kept fp32");
}

// Every chain's layers in `to.chains` (layer_precision), packed anew; the
// weight constant each layer keeps for ATen's path (ops.cpp linear_chain)
// is a bf16 copy, or for int8 only its shape.
void narrow_chains(torch::jit::Graph& graph, const Narrowing& to, const NarrowMemory& memory, api::GraphRewrite& report) {
  std::vector<Node*> chains;
  nodes_of_kind(graph.block(), c10::Symbol::fromQualString("numaserve::linear_chain"), chains);
  // The portable paths are the references, far slower than fp32's.
  const std::string path(kernels::linear_path(kernel_path(), to.chains));
  if (path == "portable" && !chains.empty()) {
    report.not_applied.push_back("the linear chains: the kernels' path here (" + std::string(kernels::isa_name(kernel_path())) +
                                 ") has no " + std::string(precision_name(to.chains)) + " product, kept fp32");
    return;
  }
  for (Node* op : chains) {
    Node* weights = op->input(1)->node();
    std::vector<at::Tensor> fp32;
    std::vector<Value*> kept_weights, packed;
    std::string shapes;
    for (std::size_t l = 0; l < weights->inputs().size(); ++l) {
      Value* w = weights->input(l);
      const at::Tensor weight = constant_tensor(w)->contiguous();
      const auto inputs = weight.size(1), outputs = weight.size(0);
      const kernels::LinearPrecision precision = layer_precision(to.chains, inputs, outputs);
      if ((l == 0 && !to.first_layers) || precision == kernels::LinearPrecision::kFp32) {
        packed.push_back(op->input(3)->node()->input(l));
        kept_weights.push_back(w);
        report.not_applied.push_back(kept_fp32(op, l, inputs, outputs, precision));
        continue;
      }
      packed.push_back(graph.insertConstant(pack(weight, precision)));
      if (precision == kernels::LinearPrecision::kBf16) {
        kept_weights.push_back(graph.insertConstant(bf16_copy(weight, memory)));
      } else {
        // One byte seen as [outputs][inputs]: the shape ATen's path checks inputs against.
        kept_weights.push_back(graph.insertConstant(at::zeros({1, 1}, weight.options().dtype(at::kChar)).expand(weight.sizes())));
      }
      fp32.push_back(*constant_tensor(w));
      shapes += (shapes.empty() ? "" : ", ") + std::to_string(inputs) + " -> " + std::to_string(outputs);
    }
    if (fp32.empty()) continue;
    auto list = [&graph](const std::vector<Value*>& values) {
      return graph.insertNode(graph.createList(c10::TensorType::get(), values))->output();
    };
    Node* fp32_packed = op->input(3)->node();
    {
      torch::jit::WithInsertPoint here(op);
      op->replaceInput(1, list(kept_weights));
      op->replaceInput(3, list(packed));
    }
    // The fp32 lists go now (not by dead-code elimination, which could take
    // the node the new constants are inserted before), so that the fp32
    // weights are seen unread.
    for (Node* old : {weights, fp32_packed}) {
      if (!old->output()->hasUses()) old->destroy();
    }
    for (const auto& weight : fp32) {
      if (!still_read(graph.block(), weight.storage().unsafeGetStorageImpl())) memory.unread(weight);
    }
    report.applied.push_back("linear_chain " + name_of(op->output()) + " (" + shapes + ") -> " + std::string(precision_name(to.chains)));
  }
}

}  // namespace

Status ship_tables(torch::jit::Module& optimized, const std::vector<ShippedTable>& tables, api::GraphRewrite& report) {
  const std::shared_ptr<torch::jit::Graph> graph = optimized.get_method("forward").graph();
  torch::jit::WithInsertPoint first(graph->block()->nodes().front());
  std::map<const void*, const ShippedTable*> by_placeholder;
  for (const auto& t : tables) by_placeholder[t.placeholder.data_ptr()] = &t;
  std::map<const ShippedTable*, Value*> shipped;  // a table -> its rows' constant
  auto refused = [&](const ShippedTable& t, const std::string& why) {
    return make_error(Error::Code::kInvalidArgument, t.file + ": " + why + " (graph report: embedding_bags)", "quantized_tables");
  };
  auto s = each_listed_table(*graph, [&](Value* table, std::int64_t& row_bits) -> Result<Value*> {
    const auto weight = constant_tensor(table);
    const auto found = weight ? by_placeholder.find(weight->data_ptr()) : by_placeholder.end();
    if (found == by_placeholder.end()) return nullptr;
    const ShippedTable& t = *found->second;
    if (!only_bags_read(table)) return refused(t, "model.pt's emb_" + t.name + " is read by an op other than the embedding bags");
    auto [slot, fresh] = shipped.try_emplace(&t, nullptr);
    if (fresh) {
      slot->second = graph->insertConstant(t.rows);
      report.applied.push_back("embedding table " + name_of(table) + " (" + shape_of(*weight) + ") -> " + (t.bits == 8 ? "int8" : "int4") +
                               " rowwise, shipped in " + t.file);
    }
    table->replaceAllUsesWith(slot->second);
    row_bits = t.bits;
    return slot->second;
  });
  if (!s) return s;
  for (const auto& t : tables) {
    if (!shipped.contains(&t)) return refused(t, "model.pt's emb_" + t.name + " is not a table of numaserve::embedding_bags");
  }
  torch::jit::EliminateDeadCode(graph);
  graph->lint();
  return {};
}

api::GraphRewrite narrow(torch::jit::Module& optimized, const Narrowing& to, const NarrowMemory& memory) {
  api::GraphRewrite report{"precision", {}, {}};
  const std::shared_ptr<torch::jit::Graph> graph = optimized.get_method("forward").graph();
  // New constants go first in the graph, before every use.
  torch::jit::WithInsertPoint first(graph->block()->nodes().front());
  if (to.tables != features::TablePrecision::kFp32) narrow_tables(*graph, to.tables, memory, report);
  if (to.chains != kernels::LinearPrecision::kFp32) narrow_chains(*graph, to, memory, report);
  torch::jit::EliminateDeadCode(graph);
  graph->lint();
  return report;
}

LinearLayers linear_layers(const torch::jit::Module& module, bool frozen) {
  LinearLayers out;
  torch::jit::Module copy;
  try {
    copy = frozen ? module : torch::jit::freeze_module(module);
  } catch (const std::exception&) {
    return out;  // a module that cannot be frozen: its layers are not counted
  }
  std::vector<Node*> nodes;
  nodes_of_kind(copy.get_method("forward").graph()->block(), c10::Symbol::fromQualString("numaserve::linear_chain"), nodes);
  for (Node* chain : nodes) {
    out.own += static_cast<int>(chain->input(1)->node()->inputs().size());
    for (Value* p : chain->input(3)->node()->inputs()) {
      const auto packed = constant_tensor(p);
      if (packed && precision_of(*packed) != kernels::LinearPrecision::kFp32) out.precision = precision_of(*packed);
    }
  }
  for (const auto kind : {aten::linear, aten::addmm, aten::mm, aten::matmul}) {
    nodes.clear();
    nodes_of_kind(copy.get_method("forward").graph()->block(), kind, nodes);
    out.libtorch += static_cast<int>(nodes.size());
  }
  return out;
}

ChainTiming time_linear_chains(const torch::jit::Module& optimized, std::int64_t rows, kernels::LinearPrecision candidate) {
  ChainTiming out;
  std::vector<Node*> ops;
  nodes_of_kind(optimized.get_method("forward").graph()->block(), c10::Symbol::fromQualString("numaserve::linear_chain"), ops);
  struct Timed {
    kernels::LinearChain fp32, narrowed;
    at::Tensor in, out;
  };
  std::vector<Timed> chains;
  std::vector<at::Tensor> keep;  // the candidate's packs, alive while timed
  for (Node* op : ops) {
    Timed t;
    Node* weights = op->input(1)->node();
    const auto relu = constant_list(op->input(4));
    for (std::size_t l = 0; l < weights->inputs().size(); ++l) {
      const auto weight = constant_tensor(weights->input(l));
      const auto packed = constant_tensor(op->input(3)->node()->input(l));
      const auto bias = constant_tensor(op->input(2)->node()->input(l));
      if (!weight || !packed || !relu || packed->scalar_type() != at::kFloat) return out;
      const at::Tensor w = weight->contiguous();
      const auto inputs = w.size(1), outputs = w.size(0);
      const kernels::LinearPrecision precision = layer_precision(candidate, inputs, outputs);
      const at::Tensor narrowed = precision == kernels::LinearPrecision::kFp32 ? *packed : pack(w, precision);
      keep.push_back(narrowed);
      const float* b = bias ? bias->data_ptr<float>() : nullptr;
      const bool r = (*relu)[l].toInt() != 0;
      t.fp32.layers.push_back({packed->data_ptr(), b, inputs, outputs, r, kernels::LinearPrecision::kFp32});
      t.narrowed.layers.push_back({narrowed.data_ptr(), b, inputs, outputs, r, precision});
    }
    t.in = at::randn({rows, t.fp32.layers.front().inputs});
    t.out = at::empty({rows, t.fp32.layers.back().outputs});
    chains.push_back(std::move(t));
  }
  out.chains = static_cast<int>(chains.size());
  if (chains.empty()) return out;
  const kernels::Isa path = kernel_path();
  auto run_all = [&](bool narrowed) {
    const auto start = std::chrono::steady_clock::now();
    for (const auto& t : chains) {
      kernels::run_chain(path, narrowed ? t.narrowed : t.fp32, t.in.data_ptr<float>(), t.out.data_ptr<float>(), 0, rows);
    }
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  };
  run_all(false);  // the first run pays for the scratch buffers and cold caches
  run_all(true);
  std::vector<double> fp32, narrowed;
  for (int round = 0; round < 15; ++round) {
    fp32.push_back(run_all(false));
    narrowed.push_back(run_all(true));
  }
  auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  out.fp32_us = median(fp32);
  out.candidate_us = median(narrowed);
  return out;
}

}  // namespace numaserve::graph
