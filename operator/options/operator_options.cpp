#include "options/operator_options.h"

#include <unistd.h>

#include <cstdlib>

#include "numaserve/common/placement.h"
#include "numaserve/common/text_file.h"

namespace numaserve::op::options {

std::string default_namespace() {
  if (const char* ns = std::getenv("POD_NAMESPACE"); ns != nullptr && *ns != '\0') return ns;
  auto file = read_text_file("/var/run/secrets/kubernetes.io/serviceaccount/namespace");
  return file && !file->empty() ? *file : "default";
}

std::string default_identity() {
  if (const char* name = std::getenv("POD_NAME"); name != nullptr && *name != '\0') return name;
  return host_name() + "_" + std::to_string(::getpid());
}

Result<controller::OperatorConfig> OperatorOptions::run_config() const {
  controller::OperatorConfig out = config;
  auto api = apiserver.config();
  if (!api) return make_error(Error::Code::kInvalidArgument, "no API server (not in a pod; pass --apiserver-url)", "apiserver_url");
  if (out.lease.count() < 3) return make_error(Error::Code::kInvalidArgument, "--lease-duration: want at least 3s", "lease_duration");
  out.apiserver = *api;
  // Read only when running: no other subcommand reads the service account.
  if (out.namespace_name.empty()) out.namespace_name = default_namespace();
  if (out.identity.empty()) out.identity = default_identity();
  return out;
}

OptionTable operator_table(OperatorOptions& o) {
  auto& c = o.config;
  std::vector<OptionSpec> rows = {
      without_default(text_option("namespace", "NS",
                                  "The namespace of its ServingPools, their Deployments and its Lease (POD_NAMESPACE; "
                                  "default the service account's)",
                                  c.namespace_name)),
      without_default(text_option("identity", "NAME", "Its name in the Lease (POD_NAME; default host name and pid)",
                                  c.identity)),
      text_option("lease_name", "NAME", "The coordination.k8s.io Lease its replicas elect a leader by", c.lease_name),
      duration_option("resync_interval", "Plan and reconcile every pool this often", c.resync),
      duration_option("lease_duration", "How long a leader's Lease holds without renewal", c.lease)};
  for (auto& row : kube::http::endpoint_options(c.endpoint)) rows.push_back(std::move(row));
  for (auto& row : kube::apiserver::connection_options(o.apiserver)) rows.push_back(std::move(row));
  for (auto& row : log_options(o.log)) rows.push_back(std::move(row));
  return OptionTable(std::move(rows));
}

}  // namespace numaserve::op::options
