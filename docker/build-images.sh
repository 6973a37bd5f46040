#!/usr/bin/env bash
# Builds the four images with podman, offline (base image from
# scripts/containers.sh), and prints their sizes:
#   numaserve:VERSION, numaserve-demo:VERSION, numaserve-topology-agent:VERSION,
#   numaserve-operator:VERSION
# Usage: docker/build-images.sh [TAG]    (default: the project version)
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/containers.sh)"
TAG=${1:-$(sed -n 's/^project(numaserve VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)}

# OCI labels: the commit built (with -dirty for uncommitted changes) and
# where it came from.
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || revision+=-dirty
source=$(git config --get remote.origin.url 2>/dev/null || echo "file://$PWD")

for target in service demo agent operator; do
  case $target in
    service) image=localhost/numaserve:$TAG ;;
    demo) image=localhost/numaserve-demo:$TAG ;;
    agent) image=localhost/numaserve-topology-agent:$TAG ;;
    operator) image=localhost/numaserve-operator:$TAG ;;
  esac
  echo "building $image (target $target)" >&2
  # docker format: OCI images have no HEALTHCHECK.
  podman build --pull=never --format docker --layers -f docker/Dockerfile --target "$target" -t "$image" . >&2
  # Labels of this checkout, set on the built image outside the layer cache
  # (a LABEL of build arguments, or podman build --label, came back stale
  # from it when the layers were unchanged).
  ctr=$(buildah from --pull=never --quiet "$image")
  buildah config --label org.opencontainers.image.version="$TAG" --label org.opencontainers.image.revision="$revision" \
    --label org.opencontainers.image.source="$source" "$ctr"
  buildah commit --quiet --format docker --rm "$ctr" "$image" >/dev/null
done
podman image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' --filter reference='localhost/numaserve*'
