#include "publish/fingerprint.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace numaserve::agent::publish {

std::string_view to_string(FingerprintMethod method) { return kFingerprintMethodNames.name(method); }

std::string pod_fingerprint(const std::vector<PodName>& pods) {
  std::vector<std::uint64_t> hashes;
  hashes.reserve(pods.size());
  for (const auto& pod : pods) {
    const XXH64_hash_t seed = XXH64(pod.pod_namespace.data(), pod.pod_namespace.size(), 0);
    hashes.push_back(XXH64(pod.name.data(), pod.name.size(), seed));
  }
  std::sort(hashes.begin(), hashes.end());
  std::vector<unsigned char> bytes;
  bytes.reserve(hashes.size() * 8);
  for (std::uint64_t h : hashes) {
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<unsigned char>(h >> (8 * i)));
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH64(bytes.data(), bytes.size(), 0)));
  return std::string("pfp0v001") + hex;
}

std::vector<PodName> pods_counted(const std::vector<kubelet::PodAllocation>& pods, FingerprintMethod method) {
  std::vector<PodName> out;
  for (const auto& pod : pods) {
    if (method == FingerprintMethod::kAll || pod.exclusive()) out.push_back({pod.pod_namespace, pod.name});
  }
  return out;
}

}  // namespace numaserve::agent::publish
