#!/usr/bin/env bash
# The topology operator (numaserve-operator run) against a real
# control plane (tests/k8s/cluster): the chart's ServingPool and the
# operator's RBAC installed, a mixed fleet's Node and NodeResourceTopology
# objects created, the operator run here with its ServiceAccount's token, as
# its pod would:
#   1. one Deployment and PDB per machine class; kube-scheduler binds every
#      replica on a node of its class; the pool's status says so; each is
#      the Deployment the chart renders for that class without the operator
#      (same spec, ownership aside: same_deployments.mjs); a Service per class
#      selects exactly its class's pods, and the HTTPRoute weighs each by its
#      ready replicas' CPUs (0 before any is ready);
#   2. a second pass writes nothing (resourceVersions unchanged);
#   3. a write by another field manager is taken back;
#   4. a node of a new class adds a Deployment; a class gone deletes its own;
#   5. a pod the kubelet refused (TopologyAffinityError) is deleted once, a
#      node refusing again and again is backed off and reported;
#   6. the API server stopped for longer than the Lease and restarted: the
#      operator stops acting, leads and reconciles again, deletes nothing;
#   7. two operators, one leader; the leader stopped, the other takes over;
#   8. RBAC: the operator's identity can do what it does and nothing else;
#   9. through a fault injector (faulty_apiserver.mjs): writes refused with
#      409 while another writer changes a Deployment, and lists cut half-way:
#      said in the pool's status and metrics, nothing deleted, converged after;
#  10. NodeResourceTopology objects deleted and made again: the class planned
#      from the last ones read; an operator restarted meanwhile holds the
#      class's objects; converged when they are back, the same objects throughout.
# What stands in for the kubelet (none runs), as in cluster_test.sh: Node
# objects with a kubelet's status; pods are bound, never run; a pod's
# readiness and its refusal at admission are written to its status here, as
# the kubelet would report them.
# Usage: operator_test.sh OPERATOR AGENT FIXTURES_DIR (the agent makes the
# fleet's NodeResourceTopology objects, as its DaemonSet would)
set -euo pipefail
OPERATOR=$1
AGENT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/cluster/lib.sh"
out=$(mktemp -d)
operators=()
# However it ends (a failed command too, under set -e), the operators' logs
# are shown when it did not pass.
finish() {
  local rc=$?
  if ((rc || failures)); then for f in "$out"/op-*.log; do [[ -f $f ]] && { echo "--- $f"; tail -30 "$f"; }; done >&2; fi
  for p in "${operators[@]}"; do kill "$p" 2>/dev/null || true; done
  stop_control_plane
  rm -rf "$out"
}
trap finish EXIT
use_control_plane "$out/cluster"
export NAMESPACE=numaserve  # the release's; control-plane.sh made the operator's ServiceAccount here


echo "== the chart's ServingPool, the operator's RBAC"
kube apply --server-side -f "$CHART/crds/servingpool-crd.yaml" >/dev/null
established crd/servingpools.numaserve.io || fail "the ServingPool CRD was not Established in 30 s"
# The Gateway API's CRDs: the pool asks for an HTTPRoute under a Gateway.
gateway_api
"$HELM" template numaserve "$CHART" --namespace numaserve --set operator.enabled=true --set agent.enabled=false \
  --set schedulerName=topology-aware-scheduler --set-json 'httpRoute.parentRefs=[{"name":"ranking","namespace":"gateways"}]' \
  > "$out/release.yaml"
# Everything but the operator's own Deployment: it runs here instead.
node -e 'const {parseAllDocuments, stringify} = require(process.argv[1]);
  const docs = parseAllDocuments(require("fs").readFileSync(process.argv[2], "utf8")).map((d) => d.toJS()).filter(Boolean);
  process.stdout.write(docs.filter((o) => !(o.kind === "Deployment" && o.metadata.name.endsWith("-operator")))
    .map((o) => stringify(o)).join("---\n"))' "$HERE/node_modules/yaml/dist/index.js" "$out/release.yaml" > "$out/objects.yaml"
kube apply --server-side -f "$out/objects.yaml" >/dev/null
pool=numaserve
# An unknown field in a ServingPool is refused by its schema.
if why=$(sed 's/^  sizing: per-class$/  sizing: per-class\n  bogus: 1/' "$out/objects.yaml" |
         kube apply --server-side --dry-run=server --validate=strict -f - 2>&1); then
  fail "a ServingPool with an unknown field was accepted"
elif [[ $why == *'.spec.bogus: field not declared in schema'* ]]; then ok "the ServingPool schema refuses unknown fields"
else fail "the ServingPool with an unknown field was refused, but not as unknown: $why"; fi

echo "== a mixed fleet"
{ fleet_node e5-1 "${E5[@]}"; fleet_node e5-2 "${E5[@]}"; fleet_node gold-1 "${GOLD[@]}"; fleet_node gold-2 "${GOLD[@]}"; } > "$out/fleet.yaml"
create_nodes "$out/fleet.yaml"

declare -A pid port  # by identity
# identity [URL CA_FILE LEASE]: runs it in the background with the
# operator's token (against the API server at URL, 4 s Leases unless
# told); its pid and port.
start_operator() {
  rm -f "$out/$1.log"  # a restart's port is read from its own log, not the last one's
  "$OPERATOR" run --apiserver-url "${2:-$(cat "$CP_DIR/url")}" --apiserver-ca-file "${3:-$CP_DIR/ca.crt}" \
    --apiserver-token-file "$CP_DIR/operator.token" --namespace numaserve --identity "$1" \
    --lease-name numaserve-operator --resync-interval 1s --lease-duration "${4:-4s}" --port 0 > "$out/$1.log" 2>&1 &
  operators+=($!)
  pid[$1]=$!
  local deadline=$((SECONDS + 30))
  until grep -q 'msg=listening' "$out/$1.log" 2>/dev/null; do ((SECONDS < deadline)) || { fail "$1 did not start: $(cat "$out/$1.log")"; return; }; sleep 0.2; done
  port[$1]=$(sed -n 's/.*msg=listening.* port=\([0-9]*\).*/\1/p' "$out/$1.log" | head -1)
}
metric() {  # identity name [labels]: a sample's value
  { curl -fsS --max-time 5 "http://127.0.0.1:${port[$1]}/metrics" || true; } | awk -v n="$2${3:+{$3\}}" '$1 == n {print $2}'
}
deployments() { kube get deployments -l numaserve.io/pool=$pool -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | sort | tr '\n' ' '; }
pods_sel=numaserve.io/pool=$pool
placement() { kube get pods -l "$pods_sel" -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sed 's/^$/Pending/' | sort | uniq -c | awk '{printf "%s=%s ", $2, $1}'; }
placed_as() { [[ $(placement) == "$1" ]]; }
class_of() { kube get node "$1" -o jsonpath='{.metadata.labels.numaserve\.io/machine-class}'; }
# The kubelet's report of a running, ready pod, for every bound pod.
mark_ready() {
  local p
  for p in $(kube get pods -l "$pods_sel" -o jsonpath='{range .items[?(@.spec.nodeName)]}{.metadata.name}{"\n"}{end}'); do
    kube patch pod "$p" --subresource status --type merge -p \
      '{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"},{"type":"ContainersReady","status":"True"},{"type":"PodScheduled","status":"True"},{"type":"Initialized","status":"True"}]}}' >/dev/null 2>&1 || true
  done
}
pool_field() { kube get servingpool $pool -o jsonpath="$1"; }

echo "== 1. one Deployment per machine class, bound on its class's nodes"
start_operator op-a
e5=$(class_of e5-1) gold=$(class_of gold-1)
want="$pool-$e5 $pool-$gold "
[[ $e5 < $gold ]] || want="$pool-$gold $pool-$e5 "
eventually 90 bash -c "[[ \"\$(kubectl --kubeconfig $CP_DIR/kubeconfig -n numaserve get deployments -l numaserve.io/pool=$pool -o name | wc -l)\" == 2 ]]" || true
[[ $(deployments) == "$want" ]] && ok "one Deployment per class: $(deployments)" || fail "Deployments: $(deployments), expected $want"
[[ $(kube get pdb -l numaserve.io/pool=$pool -o name | wc -l) == 2 ]] && ok "one PodDisruptionBudget per class" || fail "PDBs: $(kube get pdb -o name | tr '\n' ' ')"
expected="e5-1=2 e5-2=2 gold-1=2 gold-2=2 "
eventually 180 placed_as "$expected" || true
wrong=$(class_mismatches numaserve "$pods_sel")
[[ $(placement) == "$expected" && -z $wrong ]] && ok "every replica bound on a node of its class: $(placement)" ||
  fail "placement $(placement), expected $expected; on another class's node: ${wrong:-none}"
owner=$(kube get deployment "$pool-$e5" -o jsonpath='{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name} {.spec.strategy.rollingUpdate.maxSurge} {.spec.template.spec.containers[0].resources.limits.cpu}')
[[ $owner == "ServingPool/$pool 0 26" ]] && ok "the E5 class's Deployment: owned by the pool, no surge, 26 CPUs" || fail "the E5 Deployment: $owner"
# A Service per class, selecting exactly that class's pods; the route's
# weights are CPUs x ready replicas: none ready yet, no traffic anywhere.
services=$(kube get services -l "$pods_sel" -o jsonpath='{range .items[*]}{.metadata.name}{" "}{end}')
[[ $services == "$(deployments)" ]] && ok "one Service per class: $services" || fail "class Services: '$services', Deployments: '$(deployments)'"
for s in $services; do
  selector=$(kube get service "$s" -o json | node -e 'const s = JSON.parse(require("fs").readFileSync(0, "utf8")).spec.selector;
    console.log(Object.entries(s).map(([k, v]) => `${k}=${v}`).join(","))')
  classes=$(kube get pods -l "$selector" -o jsonpath='{range .items[*]}{.metadata.labels.numaserve\.io/machine-class}{"\n"}{end}' | sort -u | tr '\n' ' ')
  [[ $classes == "${s#"$pool-"} " ]] || fail "Service $s selects pods of classes '$classes'"
done
# name=weight of each backend, sorted.
weights() { kube get httproute $pool -o jsonpath='{range .spec.rules[0].backendRefs[*]}{.name}={.weight}{"\n"}{end}' | sort | tr '\n' ' '; }
want_weights() { printf '%s\n' "$pool-$e5=$1" "$pool-$gold=$2" | sort | tr '\n' ' '; }
[[ $(weights) == "$(want_weights 0 0)" ]] && ok "the HTTPRoute under its Gateway, no replica ready: $(weights)" ||
  fail "the HTTPRoute before readiness: '$(weights)'"
mark_ready
weighted() { [[ $(weights) == "$(want_weights $((26 * 4)) $((46 * 4)))" ]]; }
eventually 90 weighted && ok "every replica ready: the route weighs each class by its ready CPUs: $(weights)" ||
  fail "the route's weights: '$(weights)', expected $(want_weights $((26 * 4)) $((46 * 4)))"
condition() { pool_field "{.status.conditions[?(@.type==\"$1\")].status}/{.status.conditions[?(@.type==\"$1\")].reason}"; }
ready() { [[ $(condition Available) == True/* && $(condition Progressing) == False/AllReplicasReady ]]; }
eventually 90 ready || true
status="$(pool_field '{.status.classes[*].readyReplicas}/{.status.classes[*].replicas} {.status.cpusUsed}/{.status.cpusAllocatable}') $(condition Available) $(condition Progressing) $(condition Degraded)"
[[ $status == "4 4/4 4 288/288 True/MinimumReplicasAvailable False/AllReplicasReady False/AsExpected" ]] && ok "the pool's status: ready per class, CPUs at work: $status" ||
  fail "the pool's status: $status"

# The chart's per-class Deployments (operator off, `classes` from
# cluster-plan on the same fleet) and the operator's are one object in two
# languages: the same spec, the API server's defaults included, ownership
# aside (names, the operator's and Helm's labels, selectors).
NAMESPACE=numaserve-chart kube create namespace numaserve-chart >/dev/null
kube get nodes,noderesourcetopologies -o yaml > "$out/fleet-objects.yaml"
"$AGENT" cluster-plan "$out/fleet-objects.yaml" -o helm-values > "$out/classes.yaml"
"$HELM" template numaserve "$CHART" --namespace numaserve-chart -f "$out/classes.yaml" --set agent.enabled=false \
  --set schedulerName=topology-aware-scheduler --show-only templates/deployment.yaml > "$out/chart-deployments.yaml"
kube -n numaserve-chart create --dry-run=server -o json -f "$out/chart-deployments.yaml" > "$out/chart-deployments.json"
kube get deployments -l numaserve.io/pool=$pool -o json > "$out/operator-deployments.json"
if same=$(node "$HERE/same_deployments.mjs" "$out/chart-deployments.json" "$out/operator-deployments.json" 2>&1); then
  ok "the chart's and the operator's Deployments: $same"
else
  fail "the chart's and the operator's Deployments differ: $same"
fi

# A pool the operator cannot serve says why in its status; the others are served on.
kube apply --server-side -f - >/dev/null <<'EOF'
apiVersion: numaserve.io/v1alpha1
kind: ServingPool
metadata: {name: broken}
spec:
  container: sidecar
  template:
    spec:
      containers: [{name: numaserve, image: localhost/numaserve:test}]
EOF
broken() { [[ $(kube get servingpool broken -o jsonpath='{.status.lastError} {.status.conditions[?(@.type=="Degraded")].reason}') == *"spec.container"*" InvalidPool" ]]; }
eventually 30 broken && ok "a pool naming no container of its template: $(kube get servingpool broken -o jsonpath='{.status.lastError}')" ||
  fail "the broken pool's status: $(kube get servingpool broken -o jsonpath='{.status}')"
kube delete servingpool broken >/dev/null

echo "== 2. a second pass writes nothing"
versions() { kube get deployments,pdb,servingpool -l "app.kubernetes.io/instance=numaserve" -o jsonpath='{range .items[*]}{.metadata.resourceVersion} {end}'; kube get deployments,pdb,services,httproutes -l "$pods_sel" -o jsonpath='{range .items[*]}{.metadata.resourceVersion} {end}'; }
# Settled: the status has caught up with the replicas' readiness.
sleep 3
before=$(versions) applied=$(metric op-a numaserve_operator_objects_total 'action="applied"') passes=$(metric op-a numaserve_operator_reconciles_total)
sleep 4
after=$(versions)
[[ $before == "$after" && $(metric op-a numaserve_operator_objects_total 'action="applied"') == "$applied" &&
   $(metric op-a numaserve_operator_reconciles_total) -gt $((passes + 1)) ]] &&
  ok "$(( $(metric op-a numaserve_operator_reconciles_total) - passes )) more passes, no write: resourceVersions unchanged" ||
  fail "passes wrote: resourceVersions '$before' -> '$after', applies $applied -> $(metric op-a numaserve_operator_objects_total 'action="applied"')"

echo "== 3. a conflicting write by another field manager is taken back"
kube scale deployment "$pool-$gold" --replicas 1 >/dev/null
back() { [[ $(kube get deployment "$pool-$gold" -o jsonpath='{.spec.replicas}') == 4 ]]; }
eventually 60 back && ok "kubectl's scale to 1 taken back to the plan's 4 replicas" ||
  fail "the gold class's replicas after a scale by kubectl: $(kube get deployment "$pool-$gold" -o jsonpath='{.spec.replicas}')"

echo "== 4. classes come and go with their nodes"
fleet_node big-1 --synthetic "pack:4 numa:2(memory=64GiB) core:8 pu:2" > "$out/big.yaml"
create_nodes "$out/big.yaml"
big=$(class_of big-1)
has() { kube get deployment "$1" >/dev/null 2>&1; }
eventually 60 has "$pool-$big" && ok "a node of a new class (8 NUMA nodes) adds its Deployment: $pool-$big" ||
  fail "no Deployment for the new class $big: $(deployments)"
kube delete node gold-1 gold-2 >/dev/null
kube delete noderesourcetopology gold-1 gold-2 >/dev/null
gone() { ! kube get deployment "$1" >/dev/null 2>&1 && ! kube get pdb "$1" >/dev/null 2>&1; }
eventually 60 gone "$pool-$gold" && ok "the class whose nodes left: its Deployment and PDB deleted" ||
  fail "the gold class's Deployment is still there: $(deployments)"
has "$pool-$e5" || fail "the E5 class's Deployment went too"

echo "== 5. pods the kubelet refused at admission"
refuse() {  # pod: the kubelet's report of a pod it would not admit
  kube patch pod "$1" --subresource status --type merge -p \
    '{"status":{"phase":"Failed","reason":"TopologyAffinityError","message":"Resources cannot be allocated with Topology locality"}}' >/dev/null
}
# One pod of the E5 class on e5-1 not yet refused ("" when none): the
# first item, not `| head -1` (under pipefail kubectl's SIGPIPE would fail it).
e5_pod() {
  kube get pods -l "numaserve.io/machine-class=$e5" --field-selector spec.nodeName=e5-1,status.phase!=Failed \
    -o jsonpath='{.items[0].metadata.name}' 2>/dev/null || true
}
victim=$(e5_pod)
refuse "$victim"
deleted() { ! kube get pod "$1" >/dev/null 2>&1; }
# The operator counts a deletion after the API server answered it: the pod
# can be seen gone a moment before the count moves.
deleted_once() { deleted "$1" && [[ $(metric op-a numaserve_operator_refused_pods_total 'action="deleted"') == 1 ]]; }
eventually 30 deleted_once "$victim" &&
  ok "a pod refused with TopologyAffinityError is deleted, once: $victim" ||
  fail "the refused pod $victim: still there or counted $(metric op-a numaserve_operator_refused_pods_total 'action="deleted"')"
# Refused again and again on one node: deletions spaced by the backoff (1 s,
# 2 s, 4 s...), the node reported in the pool's status.
t0=$SECONDS
for i in 1 2 3; do
  eventually 60 bash -c "[[ -n \"\$(kubectl --kubeconfig $CP_DIR/kubeconfig -n numaserve get pods -l numaserve.io/machine-class=$e5 --field-selector spec.nodeName=e5-1,status.phase!=Failed -o name)\" ]]" || true
  p=$(e5_pod)
  [[ -n $p ]] || { fail "no pod of the E5 class on e5-1 to refuse"; continue; }
  refuse "$p" || { fail "could not set $p's status"; continue; }
  eventually 60 deleted "$p" || fail "refused pod $p not deleted"
done
spent=$((SECONDS - t0))
reported() { [[ $(pool_field '{.status.refusingNodes[*].node}') == e5-1 && $(condition Degraded) == True/NodesRefusingPods ]]; }
eventually 30 reported || true
count=$(pool_field '{.status.refusedPods}') deferred=$(metric op-a numaserve_operator_refused_pods_total 'action="deferred"')
if reported && ((count == 4 && deferred > 0 && spent >= 3)); then
  ok "a node refusing 4 pods: each deleted after its backoff ($deferred deferrals, ${spent}s), e5-1 reported: $(pool_field '{.status.refusingNodes[0]}')"
else
  fail "refusals: status refusedPods=$count refusingNodes='$(pool_field '{.status.refusingNodes}')', deferred $deferred, ${spent}s"
fi

echo "== 6. the API server stopped for longer than the Lease, and restarted"
# Every object the pool owns, by UID: one deleted and made again would show.
uids() { kube get deployments,pdb,services,httproutes -l "$pods_sel" -o jsonpath='{range .items[*]}{.metadata.uid}{"\n"}{end}' | sort | tr '\n' ' '; }
owned=$(uids)
read -r _ api_pid < <(grep '^kube-apiserver ' "$CP_DIR/pids")
mapfile -d '' api_cmd < "/proc/$api_pid/cmdline"
errors=$(metric op-a numaserve_operator_errors_total) acquired=$(metric op-a numaserve_operator_leader_acquired_total)
kill -TERM -- "-$api_pid"
for _ in $(seq 50); do kill -0 "$api_pid" 2>/dev/null || break; sleep 0.1; done
down_at=$(date +%s)
sleep 10  # 2.5 Leases: every renewal and every pass fails meanwhile
leader_while_down=$(metric op-a numaserve_operator_leader) last_success=$(metric op-a numaserve_operator_last_success_timestamp_seconds)
setsid "${api_cmd[@]}" >> "$CP_DIR/logs/kube-apiserver.log" 2>&1 < /dev/null &
sed -i "s/^kube-apiserver $api_pid\$/kube-apiserver $!/" "$CP_DIR/pids"
api_up() { kube get --raw /readyz >/dev/null; }
eventually 180 api_up || fail "the API server did not come back"
up_at=$(date +%s)
kube scale deployment "$pool-$e5" --replicas 1 >/dev/null
e5_back() { [[ $(kube get deployment "$pool-$e5" -o jsonpath='{.spec.replicas}') == 4 ]]; }
recent() { (($(metric op-a numaserve_operator_last_success_timestamp_seconds) >= up_at)); }
if kill -0 "${pid[op-a]}" 2>/dev/null && eventually 90 e5_back && eventually 30 recent && (($(metric op-a numaserve_operator_errors_total) > errors)); then
  ok "the operator lived through the API server's 10 s absence ($(( $(metric op-a numaserve_operator_errors_total) - errors )) failed requests) and reconciles again"
else
  fail "after the API server's restart: operator alive=$(kill -0 "${pid[op-a]}" 2>/dev/null && echo yes || echo no), e5 replicas $(kube get deployment "$pool-$e5" -o jsonpath='{.spec.replicas}'), last success $(metric op-a numaserve_operator_last_success_timestamp_seconds) (back at $up_at)"
fi
[[ $leader_while_down == 0 && $(metric op-a numaserve_operator_leader) == 1 && $(metric op-a numaserve_operator_leader_acquired_total) -gt $acquired ]] &&
  ok "it stopped acting when its Lease could not be renewed, and took the Lease again" ||
  fail "leadership: $leader_while_down while the API server was down, $(metric op-a numaserve_operator_leader) after, acquired $acquired -> $(metric op-a numaserve_operator_leader_acquired_total)"
((last_success <= down_at)) && ok "its last successful pass stayed before the outage while it lasted ($((down_at - last_success)) s before)" ||
  fail "last success $last_success during an outage that began at $down_at"
[[ $(uids) == "$owned" ]] && ok "no object of the pool was deleted or made anew: the same UIDs" || fail "UIDs before '$owned', after '$(uids)'"

echo "== 7. two operators, one leader"
start_operator op-b
sleep 3
holder() { kube get lease numaserve-operator -o jsonpath='{.spec.holderIdentity}'; }
[[ $(holder) == op-a && $(metric op-a numaserve_operator_leader) == 1 && $(metric op-b numaserve_operator_leader) == 0 &&
   $(metric op-b numaserve_operator_reconciles_total) == 0 ]] &&
  ok "op-a leads (the Lease's holder), op-b waits and writes nothing" ||
  fail "leaders: lease holder $(holder), op-a $(metric op-a numaserve_operator_leader), op-b $(metric op-b numaserve_operator_leader)"
# The API server frozen past the Lease's duration (its answers time out),
# then thawed: both live on, and one leads.
read -r _ api_pid < <(grep '^kube-apiserver ' "$CP_DIR/pids")
kill -STOP -- "-$api_pid"
sleep 6
kill -CONT -- "-$api_pid"
one_leader() { (( $(metric op-a numaserve_operator_leader) + $(metric op-b numaserve_operator_leader) == 1 )); }
if eventually 90 one_leader && kill -0 "${pid[op-a]}" && kill -0 "${pid[op-b]}"; then
  ok "the API server frozen for 6 s: both operators live, one leads ($(holder))"
else
  fail "after the API server froze: leaders op-a=$(metric op-a numaserve_operator_leader) op-b=$(metric op-b numaserve_operator_leader)"
fi
if [[ $(holder) == op-b ]]; then  # the rest expects op-a to lead: hand it back
  kill -TERM "${pid[op-b]}"; wait "${pid[op-b]}" || true
  start_operator op-b
  eventually 45 bash -c "[[ \$(kubectl --kubeconfig $CP_DIR/kubeconfig -n numaserve get lease numaserve-operator -o jsonpath='{.spec.holderIdentity}') == op-a ]]" || true
fi
kill -TERM "${pid[op-a]}"
wait "${pid[op-a]}" || fail "op-a exited with $? on SIGTERM"
takes_over() { [[ $(holder) == op-b && $(metric op-b numaserve_operator_leader) == 1 ]]; }
eventually 45 takes_over && ok "op-a stopped (Lease released): op-b leads" || fail "after op-a stopped: holder $(holder)"
kube scale deployment "$pool-$e5" --replicas 1 >/dev/null
eventually 60 e5_back && ok "op-b reconciles" || fail "op-b does not reconcile"

echo "== 8. RBAC: what the operator's identity may do"
as_operator() { "$CP_DIR/bin/kubectl" --kubeconfig "$CP_DIR/operator.kubeconfig" "$@"; }
for allowed in "list nodes" "list noderesourcetopologies.topology.node.k8s.io" "-n numaserve patch deployments" \
               "-n numaserve create deployments" "-n numaserve delete poddisruptionbudgets" "-n numaserve delete pods" \
               "-n numaserve patch servingpools.numaserve.io --subresource status" "-n numaserve update leases/numaserve-operator" \
               "-n numaserve patch services" "-n numaserve delete httproutes.gateway.networking.k8s.io" \
               "-n numaserve patch horizontalpodautoscalers.autoscaling"; do
  # shellcheck disable=SC2086
  [[ $(as_operator auth can-i $allowed 2>/dev/null) == yes ]] && ok "may $allowed" || fail "may not $allowed"
done
for refused in "-n default create deployments" "-n kube-system delete pods" "patch nodes" "-n numaserve get secrets" \
               "-n numaserve patch servingpools.numaserve.io" "-n numaserve update leases/another" "-n numaserve create pods" \
               "patch noderesourcetopologies.topology.node.k8s.io" "-n default patch services" \
               "-n default create httproutes.gateway.networking.k8s.io" "patch gateways.gateway.networking.k8s.io"; do
  # shellcheck disable=SC2086
  [[ $(as_operator auth can-i $refused 2>/dev/null) == no ]] && ok "refused $refused" || fail "may $refused"
done

echo "== 9. faults between the operator and the API server (faulty_apiserver.mjs)"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$out/proxy.key" -out "$out/proxy.crt" \
  -subj /CN=faulty-apiserver -addext subjectAltName=IP:127.0.0.1 -days 1 2>/dev/null
faults() { echo "$1" > "$out/faults.new" && mv "$out/faults.new" "$out/faults.json"; }  # whole or not at all
faults '[]'
node "$HERE/faulty_apiserver.mjs" "$(cat "$CP_DIR/url")" "$CP_DIR/ca.crt" "$out/proxy.crt" "$out/proxy.key" \
  "$out/faults.json" "$out/injected.json" > "$out/proxy.log" 2>&1 &
operators+=($!)
eventually 10 grep -q listening "$out/proxy.log" || fail "the fault injector did not start: $(cat "$out/proxy.log")"
proxy=https://127.0.0.1:$(awk '/listening/ {print $2}' "$out/proxy.log")
injected() { jq -r --arg k "$1" '.[$k] // 0' "$out/injected.json" 2>/dev/null || echo 0; }
# op-f, through the injector, the only operator; a Lease of 15 s (the
# chart's), so that a pass slowed by retries may still write its status.
kill -TERM "${pid[op-b]}"; wait "${pid[op-b]}" || true
start_operator op-f "$proxy" "$out/proxy.crt" 15s
as_expected() { [[ $(condition Degraded) == False/AsExpected && $(metric op-f numaserve_operator_leader) == 1 ]]; }
eventually 60 as_expected || fail "op-f through the injector: leader $(metric op-f numaserve_operator_leader), Degraded $(condition Degraded)"
# What the operator wrote without a fault: each object's spec, the route's
# backends without their weights (those follow the replicas' readiness,
# which a pod bound meanwhile changes; section 1 checks them).
written() { kube get deployments,pdb,services,httproutes -l "$pods_sel" -o json |
            jq -S -c '[.items[] | {kind, name: .metadata.name, spec: (if .kind == "HTTPRoute"
                        then .spec | del(.rules[].backendRefs[].weight) else .spec end)}] | sort_by(.kind, .name)'; }
mark_ready
sleep 3
owned=$(uids) wrote=$(written)

# Another writer changes a Deployment while every write of the operator's
# to Deployments is refused with 409.
conflict_rule='PATCH /apis/apps/v1/namespaces/numaserve/deployments/'
faults "[{\"match\": \"$conflict_rule\", \"fault\": \"conflict\"}]"
kube scale deployment "$pool-$e5" --replicas 1 >/dev/null
kube label deployment "$pool-$e5" example.com/team=search >/dev/null  # a field of the other writer's own
conflicted() { [[ $(condition Degraded) == True/ApiServerError && $(pool_field '{.status.lastError}') == *"HTTP 409"* ]] &&
               (($(metric op-f numaserve_operator_apiserver_failures_total 'code="409"') > 0)); }
eventually 30 conflicted && [[ $(kube get deployment "$pool-$e5" -o jsonpath='{.spec.replicas}') == 1 ]] &&
  ok "writes refused with 409: said in the status ($(pool_field '{.status.lastError}' | cut -c1-90)...) and counted ($(metric op-f numaserve_operator_apiserver_failures_total 'code="409"'))" ||
  fail "under 409s: Degraded $(condition Degraded), lastError '$(pool_field '{.status.lastError}')', 409s counted $(metric op-f numaserve_operator_apiserver_failures_total 'code="409"')"
faults '[]'
converged() { e5_back && as_expected; }
eventually 60 converged && [[ $(kube get deployment "$pool-$e5" -o jsonpath='{.metadata.labels.example\.com/team}') == search ]] &&
  ok "the 409s over ($(injected "conflict $conflict_rule") refused): the plan's replicas back, the other writer's label kept, Degraded cleared" ||
  fail "after the 409s: replicas $(kube get deployment "$pool-$e5" -o jsonpath='{.spec.replicas}'), Degraded $(condition Degraded), label '$(kube get deployment "$pool-$e5" -o jsonpath='{.metadata.labels}')'"

# Lists cut half-way: the header whole, half the body, the connection
# closed. The status keeps what the last pass knew (the ready replicas, not
# the zeros of a list not read; Available as it was) and says which read failed.
mark_ready  # the replicas the scale to 1 replaced
sleep 3
available=$(condition Available) ready_replicas=$(pool_field '{.status.classes[*].readyReplicas}')
[[ $ready_replicas == *[1-9]* ]] || fail "no replica ready before the lists are cut: '$ready_replicas'"
for rule in "GET /api/v1/nodes" "GET /apis/apps/v1/namespaces/numaserve/deployments?"; do
  faults "[{\"match\": \"$rule\", \"fault\": \"truncate\"}]"
  list_cut() { [[ $(condition Degraded) == True/ApiServerError && $(pool_field '{.status.lastError}') == *"${rule#GET }"* ]]; }
  eventually 60 list_cut && [[ $(condition Available) == "$available" && $(pool_field '{.status.classes[*].readyReplicas}') == "$ready_replicas" ]] &&
    ok "'$rule' cut half-way ($(injected "truncate $rule") times): Degraded names the read; ready replicas ($ready_replicas) and Available ($available) as they were" ||
    fail "'$rule' cut half-way: Degraded $(condition Degraded), lastError '$(pool_field '{.status.lastError}')', Available $(condition Available) (was $available), ready $(pool_field '{.status.classes[*].readyReplicas}') (were $ready_replicas)"
done
faults '[]'
eventually 60 as_expected && (($(metric op-f numaserve_operator_apiserver_failures_total 'code="0"') > 0)) &&
  ok "the lists whole again: Degraded cleared; the cut replies counted as failures without an answer" ||
  fail "after the cut lists: Degraded $(condition Degraded), failures without an answer $(metric op-f numaserve_operator_apiserver_failures_total 'code="0"')"
[[ $(uids) == "$owned" ]] && ok "409s and cut lists deleted nothing: the same UIDs" || fail "UIDs before '$owned', after '$(uids)'"

echo "== 10. NodeResourceTopology objects that disappear and return"
kube get noderesourcetopology e5-1 e5-2 -o json > "$out/e5-nrts.json"
remembered() { [[ $(metric op-f numaserve_operator_remembered_topologies) == "$1" && $(condition Degraded) == True/TopologyMissing ]]; }
kube delete noderesourcetopology e5-1 >/dev/null
eventually 30 remembered 1 && ok "e5-1's NRT deleted: planned from the last one read: $(pool_field '{.status.conditions[?(@.type=="Degraded")].message}')" ||
  fail "e5-1's NRT deleted: remembered $(metric op-f numaserve_operator_remembered_topologies), Degraded $(condition Degraded)"
kube delete noderesourcetopology e5-2 >/dev/null  # the whole class's
eventually 30 remembered 2 || fail "both E5 NRTs deleted: remembered $(metric op-f numaserve_operator_remembered_topologies)"
sleep 3
[[ $(uids) == "$owned" && $(pool_field '{.status.classes[*].name}') == *"$e5"* ]] &&
  ok "both E5 NRTs gone: the class still planned, its objects untouched" || fail "both E5 NRTs gone: classes $(pool_field '{.status.classes[*].name}'), UIDs '$(uids)'"
# An operator that never read them: the Nodes still carry the class's
# label, so its objects are held, not deleted, and its route backend kept.
kill -TERM "${pid[op-f]}"; wait "${pid[op-f]}" || true
start_operator op-f "$proxy" "$out/proxy.crt" 15s
held() { (($(metric op-f numaserve_operator_objects_total 'action="held"') > 0)) && [[ $(condition Degraded) == True/TopologyMissing ]] &&
         [[ $(pool_field '{.status.conditions[?(@.type=="Degraded")].message}') == *"class $e5"* ]]; }
eventually 30 held && sleep 3 && [[ $(uids) == "$owned" && $(weights) == *"$pool-$e5="* ]] &&
  ok "restarted while they are gone: the class's objects held ($(metric op-f numaserve_operator_objects_total 'action="held"') times), its route backend kept" ||
  fail "restarted without the E5 NRTs: held $(metric op-f numaserve_operator_objects_total 'action="held"'), Degraded $(condition Degraded), UIDs '$(uids)' (were '$owned'), route '$(weights)'"
# The agents write them again.
jq 'del(.items[].metadata.resourceVersion, .items[].metadata.uid, .items[].metadata.creationTimestamp, .items[].metadata.managedFields)' \
  "$out/e5-nrts.json" | kube create -f - >/dev/null
back_again() { as_expected && [[ $(metric op-f numaserve_operator_remembered_topologies) == 0 ]]; }
eventually 60 back_again && [[ $(uids) == "$owned" ]] && ok "the NRTs back: Degraded cleared, the same objects throughout" ||
  fail "the NRTs back: Degraded $(condition Degraded), UIDs '$(uids)' (were '$owned')"
mark_ready
same_as_before() { [[ $(written) == "$wrote" ]]; }
eventually 60 same_as_before && ok "after every fault: what it wrote is what it wrote before them, spec for spec" ||
  fail "after the faults the objects differ: $(diff <(jq . <<< "$wrote") <(written | jq .) | head -20)"

echo "== autoscaling: an HPA per class within its NUMA slots; the replicas are the HPA's, not the operator's"
kube patch servingpool $pool --type merge -p '{"spec":{"autoscaling":{"metric":"saturation","targetSaturation":"650m"}}}' >/dev/null
hpas() { kube get hpa -l numaserve.io/pool=$pool -o jsonpath='{range .items[*]}{.spec.scaleTargetRef.name}:{.spec.minReplicas}-{.spec.maxReplicas}:{.spec.metrics[0].pods.metric.name}={.spec.metrics[0].pods.target.averageValue}{"\n"}{end}' | sort | tr '\n' ' '; }
want_hpas=""  # each up to the replicas the plan gave its class
for d in $(deployments); do want_hpas+="$d:1-$(kube get deployment "$d" -o jsonpath='{.spec.replicas}'):numaserve_saturation=650m "; done
eventually 60 bash -c "[[ \"\$(kubectl --kubeconfig $CP_DIR/kubeconfig -n numaserve get hpa -l numaserve.io/pool=$pool -o name | wc -l)\" == $(deployments | wc -w) ]]" || true
[[ $(hpas) == "$want_hpas" ]] && ok "an HPA per class on numaserve_saturation, 1 to its slots: $(hpas)" || fail "HPAs: '$(hpas)', expected '$want_hpas'"
scaled=$(deployments | awk '{print $1}')  # the classes now: phase 4 changed them
slots=$(kube get deployment "$scaled" -o jsonpath='{.spec.replicas}')
kube scale deployment "$scaled" --replicas 2 >/dev/null
passes=$(metric op-f numaserve_operator_reconciles_total)
two_passes() { (( $(metric op-f numaserve_operator_reconciles_total) >= passes + 2 )); }
eventually 60 two_passes && [[ $(kube get deployment "$scaled" -o jsonpath='{.spec.replicas}') == 2 ]] &&
  ok "a scale to 2 (as the HPA would) left alone by two passes" ||
  fail "$scaled's replicas after two passes: $(kube get deployment "$scaled" -o jsonpath='{.spec.replicas}')"
kube patch servingpool $pool --type merge -p '{"spec":{"autoscaling":{"enabled":false}}}' >/dev/null
off() { [[ -z $(hpas | tr -d ' ') && $(kube get deployment "$scaled" -o jsonpath='{.spec.replicas}') == "$slots" ]]; }
eventually 60 off && ok "autoscaling off: the HPAs deleted, the plan's $slots replicas back" ||
  fail "autoscaling off: HPAs '$(hpas)', $scaled's replicas $(kube get deployment "$scaled" -o jsonpath='{.spec.replicas}')"

echo "== the pool deleted: the garbage collector removes its Deployments"
kube delete servingpool $pool >/dev/null
none_left() { [[ -z $(deployments | tr -d ' ') ]]; }
eventually 180 none_left && ok "no Deployment of the pool left" ||
  fail "left behind: $(deployments); the garbage collector: $(grep -i 'garbage\|servingpool' "$CP_DIR/logs/kube-controller-manager.log" | tail -5)"

if ((failures)); then echo "$failures failure(s)" >&2; exit 1; fi
echo "operator checks passed"
