#!/usr/bin/env bash
# Installs the Debian package on a fresh Debian 12 as an operator would, and checks what it does:
#
#   chroot  a Debian 12 made with debootstrap: install (files, the system user, the enabled unit,
#           `worker-host check` as that user, `new-plugin` outside a checkout finding the
#           installed SDK), remove (config and user kept), purge (config, state, user gone).
#   boot    the same Debian 12 booted with its own systemd as PID 1 (systemd-nspawn, no
#           network), with RabbitMQ: the service starts on install and handles a message with a
#           Rust plugin; a Python plugin added to worker.toml is picked up by `systemctl reload`
#           and handles one; `systemctl stop` drains and exits 0; `systemctl start`; after a
#           reboot it starts by itself and loads its components from the compile cache (nothing
#           compiled again); purge. scripts/test-package-guest.sh runs inside.
#   vm      the same as boot, in a virtual machine (qemu) booting Debian's kernel: with KVM where
#           KVM can run it, else emulated (VM_ACCEL=kvm|tcg to choose), which takes long.
#
#   scripts/test-package.sh [chroot|boot|vm|all]     (all, the default: chroot and boot)
#
# Prints a log quoting the service's journal at each step and ends with one line counting the
# checks; exits non-zero when one fails. Needs root (chroot, mounts).
#
# The .deb comes from scripts/package.sh --fast (the host's release build, once); the Python
# component from scripts/build-plugins.sh. The Debian tree (and for `vm` its disk, kernel and
# initrd) is made once under ~/.cache/worker-host/debian12/ (about 6 min); after that `chroot`
# and `boot` take about a minute together.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source scripts/debian-tree.sh

D12="$WORKER_CACHE/debian12"
D12_ROOT="$D12/root"
# What the tree holds besides minbase: a bootable systemd system, RabbitMQ, and the package's
# Depends (adduser; libc and libgcc are in minbase).
D12_PACKAGES=adduser,systemd-sysv,udev,kmod,initramfs-tools,linux-image-amd64,rabbitmq-server
GUEST="$ROOT/scripts/test-package-guest.sh"
BOOT_TIMEOUT=600
VM_ACCEL=${VM_ACCEL:-auto}

passed=0
failed=0
TMP=$(mktemp -d)
MERGED=

cleanup() {
  if [ -n "$MERGED" ]; then
    tree_umount "$MERGED"
    umount "$MERGED" 2>/dev/null || umount -l "$MERGED" 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT

say() { printf '%s\n' "$*"; }
ok() { passed=$((passed + 1)); say "ok: $*"; }
fail() { failed=$((failed + 1)); say "FAILED: $*"; }
# check DESCRIPTION COMMAND...: runs COMMAND, counts the result.
check() {
  local what=$1
  shift
  if "$@" >"$TMP/check.out" 2>&1; then ok "$what"; else fail "$what"; sed 's/^/    /' "$TMP/check.out"; fi
}

build_inputs() {
  say "== building the package (scripts/package.sh --fast)"
  DEB=$(scripts/package.sh --fast | tail -n1)
  [ -f "$DEB" ] || { say "test-package: scripts/package.sh made no .deb ($DEB)"; exit 1; }
  say "the .deb: $DEB ($(du -h "$DEB" | cut -f1))"
  PYTHON_PLUGIN="$ROOT/plugins/demo_python.wasm"
  if [ "$MODE" != chroot ] && [ ! -s "$PYTHON_PLUGIN" ]; then
    say "== building the example plugins (scripts/build-plugins.sh): the test installs the Python one"
    scripts/build-plugins.sh
  fi
}

# A throwaway copy of the Debian 12 tree: an overlay whose changes go to $TMP; with /proc, /sys
# and /dev for chroot unless `bare`.
overlay() {
  mkdir -p "$TMP/upper" "$TMP/work" "$TMP/merged"
  mount -t overlay overlay -o "lowerdir=$D12_ROOT,upperdir=$TMP/upper,workdir=$TMP/work" "$TMP/merged"
  MERGED="$TMP/merged"
  [ "${1:-}" = bare ] || tree_mount "$MERGED"
}

overlay_drop() {
  tree_umount "$MERGED"
  umount "$MERGED"
  MERGED=
  rm -rf "$TMP/upper" "$TMP/work" "$TMP/merged"
}

in_root() { chroot "$MERGED" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }

# The checks of the chroot test, each a command that fails when the check does.
user_has_no_shell() { in_root getent passwd worker-host | grep -qE ':(/usr/sbin/nologin|/bin/false)$'; }
conffiles() {
  local listed
  listed=$(in_root dpkg-query -W -f='${Conffiles}' worker-host)
  grep -q ' /etc/worker-host/worker.toml ' <<<"$listed" && grep -q ' /etc/worker-host/plugins/demo_rust.wasm ' <<<"$listed"
}
unit_enabled() {
  [ -L "$MERGED/etc/systemd/system/multi-user.target.wants/worker-host.service" ] &&
    in_root test -f /lib/systemd/system/worker-host.service
}
documentation_installed() {
  local doc
  doc=$(sed -n 's|^Documentation=file://||p' "$MERGED/lib/systemd/system/worker-host.service")
  [ -n "$doc" ] && in_root test -f "$doc"
}
sdk_installed() {
  in_root test -f /usr/share/worker-host/plugin-sdk/Cargo.toml -a -f /usr/share/worker-host/abi/Cargo.toml \
    -a -f /usr/share/worker-host/wit/worker-plugin.wit -a -d /usr/share/worker-host/plugin-sdk/python/worker \
    -a -f /usr/share/worker-host/plugin-sdk/js/package.json
}
new_plugin_anywhere() {
  in_root sh -c 'mkdir -p /tmp/mine && cd /tmp/mine && worker-host new-plugin audit-log &&
    grep "worker-plugin-sdk" plugins/audit-log/Cargo.toml && grep -q "^\[workspace\]" plugins/Cargo.toml'
  in_root grep -q 'path = "/usr/share/worker-host/plugin-sdk"' /tmp/mine/plugins/audit-log/Cargo.toml
}
removed_keeping_config() {
  in_root test -f /etc/worker-host/worker.toml -a -d /var/lib/worker-host -a ! -e /usr/bin/worker-host &&
    in_root getent passwd worker-host >/dev/null
}
purged() {
  in_root test ! -e /etc/worker-host -a ! -e /var/lib/worker-host -a ! -e /usr/share/worker-host \
    -a ! -e /lib/systemd/system/worker-host.service &&
    ! in_root getent passwd worker-host && ! in_root getent group worker-host
}


test_chroot() {
  say "== chroot: install, remove and purge in a fresh Debian 12 ($D12_ROOT, an overlay)"
  overlay
  cp "$DEB" "$MERGED/tmp/worker-host.deb"
  check "dpkg -i installs the package" in_root dpkg -i /tmp/worker-host.deb
  check "the binary is /usr/bin/worker-host and runs" in_root /usr/bin/worker-host --version
  check "the system user worker-host exists, with no login shell" user_has_no_shell
  check "worker.toml and the example plugins are conffiles" conffiles
  check "the unit is installed and enabled" unit_enabled
  check "the unit's Documentation= is an installed file" documentation_installed
  check "the SDKs and the WIT contract are in /usr/share/worker-host" sdk_installed
  check "worker-host check passes on the packaged worker.toml, as the service user" \
    in_root runuser -u worker-host -- worker-host check -c /etc/worker-host/worker.toml
  check "new-plugin in an empty folder outside a checkout uses the installed SDK" new_plugin_anywhere
  # What the service leaves behind: its state folder.
  mkdir -p "$MERGED/var/lib/worker-host/compiled"
  check "dpkg -r removes the package" in_root dpkg -r worker-host
  check "remove keeps /etc/worker-host/worker.toml, the state and the user" removed_keeping_config
  check "dpkg -P purges it" in_root dpkg -P worker-host
  check "purge leaves no /etc/worker-host, /var/lib/worker-host, /usr/share/worker-host, unit, user or group" purged
  overlay_drop
}

# What booting the tree needs besides the tree: services may start (the tree's policy-rc.d
# stops them in a chroot), a host name in /etc/hosts (RabbitMQ's node is rabbit@<host name>), and
# the unit that runs the test script from the host's shared folder at every boot (mounted by the
# container; over 9p in the VM).
machine_setup() {
  local root=$1
  rm -f "$root/usr/sbin/policy-rc.d"
  echo wh-test >"$root/etc/hostname"
  printf '127.0.0.1\tlocalhost\n127.0.1.1\twh-test\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
  mkdir -p "$root/mnt/share"
  cat >"$root/etc/systemd/system/wh-test.service" <<'EOF'
[Unit]
Description=worker-host package test (scripts/test-package-guest.sh from the host)
After=local-fs.target rabbitmq-server.service
[Service]
Type=oneshot
ExecStart=/bin/sh -c 'mountpoint -q /mnt/share || mount -t 9p -o trans=virtio,version=9p2000.L share /mnt/share; exec /bin/sh /mnt/share/guest.sh >>/mnt/share/guest.log 2>&1'
[Install]
WantedBy=multi-user.target
EOF
  ln -sf /etc/systemd/system/wh-test.service "$root/etc/systemd/system/multi-user.target.wants/wh-test.service"
}

# The folder shared with the booted system: the package, the Python component, the script.
share_prepare() {
  SHARE="$TMP/share"
  rm -rf "$SHARE"
  mkdir -p "$SHARE"
  cp "$DEB" "$SHARE/worker-host.deb"
  cp "$PYTHON_PLUGIN" "$SHARE/demo_python.wasm"
  cp "$GUEST" "$SHARE/guest.sh"
  : >"$SHARE/guest.log"
}

# boot_twice START WHAT: boots with START BOOT (a function that returns when the system powers
# off) once, and once more when the guest script rebooted at the end of its first part; then
# quotes the guest's log and counts its checks.
boot_twice() {
  local start=$1 what=$2 started=$SECONDS boot
  for boot in 1 2; do
    "$start" "$boot" || true
    grep -q '^== rebooting' "$SHARE/guest.log" || break
  done
  sed 's/^/    /' "$SHARE/guest.log"
  passed=$((passed + $(grep -c '^ok: ' "$SHARE/guest.log" || true)))
  failed=$((failed + $(grep -c '^FAILED: ' "$SHARE/guest.log" || true)))
  if grep -q '^guest: all checks passed' "$SHARE/guest.log"; then
    ok "$what: install, start, messages, reload, stop, reboot, purge ($((SECONDS - started)) s)"
  else
    fail "$what ($((SECONDS - started)) s); the console's last lines:"
    tail -n 40 "$TMP/console-$boot.log" | sed 's/^/    /'
  fi
}

# One boot of the tree (the same overlay for both) in a container: systemd as PID 1, no network
# but its loopback. nspawn's /run/systemd/nspawn is a tmpfs in a mount namespace of its own
# (nspawn refuses to clean that folder on a disk, which /run is on some machines), and the
# container is not registered with a host systemd (there may be none running).
nspawn_boot() {
  say "== boot $1: Debian 12 with systemd in a container (systemd-nspawn)"
  timeout -s KILL "$BOOT_TIMEOUT" unshare -m --propagation private sh -c '
    mkdir -p /run/systemd/nspawn && mount -t tmpfs tmpfs /run/systemd/nspawn &&
    exec systemd-nspawn -q -D "$1" --boot --register=no --keep-unit --private-network \
      --machine=wh-test --bind="$2:/mnt/share"' nspawn "$MERGED" "$SHARE" >"$TMP/console-$1.log" 2>&1
}

test_boot() {
  ensure_packages container
  say "== boot: the package on Debian 12 booted with systemd ($D12_ROOT, an overlay)"
  overlay bare
  machine_setup "$MERGED"
  share_prepare
  boot_twice nspawn_boot "the booted system (systemd-nspawn)"
  overlay_drop
}

# The VM's boot files and disk, made from the tree once (again when the tree or the setup
# changes): the kernel and initrd the tree installed, and an ext4 image of the tree, used
# read-only as the backing file of each run's disk.
vm_image() {
  local recipe
  recipe="$(cat "$D12_ROOT/.recipe") $(declare -f machine_setup | sha256sum | cut -c1-16)"
  if [ -f "$D12/disk.recipe" ] && [ "$(cat "$D12/disk.recipe")" = "$recipe" ]; then
    return 0
  fi
  say "== making the VM's disk from $D12_ROOT (once)"
  rm -f "$D12/disk.img" "$D12/disk.recipe"
  overlay bare
  machine_setup "$MERGED"
  echo "LABEL=wh-root / ext4 defaults 0 1" >"$MERGED/etc/fstab"
  cp "$(ls "$MERGED"/boot/vmlinuz-* | tail -n1)" "$D12/vmlinuz"
  cp "$(ls "$MERGED"/boot/initrd.img-* | tail -n1)" "$D12/initrd.img"
  mkfs.ext4 -q -F -L wh-root -d "$MERGED" "$D12/disk.img.new" 3G >/dev/null
  overlay_drop
  mv "$D12/disk.img.new" "$D12/disk.img"
  echo "$recipe" >"$D12/disk.recipe"
}

# KVM, unless this machine's KVM is PVM's (module kvm_pvm: it runs only guests built for PVM,
# which Debian's kernel is not; it hangs before its first line), else qemu's emulation (TCG).
vm_accel() {
  case $VM_ACCEL in
    kvm | tcg) echo "$VM_ACCEL" ;;
    *) if [ -e /dev/kvm ] && [ ! -d /sys/module/kvm_pvm ]; then echo kvm; else echo tcg; fi ;;
  esac
}

# One boot of the VM: no network device, the shared folder over 9p. -no-reboot: the guest's
# `systemctl reboot` ends qemu and boot_twice boots the same disk again (a cold boot).
qemu_boot() {
  local accel cpu=max
  accel=$(vm_accel)
  [ "$accel" = tcg ] || cpu=host
  say "== boot $1: Debian 12 in a virtual machine (qemu, $accel)"
  timeout -s KILL "$BOOT_TIMEOUT" qemu-system-x86_64 -accel "$accel" -cpu "$cpu" -smp 2 -m 2048 \
    -nodefaults -no-user-config -display none -nic none -no-reboot \
    -serial "file:$TMP/console-$1.log" \
    -kernel "$D12/vmlinuz" -initrd "$D12/initrd.img" \
    -append "root=LABEL=wh-root rw console=ttyS0 panic=-1" \
    -drive "file=$TMP/run.qcow2,if=virtio,format=qcow2" \
    -virtfs "local,path=$SHARE,mount_tag=share,security_model=none" \
    -device virtio-rng-pci
}

test_vm() {
  ensure_packages vm
  vm_image
  share_prepare
  qemu-img create -q -f qcow2 -F raw -b "$D12/disk.img" "$TMP/run.qcow2"
  boot_twice qemu_boot "the virtual machine (qemu, $(vm_accel))"
}

MODE=${1:-all}
case $MODE in
  chroot | boot | vm | all) ;;
  *) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "test-package: needs root (chroot, mount)" >&2; exit 1; }
started=$SECONDS
build_inputs
debian_tree "$D12_ROOT" bookworm "$D12_PACKAGES"
case $MODE in chroot | all) test_chroot ;; esac
case $MODE in boot | all) test_boot ;; esac
case $MODE in vm) test_vm ;; esac
say "package test: $((SECONDS - started)) s"
echo "package: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
