# Shared by the bench scripts (sourced): start and stop pinned servers,
# read CPU time, describe the machine. Every server started here is killed
# when the script exits, however it exits.

server_pids=()
server_pid=""  # the last one started

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Children first: a supervisor's (or uvicorn's) workers must not outlive it.
cleanup_servers() {
  local pid
  for pid in "${server_pids[@]}"; do
    pkill -KILL -P "$pid" 2> /dev/null || true
    kill -KILL "$pid" 2> /dev/null || true
  done
}
trap cleanup_servers EXIT

# wait_ready PORT WHAT LOG: up to 2 minutes for /readyz; else the log and exit 1.
wait_ready() {
  for _ in $(seq 1 600); do
    curl -sf --max-time 2 "http://127.0.0.1:$1/readyz" > /dev/null && return 0
    if ! kill -0 "$server_pid" 2> /dev/null; then break; fi
    sleep 0.2
  done
  echo "bench: $2 did not become ready on port $1; its log:" >&2
  cat "$3" >&2
  exit 1
}

# start_server PORT CPUS MODEL_DIR STORE [extra serve flags...]
start_server() {
  local port=$1 cpus=$2 model=$3 store=$4
  shift 4
  local server_log
  server_log=$(mktemp)
  taskset -c "$cpus" "$numaserve" serve --model-dir "$model" --feature-store "$store" --port "$port" \
    --listen-address 127.0.0.1 --log-level warning "$@" 2> "$server_log" &
  server_pid=$!
  server_pids+=("$server_pid")
  wait_ready "$port" "numaserve" "$server_log"
}

# SIGTERM to every server, as a pod gets it; SIGKILL to any still up after 30 s.
stop_servers() {
  local pid
  for pid in "${server_pids[@]}"; do kill -TERM "$pid" 2> /dev/null || true; done
  for pid in "${server_pids[@]}"; do
    timeout 30 tail --pid="$pid" -f /dev/null || kill -KILL "$pid" 2> /dev/null || true
  done
  server_pids=()
}

# {"user": seconds, "system": seconds}: a process's CPU so far (all its
# threads), user space and kernel apart — the kernel's share of serving is
# mostly loopback TCP, which a faster server cannot cut.
process_user_system_seconds() {
  awk -v hz="$(getconf CLK_TCK)" '{ printf "{\"user\": %.3f, \"system\": %.3f}\n", $14 / hz, $15 / hz }' "/proc/$1/stat" \
    2> /dev/null || echo '{"user": 0, "system": 0}'
}

# User + system CPU seconds of a process so far.
process_cpu_seconds() {
  process_user_system_seconds "$1" | jq '.user + .system'
}

# {"ns-worker": seconds, "ns-accept": seconds, ...}: user + system CPU of a
# process's threads so far, summed by thread name (numbers stripped), so the
# HTTP side and the inference workers can be told apart.
thread_cpu_seconds() {
  local task
  for task in /proc/"$1"/task/*; do
    printf '%s %s\n' "$(sed 's/-[0-9]*$//' "$task/comm" 2> /dev/null)" "$(awk '{ print $14 + $15 }' "$task/stat" 2> /dev/null)"
  done | jq -Rn --argjson hz "$(getconf CLK_TCK)" \
    'reduce (inputs | split(" ") | select(length == 2 and .[1] != "")) as [$name, $ticks]
       ({}; .[$name] += ($ticks | tonumber) / $hz)'
}

# {"requests", "parse", "query", "extract", "encode", "forward", "forwards",
# "forward_requests"}: /predict's answered requests and the seconds the
# server counted in each of its stages so far (forward: the workers' time in
# forward calls), from its /metrics. A figure the server does not export is 0.
scrape_stages() {
  curl -sf --max-time 10 "http://127.0.0.1:$1/metrics" | awk '
    /^numaserve_requests_total\{route="\/predict",code="200"\}/ { requests += $2 }
    /^numaserve_grpc_requests_total\{method="\/numaserve.v1.Ranking\/Predict",code="OK"\}/ { requests += $2 }
    /^numaserve_requests_total\{route="\/v2\/models\/\{name\}\/infer",code="200"\}/ { requests += $2 }
    /^numaserve_stage_seconds_sum\{/ {
      if (match($0, /stage="[a-z]+"/)) stage[substr($0, RSTART + 7, RLENGTH - 8)] += $2
    }
    /^numaserve_worker_forward_seconds_total\{/ { forward += $2 }
    /^numaserve_worker_forwards_total\{/ { forwards += $2 }
    /^numaserve_worker_forward_requests_total\{/ { forward_requests += $2 }
    END {
      if (forward == 0) forward = stage["forward"]  # a server without per-worker figures: no batches either
      printf "{\"requests\":%d,\"parse\":%.9g,\"query\":%.9g,\"extract\":%.9g,\"encode\":%.9g,", requests,
        stage["parse"], stage["query"], stage["extract"], stage["encode"]
      printf "\"forward\":%.9g,\"forwards\":%d,\"forward_requests\":%d}\n", forward, forwards, forward_requests
    }'
}

# syscall_profile PID SECONDS: where the process's CPU went over SECONDS,
# from perf's kernel call stacks (1 kHz), as seconds of CPU: {"send", and of
# it "loopback_receive" (the kernel delivering the bytes sent into the peer's
# socket on this CPU and waking its reader: on a real network, the client
# machine's work), "recv", "epoll", "other_kernel", "user"}. Needs perf.
syscall_profile() {
  local data
  data=$(mktemp)
  perf record -q -e cpu-clock -F 1000 -g -p "$1" -o "$data" -- sleep "$2" > /dev/null 2>&1 || true
  perf script -i "$data" -F ip,sym 2> /dev/null | awk -v hz=1000 '
    BEGIN { RS = ""; FS = "\n" }
    {
      if ($1 !~ /^[ \t]*ffffffff/) { user++; next }
      if ($0 ~ /__sys_sendmsg/) { send++; if ($0 ~ /process_backlog|__netif_receive_skb/) loopback++ }
      else if ($0 ~ /__sys_recvfrom|__sys_recvmsg/) recv++
      else if ($0 ~ /do_epoll_wait|do_epoll_ctl/) epoll++
      else other++
    }
    END {
      printf "{\"send\":%g,\"loopback_receive\":%g,\"recv\":%g,\"epoll\":%g,\"other_kernel\":%g,\"user\":%g}\n",
        send / hz, loopback / hz, recv / hz, epoll / hz, other / hz, user / hz
    }'
  rm -f "$data"
}

machine_summary() {
  echo "$(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, $(numactl --hardware | head -1), kernel $(uname -r)"
}

# User + system CPU seconds of a process and its children (a supervisor's workers).
tree_cpu_seconds() {
  local total pid
  total=$(process_cpu_seconds "$1")
  for pid in $(pgrep -P "$1"); do
    total=$(awk -v a="$total" -v b="$(process_cpu_seconds "$pid")" 'BEGIN { print a + b }')
  done
  echo "$total"
}

# expand_cpus "0-2,5" -> "0 1 2 5"
expand_cpus() {
  local part out=()
  for part in ${1//,/ }; do
    if [[ $part == *-* ]]; then out+=($(seq "${part%-*}" "${part#*-}")); else out+=("$part"); fi
  done
  echo "${out[*]}"
}

# join_cpus "0 1 2 5" -> "0,1,2,5"
join_cpus() { local IFS=,; echo "$*"; }

# prepare_models: the packages, the build, and the demo models with the
# reference-DLRM-structured model beside them (tests/service/dlrm_models.py
# --like ranker_a) in $models (default $build/bench-models), made once;
# sets $models, $bench and $numaserve.
prepare_models() {
  models=${models:-$build/bench-models}
  scripts/install-deps.sh bench
  ./scripts/build.sh > /dev/null
  bench=$build/bench/numaserve-bench numaserve=$build/service/numaserve
  [[ -f $models/ranker_a/model.pt ]] || "$numaserve" make-demo-models "$models" > /dev/null
  [[ -f $models/dlrm/model.pt ]] || /usr/bin/python3 tests/service/dlrm_models.py --like "$models/ranker_a" dlrm "$models"
}
