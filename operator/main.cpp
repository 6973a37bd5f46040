// numaserve-operator: the topology operator, fleet-wide (the node agent,
// numaserve-topology-agent, runs on every node). Parses and dispatches:
// options are declared once, in options/operator_options.cpp; `run` is
// controller/'s loop, whose decisions are pool/'s pure functions.
#include <CLI/CLI.hpp>

#include <iostream>

#include "controller/controller.h"
#include "numaserve/common/log.h"
#include "options/operator_options.h"

namespace {

constexpr const char* kProgram = "numaserve-operator";

}  // namespace

int main(int argc, char** argv) {
  numaserve::op::options::OperatorOptions options;
  CLI::App app{"numaserve-operator: every ServingPool of its namespace served, one Deployment per machine class"};
  app.require_subcommand(1);
  CLI::App* run = app.add_subcommand(
      "run", "The in-cluster loop: one Deployment and PDB per machine class for every ServingPool, leader-elected; "
             "serves /plan, /metrics, /healthz");
  numaserve::OptionTable table = numaserve::op::options::operator_table(options);
  table.add_to(*run);
  CLI::App* list = app.add_subcommand("options", "Print every option as a Markdown table (for the docs)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; any bad flag or value is a usage error (2).
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (list->parsed()) {
    std::cout << table.markdown();
    return 0;
  }
  if (auto applied = table.apply(); !applied) {
    std::cerr << kProgram << ": " << applied.error().message << "\n";
    return 2;
  }
  auto config = options.run_config();
  if (!config) {
    std::cerr << kProgram << ": run: " << config.error().message << "\n";
    return 2;
  }
  numaserve::configure_logging("operator", options.log.level, options.log.format);
  return numaserve::op::controller::run_operator(*config);
}
