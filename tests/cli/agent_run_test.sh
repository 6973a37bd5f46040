#!/usr/bin/env bash
# `numaserve-topology-agent run` as the DaemonSet runs it: one-shot mode,
# then the long-running loop with its HTTP endpoint, SIGHUP and SIGTERM.
set -u
AGENT=${1:?usage: agent_run_test.sh path/to/numaserve-topology-agent}
work=$(mktemp -d)
pid=
cleanup() { [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [[ -f $work/log ]] && sed 's/^/   log: /' "$work/log" | tail -5; }
machine=(--synthetic "pack:2 numa:1(memory=64GiB) core:8 pu:2")

# GET over bash's /dev/tcp: no curl needed on a fresh machine.
http_get() {  # port path -> status line and body on stdout
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf 'GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' "$2" >&3
  timeout 5 cat <&3
  exec 3<&-
}

if "$AGENT" run --oneshot "${machine[@]}" --hints-dir "$work/hints" --node-name n1 2>"$work/log" &&
   [[ -s $work/hints/plan.json && -s $work/hints/kubelet-config.yaml && -s $work/hints/noderesourcetopology.yaml ]]; then
  ok "--oneshot writes the hints and exits 0"
else
  bad "--oneshot writes the hints and exits 0"
fi
if ! "$AGENT" run --oneshot --xml /no/such.xml --hints-dir "$work/hints" 2>"$work/log" &&
   grep -q 'level=error component=agent msg="discover: hwloc XML: cannot read /no/such.xml' "$work/log"; then
  ok "--oneshot on an unreadable machine exits 1 and logs why"
else
  bad "--oneshot on an unreadable machine exits 1 and logs why"
fi

# The chart sets NUMASERVE_LOG_FORMAT=json: every line must be a JSON object.
if NUMASERVE_LOG_FORMAT=json "$AGENT" run --oneshot "${machine[@]}" --hints-dir "$work/hints-json" --log-level debug \
     2>"$work/log" && [[ -s $work/log ]] && python3 -c '
import json, sys
for line in open(sys.argv[1]):
    assert json.loads(line)["component"] == "agent"' "$work/log"; then
  ok "NUMASERVE_LOG_FORMAT=json logs JSON"
else
  bad "NUMASERVE_LOG_FORMAT=json logs JSON"
fi

NUMASERVE_INTERVAL=1h "$AGENT" run "${machine[@]}" --hints-dir "$work/hints2" --listen-address 127.0.0.1 --port 0 \
  2>"$work/log" &
pid=$!
port=
for _ in $(seq 50); do
  port=$(sed -n 's/.*msg=listening .* port=\([0-9]*\).*/\1/p' "$work/log")
  [[ -n $port ]] && grep -q 'msg=cycle ok=true' "$work/log" && break
  sleep 0.1
done
if [[ -n $port ]] && http_get "$port" /healthz | grep -q '^ok'; then ok "run serves /healthz"; else bad "run serves /healthz"; fi
if http_get "$port" /plan | grep -q '"replicas_per_machine": 2'; then ok "run serves /plan"; else bad "run serves /plan"; fi
if http_get "$port" /metrics | grep -q '^numaserve_agent_cycles_total 1$'; then ok "run serves /metrics"; else bad "run serves /metrics"; fi
kill -HUP "$pid"
for _ in $(seq 50); do grep -q 'cycles=2' "$work/log" && break; sleep 0.1; done
if grep -q 'msg=cycle ok=true reason=SIGHUP cycles=2' "$work/log"; then
  ok "SIGHUP rediscovers at once (interval is 1h)"
else
  bad "SIGHUP rediscovers at once (interval is 1h)"
fi
kill -TERM "$pid"
status=
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || { wait "$pid"; status=$?; break; }; sleep 0.1; done
if [[ $status == 0 ]]; then ok "SIGTERM stops it with status 0 within 5 s"; pid=; else bad "SIGTERM stops it with status 0 within 5 s"; fi

# A machine whose NUMA nodes 2 and 3 keep one core each: a plan with notes.
# One whose export records no memory sizes: no plan (exit 1), yet the
# topology and the NodeResourceTopology are published.
fixtures=$(cd "$(dirname "$0")/../fixtures" && pwd)
if "$AGENT" run --oneshot --xml "$fixtures/topologies/xml/16amd64-8n2c-cpusets.xml" --hints-dir "$work/h3" \
     --node-name n3 2>"$work/log" && grep -q '"replicas": 0' "$work/h3/plan.json" &&
   [[ -s $work/h3/noderesourcetopology.yaml ]]; then
  ok "an irregular machine plans with notes and publishes"
else
  bad "an irregular machine plans with notes and publishes"
fi
# Into the same directory: the earlier machine's plan files must go.
before=$(md5sum < "$work/h3/topology.json")
if ! "$AGENT" run --oneshot --xml "$fixtures/topologies/xml/16em64t-4s2c2t.xml" --hints-dir "$work/h3" \
     --node-name n4 2>"$work/log" && grep -q 'msg="plan: ' "$work/log" &&
   [[ $(md5sum < "$work/h3/topology.json") != "$before" ]] && [[ -s $work/h3/noderesourcetopology.yaml ]] &&
   [[ ! -e $work/h3/plan.json && ! -e $work/h3/kubelet-config.yaml && ! -e $work/h3/helm-values.yaml ]]; then
  ok "without a plan the topology and NRT are still published, an old plan removed (exit 1)"
else
  bad "without a plan the topology and NRT are still published, an old plan removed (exit 1)"
fi

# State files of another shape (damaged, or another kubelet's format): each
# an error naming the file and the member, exit 1, and the topology and the
# NodeResourceTopology published all the same. They aborted the agent.
if ! "$AGENT" run --oneshot "${machine[@]}" --kubelet-state-dir "$fixtures/kubelet/other-format" \
     --podresources-socket "" --hints-dir "$work/h6" --node-name n6 2>"$work/log"; then status=1; else status=0; fi
if [[ $status == 1 ]] && grep -q 'kubelet_files: .*other-format/cpu_manager_state: policyName: want a string' "$work/log" &&
   grep -q 'memory_manager_state: machineState.0.memoryMap: want an object' "$work/log" &&
   grep -q 'name: "n6"' "$work/h6/noderesourcetopology.yaml" && [[ -s $work/h6/topology.json ]]; then
  ok "unparsable kubelet state files are named errors (exit 1), the NRT still written"
else
  bad "unparsable kubelet state files are named errors (exit 1), the NRT still written"
fi

# A change to the kubelet's state runs a cycle within a second (interval 1h).
mkdir -p "$work/state"
cp "$fixtures/kubelet/numa-ready/cpu_manager_state" "$work/state/"
"$AGENT" run "${machine[@]}" --interval 1h --kubelet-state-dir "$work/state" --podresources-socket "$work/none.sock" \
  --hints-dir "$work/h5" --listen-address 127.0.0.1 --port 0 2>"$work/log" &
pid=$!
for _ in $(seq 50); do grep -q 'msg=cycle' "$work/log" && break; sleep 0.1; done
touch "$work/state/cpu_manager_state"
seen=
for _ in $(seq 30); do  # 3 s: the agent's bound is 1 s; the rest is slack for a loaded machine
  grep -q "reason=\"changed $work/state/cpu_manager_state\" cycles=2" "$work/log" && { seen=1; break; }
  sleep 0.1
done
if [[ -n $seen ]]; then ok "touching cpu_manager_state runs a cycle"; else bad "touching cpu_manager_state runs a cycle"; fi
touch "$work/state/unrelated"
sleep 1.5
if ! grep -q 'cycles=3' "$work/log"; then ok "other files in the state dir do not"; else bad "other files in the state dir do not"; fi
kill -TERM "$pid"; wait "$pid"; pid=

echo "$pass passed, $fail failed"
((fail == 0))
