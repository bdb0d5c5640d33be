#!/bin/bash
# integration/vm/run.sh - run a program as root (PID 1's child) inside a
# throwaway QEMU VM whose stock Debian kernel has a pure cgroup v2 hierarchy.
#
# usage: integration/vm/run.sh [-s] [-x PROGRAM]... [-d HOSTDIR:GUESTDIR]...
#                              [-p DEB]... [-e NAME=VALUE]... PAYLOAD [ARGS...]
#   PAYLOAD  the program to run in the VM (static or dynamic: its libraries
#            come along); it runs as /payload/<name> with ARGS, cwd /tmp
#   -x PROG  a (dynamically linked) program to put in the guest's /bin, with
#            the shared libraries and the dynamic loader that ldd lists
#   -d H:G   copy the host directory tree H to G in the guest (in RAM), with
#            the libraries of any dynamic executable in it
#   -p DEB   put the Debian package DEB in the guest as /packages/<name>,
#            with dpkg to install it: dpkg, dpkg-deb and GNU tar, the
#            libraries its executables need, and a /var/lib/dpkg that
#            records as installed only the host's packages DEB depends on
#   -e N=V   set the environment variable N=V for the payload
#   -s       boot the host's systemd as PID 1 and run the payload as the
#            service vm-payload.service (stdout on the console), so that
#            it can install and start units as on a real system
#
# environment (all optional):
#   VM_CACHE    kernel cache dir        (default integration/vm/.cache)
#   VM_KERNEL   Debian kernel metapackage to boot (default linux-image-cloud-amd64)
#   VM_MEM      guest RAM in MiB        (default 2048; the initramfs lives in it)
#   VM_TIMEOUT  seconds before the VM is killed (default 1200)
#   VM_ACCEL    auto|tcg|kvm            (default auto: KVM only on real VT-x/AMD-V)
#   VM_MODULES  kernel modules to load at boot, with their dependencies
#               (default "overlay veth"; the Debian kernels build them as modules)
#   VM_CGROUP   run the payload alone in this non-root cgroup (e.g. pmjail.service)
#               like a systemd Delegate=yes service; default: the root cgroup
#   VM_LOG      console log file        (default $VM_CACHE/console.log)
#
# exit status: the payload's; 125 if the VM gave no result (crash, timeout);
# 2 for a usage error. Nothing is left running; the temp work dir is removed.
set -euo pipefail

SELF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly SELF_DIR
readonly MARKER='@@EXIT='
readonly CACHE=${VM_CACHE:-$SELF_DIR/.cache}
readonly KERNEL_PKG=${VM_KERNEL:-linux-image-cloud-amd64}
readonly MEM=${VM_MEM:-2048}
readonly TIMEOUT=${VM_TIMEOUT:-1200}
readonly ACCEL=${VM_ACCEL:-auto}
readonly GUEST_CGROUP=${VM_CGROUP:-}
readonly MODULES=${VM_MODULES-overlay veth}
readonly LOG=${VM_LOG:-$CACHE/console.log}
# Packages on the host: the emulator, a static busybox for the guest's
# userland, cpio to pack the initramfs, depmod and the kernel's decompressors.
HOST_PACKAGES=(qemu-system-x86 busybox-static cpio kmod xz-utils zstd)

SYSTEMD=
EXTRA_PROGRAMS=()
EXTRA_DIRS=()
PACKAGES=()
GUEST_ENV=()
WORK=
APT_UPDATED=

log() { echo "vm: $*" >&2; }
die() { echo "vm: $*" >&2; exit 125; }
usage() { sed -n '4,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

# quote prints $1 as one single-quoted POSIX shell word (busybox ash has no
# printf %q), so arguments and environment reach the guest byte for byte.
quote() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

parse_args() {
  local opt
  while getopts ':x:d:p:e:sh' opt; do
    case $opt in
      s) SYSTEMD=1 ;;
      x) [ -x "$OPTARG" ] || { log "-x $OPTARG: not an executable"; exit 2; }
         EXTRA_PROGRAMS+=("$(readlink -f "$OPTARG")") ;;
      d) if [[ $OPTARG != ?*:/* ]] || [ ! -d "${OPTARG%%:*}" ]; then
           log "-d $OPTARG: want an existing HOSTDIR:/GUESTDIR"; exit 2
         fi
         EXTRA_DIRS+=("$OPTARG") ;;
      p) [[ $OPTARG == *.deb && -f $OPTARG ]] || { log "-p $OPTARG: not a .deb file"; exit 2; }
         PACKAGES+=("$(readlink -f "$OPTARG")") ;;
      e) [[ $OPTARG =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] ||
           { log "-e $OPTARG: want NAME=VALUE"; exit 2; }
         GUEST_ENV+=("$OPTARG") ;;
      *) usage ;;
    esac
  done
  shift $((OPTIND - 1))
  [ $# -ge 1 ] || usage
  [ -x "$1" ] || { log "payload $1: not an executable"; exit 2; }
  if [ -n "$SYSTEMD" ]; then
    # systemd places the payload's service in its own cgroup.
    [ -z "$GUEST_CGROUP" ] || { log "-s and VM_CGROUP: systemd chooses the payload's cgroup"; exit 2; }
    HOST_PACKAGES+=(systemd)
  fi
  PAYLOAD=$(readlink -f "$1"); shift
  PAYLOAD_ARGS=("$@")
}

apt_update_once() {
  [ -n "$APT_UPDATED" ] && return
  log "apt-get update"
  apt-get update -qq >/dev/null
  APT_UPDATED=1
}

# ensure_host_packages installs what is missing, so a second run is a no-op.
ensure_host_packages() {
  local missing=() p
  for p in "${HOST_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  apt_update_once
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# resolve_kernel_package prints the versioned image package the metapackage
# depends on (linux-image-amd64 -> linux-image-6.1.0-NN-amd64).
resolve_kernel_package() {
  local pkg
  pkg=$(apt-cache depends "$KERNEL_PKG" 2>/dev/null |
        awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  if [ -z "$pkg" ]; then
    apt_update_once
    pkg=$(apt-cache depends "$KERNEL_PKG" | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  fi
  [ -n "$pkg" ] || die "cannot resolve the image package of $KERNEL_PKG"
  echo "$pkg"
}

# le32 FILE OFFSET prints the little-endian 32-bit number at OFFSET.
le32() { od -An -tu4 -j "$2" -N4 "$1" | tr -d ' '; }

# extract_vmlinux BZIMAGE OUT unpacks the ELF kernel inside a bzImage, using
# the boot protocol's setup header (payload_offset/payload_length at 0x248)
# rather than searching for a magic number. QEMU boots that ELF through its
# PVH entry point, skipping real-mode setup and decompression: ~5 s under TCG.
extract_vmlinux() {
  local bz=$1 out=$2 sects off len
  sects=$(od -An -tu1 -j $((0x1f1)) -N1 "$bz" | tr -d ' ')
  [ "$sects" -ne 0 ] || sects=4
  off=$(( (sects + 1) * 512 + $(le32 "$bz" $((0x248))) ))
  len=$(le32 "$bz" $((0x24c)))
  tail -c +$((off + 1)) "$bz" | head -c "$len" > "$out.z"
  # The compressed stream is followed by its uncompressed size (4 bytes);
  # decompressors may complain about it, so judge by the output instead.
  case $(od -An -tx1 -N4 "$out.z" | tr -d ' ') in
    fd377a58) xz -dc --single-stream "$out.z" ;;
    28b52ffd) zstd -dcq "$out.z" ;;
    1f8b08*)  gzip -dc "$out.z" ;;
    02214c18) lz4 -dcq "$out.z" ;;
    *)        log "unknown kernel compression"; : ;;
  esac > "$out" 2>/dev/null || true
  rm -f "$out.z"
  [ "$(head -c 4 "$out" 2>/dev/null)" = $'\x7fELF' ]
}

# fetch_kernel downloads (never installs) the kernel package once into the
# cache and leaves KERNEL_DIR with vmlinux (ELF, or the bzImage as a
# fallback) and the kernel's config.
fetch_kernel() {
  local pkg ver dl
  pkg=$(resolve_kernel_package)
  ver=${pkg#linux-image-}
  KERNEL_DIR=$CACHE/kernel/$pkg
  [ -s "$KERNEL_DIR/vmlinux" ] && return
  log "fetching $pkg"
  mkdir -p "$KERNEL_DIR"
  dl=$WORK/deb; mkdir -p "$dl"
  # apt's download sandbox user (_apt) cannot write to a root-owned temp dir.
  (cd "$dl" && apt-get download -qq -o APT::Sandbox::User=root "$pkg") ||
    { apt_update_once; (cd "$dl" && apt-get download -qq -o APT::Sandbox::User=root "$pkg"); }
  dpkg-deb --fsys-tarfile "$dl"/"$pkg"_*.deb |
    tar -x -C "$dl" "./boot/vmlinuz-$ver" "./boot/config-$ver" "./lib/modules/$ver"
  cp "$dl/boot/config-$ver" "$KERNEL_DIR/config"
  # The package ships no modules.dep (its postinst runs depmod): make one.
  depmod -b "$dl" "$ver"
  rm -rf "$KERNEL_DIR/modules"
  mv "$dl/lib/modules/$ver" "$KERNEL_DIR/modules"
  if grep -q '^CONFIG_PVH=y' "$KERNEL_DIR/config" &&
     extract_vmlinux "$dl/boot/vmlinuz-$ver" "$KERNEL_DIR/vmlinux.tmp"; then
    log "extracted an ELF vmlinux for PVH boot"
  else
    log "booting the bzImage (no PVH ELF)"
    cp "$dl/boot/vmlinuz-$ver" "$KERNEL_DIR/vmlinux.tmp"
  fi
  mv "$KERNEL_DIR/vmlinux.tmp" "$KERNEL_DIR/vmlinux"   # atomic: a cache hit is complete
  rm -rf "$dl"
}

# copy_libs PROGRAM copies the shared libraries and the loader ldd names for
# a dynamic program, at their host paths; a static one needs none. Only
# the paths ldd resolved ("name => /path", the loader's "/path"): a
# program the loader refuses (the suite's C programs include one whose
# DT_RUNPATH leads to /etc/passwd) makes ldd print its error on stdout.
copy_libs() {
  local lib
  while read -r lib; do
    [ -e "$ROOT$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$ROOT$lib"
  done < <(ldd "$1" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $2 ~ /^\(0x/ { print $1 }' || true)
}

copy_program() {
  install -D -m 0755 "$1" "$ROOT$2"
  copy_libs "$1"
}

# copy_tree HOSTDIR:GUESTDIR copies a tree, and the libraries of the ELF
# executables in it (e.g. Deno inside node_modules), so -d alone suffices.
copy_tree() {
  local host=${1%%:*} guest=${1#*:} f
  mkdir -p "$ROOT$guest"
  # Hard links when the work dir shares the file system: no 100 MB copy.
  cp -al "$host/." "$ROOT$guest/" 2>/dev/null || cp -a "$host/." "$ROOT$guest/"
  while IFS= read -r -d '' f; do
    if [ "$(head -c 4 "$f")" = $'\x7fELF' ]; then copy_libs "$f"; fi
  done < <(find "$host" -type f -perm -u+x -print0)
}

# add_packages puts each -p package in /packages with what dpkg -i needs
# in a guest that has only busybox: dpkg and the programs it runs (dpkg-deb,
# which runs tar -x with GNU options for the control archive; dpkg-split;
# dpkg-query; ldconfig, which dpkg wants in PATH), the libraries the
# package's executables link (they come from the host, as every guest
# library does), and a dpkg database holding only the host's records of
# the packages it depends on, which those libraries satisfy. A package's
# scripts find what the guest has: with -s, systemd-sysusers.
add_packages() {
  local deb tree f dep pkg db=$ROOT/var/lib/dpkg
  [ ${#PACKAGES[@]} -gt 0 ] || return 0
  for f in dpkg dpkg-deb dpkg-split dpkg-query tar ldconfig; do
    copy_program "$(command -v "$f")" "/bin/$f"
  done
  mkdir -p "$db/info" "$db/updates" "$db/triggers" "$ROOT/packages"
  : > "$db/status"; : > "$db/available"
  for deb in "${PACKAGES[@]}"; do
    cp "$deb" "$ROOT/packages/"
    tree=$WORK/deb-tree
    dpkg-deb -x "$deb" "$tree"
    # tr: an executable may start with a NUL (Pyodide's wasm), which bash
    # would warn about; the ELF magic has none.
    while IFS= read -r -d '' f; do
      if [ "$(head -c 4 "$f" | tr -d '\0')" = $'\x7fELF' ]; then copy_libs "$f"; fi
    done < <(find "$tree" -type f -perm -u+x -print0)
    rm -rf "$tree"
    # Depends: "a (>= 1), b | c": every package named, alternatives too.
    for dep in $(dpkg-deb -f "$deb" Depends | sed -e 's/([^)]*)//g' -e 's/[,|]/ /g'); do
      pkg=$(dpkg-query -W -f='${binary:Package}' "${dep%%:*}" 2>/dev/null) || continue
      grep -q "^Package: ${dep%%:*}\$" "$db/status" && continue
      { dpkg-query -s "$pkg"; echo; } >> "$db/status"
      : > "$db/info/$pkg.list"
    done
  done
}

write_etc() {
  mkdir -p "$ROOT/etc" "$ROOT/root"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$ROOT/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$ROOT/etc/group"
  printf '127.0.0.1 localhost\n::1 localhost\n' > "$ROOT/etc/hosts"
  printf 'hosts: files\n' > "$ROOT/etc/nsswitch.conf"
}

# write_payload_script writes /run-payload, which runs the payload with its
# arguments and environment and prints the result marker: the busybox init
# calls it, or systemd as the service vm-payload.service.
write_payload_script() {
  local kv a
  {
    echo '#!/bin/busybox sh'
    echo "# generated by integration/vm/run.sh"
    echo "GUEST_CGROUP=$(quote "$GUEST_CGROUP")"
    echo "PAYLOAD=$(quote "/payload/${PAYLOAD##*/}")"
    printf 'set --'; for a in "${PAYLOAD_ARGS[@]}"; do printf ' %s' "$(quote "$a")"; done; echo
    echo 'export PATH=/bin:/usr/bin:/sbin:/usr/sbin HOME=/root TERM=dumb'
    # -e variables: after the defaults above, so they can override them.
    for kv in "${GUEST_ENV[@]}"; do echo "export ${kv%%=*}=$(quote "${kv#*=}")"; done
    cat <<'EOF'
echo "@@BOOTED uptime=$(cut -d' ' -f1 /proc/uptime)s kernel=$(uname -r) controllers=$(cat /sys/fs/cgroup/cgroup.controllers)"
cd /tmp
if [ -n "$GUEST_CGROUP" ]; then
  # Like a systemd service with Delegate=yes: the payload is the only process
  # of a non-root cgroup, and must itself move into a leaf before it can
  # enable controllers for job cgroups beneath it.
  mkdir -p "/sys/fs/cgroup/$GUEST_CGROUP"
  sh -c 'echo $$ > "/sys/fs/cgroup/$0/cgroup.procs" && exec "$@"' "$GUEST_CGROUP" "$PAYLOAD" "$@"
else
  "$PAYLOAD" "$@"
fi
rc=$?
echo "@@EXIT=$rc uptime=$(cut -d' ' -f1 /proc/uptime)s"
sync
EOF
  } > "$ROOT/run-payload"
  chmod 0755 "$ROOT/run-payload"
}

# write_init writes the guest's PID 1. Both kinds first move the root onto
# a tmpfs and load the modules. The busybox init then mounts the API file
# systems and the cgroup2 hierarchy, enables the controllers a job
# supervisor needs, runs the payload and powers off; with -s it becomes
# systemd, which does all that itself.
write_init() {
  {
    echo '#!/bin/busybox sh'
    echo "# generated by integration/vm/run.sh"
    cat <<'EOF'
# The initramfs root (rootfs) cannot be pivot_root'ed away from, as a jail
# must: like a real system, move onto a tmpfs root first.
if [ ! -e /.switched ]; then
  /bin/busybox mkdir -p /newroot
  /bin/busybox mount -t tmpfs -o size=80%,mode=0755 root /newroot
  for d in /*; do
    case $d in /newroot|/proc|/sys|/dev) ;; *) /bin/busybox cp -a "$d" /newroot/ ;; esac
  done
  /bin/busybox mkdir -p /newroot/proc /newroot/sys /newroot/dev
  /bin/busybox touch /newroot/.switched
  exec /bin/busybox switch_root /newroot /init
fi
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin:/sbin:/usr/sbin
while read -r m; do insmod "$m" || echo "@@MODULE $m failed"; done < /etc/modules.load
EOF
    if [ -n "$SYSTEMD" ]; then
      echo 'exec /lib/systemd/systemd --unit=vm-payload.target --log-target=console --log-level=notice --log-color=no --show-status=no'
    else
      cat <<'EOF'
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
# / is a tmpfs already (above): /tmp needs no mount of its own, and one
# would hide whatever the runner copied under /tmp (a checkout there).
chmod 1777 /tmp
# nsdelegate as systemd mounts it: a cgroup namespace is a delegation boundary.
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
# The root cgroup is exempt from the no-internal-process rule, so PID 1 can
# stay in it and still hand memory/pids/cpu down to child cgroups.
echo '+memory +pids +cpu' > /sys/fs/cgroup/cgroup.subtree_control
ip link set lo up 2>/dev/null
hostname pmjail-vm
/run-payload
poweroff -f
EOF
    fi
  } > "$ROOT/init"
  chmod 0755 "$ROOT/init"
}

# add_systemd puts the host's systemd and systemctl in the guest, with the
# stock targets and slices (without what they pull in: no getty, journald
# or udev) and a target that starts only the payload's service, which
# powers the VM off when it ends. Without journald, systemd and the units
# it starts log to the console.
add_systemd() {
  local units=/usr/lib/systemd/system
  copy_program "$(readlink -f /lib/systemd/systemd)" /lib/systemd/systemd
  copy_program "$(readlink -f /bin/systemctl)" /bin/systemctl
  # What a package's scripts call to make its system users and groups.
  copy_program "$(readlink -f /bin/systemd-sysusers)" /bin/systemd-sysusers
  mkdir -p "$ROOT$units" "$ROOT/etc/systemd/system"
  cp -P "$units"/*.target "$units"/*.slice "$ROOT$units/"
  install -m 0644 "$(readlink -f /etc/os-release)" "$ROOT/etc/os-release"
  : > "$ROOT/etc/machine-id"   # empty: systemd makes a transient one
  echo pmjail-vm > "$ROOT/etc/hostname"
  ln -s ../run "$ROOT/var/run"
  cat > "$ROOT/etc/systemd/system/vm-payload.target" <<'EOF'
[Unit]
Description=integration/vm/run.sh payload
AllowIsolate=yes
Wants=vm-payload.service
EOF
  cat > "$ROOT/etc/systemd/system/vm-payload.service" <<'EOF'
[Unit]
Description=integration/vm/run.sh payload
SuccessAction=poweroff-immediate
FailureAction=poweroff-immediate
[Service]
Type=oneshot
ExecStart=/run-payload
StandardOutput=tty
StandardError=inherit
TTYPath=/dev/ttyS0
TTYReset=no
TTYVHangup=no
EOF
}

# add_modules copies the VM_MODULES modules and their dependencies (from
# modules.dep, decompressed: busybox insmod takes plain .ko files) and lists
# them in load order for init.
add_modules() {
  # seen and list are used by queue_module (bash's dynamic scope).
  local name rel i deps=() seen=" " list=$ROOT/etc/modules.load
  : > "$list"
  for name in $MODULES; do
    rel=$(awk -F: -v n="$name" '{ f = $1; sub(/.*\//, "", f); sub(/\.ko(\.[a-z]+)?$/, "", f);
            gsub(/-/, "_", f); m = n; gsub(/-/, "_", m) } f == m { print; exit }' \
          "$KERNEL_DIR/modules/modules.dep")
    [ -n "$rel" ] || { log "module $name: not in this kernel (built in?)"; continue; }
    # modules.dep names a module's dependencies, deepest last: load in reverse.
    read -r -a deps <<< "${rel#*:}"
    for ((i = ${#deps[@]} - 1; i >= 0; i--)); do queue_module "${deps[i]}"; done
    queue_module "${rel%%:*}"
  done
}

queue_module() {
  local rel=$1 out
  case $seen in *" $rel "*) return ;; esac
  seen+="$rel "
  out=/lib/modules/$(basename "${rel%.ko*}").ko
  mkdir -p "$ROOT/lib/modules"
  case $rel in
    *.ko.xz)  xz -dc "$KERNEL_DIR/modules/$rel" > "$ROOT$out" ;;
    *.ko.zst) zstd -dcq "$KERNEL_DIR/modules/$rel" > "$ROOT$out" ;;
    *.ko.gz)  gzip -dc "$KERNEL_DIR/modules/$rel" > "$ROOT$out" ;;
    *)        cp "$KERNEL_DIR/modules/$rel" "$ROOT$out" ;;
  esac
  echo "$out" >> "$list"
}

# build_initramfs packs an uncompressed newc cpio: the kernel unpacks it
# fastest, and it is freed once unpacked into the rootfs (which stays in RAM).
build_initramfs() {
  local p d
  ROOT=$WORK/root
  mkdir -p "$ROOT"/{bin,dev,proc,sys,tmp,run,payload,sys/fs/cgroup,var/tmp}
  chmod 1777 "$ROOT/var/tmp"
  install -m 0755 /bin/busybox "$ROOT/bin/busybox"
  copy_program "$PAYLOAD" "/payload/${PAYLOAD##*/}"
  for p in "${EXTRA_PROGRAMS[@]}"; do copy_program "$p" "/bin/${p##*/}"; done
  for d in "${EXTRA_DIRS[@]}"; do copy_tree "$d"; done
  add_packages
  write_etc
  add_modules
  [ -z "$SYSTEMD" ] || add_systemd
  write_payload_script
  write_init
  (cd "$ROOT" && find . -mindepth 1 | cpio -o -H newc --quiet) > "$WORK/initrd.cpio"
  rm -rf "$ROOT"
  log "initramfs $(( $(stat -c %s "$WORK/initrd.cpio") / 1048576 )) MiB, guest RAM $MEM MiB"
}

# accel_args chooses the accelerator. /dev/kvm alone proves nothing: on hosts
# where it is a paravirtual (kvm_pvm) device stock kernels do not boot, so
# KVM is used only with a real VT-x/AMD-V module loaded.
accel_args() {
  local kvm=
  if [ "$ACCEL" = kvm ] || { [ "$ACCEL" = auto ] && [ -w /dev/kvm ] &&
       { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; }; }; then
    kvm=1
  fi
  if [ -n "$kvm" ]; then
    QEMU_ACCEL=(-accel kvm -cpu host -smp 2)
  else
    # One vCPU, single-threaded TCG: multi-threaded TCG with 2 vCPUs
    # panicked the guest about once in 20 boots.
    # shellcheck disable=SC2054 # the comma belongs to QEMU's option syntax
    QEMU_ACCEL=(-accel tcg,thread=single -cpu max -smp 1)
  fi
}

boot() {
  local cmdline status=0
  accel_args
  # quiet + panic=-1: a guest panic ends QEMU (with -no-reboot) instead of
  # hanging until the timeout; cgroup_no_v1=all: a pure v2 host; the rest
  # trims boot work that TCG makes slow.
  cmdline="console=ttyS0 quiet panic=-1 oops=panic cgroup_no_v1=all mitigations=off"
  cmdline+=" cryptomgr.notests i8042.noaux i8042.nokbd i8042.nopnp tsc=reliable"
  mkdir -p "$(dirname "$LOG")"
  log "booting $(basename "$KERNEL_DIR") (${QEMU_ACCEL[1]}), log $LOG"
  # --foreground keeps QEMU in our process group, so a cancelled CI job's
  # signal reaches it; -k kills it if it ignores the TERM. The pipeline runs
  # in the background so that a signal to this script alone is handled at
  # once (bash defers traps until a foreground job ends): cleanup kills QEMU.
  (
    timeout --foreground -k 5 "$TIMEOUT" \
      qemu-system-x86_64 -M pc -nodefaults -no-user-config "${QEMU_ACCEL[@]}" \
        -m "$MEM" -display none -serial stdio -no-reboot \
        -pidfile "$WORK/qemu.pid" \
        -kernel "$KERNEL_DIR/vmlinux" -initrd "$WORK/initrd.cpio" -append "$cmdline" \
        </dev/null | sed -u 's/\r$//' | tee "$WORK/console.log"
  ) &
  wait $! || status=$?
  QEMU_STATUS=$status
}

# shellcheck disable=SC2317 # reached through the EXIT trap
cleanup() {
  local pid
  if [ -n "$WORK" ] && [ -s "$WORK/qemu.pid" ]; then
    pid=$(cat "$WORK/qemu.pid")
    # Only the QEMU this run started, and only if it is still that process.
    if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = qemu-system-x86 ]; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  # The log is kept per run and copied out at the end (also after a timeout
  # or an interrupt), so concurrent runs never read each other's marker.
  if [ -n "$WORK" ] && [ -f "$WORK/console.log" ]; then
    if cp "$WORK/console.log" "$LOG.tmp.$$"; then mv "$LOG.tmp.$$" "$LOG"; fi
  fi
  [ -z "$WORK" ] || rm -rf "$WORK"
}

main() {
  local t0 t1 t2 rc
  parse_args "$@"
  t0=$(date +%s.%N)
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  ensure_host_packages
  mkdir -p "$CACHE"
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/pmjail-vm.XXXXXX")
  # One fetch at a time: concurrent runs share the cache.
  exec 9>"$CACHE/.lock"
  flock 9
  fetch_kernel
  flock -u 9
  build_initramfs
  t1=$(date +%s.%N)
  boot
  t2=$(date +%s.%N)
  rc=$(sed -n "s/^$MARKER\([0-9]\{1,3\}\)\( .*\)\{0,1\}\$/\1/p" "$WORK/console.log" | tail -n 1)
  log "$(awk -v a="$t0" -v b="$t1" -v c="$t2" \
    'BEGIN { printf "prepare %.1fs, VM %.1fs, total %.1fs", b - a, c - b, c - a }')"
  if [ -z "$rc" ]; then
    log "no ${MARKER} marker (QEMU/timeout status $QEMU_STATUS; 124 = timeout)"
    exit 125
  fi
  exit "$rc"
}

main "$@"
