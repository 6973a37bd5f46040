#!/usr/bin/env bash
# node.host: a real node on this machine (node.sh: containerd, runc and the
# kubelet with the static CPU Manager, the Static Memory Manager and the
# single-numa-node Topology Manager), standalone: its pods are static pods.
# What one NUMA node can show, for real:
#   - the service's Guaranteed pod (the demo image, 1 CPU) pinned
#     exclusively: its /placement, every one of its threads' affinity, the
#     kubelet's PodResources and its cpu_manager_state name the same CPU, and
#     a BestEffort pod's container runs on the other CPUs only;
#   - the topology agent reading that kubelet, both ways it can (the
#     PodResources socket; the checkpoint files alone): its
#     NodeResourceTopology's available CPUs and memory fall by the pod's and
#     come back when the pod goes, and `discover` names the pod;
#   - a pod that asks for every CPU refused: TopologyAffinityError;
#   - the teardown leaves no process, mount, cgroup or kubelet path behind.
# Usage: host_test.sh path/to/numaserve-topology-agent. Needs root.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../cluster/lib.sh"
source "$HERE/lib.sh"
AGENT=${1:?usage: host_test.sh path/to/numaserve-topology-agent}
VERSION=$(sed -n 's/^project(numaserve VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")
t0=$SECONDS
step() { echo "[$((SECONDS - t0)) s] $*"; }

work=$(mktemp -d "${TMPDIR:-/tmp}/numaserve-node-host.XXXXXX")
N=$work/node
agents=()
cleanup() {
  local pid
  for pid in "${agents[@]}"; do kill "$pid" 2>/dev/null; done
  "$HERE/node.sh" stop "$N" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# What exists before the node, for the teardown check at the end.
kubepods_before=$(ls -d /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods 2>/dev/null)
kubelet_dir_before=$([[ -e /var/lib/kubelet ]] && echo yes)

"$HERE/node.sh" images "$work/images" || exit 1
step "images ready"
# Ports of this test's own (ctest runs other tests beside it).
export KUBELET_PORT=$(free_port) KUBELET_HEALTHZ_PORT=$(free_port) NODE_NAME=numaserve-host
"$HERE/node.sh" start "$N" "$work/images" || exit 1
step "containerd and the kubelet started"
node_cpus=$(nproc --all)

kubelet_pods() { curl -sk --max-time 5 "https://127.0.0.1:$KUBELET_PORT/pods"; }
# Static pods are named NAME-NODE_NAME.
pod_status() {  # name -> "phase reason"
  kubelet_pods | jq -r --arg n "$1-$NODE_NAME" '.items[] | select(.metadata.name == $n) | "\(.status.phase) \(.status.reason // "")"'
}
pod_uid() { kubelet_pods | jq -r --arg n "$1-$NODE_NAME" '.items[] | select(.metadata.name == $n) | .metadata.uid'; }
podres() { "$N/bin/podres" "$N/kubelet/root/pod-resources/kubelet.sock"; }
podres_cpus() {  # pod container -> "1,3"
  podres | jq -r --arg n "$1-$NODE_NAME" --arg c "$2" '.list.pod_resources[]? | select(.name == $n) | .containers[]
    | select(.name == $c) | .cpu_ids // [] | sort | map(tostring) | join(",")'
}
state_cpus() {  # pod-uid container -> the cpuset cpu_manager_state gives it
  jq -r --arg u "$1" --arg c "$2" '.entries[$u][$c] // ""' "$N/kubelet/root/cpu_manager_state"
}
# The PIDs of a pod's container, by containerd's labels.
container_pids() {  # pod container
  local ctr=(ctr --address "$N/containerd.sock" --namespace k8s.io) id pid
  while read -r id pid _; do
    "${ctr[@]}" containers info "$id" | jq -e --arg p "$1-$NODE_NAME" --arg c "$2" \
      '.Labels["io.kubernetes.pod.name"] == $p and .Labels["io.kubernetes.container.name"] == $c' >/dev/null && echo "$pid"
  done < <("${ctr[@]}" tasks ls | awk 'NR > 1 && $3 == "RUNNING"')
}
# A value of the agent's NodeResourceTopology: zone resource field.
nrt() {  # hints-dir zone resource field
  python3 - "$@" <<'EOF'
import sys, yaml
path, zone, resource, field = sys.argv[1:]
nrt = yaml.safe_load(open(path + "/noderesourcetopology.yaml"))
z = next(z for z in nrt["zones"] if z["name"] == zone)
print(next(r for r in z["resources"] if r["name"] == resource)[field])
EOF
}
to_bytes() { numfmt --from=iec-i "$1" 2>/dev/null || echo "$1"; }

# The agent, both ways it reads a kubelet, the loop the DaemonSet runs.
start_agent() {  # name extra-args...
  local name=$1; shift
  "$AGENT" run --no-apiserver --listen-address 127.0.0.1 --port 0 --interval 1s --node-name "$NODE_NAME" \
    --hints-dir "$work/$name" --kubelet-config "$N/kubelet.yaml" --kubelet-state-dir "$N/kubelet/root" "$@" \
    2>"$work/$name.log" &
  agents+=($!)
}
start_agent podres --podresources-socket "$N/kubelet/root/pod-resources/kubelet.sock"
start_agent checkpoints --podresources-socket ""
# The zone's figures, as both agents publish them: "cpu-available memory-available".
published() {  # agent
  [[ -s $work/$1/noderesourcetopology.yaml ]] || return 1
  echo "$(nrt "$work/$1" node-0 cpu available) $(to_bytes "$(nrt "$work/$1" node-0 memory available)")"
}
eventually 30 published podres && eventually 30 published checkpoints || fail "the agents published no NodeResourceTopology"
cpu_allocatable=$(nrt "$work/podres" node-0 cpu allocatable)
mem_allocatable=$(to_bytes "$(nrt "$work/podres" node-0 memory allocatable)")
idle="$cpu_allocatable $mem_allocatable"
for a in podres checkpoints; do
  [[ $(published $a) == "$idle" ]] && ok "agent ($a): node-0 has $idle (CPUs, bytes) available of as many allocatable" ||
    fail "agent ($a): node-0 available '$(published $a)', not '$idle' before any pod"
done
(( cpu_allocatable == node_cpus - 1 )) || fail "agent: $cpu_allocatable CPUs allocatable, not $node_cpus less the reserved one"

# The service, as the chart runs it: Guaranteed, integer CPUs.
port=$(free_port)
cat > "$N/manifests/ranker.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: ranker, namespace: default}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 10
  securityContext: {runAsUser: 65532, runAsNonRoot: true}
  containers:
  - name: numaserve
    image: localhost/numaserve-demo:$VERSION
    imagePullPolicy: Never
    env: [{name: NUMASERVE_PORT, value: "$port"}]
    resources: {requests: {cpu: "1", memory: 1Gi}, limits: {cpu: "1", memory: 1Gi}}
    readinessProbe: {httpGet: {path: /readyz, port: $port}, periodSeconds: 1}
EOF
# And a BestEffort pod beside it: the shared pool.
cat > "$N/manifests/shared.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: shared, namespace: default}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - {name: pause, image: registry.k8s.io/pause:3.10, imagePullPolicy: Never}
EOF
eventually 180 curl -sf --max-time 2 "http://127.0.0.1:$port/readyz" ||
  fail "the service pod is not ready: $(pod_status ranker); $(grep -E '^E' "$N/logs/kubelet.log" | tail -3)"
eventually 60 has_output container_pids shared pause || fail "the BestEffort pod did not start"
step "the service pod ready"

uid=$(pod_uid ranker)
kubelet_cpus=$(podres_cpus ranker numaserve)
state=$(state_cpus "$uid" numaserve)
placement=$(curl -sf --max-time 5 "http://127.0.0.1:$port/placement")
echo "kubelet PodResources cpus=$kubelet_cpus cpu_manager_state=$state /placement=$(jq -c '{cpus, mems, workers}' <<<"$placement")"
[[ -n $kubelet_cpus && $(tr ',' '\n' <<<"$kubelet_cpus" | wc -l) == 1 ]] || fail "PodResources: the pod holds CPUs '$kubelet_cpus', not one"
[[ $(expand "$state") == "$kubelet_cpus" ]] || fail "cpu_manager_state gives the pod '$state', PodResources '$kubelet_cpus'"
[[ $(expand "$(jq -r .cpus <<<"$placement")") == "$kubelet_cpus" ]] || fail "/placement cpus are not the kubelet's $kubelet_cpus"
[[ $(jq -r '[.workers[].cpus] | unique | join(";")' <<<"$placement") == "$kubelet_cpus" ]] ||
  fail "/placement: the workers are not pinned to the kubelet's CPU $kubelet_cpus"
default_set=$(jq -r .defaultCpuSet "$N/kubelet/root/cpu_manager_state")
[[ ,$(expand "$default_set"), != *",$kubelet_cpus,"* ]] || fail "the shared pool $default_set still holds $kubelet_cpus"
# Every thread in the service's container (its cgroup's: tini and
# numaserve's) on that CPU; the BestEffort pod off it.
container_threads() {  # pid: the threads of its cgroup, v1 (cpuset) or v2
  local path
  path=$(awk -F: '$2 == "cpuset" || $2 == "" {print $3; exit}' /proc/"$1"/cgroup)
  cat /sys/fs/cgroup/cpuset"$path"/tasks 2>/dev/null || cat /sys/fs/cgroup"$path"/cgroup.threads
}
threads=0 off=0
for tid in $(container_threads "$(container_pids ranker numaserve | head -1)"); do
  threads=$((threads + 1))
  [[ $(expand "$(sed -n 's/^Cpus_allowed_list:\t//p' /proc/"$tid"/status)") == "$kubelet_cpus" ]] || off=$((off + 1))
done
((threads > 1 && off == 0)) && ok "the service pod pinned exclusively to CPU $kubelet_cpus: /placement, its $threads threads, PodResources and cpu_manager_state agree" ||
  fail "$off of the service's $threads threads may run off CPU $kubelet_cpus"
shared_cpus=$(sed -n 's/^Cpus_allowed_list:\t//p' /proc/"$(container_pids shared pause | head -1)"/status)
[[ ,$(expand "$shared_cpus"), != *",$kubelet_cpus,"* ]] && ok "the BestEffort pod runs on $shared_cpus, not on the service's CPU" ||
  fail "the BestEffort pod may run on the service's CPU: $shared_cpus"
curl -sf --max-time 10 -X POST "http://127.0.0.1:$port/predict" -d '{"user": {"id": "u1"}, "items": [{"id": "i1"}, {"id": "i2"}]}' |
  jq -e '.scores | length == 2' >/dev/null && ok "/predict answered from the pod" || fail "/predict"

# The agents see the pod: one CPU and 1 GiB fewer available on node-0.
held="$((cpu_allocatable - 1)) $((mem_allocatable - 1073741824))"
for a in podres checkpoints; do
  eventually 30 yields "$held" published $a && ok "agent ($a): node-0 has $held available with the pod" ||
    fail "agent ($a): node-0 available '$(published $a)', not '$held' with the pod"
done
discover() { "$AGENT" discover --json --kubelet-config "$N/kubelet.yaml" --kubelet-state-dir "$N/kubelet/root" "$@" 2>/dev/null; }
discover --podresources-socket "$N/kubelet/root/pod-resources/kubelet.sock" | jq -e --arg p "default/ranker-$NODE_NAME" --arg c "$kubelet_cpus" \
  '[.allocations.nodes[].held_by[] | select(.pod == $p and .container == "numaserve")] | length == 1 and .[0].cpus == $c' >/dev/null &&
  ok "discover (PodResources): the pod holds CPU $kubelet_cpus" || fail "discover (PodResources) does not name the pod's CPU $kubelet_cpus"
# The checkpoint files know pods by UID only: the CPU held, by no one named.
discover --podresources-socket "" | jq -e --arg c "$kubelet_cpus" '.allocations.nodes[0].exclusive_cpus == $c' >/dev/null &&
  ok "discover (checkpoint files): CPU $kubelet_cpus held" || fail "discover (checkpoint files): CPU $kubelet_cpus not held"


# Every CPU asked for: no NUMA node (there is one) can give them.
probe_pod toobig "$node_cpus" "hostNetwork: true" > "$N/manifests/toobig.yaml"
eventually 60 yields "Failed TopologyAffinityError" pod_status toobig && ok "a $node_cpus-CPU pod refused: TopologyAffinityError" ||
  fail "the $node_cpus-CPU pod: '$(pod_status toobig)', not refused with TopologyAffinityError"
rm -f "$N/manifests/toobig.yaml"

# The service pod goes: its CPU and memory come back, to the kubelet and to the agents.
rm -f "$N/manifests/ranker.yaml"
eventually 60 yields "" podres_cpus ranker numaserve || fail "PodResources still lists the service pod"
# The kubelet removes the pod's directory; its managers' checkpoint entries
# may outlive the pod (the Memory Manager's until it next admits one), which
# the agent reading them alone must see through.
eventually 60 test ! -e "$N/kubelet/root/pods/$uid" || fail "the kubelet kept the ended pod's directory"
echo "after the pod: cpu_manager_state entry '$(state_cpus "$uid" numaserve)'," \
  "memory_manager_state entry $(jq -c --arg u "$uid" '.entries[$u] // "none"' "$N/kubelet/root/memory_manager_state")"
for a in podres checkpoints; do
  eventually 30 yields "$idle" published $a && ok "agent ($a): node-0 has $idle available again once the pod is gone" ||
    fail "agent ($a): node-0 available '$(published $a)', not '$idle' after the pod"
done
step "pods came and went"

# The teardown: nothing of the node left.
kill "${agents[@]}" 2>/dev/null; wait "${agents[@]}" 2>/dev/null; agents=()
"$HERE/node.sh" stop "$N"
step "node stopped"
before=$failures
left=$(pgrep -af "$N" | grep -v -e host_test.sh -e pgrep)
[[ -z $left ]] || fail "processes left: $left"
! grep -q " $N" /proc/self/mounts || fail "mounts left under $N: $(grep " $N" /proc/self/mounts | head -3)"
[[ $(ls -d /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods 2>/dev/null) == "$kubepods_before" ]] || fail "kubepods cgroups left"
[[ -n $kubelet_dir_before || ! -e /var/lib/kubelet ]] || fail "/var/lib/kubelet left"
((failures == before)) && ok "the node's teardown left nothing behind"
exit $((failures > 0))
