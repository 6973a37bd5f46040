#!/usr/bin/env bash
# The deployment asked of a real Kubernetes control plane (tests/k8s/cluster:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the
# topology-aware scheduler, built from their Go modules), not of a model of it:
#   1. the agent's API-server client: server-side apply of its node's labels
#      and NodeResourceTopology, refused while its RBAC is missing and applied
#      once it exists, unchanged objects not sent again;
#   2. the chart's ValidatingAdmissionPolicy, enforced by the API server on
#      the agent's own bound token (the node-name claim is the API server's);
#   3. RBAC: the agent's ClusterRole allows what it does and nothing else;
#   4. scheduling: the 2-socket example's 8 replicas on four planned workers,
#      bound by kube-scheduler, 2 per worker, none elsewhere; the old spread
#      rule caught;
#   5. the topology-aware scheduler: replicas bound by NodeResourceTopologyMatch
#      from the agents' objects, and one that fits no NUMA zone left Pending,
#      its events saying why;
#   6. a mixed fleet (two machine generations and the workers): cluster-plan
#      -o helm-values, per-class and uniform, gives one Deployment per class
#      whose replicas are all bound on that class's nodes; the one-size chart
#      leaves most Pending;
#   7. the kubelet's own admission (cluster/kubelet-admit: its Topology, CPU
#      and Memory Managers) of what was bound: every per-class replica
#      admitted, the 16-CPU pod refused (TopologyAffinityError), the CPUs the
#      one-size chart leaves idle.
# What stands in for the kubelet (none runs): Node objects with a kubelet's
# status (clusters/four-workers.yaml), made schedulable as the node lifecycle
# controller would; pods are bound, never run; a pod removed is force-deleted,
# as the kubelet's final status would let it go; the agent runs here, as its
# DaemonSet pod would, with that pod's bound token.
# Usage: cluster_test.sh AGENT FIXTURES_DIR
set -euo pipefail
AGENT=$1 FIXTURES=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/cluster/lib.sh"
out=$(mktemp -d)
agent_pid=
trap '[[ -n $agent_pid ]] && kill "$agent_pid" 2>/dev/null; stop_control_plane; rm -rf "$out"' EXIT
use_control_plane "$out/cluster"
export NAMESPACE=numaserve  # the release's, and the agent's (control-plane.sh's defaults)

# The workers' machine, its kubelet set up as planned (the Topology
# Manager's policy goes into the NRT's attributes); no pods yet.
machine=(--xml "$FIXTURES/topologies/xml/32em64t-2n8c2t-pci-normalio.xml" --kubelet-config "$FIXTURES/kubelet/numa-ready/config.yaml")

echo "== the agent's client, before and after its RBAC exists"
# The chart (release numaserve, as the control plane's accounts are named),
# with the 2-socket example: its objects first, the agent's RBAC held back.
"$HELM" template numaserve "$CHART" --namespace numaserve -f "$CHART/examples/two-socket.yaml" > "$out/release.yaml"
metric() {  # name: the agent's counter, summed over its labels
  curl -fsS "http://127.0.0.1:$agent_port/metrics" | awk -v n="$1" '$1 == n || index($1, n "{") == 1 {s += $2} END {print s + 0}'
}
cycles() { sed -n 's/.*msg=cycle .*cycles=\([0-9]*\).*/\1/p' "$out/agent.log" | tail -1; }
next_cycle() {  # waits for the cycle after the current one
  local before; before=$(cycles)
  kill -HUP "$agent_pid"
  eventually 20 cycled_past "$before"
}
cycled_past() { [[ $(cycles) -gt $1 ]]; }
NUMASERVE_INTERVAL=1h "$AGENT" run "${machine[@]}" --node-name worker-1 --hints-dir "$out/hints" \
  --listen-address 127.0.0.1 --port 0 --apiserver-url "$(cat "$CP_DIR/url")" --apiserver-ca-file "$CP_DIR/ca.crt" \
  --apiserver-token-file "$CP_DIR/agent.token" 2>"$out/agent.log" &
agent_pid=$!
eventually 20 grep -q 'msg=cycle' "$out/agent.log" || fail "the agent ran no cycle: $(tail -3 "$out/agent.log")"
agent_port=$(sed -n 's/.*msg=listening .* port=\([0-9]*\).*/\1/p' "$out/agent.log")
if [[ $(metric numaserve_agent_failures_total) -ge 2 ]] && grep -q 'forbidden' "$out/agent.log"; then
  ok "without its ClusterRole the agent's applies are refused, counted and logged"
else
  fail "the agent's applies were not refused without RBAC: $(grep -m2 'apiserver' "$out/agent.log")"
fi
kube apply --server-side -f "$out/release.yaml" >/dev/null
next_cycle || fail "no cycle after SIGHUP"
nrt_version() { kube get noderesourcetopology worker-1 -o jsonpath='{.metadata.resourceVersion}'; }
if grep -q 'msg=cycle ok=true' <(tail -1 "$out/agent.log") && nrt_version >/dev/null 2>&1 &&
   [[ $(kube get node worker-1 -o jsonpath='{.metadata.labels.numaserve\.io/replicas}') == 2 ]]; then
  ok "with its RBAC the refused objects are applied on the next cycle: the NRT and the node's labels"
else
  fail "the agent did not apply after its RBAC appeared: $(tail -2 "$out/agent.log")"
fi
applied_by_agent() { [[ $(kube get "$1" -o jsonpath='{.metadata.managedFields[?(@.manager=="numaserve-topology-agent")].operation}') == Apply ]]; }
applied_by_agent noderesourcetopology/worker-1 || fail "the NRT is not server-side applied by numaserve-topology-agent"
applied_by_agent node/worker-1 || fail "the node's labels are not server-side applied by numaserve-topology-agent"
kube get noderesourcetopology worker-1 -o yaml | grep -q 'topologyManagerPolicy' || fail "the NRT has no kubelet attributes"
unchanged=$(metric numaserve_agent_apiserver_unchanged_total) version=$(nrt_version)
next_cycle || fail "no cycle after SIGHUP"
if [[ $(metric numaserve_agent_apiserver_unchanged_total) == $((unchanged + 2)) && $(nrt_version) == "$version" ]]; then
  ok "unchanged objects are not sent again (the NRT's resourceVersion stays $version)"
else
  fail "unchanged objects were sent again"
fi
kill "$agent_pid"; wait "$agent_pid" 2>/dev/null || true; agent_pid=

echo "== the agent's admission policy, enforced by the API server"
kube apply --server-side -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Node
metadata: {name: worker-2, labels: {kubernetes.io/hostname: worker-2, team: ranking, numaserve.io/replicas: "2"}}
EOF
kube label node worker-1 team=ranking >/dev/null
kube annotate node worker-1 node.alpha.kubernetes.io/ttl=0 >/dev/null
policy=numaserve-agent-own-node
# The requests of tests/k8s/admission_policy.mjs (now removed), made for
# real: the expected verdict, and for a denial the policy's own message.
unbound_token=$(kube create token numaserve-agent --duration 1h)
request() {  # expect(allowed|message) what command...
  local expect=$1 what=$2 answer; shift 2
  if answer=$("$@" 2>&1); then
    [[ $expect == allowed ]] && ok "$what: admitted" || fail "$what: admitted, expected denied ($expect)"
  elif [[ $expect != allowed ]] && grep -q "ValidatingAdmissionPolicy '$policy'.*denied request: $expect" <<<"$answer"; then
    ok "$what: denied ($expect)"
  else
    fail "$what: ${answer:0:300}, expected ${expect}"
  fi
}
apply_labels() {  # node labels-json [kubectl flags]: the agent's own kind of request
  local node=$1 labels=$2; shift 2
  printf '{"apiVersion":"v1","kind":"Node","metadata":{"name":"%s","labels":%s}}' "$node" "$labels" |
    "$@" apply --server-side --force-conflicts --field-manager numaserve-topology-agent -f -
}
nrt() {  # name description
  printf '{"apiVersion":"topology.node.k8s.io/v1alpha2","kind":"NodeResourceTopology","metadata":{"name":"%s"},"zones":[{"name":"node-0","type":"Node","attributes":[{"name":"x","value":"%s"}]}]}' "$1" "$2"
}
# A JSON merge patch as it reaches the API server (kubectl patch would read
# the node first, which the agent may not).
merge_patch() {  # node json curl-credentials...: fails with the Status message
  local node=$1 body=$2 answer; shift 2
  answer=$(curl -sS --cacert "$CP_DIR/ca.crt" -X PATCH -H 'Content-Type: application/merge-patch+json' "$@" \
    --data "$body" -w '\n%{http_code}' "$(cat "$CP_DIR/url")/api/v1/nodes/$node")
  [[ ${answer##*$'\n'} == 200 ]] || { echo "${answer%$'\n'*}"; return 1; }
}
agent_patch() { merge_patch "$1" "$2" -H "Authorization: Bearer $(cat "$CP_DIR/agent.token")"; }
admin_as() {  # user node json: the admin impersonating user
  merge_patch "$2" "$3" --cert "$CP_DIR/pki/admin.crt" --key "$CP_DIR/pki/admin.key" -H "Impersonate-User: $1"
}
only_own_node="the topology agent may write only the node it runs on"
# A new policy takes effect within seconds: wait for it to deny.
# Each try a new value: a write that succeeded would make the next a no-op.
policy_denies() { ! apply_labels worker-2 "{\"numaserve.io/x\":\"$RANDOM\"}" as_agent; }
eventually 30 policy_denies || fail "the admission policy never took effect"
request allowed "the agent sets its node's numaserve.io labels" apply_labels worker-1 '{"numaserve.io/replicas":"4","numaserve.io/smt":"true"}' as_agent
request allowed "the agent removes one of its own labels" apply_labels worker-1 '{"numaserve.io/replicas":"4"}' as_agent
request "$only_own_node" "the agent labels another node" apply_labels worker-2 '{"numaserve.io/replicas":"4"}' as_agent
request "$only_own_node" "a token without a node name" apply_labels worker-1 '{"numaserve.io/replicas":"4"}' as_agent --token "$unbound_token"
labels_only="the topology agent may add, change or remove only numaserve.io/\* labels"
request "$labels_only" "the agent changes another label" agent_patch worker-1 '{"metadata":{"labels":{"team":"batch"}}}'
request "$labels_only" "the agent adds another label" agent_patch worker-1 '{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}'
request "$labels_only" "the agent removes another label" agent_patch worker-1 '{"metadata":{"labels":{"team":null}}}'
no_spec="the topology agent may not change a node's spec"
request "$no_spec" "the agent taints its node" agent_patch worker-1 '{"spec":{"taints":[{"key":"x","effect":"NoSchedule"}]}}'
request "$no_spec" "the agent cordons its node" agent_patch worker-1 '{"spec":{"unschedulable":true}}'
request "the topology agent may not change a node's annotations" "the agent annotates its node" \
  agent_patch worker-1 '{"metadata":{"annotations":{"a":"b"}}}'
apply_nrt() { nrt "$1" "$2" | as_agent apply --server-side --force-conflicts --field-manager numaserve-topology-agent -f -; }
kube delete noderesourcetopology worker-1 >/dev/null
request allowed "the agent creates its node's NodeResourceTopology" apply_nrt worker-1 created
request allowed "the agent updates its node's NodeResourceTopology" apply_nrt worker-1 updated
request "$only_own_node" "the agent creates another node's NodeResourceTopology" apply_nrt worker-2 other
request allowed "another account (the kubelet, by its Node authorizer) changes any label" \
  kube --as system:node:worker-1 --as-group system:nodes --as-group system:authenticated label node worker-1 team=batch --overwrite
# An agent of another release, given the same ClusterRole: not this policy's.
kube create namespace other >/dev/null
kube -n other create serviceaccount numaserve-agent >/dev/null
kube create clusterrolebinding other-agent --clusterrole numaserve-agent --serviceaccount other:numaserve-agent >/dev/null
request allowed "an agent of another release is not this policy's" \
  admin_as system:serviceaccount:other:numaserve-agent worker-2 '{"metadata":{"labels":{"team":"x"}}}'
# The check can fail: with the label rule defused, the API server admits it.
sed "s/k.startsWith('numaserve.io\/')/true/g" "$out/release.yaml" | kube apply --server-side -f - >/dev/null
if eventually 30 agent_patch worker-1 '{"metadata":{"labels":{"team":"defused"}}}'; then
  ok "a policy with its label rule defused lets the agent change any label, as it must"
else
  fail "the defused policy still denied the agent"
fi
kube apply --server-side -f "$out/release.yaml" >/dev/null
label_denied() { ! agent_patch worker-1 "{\"metadata\":{\"labels\":{\"team\":\"t$RANDOM\"}}}"; }
eventually 30 label_denied || fail "the restored policy did not deny again"

echo "== RBAC: what the agent's ClusterRole allows, and nothing else"
forbidden() {  # what command...: refused by RBAC
  local answer
  local what=$1; shift
  if answer=$("$@" 2>&1); then fail "the agent may $what"
  elif grep -q 'is forbidden: User "system:serviceaccount:numaserve:numaserve-agent" cannot' <<<"$answer"; then ok "the agent may not $what"
  else fail "$what: refused, but not by RBAC: ${answer:0:200}"; fi
}
forbidden "read secrets in kube-system" as_agent -n kube-system get secrets
forbidden "read secrets in its own namespace" as_agent -n numaserve get secrets
forbidden "list pods" as_agent get pods -A
forbidden "create a deployment" as_agent -n numaserve create deployment x --image=x
forbidden "scale the service" as_agent -n numaserve scale deployment numaserve --replicas 0
forbidden "read nodes" as_agent get nodes
forbidden "delete a node" as_agent delete node worker-2
forbidden "read NodeResourceTopologies" as_agent get noderesourcetopologies
forbidden "delete its NodeResourceTopology" as_agent delete noderesourcetopology worker-1
forbidden "read config maps" as_agent -n numaserve get configmaps
forbidden "change its own ClusterRole" as_agent patch clusterrole numaserve-agent --type merge -p '{"rules":[]}'
forbidden "mint tokens" as_agent -n numaserve create token numaserve-agent
kube delete clusterrolebinding other-agent >/dev/null

# Pods are bound only; one removed is let go as the kubelet would let it go.
release_pods() {  # namespace selector
  kube -n "$1" delete pods -l "$2" --grace-period 0 --force --wait=false >/dev/null 2>&1 || true
}
last_event() {  # namespace field-selector: the newest matching event's message
  kube -n "$1" get events --field-selector "$2" -o jsonpath='{range .items[*]}{.message}{"\n"}{end}' | tail -1
}
placement() {  # namespace selector: "node=count ..." of the bound pods, and "Pending=n"
  kube -n "$1" get pods -l "$2" -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' |
    sed 's/^$/Pending/' | sort | uniq -c | awk '{printf "%s=%s ", $2, $1}'
}
settled() {  # namespace selector count: that many pods, each bound or not, none being created
  [[ $(kube -n "$1" get pods -l "$2" --no-headers 2>/dev/null | wc -l) == "$3" ]]
}
placed_as() { [[ $(placement "$1" "$2") == "$3" ]]; }
all_bound() { local p; p=$(placement "$1" "$2"); [[ -n $p && $p != *Pending* ]]; }
service=app.kubernetes.io/name=numaserve,app.kubernetes.io/component=service

echo "== scheduling: the 2-socket example's replicas by kube-scheduler"
# The cluster's worker labels are the agent's own for that machine.
diff -u <("$AGENT" plan -o labels "${machine[@]}") \
  <(awk '/name: worker-1/{w=1} w && /numaserve.io/{gsub(/[ "]/,""); sub(/:/,"="); print} /^---/{if(w)exit}' "$HERE/clusters/four-workers.yaml") ||
  fail "clusters/four-workers.yaml: worker labels differ from the agent's for that machine"
kube label node worker-1 team- >/dev/null
create_nodes "$HERE/clusters/four-workers.yaml"
expected="worker-1=2 worker-2=2 worker-3=2 worker-4=2 "
eventually 60 placed_as numaserve "$service" "$expected" || true
got=$(placement numaserve "$service")
[[ $got == "$expected" ]] && ok "8 replicas bound, 2 on each planned worker: $got" ||
  fail "the 2-socket example placed $got, expected $expected ($(last_event numaserve reason=FailedScheduling))"

# The agent's DaemonSet, by the controller and the scheduler: one pod on
# every node but the tainted control plane (it tolerates no taint).
agent_nodes() { kube -n numaserve get pods -l app.kubernetes.io/component=topology-agent -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort | tr '\n' ' '; }
agents_on() { [[ $(agent_nodes) == "$1" ]]; }
eventually 30 agents_on "unplanned worker-1 worker-2 worker-3 worker-4 " &&
  ok "the agent's DaemonSet runs on every node but the control plane: $(agent_nodes)" ||
  fail "the agent's DaemonSet pods are on: $(agent_nodes)"

# The rule as it was (any node a domain, taints ignored, no planned-node
# selector): kube-scheduler must not place all 8 on planned workers only.
scale_to_zero() {
  kube -n numaserve scale deployment numaserve --replicas 0 >/dev/null
  eventually 30 no_replica_sets_scaled
  release_pods numaserve "$service"
  eventually 30 settled numaserve "$service" 0 || fail "the replicas were not let go"
}
no_replica_sets_scaled() { [[ -z $(kube -n numaserve get rs -l "$service" -o jsonpath='{.items[?(@.spec.replicas>0)].metadata.name}') ]]; }
scale_to_zero
sed '/nodeAffinityPolicy: Honor/d; /nodeTaintsPolicy: Honor/d; /^      affinity:$/,/operator: Exists$/d' "$out/release.yaml" |
  kube apply --server-side -f - >/dev/null
eventually 60 settled numaserve "$service" 8
sleep 3
got=$(placement numaserve "$service")
if [[ $got == "$expected" ]]; then fail "the old spread rule placed every replica on planned workers: $got"
else
  pending=$(kube -n numaserve get pods -l "$service" --field-selector spec.nodeName= -o jsonpath='{.items[0].metadata.name}' 2>/dev/null || true)
  ok "the old spread rule is caught: $got${pending:+ ($(last_event numaserve "involvedObject.name=$pending,reason=FailedScheduling"))}"
fi

echo "== the topology-aware scheduler: NodeResourceTopologyMatch on the agents' objects"
scale_to_zero
# worker-1's NodeResourceTopology is the agent's own (above, updated by the
# admission checks: republish it), the others' as their agents would write them.
for n in 1 2 3 4; do
  "$AGENT" plan -o nrt --node-name "worker-$n" "${machine[@]}" > "$out/nrt-$n.yaml"
done
kube apply --server-side --force-conflicts -f "$out/nrt-1.yaml" -f "$out/nrt-2.yaml" -f "$out/nrt-3.yaml" -f "$out/nrt-4.yaml" >/dev/null
"$CP_DIR/bin/kubectl" kustomize "$ROOT/manifests/overlays/topology-aware-scheduler" > "$out/overlay.yaml"
kube apply --server-side --force-conflicts -f "$out/overlay.yaml" >/dev/null
eventually 60 all_bound numaserve "$service" || true
got=$(placement numaserve "$service")
by=$(kube -n numaserve get events --field-selector reason=Scheduled -o jsonpath='{range .items[*]}{.reportingComponent}{"\n"}{end}' | sort -u | tr '\n' ' ')
if [[ $got != *Pending* && $got == *worker-* && $by == *topology-aware-scheduler* ]]; then
  ok "the overlay's replicas are bound by the topology-aware scheduler: $got"
else
  fail "the overlay's replicas: $got, bound by: $by"
fi
# A replica that fits a planned node but no NUMA zone of it: 16 CPUs, where
# each zone allocates 14 (nodes without an NRT, like "unplanned", pass the
# plugin's filter, so it asks for planned nodes as the chart's replicas do). The default scheduler binds it (the kubelet would then
# refuse it, TopologyAffinityError); the topology-aware one leaves it Pending.
too_big() {  # name scheduler
  kube apply --server-side -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, labels: {app: too-big}}
spec:
  schedulerName: $2
  nodeSelector: {numaserve.io/numa-nodes: "2"}
  containers:
    - name: c
      image: localhost/numaserve:test
      resources: {requests: {cpu: "16", memory: 1Gi}, limits: {cpu: "16", memory: 1Gi}}
EOF
}
too_big too-big-default default-scheduler
too_big too-big-aware topology-aware-scheduler
bound() { [[ -n $(kube -n numaserve get pod "$1" -o jsonpath='{.spec.nodeName}') ]]; }
failed_scheduling() { kube -n numaserve get events --field-selector "involvedObject.name=$1,reason=FailedScheduling" -o name | grep -q .; }
eventually 30 bound too-big-default ||
  fail "the default scheduler did not bind the 16-CPU pod (it fits a node's allocatable)"
eventually 30 failed_scheduling too-big-aware || true
why=$(last_event numaserve involvedObject.name=too-big-aware,reason=FailedScheduling)
if [[ -z $(kube -n numaserve get pod too-big-aware -o jsonpath='{.spec.nodeName}') && $why == *"cannot align"* ]]; then
  ok "a replica that fits no NUMA zone stays Pending: $why"
else
  fail "the 16-CPU pod under the topology-aware scheduler: node '$(kube -n numaserve get pod too-big-aware -o jsonpath='{.spec.nodeName}')', events '$why'"
fi

# The kubelet's own Topology, CPU and Memory Managers on what was bound:
# the 16-CPU pod the default scheduler placed is refused, the overlay's
# replicas are admitted.
refused=$(admission 'r.flatMap((n) => Object.entries(n.refused).map(([p, why]) => p + " on " + n.node + ": " + why)).join("; ")')
admitted=$(admission 'r.flatMap((n) => n.admitted).filter((p) => p.startsWith("numaserve-")).length')
if [[ $refused == "too-big-default on worker-"*": TopologyAffinityError: "* && $refused != *";"* && $admitted -ge 8 ]]; then
  ok "the kubelet's managers admit the $admitted replicas and refuse the 16-CPU pod: $refused"
else
  fail "the kubelet's admission: refused '$refused', admitted $admitted"
fi

echo "== cluster-plan on what the API server holds"
# The GitOps path: the fleet's objects as kubectl prints them, planned. The
# agent's own label on worker-1 names the class cluster-plan finds.
kube get noderesourcetopologies,nodes -o yaml > "$out/fleet.yaml"
if "$AGENT" cluster-plan -o json "$out/fleet.yaml" > "$out/fleet.json"; then
  label=$(kube get node worker-1 -o jsonpath='{.metadata.labels.numaserve\.io/machine-class}')
  summary=$(node -e 'const p = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    console.log(p.classes.map((c) => `${c.name}:${c.nodes.join(",")}:${c.replicas_per_machine}x${c.replica.cpus}`).join(" "),
                p.unplanned.map((u) => u.node).sort().join(","))' "$out/fleet.json")
  [[ $summary == "$label:worker-1,worker-2,worker-3,worker-4:2x14 control-plane,unplanned" ]] &&
    ok "cluster-plan: one class of 4 workers, 2 replicas of 14 CPUs each, named as the agent labels worker-1 ($label)" ||
    fail "cluster-plan on the cluster's objects: $summary (worker-1's label: $label)"
else
  fail "cluster-plan on the cluster's objects failed"
fi

echo "== a mixed fleet: one Deployment per machine class, from cluster-plan -o helm-values"
# Two machine generations join the four workers: Xeon E5 (56 threads, NUMA
# nodes of 28) and Xeon Gold (96 threads, NUMA nodes of 48), each as its
# agent publishes it (NodeResourceTopology, labels) and registered as its
# kubelet would (allocatable: the plan's rooms summed).
# Every Deployment scaled to zero and its pods let go before it is deleted:
# a ReplicaSet still alive would replace the pods released.
clear_release() {
  kube -n numaserve scale deployment --all --replicas 0 >/dev/null 2>&1 || true
  eventually 30 no_replica_sets_scaled || true
  release_pods numaserve "$service"
  eventually 60 settled numaserve "$service" 0 || fail "the replicas were not let go: $(placement numaserve "$service")"
  kube -n numaserve delete deployment --all >/dev/null
}
kube -n numaserve delete pod too-big-default too-big-aware --grace-period 0 --force --wait=false >/dev/null 2>&1 || true
clear_release
{ fleet_node e5-1 "${E5[@]}"; fleet_node e5-2 "${E5[@]}"; fleet_node gold-1 "${GOLD[@]}"; fleet_node gold-2 "${GOLD[@]}"; } > "$out/generations.yaml"
create_nodes "$out/generations.yaml"
# worker-1's NodeResourceTopology says what its pods hold: as an agent would
# once they are gone, all of it is available again.
kube apply --server-side --force-conflicts -f "$out/nrt-1.yaml" >/dev/null
# What a plan expects: "node=replicas ..." over every class's nodes.
expected_placement() {  # plan.json
  node -e 'const p = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    console.log(p.classes.flatMap((c) => c.nodes.map((n) => `${n}=${c.replicas_per_machine}`)).sort().join(" ") + " ")' "$1"
}
for sizing in per-class uniform; do
  kube get noderesourcetopologies,nodes -o yaml > "$out/fleet.yaml"
  "$AGENT" cluster-plan --sizing "$sizing" -o json "$out/fleet.yaml" > "$out/fleet-$sizing.json"
  "$AGENT" cluster-plan --sizing "$sizing" -o helm-values "$out/fleet.yaml" > "$out/fleet-$sizing.values.yaml"
  "$HELM" template numaserve "$CHART" --namespace numaserve -f "$out/fleet-$sizing.values.yaml" \
    --set agent.enabled=false --set schedulerName=topology-aware-scheduler > "$out/fleet-$sizing.yaml"
  kube apply --server-side -f "$out/fleet-$sizing.yaml" >/dev/null
  expected=$(expected_placement "$out/fleet-$sizing.json")
  eventually 90 placed_as numaserve "$service" "$expected" || true
  got=$(placement numaserve "$service") classes=$(kube -n numaserve get deployments -o name | wc -l)
  wrong=$(class_mismatches numaserve "$service")
  if [[ $got == "$expected" && -z $wrong && $classes == $(node -p "require('$out/fleet-$sizing.json').classes.length") ]]; then
    ok "$sizing: $classes Deployments, one per class, every replica bound on its class's nodes: $got"
  else
    fail "$sizing: placed $got, expected $expected; $classes Deployments; on another class's node: ${wrong:-none}"
  fi
  # Every replica bound is one the kubelet admits, CPUs and memory from one NUMA node.
  verdict=$(admission 'r.map((n) => n.error || Object.keys(n.refused).length + " refused").filter((v) => v != "0 refused").join("; ") ||
    "all " + r.reduce((k, n) => k + n.admitted.filter((p) => p.startsWith("numaserve-mc-")).length, 0) + " replicas admitted, " +
    r.reduce((k, n) => k + n.idle_cpus, 0) + " of " + r.reduce((k, n) => k + n.allocatable_cpus, 0) + " CPUs idle"')
  [[ $verdict == "all "* ]] && ok "$sizing: the kubelet's managers: $verdict" || fail "$sizing: the kubelet's admission: $verdict"
  clear_release
done
use=$(node -p "const u = (s) => { const f = require('$out/fleet-' + s + '.json').fleet; return f.cpus_used + '/' + f.cpus_allocatable; };
  'per-class ' + u('per-class') + ', uniform ' + u('uniform')")
echo "CPUs at work on the mixed fleet: $use"
# Today's one-size chart on the same fleet, sized from a Gold node: no E5
# NUMA node (26 CPUs) nor a worker's (14) holds a 46-CPU replica, so at
# least 12 of the 16 stay Pending (more: the spread rule counts the nodes
# that cannot hold one, so each Gold node takes one).
"$AGENT" plan -o helm-values "${GOLD[@]}" "${FLEET_KUBELET[@]}" > "$out/one-size.values.yaml"
"$HELM" template numaserve "$CHART" --namespace numaserve -f "$out/one-size.values.yaml" --set nodes=8 \
  --set agent.enabled=false --set schedulerName=topology-aware-scheduler > "$out/one-size.yaml"
kube apply --server-side -f "$out/one-size.yaml" >/dev/null
eventually 60 settled numaserve "$service" 16 || true
sleep 3
got=$(placement numaserve "$service")
pending=$(sed -n 's/.*Pending=\([0-9]*\).*/\1/p' <<<"$got")
[[ ${pending:-0} -ge 12 && $got == *gold-1=* && $got != *e5-* && $got != *worker-* ]] &&
  ok "the one-size chart sized from a Gold node leaves $pending of 16 replicas Pending on the mixed fleet: $got" ||
  fail "the one-size chart on the mixed fleet: $got"
idle=$(admission 'r.filter((n) => n.node.startsWith("e5-") || n.node.startsWith("worker-")).map((n) => n.node + "=" + n.idle_cpus).join(" ")')
[[ $idle == *e5-1=52* && $idle == *worker-1=28* ]] &&
  ok "the kubelet's managers: the E5 and worker nodes' CPUs all idle under the one-size chart ($idle)" ||
  fail "the one-size chart's idle CPUs: $idle"

if ((failures)); then echo "$failures failure(s)" >&2; exit 1; fi
echo "cluster checks passed"
