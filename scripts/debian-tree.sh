#!/usr/bin/env bash
# Debian trees made with debootstrap, kept under ~/.cache/worker-host/ so a second run reuses
# them: a Debian 12 system to install the package into (scripts/test-package.sh) and a Debian
# forky one that runs RabbitMQ 4.3 (scripts/broker43.sh). Sourced by those scripts.
#
#   debian_tree DIR SUITE PACKAGE,...   make DIR (once: again only when the suite or the list
#                                       changes), with those packages and their Depends
#   tree_mount DIR / tree_umount DIR    /proc, /sys, /dev and /dev/pts inside DIR, for chroot
source "$(dirname "${BASH_SOURCE[0]}")/packages.sh"

WORKER_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/worker-host"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

debian_tree() {
  local dir=$1 suite=$2 include=$3 recipe script=
  recipe="$suite $include $DEBIAN_MIRROR"
  if [ -f "$dir/.recipe" ] && [ "$(cat "$dir/.recipe")" = "$recipe" ]; then
    return 0
  fi
  ensure_packages debootstrap
  # Debian 12's debootstrap has no script for the suites after trixie: they are made like sid.
  [ -e "/usr/share/debootstrap/scripts/$suite" ] || script=/usr/share/debootstrap/scripts/sid
  tree_umount "$dir"
  rm -rf "$dir" "$dir.new"
  mkdir -p "$(dirname "$dir")"
  echo "== debootstrap $suite into $dir (once; with $include)" >&2
  local log=$dir.log started=$SECONDS
  # Built aside and moved into place, so an interrupted run never leaves half a tree behind.
  if ! debootstrap --variant=minbase --include="$include" "$suite" "$dir.new" "$DEBIAN_MIRROR" \
    $script >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    tail -n 30 "$dir.new/debootstrap/debootstrap.log" >&2 2>/dev/null || true
    tree_umount "$dir.new"
    echo "error: debootstrap $suite failed (log: $log)" >&2
    return 1
  fi
  # A resolvable own name: Erlang (RabbitMQ) and sudo-like tools look it up.
  printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$dir.new/etc/hosts"
  # Nothing started by a package's install script inside the chroot (no init runs there).
  printf '#!/bin/sh\nexit 101\n' >"$dir.new/usr/sbin/policy-rc.d"
  chmod 0755 "$dir.new/usr/sbin/policy-rc.d"
  apt_clean "$dir.new"
  echo "$recipe" >"$dir.new/.recipe"
  mv "$dir.new" "$dir"
  echo "== $dir made in $((SECONDS - started)) s" >&2
}

# Drops the downloaded .debs and the package lists: the tree is a cache, not an apt mirror.
apt_clean() {
  rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*_Packages
}

tree_mount() {
  local dir=$1
  mountpoint -q "$dir/proc" || mount -t proc proc "$dir/proc"
  mountpoint -q "$dir/sys" || mount -t sysfs sysfs "$dir/sys"
  mountpoint -q "$dir/dev" || mount --bind /dev "$dir/dev"
  mountpoint -q "$dir/dev/pts" || mount -t devpts devpts "$dir/dev/pts" -o newinstance,ptmxmode=0666
}

tree_umount() {
  local dir=$1 m
  [ -d "$dir" ] || return 0
  for m in dev/pts dev sys proc; do
    if mountpoint -q "$dir/$m" 2>/dev/null; then
      umount "$dir/$m" 2>/dev/null || umount -l "$dir/$m"
    fi
  done
}
