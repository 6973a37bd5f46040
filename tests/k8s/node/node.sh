#!/usr/bin/env bash
# node.sh — a real Kubernetes node for the tests: containerd and runc from
# Debian, the kubelet built from the Kubernetes Go modules (control-plane.sh
# builds it with the control plane, same release), the project's images
# imported, and a teardown that leaves the machine as it found it.
#
#   node.sh images DIR        the images a node runs, as OCI archives in DIR:
#                             pause (a static C binary, the sandbox image
#                             containerd names) and the project's demo, agent
#                             and operator images (podman save of
#                             docker/build-images.sh's)
#   node.sh start DIR IMAGES  containerd, then the kubelet, state under DIR;
#                             the images in IMAGES imported. Environment:
#                               NODE_NAME          the node's name (default: hostname)
#                               KUBECONFIG_NODE    the kubelet's credentials: it
#                                                  registers with that API server;
#                                                  unset: standalone, pods from
#                                                  DIR/manifests (static pods)
#                               RESERVED_CPUS      reservedSystemCPUs (default "0")
#                               RESTRICT_OOM_SCORE_ADJ  true where root lacks
#                                                  CAP_SYS_RESOURCE (default: found out)
#                               POD_CIDR           a bridge CNI network for pods
#                                                  (unset: hostNetwork pods only)
#   node.sh stop DIR          every pod stopped, the kubelet and containerd
#                             ended, their mounts, cgroups, sockets and the
#                             paths the kubelet writes outside DIR removed
#
# The kubelet's settings are the ones docs/deploy.md recommends for
# numaserve: the static CPU Manager, the Static Memory Manager and the
# single-numa-node Topology Manager at pod scope (see kubelet_config).
# cgroup v1 and v2, cgroupfs driver (no systemd runs here).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
VERSION=$(sed -n 's/^project(numaserve VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")
# The sandbox image containerd 1.6 names (its CRI sandbox_image, set below).
PAUSE_IMAGE=registry.k8s.io/pause:3.10

die() { echo "node.sh: $*" >&2; exit 1; }
log() { echo "node.sh: $*" >&2; }

images() {
  local dir=$1 image
  mkdir -p "$dir"
  gcc -static -O2 -o "$dir/pause" "$HERE/pause.c" || die "cannot build pause (gcc -static)"
  python3 "$HERE/mkimage.py" "$dir/pause.tar" "$PAUSE_IMAGE" '["/pause"]' "$dir/pause=/pause" >/dev/null
  rm -f "$dir/pause"
  "$ROOT/docker/build-images.sh" "$VERSION" >/dev/null 2>"$dir/build-images.log" ||
    { cat "$dir/build-images.log" >&2; die "the images did not build"; }
  eval "$("$ROOT/scripts/containers.sh")"
  for image in numaserve-demo numaserve-topology-agent numaserve-operator; do
    rm -f "$dir/$image.tar"
    podman save -q --format oci-archive -o "$dir/$image.tar" "localhost/$image:$VERSION" >/dev/null ||
      die "podman save localhost/$image:$VERSION failed"
  done
}

# Root without CAP_SYS_RESOURCE (some sandboxes) cannot lower oom_score_adj,
# which runc does for every pod's sandbox (-998): containerd must not ask.
can_lower_oom_score() {
  local cap
  cap=$(sed -n 's/^CapEff:\t//p' /proc/self/status)
  (( (16#$cap >> 24) & 1 ))
}

containerd_config() {  # dir
  local dir=$1 restrict=${RESTRICT_OOM_SCORE_ADJ:-}
  [[ -n $restrict ]] || { can_lower_oom_score && restrict=false || restrict=true; }
  cat <<EOF
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
[grpc]
  address = "$dir/containerd.sock"
[ttrpc]
  address = "$dir/containerd.sock.ttrpc"
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_IMAGE"
    disable_tcp_service = true
    restrict_oom_score_adj = $restrict
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$dir/cni"
EOF
}

# The memory the kubelet keeps back: evictionHard's, all on NUMA node 0 (the
# Static Memory Manager wants reservedMemory to sum to it).
RESERVED_MEMORY=100Mi

kubelet_config() {  # dir
  local dir=$1
  cat <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
podLogsDir: $dir/kubelet/pod-logs
volumePluginDir: $dir/kubelet/volume-plugins
address: 127.0.0.1
port: ${KUBELET_PORT:-10250}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: ${KUBELET_HEALTHZ_PORT:-10248}
containerRuntimeEndpoint: unix://$dir/containerd.sock
cgroupDriver: cgroupfs
failSwapOn: false
cpuManagerPolicy: static
cpuManagerReconcilePeriod: 5s
reservedSystemCPUs: "${RESERVED_CPUS:-0}"
topologyManagerPolicy: single-numa-node
topologyManagerScope: pod
memoryManagerPolicy: Static
reservedMemory:
- numaNode: 0
  limits: {memory: $RESERVED_MEMORY}
evictionHard:
  memory.available: "$RESERVED_MEMORY"
  nodefs.available: "1%"
  imagefs.available: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF
  if [[ -n ${KUBECONFIG_NODE:-} ]]; then
    cat <<EOF
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: ${CLIENT_CA_FILE:?}}
authorization:
  mode: Webhook
clusterDomain: cluster.local
EOF
  else
    # Static pods: their manifests read every 2 s and synced every 5 s, not
    # 20 s and 1 min. Registered, the kubelet hears of pods from the API
    # server at once and keeps the defaults (under TCG, node.vm, the kubelet
    # is the VM's busiest process: ~55% of a vCPU).
    cat <<EOF
staticPodPath: $dir/manifests
fileCheckFrequency: 2s
syncFrequency: 5s
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
EOF
  fi
}

# A bridge network for pods (no kube-proxy, no overlay: one node).
cni_config() {
  cat <<EOF
{"cniVersion": "1.0.0", "name": "numaserve-test",
 "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
              "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
             {"type": "loopback"}]}
EOF
}

spawn() {  # dir name command...: in its own process group, pid kept in dir/pids
  local dir=$1 name=$2; shift 2
  setsid "$@" > "$dir/logs/$name.log" 2>&1 < /dev/null &
  echo "$name $!" >> "$dir/pids"
}

start() {
  local dir=$1 images=$2 bin i
  bin=$("$ROOT/tests/k8s/cluster/control-plane.sh" build)
  command -v containerd >/dev/null && command -v runc >/dev/null && [[ -x /usr/lib/cni/bridge ]] ||
    die "containerd, runc and the CNI plugins are missing: run scripts/install-deps.sh test"
  mkdir -p "$dir"/{logs,manifests,cni,kubelet/pod-logs,kubelet/volume-plugins}
  dir=$(cd "$dir" && pwd)
  [[ -s $dir/pids ]] && die "$dir already holds a running node: stop it first"
  # What exists before, so that stop removes only what the node made.
  { [[ -e /var/lib/kubelet ]] && echo /var/lib/kubelet; [[ -e /run/containerd ]] && echo /run/containerd; true; } > "$dir/preexisting"
  containerd_config "$dir" > "$dir/containerd.toml"
  kubelet_config "$dir" > "$dir/kubelet.yaml"
  [[ -z ${POD_CIDR:-} ]] || cni_config > "$dir/cni/10-numaserve.conflist"
  ln -sfn "$bin" "$dir/bin"
  trap 'stop "$dir" >/dev/null 2>&1' EXIT

  spawn "$dir" containerd containerd --config "$dir/containerd.toml"
  local ctr=(ctr --address "$dir/containerd.sock" --namespace k8s.io)
  for ((i = 0; i < 300; i++)); do "${ctr[@]}" version >/dev/null 2>&1 && break; sleep 0.2; done
  "${ctr[@]}" version >/dev/null 2>&1 || die "containerd did not start (log: $dir/logs/containerd.log)"
  local archive
  for archive in "$images"/*.tar; do
    "${ctr[@]}" images import --all-platforms "$archive" >/dev/null 2>>"$dir/logs/import.log" ||
      die "ctr images import $archive failed: $(tail -1 "$dir/logs/import.log")"
  done

  local args=(--config "$dir/kubelet.yaml" --root-dir "$dir/kubelet/root" --cert-dir "$dir/kubelet/root/pki"
    --hostname-override "${NODE_NAME:-$(hostname)}" --v=2)
  [[ -z ${KUBECONFIG_NODE:-} ]] || args+=(--kubeconfig "$KUBECONFIG_NODE")
  [[ -z ${NODE_IP:-} ]] || args+=(--node-ip "$NODE_IP")
  spawn "$dir" kubelet "$bin/kubelet" "${args[@]}"
  for ((i = 0; i < 600; i++)); do
    curl -fsS --max-time 2 "http://127.0.0.1:${KUBELET_HEALTHZ_PORT:-10248}/healthz" >/dev/null 2>&1 && break
    kill -0 "$(awk '$1 == "kubelet" {print $2}' "$dir/pids")" 2>/dev/null || break
    sleep 0.2
  done
  curl -fsS --max-time 2 "http://127.0.0.1:${KUBELET_HEALTHZ_PORT:-10248}/healthz" >/dev/null 2>&1 ||
    die "the kubelet did not become healthy (log: $dir/logs/kubelet.log): $(grep -E '^[EF]' "$dir/logs/kubelet.log" | tail -3)"
  trap - EXIT
}

# Every process of a pids file stopped: TERM, then KILL after 10 s.
stop_processes() {  # dir name...
  local dir=$1 name pid i; shift
  for name in "$@"; do
    pid=$(awk -v n="$name" '$1 == n {print $2}' "$dir/pids" 2>/dev/null)
    [[ -n $pid ]] || continue
    kill -TERM -- "-$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
}

stop() {
  local dir=$1 i
  [[ -d $dir ]] || return 0
  dir=$(cd "$dir" && pwd)
  local ctr=(ctr --address "$dir/containerd.sock" --namespace k8s.io)
  # The pods first, by the kubelet (static pods: their manifests removed),
  # so that it frees their CPUs and memory as it would; then the processes.
  rm -f "$dir"/manifests/*
  if [[ -S $dir/containerd.sock ]]; then
    for ((i = 0; i < 60; i++)); do [[ -z $("${ctr[@]}" tasks ls -q 2>/dev/null) ]] && break; sleep 0.5; done
  fi
  stop_processes "$dir" kubelet
  if [[ -S $dir/containerd.sock ]]; then
    local task c
    for task in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks kill -s KILL "$task" >/dev/null 2>&1 || true; done
    sleep 0.5
    for task in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks delete -f "$task" >/dev/null 2>&1 || true; done
    for c in $("${ctr[@]}" containers ls -q 2>/dev/null); do "${ctr[@]}" containers delete "$c" >/dev/null 2>&1 || true; done
  fi
  stop_processes "$dir" containerd
  # The shims outlive containerd by design; theirs are the node's.
  pkill -KILL -f "containerd-shim-runc-v2 .*-address $dir/containerd.sock" 2>/dev/null || true
  # Mounts under DIR (the kubelet bind-mounts its root dir onto itself,
  # pods' volumes, containerd's rootfs and shm), deepest first.
  local m
  for m in $(awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  # cgroups the kubelet made (kubepods in every hierarchy, v1 or v2), deepest first.
  local root
  for root in /sys/fs/cgroup /sys/fs/cgroup/*/; do
    [[ -d $root/kubepods ]] || continue
    find "$root/kubepods" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  # What the kubelet and containerd 1.6 write outside their configured dirs.
  grep -qx /var/lib/kubelet "$dir/preexisting" 2>/dev/null || rm -rf /var/lib/kubelet
  grep -qx /run/containerd "$dir/preexisting" 2>/dev/null || rm -rf /run/containerd
  ip link del cni0 2>/dev/null || true
  rm -f "$dir/pids"
}

case ${1:-} in
  images) [[ -n ${2:-} ]] || die "usage: node.sh images DIR"; images "$2" ;;
  start) [[ -n ${3:-} ]] || die "usage: node.sh start DIR IMAGES"; start "$2" "$3" ;;
  stop) [[ -n ${2:-} ]] || die "usage: node.sh stop DIR"; stop "$2" ;;
  *) die "usage: node.sh images DIR | start DIR IMAGES | stop DIR" ;;
esac
