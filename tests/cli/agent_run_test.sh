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
if grep -q 'msg=rediscover reason=SIGHUP' "$work/log" && grep -q 'cycles=2' "$work/log"; then
  ok "SIGHUP rediscovers at once (interval is 1h)"
else
  bad "SIGHUP rediscovers at once (interval is 1h)"
fi
kill -TERM "$pid"
status=
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || { wait "$pid"; status=$?; break; }; sleep 0.1; done
if [[ $status == 0 ]]; then ok "SIGTERM stops it with status 0 within 5 s"; pid=; else bad "SIGTERM stops it with status 0 within 5 s"; fi

echo "$pass passed, $fail failed"
((fail == 0))
