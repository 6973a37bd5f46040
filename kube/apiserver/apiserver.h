#pragma once
// The Kubernetes API server from inside the cluster, authenticated with the
// pod's service-account token over TLS checked against the cluster CA: the
// agent's server-side apply (PATCH, application/apply-patch+yaml, fieldManager
// numaserve-topology-agent) of its node's NodeResourceTopology and
// numaserve.io/* labels, and the operator's reads, applies and deletes.
// Transient failures (no answer, 429, 5xx) are retried with exponential
// backoff; none is fatal to the caller, which reports and counts them.

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "numaserve/common/options.h"
#include "numaserve/common/result.h"

namespace numaserve::kube::apiserver {

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

// Where the API server is, as the options say: the pod's service account
// unless told otherwise. The agent's `run` and the operator take the same rows.
struct Connection {
  std::string url;
  std::string ca_file;
  std::string token_file;
  // The pod's service account, with what the options override; nullopt
  // outside a cluster when no URL was given.
  std::optional<ApiServerConfig> config() const;
};
std::vector<OptionSpec> connection_options(Connection& c);

// What the API server said when it refused: the message of the Status object
// in `body`, else the first 200 bytes of it.
std::string refusal_reason(const std::string& body);

// An answer of the API server that was not transient: its status and body
// (parsed: null when it sent none or not JSON; and as sent).
struct Reply {
  int status = 0;
  nlohmann::json body;
  std::string text;
  bool ok() const { return status >= 200 && status < 300; }
  // "HTTP 409: <the Status object's message>"
  std::string reason() const;
};

class ApiServer {
 public:
  explicit ApiServer(ApiServerConfig config, std::string field_manager = kFieldManager);

  // The agent's two objects.
  Status apply_node_resource_topology(const nlohmann::json& nrt);
  Status apply_node_labels(const std::string& node_name, const std::map<std::string, std::string>& labels);

  // One request each, retried with backoff while the answer is transient (no
  // answer, 429, 5xx); any other answer is the Reply, for the caller to judge
  // (a 404 or a 409 is news, not a fault). Paths are the API's, with query.
  Result<Reply> get(const std::string& path);
  // Server-side apply as this field manager, forcing conflicts: the object's
  // fields it sends are its own, whoever wrote them last.
  Result<Reply> apply(const std::string& path, const nlohmann::json& object);
  Result<Reply> create(const std::string& collection_path, const nlohmann::json& object);
  // PUT: refused with 409 unless metadata.resourceVersion is still current.
  Result<Reply> replace(const std::string& path, const nlohmann::json& object);
  Result<Reply> remove(const std::string& path);

  unsigned retries() const { return retries_; }

 private:
  Status expect_ok(Result<Reply> reply, const std::string& path);
  Result<Reply> send(const std::string& method, const std::string& path, const std::string& body,
                     const std::string& content_type);
  ApiServerConfig config_;
  std::string field_manager_;
  unsigned retries_ = 0;
};

}  // namespace numaserve::kube::apiserver
