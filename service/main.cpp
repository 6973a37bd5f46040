// numaserve: parses and dispatches. Options are declared once, in the
// tables of options/ (and model/'s demo_options); what each subcommand does
// lives in its part: startup/ (serve, supervise), model/ (make-demo-models),
// http/probe (health), feast/loader (feature-store load).
#include <CLI/CLI.hpp>

#include <csignal>
#include <iostream>

#include "feast/loader.h"
#include "http/probe.h"
#include "model/demo_models.h"
#include "numaserve/common/options.h"
#include "options/serve_options.h"
#include "startup/startup.h"
#include "supervisor/supervisor.h"

namespace {

constexpr const char* kProgram = "numaserve";
constexpr const char* kVersion = "0.1.0";

int health(const numaserve::serve::HealthOptions& o) {
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

int load_feature_store(const numaserve::feast::LoadConfig& config) {
  auto loaded = numaserve::feast::load(config);
  if (!loaded) {
    std::cerr << kProgram << ": " << loaded.error().message << "\n";
    return 1;
  }
  std::cout << "wrote " << loaded->users << " users and " << loaded->items << " items to " << loaded->where << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A peer that closed (a killed Redis under hiredis's write()) is an error
  // to report and recover from, not a signal that ends the process unlogged.
  signal(SIGPIPE, SIG_IGN);
  CLI::App app{"numaserve: a NUMA-aware LibTorch ranking service"};
  app.require_subcommand(1);

  numaserve::serve::ServeOptions options;
  auto* serve_cmd = app.add_subcommand("serve", "Serve models over HTTP: POST /predict, KServe v2, /placement, /metrics");
  numaserve::OptionTable serve_table(numaserve::serve::serve_options(options));
  serve_table.add_to(*serve_cmd);

  numaserve::model::DemoConfig demo;
  std::string demo_dir;
  auto* demo_cmd = app.add_subcommand("make-demo-models", "Write DIR/ranker_a, DIR/ranker_b and DIR/store.jsonl");
  demo_cmd->add_option("dir", demo_dir, "Output directory")->required();
  numaserve::OptionTable demo_table(numaserve::model::demo_options(demo));
  demo_table.add_to(*demo_cmd);

  numaserve::serve::HealthOptions probe;
  auto* health_cmd = app.add_subcommand("health", "GET a path of the running service on loopback; exit 0 on 200");
  numaserve::OptionTable health_table(numaserve::serve::health_options(probe));
  health_table.add_to(*health_cmd);

  numaserve::feast::LoadConfig load;
  auto* store_cmd = app.add_subcommand("feature-store", "Work with a Redis feature store");
  store_cmd->require_subcommand(1);
  auto* load_cmd = store_cmd->add_subcommand("load", "Write a JSON Lines store into Redis in Feast's online format");
  load_cmd->add_option("file", load.file, "The JSON Lines store")->required();
  numaserve::OptionTable load_table(numaserve::feast::load_options(load));
  load_table.add_to(*load_cmd);

  auto* options_cmd = app.add_subcommand("options", "Print every subcommand's options as Markdown tables (for the README)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (options_cmd->parsed()) {
    std::cout << serve_table.markdown() << "\n`numaserve make-demo-models DIR`:\n\n"
              << demo_table.markdown() << "\n`numaserve health`:\n\n"
              << health_table.markdown() << "\n`numaserve feature-store load FILE`:\n\n"
              << load_table.markdown();
    return 0;
  }
  auto& table = serve_cmd->parsed()  ? serve_table
                : demo_cmd->parsed() ? demo_table
                : load_cmd->parsed() ? load_table
                                     : health_table;
  if (auto applied = table.apply(); !applied) {
    std::cerr << kProgram << ": " << applied.error().message << "\n";
    return 2;
  }
  if (health_cmd->parsed()) return health(probe);
  if (demo_cmd->parsed()) return make_demo_models(demo_dir, demo);
  if (load_cmd->parsed()) return load_feature_store(load);
  if (options.replicated() && !numaserve::supervisor::supervised()) {
    // Each worker runs this same command line and knows it is one from its
    // environment.
    std::vector<std::string> command = {"/proc/self/exe"};
    for (int i = 1; i < argc; ++i) command.emplace_back(argv[i]);
    return numaserve::startup::supervise(options, std::move(command));
  }
  return numaserve::startup::serve(options, kVersion);
}
