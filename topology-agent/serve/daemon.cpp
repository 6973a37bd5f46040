#include "serve/daemon.h"

#include "numaserve/common/log.h"
#include "serve/metrics.h"

namespace numaserve::agent::serve {
namespace {

// A cycle's result served at the endpoint, its errors and warnings logged.
void report_cycle(kube::http::StatusServer& server, const updater::CycleResult& result, const updater::Counters& counters,
                  const std::string& reason) {
  server.publish(snapshot_of(result, counters));
  for (const auto& error : result.errors) log(LogLevel::kError, error);
  if (result.report) {
    for (const auto& w : result.report->warnings) log(LogLevel::kWarning, w);
  }
  log(LogLevel::kInfo, "cycle",
      {{"ok", result.ok() ? "true" : "false"},
       {"reason", reason},
       {"cycles", std::to_string(counters.cycles)},
       {"files_changed", std::to_string(counters.files_changed)}});
}

}  // namespace

int run_daemon(DaemonConfig config) {
  if (config.updater.apiserver) log(LogLevel::kInfo, "apiserver", {{"url", config.updater.apiserver->url}});
  config.loop.watched = updater::kubelet_watches(config.updater.discover);
  updater::Updater agent(std::move(config.updater));

  // Before the HTTP server's threads start: they inherit the mask, so only
  // the loop's signalfd reads SIGHUP, SIGTERM and SIGINT.
  updater::block_signals();

  kube::http::StatusServer server;
  if (!config.oneshot) {
    if (auto started = server.start(config.endpoint.host, static_cast<int>(config.endpoint.port)); !started) {
      log(LogLevel::kError, started.error().message);
      return 1;
    }
    log(LogLevel::kInfo, "listening", {{"address", config.endpoint.host}, {"port", std::to_string(server.port())}});
  }
  if (config.oneshot) {
    const auto result = agent.run_cycle();
    report_cycle(server, result, agent.counters(), "oneshot");
    return result.ok() ? 0 : 1;
  }
  auto ran = updater::run_loop(agent, config.loop, [&](const updater::CycleResult& result, const std::string& reason) {
    report_cycle(server, result, agent.counters(), reason);
  });
  server.stop();
  if (!ran) log(LogLevel::kError, ran.error().message);
  return ran ? 0 : 1;
}

}  // namespace numaserve::agent::serve
