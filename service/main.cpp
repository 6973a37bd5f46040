// numaserve: parses and dispatches. Options are declared once, in the
// tables of options/ (and model/'s demo_options); what each subcommand does
// lives in its part: startup/ (serve, supervise), model/ (make-demo-models,
// and the LibTorch runtime handed to start-up), http/probe (health),
// feature_store/loader (feature-store load), commands/extract (extract).
#include <CLI/CLI.hpp>

#include <csignal>
#include <iostream>

#include "commands/extract.h"
#include "feature_store/loader.h"
#include "http/probe.h"
#include "model/demo_models.h"
#include "model/model.h"
#include "numaserve/common/options.h"
#include "options/serve_options.h"
#include "startup/startup.h"
#include "supervisor/supervisor.h"

namespace {

constexpr const char* kProgram = "numaserve";
constexpr const char* kVersion = NUMASERVE_VERSION;

int health(const numaserve::options::HealthOptions& o) {
  auto status = numaserve::http::probe(static_cast<int>(o.port), o.path, o.timeout_seconds);
  if (!status || *status != 200) {
    std::cerr << kProgram << ": " << (status ? o.path + " answered " + std::to_string(*status) : status.error().message)
              << "\n";
    return 1;
  }
  return 0;
}

int make_demo_models(const std::string& dir, const numaserve::model::DemoConfig& demo) {
  if (auto made = numaserve::model::make_demo_models(dir, demo); !made) {
    std::cerr << kProgram << ": " << made.error().message << "\n";
    return 1;
  }
  std::cout << "wrote " << dir << "/ranker_a, " << dir << "/ranker_b, " << dir << "/store.jsonl\n";
  return 0;
}

int load_feature_store(const numaserve::feature_store::LoadConfig& config) {
  auto loaded = numaserve::feature_store::load(config);
  if (!loaded) {
    std::cerr << kProgram << ": " << loaded.error().message << "\n";
    return 1;
  }
  std::cout << "wrote " << loaded->users << " users and " << loaded->items << " items to " << loaded->where << "\n";
  return 0;
}

int extract(const numaserve::commands::ExtractConfig& config) {
  if (auto done = numaserve::commands::run_extract(config, std::cin, std::cout); !done) {
    std::cerr << kProgram << ": " << done.error().message << "\n";
    return 1;
  }
  return 0;
}

// "dot_interaction: 1 applied; embedding_bags: ..." and, indented, each site.
std::string graph_lines(const numaserve::api::GraphReport& report) {
  const auto& l = report.linear;
  std::string out = "  linear layers: " + std::to_string(l.own) + " on numaserve's kernels" +
                    (l.own > 0 ? " (" + l.kernels + ")" : "") + ", " + std::to_string(l.libtorch) + " on LibTorch (BLAS " +
                    l.blas + ")\n";
  out += "  graph optimizations: " + report.state + (report.reason.empty() ? "" : " (" + report.reason + ")") + "\n";
  for (const auto& rewrite : report.rewrites) {
    for (const auto& line : rewrite.applied) out += "    " + rewrite.name + ": " + line + "\n";
    for (const auto& line : rewrite.not_applied) out += "    " + rewrite.name + " not applied: " + line + "\n";
  }
  return out;
}

int report_error(const numaserve::Error& e) {
  const bool named = e.field.empty() || e.message.find(e.field) != std::string::npos;
  std::cerr << kProgram << ": " << e.message << (named ? "" : " (field " + e.field + ")") << "\n";
  return 1;
}

std::string precision_line(const numaserve::api::PrecisionReport& p) {
  using numaserve::format_number;
  const std::string asked = p.requested.substr(0, 4);
  const std::string timing = p.fp32_us > 0 ? "; linear layers " + format_number(p.candidate_us) + " us in " + asked + ", " +
                                                 format_number(p.fp32_us) + " us in fp32 on " +
                                                 std::to_string(numaserve::model::kTimingRows) + " rows"
                                           : "";
  if (p.narrowed()) {
    // Tables shipped quantized with nothing narrowed at load: no drift check there.
    const std::string drift = p.drift_bound > 0 ? "; scores within " + format_number(p.max_drift) + " of fp32's on " +
                                                      std::to_string(numaserve::model::kDriftCheckRows) + " random rows (bound " +
                                                      format_number(p.drift_bound) + ")"
                                                : " as shipped (quantized_tables); nothing narrowed at load";
    return "  precision: linear layers " + p.served + (p.instructions.empty() ? "" : " (" + p.instructions + ")") + ", tables " +
           p.tables + drift + timing + (p.reason.empty() ? "" : " (" + p.requested + ": " + p.reason + ")") + "\n";
  }
  return "  precision: fp32" + (p.reason.empty() ? std::string() : " (" + p.requested + ": " + p.reason + ")") + "\n";
}

// check-model --requests: the drift on real requests, in a ranking team's terms.
int report_drift(const std::string& dir, const numaserve::options::CheckModelOptions& o,
                 const numaserve::model::LoadOptions& options) {
  auto requests = numaserve::commands::extract_requests({dir, o.feature_store.string()}, o.requests);
  if (!requests) return report_error(requests.error());
  std::vector<std::vector<float>> labels;
  if (!o.labels.empty()) {
    auto read = numaserve::commands::read_labels(o.labels);
    if (!read) return report_error(read.error());
    labels = std::move(*read);
  }
  auto drift = numaserve::model::precision_drift(dir, options, *requests, labels);
  if (!drift) return report_error(drift.error());
  const auto& d = *drift;
  const std::string candidate =
      std::string(numaserve::features::kPrecisionNames.name(options.precision.value_or(numaserve::features::Precision::kFp32))) +
      (options.embedding_precision
           ? " with " + std::string(numaserve::features::kTablePrecisionNames.name(*options.embedding_precision)) + " tables"
           : "");
  std::cout << "  " << candidate << " against fp32 on " << d.requests << " requests (" << d.items << " items) of " << o.requests.string()
            << ":\n    |score difference|: max " << d.max_abs << ", mean " << d.mean_abs
            << "\n    Spearman per request: min " << d.min_spearman << ", mean " << d.mean_spearman
            << "\n    top-10 overlap per request: min " << d.min_top10 << ", mean " << d.mean_top10 << "\n";
  auto quality = [](const std::optional<numaserve::drift::Quality>& q) {
    if (!q) return std::string("n/a (one class only)");
    return "AUC " + std::to_string(q->auc) +
           (q->log_loss ? ", log-loss " + std::to_string(*q->log_loss) : std::string(", log-loss n/a (scores not in [0, 1])"));
  };
  if (!labels.empty()) {
    std::cout << "    fp32: " << quality(d.reference_quality) << "\n    " << candidate << ": " << quality(d.candidate_quality) << "\n";
  }
  return 0;
}

// Exit 0: servable; 1: what is wrong, naming the file and field.
int check_model(const std::string& dir, const numaserve::options::CheckModelOptions& o) {
  numaserve::model::LoadOptions options;
  options.graph_optimizations = o.graph_optimizations;
  options.precision = o.precision;
  options.embedding_precision = o.embedding_precision;
  using numaserve::features::Precision;
  using numaserve::features::TablePrecision;
  const bool narrowed = o.precision.value_or(Precision::kFp32) != Precision::kFp32 ||
                        o.embedding_precision.value_or(TablePrecision::kFp32) != TablePrecision::kFp32;
  if (!o.requests.empty() && !narrowed) {
    std::cerr << kProgram << ": --requests reports a narrower precision's drift from fp32: give --precision bf16 or int8 "
                 "(or --embedding-precision)\n";
    return 2;
  }
  const auto checked = numaserve::model::check_model(dir, options);
  if (!checked) return report_error(checked.error());
  auto mib = [](std::size_t bytes) { return std::to_string((bytes + (1u << 19)) >> 20) + " MiB"; };
  std::cout << dir << ": " << checked->name << " version " << checked->version << " is servable\n"
            << "  " << checked->signature << "; " << checked->rows << " default rows scored, all finite\n"
            << "  weights " << mib(checked->weight_bytes) << ", resident after loading and one forward "
            << mib(checked->resident_bytes) << " (each replica holds one copy; its memory request must cover it)\n"
            << precision_line(checked->precision) << graph_lines(checked->graph);
  return o.requests.empty() ? 0 : report_drift(dir, o, options);
}

// The service on LibTorch: the only place start-up meets model/.
int serve(const numaserve::options::ServeOptions& options) {
  namespace model = numaserve::model;
  numaserve::startup::Runtime runtime;
  runtime.load = [graph = options.graph_optimizations, huge = options.huge_pages, precision = options.precision,
                  tables = options.embedding_precision](
                     const std::filesystem::path& dir, const std::string& version,
                     double cpu_share) -> numaserve::Result<std::unique_ptr<numaserve::api::Model>> {
    model::LoadOptions load;
    load.graph_optimizations = graph;
    load.version = version;
    load.cpu_share = cpu_share;
    load.huge_pages = huge;
    load.precision = precision;
    load.embedding_precision = tables;
    auto loaded = model::TorchModel::load(dir, load);
    if (!loaded) return tl::unexpected(loaded.error());
    // What a request would otherwise find: the signature, and a forward on
    // synthetic rows that returns one finite score per row.
    if (auto checked = (*loaded)->check(16); !checked) return tl::unexpected(checked.error());
    return std::unique_ptr<numaserve::api::Model>(std::move(*loaded));
  };
  runtime.prepare_worker_thread = model::set_intra_op_threads;
  runtime.summary = model::runtime_summary;
  return numaserve::startup::serve(options, kVersion, runtime);
}

// Every subcommand and the option table it is parsed with.
struct Cli {
  CLI::App app{"numaserve: a NUMA-aware LibTorch ranking service"};
  numaserve::options::ServeOptions options;
  numaserve::OptionTable serve_table{numaserve::options::serve_options(options)};
  numaserve::model::DemoConfig demo;
  std::string demo_dir;
  numaserve::OptionTable demo_table{numaserve::model::demo_options(demo)};
  numaserve::options::HealthOptions probe;
  numaserve::OptionTable health_table{numaserve::options::health_options(probe)};
  numaserve::feature_store::LoadConfig load;
  numaserve::OptionTable load_table{numaserve::feature_store::load_options(load)};
  std::string check_dir;
  numaserve::options::CheckModelOptions check;
  numaserve::OptionTable check_table{numaserve::options::check_model_options(check)};
  numaserve::commands::ExtractConfig extract;
  numaserve::OptionTable extract_table{numaserve::commands::extract_options(extract)};
  CLI::App* serve_cmd = app.add_subcommand("serve", "Serve models over HTTP: POST /predict, KServe v2, /placement, /metrics");
  CLI::App* demo_cmd = app.add_subcommand("make-demo-models", "Write DIR/ranker_a, DIR/ranker_b and DIR/store.jsonl");
  CLI::App* health_cmd = app.add_subcommand("health", "GET a path of the running service on loopback; exit 0 on 200");
  CLI::App* store_cmd = app.add_subcommand("feature-store", "Work with a Redis feature store");
  CLI::App* load_cmd = store_cmd->add_subcommand("load", "Write a JSON Lines store into Redis in Feast's online format");
  CLI::App* check_cmd = app.add_subcommand(
      "check-model",
      "Load DIR as serve would, run one forward on default rows, report what is wrong and what it costs (and, with "
      "--precision bf16|int8 --requests, how far its scores stray from fp32 on real requests)");
  CLI::App* extract_cmd = app.add_subcommand(
      "extract", "Print the tensors /predict would feed the model for each request on stdin (one JSON body per line)");
  CLI::App* options_cmd =
      app.add_subcommand("options", "Print every subcommand's options as Markdown tables (for docs/reference/options.md)");

  Cli() {
    app.require_subcommand(1);
    serve_table.add_to(*serve_cmd);
    demo_cmd->add_option("dir", demo_dir, "Output directory")->required();
    demo_table.add_to(*demo_cmd);
    health_table.add_to(*health_cmd);
    store_cmd->require_subcommand(1);
    load_cmd->add_option("file", load.file, "The JSON Lines store")->required();
    load_table.add_to(*load_cmd);
    extract_table.add_to(*extract_cmd);
    check_cmd->add_option("dir", check_dir, "A model directory: model.pt and model.yaml")->required();
    check_table.add_to(*check_cmd);
  }

  void print_options() const {
    std::cout << serve_table.markdown() << "\n`numaserve make-demo-models DIR`:\n\n"
              << demo_table.markdown() << "\n`numaserve health`:\n\n"
              << health_table.markdown() << "\n`numaserve feature-store load FILE`:\n\n"
              << load_table.markdown() << "\n`numaserve extract`:\n\n"
              << extract_table.markdown() << "\n`numaserve check-model DIR`:\n\n"
              << check_table.markdown();
  }

  numaserve::OptionTable& parsed_table() {
    return serve_cmd->parsed()     ? serve_table
           : demo_cmd->parsed()    ? demo_table
           : load_cmd->parsed()    ? load_table
           : extract_cmd->parsed() ? extract_table
           : check_cmd->parsed()   ? check_table
                                   : health_table;
  }
};

}  // namespace

int main(int argc, char** argv) {
  // A peer that closed (a killed Redis under hiredis's write()) is an error
  // to report and recover from, not a signal that ends the process unlogged.
  signal(SIGPIPE, SIG_IGN);
  Cli cli;
  try {
    cli.app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.app.exit(e) == 0 ? 0 : 2;
  }
  if (cli.options_cmd->parsed()) {
    cli.print_options();
    return 0;
  }
  if (auto applied = cli.parsed_table().apply(); !applied) {
    std::cerr << kProgram << ": " << applied.error().message << "\n";
    return 2;
  }
  if (cli.check_cmd->parsed()) return check_model(cli.check_dir, cli.check);
  if (cli.health_cmd->parsed()) return health(cli.probe);
  if (cli.demo_cmd->parsed()) return make_demo_models(cli.demo_dir, cli.demo);
  if (cli.load_cmd->parsed()) return load_feature_store(cli.load);
  if (cli.extract_cmd->parsed()) return extract(cli.extract);
  if (cli.options.replicated() && !numaserve::supervisor::supervised()) {
    // Each replica runs this same command line and knows it is one from its
    // environment.
    std::vector<std::string> command = {"/proc/self/exe"};
    for (int i = 1; i < argc; ++i) command.emplace_back(argv[i]);
    return numaserve::startup::supervise(cli.options, std::move(command));
  }
  return serve(cli.options);
}
