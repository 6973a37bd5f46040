#!/usr/bin/env bash
# Every NodeResourceTopology the agent emits, for every fixture machine, must
# validate against the CRD (offline, with ajv) — and a broken one must not.
# Usage: nrt_schema_test.sh AGENT FIXTURES_DIR UNPACKED_SYSFS_DIR
set -euo pipefail
AGENT=$1 FIXTURES=$2 SYSFS=$3
HERE=$(cd "$(dirname "$0")" && pwd)
# The CRD the chart installs (charts/numaserve/files), from topology-api.
CRD=$HERE/../../charts/numaserve/files/noderesourcetopology-crd.yaml
[[ -d $HERE/node_modules/ajv ]] || { echo "ajv missing: run scripts/install-deps.sh test" >&2; exit 1; }
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT

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
node "$HERE/validate.mjs" --crd "$CRD" "$out"/*.yaml

# The validator must catch what the API server would reject.
sed 's/name: "cpu"/name: "cpu"\n        bogus: 1/; s/capacity: \([0-9]*\)/capacity: "\1 cores"/' \
  "$out/synthetic-16-nodes.yaml" > "$out/broken.yaml"
if node "$HERE/validate.mjs" --crd "$CRD" "$out/broken.yaml" >/dev/null 2>&1; then
  echo "FAIL: a broken object passed validation" >&2
  exit 1
fi
echo "a broken object is rejected, as it must be"
