#include "cgroup.h"

#include <sstream>

#include "numaserve/common/text_file.h"

namespace numaserve {
namespace {

namespace fs = std::filesystem;

// One line of /proc/self/cgroup: "hierarchy-id:controllers:path".
struct CgroupLine {
  std::string controllers;  // "cpuset", "cpu,cpuacct", "" for the v2 line "0::"
  std::string path;
};

struct Mount {
  std::string root;    // the hierarchy path mounted here (mountinfo field 4)
  fs::path point;
  std::string fstype;  // "cgroup" or "cgroup2"
  std::string options; // super options; v1 lists its controllers here
};

// Where one controller's files for this process live.
struct ControllerDir {
  int version = 2;
  std::string cgroup_path;
  fs::path dir;         // the process's own cgroup directory
  fs::path mount_point; // walking up stops here
};

bool has_word(const std::string& list, std::string_view word) {
  std::istringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item == word) return true;
  }
  return false;
}

// mountinfo escapes blanks in paths as octal (\040).
std::string unescape_octal(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() &&
        s.substr(i + 1, 3).find_first_not_of("01234567") == std::string::npos) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Lexically normal, without a trailing separator, so paths compare equal.
fs::path normalize(const fs::path& p) {
  std::string s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

std::vector<CgroupLine> parse_proc_cgroup(const std::string& text) {
  std::vector<CgroupLine> out;
  for (const std::string& line : split_lines(text)) {
    const auto a = line.find(':');
    const auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    out.push_back({line.substr(a + 1, b - a - 1), line.substr(b + 1)});
  }
  return out;
}

// Reads cgroup mounts from /proc/self/mountinfo, or from /proc/mounts when
// that is all there is (older captures). mountinfo's fourth field is the
// hierarchy path mounted there; /proc/mounts lacks it, so it is taken as "/".
std::vector<Mount> parse_cgroup_mounts(const std::string& text) {
  std::vector<Mount> out;
  for (const std::string& line : split_lines(text)) {
    Mount m;
    std::string root = "/", point, ignored;
    if (const auto sep = line.find(" - "); sep != std::string::npos) {
      std::istringstream head(line.substr(0, sep)), tail(line.substr(sep + 3));
      if (!(head >> ignored >> ignored >> ignored >> root >> point)) continue;
      if (!(tail >> m.fstype >> ignored >> m.options)) continue;
    } else {
      std::istringstream fields(line);
      if (!(fields >> ignored >> point >> m.fstype >> m.options)) continue;
    }
    if (m.fstype != "cgroup" && m.fstype != "cgroup2") continue;
    m.root = unescape_octal(root);
    m.point = unescape_octal(point);
    out.push_back(std::move(m));
  }
  return out;
}

// The cgroup directory of `cgroup_path` in `mount`, re-rooted under `root`.
// A path outside the mounted hierarchy (a container without its own cgroup
// namespace that sees the host's paths) resolves to the mount point, which
// is then the container's own cgroup.
fs::path cgroup_dir(const fs::path& root, const Mount& mount, const std::string& cgroup_path) {
  const fs::path point = normalize(under_root(root, mount.point));
  std::string rel = cgroup_path;
  if (mount.root != "/" && rel.starts_with(mount.root)) rel = rel.substr(mount.root.size());
  const fs::path dir = normalize(point / fs::path(rel).relative_path());
  std::error_code ec;
  return fs::is_directory(dir, ec) && dir.string().starts_with(point.string()) ? dir : point;
}

// Finds where `controller` (cpuset, cpu) is mounted for this process: a v1
// hierarchy that carries it, else the unified v2 hierarchy.
std::optional<ControllerDir> locate(const fs::path& root, const std::vector<CgroupLine>& lines,
                                    const std::vector<Mount>& mounts, std::string_view controller) {
  for (const auto& line : lines) {
    if (line.controllers.empty() || !has_word(line.controllers, controller)) continue;
    for (const auto& m : mounts) {
      if (m.fstype == "cgroup" && has_word(m.options, controller)) {
        return ControllerDir{1, line.path, cgroup_dir(root, m, line.path), normalize(under_root(root, m.point))};
      }
    }
  }
  for (const auto& line : lines) {
    if (!line.controllers.empty()) continue;
    for (const auto& m : mounts) {
      if (m.fstype == "cgroup2") {
        return ControllerDir{2, line.path, cgroup_dir(root, m, line.path), normalize(under_root(root, m.point))};
      }
    }
  }
  return std::nullopt;
}

// The process's cgroup directory, then its ancestors up to the mount point.
// A v2 cgroup without the cpuset controller enabled has no cpuset files, and
// then its parent's effective set is what applies; a parent's CPU quota caps
// all of its children.
std::vector<fs::path> dirs_up(const ControllerDir& where) {
  std::vector<fs::path> out;
  for (fs::path dir = where.dir; dir.string().starts_with(where.mount_point.string());
       dir = dir.parent_path()) {
    out.push_back(dir);
    if (dir == where.mount_point || dir == dir.parent_path()) break;
  }
  return out;
}

// The first of `names` found walking up from the process's cgroup.
Result<std::optional<std::pair<fs::path, std::string>>> read_nearest(
    const ControllerDir& where, std::initializer_list<const char*> names) {
  for (const auto& dir : dirs_up(where)) {
    for (const char* name : names) {
      std::error_code ec;
      if (!fs::exists(dir / name, ec)) continue;
      auto text = read_text_file(dir / name);
      if (!text) return tl::unexpected(text.error());
      return std::optional(std::pair(dir / name, *text));
    }
  }
  return std::optional<std::pair<fs::path, std::string>>();
}

Result<std::optional<CpuSet>> read_set(const ControllerDir& where,
                                       std::initializer_list<const char*> names) {
  auto found = read_nearest(where, names);
  if (!found) return tl::unexpected(found.error());
  if (!*found) return std::optional<CpuSet>();
  auto set = CpuSet::parse_list((*found)->second);
  if (!set) return tl::unexpected(std::move(set.error()).with_context((*found)->first.string()));
  return std::optional(*set);
}

Result<std::optional<double>> parse_limit(const fs::path& file, const std::string& quota_text,
                                          const std::string& period_text) {
  std::istringstream q(quota_text), p(period_text);
  std::string quota;
  long long period = 0;
  if (!(q >> quota) || !(p >> period) || period <= 0) {
    return make_error(Error::Code::kInvalidArgument,
                      file.string() + ": cannot parse CPU quota '" + quota_text + "'", file.string());
  }
  if (quota == "max" || quota == "-1") return std::optional<double>();
  char* end = nullptr;
  const long long value = std::strtoll(quota.c_str(), &end, 10);
  if (end == quota.c_str() || *end != '\0' || value <= 0) {
    return make_error(Error::Code::kInvalidArgument,
                      file.string() + ": cannot parse CPU quota '" + quota + "'", file.string());
  }
  return std::optional(static_cast<double>(value) / static_cast<double>(period));
}

// The tightest CPU bandwidth limit from the process's cgroup up to the root.
Result<std::optional<double>> read_cpu_limit(const ControllerDir& where) {
  std::optional<double> tightest;
  for (const auto& dir : dirs_up(where)) {
    std::error_code ec;
    Result<std::optional<double>> limit = std::optional<double>();
    if (where.version == 2 && fs::exists(dir / "cpu.max", ec)) {
      auto text = read_text_file(dir / "cpu.max");
      if (!text) return tl::unexpected(text.error());
      std::istringstream fields(*text);
      std::string quota, period = "100000";
      fields >> quota >> period;
      limit = parse_limit(dir / "cpu.max", quota, period);
    } else if (where.version == 1 && fs::exists(dir / "cpu.cfs_quota_us", ec)) {
      auto quota = read_text_file(dir / "cpu.cfs_quota_us");
      if (!quota) return tl::unexpected(quota.error());
      auto period = read_text_file(dir / "cpu.cfs_period_us");
      if (!period) return tl::unexpected(period.error());
      limit = parse_limit(dir / "cpu.cfs_quota_us", *quota, *period);
    }
    if (!limit) return limit;
    if (*limit && (!tightest || **limit < *tightest)) tightest = *limit;
  }
  return tightest;
}

// What finding a controller needs: the process's /proc/self/cgroup lines
// and the cgroup mounts; nullopt when the process has no cgroup information.
struct Tables {
  std::vector<CgroupLine> lines;
  std::vector<Mount> mounts;
};

Result<std::optional<Tables>> read_tables(const fs::path& root) {
  Tables tables;
  if (auto text = read_text_file(under_root(root, "/proc/self/cgroup"))) {
    tables.lines = parse_proc_cgroup(*text);
  } else if (auto legacy = read_text_file(under_root(root, "/proc/self/cpuset"))) {
    // Kernels and captures without /proc/self/cgroup still name the cpuset
    // cgroup here; it serves for whichever hierarchy holds the controller.
    std::string path = legacy->substr(0, legacy->find('\n'));
    tables.lines = {{"cpuset", path}, {"", path}};
  } else {
    return std::optional<Tables>();
  }
  const fs::path mountinfo = under_root(root, "/proc/self/mountinfo");
  auto mount_table = read_text_file(mountinfo);
  if (!mount_table) mount_table = read_text_file(under_root(root, "/proc/mounts"));
  if (!mount_table) {
    return make_error(Error::Code::kNotFound,
                      "the process has a cgroup but neither " + mountinfo.string() +
                          " nor /proc/mounts can be read to find where it is mounted",
                      mountinfo.string());
  }
  tables.mounts = parse_cgroup_mounts(*mount_table);
  return std::optional(std::move(tables));
}

// A memory file's one number; "max" (v2) is no limit, and so is v1's
// "unlimited", a page-rounded 2^63 - 1.
Result<std::optional<std::uint64_t>> read_bytes(const fs::path& file) {
  auto text = read_text_file(file);
  if (!text) return tl::unexpected(text.error());
  std::istringstream in(*text);
  std::string word;
  in >> word;
  if (word == "max") return std::optional<std::uint64_t>();
  char* end = nullptr;
  const unsigned long long value = std::strtoull(word.c_str(), &end, 10);
  if (word.empty() || *end != '\0') {
    return make_error(Error::Code::kInvalidArgument, file.string() + ": cannot parse '" + word + "' as bytes", file.string());
  }
  if (value >= (1ULL << 62)) return std::optional<std::uint64_t>();
  return std::optional<std::uint64_t>(value);
}

// One key of memory.stat ("inactive_file 123"); 0 when absent.
Result<std::uint64_t> read_stat(const fs::path& file, std::string_view key) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return 0;
  auto text = read_text_file(file);
  if (!text) return tl::unexpected(text.error());
  for (const std::string& line : split_lines(*text)) {
    std::istringstream in(line);
    std::string name;
    std::uint64_t value = 0;
    if (in >> name >> value && name == key) return value;
  }
  return 0;
}

}  // namespace

Result<std::optional<CgroupMemory>> discover_cgroup_memory(const fs::path& root) {
  auto tables = read_tables(root);
  if (!tables) return tl::unexpected(tables.error());
  if (!*tables) return std::optional<CgroupMemory>();
  const auto where = locate(root, (*tables)->lines, (*tables)->mounts, "memory");
  if (!where) return std::optional<CgroupMemory>();
  const bool v2 = where->version == 2;
  // A parent's limit caps its children's sum: the room left is the least,
  // over every level with a limit, of its limit less its working set.
  std::optional<CgroupMemory> binding;
  CgroupMemory own{where->version, where->dir, std::nullopt, 0};
  for (const auto& dir : dirs_up(*where)) {
    std::error_code ec;
    const fs::path limit_file = dir / (v2 ? "memory.max" : "memory.limit_in_bytes");
    const fs::path usage_file = dir / (v2 ? "memory.current" : "memory.usage_in_bytes");
    if (!fs::exists(usage_file, ec)) continue;  // the v2 root has no memory.current
    auto usage = read_bytes(usage_file);
    if (!usage) return tl::unexpected(usage.error());
    auto inactive = read_stat(dir / "memory.stat", v2 ? "inactive_file" : "total_inactive_file");
    if (!inactive) return tl::unexpected(inactive.error());
    const std::uint64_t used = usage->value_or(0);
    CgroupMemory level{where->version, dir, std::nullopt, used > *inactive ? used - *inactive : 0};
    if (fs::exists(limit_file, ec)) {
      auto limit = read_bytes(limit_file);
      if (!limit) return tl::unexpected(limit.error());
      level.limit = *limit;
    }
    if (dir == where->dir) own = level;
    if (level.limit && (!binding || *level.room() < *binding->room())) binding = level;
  }
  return std::optional(binding ? *binding : own);
}

Result<std::optional<CgroupPlacement>> discover_cgroup(const fs::path& root) {
  auto tables = read_tables(root);
  if (!tables) return tl::unexpected(tables.error());
  if (!*tables) return std::optional<CgroupPlacement>();
  const auto& lines = (*tables)->lines;
  const auto& mounts = (*tables)->mounts;

  const auto cpuset = locate(root, lines, mounts, "cpuset");
  const auto cpu = locate(root, lines, mounts, "cpu");
  if (!cpuset && !cpu) return std::optional<CgroupPlacement>();

  CgroupPlacement out;
  const ControllerDir& primary = cpuset ? *cpuset : *cpu;
  out.version = primary.version;
  out.path = primary.cgroup_path;
  if (cpuset) {
    out.cpuset_dir = cpuset->dir;
    const bool v2 = cpuset->version == 2;
    auto cpus = v2 ? read_set(*cpuset, {"cpuset.cpus.effective"})
                   : read_set(*cpuset, {"cpuset.effective_cpus", "cpuset.cpus"});
    if (!cpus) return tl::unexpected(cpus.error());
    auto mems = v2 ? read_set(*cpuset, {"cpuset.mems.effective"})
                   : read_set(*cpuset, {"cpuset.effective_mems", "cpuset.mems"});
    if (!mems) return tl::unexpected(mems.error());
    out.cpus = *cpus;
    out.mems = *mems;
  }
  if (cpu) {
    auto limit = read_cpu_limit(*cpu);
    if (!limit) return tl::unexpected(limit.error());
    out.cpu_limit = *limit;
  }
  return std::optional(out);
}


}  // namespace numaserve
