#pragma once
// The `numaserve` binary's options: the values, and the one table per
// subcommand that declares each of them (flag, NUMASERVE_* variable, YAML
// key, default, help, parser; common/options.h). Each value lives in the
// config struct of the part that uses it, so its default is written once,
// there, and the rows show it. A library of its own so that the tables'
// tests and the options file's fuzz target see the very tables the binary
// uses.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "api/config.h"
#include "feature_store/config.h"
#include "features/model_spec.h"
#include "http/config.h"
#include "lifecycle/config.h"
#include "numaserve/common/options.h"
#include "supervisor/supervisor.h"
#include "threads/threads.h"

namespace numaserve::options {

struct ServeOptions {
  std::vector<std::string> model_dirs;
  lifecycle::ReloadConfig reload;  // --model-repository and its reloads
  std::string feature_store;  // a JSON Lines file, or a Redis URL; empty: inline features only
  std::string feature_store_password_file;
  feature_store::StoreConfig store;  // with a Redis URL
  http::ServerConfig http;    // workers and reuse under a supervisor are start-up's to set
  threads::ThreadConfig threads;
  api::ServiceConfig service;  // version and wait_for_group are start-up's to set
  supervisor::ReplicaConfig replicas;
  supervisor::SupervisorConfig supervisor;  // command and grace are start-up's to set
  // model/'s LoadOptions, which this torch-free table cannot see.
  bool graph_optimizations = true;
  bool huge_pages = true;  // model/'s LoadOptions::huge_pages
  std::optional<features::Precision> precision;  // model/'s LoadOptions::precision: unset, model.yaml's
  std::optional<features::TablePrecision> embedding_precision;  // LoadOptions::embedding_precision
  // Start-up's own: the memory policy, and the shutdown's timing.
  bool memory_bind = true;
  double shutdown_delay = 0;   // seconds serving not-ready after SIGTERM
  double shutdown_grace = 30;  // seconds for the drain, then exit 1
  LogOptions log;

  bool replicated() const { return replicas.per_numa_node != 0 || replicas.replicas != 0; }
};

std::vector<OptionSpec> serve_options(ServeOptions& o);

// Rows in serve's table and check-model's.
OptionSpec graph_optimizations_option(bool& target);
OptionSpec precision_option(std::optional<features::Precision>& target);
OptionSpec embedding_precision_option(std::optional<features::TablePrecision>& target);

// `numaserve check-model DIR`.
struct CheckModelOptions {
  bool graph_optimizations = true;
  std::optional<features::Precision> precision;
  std::optional<features::TablePrecision> embedding_precision;
  // With a precision below fp32: the drift on real requests (JSON Lines of /predict bodies),
  // their ids looked up in a JSON Lines store, and optionally each
  // request's labels (a JSON array of 0/1 per line, one per item).
  std::filesystem::path requests, feature_store, labels;
};
std::vector<OptionSpec> check_model_options(CheckModelOptions& o);

// `numaserve health`: the image's HEALTHCHECK (no shell, no curl in it).
struct HealthOptions {
  // The admin port when the service has one, as it was told through the
  // environment, else its port, else 8080.
  unsigned port = default_port();
  std::string path = "/readyz";
  double timeout_seconds = 3;

  static unsigned default_port();
};

std::vector<OptionSpec> health_options(HealthOptions& o);

}  // namespace numaserve::options
