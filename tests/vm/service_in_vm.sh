#!/usr/bin/env bash
# Runs inside the multi-NUMA VM (numa-vm.sh): for each NUMA node given, the
# real `numaserve serve` starts inside a cgroup v2 whose cpuset.cpus are the
# node's CPUs and cpuset.mems the node — what the kubelet's CPU and Memory
# Managers do to a Guaranteed pod — and /placement must report exactly that:
# cpus and mems, every worker thread confined to the node, and >= 99% of the
# model's weight pages on it. A /predict must score, SIGTERM must exit 0.
# Usage: service_in_vm.sh NUMASERVE DEMO_DIR NODE...
set -euo pipefail
numaserve=$1 demo=$2
shift 2
port=18080
failures=0
fail() { echo "FAIL node $node: $*"; failures=$((failures + 1)); }

echo +cpuset > /sys/fs/cgroup/cgroup.subtree_control
for node in "$@"; do
  cpus=$(cat /sys/devices/system/node/node$node/cpulist)
  cg=/sys/fs/cgroup/numaserve-node$node
  mkdir -p "$cg"
  echo "$cpus" > "$cg/cpuset.cpus"
  echo "$node" > "$cg/cpuset.mems"
  log=/tmp/numaserve-node$node.log
  # The child joins the cgroup before exec: numaserve starts already pinned.
  sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$cg" \
    "$numaserve" serve --model-dir "$demo/ranker_a" --feature-store "$demo/store.jsonl" \
      --port $port --listen-address 127.0.0.1 --warmup-rounds 1 2> "$log" &
  pid=$!
  ready=0
  for _ in $(seq 1 600); do  # LibTorch alone takes ~13 s to start under TCG
    if curl -sf --max-time 5 "http://127.0.0.1:$port/readyz" > /dev/null; then ready=1; break; fi
    kill -0 $pid 2> /dev/null || break
    sleep 0.2
  done
  if ((!ready)); then fail "not ready"; cat "$log"; kill -9 $pid 2> /dev/null || true; continue; fi

  placement=$(curl -sf --max-time 30 "http://127.0.0.1:$port/placement")
  echo "node $node: cpus=$(jq -r .cpus <<< "$placement") mems=$(jq -r .mems <<< "$placement")" \
       "workers=$(jq -c '[.workers[].cpus]' <<< "$placement")" \
       "model_pages=$(jq -c '.models[0].pages_per_node' <<< "$placement")" \
       "local=$(jq '.models[0].local_fraction' <<< "$placement")"
  [[ $(jq -r .cpus <<< "$placement") == "$cpus" ]] || fail "cpus $(jq -r .cpus <<< "$placement") != $cpus"
  [[ $(jq -r .mems <<< "$placement") == "$node" ]] || fail "mems != $node"
  [[ $(jq -r .numa_nodes <<< "$placement") == "$node" ]] || fail "numa_nodes != $node"
  # Every thread the kernel lists, workers and OpenMP threads included, may
  # only run on the node's CPUs.
  node_cpus=$(jq -r '.threads[] | select(.name | startswith("ns-worker")) | .allowed_cpus' <<< "$placement" | sort -u)
  [[ -n $node_cpus ]] || fail "no worker threads listed"
  for allowed in $node_cpus; do
    for c in $(seq $(cut -d- -f1 <<< "${allowed%%,*}") $(cut -d- -f2 <<< "${allowed##*,}")); do
      grep -qx "$c" < <(for r in ${cpus//,/ }; do seq ${r%-*} ${r#*-}; done) || fail "worker CPU $c outside $cpus"
    done
  done
  jq -e --arg n "$node" '.models[0].local_fraction >= 0.99 and (.models[0].pages_per_node | keys == [$n])' \
    <<< "$placement" > /dev/null || fail "model pages not on node $node"

  status=$(curl -s --max-time 30 -o /tmp/predict.json -w '%{http_code}' -X POST "http://127.0.0.1:$port/predict" \
    -d '{"user": {"id": "u1"}, "items": [{"id": "i1"}, {"id": "i2"}]}')
  [[ $status == 200 && $(jq '.scores | length' /tmp/predict.json) == 2 ]] || fail "/predict answered $status"

  kill -TERM $pid
  rc=0
  wait $pid || rc=$?
  ((rc == 0)) || { fail "exit status $rc after SIGTERM"; cat "$log"; }
done
echo "service placement checks failed: $failures"
exit $((failures > 0))
