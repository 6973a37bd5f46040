#!/usr/bin/env bash
# Runs inside the multi-NUMA VM (numa-vm.sh): `numaserve serve
# --replicas-per-numa-node 1` must start one replica per node, each reporting
# its own node's CPUs, memory bound to that node and >= 99% of the model's
# weight pages on it; killing the node-1 replica must bring a new one up on
# node 1 while the other keeps answering; SIGTERM must end the group with 0.
# Usage: supervisor_in_vm.sh NUMASERVE DEMO_DIR
set -euo pipefail
numaserve=$1 demo=$2
port=18090
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
url=http://127.0.0.1:$port

"$numaserve" serve --model-dir "$demo/ranker_a" --feature-store "$demo/store.jsonl" --replicas-per-numa-node 1 \
  --port $port --listen-address 127.0.0.1 --warmup-rounds 1 2> /tmp/supervisor.log &
supervisor=$!
ready=0
for _ in $(seq 1 900); do  # two LibTorch processes start side by side under TCG
  if curl -sf --max-time 5 "$url/readyz" > /dev/null; then ready=1; break; fi
  kill -0 $supervisor 2> /dev/null || break
  sleep 0.2
done
if ((!ready)); then cat /tmp/supervisor.log; echo "supervisor checks failed: not ready"; exit 1; fi

# SO_REUSEPORT spreads new connections over the replicas: ask until both answered.
declare -A seen
for _ in $(seq 1 60); do
  p=$(curl -sf --max-time 30 "$url/placement") || continue
  node=$(jq -r .numa_nodes <<< "$p")
  [[ -n ${seen[$node]:-} ]] && continue
  seen[$node]=$p
  cpus=$(cat /sys/devices/system/node/node$node/cpulist)
  echo "replica on node $node: instance=\"$(jq -r .instance <<< "$p")\" cpus=$(jq -r .cpus <<< "$p")" \
       "membind=$(jq -r .memory_policy.nodes <<< "$p") model_pages=$(jq -c '.models[0].pages_per_node' <<< "$p")"
  [[ $(jq -r .cpus <<< "$p") == "$cpus" ]] || fail "node $node replica has cpus $(jq -r .cpus <<< "$p"), want $cpus"
  [[ $(jq -r .memory_policy.nodes <<< "$p") == "$node" ]] || fail "node $node replica binds memory to $(jq -r .memory_policy.nodes <<< "$p")"
  jq -e --arg n "$node" '.models[0].local_fraction >= 0.99 and (.models[0].pages_per_node | keys == [$n])' \
    <<< "$p" > /dev/null || fail "node $node replica's model pages are not on node $node"
  ((${#seen[@]} == 2)) && break
done
((${#seen[@]} == 2)) || fail "saw replicas on nodes ${!seen[*]} only"

# Kill the node-1 replica; the node-0 replica must answer every request meanwhile.
old=""
[[ -n ${seen[1]:-} ]] && old=$(jq -r '.instance | split("/")[1] | split(" ")[0]' <<< "${seen[1]}")
if [[ $old =~ ^[1-9][0-9]*$ ]]; then kill -9 "$old"; else fail "no node-1 replica to kill"; fi
sleep 0.5
answered=0 refused=0 replaced=0
for _ in $(seq 1 400); do
  status=$(curl -s --max-time 30 -o /tmp/p.json -w '%{http_code}' "$url/placement") || status=000
  if [[ $status != 200 ]]; then refused=$((refused + 1)); continue; fi
  answered=$((answered + 1))
  if [[ $(jq -r .numa_nodes /tmp/p.json) == 1 ]]; then
    new=$(jq -r '.instance | split("/")[1] | split(" ")[0]' /tmp/p.json)
    if [[ $new != "$old" ]]; then
      replaced=1
      echo "replacement on node 1: pid $new (was $old), cpus $(jq -r .cpus /tmp/p.json), local $(jq .models[0].local_fraction /tmp/p.json)"
      jq -e '.models[0].local_fraction >= 0.99' /tmp/p.json > /dev/null || fail "replacement's pages not on node 1"
      break
    fi
  fi
  sleep 0.1
done
echo "while replacing: $answered answered, $refused failed"
((replaced)) || fail "no replacement replica on node 1"
((refused == 0)) || fail "$refused requests failed while a replica was replaced"

kill -TERM $supervisor
rc=0
wait $supervisor || rc=$?
((rc == 0)) || { fail "supervisor exit status $rc after SIGTERM"; cat /tmp/supervisor.log; }
grep -q 'replica died; restarting' /tmp/supervisor.log || fail "the supervisor did not log the restart"
echo "supervisor checks failed: $failures"
exit $((failures > 0))
