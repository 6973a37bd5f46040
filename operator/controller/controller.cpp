#include "controller/controller.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "controller/operator.h"
#include "numaserve/common/duration.h"
#include "numaserve/common/log.h"

namespace numaserve::op::controller {

int run_operator(const OperatorConfig& config) {
  log(LogLevel::kInfo, "operator", {{"apiserver", config.apiserver.url}, {"namespace", config.namespace_name},
                                    {"identity", config.identity}});
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGTERM, SIGINT}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  const int sfd = signalfd(-1, &signals, SFD_CLOEXEC);

  kube::http::StatusServer server;
  if (auto started = server.start(config.endpoint.host, static_cast<int>(config.endpoint.port)); !started) {
    log(LogLevel::kError, started.error().message);
    return 1;
  }
  log(LogLevel::kInfo, "listening", {{"address", config.endpoint.host}, {"port", std::to_string(server.port())}});

  Operator op(config);
  // The Lease is renewed well within its duration; pools are planned every resync.
  const auto step = std::min(config.resync, std::chrono::duration<double>(config.lease) / 3.0);
  Operator::Clock::time_point next_pass{};
  for (;;) {
    if (op.lead() && Operator::Clock::now() >= next_pass) {
      op.reconcile_all();
      next_pass = Operator::Clock::now() + to_duration(config.resync.count());
    }
    server.publish(op.snapshot());
    pollfd p{sfd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(to_duration<std::chrono::milliseconds>(step.count()).count())) > 0) break;
  }
  log(LogLevel::kInfo, "stopping");
  op.release();
  server.stop();
  ::close(sfd);
  return 0;
}

}  // namespace numaserve::op::controller
