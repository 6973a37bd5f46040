#include "serve/daemon.h"

#include <signal.h>

#include "numaserve/common/log.h"
#include "serve/metrics.h"

namespace numaserve::agent::serve {

int run_daemon(DaemonConfig config) {
  if (config.updater.apiserver) log(LogLevel::kInfo, "apiserver", {{"url", config.updater.apiserver->url}});
  config.loop.watched = updater::kubelet_watches(config.updater.discover);
  updater::Updater agent(std::move(config.updater));

  // Signals are read by the loop's signalfd, so every thread (the HTTP
  // server's included, started after this) must block them.
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGHUP, SIGTERM, SIGINT}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  http::StatusServer server;
  if (!config.oneshot) {
    if (auto started = server.start(config.endpoint.host, static_cast<int>(config.endpoint.port)); !started) {
      log(LogLevel::kError, started.error().message);
      return 1;
    }
    log(LogLevel::kInfo, "listening", {{"address", config.endpoint.host}, {"port", std::to_string(server.port())}});
  }
  auto report_cycle = [&](const updater::CycleResult& result, const std::string& reason) {
    server.publish(snapshot_of(result, agent.counters()));
    for (const auto& error : result.errors) log(LogLevel::kError, error);
    if (result.report) {
      for (const auto& w : result.report->warnings) log(LogLevel::kWarning, w);
    }
    log(LogLevel::kInfo, "cycle",
        {{"ok", result.ok() ? "true" : "false"},
         {"reason", reason},
         {"cycles", std::to_string(agent.counters().cycles)},
         {"files_changed", std::to_string(agent.counters().files_changed)}});
  };
  if (config.oneshot) {
    const auto result = agent.run_cycle();
    report_cycle(result, "oneshot");
    return result.ok() ? 0 : 1;
  }
  auto ran = updater::run_loop(agent, config.loop, report_cycle);
  server.stop();
  if (!ran) log(LogLevel::kError, ran.error().message);
  return ran ? 0 : 1;
}

}  // namespace numaserve::agent::serve
