#!/usr/bin/env bash
# Checks the VM harness itself: what a test relies on when it runs through
# numa-vm.sh (status, output, throw-away writes, timeout, usage errors).
set -u
VM=${1:?usage: numa_vm_selftest.sh path/to/numa-vm.sh}
pass=0 fail=0
check() {  # name, expected status, expected stdout (exact), command...
  local name=$1 want_rc=$2 want_out=$3; shift 3
  local out rc
  out=$("$@" 2>/dev/null); rc=$?
  if [[ $rc == "$want_rc" && $out == "$want_out" ]]; then
    pass=$((pass + 1)); echo "PASS $name"
  else
    fail=$((fail + 1)); echo "FAIL $name: status $rc (want $want_rc), stdout '$out' (want '$want_out')"
  fi
}
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT

check "status and stdout come back; stderr stays apart" 42 "out" \
  "$VM" -n 2 -c 1 -- sh -c 'echo out; echo err >&2; exit 42'
check "guest sees 3 nodes, writes are thrown away" 0 "0-2" \
  "$VM" -n 3 -c 1 -- sh -c "cat /sys/devices/system/node/online; echo x > $scratch/guest-file"
check "  (nothing reached the host)" 1 "" test -e "$scratch/guest-file"
check "a command past --timeout is killed with 124" 124 "started" \
  "$VM" -n 2 -c 1 --timeout 12 -- sh -c 'echo started; sleep 100'
check "bad flags are a usage error, no boot" 2 "" "$VM" --nodes zero -- true
check "no qemu left behind" 0 "0" sh -c 'pgrep -c qemu-system-x86 || true'
echo "$pass passed, $fail failed"
((fail == 0))
