#!/usr/bin/env bash
# The deployment path: the Helm chart (lint, template with every example and
# with the agent's own plans, values schema), the kustomize base and
# overlays, the kubelet and scheduler examples. Every rendered object is
# applied (server-side, dry run, strict field validation) to a real API
# server (tests/k8s/cluster), its CRDs installed first, and the deployment's
# promises are asserted (check_deployment.mjs), including that breaking one
# is caught. What the objects do once applied (admission, RBAC, scheduling)
# is cluster_test.sh's.
# Usage: deploy_test.sh AGENT_BINARY FIXTURES_DIR
set -euo pipefail
AGENT=$1 FIXTURES=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/cluster/lib.sh"
out=$(mktemp -d); trap 'stop_control_plane; rm -rf "$out"' EXIT
use_control_plane "$out/cluster"
KUBECTL=$CP_DIR/bin/kubectl
# The Prometheus Operator's ServiceMonitor CRD, for the renders that have one.
kube apply --server-side -f "$CP_DIR/bin/crds/monitoring.coreos.com_servicemonitors.yaml" >/dev/null
# The Gateway API's CRDs, for the renders with an HTTPRoute.
gateway_api
# The chart's own CRD (crds/: Helm installs it before the templates).
kube apply --server-side -f "$CHART/crds/servingpool-crd.yaml" >/dev/null
established crd/servingpools.numaserve.io || fail "the ServingPool CRD was not Established in 30 s"
export NAMESPACE=ranking  # as `helm install -n ranking` (the renders' namespace)
# The service's namespace as the README has it: Pod Security "restricted",
# enforced by the API server's own admission (it warns of workloads whose
# pods it would refuse). The agent's own namespace: "privileged".
kube create namespace ranking >/dev/null
kube label namespace ranking pod-security.kubernetes.io/enforce=restricted >/dev/null
kube create namespace numaserve-system >/dev/null
kube label namespace numaserve-system pod-security.kubernetes.io/enforce=privileged >/dev/null

check() { node "$HERE/check_deployment.mjs" "$@"; }
lint() { yamllint -s -c "$HERE/yamllint.yaml" "$@"; }

echo "== chart: lint, template, validate, assert"
renders=()
render() {  # name, expected replicas ("" when an HPA owns them), helm arguments...
  local name=$1 replicas=$2 lint_args=() arg; shift 2
  for arg in "$@"; do [[ $arg == --api-versions || $arg == */ServiceMonitor ]] || lint_args+=("$arg"); done
  "$HELM" lint --strict --quiet "$CHART" "${lint_args[@]}" >/dev/null || fail "helm lint --strict ${lint_args[*]}"
  "$HELM" template "rel-${name,,}" "$CHART" --namespace ranking "$@" > "$out/$name.yaml" || { fail "helm template $*"; return; }
  server_validate "$out/$name.yaml" > "$out/$name.psa" || fail "$name: objects the API server refuses"
  # Only the agent (hostPath, root), here in the service's namespace, may
  # break the restricted rules; in a namespace of its own, nothing does.
  if grep -v '^daemonset.apps/rel-[a-z0-9-]*-numaserve-agent: ' "$out/$name.psa"; then
    fail "$name: pods Pod Security (restricted) would refuse"
  fi
  check ${replicas:+--replicas "$replicas"} ${CHECK_FLAGS:-} "$out/$name.yaml" || fail "$name: deployment promises broken"
  renders+=("$out/$name.yaml")
  echo "ok $name"
}
render defaults 1
render two-socket 8 -f "$CHART/examples/two-socket.yaml"
render pvc-model 1 -f "$CHART/examples/pvc-model.yaml"
render init-container-model 1 -f "$CHART/examples/init-container-model.yaml"
render model-puller 1 -f "$CHART/examples/model-puller.yaml"
# A repository in poll mode, a puller beside the service writing the same emptyDir.
puller_config=$(sed -n '/numaserve.yaml: |/,/^---/p' "$out/model-puller.yaml")
grep -q 'model_repository: /models/repository$' <<<"$puller_config" || fail "model-puller: numaserve.yaml does not name the repository"
grep -q 'model_control_mode: poll$' <<<"$puller_config" || fail "model-puller: not in poll mode"
grep -q 'model_dir' <<<"$puller_config" && fail "model-puller: model_dir beside the repository"
grep -q -- '- name: model-puller$' "$out/model-puller.yaml" || fail "model-puller: no puller sidecar"
# The Prometheus Operator present: the ServiceMonitor appears.
render production "" -f "$CHART/examples/production.yaml" --api-versions monitoring.coreos.com/v1/ServiceMonitor
grep -q '^kind: ServiceMonitor' "$out/production.yaml" || fail "production: no ServiceMonitor where its CRD exists"
# The API server's validation is strict: an unknown field is refused.
sed '0,/^        - name: numaserve$/s//        - name: numaserve\n          bogus: 1/' "$out/defaults.yaml" > "$out/unknown-field.yaml"
if why=$(server_validate "$out/unknown-field.yaml" 2>&1); then fail "an unknown field was accepted"
elif grep -qF 'containers[name="numaserve"].bogus: field not declared in schema' <<<"$why"; then echo "ok unknown field refused"
else fail "an unknown field was refused, but not as unknown: $why"; fi
grep -q '^kind: ServiceMonitor' "$out/defaults.yaml" && fail "defaults: a ServiceMonitor without its CRD would fail the install"
grep -q '^kind: HorizontalPodAutoscaler' "$out/production.yaml" || fail "production: autoscaling on but no HPA"
grep -q '^  replicas:' <(sed -n '/^kind: Deployment/,/^---/p' "$out/production.yaml") && fail "production: replicas set although the HPA owns them"
grep -q '^kind: CustomResourceDefinition' "$out/production.yaml" || fail "production: CRD install asked but not rendered"
# The grace period covers preStop + shutdown_delay + drain for any values
# (check_deployment.mjs asserts it from the rendered numaserve.yaml).
for i in 1 2 3 4 5 6; do
  delay=$(( RANDOM % 400 ))$(printf 's\nm\nms\nm7s' | shuf -n1)
  render "grace-$i" 1 --set shutdown.preStopSeconds=$(( RANDOM % 60 )) --set shutdown.drainSeconds=$(( 1 + RANDOM % 300 )) \
    --set-string config.shutdown_delay="$delay"
done
# Features from Redis: the URL in numaserve.yaml, the password only in the
# Secret, mounted read-only and named by --feature-store-password-file.
render redis-store 1 --set featureStore.url=redis://redis.features:6379/2 --set featureStore.passwordSecret.name=redis-pw
redis_config=$(sed -n '/numaserve.yaml: |/,/^---/p' "$out/redis-store.yaml")
grep -q 'feature_store: redis://redis.features:6379/2$' <<<"$redis_config" || fail "redis-store: numaserve.yaml does not read the Redis URL"
grep -q 'feature_store_password_file: /var/run/secrets/numaserve/redis/password$' <<<"$redis_config" ||
  fail "redis-store: numaserve.yaml does not name the mounted password"
grep -A4 -- '- name: redis-password$' "$out/redis-store.yaml" | grep -q 'readOnly: true' || fail "redis-store: the password is not mounted read-only"
grep -q 'secretName: redis-pw$' "$out/redis-store.yaml" || fail "redis-store: the password Secret is not mounted"
grep -q 'feature_store: /models/store.jsonl' "$out/redis-store.yaml" && fail "redis-store: the JSON Lines store is still configured"
grep -q 'redis-password' "$out/defaults.yaml" && fail "defaults: a Redis password is mounted without a Redis"
# A Redis Cluster: its startup nodes, as Feast's connection_string lists them.
render redis-cluster 1 --set-string 'featureStore.url=redis+cluster://redis-0.features:6379\,redis-1.features:6379'
grep -q 'feature_store: redis+cluster://redis-0.features:6379,redis-1.features:6379$' "$out/redis-cluster.yaml" ||
  fail "redis-cluster: numaserve.yaml does not read the cluster's URL"
render agent-off 1 --set agent.enabled=false
render agent-quiet 1 --set agent.publish=false
digest=sha256:$(printf '%064d' 7)
render digest 1 --set image.digest=$digest --set agent.image.digest=$digest
[[ $(grep -c "image: localhost/numaserve[-a-z]*@$digest" "$out/digest.yaml") == 2 ]] || fail "image.digest is not what the pods pull"
CHECK_FLAGS=--no-network-policy render no-network-policy 1 --set networkPolicy.enabled=false
grep -q '^kind: NetworkPolicy' "$out/no-network-policy.yaml" && fail "networkPolicy.enabled=false still renders policies"
# The admin port behind a load balancer only when asked, and then it is a
# broken promise the check reports.
"$HELM" template lb "$CHART" --set service.type=LoadBalancer > "$out/lb.yaml"
check "$out/lb.yaml" >/dev/null || fail "a LoadBalancer Service without exposeAdminPort broke a promise"
"$HELM" template lb "$CHART" --set service.type=LoadBalancer --set service.exposeAdminPort=true > "$out/lb-admin.yaml"
check "$out/lb-admin.yaml" >/dev/null 2>&1 && fail "the admin port on a LoadBalancer passed the check"
"$HELM" template open "$CHART" --set-json 'networkPolicy.monitoring=[]' > "$out/open-admin.yaml"
check "$out/open-admin.yaml" >/dev/null 2>&1 && fail "an admin port and agent endpoint open to every pod passed the check"
# The documented install: the agent in a namespace of its own (Pod Security
# "privileged" for its hostPath mounts), the service's left "restricted"
# (check_deployment.mjs applies those rules to every service pod).
render own-namespace 1 --set agent.namespace=numaserve-system --api-versions monitoring.coreos.com/v1/ServiceMonitor
[[ $(grep -c '^  namespace: numaserve-system$' "$out/own-namespace.yaml") -ge 3 ]] || fail "own-namespace: the agent's objects are not in agent.namespace"
[[ -s $out/own-namespace.psa ]] && fail "own-namespace: Pod Security refuses pods of the documented install: $(cat "$out/own-namespace.psa")"
grep -q "system:serviceaccount:numaserve-system:rel-own-namespace-numaserve-agent'" "$out/own-namespace.yaml" ||
  fail "own-namespace: the admission policy does not name the agent's account in its namespace"
grep -q 'matchNames: \[ranking, numaserve-system\]' "$out/own-namespace.yaml" || fail "own-namespace: Prometheus does not look in the agent's namespace"
# The opt-in privileges render and keep their promises: the kubelet's state
# directory read-only, the drop-in directory the only other writable path.
render agent-state-dir 1 --set agent.kubeletStateDir=/var/lib/kubelet --set agent.kubeletDropinDir=/etc/kubernetes/kubelet.conf.d
grep -q -- '--kubelet-state-dir=/host/var/lib/kubelet' "$out/agent-state-dir.yaml" || fail "agent.kubeletStateDir is not passed on"
grep -q -- '--kubelet-state-dir' "$out/defaults.yaml" && fail "defaults: the agent mounts the kubelet's state directory" 
grep -q '^kind: ClusterRole$' "$out/agent-quiet.yaml" && fail "agent.publish=false still grants API access"

# The agent's own plans, fed to the chart as its README says: each machine's
# replicas and sizes come out as planned, and the pods are Guaranteed.
for xml in 16amd64-4distances 32em64t-2n8c2t-pci-normalio 64intel64-fakeKNL-SNC4-hybrid; do
  "$AGENT" plan -o helm-values --xml "$FIXTURES/topologies/xml/$xml.xml" > "$out/$xml.values.yaml"
  per_node=$(sed -n 's/^replicasPerMachine: //p' "$out/$xml.values.yaml")
  render "plan-$xml" $((3 * per_node)) -f "$out/$xml.values.yaml" --set nodes=3
  cpu=$(sed -n '/^  limits:/,/memory/s/^    cpu: //p' "$out/$xml.values.yaml")
  grep -q "cpu: \"$cpu\"" "$out/plan-$xml.yaml" || fail "plan-$xml: the planned $cpu CPUs are not what the pod asks"
done
# A fleet's plan (cluster-plan -o helm-values: the golden of the fixture
# machines, tests/unit/kube/fleet/fleet_test.cpp) as the chart takes it: one
# Deployment, PDB and HPA per class, each class's pods its own, one Service.
fleet_values=$FIXTURES/fleet/golden/fixture-machines.per-class.helm-values.yaml
classes=$(grep -c '^  - name: ' "$fleet_values")
render fleet-classes "" -f "$fleet_values" --set autoscaling.enabled=true
for kind in Deployment PodDisruptionBudget HorizontalPodAutoscaler; do
  n=$(grep -c "^kind: $kind\$" "$out/fleet-classes.yaml")
  [[ $n == "$classes" ]] || fail "fleet-classes: $n ${kind}s for $classes classes"
done
# Autoscaling on the replicas' saturation gauge: a Pods metric per class,
# each HPA still bounded by its class's NUMA-node slots.
render fleet-saturation "" -f "$fleet_values" --set autoscaling.enabled=true --set autoscaling.metric=saturation
[[ $(grep -c '^          name: numaserve_saturation$' "$out/fleet-saturation.yaml") == "$classes" ]] ||
  fail "fleet-saturation: not one numaserve_saturation Pods metric per class"
grep -q 'averageValue: "700m"' "$out/fleet-saturation.yaml" || fail "fleet-saturation: the target is not the default 700m"
grep -q 'averageUtilization' "$out/fleet-saturation.yaml" && fail "fleet-saturation: a CPU metric beside saturation"
[[ $(grep -c '^kind: Service$' "$out/fleet-classes.yaml") == $((3 + classes)) ]] ||
  fail "fleet-classes: not one Service for all and one per class (+ admin, agent)"
# Traffic that follows capacity on the two generations (cluster-plan's
# golden): each class's Service weighted by replica CPUs x replicas in an
# HTTPRoute under a Gateway (check_deployment.mjs checks each weight against
# the render's own Deployments); by hand: 4 x 46 and 4 x 26.
render fleet-route "" -f "$FIXTURES/fleet/golden/two-generations.per-class.helm-values.yaml" \
  --set-json 'httpRoute.parentRefs=[{"name":"ranking","namespace":"gateways"}]' --set-json 'httpRoute.hostnames=["rank.example"]'
weights=$(sed -n '/^kind: HTTPRoute$/,$s/^ *weight: //p' "$out/fleet-route.yaml" | sort -n | tr '\n' ' ')
[[ $weights == "104 184 " ]] && ok "fleet-route: class weights $weights" || fail "fleet-route: weights '$weights', expected 104 184"
# More classes than a rule's 16 backendRefs: refused, naming the field.
{ echo "classes:"; for i in $(seq 1 17); do
    printf '  - {name: mc-%02d, nodes: 1, replicasPerMachine: 1, resources: {requests: {cpu: 2, memory: 1Gi}, limits: {cpu: 2, memory: 1Gi}}}\n' "$i"
  done; } > "$out/17-classes.yaml"
if why=$("$HELM" template many "$CHART" -f "$out/17-classes.yaml" --set 'httpRoute.parentRefs[0].name=gw' 2>&1); then
  fail "17 classes in one HTTPRoute rendered"
elif [[ $why == *"classes: 17 machine classes"*"at most 16 backendRefs"* ]]; then ok "17 classes refused: one HTTPRoute rule takes 16"
else fail "17 classes refused, but not for the route: $why"; fi
# The topology operator: a ServingPool instead of Deployments, the operator
# itself restricted (Pod Security, in the service's namespace).
render operator "" --set operator.enabled=true
grep -q '^kind: ServingPool$' "$out/operator.yaml" || fail "operator: no ServingPool"
[[ $(grep -c '^kind: Deployment$' "$out/operator.yaml") == 1 ]] || fail "operator: the chart still renders the service's Deployments"
# The admission policy's verdicts and the replicas' scheduling are the real
# API server's and scheduler's: cluster_test.sh.
grep -q '^kind: ValidatingAdmissionPolicy$' "$out/agent-quiet.yaml" && fail "agent.publish=false still renders the admission policy"
"$HELM" template t "$CHART" --kube-version 1.29.0 >/dev/null 2>&1 && fail "the chart rendered for Kubernetes 1.29 (no admission policies, no preStop sleep)"

# The chart's 2-socket example is what the agent plans for that machine.
"$AGENT" plan -o helm-values --xml "$FIXTURES/topologies/xml/32em64t-2n8c2t-pci-normalio.xml" |
  grep -v '^#' > "$out/plan-2s.yaml"
grep -v '^#' "$CHART/examples/two-socket.yaml" | grep -v '^nodes:' | diff -u "$out/plan-2s.yaml" - ||
  fail "examples/two-socket.yaml differs from the agent's plan for that machine"

echo "== chart: NOTES.txt"
# helm template does not render NOTES.txt: a copy of the chart renders it
# inside a ConfigMap instead, with the release's values.
cp -r "$CHART" "$out/notes-chart"
{ echo '{{- define "notes" }}'; cat "$CHART/templates/NOTES.txt"; echo '{{- end }}'; } > "$out/notes-chart/templates/_notes.tpl"
rm "$out/notes-chart/templates/NOTES.txt"
printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  notes: {{ include "notes" . | quote }}\n' \
  > "$out/notes-chart/templates/notes.yaml"
notes=$("$HELM" template numaserve "$out/notes-chart" -n ranking -s templates/notes.yaml -f "$CHART/examples/two-socket.yaml")
for want in "8 replica(s) of 14 CPU / 28511Mi" "exec ds/numaserve-agent -- cat /hints/kubelet-config.yaml" \
            "cluster-plan -o helm-values > fleet-values.yaml" "localhost:9090/placement"; do
  grep -qF "$want" <<<"$notes" || fail "NOTES.txt does not say '$want'"
done
echo "ok NOTES.txt"

echo "== chart: values the schema must refuse"
for bad in "$HERE"/bad-values/*.yaml; do
  expect=$(sed -n '1s/^# expect: //p' "$bad")
  if message=$("$HELM" template t "$CHART" -f "$bad" 2>&1); then
    fail "$(basename "$bad"): accepted"
  elif ! grep -qF -- "$expect" <<<"$message"; then
    fail "$(basename "$bad"): refused, but without naming '$expect': $message"
  else
    echo "ok refused $(basename "$bad"): $expect"
  fi
done

echo "== chart: numaserve.yaml keys are the service's options"
# The schema lists the options users may set; the chart sets the rest.
service_keys=$(sed -n '/service-options:begin/,/service-options:end/p' "$ROOT/docs/reference/options.md" |
  awk -F'`' '/^\| `--/ && $6 != "" {print $6}' | sort)
schema_keys=$( (node -e 'const s=require(process.argv[1]); console.log(Object.keys(s.properties.config.properties).join("\n"))' \
  "$CHART/values.schema.json"; printf '%s\n' model_dir model_repository model_control_mode feature_store feature_store_password_file port admin_port grpc_port shutdown_grace shutdown_idle) | sort)
diff -u <(echo "$service_keys") <(echo "$schema_keys") || fail "values.schema.json config keys differ from the service's options"

echo "== the assertions catch what they must"
defaults=$out/defaults.yaml
mutant() {  # name, sed script: the mutated render must break a promise
  local why
  sed "$2" "$defaults" > "$out/mutant.yaml"
  if why=$(check "$out/mutant.yaml" 2>&1); then fail "mutant $1 passed the assertions"
  else echo "ok mutant $1 caught: $(grep -m1 '^FAIL' <<<"$why")"; fi
}
mutant fractional-cpu 's/cpu: "1"/cpu: "1500m"/'
mutant burstable '0,/memory: "2Gi"/s//memory: "1Gi"/'
mutant writable-root 's/readOnlyRootFilesystem: true/readOnlyRootFilesystem: false/'
mutant added-capability 's/drop: \[ALL\]/drop: [ALL]\n              add: [SYS_NICE]/'
mutant short-grace 's/terminationGracePeriodSeconds: .*/terminationGracePeriodSeconds: 10/'
mutant wide-rbac 's/verbs: \[patch\]/verbs: [get, list, patch]/'
mutant writable-sys '0,/readOnly: true/{/mountPath: \/host\/sys/{n;d}}'
mutant no-readiness 's|path: /readyz|path: /healthz|'
mutant no-spread 's/topologyKey: kubernetes.io\/hostname/topologyKey: topology.kubernetes.io\/zone/'
mutant spread-counts-tainted-nodes 's/nodeTaintsPolicy: Honor/nodeTaintsPolicy: Ignore/'
mutant agent-mounts-kubelet-dir 's|path: /var/lib/kubelet/config.yaml|path: /var/lib/kubelet|'
mutant probes-on-data-port 's/port: admin$/port: http/'
mutant prestop-shell 's/              sleep:/              exec: {command: [sh, -c, "sleep 5"]}\n              sleep:/'
mutant agent-tolerates-all 's/^      containers:$/      tolerations: [{operator: Exists}]\n      containers:/'

# The API server's Pod Security admission catches a service pod that breaks
# the restricted rules, as check_deployment.mjs does.
sed 's/drop: \[ALL\]/drop: [ALL]\n              add: [SYS_NICE]/' "$defaults" > "$out/psa-mutant.yaml"
if server_validate "$out/psa-mutant.yaml" | grep -q '^deployment.apps/rel-defaults-numaserve: .*unrestricted capabilities'; then
  echo "ok mutant added-capability refused by Pod Security too"
else
  fail "Pod Security did not refuse a service pod that adds a capability"
fi

echo "== manifests: kustomize base and overlays"
node "$ROOT/manifests/render-base.mjs" "$out/base" >/dev/null
diff -ru "$ROOT/manifests/base" "$out/base" || fail "manifests/base is stale: run node manifests/render-base.mjs"
for dir in "$ROOT/manifests/base" "$ROOT"/manifests/overlays/*/; do
  name=$(basename "$dir")
  "$KUBECTL" kustomize "$dir" > "$out/kustomize-$name.yaml" || { fail "kubectl kustomize $name"; continue; }
  replicas=$([[ $name == base ]] && echo 1 || echo 2)
  server_validate "$out/kustomize-$name.yaml" > "$out/kustomize-$name.psa" || fail "$name: objects the API server refuses"
  grep -v '^daemonset.apps/numaserve-agent: ' "$out/kustomize-$name.psa" && fail "$name: pods Pod Security (restricted) would refuse"
  check --replicas "$replicas" "$out/kustomize-$name.yaml" || fail "$name: deployment promises broken"
  renders+=("$out/kustomize-$name.yaml")
  echo "ok kustomize $name"
done
sed -n '/^kind: Deployment/,/^---/p' "$out/kustomize-two-numa-nodes.yaml" | grep -q 'cpu: "14"' ||
  fail "overlay two-numa-nodes does not carry the 2-socket plan's 14 CPUs"
grep -q 'schedulerName: topology-aware-scheduler' "$out/kustomize-topology-aware-scheduler.yaml" ||
  fail "overlay topology-aware-scheduler does not select that scheduler"

echo "== manifests: kubelet and scheduler examples"
"$AGENT" plan -o kubelet-config --xml "$FIXTURES/topologies/xml/32em64t-2n8c2t-pci-normalio.xml" |
  diff -u - "$ROOT/manifests/kubelet/two-socket-kubelet-config.yaml" || fail "the kubelet example is not the agent's output"
node --input-type=module -e '
  import fs from "node:fs"; import { createRequire } from "node:module";
  const YAML = createRequire(process.argv[1] + "/x.js")("yaml");
  const config = YAML.parse(fs.readFileSync(process.argv[2], "utf8"));
  const profile = config.profiles.find((p) => p.schedulerName === "topology-aware-scheduler");
  const on = (point) => profile?.plugins?.[point]?.enabled?.some((p) => p.name === "NodeResourceTopologyMatch");
  if (config.kind !== "KubeSchedulerConfiguration" || !on("filter") || !on("score")) {
    console.error("scheduler profile topology-aware-scheduler does not filter and score with NodeResourceTopologyMatch");
    process.exit(1);
  }' "$HERE/node_modules" "$ROOT/manifests/scheduler/scheduler-config.yaml" || fail "scheduler profile"

echo "== yamllint"
lint "$CHART/Chart.yaml" "$CHART/values.yaml" "$CHART/examples" "$ROOT/manifests" "$HERE/bad-values" "${renders[@]}" ||
  fail "yamllint"

if ((failures)); then echo "$failures failure(s)" >&2; exit 1; fi
echo "deployment checks passed"
