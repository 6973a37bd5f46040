#include "numaserve/common/kernel_settings.h"

#include <charconv>

#include "numaserve/common/text_file.h"

namespace numaserve {
namespace {

namespace fs = std::filesystem;

// Reads an optional file: nullopt when it does not exist, else its text.
Result<std::optional<std::string>> read_optional(const fs::path& path) {
  auto text = read_text_file(path);
  if (text) return std::optional(*text);
  if (text.error().code == Error::Code::kNotFound) return std::optional<std::string>();
  return tl::unexpected(text.error());
}

// THP files list every mode with the active one in brackets: "always [madvise] never".
std::string bracketed(const std::string& text) {
  const auto open = text.find('[');
  const auto close = text.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return {};
  return text.substr(open + 1, close - open - 1);
}

Result<CpuSet> optional_cpus(const fs::path& path) {
  auto text = read_optional(path);
  if (!text) return tl::unexpected(text.error());
  // Unset, nohz_full reads "(null)" on many kernels.
  if (!*text || (*text)->starts_with("(null)")) return CpuSet{};
  auto set = CpuSet::parse_list(**text);
  if (!set) return tl::unexpected(std::move(set.error()).with_context(path.string()));
  return *set;
}

}  // namespace

Result<KernelSettings> discover_kernel_settings(const fs::path& root) {
  KernelSettings out;
  const fs::path balancing = under_root(root, "/proc/sys/kernel/numa_balancing");
  auto text = read_optional(balancing);
  if (!text) return tl::unexpected(text.error());
  if (*text) {
    int value = 0;
    const std::string& s = **text;
    const auto end = s.find_last_not_of(" \n") + 1;
    if (std::from_chars(s.data(), s.data() + end, value).ptr != s.data() + end || end == 0) {
      return make_error(Error::Code::kInvalidArgument,
                        balancing.string() + ": want a number, got '" + s.substr(0, end) + "'",
                        balancing.string());
    }
    out.numa_balancing = value;
  }
  for (auto [file, target] : {std::pair{"enabled", &out.transparent_hugepage},
                              std::pair{"defrag", &out.transparent_hugepage_defrag}}) {
    const fs::path path = under_root(root, std::string("/sys/kernel/mm/transparent_hugepage/") + file);
    auto thp = read_optional(path);
    if (!thp) return tl::unexpected(thp.error());
    if (*thp) *target = bracketed(**thp);
  }
  auto isolated = optional_cpus(under_root(root, "/sys/devices/system/cpu/isolated"));
  if (!isolated) return tl::unexpected(isolated.error());
  out.isolated_cpus = *isolated;
  auto nohz = optional_cpus(under_root(root, "/sys/devices/system/cpu/nohz_full"));
  if (!nohz) return tl::unexpected(nohz.error());
  out.nohz_full_cpus = *nohz;
  return out;
}

std::vector<std::string> check_kernel_settings(const KernelSettings& s) {
  std::vector<std::string> warnings;
  if (s.numa_balancing.value_or(0) != 0) {
    warnings.push_back("kernel.numa_balancing is " + std::to_string(*s.numa_balancing) +
                       ": automatic NUMA balancing migrates pages and threads that numaserve placed; "
                       "set it to 0 (sysctl kernel.numa_balancing=0)");
  }
  if (s.transparent_hugepage == "always") {
    warnings.push_back("transparent hugepages are 'always': latency spikes from compaction are "
                       "common; 'madvise' lets the service opt in for model weights only");
  }
  if (!s.isolated_cpus.empty()) {
    warnings.push_back("CPUs " + s.isolated_cpus.to_list() +
                       " are isolated (isolcpus): the scheduler does not balance onto them; keep them "
                       "out of pods unless pinned on purpose");
  }
  return warnings;
}

}  // namespace numaserve
