#pragma once
// Publishing to the Kubernetes API server from inside the cluster: server-side
// apply (PATCH, application/apply-patch+yaml, fieldManager
// numaserve-topology-agent) of the node's NodeResourceTopology object and of
// its numaserve.io/* labels, authenticated with the pod's service-account
// token over TLS checked against the cluster CA. Transient failures (no
// answer, 429, 5xx) are retried with exponential backoff; none is fatal to
// the agent, which reports and counts them.

#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "numaserve/common/result.h"

namespace numaserve::agent::apiserver {

inline constexpr const char* kFieldManager = "numaserve-topology-agent";

struct ApiServerConfig {
  std::string url;         // "https://10.96.0.1:443"
  std::string token_file;  // read at every request: kubelet rotates projected tokens
  std::string ca_file;
  double timeout_seconds = 10;
  unsigned attempts = 4;
  double first_backoff_seconds = 0.5;  // doubled after each failed attempt
};

// In a pod: KUBERNETES_SERVICE_HOST/PORT and the service-account files.
// nullopt outside a cluster (no KUBERNETES_SERVICE_HOST).
std::optional<ApiServerConfig> in_cluster_config(
    const std::filesystem::path& service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// What the API server said when it refused: the message of the Status object
// in `body`, else the first 200 bytes of it.
std::string refusal_reason(const std::string& body);

class ApiServer {
 public:
  explicit ApiServer(ApiServerConfig config);

  Status apply_node_resource_topology(const nlohmann::json& nrt);
  Status apply_node_labels(const std::string& node_name, const std::map<std::string, std::string>& labels);

  unsigned retries() const { return retries_; }

 private:
  Status apply(const std::string& path, const nlohmann::json& object);
  ApiServerConfig config_;
  unsigned retries_ = 0;
};

}  // namespace numaserve::agent::apiserver
