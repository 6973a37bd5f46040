#pragma once
// The kubelet's PodResources API (gRPC over its unix socket): what the
// kubelet can allocate and what each pod's containers hold, the way
// node-feature-discovery's topology-updater learns them. The only place the
// agent speaks gRPC; the generated code stays behind this header.

#include <chrono>
#include <cstdint>
#include <filesystem>

#include "kubelet/kubelet.h"
#include "numaserve/common/result.h"

namespace numaserve::agent::podresources {

inline constexpr const char* kDefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock";

struct ClientConfig {
  std::filesystem::path socket = kDefaultSocket;
  std::chrono::milliseconds deadline{2000};  // per call
  unsigned attempts = 3;                     // per call, the first included
  std::chrono::milliseconds backoff{100};    // before the second attempt; doubles after each
};

struct QueryStats {
  std::uint64_t retries = 0;
};

// GetAllocatableResources, then List. Errors name the socket, the call and
// the gRPC status after the last attempt; ids that cannot be CPU or NUMA
// node numbers are refused naming the pod and container.
Result<kubelet::Allocations> query(const ClientConfig& config, QueryStats* stats = nullptr);

// The two answers as bytes on the wire (AllocatableResourcesResponse, then
// ListPodResourcesResponse), decoded as query() decodes them; `source` names
// where they came from. For the fuzz target and for tests without a socket.
Result<kubelet::Allocations> decode(std::string_view allocatable, std::string_view list, std::string source);

}  // namespace numaserve::agent::podresources
