#!/usr/bin/env bash
# Builds the four images for real (podman, offline; docker/build-images.sh)
# and runs them as a user would:
#   - numaserve-demo: non-root, read-only root filesystem, /readyz and a
#     /predict with the demo models, its HEALTHCHECK, SIGTERM through tini
#     drains and exits 0;
#   - the same under --cpuset-cpus: /placement reports that cpuset, and
#     every thread of the service is allowed only those CPUs;
#   - numaserve (no model): refuses to start, saying what is missing;
#   - numaserve-topology-agent: `discover` and `plan -o helm-values`;
#   - numaserve-operator: `run` outside a cluster refuses, naming the option;
#   - every image: no shell, no package manager, no setuid or setgid file,
#     uid 65532, OCI labels naming the commit, and within its size bound.
# Prints the image sizes.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VERSION=$(sed -n 's/^project(numaserve VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")
"$ROOT/docker/build-images.sh" "$VERSION"
eval "$("$ROOT/scripts/containers.sh")"
DEMO=localhost/numaserve-demo:$VERSION SERVICE=localhost/numaserve:$VERSION AGENT=localhost/numaserve-topology-agent:$VERSION
OPERATOR=localhost/numaserve-operator:$VERSION

containers=()
TMPDIR_LIST=$(mktemp)
cleanup() { for c in "${containers[@]}"; do podman rm -f "$c" >/dev/null 2>&1 || true; done; rm -f "$TMPDIR_LIST"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# Without systemd podman cannot schedule health-check timers and says so on
# every start and stop of an image with a HEALTHCHECK; the check is run by
# hand below, so that complaint is dropped.
podman() { command podman "$@" 2> >(grep -v 'get systemd connection' >&2); }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start NAME PORT [podman run options...]: the demo image on the host network
start() {
  local name=$1 port=$2; shift 2
  containers+=("$name")
  # No systemd here to run health-check timers; `podman healthcheck run` below runs it.
  podman run -d --name "$name" --network host --read-only --health-interval disable \
    -e NUMASERVE_PORT="$port" "$@" "$DEMO" >/dev/null
  for _ in $(seq 120); do
    curl -sf "localhost:$port/readyz" >/dev/null && return 0
    [[ $(podman inspect -f '{{.State.Running}}' "$name") == true ]] || break
    sleep 1
  done
  podman logs "$name" >&2 || true
  fail "$name did not turn ready"
}

echo "== demo image: ready, predict, health check, SIGTERM"
[[ $(podman image inspect -f '{{.Config.User}}' "$DEMO") == 65532:65532 ]] || fail "the image does not run as 65532"
port=$(free_port)
start ns-image-demo "$port"
reply=$(curl -sf -X POST "localhost:$port/predict" -d '{"user": {"id": "u42"}, "items": [{"id": "i7"}, {"id": "i99"}, {"id": "i3"}]}')
[[ $(jq '.scores | length' <<<"$reply") == 3 && $(jq -r .model <<<"$reply") == ranker_a ]] || fail "predict: $reply"
echo "predict: $reply"
bad=$(curl -s -o /dev/null -w '%{http_code}' -X POST "localhost:$port/predict" -d '{"items": 7}')
[[ $bad == 400 ]] || fail "a bad request got HTTP $bad"
podman healthcheck run ns-image-demo >/dev/null || fail "HEALTHCHECK (numaserve health) fails on a ready service"
[[ $(ps -o uid= -p "$(podman inspect -f '{{.State.Pid}}' ns-image-demo)" | tr -d ' ') == 65532 ]] || fail "the service runs as root"
podman exec ns-image-demo numaserve make-demo-models /usr/local/x --embedding-mb 1 >/dev/null 2>&1 &&
  fail "the root filesystem is writable"
podman stop -t 30 ns-image-demo >/dev/null
status=$(podman wait ns-image-demo)
[[ $status == 0 ]] || { podman logs ns-image-demo >&2; fail "exit status $status after SIGTERM"; }
podman logs ns-image-demo 2>&1 | grep -q '"msg":"draining","signal":"SIGTERM"' || fail "SIGTERM did not reach numaserve through tini"
echo "ok: ready, predict, 400, health check, uid 65532, read-only root, SIGTERM -> drained, exit 0"

echo "== demo image under --cpuset-cpus"
cpu=$(( $(nproc) - 1 ))
port=$(free_port)
start ns-image-cpuset "$port" --cpuset-cpus "$cpu"
placement=$(curl -sf "localhost:$port/placement")
echo "placement: $(jq -c '{cpus, mems, numa_nodes, workers}' <<<"$placement")"
[[ $(jq -r .cpus <<<"$placement") == "$cpu" ]] || fail "/placement cpus is not the container's cpuset $cpu"
[[ $(jq "[.workers[] | select(.cpus != \"$cpu\")] | length" <<<"$placement") == 0 ]] || fail "a worker outside the cpuset"
[[ $(jq "[.threads[] | select(.allowed_cpus != \"$cpu\")] | length" <<<"$placement") == 0 ]] || fail "a thread may run outside the cpuset"
podman stop -t 30 ns-image-cpuset >/dev/null
echo "ok: cpuset $cpu reported, every worker and thread inside it"

echo "== service image without a model"
if message=$(podman run --rm "$SERVICE" 2>&1); then fail "started without a model"; fi
grep -q 'no model' <<<"$message" || fail "no clear message without a model: $message"
echo "ok: $(grep -o '"msg":"[^"]*"' <<<"$message")"

echo "== agent image"
discover=$(podman run --rm --read-only "$AGENT")
grep -q '^Machine (live system)' <<<"$discover" || fail "agent discover: $discover"
podman run --rm --read-only "$AGENT" plan -o helm-values | grep -q '^replicasPerMachine: [1-9]' || fail "agent plan -o helm-values"
[[ $(podman image inspect -f '{{.Config.User}}' "$AGENT") == 65532:65532 ]] || fail "the agent image runs as root"
echo "ok: $(head -1 <<<"$discover")"

echo "== operator image"
# Its default command is `run`; with no API server to reach it says so (exit 2).
if why=$(podman run --rm --read-only "$OPERATOR" 2>&1); then fail "the operator ran outside a cluster: $why"; fi
[[ $why == *"no API server"*"--apiserver-url"* ]] || fail "the operator outside a cluster: $why"
echo "ok: $why"

echo "== what the images hold"
revision=$(git -C "$ROOT" rev-parse HEAD)
for image in "$SERVICE" "$DEMO" "$AGENT" "$OPERATOR"; do
  name=${image#localhost/}
  c=$(podman create "$image")
  podman export "$c" | tar -tvf - > "$TMPDIR_LIST" || true
  podman rm "$c" >/dev/null
  awk '$1 ~ /^-..[sS]|^-.....[sS]/ {print $NF}' "$TMPDIR_LIST" | grep . && fail "$name: setuid or setgid files above"
  grep -Eq ' (\./)?(bin|usr/bin)/(sh|bash|dash)$' "$TMPDIR_LIST" && fail "$name: has a shell"
  grep -Eq ' (\./)?(usr/bin/apt|usr/bin/dpkg|var/lib/dpkg/)' "$TMPDIR_LIST" && fail "$name: has a package manager"
  podman run --rm --entrypoint /bin/sh "$image" -c true >/dev/null 2>&1 && fail "$name: /bin/sh runs"
  [[ $(podman image inspect -f '{{.Config.User}}' "$image") == 65532:65532 ]] || fail "$name: not uid 65532"
  label=$(podman image inspect -f '{{index .Labels "org.opencontainers.image.revision"}}' "$image")
  [[ ${label%-dirty} == "$revision" ]] || fail "$name: OCI revision label '$label', checkout $revision"
  echo "ok $name: $(wc -l < "$TMPDIR_LIST") files, no shell, no package manager, no setuid file, revision $label"
done
# Bounds that hold today, so growth is seen. The service's floor is Debian's
# LibTorch: libtorch_cpu needs OpenCV, FFmpeg and GDAL (530 MB of libraries).
bytes() { podman image inspect -f '{{.Size}}' "$1"; }
(( $(bytes "$SERVICE") <= 600 * 1000 * 1000 )) || fail "the service image grew past 600 MB"
(( $(bytes "$AGENT") <= 60 * 1000 * 1000 )) || fail "the agent image grew past 60 MB"
(( $(bytes "$OPERATOR") <= 40 * 1000 * 1000 )) || fail "the operator image grew past 40 MB"

echo "== image sizes"
podman image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' --filter reference='localhost/numaserve*'
