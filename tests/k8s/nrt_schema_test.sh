#!/usr/bin/env bash
# Every NodeResourceTopology the agent emits, for every fixture machine, must
# be accepted by a real API server with the CRD the chart installs
# (tests/k8s/cluster: server-side apply, dry run, strict field validation),
# and a broken one refused.
# Usage: nrt_schema_test.sh AGENT FIXTURES_DIR UNPACKED_SYSFS_DIR
set -euo pipefail
AGENT=$1 FIXTURES=$2 SYSFS=$3
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/cluster/lib.sh"
out=$(mktemp -d); trap 'stop_control_plane; rm -rf "$out"' EXIT
# The control plane installs the chart's CRD (charts/numaserve/files, from
# topology-api) before anything else.
use_control_plane "$out/cluster"

n=0
emit() {  # name, source flags...
  local name=$1; shift
  "$AGENT" plan -o nrt --node-name "$name" "$@" > "$out/$name.yaml"
  n=$((n + 1))
}
# Every XML fixture, irregular machines included: a plan, a plan with notes,
# or (no memory sizes in the export) no plan, exit 1, but the NRT printed.
for file in "$FIXTURES"/topologies/xml/*.xml; do
  name=$(basename "$file" .xml | tr 'A-Z' 'a-z')
  if ! "$AGENT" plan -o nrt --node-name "$name" --xml "$file" > "$out/$name.yaml" 2>"$out/$name.err"; then
    grep -q 'reservations alone take' "$out/$name.err" || { echo "FAIL: $name: $(cat "$out/$name.err")" >&2; exit 1; }
  fi
  [[ -s $out/$name.yaml ]] || { echo "FAIL: $name: no NodeResourceTopology printed" >&2; exit 1; }
  n=$((n + 1))
done
for dir in "$SYSFS"/*/; do
  root=$(find "$dir" -mindepth 1 -maxdepth 1 -type d | head -1)
  emit "$(basename "$dir" | tr 'A-Z' 'a-z')" --sysfs-root "$root"
done
emit synthetic-16-nodes --synthetic "pack:4 numa:4(memory=32GiB) core:4 pu:2"
emit with-kubelet-state --xml "$FIXTURES/topologies/xml/32em64t-2n8c2t-pci-normalio.xml" \
  --kubelet-config "$FIXTURES/kubelet/numa-ready/config.yaml" --kubelet-state-dir "$FIXTURES/kubelet/numa-ready"
grep -q 'topologyManagerPolicy' "$out/with-kubelet-state.yaml" || { echo "FAIL: no attributes from the kubelet config" >&2; exit 1; }
emit this-machine
echo "emitted $n NodeResourceTopology objects"
server_validate "$out"/*.yaml || { echo "FAIL: the API server refused some of them" >&2; exit 1; }
echo "all accepted by the API server"

# The check can fail: the API server refuses broken objects, each for what
# is broken.
refused() {  # name sed-script expected-message
  sed "$2" "$out/synthetic-16-nodes.yaml" > "$out/$1.yaml"
  if why=$(server_validate "$out/$1.yaml" 2>&1); then
    echo "FAIL: $1: accepted" >&2; exit 1
  fi
  grep -qF -- "$3" <<<"$why" || { echo "FAIL: $1: refused, but not for '$3': $why" >&2; exit 1; }
  echo "ok $1 refused: $3"
}
refused unknown-field 's/name: "cpu"/name: "cpu"\n        bogus: 1/' 'zones[0].resources[0].bogus: field not declared in schema'
refused capacity-not-a-quantity 's/capacity: \([0-9]*\)/capacity: "\1 cores"/' 'zones[0].resources[0].capacity: Invalid value: "8 cores"'
