#include "blas/blas.h"

#include <cpuid.h>
#include <dlfcn.h>
#include <strings.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "numaserve/common/log.h"

namespace numaserve::blas {
namespace {

// OpenBLAS's core names (driver/others/dynamic.c's corename[]) by the
// instruction set their sgemm kernels use (the Bulldozer family's AVX
// kernels use AMD's FMA4: level 2, and never chosen here).
struct Core {
  const char* name;
  int level;
};
constexpr Core kCores[] = {
    {"Katmai", 1},      {"Coppermine", 1},  {"Northwood", 1},   {"Prescott", 1},    {"Banias", 1},     {"Atom", 1},
    {"Core2", 1},       {"Penryn", 1},      {"Dunnington", 1},  {"Nehalem", 1},     {"Athlon", 1},     {"Opteron", 1},
    {"Opteron_SSE3", 1}, {"Barcelona", 1},  {"Nano", 1},        {"Bobcat", 1},      {"Sandybridge", 2}, {"Bulldozer", 2},
    {"Piledriver", 2},  {"Steamroller", 2}, {"Excavator", 2},   {"Haswell", 3},     {"Zen", 3},        {"SkylakeX", 4},
    {"Cooperlake", 4},  {"SapphireRapids", 4},
};

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

bool available_core(const std::vector<std::string>& available, std::string_view core) {
  return std::any_of(available.begin(), available.end(), [core](const std::string& c) { return same_name(c, core); });
}

// OpenBLAS's entry points, where the process has an OpenBLAS with DYNAMIC_ARCH.
struct OpenBlas {
  char* (*corename)() = nullptr;
  char* (*config)() = nullptr;
  void (*dynamic_init)() = nullptr;
  void (*dynamic_quit)() = nullptr;
};

OpenBlas find_openblas() {
  OpenBlas o;
  o.corename = reinterpret_cast<char* (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  o.config = reinterpret_cast<char* (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  o.dynamic_init = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
  o.dynamic_quit = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
  return o;
}

// The cores this OpenBLAS was built with: each has its table gotoblas_<NAME>.
std::vector<std::string> built_cores() {
  std::vector<std::string> out;
  for (const auto& core : kCores) {
    std::string symbol = "gotoblas_";
    for (const char* c = core.name; *c != 0; ++c) symbol += static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
    if (dlsym(RTLD_DEFAULT, symbol.c_str()) != nullptr) out.emplace_back(core.name);
  }
  return out;
}

// Switches OpenBLAS to `core` through its own start-up path: OPENBLAS_CORETYPE
// is read by gotoblas_dynamic_init, which sets the kernel table and its
// blocking parameters; the variable is removed again, so that child
// processes (the supervisor's replicas) make their own choice.
void switch_core(const OpenBlas& o, const std::string& core) {
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  o.dynamic_quit();
  o.dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
}

Report discover_and_apply() {
  Report report;
  const OpenBlas o = find_openblas();
  if (o.corename == nullptr) {
    report.library = "not OpenBLAS";
    report.note = "the process's BLAS is not OpenBLAS: its kernels are its own choice";
    return report;
  }
  report.library = o.config != nullptr ? o.config() : "OpenBLAS";
  report.core = o.corename();
  const CpuFeatures cpu = cpu_features();
  const std::vector<std::string> cores = built_cores();
  report.best = best_core(cpu, cores);
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  const CoreChoice p =
      choose_core(cpu, report.core, forced != nullptr ? forced : "", cores, o.dynamic_init != nullptr && o.dynamic_quit != nullptr);
  report.note = p.reason;
  if (p.action == CoreChoice::Action::kCorrect) {
    report.chosen = report.core;
    switch_core(o, p.core);
    report.core = o.corename();
    report.corrected = same_name(report.core, p.core);
    if (!report.corrected) {
      report.warning = true;
      report.note += "; the switch did not take (OpenBLAS runs " + report.core +
                     "): set OPENBLAS_CORETYPE=" + p.core + " in the environment";
    }
  } else if (p.action == CoreChoice::Action::kWarn) {
    report.warning = true;
  }
  LogFields fields = {{"library", report.library}, {"core", report.core}, {"best", report.best}};
  if (!report.chosen.empty()) fields.emplace_back("chosen", report.chosen);
  fields.emplace_back("note", report.note);
  log(report.warning ? LogLevel::kWarning : LogLevel::kInfo,
      report.corrected ? "BLAS core corrected" : report.warning ? "BLAS core below this CPU's" : "BLAS core", fields);
  return report;
}

}  // namespace

CpuFeatures cpu_features() {
  // libgcc's answers also check that the OS saves the wide registers (XCR0).
  __builtin_cpu_init();
  CpuFeatures cpu;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d)) cpu.amd = b == 0x68747541 || b == 0x6f677948;  // "Auth"enticAMD, "Hygo"nGenuine
  cpu.avx = __builtin_cpu_supports("avx");
  cpu.avx2 = __builtin_cpu_supports("avx2");
  cpu.fma = __builtin_cpu_supports("fma");
  cpu.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  cpu.avx512_bf16 = cpu.avx512 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1);  // CPUID.(7,1):EAX[5]
  return cpu;
}

int core_level(std::string_view core) {
  for (const auto& c : kCores) {
    if (same_name(c.name, core)) return c.level;
  }
  return 0;
}

std::string best_core(const CpuFeatures& cpu, const std::vector<std::string>& available) {
  // Widest first, each only where the CPU runs it; the same order as
  // OpenBLAS's own fallback for a CPU it does not know (0.3.21's
  // gotoblas_dynamic_init, when get_coretype has no answer).
  std::vector<const char*> wanted;
  if (cpu.avx512 && cpu.avx512_bf16) wanted.push_back("Cooperlake");
  if (cpu.avx512) wanted.push_back("SkylakeX");
  if (cpu.avx2 && cpu.fma) {
    if (cpu.amd) wanted.push_back("Zen");
    wanted.push_back("Haswell");
  }
  if (cpu.avx) wanted.push_back("Sandybridge");
  for (const char* core : wanted) {
    if (available_core(available, core)) return core;
  }
  return "";
}

CoreChoice choose_core(const CpuFeatures& cpu, std::string_view chosen, std::string_view forced,
                       const std::vector<std::string>& available, bool switchable) {
  CoreChoice p;
  if (!forced.empty()) {
    p.reason = "OPENBLAS_CORETYPE=" + std::string(forced) + " is set in the environment: kept";
    return p;
  }
  const std::string best = best_core(cpu, available);
  if (best.empty() || core_level(chosen) >= core_level(best)) {
    p.reason = "OpenBLAS chose " + std::string(chosen) + (best.empty() ? "" : ", as good as this CPU's best, " + best);
    return p;
  }
  p.core = best;
  const std::string below = "OpenBLAS chose " + std::string(chosen) + ", below what this CPU runs (" + best +
                            "): an OpenBLAS older than this CPU model does not know it";
  if (switchable) {
    p.action = CoreChoice::Action::kCorrect;
    p.reason = below + "; switched to " + best;
  } else {
    p.action = CoreChoice::Action::kWarn;
    p.reason = below + "; this OpenBLAS cannot be switched in process: set OPENBLAS_CORETYPE=" + best +
               " in the environment, or install OpenBLAS 0.3.25 or newer";
  }
  return p;
}

const Report& apply() {
  static const Report report = discover_and_apply();
  return report;
}

std::string summary(const Report& report) {
  if (report.core.empty()) return "";
  std::string out = "core " + report.core;
  if (report.corrected) out += " (corrected from " + report.chosen + ")";
  if (report.warning && !report.corrected) out += " (below this CPU's " + report.best + ")";
  return out;
}

}  // namespace numaserve::blas
