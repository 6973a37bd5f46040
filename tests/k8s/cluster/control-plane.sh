#!/usr/bin/env bash
# A real Kubernetes control plane for the tests, on loopback: etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler and a second
# kube-scheduler with the NodeResourceTopologyMatch plugin (the repository's
# manifests/scheduler profile and RBAC), and the kubectl of the same release,
# built from the Go modules pinned in go.mod/go.sum beside this script, the
# way envtest runs one for operators' tests. No kubelet runs (see "Nodes");
# bin/kubelet-admit asks the kubelet's own Topology, CPU and Memory Managers
# whether it would admit the pods bound (kubelet-admit/main.go).
#
#   control-plane.sh build            build the binaries (once per version), print their folder
#   control-plane.sh start DIR        start everything with its state in DIR; print the API server's URL
#                                     (with CONTROL_PLANE_OWNER=PID, it is stopped when that process ends)
#   control-plane.sh stop DIR         stop what `start DIR` started; safe to repeat
#   control-plane.sh running PIDS     print the names in a pids file (DIR/pids) still running
#
# `start` writes, in DIR:
#   kubeconfig             the admin (group system:masters)
#   agent.kubeconfig       the topology agent: ServiceAccount $AGENT_NAMESPACE/$AGENT_ACCOUNT, with a token
#                          bound to pod $AGENT_POD on node $AGENT_NODE, so the token carries the node-name
#                          claim (authentication.kubernetes.io/node-name) the chart's admission policy reads
#   operator.kubeconfig    the topology operator: ServiceAccount $OPERATOR_NAMESPACE/$OPERATOR_ACCOUNT
#                          (no permissions of its own: what it may do is its ClusterRole's, as installed)
#   bin                    the binaries' folder (bin/kubectl is the release's kubectl)
#   agent.token, operator.token, ca.crt, url, logs/*.log, pids
# The accounts, their namespaces, the agent's node and its pod are created by
# `start` (defaults: numaserve/numaserve-agent on node worker-1, numaserve/
# numaserve-operator: the chart's names for a release called numaserve);
# override with the environment variables above.
#
# Nodes: no kubelet runs. Tests create Node objects with the capacity,
# status and labels a kubelet would register (lib.sh's create_nodes), and
# remove the not-ready taint the API server's TaintNodesByCondition
# admission adds at creation, as the node lifecycle controller does at the
# first Ready heartbeat. That controller is not started, so no node turns
# NotReady for want of heartbeats; no pod ever runs: bound pods stay Pending
# on their node.
#
# Binaries (and bin/crds: the Prometheus Operator's ServiceMonitor CRD) are
# cached by the hash of go.mod, go.sum, the scheduler's, kubelet-admit's and podres' main.go, the Go
# version and the build flags, in $NUMASERVE_K8S_CACHE (default
# ~/.cache/numaserve/k8s).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
AGENT_NAMESPACE=${AGENT_NAMESPACE:-numaserve}
AGENT_ACCOUNT=${AGENT_ACCOUNT:-numaserve-agent}
AGENT_NODE=${AGENT_NODE:-worker-1}
AGENT_POD=${AGENT_POD:-$AGENT_ACCOUNT-$AGENT_NODE}
OPERATOR_NAMESPACE=${OPERATOR_NAMESPACE:-numaserve}
OPERATOR_ACCOUNT=${OPERATOR_ACCOUNT:-numaserve-operator}

die() { echo "control-plane.sh: $*" >&2; exit 1; }

# The Kubernetes release go.mod pins (its replace of k8s.io/kubernetes).
version() { sed -n 's/^\tk8s.io\/kubernetes => k8s.io\/kubernetes v//p' "$HERE/go.mod"; }

# The version stamp Kubernetes' own build (hack/lib/version.sh) puts in:
# clients read it (kubectl version, helm's kubeVersion check).
ldflags() {
  local v x flags=-s
  v=$(version)
  for x in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $x.gitVersion=v$v -X $x.gitMajor=${v%%.*} -X $x.gitMinor=$(cut -d. -f2 <<<"$v") -X $x.gitTreeState=clean"
  done
  echo "$flags"
}

binaries_dir() {
  command -v go >/dev/null || die "no go command: the Go toolchain builds the control plane"
  local key
  key=$(cat "$HERE/go.mod" "$HERE/go.sum" "$HERE/nrt-scheduler/main.go" "$HERE/kubelet-admit/main.go" "$HERE/podres/main.go" \
    <(go version; ldflags; echo "$PROMETHEUS_OPERATOR") |
    sha256sum | cut -c1-16)
  echo "${NUMASERVE_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/numaserve/k8s}/$(version)-$key"
}

build() {
  local bin tmp
  bin=$(binaries_dir)
  if [[ ! -x $bin/kube-apiserver ]]; then
    mkdir -p "$(dirname "$bin")"
    # One build at a time per cache; the loser of the race finds it done.
    exec 9>"$(dirname "$bin")/.lock"
    flock 9
    if [[ ! -x $bin/kube-apiserver ]]; then
      echo "building the test control plane into $bin (once per version: minutes)" >&2
      tmp=$(mktemp -d "$bin.tmp.XXXXXX")
      local start=$SECONDS
      (cd "$HERE" && go build -trimpath -ldflags="$(ldflags)" -o "$tmp/" k8s.io/kubernetes/cmd/kube-apiserver \
        k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl \
        k8s.io/kubernetes/cmd/kubelet ./nrt-scheduler ./kubelet-admit ./podres &&
        go build -trimpath -ldflags=-s -o "$tmp/etcd" go.etcd.io/etcd/server/v3) >&2 ||
        { rm -rf "$tmp"; die "the control plane did not build"; }
      crds "$tmp/crds" || { rm -rf "$tmp"; die "the Prometheus Operator's CRDs could not be fetched"; }
      rm -rf "$bin" && mv "$tmp" "$bin"
      echo "built the test control plane in $((SECONDS - start)) s" >&2
    fi
    exec 9>&-
  fi
  echo "$bin"
}

# The Prometheus Operator's CRDs (the chart renders a ServiceMonitor where
# they exist), from its Go module at a pinned version, checked by the Go
# checksum database and against the hash recorded here.
PROMETHEUS_OPERATOR=github.com/prometheus-operator/prometheus-operator@v0.85.0
PROMETHEUS_OPERATOR_SUM=h1:M5xLCLEoaW2IJfnuCwFzzpL+jSVQu3KGT84Pye+fW8s=
# The Gateway API's standard-channel CRDs (HTTPRoute, Gateway, GatewayClass...),
# for the chart's and the operator's HTTPRoutes, from their Go module.
GATEWAY_API=sigs.k8s.io/gateway-api@v1.6.3
GATEWAY_API_SUM=h1:lKpJa5bGlraC/QeACvCpsHLdmO6y0iKfzVl6gzaFEYc=

module_dir() {  # module@version sum: its directory in the Go module cache, checked
  local scratch info
  scratch=$(mktemp -d)
  printf 'module scratch\n' > "$scratch/go.mod"
  info=$(cd "$scratch" && go mod download -json "$1") || { rm -rf "$scratch"; return 1; }
  rm -rf "$scratch"
  grep -qF "\"Sum\": \"$2\"" <<<"$info" || { echo "$1: not the recorded module" >&2; return 1; }
  sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' <<<"$info"
}

crds() {  # dir
  local dir
  dir=$(module_dir "$PROMETHEUS_OPERATOR" "$PROMETHEUS_OPERATOR_SUM") || return 1
  mkdir -p "$1"
  cp "$dir/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml" "$1/"
  chmod u+w "$1"/*
}

# Prints the Gateway API's standard CRD files, one per line.
gateway_api_crds() {
  local dir
  dir=$(module_dir "$GATEWAY_API" "$GATEWAY_API_SUM") || die "the Gateway API's CRDs could not be fetched"
  ls "$dir"/config/crd/standard/gateway.networking.k8s.io_{gatewayclasses,gateways,httproutes,referencegrants}.yaml
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# An EC P-256 key and a certificate signed by DIR/ca (or self-signed: name ca).
certificate() {  # dir name subject [subjectAltName]
  local dir=$1 name=$2 subject=$3 san=${4:-}
  openssl ecparam -name prime256v1 -genkey -noout -out "$dir/$name.key" 2>/dev/null
  if [[ $name == ca ]]; then
    openssl req -x509 -new -key "$dir/ca.key" -subj "$subject" -days 2 -out "$dir/ca.crt" 2>/dev/null
    return
  fi
  openssl req -new -key "$dir/$name.key" -subj "$subject" -out "$dir/$name.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days 2 \
    -out "$dir/$name.crt" ${san:+-extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san")} \
    2>/dev/null
}

kubeconfig() {  # file url ca [client-cert client-key | token]
  local file=$1 url=$2 ca=$3
  {
    printf 'apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: %s\n    certificate-authority: %s\n' "$url" "$ca"
    printf 'contexts:\n- name: test\n  context: {cluster: test, user: user}\ncurrent-context: test\nusers:\n- name: user\n  user:\n'
    if (($# == 5)); then printf '    client-certificate: %s\n    client-key: %s\n' "$4" "$5"
    else printf '    token: %s\n' "$4"; fi
  } > "$file"
}

wait_healthy() {  # name url seconds [curl args...]
  local name=$1 url=$2 seconds=$3 i
  shift 3
  for ((i = 0; i < seconds * 10; i++)); do
    curl -fsS --max-time 2 "$@" "$url" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "$name did not become healthy in $seconds s (log: $(ls "$dir"/logs/"$name".log 2>/dev/null))"
}

spawn() {  # name command... : started in its own process group, its pid kept in DIR/pids
  local name=$1; shift
  setsid "$@" > "$dir/logs/$name.log" 2>&1 < /dev/null &
  echo "$name $!" >> "$dir/pids"
}

start() {
  dir=$1
  local bin etcd_port peer_port api_port sched_port nrt_port kcm_port url
  bin=$(build)
  mkdir -p "$dir/logs" "$dir/pki" "$dir/etcd"
  dir=$(cd "$dir" && pwd)
  [[ -s $dir/pids ]] && die "$dir already holds a running control plane: stop it first"
  local pki=$dir/pki
  certificate "$pki" ca /CN=numaserve-test-ca
  certificate "$pki" apiserver /CN=kube-apiserver "IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes.default.svc"
  certificate "$pki" admin "/O=system:masters/CN=numaserve-test-admin" "DNS:admin"
  certificate "$pki" scheduler /CN=system:kube-scheduler "DNS:scheduler"
  certificate "$pki" controller-manager /CN=system:kube-controller-manager "DNS:controller-manager"
  openssl ecparam -name prime256v1 -genkey -noout -out "$pki/service-account.key" 2>/dev/null
  openssl ec -in "$pki/service-account.key" -pubout -out "$pki/service-account.pub" 2>/dev/null
  cp "$pki/ca.crt" "$dir/ca.crt"

  etcd_port=$(free_port) peer_port=$(free_port) api_port=$(free_port)
  sched_port=$(free_port) nrt_port=$(free_port) kcm_port=$(free_port)
  url=https://127.0.0.1:$api_port
  # Whatever fails from here on, nothing started is left running.
  trap 'stop "$dir" >/dev/null 2>&1' EXIT

  spawn etcd "$bin/etcd" --data-dir "$dir/etcd" --name test \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "test=http://127.0.0.1:$peer_port" --unsafe-no-fsync --log-level warn
  wait_healthy etcd "http://127.0.0.1:$etcd_port/health" 30

  # As kubeadm sets it up: Node and RBAC authorization, NodeRestriction,
  # bound service-account tokens; one service IP range; nothing reachable
  # but loopback.
  spawn kube-apiserver "$bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$pki/service-account.pub" \
    --service-account-signing-key-file "$pki/service-account.key" --api-audiences https://kubernetes.default.svc \
    --service-cluster-ip-range 10.0.0.0/24 --allow-privileged \
    --cert-dir "$pki/apiserver-generated" --v 1
  wait_healthy kube-apiserver "$url/readyz" 90 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key"
  kubeconfig "$dir/kubeconfig" "$url" "$pki/ca.crt" "$pki/admin.crt" "$pki/admin.key"
  kubeconfig "$dir/scheduler.kubeconfig" "$url" "$pki/ca.crt" "$pki/scheduler.crt" "$pki/scheduler.key"
  kubeconfig "$dir/controller-manager.kubeconfig" "$url" "$pki/ca.crt" "$pki/controller-manager.crt" "$pki/controller-manager.key"

  # The controllers a Deployment and a DaemonSet need to become pods, the
  # service accounts pods run as and the garbage collector, each with its
  # own account and RBAC role, as kubeadm runs them; not the node lifecycle
  # controller, unless KCM_CONTROLLERS names it (the node tests: a real
  # kubelet posts the heartbeats it waits for).
  spawn kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$dir/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$dir/controller-manager.kubeconfig" --authorization-kubeconfig "$dir/controller-manager.kubeconfig" \
    --controllers "${KCM_CONTROLLERS:-deployment,replicaset,daemonset,serviceaccount,garbagecollector}" --leader-elect=false \
    --use-service-account-credentials --root-ca-file "$pki/ca.crt" \
    --bind-address 127.0.0.1 --secure-port "$kcm_port" --cert-dir "$dir/pki/controller-manager-generated" --v 1
  local k=("$bin/kubectl" --kubeconfig "$dir/kubeconfig")
  # The NodeResourceTopology CRD, which the chart installs too, and the
  # repository's RBAC for the topology-aware scheduler: it refuses to start
  # without either.
  "${k[@]}" apply --server-side -f "$ROOT/charts/numaserve/files/noderesourcetopology-crd.yaml" >/dev/null
  # kubectl wait fails at once while the CRD has no status.conditions yet
  # (read right after its apply): asked again.
  local tries
  for tries in 1 2 3 4 5 6; do
    "${k[@]}" wait --for condition=Established --timeout 5s crd/noderesourcetopologies.topology.node.k8s.io >/dev/null 2>&1 && break
    ((tries < 6)) || { echo "control-plane.sh: the NodeResourceTopology CRD was not Established" >&2; return 1; }
    sleep 1
  done
  "${k[@]}" apply --server-side -f "$ROOT/manifests/scheduler/rbac.yaml" >/dev/null
  spawn kube-scheduler "$bin/kube-scheduler" --kubeconfig "$dir/scheduler.kubeconfig" \
    --authentication-kubeconfig "$dir/scheduler.kubeconfig" --authorization-kubeconfig "$dir/scheduler.kubeconfig" \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port "$sched_port" --cert-dir "$dir/pki/scheduler-generated" --v 1
  # The repository's scheduler profile, as deployed, with this cluster's
  # credentials (the config file's clientConnection wins over --kubeconfig).
  {
    sed '/^clientConnection:/,/^[^ ]/{/^clientConnection:/d;/^ /d}' "$ROOT/manifests/scheduler/scheduler-config.yaml"
    printf 'clientConnection:\n  kubeconfig: %s\n' "$dir/scheduler.kubeconfig"
  } > "$dir/nrt-scheduler.yaml"
  spawn nrt-scheduler "$bin/nrt-scheduler" --config "$dir/nrt-scheduler.yaml" \
    --authentication-kubeconfig "$dir/scheduler.kubeconfig" --authorization-kubeconfig "$dir/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$nrt_port" --cert-dir "$dir/pki/nrt-scheduler-generated" --v 1
  local name port
  for name in kube-controller-manager:$kcm_port kube-scheduler:$sched_port nrt-scheduler:$nrt_port; do
    port=${name#*:}
    wait_healthy "${name%:*}" "https://127.0.0.1:$port/healthz" 60 -k
  done

  local ns
  for ns in $(printf '%s\n' "$AGENT_NAMESPACE" "$OPERATOR_NAMESPACE" | sort -u); do
    "${k[@]}" create namespace "$ns" >/dev/null
  done
  "${k[@]}" -n "$AGENT_NAMESPACE" create serviceaccount "$AGENT_ACCOUNT" >/dev/null
  "${k[@]}" -n "$OPERATOR_NAMESPACE" create serviceaccount "$OPERATOR_ACCOUNT" >/dev/null
  # The agent's node, bare (no capacity: nothing schedules onto it until a
  # test gives it some), and the agent's pod on it, as the DaemonSet would
  # have it, for the token to be bound to.
  "${k[@]}" create -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $AGENT_NODE
  labels: {kubernetes.io/hostname: $AGENT_NODE}
EOF
  "${k[@]}" create -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $AGENT_POD, namespace: $AGENT_NAMESPACE}
spec:
  serviceAccountName: $AGENT_ACCOUNT
  nodeName: $AGENT_NODE
  containers: [{name: agent, image: localhost/numaserve-topology-agent:test}]
EOF
  "${k[@]}" -n "$AGENT_NAMESPACE" create token "$AGENT_ACCOUNT" --bound-object-kind Pod \
    --bound-object-name "$AGENT_POD" --duration 24h > "$dir/agent.token"
  "${k[@]}" -n "$OPERATOR_NAMESPACE" create token "$OPERATOR_ACCOUNT" --duration 24h > "$dir/operator.token"
  kubeconfig "$dir/agent.kubeconfig" "$url" "$pki/ca.crt" "$(cat "$dir/agent.token")"
  kubeconfig "$dir/operator.kubeconfig" "$url" "$pki/ca.crt" "$(cat "$dir/operator.token")"
  echo "$url" > "$dir/url"
  ln -sfn "$bin" "$dir/bin"
  # However its owner ends, SIGKILL (a test's timeout) included, the
  # control plane ends with it.
  if [[ -n ${CONTROL_PLANE_OWNER:-} ]]; then
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; "$2" stop "$3"' watchdog \
      "$CONTROL_PLANE_OWNER" "$HERE/control-plane.sh" "$dir" >>"$dir/logs/watchdog.log" 2>&1 < /dev/null &
    echo "$!" > "$dir/watchdog"
  fi
  trap - EXIT
  echo "$url"
}

stop() {
  local dir=$1 name pid i
  [[ -f $dir/pids ]] || return 0
  if [[ -f $dir/watchdog ]]; then
    pid=$(cat "$dir/watchdog")
    rm -f "$dir/watchdog"
    # Not when the watchdog itself stops (bash may exec this in its place).
    ((pid == $$ || pid == PPID)) || kill -- "-$pid" 2>/dev/null || true
  fi
  # Last started, first stopped; each in its own process group.
  while read -r name pid; do
    kill -TERM -- "-$pid" 2>/dev/null || true
  done < <(tac "$dir/pids")
  while read -r name pid; do
    for ((i = 0; i < 100; i++)); do alive "$pid" || break; sleep 0.05; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  done < <(tac "$dir/pids")
  # SIGKILL is not instant: a loaded machine takes a while to tear down an API
  # server's address space (a CI run here still saw it 0.5 s after stop).
  # Return only when every process has ended, so that a caller may reuse its
  # ports and files at once.
  while read -r name pid; do
    for ((i = 0; i < 200; i++)); do alive "$pid" || break; sleep 0.05; done
    alive "$pid" && echo "control-plane.sh: $name ($pid) still running 10 s after SIGKILL" >&2
  done < <(tac "$dir/pids")
  rm -f "$dir/pids"
}

# A process that has exited but not been reaped yet (a zombie: its parent is
# whatever adopted it) counts as ended; kill -0 would still find it.
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat%% *} != Z ]]
}

# Prints the name of each process in a pids FILE (as start writes it) still running.
running() {
  local name pid
  while read -r name pid; do alive "$pid" && echo "$name"; done < "$1"
  return 0
}

case ${1:-} in
  build) build ;;
  start) [[ -n ${2:-} ]] || die "usage: control-plane.sh start DIR"; start "$2" ;;
  stop) [[ -n ${2:-} ]] || die "usage: control-plane.sh stop DIR"; stop "$2" ;;
  running) [[ -n ${2:-} ]] || die "usage: control-plane.sh running PIDS"; running "$2" ;;
  gateway-api-crds) gateway_api_crds ;;
  *) die "usage: control-plane.sh build | start DIR | stop DIR | running PIDS | gateway-api-crds" ;;
esac
