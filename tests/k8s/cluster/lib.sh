# Sourced by the tests that ask a real control plane (control-plane.sh):
#   use_control_plane DIR   start one with its state in DIR; the caller's EXIT trap
#                           calls stop_control_plane, and if the caller is killed
#                           outright the control plane's watchdog stops it
#   stop_control_plane      stop it and remove DIR; safe to call when none started
#   kube ARGS...            kubectl as the cluster's admin; objects without a namespace go
#                           to $NAMESPACE (default "default"), as `helm install -n` puts them
#   as_agent ARGS...        kubectl as the topology agent (agent.kubeconfig)
#   create_nodes FILE       Node objects with their status, as kubelets register
#                           them, made schedulable (see control-plane.sh, "Nodes")
#   server_validate FILE... what the API server says of the objects: server-side
#                           apply, dry run, strict field validation (unknown and
#                           duplicate fields refused); the namespaces they name
#                           are created first. Prints "kind/name: warning" for
#                           each workload Pod Security admission would refuse
#                           pods of in its namespace
#   ROOT, CHART, HELM       the repository, its chart, the helm that renders it
CLUSTER_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$CLUSTER_DIR/../../.." && pwd)
CHART=$ROOT/charts/numaserve
HELM=$ROOT/tests/k8s/node_modules/.bin/helm
[[ -x $HELM ]] || { echo "helm missing: run scripts/install-deps.sh test" >&2; exit 1; }

use_control_plane() {
  CP_DIR=$1 KUBE_CONTEXT_NAMESPACE=
  CONTROL_PLANE_OWNER=$$ "$CLUSTER_DIR/control-plane.sh" start "$CP_DIR" >/dev/null
}
stop_control_plane() {
  [[ -n ${CP_DIR:-} ]] || return 0
  "$CLUSTER_DIR/control-plane.sh" stop "$CP_DIR"
  rm -rf "$CP_DIR"
}
# The context's namespace, unlike -n, does not refuse objects that name
# another: the chart's agent may live in a namespace of its own.
# Set only when NAMESPACE changed: one kubectl run per call, not two.
kube() {
  if [[ ${KUBE_CONTEXT_NAMESPACE:-} != "${NAMESPACE:-default}" ]]; then
    "$CP_DIR/bin/kubectl" --kubeconfig "$CP_DIR/kubeconfig" config set-context --current \
      --namespace "${NAMESPACE:-default}" >/dev/null
    KUBE_CONTEXT_NAMESPACE=${NAMESPACE:-default}
  fi
  "$CP_DIR/bin/kubectl" --kubeconfig "$CP_DIR/kubeconfig" "$@"
}
as_agent() { "$CP_DIR/bin/kubectl" --kubeconfig "$CP_DIR/agent.kubeconfig" "$@"; }

ensure_namespaces() {  # FILE...: every namespace the objects are in
  local ns
  for ns in $( (sed -n 's/^  namespace: *//p' "$@"; echo "${NAMESPACE:-default}") | tr -d '"' | sort -u); do
    kube get namespace "$ns" >/dev/null 2>&1 || kube create namespace "$ns" >/dev/null
  done
}

server_validate() {
  ensure_namespaces "$@"
  local file args=() answer
  for file in "$@"; do args+=(-f "$file"); done
  if ! answer=$(kube apply --server-side --dry-run=server --validate=strict --field-manager numaserve-tests "${args[@]}" 2>&1); then
    echo "$answer" >&2
    return 1
  fi
  # kubectl prints an object's warning just before the object's own line.
  awk '/^Warning: would violate PodSecurity/ {w = $0; next} w {print $1 ": " w; w = ""}' <<<"$answer"
}

create_nodes() {
  kube apply --server-side --force-conflicts --field-manager numaserve-tests -f "$1" >/dev/null
  kube apply --server-side --force-conflicts --field-manager numaserve-tests --subresource status -f "$1" >/dev/null
  kube taint nodes --all node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
}
