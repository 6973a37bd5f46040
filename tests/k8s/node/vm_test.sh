#!/usr/bin/env bash
# node.vm: numaserve deployed for real on a two-NUMA-node machine. The
# control plane (control-plane.sh) runs here; the node is a VM of 2 NUMA
# nodes x 2 vCPUs (tests/vm/numa-vm.sh --net) running containerd and a real
# kubelet that registers with it at 10.0.2.2 (QEMU's user network: this
# machine's loopback). Inside the VM, in_vm.sh installs the chart with the
# real helm, as a user would, and checks what the kubelet did (see there).
# Usage: vm_test.sh path/to/numaserve-topology-agent. Needs root.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../cluster/lib.sh"
AGENT=$(realpath "${1:?usage: vm_test.sh path/to/numaserve-topology-agent}")
NODE_NAME=numa-vm

work=$(mktemp -d "${TMPDIR:-/tmp}/numaserve-node-vm.XXXXXX")
trap 'stop_control_plane; rm -rf "$work"' EXIT
# The node lifecycle controller (the not-ready taint lifted when the kubelet
# reports Ready), the EndpointSlice controller (which pods serve) and the
# root CA publisher (the kube-root-ca.crt ConfigMap every pod's API token
# volume mounts: without it no pod with a service account starts) as well as
# the controllers every k8s test runs.
KCM_CONTROLLERS=deployment,replicaset,daemonset,serviceaccount,garbagecollector,nodelifecycle,endpointslice,root-ca-certificate-publisher-controller \
  use_control_plane "$work/cp"
url=$(cat "$work/cp/url")
port=${url##*:}

# The kubelet's credentials, as kubeadm's TLS bootstrap would end with: a
# client certificate of system:node:NAME in system:nodes (the Node
# authorizer and NodeRestriction then limit it to its own node and pods).
pki=$work/cp/pki
openssl ecparam -name prime256v1 -genkey -noout -out "$work/kubelet.key" 2>/dev/null
openssl req -new -key "$work/kubelet.key" -subj "/O=system:nodes/CN=system:node:$NODE_NAME" -out "$work/kubelet.csr" 2>/dev/null
openssl x509 -req -in "$work/kubelet.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 2 \
  -out "$work/kubelet.crt" 2>/dev/null
vm_kubeconfig() {  # file client-cert client-key: the API server as the VM reaches it
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: "https://10.0.2.2:$port", certificate-authority: $pki/ca.crt, tls-server-name: localhost}
contexts:
- name: test
  context: {cluster: test, user: user}
current-context: test
users:
- name: user
  user: {client-certificate: $2, client-key: $3}
EOF
}
vm_kubeconfig "$work/kubelet.kubeconfig" "$work/kubelet.crt" "$work/kubelet.key"
vm_kubeconfig "$work/admin.kubeconfig" "$pki/admin.crt" "$pki/admin.key"

"$HERE/node.sh" images "$work/images"
# The service pods of the VM: 2 x 1 CPU and LibTorch under TCG; 2.5 GiB a
# NUMA node holds them, the node's state on a tmpfs (the images: ~1 GiB)
# and the system. The in-VM steps took 1,420 s of a fresh-clone suite once
# (TCG beside the suite's other tests), ~1,000 s alone on the same kind of
# host later, and a host 2.5x slower at TCG came: 3,000 s leaves room for it
# (each step has a limit of its own).
"$ROOT/tests/vm/numa-vm.sh" --net --nodes 2 --cpus-per-node 2 --mem-per-node 2560 --timeout "${NODE_VM_TIMEOUT:-3000}" \
  -- env WORK="$work" NODE_NAME="$NODE_NAME" API_PORT="$port" AGENT="$AGENT" bash "$HERE/in_vm.sh"
