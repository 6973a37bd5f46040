#pragma once
// The operator's options: the values and the one table that declares them
// (common/options.h), as the agent's are declared in its own. The API
// server's and the endpoint's rows are the agent's very rows
// (kube::apiserver::connection_options, kube::http::endpoint_options). A library of its
// own so that the table's tests see the table the binary uses.

#include <string>

#include "apiserver/apiserver.h"
#include "controller/controller.h"
#include "numaserve/common/options.h"
#include "numaserve/common/result.h"

namespace numaserve::op::options {

// The namespace: POD_NAMESPACE, else the service account's, else "default".
std::string default_namespace();
// Its name in the Lease: POD_NAME, else host name and pid.
std::string default_identity();

struct OperatorOptions {
  kube::apiserver::Connection apiserver;
  controller::OperatorConfig config;  // apiserver, namespace and identity filled by run_config()
  LogOptions log;

  // What run_operator() takes: the API server (the pod's service account
  // unless told otherwise), the namespace and identity defaulted. An error
  // outside a pod without --apiserver-url, or for a Lease under 3 s.
  Result<controller::OperatorConfig> run_config() const;
};

OptionTable operator_table(OperatorOptions& o);

}  // namespace numaserve::op::options
