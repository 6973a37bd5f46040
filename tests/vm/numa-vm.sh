#!/usr/bin/env bash
# numa-vm.sh — run one command inside a throw-away QEMU VM with several NUMA
# nodes and return its output and exit status.
#
# This machine has one NUMA node; placement only shows its worth on several.
# The VM boots the host's own Debian kernel with a tiny busybox initramfs,
# mounts the host's root filesystem read-only over virtio-9p with a tmpfs
# overlay on top (so binaries built here run unchanged, and guest writes
# vanish), mounts cgroup v2 at /sys/fs/cgroup, runs COMMAND as root in the
# caller's working directory with the caller's environment, and powers off.
#
# KVM is used when it boots a guest; otherwise QEMU emulates (TCG), which is
# 5-20x slower for CPU-bound code but behaves the same. Some sandboxes expose
# a nested KVM (kvm_pvm) that hangs on a stock kernel: that is detected, and a
# KVM boot that hangs falls back to TCG, remembered until the host reboots.
#
# Exit status: COMMAND's; 124 when --timeout expired; 125 when the VM failed;
# 2 for a usage error. Guest stdout/stderr are printed after the VM stops.
set -euo pipefail

readonly PROG=${0##*/}
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 125; }
usage_error() { printf '%s: %s (see --help)\n' "$PROG" "$*" >&2; exit 2; }
log() { if ((VERBOSE)); then printf '%s: %s\n' "$PROG" "$*" >&2; fi; }

usage() {
  cat <<EOF
Usage: $PROG [options] [--] COMMAND [ARGS...]

Run COMMAND in a throw-away multi-NUMA QEMU VM that shares this machine's
root filesystem read-only; print its output and exit with its status.

  -n, --nodes N           NUMA nodes (default 2)
  -c, --cpus-per-node N   vCPUs per node (default 2)
  -m, --mem-per-node MIB  memory per node in MiB (default 512)
  -t, --timeout SECS      kill the VM after SECS, boot included (default 120) -> 124
      --accel auto|kvm|tcg  default auto: KVM if it boots, else TCG
      --cpu-props PROPS   appended to -cpu (host under KVM, max under TCG), e.g.
                          vendor=GenuineIntel,family=6,model=207: another CPU
                          model's CPUID with this one's features
      --net               a virtio NIC on QEMU's user network: the guest's eth0
                          (set up as 10.0.2.15/24, default route 10.0.2.2) reaches
                          this machine's loopback at 10.0.2.2 (a real kubelet
                          in the VM registering with an API server here)
  -v, --verbose           progress and the guest console on stderr
  -h, --help              this text

Node i gets vCPUs i*N .. i*N+N-1 (N = --cpus-per-node). The guest kernel
reports distance 10 local and 20 remote. Installs qemu-system-x86,
busybox-static and linux-image-amd64 with apt-get when missing (as root).
Tuning: NUMA_VM_CACHE (cache dir for the unpacked kernel), NUMA_VM_BOOT_SECS
(TCG boot watchdog, default 30), NUMA_VM_BOOT_RETRIES (default 2).
EOF
}

NODES=2 CPN=2 MEM=512 TIMEOUT=120 ACCEL=auto VERBOSE=0 CPU_PROPS= NET=0
while (($#)); do
  case $1 in
    -n|--nodes) NODES=${2-}; shift 2 || usage_error "$1 needs a value" ;;
    -c|--cpus-per-node) CPN=${2-}; shift 2 || usage_error "$1 needs a value" ;;
    -m|--mem-per-node) MEM=${2-}; shift 2 || usage_error "$1 needs a value" ;;
    -t|--timeout) TIMEOUT=${2-}; shift 2 || usage_error "$1 needs a value" ;;
    --accel) ACCEL=${2-}; shift 2 || usage_error "$1 needs a value" ;;
    --cpu-props) CPU_PROPS=${2-}; shift 2 || usage_error "$1 needs a value" ;;
    --net) NET=1; shift ;;
    -v|--verbose) VERBOSE=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -*) usage_error "unknown option $1" ;;
    *) break ;;
  esac
done
(($#)) || usage_error "no COMMAND given"
for pair in "--nodes:$NODES" "--cpus-per-node:$CPN" "--mem-per-node:$MEM" "--timeout:$TIMEOUT"; do
  [[ ${pair#*:} =~ ^[1-9][0-9]*$ ]] || usage_error "${pair%%:*} wants a positive integer, got '${pair#*:}'"
done
((NODES <= 64 && NODES * CPN <= 255)) || usage_error "at most 64 nodes and 255 vCPUs"
((MEM >= 64)) || usage_error "--mem-per-node must be at least 64 (MiB)"
[[ $ACCEL =~ ^(auto|kvm|tcg)$ ]] || usage_error "--accel wants auto, kvm or tcg"
[[ $CPU_PROPS =~ ^[A-Za-z0-9_=,.-]*$ ]] || usage_error "--cpu-props wants name=value[,name=value...], got '$CPU_PROPS'"

# --- dependencies ------------------------------------------------------------
newest_kernel() {  # prints "vmlinuz-path version" of the newest kernel with modules
  local k v
  for k in $(ls -1 /boot/vmlinuz-* 2>/dev/null | sort -rV); do
    v=${k#/boot/vmlinuz-}
    if [[ -r $k && -r /lib/modules/$v/modules.dep ]]; then echo "$k $v"; return 0; fi
  done
  return 1
}
missing=()
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
command -v busybox >/dev/null || missing+=(busybox-static)
newest_kernel >/dev/null || missing+=(linux-image-amd64)
if ((${#missing[@]})); then
  ((EUID == 0)) || die "missing Debian packages: ${missing[*]} (run: sudo apt-get install ${missing[*]})"
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 ||
    { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; } ||
    die "apt-get install ${missing[*]} failed"
fi
read -r VMLINUZ KVER < <(newest_kernel) || die "no /boot/vmlinuz-* with modules in /lib/modules"
BUSYBOX=$(command -v busybox)

# --- scratch space -----------------------------------------------------------
CACHE=${NUMA_VM_CACHE:-${TMPDIR:-/tmp}/numa-vm-cache-$EUID}
mkdir -p "$CACHE"
RUN=$(mktemp -d "${TMPDIR:-/tmp}/numa-vm.XXXXXX")
QEMU_PID=
stop_vm() {
  [[ -n $QEMU_PID ]] || return 0
  kill "$QEMU_PID" 2>/dev/null || true
  for _ in {1..20}; do kill -0 "$QEMU_PID" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$QEMU_PID" 2>/dev/null || true
  wait "$QEMU_PID" 2>/dev/null || true
  QEMU_PID=
}
cleanup() { stop_vm; rm -rf "$RUN"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- kernel: boot the uncompressed vmlinux through its PVH entry point -------
# Under TCG the bzImage's real-mode setup and self-decompression are emulated
# and cost seconds per boot; the ELF vmlinux skips both. It is unpacked once.
vmlinux_for_pvh() {
  grep -qx 'CONFIG_PVH=y' "/boot/config-$KVER" 2>/dev/null || return 1
  local out=$CACHE/vmlinux-$KVER-$(stat -c %Y "$VMLINUZ")
  [[ -s $out ]] && { echo "$out"; return 0; }
  local tmp=$out.$$ magic tool offset
  for magic in 'xz:\xfd7zXZ\x00' 'zstd:\x28\xb5\x2f\xfd' 'gzip:\x1f\x8b\x08'; do
    tool=${magic%%:*}
    command -v "$tool" >/dev/null || continue
    for offset in $(LC_ALL=C grep -obUaP "${magic#*:}" "$VMLINUZ" 2>/dev/null | cut -d: -f1 | head -3); do
      tail -c +$((offset + 1)) "$VMLINUZ" | "$tool" -dc 2>/dev/null > "$tmp" || true
      if [[ $(head -c 4 "$tmp" | od -An -c | tr -d ' ') == '177ELF' ]]; then
        mv "$tmp" "$out"; echo "$out"; return 0
      fi
    done
  done
  rm -f "$tmp"
  return 1
}
KERNEL=$(vmlinux_for_pvh || echo "$VMLINUZ")
log "kernel $KERNEL"

# --- initramfs: busybox, the 9p/overlay modules, and /init -------------------
IR=$RUN/initramfs
mkdir -p "$IR"/{bin,dev,proc,sys,host,rw,root,ctl,modules}
cp "$BUSYBOX" "$IR/bin/busybox"
for applet in sh mount mkdir insmod switch_root cat sync poweroff sleep; do ln -s busybox "$IR/bin/$applet"; done

declare -A SEEN=()
MODULES=()
add_module() {  # adds a module and, first, what it depends on (from modules.dep)
  local name=${1//-/_} line dep
  [[ -z ${SEEN[$name]-} ]] || return 0
  SEEN[$name]=1
  local pattern="(^|/)${name//_/[-_]}\\.ko(\\.xz|\\.zst|\\.gz)?:"
  line=$(grep -E "$pattern" "/lib/modules/$KVER/modules.dep" | head -1) || return 0  # built in
  for dep in ${line#*:}; do dep=${dep##*/}; add_module "${dep%%.ko*}"; done
  MODULES+=("${line%%:*}")
}
for m in virtio_pci 9pnet_virtio 9p overlay; do add_module "$m"; done
i=0
for path in "${MODULES[@]}"; do
  i=$((i + 1)); f=$(printf '%02d.ko' "$i")
  case $path in
    *.xz) xz -dc "/lib/modules/$KVER/$path" ;;
    *.zst) zstd -qdc "/lib/modules/$KVER/$path" ;;
    *.gz) gzip -dc "/lib/modules/$KVER/$path" ;;
    *) cat "/lib/modules/$KVER/$path" ;;
  esac > "$IR/modules/$f" || die "cannot read module $path"
done

cat > "$IR/init" <<'EOF'
#!/bin/sh
# Stage 1: mount the host root read-only with a tmpfs overlay, switch to it.
fail() { echo "numa-vm init: $*"; poweroff -f; sleep 5; }
mount -t proc proc /proc && mount -t sysfs sysfs /sys && mount -t devtmpfs dev /dev || fail "mounts"
for m in /modules/*.ko; do insmod "$m" || fail "insmod $m"; done
O=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o "$O,ro,cache=loose" host /host || fail "host root over 9p"
mount -t tmpfs tmpfs /rw && mkdir /rw/upper /rw/work || fail "tmpfs"
mount -t overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work overlay /root || fail "overlay"
mount -t tmpfs -o mode=0755 tmpfs /root/run && mkdir -p /root/run/numa-vm || fail "run"
mount -t 9p -o "$O" ctl /root/run/numa-vm || fail "control share"
echo up > /root/run/numa-vm/booted
for d in proc sys dev; do mount --move /$d /root/$d || fail "move /$d"; done
exec switch_root /root /bin/sh /run/numa-vm/stage2
EOF
chmod +x "$IR/init"
(cd "$IR" && find . | LC_ALL=C sort | busybox cpio -o -H newc 2>/dev/null | gzip -1) > "$RUN/initrd" ||
  die "cannot build the initramfs"

# --- control share: the command, its output, its status ----------------------
CTL=$RUN/ctl
mkdir -p "$CTL"
{
  echo '#!/bin/sh'
  echo '# Stage 2, in the host tree: the few mounts a program expects, then COMMAND.'
  echo 'mkdir -p /dev/pts /dev/shm'
  echo 'mount -t devpts devpts /dev/pts; mount -t tmpfs tmpfs /dev/shm'
  echo 'ln -sf /proc/self/fd /dev/fd'
  echo 'mount -t cgroup2 cgroup2 /sys/fs/cgroup'
  echo '# Loopback up, as on any booted system: servers under test listen on it.'
  printf '%q ip link set lo up\n' "$BUSYBOX"
  if ((NET)); then
    echo 'modprobe virtio_net'
    echo 'for i in 1 2 3 4 5 6 7 8 9 10; do [ -e /sys/class/net/eth0 ] && break; sleep 0.2; done'
    printf '%q ip link set eth0 up && %q ip addr add 10.0.2.15/24 dev eth0 && %q ip route add default via 10.0.2.2\n' \
      "$BUSYBOX" "$BUSYBOX" "$BUSYBOX"
  fi
  printf '%q --noprofile --norc /run/numa-vm/cmd.sh </dev/null >/run/numa-vm/stdout 2>/run/numa-vm/stderr\n' "$BASH"
  echo 'echo $? > /run/numa-vm/rc'
  echo 'sync; poweroff -f'
} > "$CTL/stage2"
{
  # The caller's exported environment, minus what belongs to the host session.
  while IFS= read -r name; do
    case $name in PWD|OLDPWD|SHLVL|_|HOSTNAME|HOME|TMPDIR) continue ;; esac
    printf 'export %s=%q\n' "$name" "${!name}"
  done < <(compgen -e)
  echo 'export HOME=/root NUMA_VM_GUEST=1'
  printf 'cd %q || exit 125\n' "$PWD"
  printf 'exec'; printf ' %q' "$@"; printf '\n'
} > "$CTL/cmd.sh"

# --- QEMU --------------------------------------------------------------------
TOTAL_CPUS=$((NODES * CPN))
QEMU_ARGS=(
  -machine q35 -nodefaults -no-user-config -display none -no-reboot -monitor none
  -smp "$TOTAL_CPUS,sockets=$NODES,cores=$CPN,threads=1" -m "$((NODES * MEM))M"
  -kernel "$KERNEL" -initrd "$RUN/initrd"
  -append "console=ttyS0 quiet panic=-1 rdinit=/init mitigations=off 8250.nr_uarts=1"
  -serial "file:$RUN/console.log"
  -virtfs local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap
  -virtfs "local,path=$CTL,mount_tag=ctl,security_model=none"
)
# QEMU's user network: 10.0.2.2 is this machine's loopback.
((NET)) && QEMU_ARGS+=(-netdev user,id=net0 -device virtio-net-pci,netdev=net0)
if ((NODES > 1)); then
  for ((n = 0; n < NODES; n++)); do
    QEMU_ARGS+=(-object "memory-backend-ram,id=mem$n,size=${MEM}M"
                -numa "node,nodeid=$n,cpus=$((n * CPN))-$((n * CPN + CPN - 1)),memdev=mem$n")
  done
fi

# boot ACCEL: sets STATUS to done | timeout | hang (never reached the initramfs) | failed
boot() {
  local accel=$1 limit start elapsed
  local -a accel_args
  if [[ $accel == kvm ]]; then
    accel_args=(-accel kvm -cpu "host${CPU_PROPS:+,$CPU_PROPS}"); limit=20
  else
    # Single-threaded TCG: multi-threaded TCG occasionally lost an IPI at boot.
    accel_args=(-accel tcg,thread=single -cpu "max${CPU_PROPS:+,$CPU_PROPS}"); limit=${NUMA_VM_BOOT_SECS:-30}
  fi
  rm -f "$CTL/booted" "$CTL/rc" "$CTL/stdout" "$CTL/stderr"
  log "booting: $accel, $NODES nodes x $CPN vCPUs, ${MEM} MiB per node"
  setpriv --pdeathsig KILL -- qemu-system-x86_64 "${accel_args[@]}" "${QEMU_ARGS[@]}" \
    </dev/null >"$RUN/qemu.log" 2>&1 &
  QEMU_PID=$!
  start=$SECONDS
  while kill -0 "$QEMU_PID" 2>/dev/null; do
    elapsed=$((SECONDS - start))
    if ((SECONDS - T0 >= TIMEOUT)); then stop_vm; STATUS=timeout; return; fi
    if ((elapsed >= limit)) && [[ ! -e $CTL/booted ]]; then stop_vm; STATUS=hang; return; fi
    sleep 0.05
  done
  wait "$QEMU_PID" || true
  QEMU_PID=
  if [[ -e $CTL/rc ]]; then STATUS=done; elif [[ -e $CTL/booted ]]; then STATUS=failed; else STATUS=hang; fi
}

kvm_usable() {
  [[ -r /dev/kvm && -w /dev/kvm ]] || return 1
  # PVM, a nested KVM of some sandboxes, only runs specially built guests.
  [[ -d /sys/module/kvm_pvm && ! -d /sys/module/kvm_intel && ! -d /sys/module/kvm_amd ]] && return 1
  [[ ! -e $CACHE/kvm-hangs.$(cat /proc/sys/kernel/random/boot_id) ]]
}

T0=$SECONDS
STATUS=
if [[ $ACCEL == kvm ]] || { [[ $ACCEL == auto ]] && kvm_usable; }; then
  boot kvm
  if [[ $STATUS == hang && $ACCEL == auto ]]; then
    log "KVM did not boot the guest; using TCG from now on"
    : > "$CACHE/kvm-hangs.$(cat /proc/sys/kernel/random/boot_id)"
    boot tcg
  fi
else
  boot tcg
  retries=0
  while [[ $STATUS == hang ]] && ((retries++ < ${NUMA_VM_BOOT_RETRIES:-2})); do
    log "boot hung; retrying"
    boot tcg
  done
fi
log "VM ran $((SECONDS - T0)) s: $STATUS"

if ((VERBOSE)); then { echo "--- guest console ---"; cat "$RUN/console.log" "$RUN/qemu.log"; } >&2 2>/dev/null || true; fi
cat "$CTL/stdout" 2>/dev/null || true
cat "$CTL/stderr" >&2 2>/dev/null || true
case $STATUS in
  done) exit "$(cat "$CTL/rc")" ;;
  timeout) printf '%s: COMMAND did not finish within %s s; VM killed\n' "$PROG" "$TIMEOUT" >&2; exit 124 ;;
  *)
    {
      printf '%s: the VM failed (%s)\n' "$PROG" "$STATUS"
      tail -n 5 "$RUN/qemu.log"; tail -n 30 "$RUN/console.log"
    } >&2 2>/dev/null
    exit 125 ;;
esac
