#pragma once
// The pod-set fingerprint a topology-aware scheduler compares with the pods
// it believes are on a node, to tell a fresh NodeResourceTopology from a
// stale one: the scheduler plugins' "pfp0v001" format
// (k8stopologyawareschedwg/podfingerprint).

#include <string>
#include <string_view>
#include <vector>

#include "kubelet/kubelet.h"
#include "numaserve/common/names.h"

namespace numaserve::agent::publish {

// Which pods count, as the NRT attribute nodeTopologyPodsFingerprintMethod names it.
enum class FingerprintMethod { kWithExclusiveResources, kAll };
inline constexpr auto kFingerprintMethodNames = make_names<FingerprintMethod>(
    {{FingerprintMethod::kWithExclusiveResources, "with-exclusive-resources"}, {FingerprintMethod::kAll, "all"}});
std::string_view to_string(FingerprintMethod method);

struct PodName {
  std::string pod_namespace;
  std::string name;
};

// For each pod h = XXH64(name, seed = XXH64(namespace, 0)); the h sorted as
// unsigned integers; XXH64 (seed 0) over their little-endian bytes; "pfp0v001"
// and the digest's 16 lowercase hex digits. Independent of the pods' order.
std::string pod_fingerprint(const std::vector<PodName>& pods);

// The pods the method counts, from what the kubelet listed.
std::vector<PodName> pods_counted(const std::vector<kubelet::PodAllocation>& pods, FingerprintMethod method);

}  // namespace numaserve::agent::publish
