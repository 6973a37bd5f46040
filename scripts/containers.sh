#!/usr/bin/env bash
# Makes rootful podman work on a machine without a registry or a Docker
# engine, and creates the Debian bookworm base image the Dockerfiles start
# from. Idempotent. Prints the environment to use, for `eval`:
#
#   eval "$(scripts/containers.sh)"      # then: podman build --pull=never ...
#
# State (configuration, image store, the base image) lives in
# $NUMASERVE_CONTAINERS_DIR (default /var/tmp/numaserve-containers), outside
# any checkout, so a fresh clone reuses the base image and the layer cache.
set -euo pipefail

STATE=${NUMASERVE_CONTAINERS_DIR:-/var/tmp/numaserve-containers}
BASE_IMAGE=localhost/debian:bookworm-slim
mkdir -p "$STATE"

missing=()
for cmd in podman buildah runc debootstrap; do command -v "$cmd" >/dev/null || missing+=("$cmd"); done
if ((${#missing[@]})); then
  echo "installing container tools: podman buildah runc debootstrap" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get -q -o DPkg::Lock::Timeout=600 update >&2
  apt-get -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 install podman buildah runc debootstrap >&2
fi

# crun refuses hybrid cgroup v1/v2 hosts, so runc; no systemd to manage
# cgroups or collect events; podman's default ulimits (nofile 1048576) exceed
# what root may set here without CAP_SYS_RESOURCE, so ask for the hard limits.
nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
[[ $nofile == unlimited ]] && nofile=1048576
if [[ $nproc == unlimited ]] || ((nproc > 32768)); then nproc=32768; fi
cat > "$STATE/containers.conf.new" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
cat > "$STATE/storage.conf.new" <<CONF
[storage]
driver = "overlay"
graphroot = "$STATE/storage"
runroot = "$STATE/run"
CONF
mv "$STATE/containers.conf.new" "$STATE/containers.conf"
mv "$STATE/storage.conf.new" "$STATE/storage.conf"
export CONTAINERS_CONF=$STATE/containers.conf CONTAINERS_STORAGE_CONF=$STATE/storage.conf

# No registry is reachable: the base image is debootstrapped from the same
# Debian mirror apt uses here, and slimmed the way the official -slim is.
if ! podman image exists "$BASE_IMAGE"; then
  mirror=$(sed -n 's/^URIs: *\(http[^ ]*\/debian\)\/\?$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
  [[ -n $mirror ]] || mirror=$(sed -n 's/^deb \+\(http[^ ]*\/debian\)\/\? .*/\1/p' /etc/apt/sources.list 2>/dev/null | head -1)
  [[ -n $mirror ]] || { echo "containers.sh: no Debian mirror in the apt sources" >&2; exit 1; }
  echo "creating $BASE_IMAGE with debootstrap from $mirror" >&2
  rootfs=$STATE/rootfs.tmp
  rm -rf "$rootfs"
  if ! debootstrap --variant=minbase bookworm "$rootfs" "$mirror" > "$STATE/debootstrap.log" 2>&1; then
    tail -20 "$STATE/debootstrap.log" >&2
    exit 1
  fi
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
         "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
  tar -C "$rootfs" -c . | podman import --change 'CMD ["bash"]' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$BASE_IMAGE" >/dev/null
  rm -rf "$rootfs"
fi
echo "export CONTAINERS_CONF=$CONTAINERS_CONF CONTAINERS_STORAGE_CONF=$CONTAINERS_STORAGE_CONF"
