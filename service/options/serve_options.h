#pragma once
// `numaserve serve`'s options: the values, and the one table that declares
// each of them (flag, NUMASERVE_* variable, YAML key, default, help, parser;
// common/options.h). A library of its own so that the table's tests and the
// fuzz target of the options file see the very table the binary uses.

#include <cstdint>
#include <string>
#include <vector>

#include "numaserve/common/options.h"
#include "threads/threads.h"
#include "supervisor/supervisor.h"

namespace numaserve::serve {

struct ServeOptions {
  std::vector<std::string> model_dirs;
  std::string feature_store;
  std::string listen_address = "0.0.0.0";
  unsigned port = 8080;
  int admin_port = -1;  // -1: /metrics, /placement and probes on `port` too
  numaserve::threads::ThreadConfig threads;
  unsigned queue_capacity = 64;
  double max_queue_delay = 1;
  unsigned max_batch_items = 1024;
  unsigned max_batch_delay_us = 0;
  unsigned max_items = 2000;
  std::uint64_t max_body_bytes = 8u << 20;
  std::uint64_t max_header_bytes = 16u << 10;
  unsigned max_connections = 0;
  double header_timeout = 10;
  double body_timeout = 30;
  double idle_timeout = 60;
  bool memory_bind = true;
  unsigned warmup_rounds = 3;
  double shutdown_delay = 0;
  double shutdown_grace = 30;
  bool reuse_port = false;
  numaserve::supervisor::ReplicaConfig replicas;
  unsigned max_restarts = 5;
  LogOptions log;
};

std::vector<OptionSpec> serve_options(ServeOptions& o);

}  // namespace numaserve::serve
