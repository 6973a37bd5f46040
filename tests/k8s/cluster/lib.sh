# Sourced by the tests that ask a real control plane (control-plane.sh):
#   use_control_plane DIR   start one with its state in DIR; the caller's EXIT trap
#                           calls stop_control_plane, and if the caller is killed
#                           outright the control plane's watchdog stops it
#   stop_control_plane      stop it and remove DIR; safe to call when none started
#   kube ARGS...            kubectl as the cluster's admin; objects without a namespace go
#                           to $NAMESPACE (default "default"), as `helm install -n` puts them
#   as_agent ARGS...        kubectl as the topology agent (agent.kubeconfig)
#   create_nodes FILE       Node objects with their status, as kubelets register
#                           them, made schedulable (see control-plane.sh, "Nodes");
#                           other objects in FILE (their NRTs) applied as they are
#   server_validate FILE... what the API server says of the objects: server-side
#                           apply, dry run, strict field validation (unknown and
#                           duplicate fields refused); the namespaces they name
#                           are created first. Prints "kind/name: warning" for
#                           each workload Pod Security admission would refuse
#                           pods of in its namespace
#   gateway_api             the Gateway API's standard CRDs installed (HTTPRoute...)
#   ROOT, CHART, HELM       the repository, its chart, the helm that renders it
#   ok / fail MESSAGE       a check's result; fail counts into $failures
#   eventually SECONDS CMD  polls CMD until it succeeds or the seconds run out, every
#                           $EVENTUALLY_PAUSE seconds (default 0.5)
CLUSTER_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$CLUSTER_DIR/../../.." && pwd)
CHART=$ROOT/charts/numaserve
HELM=$ROOT/tests/k8s/node_modules/.bin/helm
[[ -x $HELM ]] || { echo "helm missing: run scripts/install-deps.sh test" >&2; exit 1; }

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
ok() { echo "ok $*"; }
eventually() {  # seconds command...
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do ((SECONDS < deadline)) || return 1; sleep "${EVENTUALLY_PAUSE:-0.5}"; done
}

# A CRD just applied, Established. kubectl wait fails at once, rather than
# waiting, while the object has no status.conditions yet ("accessor error:
# <nil> is of the type <nil>"): a read that comes right after the apply.
established() {  # crd/NAME
  eventually 30 kube wait --for condition=Established --timeout 5s "$1"
}

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
gateway_api() {
  local files
  files=$("$CLUSTER_DIR/control-plane.sh" gateway-api-crds) || return 1
  for f in $files; do kube apply --server-side -f "$f" >/dev/null || return 1; done
  established crd/httproutes.gateway.networking.k8s.io
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
  # The status of the Nodes only (other objects in the file, such as their
  # NodeResourceTopology, have no status subresource).
  awk 'BEGIN {RS = "\n---\n"; ORS = "\n---\n"} /(^|\n)kind: Node(\n|$)|"kind":"Node"/' "$1" |
    kube apply --server-side --force-conflicts --field-manager numaserve-tests --subresource status -f - >/dev/null
  kube taint nodes --all node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
}

# A mixed fleet, machine by machine, as the agents and kubelets of
# $AGENT's plan for them would register it (FLEET_KUBELET: the kubelet
# flags the plan reads).
#   E5, GOLD                two machine generations: Xeon E5 (56 threads,
#                           NUMA nodes of 28) and Xeon Gold (96 threads, of 48)
#   fleet_node NAME FLAGS.. its NodeResourceTopology and its Node (labels,
#                           allocatable: the plan's rooms summed), as YAML
#   class_mismatches NS SEL the pods not on a node of their machine class
#   kubelet_admit           the kubelet's own admission of every bound pod, node
#                           by node (kubelet-admit/main.go): JSON
#   admission SUMMARY-JS    a line from kubelet_admit's JSON: SUMMARY-JS is a JS
#                           expression of `r` (the reports) printed as it is
E5=(--synthetic "pack:2 numa:1(memory=128GiB) core:14 pu:2") GOLD=(--synthetic "pack:2 numa:1(memory=192GiB) core:24 pu:2")
FLEET_KUBELET=(--kubelet-config "$ROOT/tests/fixtures/kubelet/numa-ready/config.yaml")
fleet_node() {  # name agent-source-flags...: its NodeResourceTopology and its Node
  local name=$1; shift
  "$AGENT" plan -o nrt --node-name "$name" "$@" "${FLEET_KUBELET[@]}"
  echo ---
  "$AGENT" plan -o json "$@" "${FLEET_KUBELET[@]}" | node -e '
    const plan = JSON.parse(require("fs").readFileSync(0, "utf8")), [name, ...labels] = process.argv.slice(1);
    const sum = (f) => plan.nodes.reduce((n, z) => n + z[f], 0);
    const cpus = plan.nodes.reduce((n, z) => n + z.cpus.split(",").map((r) => r.split("-").map(Number))
      .reduce((m, [a, b = a]) => m + b - a + 1, 0), 0);
    console.log(JSON.stringify({apiVersion: "v1", kind: "Node",
      metadata: {name, labels: Object.fromEntries([["kubernetes.io/hostname", name], ...labels.map((l) => l.split("="))])},
      status: {capacity: {cpu: String(cpus), memory: String(sum("memory_bytes")), pods: "110"},
               allocatable: {cpu: String(sum("allocatable_cpu_count")), memory: String(sum("allocatable_memory_bytes")), pods: "110"},
               conditions: [{type: "Ready", status: "True", reason: "KubeletReady", message: "kubelet is posting ready status"}]}}));
  ' "$name" $("$AGENT" plan -o labels "$@" "${FLEET_KUBELET[@]}")
  echo ---
}
class_mismatches() {  # namespace selector
  local nodes; nodes=$(kube get nodes -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.labels.numaserve\.io/machine-class}{"\n"}{end}')
  kube -n "$1" get pods -l "$2" -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName} {.metadata.labels.numaserve\.io/machine-class}{"\n"}{end}' |
    awk -v nodes="$nodes" 'BEGIN {n = split(nodes, l, "\n"); for (i = 1; i <= n; i++) {split(l[i], kv, "="); class[kv[1]] = kv[2]}}
      $2 != "" && class[$2] != $3 {print $1 " (class " $3 ") on " $2 " (class " class[$2] ")"}'
}
kubelet_admit() { kube get nodes,noderesourcetopologies,pods -A -o json | "$CP_DIR/bin/kubelet-admit"; }
admission() { kubelet_admit | node -e "const r = JSON.parse(require('fs').readFileSync(0, 'utf8')); console.log($1)"; }
