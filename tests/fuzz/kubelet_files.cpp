// What the agent reads of the kubelet: its KubeletConfiguration (YAML) and
// the CPU and Memory Managers' state files (JSON). The first byte picks the
// decoder. Never a crash; a refusal names the file; the CPU sets accepted
// hold only ids the parsers allow.
#include "fuzz.h"
#include "kubelet/kubelet.h"

using namespace numaserve;
namespace kubelet = numaserve::agent::kubelet;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto text = fuzz::text(data + 1, size - 1);
  auto names_file = [](const Error& e, const char* file) {
    FUZZ_CHECK(e.message.find(file) != std::string::npos, "a refusal not naming %s: %s", file, e.message.c_str());
  };
  switch (data[0] % 3) {
    case 0: {
      const auto config = kubelet::parse_kubelet_config(text, "config.yaml");
      if (!config) {
        names_file(config.error(), "config.yaml");
      } else {
        for (unsigned cpu : config->reserved_system_cpus.ids()) FUZZ_CHECK(cpu <= CpuSet::kMaxId, "CPU %u", cpu);
      }
      break;
    }
    case 1: {
      const auto state = kubelet::parse_cpu_manager_state(text, "cpu_manager_state");
      if (!state) {
        names_file(state.error(), "cpu_manager_state");
      } else {
        for (unsigned cpu : (state->default_cpu_set | state->exclusive_cpus()).ids()) {
          FUZZ_CHECK(cpu <= CpuSet::kMaxId, "CPU %u", cpu);
        }
      }
      break;
    }
    default: {
      const auto state = kubelet::parse_memory_manager_state(text, "memory_manager_state");
      if (!state) names_file(state.error(), "memory_manager_state");
      break;
    }
  }
  return 0;
}
