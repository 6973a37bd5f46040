#!/usr/bin/env bash
# control-plane.sh itself: `start` gives an API server that answers with the
# identities it wrote and schedulers that bind, within seconds; `stop` ends
# every process it started; and a test killed outright (SIGKILL, as a
# timeout kills) takes its control plane with it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
out=$(mktemp -d); trap 'stop_control_plane; rm -rf "$out"' EXIT
running() { "$CLUSTER_DIR/control-plane.sh" running "$1"; }

started=$SECONDS
use_control_plane "$out/cluster"
echo "started in $((SECONDS - started)) s: $(cat "$CP_DIR/url")"
[[ $(kube auth whoami -o jsonpath='{.status.userInfo.groups}') == *system:masters* ]] || fail "kubeconfig is not the admin"
[[ $(as_agent auth whoami -o jsonpath='{.status.userInfo.extra.authentication\.kubernetes\.io/node-name[0]}') == worker-1 ]] ||
  fail "agent.kubeconfig's token does not carry the agent's node"
[[ $("$CP_DIR/bin/kubectl" --kubeconfig "$CP_DIR/operator.kubeconfig" auth whoami -o jsonpath='{.status.userInfo.username}') == \
   system:serviceaccount:numaserve:numaserve-operator ]] || fail "operator.kubeconfig is not the operator's account"
[[ $(kube version -o json | grep -c '"gitVersion": "v1.34') == 2 ]] || fail "client and server are not the pinned release"
# Both schedulers bind a pod to the one schedulable node.
cat > "$out/node.yaml" <<'YAML'
apiVersion: v1
kind: Node
metadata: {name: worker-1, labels: {kubernetes.io/hostname: worker-1}}
status:
  capacity: {cpu: "4", memory: 8Gi, pods: "10"}
  allocatable: {cpu: "4", memory: 8Gi, pods: "10"}
  conditions: [{type: Ready, status: "True", reason: KubeletReady, message: ready}]
YAML
create_nodes "$out/node.yaml"
for scheduler in default-scheduler topology-aware-scheduler; do
  kube apply --server-side -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $scheduler}
spec:
  schedulerName: $scheduler
  containers: [{name: c, image: x, resources: {requests: {cpu: "1"}}}]
YAML
  for _ in $(seq 60); do [[ -n $(kube get pod "$scheduler" -o jsonpath='{.spec.nodeName}') ]] && break; sleep 0.5; done
  [[ $(kube get pod "$scheduler" -o jsonpath='{.spec.nodeName}') == worker-1 ]] && echo "ok $scheduler binds" ||
    fail "$scheduler did not bind its pod"
done
cp "$CP_DIR/pids" "$out/pids"
stop_control_plane; CP_DIR=
[[ -z $(running "$out/pids") ]] && echo "ok stop ends every process" || fail "left running after stop: $(running "$out/pids")"

# A test killed outright: its control plane follows within seconds.
bash -c 'source "$1/lib.sh"; use_control_plane "$2"; cp "$2/pids" "$3"; kill -KILL $$' owner "$HERE" "$out/killed" "$out/killed-pids" || true
for _ in $(seq 40); do [[ -z $(running "$out/killed-pids") ]] && break; sleep 0.5; done
[[ -z $(running "$out/killed-pids") ]] && echo "ok a killed owner's control plane stops" ||
  fail "left running after its owner was killed: $(running "$out/killed-pids")"
rm -rf "$out/killed"

if ((failures)); then echo "$failures failure(s)" >&2; exit 1; fi
echo "control plane checks passed"
