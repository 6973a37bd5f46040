#pragma once
// A set of CPU (or NUMA node) ids, in the two text forms the kernel uses:
// the list form of cpulist/cpuset.cpus files ("0-3,8,10-11") and the
// comma-separated 32-bit hex mask form of cpumap/Cpus_allowed ("ff,00000001").
// Memory nodes use the same forms (cpuset.mems, Mems_allowed_list), hence
// the NodeSet alias.

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "numaserve/common/result.h"

namespace numaserve {

class CpuSet {
 public:
  // The largest id accepted by the parsers. The kernel's own limit
  // (CONFIG_NR_CPUS) is 8192 on Debian; the margin keeps a typo such as
  // "0-4294967295" from allocating gigabytes.
  static constexpr unsigned kMaxId = (1u << 16) - 1;

  CpuSet() = default;
  CpuSet(std::initializer_list<unsigned> ids);

  // "0-3,8" with optional surrounding whitespace; "" and "\n" are the empty set.
  static Result<CpuSet> parse_list(std::string_view text);
  // "ff,00000001" (kernel) or "0xff,0x00000001" (hwloc); words are 32 bits,
  // most significant first.
  static Result<CpuSet> parse_mask(std::string_view text);
  static CpuSet range(unsigned first, unsigned last);  // inclusive

  // Canonical list form: ascending, ranges merged ("0-3,8"); "" when empty.
  std::string to_list() const;
  // Kernel mask form, 8 hex digits per 32-bit word ("00000003" for {0,1}).
  std::string to_mask() const;

  void insert(unsigned id);
  void erase(unsigned id);
  bool contains(unsigned id) const;
  bool empty() const;
  std::size_t count() const;
  std::vector<unsigned> ids() const;
  // The smallest id; only meaningful when !empty().
  unsigned first() const;

  bool is_subset_of(const CpuSet& other) const;
  bool intersects(const CpuSet& other) const;

  CpuSet operator|(const CpuSet& other) const;
  CpuSet operator&(const CpuSet& other) const;
  CpuSet operator-(const CpuSet& other) const;
  CpuSet& operator|=(const CpuSet& other);
  CpuSet& operator&=(const CpuSet& other);
  CpuSet& operator-=(const CpuSet& other);
  bool operator==(const CpuSet& other) const;

 private:
  void trim();
  std::vector<std::uint64_t> words_;  // bit i of word w is id 64*w+i; no trailing zero words
};

using NodeSet = CpuSet;

// List form, so logs and test failures read "0-3,8".
std::ostream& operator<<(std::ostream& out, const CpuSet& set);

}  // namespace numaserve
