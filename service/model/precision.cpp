// Serving below fp32: the load's narrowing, held to the drift bound, and
// check-model's drift on requests. See model.h.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/linear.h"
#include "model/rows.h"
#include "model/torch_model.h"
#include "numa/huge_pages.h"
#include "numaserve/common/options.h"

namespace numaserve::model {
namespace {

// Memory for a narrowed copy of a weight (graph.h NarrowMemory): a large
// one in memory that asked for huge pages, as the fp32 weights were (first
// touched by the caller: on the loading thread's node).
at::Tensor allocate_weight(at::IntArrayRef sizes, at::ScalarType type, bool huge_pages) {
  const auto options = at::TensorOptions().dtype(type);
  std::size_t bytes = c10::elementSize(type);
  for (const auto size : sizes) bytes *= static_cast<std::size_t>(size);
  void* data = huge_pages && bytes >= kHugePageWeightBytes ? numa::allocate_huge_pages(bytes) : nullptr;
  return data != nullptr ? torch::from_blob(data, sizes, [bytes](void* p) { numa::free_huge_pages(p, bytes); }, options)
                         : at::empty(sizes, options);
}

kernels::LinearPrecision chains_of(features::Precision p) {
  switch (p) {
    case features::Precision::kBf16:
    case features::Precision::kBf16IfAvailable: return kernels::LinearPrecision::kBf16;
    case features::Precision::kInt8:
    case features::Precision::kInt8IfAvailable: return kernels::LinearPrecision::kInt8;
    case features::Precision::kFp32: break;
  }
  return kernels::LinearPrecision::kFp32;
}

// The CPU's instructions for `chains`' products, or what it lacks.
struct Instructions {
  bool usable = true;
  std::string names, missing;
};
Instructions instructions_for(kernels::LinearPrecision chains) {
  if (chains == kernels::LinearPrecision::kBf16) {
    const auto cpu = kernels::bf16_support();
    return {cpu.usable, cpu.instructions, cpu.missing};
  }
  if (chains == kernels::LinearPrecision::kInt8) {
    const auto cpu = kernels::int8_support();
    return {cpu.usable, cpu.instructions, cpu.missing};
  }
  return {};
}

// Serves `impl` below fp32 as `asked` where the CPU and the model allow it
// and its scores stay within the drift bound; else refuses (a precision
// asked outright: bf16, int8, or a table precision written) or serves fp32
// saying why (-if-available: the tables follow unless written).
// `graph` is the model's graph report: the narrowing's lines join it.
}  // namespace

Status serve_narrowed(const torch::jit::Module& module, std::optional<torch::jit::Module>& optimized, api::GraphReport& graph,
                      api::PrecisionReport& report, const features::ModelSpec& spec, const std::filesystem::path& dir,
                      const Asked& asked, const LoadOptions& options) {
  const std::string name(features::kPrecisionNames.name(asked.precision));
  const bool outright = asked.precision == features::Precision::kBf16 || asked.precision == features::Precision::kInt8;
  Narrowing to{asked.tables, chains_of(asked.precision), true};
  const std::string where = dir.string() + ": precision " + name + ": ";
  auto unavailable = [&](const std::string& why) -> Status {
    if (outright) {
      return make_error(Error::Code::kInvalidArgument, where + why + " (precision " + name + "-if-available serves it in fp32 instead)",
                        "precision");
    }
    report.reason = why;
    to.chains = kernels::LinearPrecision::kFp32;
    if (!asked.tables_written) to.tables = features::TablePrecision::kFp32;
    return {};
  };
  const Instructions cpu = instructions_for(to.chains);
  if (!cpu.usable) {
    if (auto s = unavailable(cpu.missing); !s) return s;
  } else if (to.chains != kernels::LinearPrecision::kFp32 && linear_kernels(to.chains) == "portable") {
    // The CPU has the instructions but the fused ops were narrowed to a
    // path without them (numaserve-bench --kernels): its portable reference
    // is far slower than fp32's.
    if (auto s = unavailable("the kernels' path here (" + kernel_isa() + ") has no " + name.substr(0, 4) + " product"); !s) return s;
  }
  if (!optimized) {
    const std::string why = "it runs in the rewritten forward, and there is none (graph optimizations " + graph.state +
                            (graph.reason.empty() ? "" : ": " + graph.reason) + ")";
    if (asked.tables_written && asked.tables != features::TablePrecision::kFp32) {
      return make_error(Error::Code::kInvalidArgument, dir.string() + ": embedding_precision " +
                            std::string(features::kTablePrecisionNames.name(asked.tables)) + ": " + why, "embedding_precision");
    }
    return unavailable(why);
  }
  // Having the instructions is not being faster (a CPU may run bf16 products
  // no faster than fp32's, and each layer converts its inputs): the model's
  // own linear chains timed in both precisions decide -if-available.
  if (to.chains != kernels::LinearPrecision::kFp32 && !outright) {
    const ChainTiming timing = time_linear_chains(*optimized, kTimingRows, to.chains);
    report.fp32_us = timing.fp32_us;
    report.candidate_us = timing.candidate_us;
    if (timing.chains > 0 && !(timing.candidate_us < timing.fp32_us)) {
      if (auto s = unavailable(name.substr(0, 4) + " is not faster on this CPU: the linear layers took " +
                               format_number(timing.candidate_us) + " us in " + name.substr(0, 4) + " and " +
                               format_number(timing.fp32_us) + " us in fp32 on " + std::to_string(kTimingRows) + " rows");
          !s) {
        return s;
      }
    }
  }
  if (to.chains == kernels::LinearPrecision::kFp32 && to.tables == features::TablePrecision::kFp32) return {};
  // fp32's scores on the check rows first: the conversion frees each fp32
  // weight as soon as the graph stops reading it, and the model as written
  // reads them.
  std::vector<std::pair<features::Batch, at::Tensor>> checks;
  std::uint64_t seed = 101;
  for (const std::size_t rows : {std::size_t{1}, std::size_t{7}, kDriftCheckRows}) {
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
  const NarrowMemory memory{[&options](at::IntArrayRef sizes, at::ScalarType type) { return allocate_weight(sizes, type, options.huge_pages); },
                            [](const at::Tensor& weight) { weight.storage().unsafeGetStorageImpl()->reset(); }};
  auto drift_of = [&](const torch::jit::Module& narrowed) -> Result<double> {
    double drift = 0;
    for (const auto& [batch, want] : checks) {
      auto got = run(narrowed, batch, where + "the narrowed forward failed on random rows");
      if (!got) return tl::unexpected(got.error());
      drift = std::max(drift, score_distance(want, *got, 1.0, false));
    }
    return drift;
  };
  // Which layers of the chains can be narrowed, tried on the chains alone
  // while nothing is released yet: every layer, unless that moves the scores
  // past half the bound (the tables' rounding takes the rest); then each
  // chain's first layer stays fp32.
  api::GraphRewrite rewrite;
  try {
    if (to.chains != kernels::LinearPrecision::kFp32) {
      Optimized trial = optimize(module, options.linear_kernels);
      if (trial.module) {
        narrow(*trial.module, Narrowing{features::TablePrecision::kFp32, to.chains, true},
               NarrowMemory{memory.allocate, [](const at::Tensor&) {}});
        auto drift = drift_of(*trial.module);
        if (!drift) return tl::unexpected(drift.error());
        to.first_layers = *drift <= spec.precision_max_drift / 2;
      }
    }
    rewrite = narrow(*fresh.module, to, memory);
  } catch (const std::exception& e) {
    return tl::unexpected(torch_error(where + "cannot convert the forward", e));
  }
  auto narrowed = [&rewrite](const std::string& what) {
    return std::any_of(rewrite.applied.begin(), rewrite.applied.end(), [&](const std::string& line) { return line.rfind(what, 0) == 0; });
  };
  // Asked outright, something must narrow: the layers, or the tables that follow them.
  if (to.chains != kernels::LinearPrecision::kFp32 && !narrowed("linear_chain")) {
    if (outright && !narrowed("embedding table")) {
      return make_error(Error::Code::kInvalidArgument,
                        where + "the forward has no linear layer or embedding table numaserve's kernels take (graph report: "
                                "linear_chains, embedding_bags)",
                        "precision");
    }
    report.reason = "the forward has no linear layer numaserve's kernels take";
  }
  if (to.tables != features::TablePrecision::kFp32 && !narrowed("embedding table") && asked.tables_written) {
    return make_error(Error::Code::kInvalidArgument,
                      dir.string() + ": embedding_precision " + std::string(features::kTablePrecisionNames.name(to.tables)) +
                          ": the forward has no embedding table only numaserve::embedding_bags reads (graph report: precision)",
                      "embedding_precision");
  }
  auto measured = drift_of(*fresh.module);
  if (!measured) return tl::unexpected(measured.error());
  const double drift = *measured;
  if (!(drift <= spec.precision_max_drift)) {
    return make_error(Error::Code::kInvalidArgument,
                      where + "its scores differ from fp32's by up to " + format_number(drift) + " on " +
                          std::to_string(kDriftCheckRows) + " random rows, above precision_max_drift " +
                          format_number(spec.precision_max_drift) + " (serve it in fp32, or raise the bound in model.yaml)",
                      "precision_max_drift");
  }
  if (narrowed("linear_chain")) {
    report.served = name.substr(0, 4);
    report.instructions = cpu.names;
  }
  if (narrowed("embedding table")) report.tables = std::string(features::kTablePrecisionNames.name(to.tables));
  report.max_drift = drift;
  report.drift_bound = spec.precision_max_drift;
  optimized = std::move(fresh.module);
  graph.rewrites.push_back(std::move(rewrite));
  return {};
}

Result<drift::Report> precision_drift(const std::filesystem::path& dir, LoadOptions options,
                                      const std::vector<features::Batch>& requests,
                                      const std::vector<std::vector<float>>& labels) {
  if (!labels.empty() && labels.size() != requests.size()) {
    return make_error(Error::Code::kInvalidArgument,
                      "labels: " + std::to_string(labels.size()) + " lines for " + std::to_string(requests.size()) + " requests",
                      "labels");
  }
  LoadOptions in_fp32 = options;
  in_fp32.precision = features::Precision::kFp32;
  in_fp32.embedding_precision = features::TablePrecision::kFp32;
  auto fp32 = TorchModel::load(dir, in_fp32);
  if (!fp32) return tl::unexpected(fp32.error());
  auto narrowed = TorchModel::load(dir, options);
  if (!narrowed) return tl::unexpected(narrowed.error());
  std::vector<drift::Scored> scored;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto reference = (*fp32)->forward(requests[i]);
    if (!reference) return tl::unexpected(reference.error());
    auto candidate = (*narrowed)->forward(requests[i]);
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


std::string instructions_summary(kernels::LinearPrecision chains) {
  const Instructions cpu = instructions_for(chains);
  return cpu.usable ? cpu.names : "none (" + cpu.missing + ")";
}


}  // namespace numaserve::model
