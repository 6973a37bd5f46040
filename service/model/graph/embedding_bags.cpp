// embedding_bags: the embedding_bag calls of a block, moved together where
// the graph allows, become one numaserve::embedding_bags (graph.h).
#include "graph/passes.h"

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/constants.h>

#include <string>
#include <variant>
#include <vector>

#include "graph/ir.h"

namespace numaserve::graph {
namespace {

using namespace ir;

struct BagCall {
  Node* node;
  std::int64_t mode;
  bool include_last;
};

// An embedding_bag the fused op computes, or why not.
std::variant<BagCall, std::string> bag_call(Node* n) {
  const std::string name = "embedding_bag " + name_of(n->output(0));
  if (n->inputs().size() != 8 && n->inputs().size() != 9) return name + ": an overload this pass does not know";
  const auto mode = constant_int(n->input(4));
  if (!mode) return name + ": its mode is not a constant";
  if (*mode == 2) return name + ": mode max (only sum and mean are fused)";
  if (*mode != 0 && *mode != 1) return name + ": unknown mode " + std::to_string(*mode);
  auto last = torch::jit::toIValue(n->input(7));
  if (!last || !last->isBool()) return name + ": include_last_offset is not a constant";
  if (n->inputs().size() == 9 && !constant_none(n->input(8))) return name + ": has a padding_idx (not fused)";
  for (std::size_t k = 1; k < n->outputs().size(); ++k) {
    if (n->output(k)->hasUses()) return name + ": its offset2bag/bag_size/max_indices outputs are used";
  }
  return BagCall{n, *mode, last->toBool()};
}

// Replaces a run of adjacent bag calls with one numaserve::embedding_bags.
void fuse_bags(torch::jit::Graph& graph, const std::vector<BagCall>& group, api::GraphRewrite& report) {
  torch::jit::WithInsertPoint here(group.back().node->next());
  std::vector<Value*> tables, indices, offsets, weights;
  std::vector<std::int64_t> modes, include_last;
  std::string names;
  for (const auto& call : group) {
    tables.push_back(call.node->input(0));
    indices.push_back(call.node->input(1));
    offsets.push_back(call.node->input(2));
    weights.push_back(call.node->input(6));
    modes.push_back(call.mode);
    include_last.push_back(call.include_last ? 1 : 0);
    names += (names.empty() ? "" : ", ") + name_of(call.node->output(0));
  }
  auto list = [&graph](const c10::TypePtr& element, const std::vector<Value*>& values) {
    return graph.insertNode(graph.createList(element, values))->output();
  };
  // None arguments go into the Tensor?[] as None; a weight tensor as itself.
  Value* none_or_weights = list(c10::OptionalType::ofTensor(), weights);
  Node* op = graph.insertNode(graph.create(c10::Symbol::fromQualString("numaserve::embedding_bags"),
                                           {list(c10::TensorType::get(), tables), list(c10::TensorType::get(), indices),
                                            list(c10::TensorType::get(), offsets), none_or_weights,
                                            graph.insertConstant(modes), graph.insertConstant(include_last),
                                            // every table fp32 (or bf16) here: narrow.cpp makes some rowwise
                                            graph.insertConstant(std::vector<std::int64_t>(group.size(), 0))}));
  op->output()->setType(c10::ListType::ofTensors());
  Node* unpack = graph.insertNode(graph.createListUnpack(op->output(), group.size()));
  for (std::size_t k = 0; k < group.size(); ++k) {
    unpack->output(k)->setType(c10::TensorType::get());
    group[k].node->output(0)->replaceAllUsesWith(unpack->output(k));
  }
  report.applied.push_back(std::to_string(group.size()) + " embedding_bag call" + (group.size() > 1 ? "s" : "") + " (" +
                           names + ") -> one numaserve::embedding_bags");
}

// The top node of `n` in `block` (n itself, or the node whose sub-block holds it).
Node* in_block(Node* n, torch::jit::Block* block) {
  while (n != nullptr && n->owningBlock() != block) n = n->owningBlock()->owningNode();
  return n;
}

void rewrite_bags(torch::jit::Block* block, torch::jit::Graph& graph, torch::jit::AliasDb& db,
                  std::vector<std::vector<BagCall>>& groups, api::GraphRewrite& report) {
  std::vector<BagCall> group;
  auto close = [&] {
    if (!group.empty()) groups.push_back(std::move(group));
    group.clear();
  };
  std::vector<Node*> nodes(block->nodes().begin(), block->nodes().end());
  for (Node* n : nodes) {
    for (torch::jit::Block* inner : n->blocks()) rewrite_bags(inner, graph, db, groups, report);
    if (n->kind() != aten::embedding_bag) continue;
    auto call = bag_call(n);
    if (auto* why = std::get_if<std::string>(&call)) {
      report.not_applied.push_back(*why);
      continue;
    }
    const auto& bag = std::get<BagCall>(call);
    // Join the group if this call (with what it needs) can move up next to
    // the group's last, and no earlier member's result is used before it.
    bool joins = !group.empty() && db.moveAfterTopologicallyValid(n, group.back().node);
    for (std::size_t k = 0; joins && k < group.size(); ++k) {
      for (const auto& use : group[k].node->output(0)->uses()) {
        Node* user = in_block(use.user, block);
        if (user == nullptr || !user->isAfter(n)) joins = false;
      }
    }
    if (!joins) close();
    group.push_back(bag);
  }
  close();
}

}  // namespace

void rewrite_embedding_bags(torch::jit::Graph& graph, const std::shared_ptr<torch::jit::Graph>& shared, api::GraphRewrite& report) {
  std::vector<std::vector<BagCall>> groups;
  {
    torch::jit::AliasDb db(shared, /*isFrozen=*/true);
    rewrite_bags(graph.block(), graph, db, groups, report);
  }
  for (const auto& group : groups) fuse_bags(graph, group, report);
}

}  // namespace numaserve::graph
