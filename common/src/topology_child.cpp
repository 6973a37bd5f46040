// An hwloc XML export read in a child process, capped in time and memory,
// the model sent back as JSON (see discover_in_child below for why).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <fstream>

#include "numaserve/common/topology_json.h"
#include "topology_discovery.h"

namespace numaserve {
namespace {

#ifdef NUMASERVE_FUZZ_BUILD
// The bounds the linker gives the section of libFuzzer's inline 8-bit
// coverage counters (-fsanitize=fuzzer-no-link builds only).
extern "C" std::uint8_t __start___sancov_cntrs[];
extern "C" std::uint8_t __stop___sancov_cntrs[];

// In a fuzz build the child's edges — discover_with_hwloc and its helpers,
// some 600 of them — are counted in the child's copy of the counters, which
// libFuzzer never reads: measured, fuzz_hwloc_xml saw 0 of
// discover_with_hwloc's 300 edges and stayed at 1,111 through 3,000 runs,
// exploring blind. The child copies its counters into a page shared with
// the parent, which keeps the larger of each pair, as AFL's fork server
// shares its coverage map.
class ChildCoverage {
 public:
  ChildCoverage() : size_(static_cast<std::size_t>(__stop___sancov_cntrs - __start___sancov_cntrs)) {
    void* shared = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared != MAP_FAILED) shared_ = static_cast<std::uint8_t*>(shared);
  }
  ~ChildCoverage() {
    if (shared_ != nullptr) ::munmap(shared_, size_);
  }
  ChildCoverage(const ChildCoverage&) = delete;
  ChildCoverage& operator=(const ChildCoverage&) = delete;
  void send() const {  // in the child, before it exits
    if (shared_ != nullptr) std::memcpy(shared_, __start___sancov_cntrs, size_);
  }
  void take() const {  // in the parent, once the child is gone
    if (shared_ == nullptr) return;
    for (std::size_t i = 0; i < size_; ++i) __start___sancov_cntrs[i] = std::max(__start___sancov_cntrs[i], shared_[i]);
  }

 private:
  std::size_t size_;
  std::uint8_t* shared_ = nullptr;
};
#else
struct ChildCoverage {
  void send() const {}
  void take() const {}
};
#endif

// The child's limits: an export of thousands of CPUs loads in milliseconds,
// and real exports need a few MiB above what the process already maps.
constexpr unsigned kChildSeconds = 1;
constexpr std::uint64_t kChildHeadroom = 256u << 20;

// In the child: discovers, writes the model (or its error) as JSON to
// `out_fd` and exits; a crash, a hang or a bloat ends it by a signal.
[[noreturn]] void run_child(const TopologySource& source, int out_fd, const ChildCoverage& coverage) {
  // Die of the signal itself: a sanitizer's or fuzzer's handler would
  // report the parent's input as its own finding.
  for (const int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGALRM}) std::signal(sig, SIG_DFL);
  ::alarm(kChildSeconds);
  if (std::ifstream statm("/proc/self/statm"); statm) {
    std::uint64_t pages = 0;
    statm >> pages;
    const std::uint64_t cap = pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) + kChildHeadroom;
    const rlimit limit{cap, cap};
    ::setrlimit(RLIMIT_AS, &limit);
  }
  const auto found = discover_with_hwloc(source);
  const nlohmann::json reply =
      found ? nlohmann::json{{"topology", *found}}
            : nlohmann::json{{"code", static_cast<int>(found.error().code)},
                             {"error", found.error().message},
                             {"field", found.error().field}};
  const std::string text = reply.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  for (std::size_t sent = 0; sent < text.size();) {
    const ssize_t n = ::write(out_fd, text.data() + sent, text.size() - sent);
    if (n < 0 && errno != EINTR) ::_exit(1);
    if (n > 0) sent += static_cast<std::size_t>(n);
  }
  coverage.send();
  ::_exit(0);
}

// Everything the child wrote, up to its end of the pipe closing.
std::string read_all(int fd) {
  std::string text;
  char chunk[16384];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n > 0) text.append(chunk, static_cast<std::size_t>(n));
    if (n == 0 || (n < 0 && errno != EINTR)) break;
  }
  return text;
}

// The model from how the child ended (`status`, waitpid's) and what it wrote.
Result<Topology> reply_of(int status, const std::string& text, const std::string& file) {
  if (WIFSIGNALED(status)) {
    return make_error(Error::Code::kInvalidArgument,
                      WTERMSIG(status) == SIGALRM
                          ? "hwloc did not finish reading " + file + " within " + std::to_string(kChildSeconds) + " s"
                          : "hwloc crashed reading " + file + " (signal " + std::to_string(WTERMSIG(status)) +
                                "): not a well-formed hwloc XML export",
                      file);
  }
  const auto reply = nlohmann::json::parse(text, nullptr, false);
  if (WEXITSTATUS(status) != 0 || reply.is_discarded()) {
    return make_error(Error::Code::kInvalidArgument,
                      "hwloc could not read " + file + " within " + std::to_string(kChildHeadroom >> 20) + " MiB", file);
  }
  try {
    if (reply.contains("error")) {
      return tl::unexpected(Error{static_cast<Error::Code>(reply.at("code").get<int>()),
                                  reply.at("error").get<std::string>(), reply.at("field").get<std::string>()});
    }
    return reply.at("topology").get<Topology>();
  } catch (const std::exception& e) {
    return make_error(Error::Code::kInternal, "the model read from " + file + " did not come back whole: " + e.what(),
                      file);
  }
}

}  // namespace

// hwloc 2.9's XML import (its own parser; Debian's libxml2 plugin is not
// installed) trusts what it reads (fuzz_hwloc_xml): a truncated file
// ("<topology version=") or an object without one of its sets dereferences
// NULL inside hwloc_topology_load; a PU without an os_index counts as
// number 2^32 - 1, half a GiB of set and seconds of memset; a file hwloc
// refuses leaks what it had read. An XML file comes from an operator or a
// capture, not from the kernel, so its whole discovery runs in a child with
// 1 s and 256 MiB, which sends the model back as JSON: a file that crashes,
// hangs or bloats hwloc is an error naming it, and this process never runs
// hwloc on it. The fork and the JSON round trip cost a few milliseconds,
// once per file.
Result<Topology> discover_in_child(const TopologySource& source) {
  const std::string& file = source.value;
  const ChildCoverage coverage;
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return make_error(Error::Code::kInternal, "pipe to read " + file + " failed", file);
  const pid_t child = ::fork();
  if (child < 0) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    return make_error(Error::Code::kInternal, "fork to read " + file + " failed", file);
  }
  if (child == 0) {
    ::close(pipe_fds[0]);
    run_child(source, pipe_fds[1], coverage);
  }
  ::close(pipe_fds[1]);
  const std::string text = read_all(pipe_fds[0]);
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return make_error(Error::Code::kInternal, "waiting for the reading of " + file + " failed", file);
  }
  coverage.take();
  return reply_of(status, text, file);
}

}  // namespace numaserve
