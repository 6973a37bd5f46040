#include "podresources/podresources.h"

#include <grpcpp/grpcpp.h>

#include <thread>

#include "podresources.grpc.pb.h"

namespace numaserve::agent::podresources {
namespace {

using kubelet::Allocatable;
using kubelet::MemoryBlock;

// An id from the wire as a CPU or NUMA node number; `what` names where it
// came from in the error.
Result<unsigned> id_of(std::int64_t id, const std::string& what) {
  if (id < 0 || id > CpuSet::kMaxId) {
    return make_error(Error::Code::kInvalidArgument, what + ": id " + std::to_string(id) + " is out of range",
                      "cpu_ids");
  }
  return static_cast<unsigned>(id);
}

Result<CpuSet> cpus_of(const google::protobuf::RepeatedField<std::int64_t>& ids, const std::string& what) {
  CpuSet cpus;
  for (std::int64_t id : ids) {
    auto cpu = id_of(id, what);
    if (!cpu) return tl::unexpected(cpu.error());
    cpus.insert(*cpu);
  }
  return cpus;
}

Result<std::vector<MemoryBlock>> memory_of(const google::protobuf::RepeatedPtrField<v1::ContainerMemory>& blocks,
                                           const std::string& what) {
  std::vector<MemoryBlock> out;
  for (const auto& block : blocks) {
    MemoryBlock m{block.memory_type(), block.size(), {}};
    for (const auto& node : block.topology().nodes()) {
      auto id = id_of(node.id(), what + " memory " + block.memory_type());
      if (!id) return tl::unexpected(id.error());
      m.nodes.insert(*id);
    }
    out.push_back(std::move(m));
  }
  return out;
}

// One unary call with a deadline, retried with doubling backoff.
template <typename Request, typename Response, typename Call>
Status call_with_retries(const ClientConfig& config, const char* name, Call call, Response& response,
                         QueryStats* stats) {
  grpc::Status status;
  auto backoff = config.backoff;
  for (unsigned attempt = 1; attempt <= std::max(1u, config.attempts); ++attempt) {
    if (attempt > 1) {
      if (stats) ++stats->retries;
      std::this_thread::sleep_for(backoff);
      backoff *= 2;
    }
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + config.deadline);
    Request request;
    status = call(&context, request, &response);
    if (status.ok()) return {};
  }
  return make_error(Error::Code::kUnavailable,
                    "PodResources " + std::string(name) + " on " + config.socket.string() + ": " +
                        (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ? "no answer within " +
                             std::to_string(config.deadline.count()) + " ms"
                                                                                  : status.error_message()) +
                        " (after " + std::to_string(std::max(1u, config.attempts)) + " attempt(s))");
}

// The answers as kubelet::Allocations; ids checked on the way.
Result<kubelet::Allocations> convert(const v1::AllocatableResourcesResponse& allocatable_response,
                                     const v1::ListPodResourcesResponse& list_response, std::string source) {
  Allocatable allocatable;
  auto cpus = cpus_of(allocatable_response.cpu_ids(), "GetAllocatableResources");
  if (!cpus) return tl::unexpected(cpus.error());
  allocatable.cpus = std::move(*cpus);
  auto memory = memory_of(allocatable_response.memory(), "GetAllocatableResources");
  if (!memory) return tl::unexpected(memory.error());
  allocatable.memory = std::move(*memory);

  std::vector<kubelet::PodAllocation> pods;
  for (const auto& pod : list_response.pod_resources()) {
    kubelet::PodAllocation p{pod.namespace_(), pod.name(), {}};
    for (const auto& container : pod.containers()) {
      const std::string what = "pod " + p.pod_namespace + "/" + p.name + " container " + container.name();
      kubelet::ContainerAllocation c{container.name(), {}, {}, 0};
      auto held = cpus_of(container.cpu_ids(), what);
      if (!held) return tl::unexpected(held.error());
      c.cpus = std::move(*held);
      auto pinned = memory_of(container.memory(), what);
      if (!pinned) return tl::unexpected(pinned.error());
      c.memory = std::move(*pinned);
      for (const auto& devices : container.devices()) c.devices += static_cast<std::size_t>(devices.device_ids_size());
      p.containers.push_back(std::move(c));
    }
    pods.push_back(std::move(p));
  }
  return kubelet::allocations_of_pods(std::move(source), std::move(allocatable), std::move(pods));
}

}  // namespace

Result<kubelet::Allocations> decode(std::string_view allocatable, std::string_view list, std::string source) {
  v1::AllocatableResourcesResponse allocatable_response;
  if (!allocatable_response.ParseFromArray(allocatable.data(), static_cast<int>(allocatable.size()))) {
    return make_error(Error::Code::kInvalidArgument, source + ": not an AllocatableResourcesResponse");
  }
  v1::ListPodResourcesResponse list_response;
  if (!list_response.ParseFromArray(list.data(), static_cast<int>(list.size()))) {
    return make_error(Error::Code::kInvalidArgument, source + ": not a ListPodResourcesResponse");
  }
  return convert(allocatable_response, list_response, std::move(source));
}

Result<kubelet::Allocations> query(const ClientConfig& config, QueryStats* stats) {
  // The kubelet's socket is local and unauthenticated, as the kubelet serves it.
  auto channel = grpc::CreateChannel("unix://" + std::filesystem::absolute(config.socket).string(),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::PodResourcesLister::NewStub(channel);

  v1::AllocatableResourcesResponse allocatable_response;
  if (auto ok = call_with_retries<v1::AllocatableResourcesRequest>(
          config, "GetAllocatableResources",
          [&](grpc::ClientContext* c, const auto& req, auto* resp) { return stub->GetAllocatableResources(c, req, resp); },
          allocatable_response, stats);
      !ok) {
    return tl::unexpected(ok.error());
  }
  v1::ListPodResourcesResponse list_response;
  if (auto ok = call_with_retries<v1::ListPodResourcesRequest>(
          config, "List", [&](grpc::ClientContext* c, const auto& req, auto* resp) { return stub->List(c, req, resp); },
          list_response, stats);
      !ok) {
    return tl::unexpected(ok.error());
  }

  return convert(allocatable_response, list_response, "podresources " + config.socket.string());
}

}  // namespace numaserve::agent::podresources
