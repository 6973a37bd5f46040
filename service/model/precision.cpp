// Serving below fp32: the load's narrowing, held to the drift bound, and
// check-model's drift on requests. See model.h.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/linear.h"
#include "kernels/rowwise_file.h"
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

// The tables' label (metrics, /placement): `narrowed` joined to what was
// already served ("int4+int8": a shipped table beside one converted here).
std::string tables_label(const std::string& served, const std::string& narrowed) {
  if (served == "fp32" || served == narrowed) return narrowed;
  return served < narrowed ? served + "+" + narrowed : narrowed + "+" + served;
}

// Why a narrowing cannot run: the rewritten forward it runs in is missing.
std::string no_rewritten_forward(const TorchModel::Impl& impl) {
  return "there is none (graph optimizations " + impl.report.state + (impl.report.reason.empty() ? "" : ": " + impl.report.reason) + ")";
}

// What a load narrows and why not: `to`, as asked, narrowed to what this CPU,
// this kernel path and this model allow (-if-available), or refused (asked
// outright). `report.reason` says why a precision asked is not served.
struct Decision {
  graph::Narrowing to;
  std::string name, where;
  bool outright = false;
  Instructions cpu;
};

// A precision asked outright that cannot be served here: refused, `why`.
tl::unexpected<Error> refused_outright(const Decision& decision, const std::string& why) {
  return make_error(Error::Code::kInvalidArgument,
                    decision.where + why + " (precision " + decision.name + "-if-available serves it in fp32 instead)", "precision");
}

Status decide(Decision& decision, const TorchModel::Impl& impl, const std::filesystem::path& dir, const Asked& asked, api::PrecisionReport& report) {
  auto unavailable = [&](const std::string& why) -> Status {
    if (decision.outright) return refused_outright(decision, why);
    report.reason = why;
    decision.to.chains = kernels::LinearPrecision::kFp32;
    if (!asked.tables_written) decision.to.tables = features::TablePrecision::kFp32;
    return {};
  };
  // Layers served fp32 here still leave the tables to check below.
  if (!decision.cpu.usable) {
    if (auto s = unavailable(decision.cpu.missing); !s) return s;
  } else if (decision.to.chains != kernels::LinearPrecision::kFp32 && graph::linear_kernels(decision.to.chains) == "portable") {
    // The CPU has the instructions but the fused ops were narrowed to a
    // path without them (numaserve-bench --kernels): its portable reference
    // is far slower than fp32's.
    if (auto s = unavailable("the kernels' path here (" + graph::kernel_isa() + ") has no " + decision.name.substr(0, 4) + " product"); !s) return s;
  }
  if (!impl.optimized) {
    const std::string why = "it runs in the rewritten forward, and " + no_rewritten_forward(impl);
    if (asked.tables_written && asked.tables != features::TablePrecision::kFp32) {
      return make_error(Error::Code::kInvalidArgument, dir.string() + ": embedding_precision " +
                            std::string(features::kTablePrecisionNames.name(asked.tables)) + ": " + why, "embedding_precision");
    }
    return unavailable(why);
  }
  // Having the instructions is not being faster (a CPU may run bf16 products
  // no faster than fp32's, and each layer converts its inputs): the model's
  // own linear chains timed in both precisions decide -if-available.
  if (decision.to.chains == kernels::LinearPrecision::kFp32 || decision.outright) return {};
  const graph::ChainTiming timing = graph::time_linear_chains(*impl.optimized, kTimingRows, decision.to.chains);
  report.fp32_us = timing.fp32_us;
  report.candidate_us = timing.candidate_us;
  if (timing.chains == 0 || timing.candidate_us < timing.fp32_us) return {};
  const std::string short_name = decision.name.substr(0, 4);
  return unavailable(short_name + " is not faster on this CPU: the linear layers took " + format_number(timing.candidate_us) +
                     " us in " + short_name + " and " + format_number(timing.fp32_us) + " us in fp32 on " +
                     std::to_string(kTimingRows) + " rows");
}

// A fresh frozen copy of the forward, never run (a forward that has run
// keeps the plan its first call compiled, with the fp32 weights in it), the
// shipped tables in it.
Result<torch::jit::Module> fresh_forward(const TorchModel::Impl& impl, const LoadOptions& options, api::GraphRewrite* shipped = nullptr) {
  graph::Optimized fresh = graph::optimize(impl.module, options.linear_kernels);
  if (!fresh.module) return make_error(Error::Code::kInternal, "the forward could not be rewritten again: " + fresh.report.reason);
  api::GraphRewrite ignored;
  if (auto s = graph::ship_tables(*fresh.module, impl.shipped, shipped ? *shipped : ignored); !s) return tl::unexpected(s.error());
  return std::move(*fresh.module);
}

// The reference: fp32's scores on the check rows, first (the conversion
// frees each fp32 weight as soon as the graph stops reading it). The model
// as written, unless its tables were shipped apart: then the optimized
// forward that serves them.
using Checks = std::vector<std::pair<features::Batch, at::Tensor>>;
Result<Checks> reference_scores(const TorchModel::Impl& impl, const features::ModelSpec& spec, const std::string& where) {
  Checks checks;
  std::uint64_t seed = 101;
  for (const std::size_t rows : {std::size_t{1}, std::size_t{7}, kDriftCheckRows}) {
    features::Batch batch = random_rows(spec, rows, seed++);
    auto want = run(impl.shipped.empty() ? impl.module : *impl.optimized, batch, where + "the fp32 forward failed on random rows");
    if (!want) return tl::unexpected(want.error());
    checks.emplace_back(std::move(batch), std::move(*want));
  }
  return checks;
}

Result<double> drift_of(const torch::jit::Module& narrowed, const Checks& checks, const std::string& where) {
  double drift = 0;
  for (const auto& [batch, want] : checks) {
    auto got = run(narrowed, batch, where + "the narrowed forward failed on random rows");
    if (!got) return tl::unexpected(got.error());
    drift = std::max(drift, score_distance(want, *got, 1.0, false));
  }
  return drift;
}

// Whether a line of `rewrite` applied to `what` ("linear_chain", "embedding table").
bool applied(const api::GraphRewrite& rewrite, const std::string& what) {
  return std::any_of(rewrite.applied.begin(), rewrite.applied.end(), [&](const std::string& line) { return line.rfind(what, 0) == 0; });
}

// Narrows `fresh` to `to`, each chain's first layer too unless narrowing
// the chains alone (tried first, while nothing is released yet) moves the
// scores past half the bound: the tables' rounding takes the rest. The fp32
// weights go as they are narrowed: past here a refusal fails the load.
Result<api::GraphRewrite> narrow_fresh(torch::jit::Module& fresh, const TorchModel::Impl& impl, const features::ModelSpec& spec,
                                       const LoadOptions& options, graph::Narrowing& to, const Checks& checks, const std::string& where) {
  const graph::NarrowMemory memory{[&options](at::IntArrayRef sizes, at::ScalarType type) { return allocate_weight(sizes, type, options.huge_pages); },
                            [](const at::Tensor& weight) { weight.storage().unsafeGetStorageImpl()->reset(); }};
  try {
    if (to.chains != kernels::LinearPrecision::kFp32) {
      if (auto trial = fresh_forward(impl, options)) {
        graph::narrow(*trial, graph::Narrowing{features::TablePrecision::kFp32, to.chains, true}, graph::NarrowMemory{memory.allocate, [](const at::Tensor&) {}});
        auto drift = drift_of(*trial, checks, where);
        if (!drift) return tl::unexpected(drift.error());
        to.first_layers = *drift <= spec.precision_max_drift / 2;
      }
    }
    return graph::narrow(fresh, to, memory);
  } catch (const std::exception& e) {
    return tl::unexpected(torch_error(where + "cannot convert the forward", e));
  }
}

// Asked outright, something must narrow: the layers, or the tables that
// follow them; a table precision written must find a table (or tables
// shipped in it). -if-available says why its layers stayed fp32.
Status applied_as_asked(const api::GraphRewrite& rewrite, const Decision& decision, TorchModel::Impl& impl,
                        const std::filesystem::path& dir, const Asked& asked) {
  auto narrowed = [&rewrite](const std::string& what) { return applied(rewrite, what); };
  const bool tables = narrowed("embedding table") || !impl.shipped.empty();
  if (decision.to.chains != kernels::LinearPrecision::kFp32 && !narrowed("linear_chain")) {
    if (decision.outright && !tables) {
      return make_error(Error::Code::kInvalidArgument,
                        decision.where + "the forward has no linear layer or embedding table numaserve's kernels take (graph report: "
                                     "linear_chains, embedding_bags)",
                        "precision");
    }
    impl.precision.reason = "the forward has no linear layer numaserve's kernels take";
  }
  if (decision.to.tables != features::TablePrecision::kFp32 && !tables && asked.tables_written) {
    return make_error(Error::Code::kInvalidArgument,
                      dir.string() + ": embedding_precision " + std::string(features::kTablePrecisionNames.name(decision.to.tables)) +
                          ": the forward has no embedding table only numaserve::embedding_bags reads (graph report: precision)",
                      "embedding_precision");
  }
  return {};
}

}  // namespace

// Serves `impl` below fp32 as `asked` where the CPU and the model allow it
// and its scores stay within the drift bound; else refuses (a precision
// asked outright: bf16, int8, or a table precision written) or serves fp32
// saying why (-if-available: the tables follow unless written). The
// narrowing's lines join the model's graph report.
Status serve_narrowed(TorchModel::Impl& impl, const features::ModelSpec& spec, const std::filesystem::path& dir, const Asked& asked,
                      const LoadOptions& options) {
  api::PrecisionReport& report = impl.precision;
  Decision decision{graph::Narrowing{asked.tables, chains_of(asked.precision), true},
            std::string(features::kPrecisionNames.name(asked.precision)), "",
            asked.precision == features::Precision::kBf16 || asked.precision == features::Precision::kInt8,
            instructions_for(chains_of(asked.precision))};
  decision.where = dir.string() + ": precision " + decision.name + ": ";
  const std::string& where = decision.where;
  if (auto s = decide(decision, impl, dir, asked, report); !s) return s;
  graph::Narrowing& to = decision.to;
  if (to.chains == kernels::LinearPrecision::kFp32 && to.tables == features::TablePrecision::kFp32) return {};
  auto checks = reference_scores(impl, spec, where);
  if (!checks) return tl::unexpected(checks.error());
  auto fresh = fresh_forward(impl, options);
  if (!fresh) {
    if (decision.outright) return refused_outright(decision, fresh.error().message);
    report.reason = fresh.error().message;
    return {};
  }
  auto rewrite = narrow_fresh(*fresh, impl, spec, options, to, *checks, where);
  if (!rewrite) return tl::unexpected(rewrite.error());
  if (auto s = applied_as_asked(*rewrite, decision, impl, dir, asked); !s) return s;
  auto narrowed = [&rewrite](const std::string& what) { return applied(*rewrite, what); };
  auto measured = drift_of(*fresh, *checks, where);
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
    report.served = decision.name.substr(0, 4);
    report.instructions = decision.cpu.names;
  }
  if (narrowed("embedding table")) report.tables = tables_label(report.tables, std::string(features::kTablePrecisionNames.name(to.tables)));
  report.max_drift = drift;
  report.drift_bound = spec.precision_max_drift;
  impl.optimized = std::move(*fresh);
  impl.report.rewrites.push_back(std::move(*rewrite));
  return {};
}

Result<std::vector<graph::ShippedTable>> read_shipped_tables(torch::jit::Module& module, const features::ModelSpec& spec,
                                                      const std::filesystem::path& dir, bool huge_pages) {
  std::vector<graph::ShippedTable> out;
  const auto tables = embedding_tables(module);
  for (const auto& t : tables) {
    const bool listed = std::find(spec.quantized_tables.begin(), spec.quantized_tables.end(), t.table) != spec.quantized_tables.end();
    const bool placeholder = t.weight.has_storage() && t.weight.storage().nbytes() < t.weight.nbytes();
    if (placeholder && !listed) {
      return make_error(Error::Code::kInvalidArgument,
                        dir.string() + ": model.pt's emb_" + t.table + " holds no rows (" + c10::str(t.weight.sizes()) +
                            " over a smaller storage: a table shipped apart?) and model.yaml's quantized_tables does not list it",
                        "quantized_tables");
    }
  }
  const int bits = spec.embedding_precision ? features::rowwise_bits(*spec.embedding_precision) : 0;
  for (const auto& name : spec.quantized_tables) {
    const std::string file = (dir / "tables" / (name + ".rowwise")).string();
    const auto t = std::find_if(tables.begin(), tables.end(), [&](const ModuleTable& m) { return m.table == name; });
    if (t == tables.end()) {
      return make_error(Error::Code::kInvalidArgument,
                        dir.string() + ": quantized_tables lists '" + name + "', and model.pt has no emb_" + name, "quantized_tables");
    }
    auto header = kernels::open_rowwise_file(file);
    if (!header) return tl::unexpected(header.error());
    if (header->bits != bits) {
      return make_error(Error::Code::kInvalidArgument,
                        file + ": " + std::to_string(header->bits) + "-bit codes, and model.yaml's embedding_precision is " +
                            std::string(features::kTablePrecisionNames.name(*spec.embedding_precision)),
                        file);
    }
    if (t->weight.dim() != 2 || t->weight.size(0) != header->rows || t->weight.size(1) != header->dim) {
      return make_error(Error::Code::kInvalidArgument,
                        file + ": " + std::to_string(header->rows) + " rows of dim " + std::to_string(header->dim) +
                            ", and model.pt's emb_" + name + " is " + c10::str(t->weight.sizes()),
                        file);
    }
    at::Tensor rows = allocate_weight({header->rows, header->row_bytes()}, at::kByte, huge_pages);
    if (auto s = kernels::read_rowwise_rows(file, *header, rows.data_ptr<std::uint8_t>()); !s) return tl::unexpected(s.error());
    // A placeholder of its own in the module (the fp32 rows it may hold freed
    // with the module's last reference): the forward's constant that reads it
    // is found by it. Each of another value, as freezing pools equal
    // constants; a tiny one, which no score shows, so the load's check of the
    // rewritten forward against the module compares what it compares for a
    // table of zeros.
    at::Tensor placeholder = at::full({1, 1}, 1e-30f * static_cast<float>(out.size() + 1)).expand({header->rows, header->dim});
    torch::jit::Module owner = t->owner;
    owner.setattr(t->attribute, placeholder);
    out.push_back({name, std::filesystem::relative(file, dir).string(), std::move(rows), header->bits, std::move(placeholder)});
  }
  return out;
}

Status serve_shipped(TorchModel::Impl& impl, const std::filesystem::path& dir, const LoadOptions& options) {
  if (!impl.optimized) {
    return make_error(Error::Code::kInvalidArgument,
                      dir.string() + ": quantized_tables run in the rewritten forward, and " + no_rewritten_forward(impl),
                      "quantized_tables");
  }
  // Into a fresh copy: the optimized forward ran its check, and keeps the
  // plan it compiled then, reading the placeholders.
  api::GraphRewrite rewrite{"quantized_tables", {}, {}};
  auto fresh = fresh_forward(impl, options, &rewrite);
  if (!fresh) return tl::unexpected(fresh.error());
  impl.optimized = std::move(*fresh);
  impl.report.rewrites.push_back(std::move(rewrite));
  for (const auto& t : impl.shipped) impl.precision.tables = tables_label(impl.precision.tables, t.bits == 8 ? "int8" : "int4");
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
