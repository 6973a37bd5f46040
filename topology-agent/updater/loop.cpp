#include "updater/loop.h"

#include "numaserve/common/log.h"

namespace numaserve::agent::updater {

std::vector<Watched> kubelet_watches(const discover::DiscoverConfig& config) {
  std::vector<Watched> out;
  if (config.kubelet_state_dir) {
    out.push_back({*config.kubelet_state_dir, {"cpu_manager_state", "memory_manager_state", "kubelet_internal_checkpoint"}});
  }
  if (config.podresources) {
    const auto& socket = config.podresources->socket;
    out.push_back({socket.has_parent_path() ? socket.parent_path() : ".", {socket.filename().string()}});
  }
  return out;
}

Status run_loop(Updater& updater, const LoopConfig& config, const OnCycle& on_cycle) {
  auto triggers = Triggers::open(config);
  if (!triggers) return tl::unexpected(triggers.error());
  for (Trigger trigger;;) {
    on_cycle(updater.run_cycle(), trigger.reason);
    auto next = triggers->next();
    if (!next) return tl::unexpected(next.error());
    if (next->kind == Trigger::Kind::kStop) {
      log(LogLevel::kInfo, "stopping", {{"signal", next->reason}});
      return {};
    }
    trigger = std::move(*next);
  }
}

}  // namespace numaserve::agent::updater
