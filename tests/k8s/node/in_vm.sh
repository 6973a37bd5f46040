#!/usr/bin/env bash
# Runs inside the two-NUMA-node VM of vm_test.sh (2 nodes x 2 vCPUs, cgroup
# v2): a real node (node.sh: containerd, the kubelet registered with the
# control plane on the host), then numaserve installed on it with the real
# helm and what the kubelet did checked:
#   - a pod that no NUMA node can hold: refused by the kubelet
#     (TopologyAffinityError) when the default scheduler binds it, kept
#     Pending ("cannot align") by the topology-aware scheduler on what the
#     agent published, while one that fits is bound and admitted;
#   - the chart, with the values `numaserve-topology-agent plan -o
#     helm-values` prints on this machine: the agent's DaemonSet and one
#     service replica per NUMA node, running as containers;
#   - every replica on one NUMA node: its /placement (asked of the pod)
#     reports exactly the CPUs and memory node the kubelet's PodResources
#     gives it, >= 99% of its model pages there, /predict answered;
#   - the agent's NodeResourceTopology equal to what the kubelet allocated;
#   - a replica's pod deleted: its CPUs freed and published again, the
#     replacement on the freed NUMA node;
#   - a rolling update (helm upgrade) under /predict load: no failed request;
#   - the topology operator's ServingPool taking the fleet over (helm
#     upgrade, operator.enabled): its replicas checked as above.
# Env: WORK (vm_test.sh's folder, read-only here), NODE_NAME, API_PORT,
# AGENT (the numaserve-topology-agent binary).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../cluster/lib.sh"
source "$HERE/lib.sh"
t0=$SECONDS
step() { echo "[$((SECONDS - t0)) s] $*"; }
# Under TCG the VM's four vCPUs share one host thread, and one kubectl run
# takes ~1.7 s of it: polled every 0.5 s, kubectl alone took most of the
# machine the pods were starting on (a slow host's suite then ran past the
# VM's limit, replicas still unready after 10 minutes). Polls here wait 5 s,
# and the long waits are one `kubectl wait` on a watch.
EVENTUALLY_PAUSE=5

# The host's files are this VM's root (read-only, a tmpfs overlay on top):
# the admin kubeconfig as the VM reaches the API server replaces the host's
# in the overlay only.
CP_DIR=$WORK/cp
cp "$WORK/admin.kubeconfig" "$CP_DIR/kubeconfig"

# cgroup v2 controllers for the kubelet's pods; the node's state on a tmpfs
# (overlayfs, containerd's snapshotter, cannot use this VM's overlay root as
# an upper layer).
echo "+cpuset +cpu +io +memory +hugetlb +pids" > /sys/fs/cgroup/cgroup.subtree_control
N=/var/lib/numaserve-node
mkdir -p $N && mount -t tmpfs -o size=3g tmpfs $N
# Pods reach the API server as in a cluster, at the kubernetes Service's
# address (10.0.0.1:443): no kube-proxy runs, so one DNAT rule does its job
# for that Service; their other traffic stays in the VM.
sysctl -qw net.ipv4.ip_forward=1
iptables -t nat -A PREROUTING -d 10.0.0.1/32 -p tcp --dport 443 -j DNAT --to-destination "10.0.2.2:$API_PORT"
iptables -t nat -A POSTROUTING -s 10.244.0.0/24 -o eth0 -j MASQUERADE

export NODE_NAME KUBECONFIG_NODE=$WORK/kubelet.kubeconfig CLIENT_CA_FILE=$CP_DIR/pki/ca.crt POD_CIDR=10.244.0.0/24
trap '"$HERE/node.sh" stop $N; umount $N' EXIT
"$HERE/node.sh" start $N "$WORK/images" || { tail -20 $N/logs/kubelet.log; exit 1; }
step "containerd and the kubelet started, images imported"
eventually 120 kube wait --for condition=Ready --timeout 5s "node/$NODE_NAME" || fail "node $NODE_NAME not Ready"
step "node $NODE_NAME Ready"

podres() { "$CP_DIR/bin/podres" $N/kubelet/root/pod-resources/kubelet.sock; }
# A pod's placement by the kubelet: "cpus mems" from PodResources.
kubelet_placement() {  # namespace name container
  podres | jq -r --arg ns "$1" --arg pod "$2" --arg c "$3" '.list.pod_resources[] | select(.namespace == $ns and .name == $pod)
    | .containers[] | select(.name == $c)
    | "\(.cpu_ids | sort | map(tostring) | join(",")) \([.memory[]? | select(.memory_type == "memory") | .topology.nodes[] | .ID // 0] | unique | map(tostring) | join(","))"'
}
# 1. Three CPUs are free (CPU 0 is reserved), but not on one NUMA node.
probe_pod toobig 3 | kube apply -f - >/dev/null
reason() { kube get pod "$1" -o jsonpath='{.status.reason}'; }
if eventually 120 yields TopologyAffinityError reason toobig; then
  ok "kubelet: a 3-CPU pod refused: $(kube get pod toobig -o jsonpath='{.status.message}')"
else
  fail "the 3-CPU pod was not refused: $(kube get pod toobig -o jsonpath='{.status}')"
fi
kube delete pod toobig --wait=false >/dev/null
step "TopologyAffinityError"

# 2. The chart, as a user installs it: sized by the agent's plan on this machine.
"$AGENT" plan -o helm-values --kubelet-config $N/kubelet.yaml --podresources-socket "" > "$N/plan-values.yaml"
cat > "$N/node-values.yaml" <<EOF
image: {pullPolicy: Never}
agent:
  image: {pullPolicy: Never}
  kubeletConfig: $N/kubelet.yaml
  podResourcesDir: $N/kubelet/root/pod-resources
  hintsDir: $N/hints
  # A cycle (discovery, plan, publish) every 10 s under TCG; the kubelet's
  # changes still reach it at once (inotify on its state and socket).
  interval: 10s
EOF
NAMESPACE=ranking
kube create namespace ranking >/dev/null
"$HELM" --kubeconfig "$CP_DIR/kubeconfig" install numaserve "$CHART" -n ranking \
  -f "$N/plan-values.yaml" -f "$N/node-values.yaml" > "$N/helm.log" 2>&1 || { cat "$N/helm.log"; fail "helm install"; }
step "helm install: $(sed -n 's/^replicasPerMachine: //p' "$N/plan-values.yaml") replicas planned"
replicas=$(sed -n 's/^replicasPerMachine: //p' "$N/plan-values.yaml")
ready_replicas() { kube get deployment numaserve -o jsonpath='{.status.readyReplicas}'; }
all_ready() {  # seconds
  kube wait deployment/numaserve --for "jsonpath={.status.readyReplicas}=$replicas" --timeout "${1}s" >/dev/null 2>&1
}
all_ready 600 || fail "$(ready_replicas) of $replicas replicas ready"
step "$(ready_replicas) replicas ready"
kube get pods -A -o wide >&2

# 3. Each replica where the kubelet put it.
check_replicas() {
  local pod ip cpus mems placement
  while read -r pod ip; do
    read -r cpus mems < <(kubelet_placement ranking "$pod" numaserve)
    placement=$(curl -sf --max-time 30 "http://$ip:9090/placement") || { fail "$pod: no /placement"; continue; }
    echo "$pod: kubelet cpus=$cpus mems=$mems; /placement cpus=$(jq -r .cpus <<<"$placement") mems=$(jq -r .mems <<<"$placement")" \
      "model pages=$(jq -c '.models[0].pages_per_node' <<<"$placement") by $(jq -r '.models[0].pages_method' <<<"$placement")" \
      "local=$(jq '.models[0].local_fraction' <<<"$placement")"
    [[ $mems =~ ^[0-9]+$ ]] || fail "$pod: the kubelet gave memory of NUMA nodes '$mems', not one"
    [[ $(expand "$(jq -r .cpus <<<"$placement")") == "$cpus" ]] || fail "$pod: /placement cpus are not the kubelet's $cpus"
    [[ $(jq -r .mems <<<"$placement") == "$mems" ]] || fail "$pod: /placement mems are not the kubelet's $mems"
    jq -e --arg n "$mems" '.models[0].local_fraction >= 0.99 and (.models[0].pages_per_node | keys == [$n])' <<<"$placement" >/dev/null ||
      fail "$pod: model pages not on node $mems"
    curl -sf --max-time 30 -X POST "http://$ip:8080/predict" -d '{"user": {"id": "u1"}, "items": [{"id": "i1"}, {"id": "i2"}]}' |
      jq -e '.scores | length == 2' >/dev/null || fail "$pod: /predict"
  done < <(kube get pods -l app.kubernetes.io/component=service --field-selector status.phase=Running \
    -o jsonpath='{range .items[*]}{.metadata.name} {.status.podIP}{"\n"}{end}')
}
# The running replicas the kubelet put on NUMA node $1 (PodResources).
replicas_on() {
  local p
  for p in $(kube get pods -l app.kubernetes.io/component=service --field-selector status.phase=Running -o jsonpath='{.items[*].metadata.name}'); do
    [[ $(kubelet_placement ranking "$p" numaserve | cut -d' ' -f2) == "$1" ]] && echo "$p"
  done
}
check_replicas
step "replicas checked"

# 4. The agent's NodeResourceTopology against the kubelet's PodResources:
# per zone, available = allocatable less what the kubelet's pods hold there.
nrt_agrees() {  # prints the zones; fails on a difference
  podres > $N/podres.json || return 1
  kube get noderesourcetopologies "$NODE_NAME" -o json > $N/nrt.json 2>/dev/null || return 1
  python3 - $N/podres.json $N/nrt.json <<'PY'
import glob, json, re, sys
podres, nrt = (json.load(open(f)) for f in sys.argv[1:])
node_of = {}
for path in glob.glob("/sys/devices/system/node/node*/cpulist"):
    node = int(re.search(r"node(\d+)/", path).group(1))
    for r in open(path).read().strip().split(","):
        lo, _, hi = r.partition("-")
        node_of.update({c: node for c in range(int(lo), int(hi or lo) + 1)})
held = {}
for pod in podres["list"].get("pod_resources") or []:
    for c in pod.get("containers") or []:
        for cpu in c.get("cpu_ids") or []:
            held.setdefault(node_of[cpu], {"cpu": 0, "memory": 0})["cpu"] += 1
        for block in c.get("memory") or []:
            if block.get("memory_type") == "memory":
                for n in block["topology"]["nodes"]:
                    held.setdefault(n.get("ID", 0), {"cpu": 0, "memory": 0})["memory"] += block.get("size", 0)
def quantity(q):
    m = re.fullmatch(r"(\d+)([KMGT]i?)?", str(q))
    scale = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    return int(m.group(1)) * scale[m.group(2)]
ok = True
for zone in nrt["zones"]:
    n = int(zone["name"].removeprefix("node-"))
    line = [zone["name"]]
    for r in zone["resources"]:
        if r["name"] not in ("cpu", "memory"):
            continue
        want = quantity(r["allocatable"]) - held.get(n, {}).get(r["name"], 0)
        got = quantity(r["available"])
        line.append(f"{r['name']} available {got} (kubelet: {want})")
        ok &= got == want
    print(" ".join(line))
sys.exit(0 if ok else 1)
PY
}
if eventually 60 nrt_agrees; then
  ok "the agent's NodeResourceTopology agrees with the kubelet: $(nrt_agrees | paste -sd ';')"
else
  fail "the agent's NodeResourceTopology differs from the kubelet's allocation: $(nrt_agrees | paste -sd ';')"
fi
step "NodeResourceTopology checked"

# 5. The topology-aware scheduler, on what the agent published: a 1-CPU pod
# is bound and admitted (the one free CPU is on NUMA node 1).
NAMESPACE=default
probe_pod aligned-one 1 "schedulerName: topology-aware-scheduler" | kube apply -f - >/dev/null
running() { [[ $(kube get pod "$1" -o jsonpath='{.status.phase}') == Running ]]; }
if eventually 120 running aligned-one; then
  ok "topology-aware scheduler: a 1-CPU pod bound to $(kube get pod aligned-one -o jsonpath='{.spec.nodeName}') and admitted"
else
  fail "topology-aware scheduler: the 1-CPU pod: $(kube get pod aligned-one -o jsonpath='{.status}')"
fi
kube delete pod aligned-one --wait=true --timeout 60s >/dev/null
step "topology-aware scheduler"

# 6. A replica's pod deleted, with the node cordoned so that its
# replacement waits: the kubelet frees the pod's CPUs and memory, the agent
# publishes them again; uncordoned, the replacement lands on the freed NUMA
# node. The replica on NUMA node 0, whose only allocatable CPU it holds (CPU
# 0 is reserved): with it gone, one CPU is free on each node.
NAMESPACE=ranking
victim=$(replicas_on 0 | head -1)
[[ -n $victim ]] || fail "no replica on NUMA node 0: $(podres | jq -c '.list')"
read -r victim_cpus victim_node < <(kubelet_placement ranking "$victim" numaserve)
kube cordon "$NODE_NAME" >/dev/null
kube delete pod "$victim" --wait=true --timeout 120s >/dev/null
eventually 60 yields "" kubelet_placement ranking "$victim" numaserve || fail "PodResources still lists $victim"
if eventually 60 nrt_agrees; then
  ok "$victim deleted: CPUs $victim_cpus of node $victim_node published free again: $(nrt_agrees | paste -sd ';')"
else
  fail "$victim deleted: the NodeResourceTopology does not show its CPUs free: $(nrt_agrees | paste -sd ';')"
fi
# Now two CPUs are free, one on each NUMA node: a 2-CPU pod fits the node
# but no zone, and the topology-aware scheduler keeps it Pending (it
# tolerates the cordon, as this probe must).
NAMESPACE=default
probe_pod aligned-none 2 $'schedulerName: topology-aware-scheduler\n  tolerations: [{key: node.kubernetes.io/unschedulable, operator: Exists}]' |
  kube apply -f - >/dev/null
why() { kube get events --field-selector "involvedObject.name=$1,reason=FailedScheduling" -o jsonpath='{.items[-1:].message}' 2>/dev/null; }
eventually 60 has_output why aligned-none || true
if [[ -z $(kube get pod aligned-none -o jsonpath='{.spec.nodeName}') && $(why aligned-none) == *"cannot align"* ]]; then
  ok "topology-aware scheduler: a 2-CPU pod, one CPU free on each NUMA node, stays Pending: $(why aligned-none)"
else
  fail "topology-aware scheduler: the 2-CPU pod: node '$(kube get pod aligned-none -o jsonpath='{.spec.nodeName}')', '$(why aligned-none)'"
fi
kube delete pod aligned-none --wait=true --timeout 60s >/dev/null
NAMESPACE=ranking
kube uncordon "$NODE_NAME" >/dev/null
all_ready 600 || fail "the replacement of $victim did not become ready"
replacement=$(replicas_on "$victim_node" | grep -vx "$victim")
[[ -n $replacement ]] && ok "the replacement $replacement runs on NUMA node $victim_node, as $victim did" ||
  fail "no replica on NUMA node $victim_node after $victim was replaced"
check_replicas
step "a replica replaced, a 2-CPU pod kept Pending"

# 7. A rolling update (helm upgrade: the pods' template changes) under
# /predict load through the Service's ready pods: not one request fails.
rm -f $N/load.stop
python3 "$HERE/load.py" "$CP_DIR/kubeconfig" ranking numaserve 8080 $N/load.stop > $N/load.json 2> $N/load.err &
load=$!
sleep 5
before=$(kube get pods -l app.kubernetes.io/component=service -o jsonpath='{.items[*].metadata.name}')
"$HELM" --kubeconfig "$CP_DIR/kubeconfig" upgrade numaserve "$CHART" -n ranking --reuse-values \
  --set-string 'podAnnotations.numaserve\.io/rollout=2' > "$N/helm.log" 2>&1 || { cat "$N/helm.log"; fail "helm upgrade"; }
rolled() {
  [[ $(kube get deployment numaserve -o jsonpath='{.status.updatedReplicas} {.status.readyReplicas} {.status.replicas}') == "$replicas $replicas $replicas" ]] &&
    ! grep -qwFf <(tr ' ' '\n' <<<"$before") <(kube get pods -l app.kubernetes.io/component=service -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
}
eventually 900 rolled || fail "the rollout did not finish: $(kube get deployment numaserve -o jsonpath='{.status}')"
sleep 5
touch $N/load.stop
wait $load
jq -e '.sent > 0 and (.failures | length == 0) and (.endpoints | length) > '"$replicas" $N/load.json >/dev/null &&
  ok "rolling update under load: $(jq -c '{sent, failed: (.failures | length), endpoints: (.endpoints | length)}' $N/load.json)" ||
  fail "rolling update under load: $(cat $N/load.json) $(tail -3 $N/load.err)"
check_replicas
step "rolling update"

# 8. The topology operator over the same node: the chart upgraded with
# operator.enabled, its ServingPool replaces the chart's Deployment; the
# operator plans from the agent's NodeResourceTopology and labels, one
# Deployment for this machine's class, every replica admitted on one NUMA
# node and reporting it, the pool's status Available.
"$HELM" --kubeconfig "$CP_DIR/kubeconfig" upgrade numaserve "$CHART" -n ranking --reuse-values \
  --set operator.enabled=true --set operator.replicas=1 --set operator.image.pullPolicy=Never > "$N/helm.log" 2>&1 ||
  { cat "$N/helm.log"; fail "helm upgrade to the operator"; }
pool_field() { kube get servingpool numaserve -o jsonpath="$1"; }
pool_ready() {
  [[ $(pool_field '{.status.conditions[?(@.type=="Available")].status} {.status.conditions[?(@.type=="Progressing")].reason}') == "True AllReplicasReady" ]] &&
    [[ $(kube get deployment numaserve -o name 2>/dev/null) == "" ]]
}
if eventually 600 pool_ready; then
  ok "the operator's ServingPool: $(pool_field '{.status.classes[*].name}: {.status.classes[*].readyReplicas}/{.status.classes[*].replicas} ready, CPUs {.status.cpusUsed}/{.status.cpusAllocatable}')," \
    "Deployments: $(kube get deployments -l numaserve.io/pool=numaserve -o jsonpath='{.items[*].metadata.name}')"
else
  fail "the operator's ServingPool not ready: $(pool_field '{.status}') $(kube logs deployment/numaserve-operator --tail 20 2>&1)"
fi
[[ $(pool_field '{.status.classes[*].readyReplicas}') == "$replicas" ]] ||
  fail "the operator's replicas: $(pool_field '{.status.classes[*].readyReplicas}'), the plan's: $replicas"
# Pods the kubelet refused on the way (bound as their predecessors went):
# the operator deletes them, the ReplicaSet makes others; said, not failed.
echo "the operator's pods refused by the kubelet on the way: $(kube get pods -l numaserve.io/pool=numaserve --field-selector status.phase=Failed \
  -o jsonpath='{range .items[*]}{.status.reason}: {.status.message}{"\n"}{end}' | sort | uniq -c | paste -sd ';')"
check_replicas
step "the operator's ServingPool"

exit $((failures > 0))
