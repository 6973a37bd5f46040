#!/usr/bin/env bash
# The agent's and the operator's command lines as a cluster admin meets
# them: exit status and the first words of output for good and bad invocations.
set -u
usage="usage: agent_cli_test.sh path/to/numaserve-topology-agent fixtures-dir path/to/numaserve-operator"
AGENT=${1:?$usage}
FIXTURES=${2:?$usage}
OPERATOR=${3:?$usage}
pass=0 fail=0
check() {  # name, expected status, regex the combined output must match, args...
  local name=$1 want_rc=$2 want=$3; shift 3
  local out rc
  if [[ ${1-} == env ]]; then out=$("$@" 2>&1); else out=$("$AGENT" "$@" 2>&1); fi; rc=$?
  if [[ $rc == "$want_rc" ]] && grep -Eq -- "$want" <<<"$out"; then
    pass=$((pass + 1)); echo "PASS $name"
  else
    fail=$((fail + 1)); printf 'FAIL %s: status %s (want %s), output:\n%s\n' "$name" "$rc" "$want_rc" "$out"
  fi
}
xml=$FIXTURES/topologies/xml/24em64t-2n6c2t-pci.xml
check "text report of an XML machine" 0 'NUMA node 1: CPUs 1,3,5,7,9,11,13,15,17,19,21,23 \(6 cores\)' discover --xml "$xml"
check "JSON report parses and has both nodes" 0 '"os_index": 1' discover --json --xml "$xml"
check "live report includes this process" 0 '^This process: CPUs ' discover
check "synthetic machine" 0 '4 NUMA nodes' discover --synthetic 'pack:2 numa:2 core:2 pu:1'
check "missing XML file is an error naming it" 1 'error: hwloc XML: cannot read /no/such.xml' discover --xml /no/such.xml
check "not an XML topology names the file" 1 'error: hwloc could not load hwloc XML .*README.md' discover --xml "$FIXTURES/topologies/README.md"
check "bad synthetic description is named" 1 "error: bad synthetic topology 'pack:x'" discover --synthetic pack:x
check "two sources at once are refused" 2 'exclude each other' discover --xml "$xml" --synthetic 'numa:2 pu:2'
check "unknown flag" 2 'not expected' discover --bogus
check "no subcommand" 2 'subcommand' 
check "--help" 0 'discover' --help
check "plan as text" 0 'Replica: 10 CPUs' plan --xml "$xml"
check "plan as a kubelet drop-in" 0 'reservedSystemCPUs: "0-1,12-13"' plan --xml "$xml" -o kubelet-config
check "plan as Helm values" 0 'replicasPerMachine: 2' plan --xml "$xml" -o helm-values
check "plan with two replicas per NUMA node" 0 'Replica: 4 CPUs.*2 per NUMA node, 4 per machine' plan --xml "$xml" --replicas-per-numa-node 2
check "bad memory quantity is named" 2 "kube_reserved_memory: bad quantity '1GB'" plan --xml "$xml" --kube-reserved-memory 1GB
check "a bad value from the environment names the variable" 2 'NUMASERVE_REPLICAS_PER_NUMA_NODE' env NUMASERVE_REPLICAS_PER_NUMA_NODE=two "$AGENT" plan --xml "$xml"
check "options come from a YAML file" 0 'Replica: 4 CPUs' plan --xml "$xml" --config "$FIXTURES/agent/two-per-node.yaml"
check "an unknown key in the YAML file names file and line" 2 'bad-key.yaml line 2: unknown option .replica_per_numa_node.' plan --xml "$xml" --config "$FIXTURES/agent/bad-key.yaml"
# cluster-plan on a fleet the agent itself describes: two machine types,
# two nodes each, a node without an agent; objects as kubectl prints them.
fleet=$(mktemp -d)
trap 'rm -rf "$fleet"' EXIT
kubelet=(--kubelet-config "$FIXTURES/kubelet/numa-ready/config.yaml")
node_of() {  # name source-flags...: the agent's NRT and its node's labels
  local name=$1; shift
  "$AGENT" plan -o nrt --node-name "$name" "$@" "${kubelet[@]}"
  printf -- '---\napiVersion: v1\nkind: Node\nmetadata:\n  name: %s\n  labels:\n' "$name"
  "$AGENT" plan -o labels "$@" "${kubelet[@]}" | sed 's/^\([^=]*\)=\(.*\)$/    \1: "\2"/'
  echo ---
}
small=(--xml "$FIXTURES/topologies/xml/24em64t-2n6c2t-pci.xml") big=(--xml "$FIXTURES/topologies/xml/32em64t-2n8c2t-pci-normalio.xml")
{ node_of small-1 "${small[@]}"; node_of small-2 "${small[@]}"; node_of big-1 "${big[@]}"; node_of big-2 "${big[@]}"
  printf 'apiVersion: v1\nkind: Node\nmetadata: {name: other}\n'; } > "$fleet/fleet.yaml"
# Two generations side by side: Xeon E5 (56 threads, NUMA nodes of 28) and
# Xeon Gold (96 threads, NUMA nodes of 48), one core per NUMA node reserved.
e5=(--synthetic "pack:2 numa:1(memory=128GiB) core:14 pu:2") gold=(--synthetic "pack:2 numa:1(memory=192GiB) core:24 pu:2")
{ node_of e5-1 "${e5[@]}"; node_of e5-2 "${e5[@]}"; node_of gold-1 "${gold[@]}"; node_of gold-2 "${gold[@]}"; } > "$fleet/generations.yaml"
check "cluster-plan per-class on two generations: 26 and 46 CPUs, every CPU at work" 0 \
  'fleet: 288 of 288 allocatable CPUs at work \(100.0%\)' cluster-plan "$fleet/generations.yaml"
check "cluster-plan uniform on two generations: 22 CPUs, 1 and 2 per NUMA node, 92% at work" 0 \
  'fleet: 264 of 288 allocatable CPUs at work \(91.7%\)' cluster-plan --sizing uniform "$fleet/generations.yaml"
check "cluster-plan uniform on two generations: the Gold machines take 4 of 22 CPUs" 0 \
  '4 replica\(s\) per node of 22 CPU' cluster-plan --sizing uniform "$fleet/generations.yaml"
class_small=$("$AGENT" plan -o labels --xml "$FIXTURES/topologies/xml/24em64t-2n6c2t-pci.xml" "${kubelet[@]}" | sed -n 's/^numaserve.io\/machine-class=//p')
check "cluster-plan: one class per machine type, named as the agents label them" 0 \
  "^$class_small: 2 node\\(s\\).*" cluster-plan "$fleet/fleet.yaml"
check "cluster-plan: each class its own size (per-class)" 0 '2 replica\(s\) per node of 14 CPU' cluster-plan "$fleet/fleet.yaml"
check "cluster-plan: a node without an agent is unplanned, with the reason" 0 \
  '^unplanned: other: no NodeResourceTopology' cluster-plan "$fleet/fleet.yaml"
check "cluster-plan: uniform sizing, one size for all" 0 '"sizing": "uniform"' cluster-plan --sizing uniform -o json "$fleet/fleet.yaml"
check "cluster-plan: from standard input, as YAML" 0 '^  cpus_allocatable: ' env sh -c "\"\$0\" cluster-plan -o yaml < \"\$1\"" "$AGENT" "$fleet/fleet.yaml"
printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n' > "$fleet/bad.yaml"
check "cluster-plan: another kind names the file and line" 1 'error: .*bad.yaml line 1: kind ConfigMap' cluster-plan "$fleet/bad.yaml"
check "cluster-plan: an unreadable file is named" 1 'error: cannot read /no/such.yaml: No such file or directory' cluster-plan /no/such.yaml
check "cluster-plan: nothing plannable lists every node" 1 'no node can be planned:.*' cluster-plan <(printf 'kind: Node\nmetadata: {name: lone}\n')
check "cluster-plan: a bad sizing is refused" 2 'want per-class or uniform' cluster-plan --sizing half "$fleet/fleet.yaml"
check "cluster-plan: -o takes text, json, yaml or helm-values" 2 'want text, json, yaml or helm-values' cluster-plan -o nrt "$fleet/fleet.yaml"
check "cluster-plan -o helm-values: one class per machine generation, the plan above as comments" 0 \
  '^#   fleet: 288 of 288 allocatable CPUs at work' cluster-plan -o helm-values "$fleet/generations.yaml"
check "cluster-plan -o helm-values: each class its size" 0 '^        cpu: 46$' cluster-plan -o helm-values "$fleet/generations.yaml"
check "cluster-plan --hugepages-per-replica: machines without those hugepages are unplanned, saying so" 1 \
  'no NUMA zone has 1Gi of hugepages-1Gi' cluster-plan --hugepages-per-replica hugepages-1Gi=1Gi "$fleet/generations.yaml"
check "cluster-plan --hugepages-per-replica: a bad size is refused" 2 'hugepages-<size>=<quantity>' \
  cluster-plan --hugepages-per-replica memory=1Gi "$fleet/generations.yaml"
check "the operator is its own program, not an agent subcommand" 2 'A subcommand is required' operator
check "operator: a lease shorter than 3 s is refused" 2 'lease-duration' env "$OPERATOR" run --apiserver-url https://127.0.0.1:1 --lease-duration 1s
check "operator: outside a pod without --apiserver-url" 2 'no API server .*--apiserver-url' env env -u KUBERNETES_SERVICE_HOST "$OPERATOR" run
check "operator: a bad duration names its option" 2 'resync_interval' env "$OPERATOR" run --apiserver-url https://127.0.0.1:1 --resync-interval soon
check "operator: no subcommand" 2 'subcommand' env "$OPERATOR"
check "operator: --help" 0 'run' env "$OPERATOR" --help
check "options table in Markdown" 0 '^\| `--hints-dir DIR` \| `NUMASERVE_HINTS_DIR` \| `hints_dir` \|' options
check "unknown output format" 2 'output' plan --xml "$xml" -o xml
check "a plan that cannot be made says why" 1 'no NUMA node can hold a replica .node 0: it has 6 core.s. and reserving 6 per node leaves none' plan --xml "$xml" --reserved-cores-per-node 6
# The documented option tables are the programs' own, so they cannot drift.
readme=$FIXTURES/../../docs/reference/options.md
for program in agent:"$AGENT" operator:"$OPERATOR"; do
  name=${program%%:*} binary=${program#*:}
  if diff <("$binary" options) <(sed -n "/<!-- $name-options:begin -->/,/<!-- $name-options:end -->/p" "$readme" | sed '1d;$d') >/dev/null; then
    pass=$((pass + 1)); echo "PASS docs/reference/options.md $name option table matches 'options'"
  else
    fail=$((fail + 1)); echo "FAIL docs/reference/options.md $name option table differs from '$binary options'; run scripts/update-option-tables.sh"
  fi
done
if command -v python3 >/dev/null; then
  json=$("$AGENT" discover --json --xml "$xml")
  if python3 -c 'import json,sys; d=json.load(sys.stdin); assert len(d["topology"]["nodes"])==2' <<<"$json"; then
    pass=$((pass + 1)); echo "PASS JSON loads with python"
  else
    fail=$((fail + 1)); echo "FAIL JSON loads with python"
  fi
fi
echo "$pass passed, $fail failed"
((fail == 0))
