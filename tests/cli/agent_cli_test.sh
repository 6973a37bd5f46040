#!/usr/bin/env bash
# The agent's command line as an operator meets it: exit status and the first
# words of output for good and bad invocations.
set -u
AGENT=${1:?usage: agent_cli_test.sh path/to/numaserve-topology-agent fixtures-dir}
FIXTURES=${2:?usage: agent_cli_test.sh path/to/numaserve-topology-agent fixtures-dir}
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
check "plan as Helm values" 0 'replicasPerNode: 2' plan --xml "$xml" -o helm-values
check "plan with two replicas per NUMA node" 0 'Replica: 4 CPUs.*2 per NUMA node, 4 per machine' plan --xml "$xml" --replicas-per-numa-node 2
check "bad memory quantity is named" 2 "kube_reserved_memory: bad quantity '1GB'" plan --xml "$xml" --kube-reserved-memory 1GB
check "a bad value from the environment names the variable" 2 'NUMASERVE_REPLICAS_PER_NUMA_NODE' env NUMASERVE_REPLICAS_PER_NUMA_NODE=two "$AGENT" plan --xml "$xml"
check "options come from a YAML file" 0 'Replica: 4 CPUs' plan --xml "$xml" --config "$FIXTURES/agent/two-per-node.yaml"
check "an unknown key in the YAML file names file and line" 2 'bad-key.yaml line 2: unknown option .replica_per_numa_node.' plan --xml "$xml" --config "$FIXTURES/agent/bad-key.yaml"
check "options table in Markdown" 0 '^\| `--hints-dir DIR` \| `NUMASERVE_HINTS_DIR` \| `hints_dir` \|' options
check "unknown output format" 2 'output' plan --xml "$xml" -o xml
check "a plan that cannot be made says why" 1 'no NUMA node can hold a replica .node 0: it has 6 core.s. and reserving 6 per node leaves none' plan --xml "$xml" --reserved-cores-per-node 6
# The README's option table is the program's own, so they cannot drift.
readme=$FIXTURES/../../README.md
if diff <("$AGENT" options) <(sed -n '/<!-- agent-options:begin -->/,/<!-- agent-options:end -->/p' "$readme" | sed '1d;$d') >/dev/null; then
  pass=$((pass + 1)); echo "PASS README option table matches 'options'"
else
  fail=$((fail + 1)); echo "FAIL README option table differs from '$AGENT options'; run scripts/update-option-tables.sh"
fi
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
