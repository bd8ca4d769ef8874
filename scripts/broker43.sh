#!/usr/bin/env bash
# RabbitMQ 4.3 beside the machine's broker, for testing the host against both: Debian 12 ships
# 3.10, Debian's forky suite 4.3. The node runs in a forky chroot made with debootstrap and kept
# under ~/.cache/worker-host/broker43/ (made once, a few minutes; starting it takes seconds).
#
#   scripts/broker43.sh start     start the node (making the chroot first when missing)
#   scripts/broker43.sh stop      stop it (its data stays)
#   scripts/broker43.sh url       its AMQP URL
#   scripts/broker43.sh ctl ARGS  rabbitmqctl of the chroot, against this node
#   scripts/broker43.sh bin       a folder whose `rabbitmqctl` is that (put it first on PATH so
#                                 the tests that call rabbitmqctl reach this node)
#   scripts/broker43.sh wipe      stop it and delete its data
#
# The node is `wh-43@localhost`: AMQP on 127.0.0.1:5680, Erlang distribution on 25680; it
# registers with the machine's epmd (started with the machine's broker), like scripts/cluster.sh's.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/broker.sh"
source "$(dirname "${BASH_SOURCE[0]}")/debian-tree.sh"

B43_DIR="$WORKER_CACHE/broker43"
B43_ROOT="$B43_DIR/root"
B43_NODE=wh-43@localhost
B43_PORT=5680
B43_DIST_PORT=25680

b43_answers() {
  (exec 3<>"/dev/tcp/127.0.0.1/$B43_PORT") 2>/dev/null
}

# Runs a command in the chroot as the rabbitmq user, in the node's environment.
b43_run() {
  chroot --userspec=rabbitmq:rabbitmq "$B43_ROOT" /usr/bin/env -i \
    PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/var/lib/rabbitmq LANG=C.UTF-8 \
    RABBITMQ_NODENAME="$B43_NODE" RABBITMQ_NODE_PORT="$B43_PORT" \
    RABBITMQ_DIST_PORT="$B43_DIST_PORT" "$@"
}

b43_ctl() {
  timeout -s KILL 60 chroot "$B43_ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/var/lib/rabbitmq LANG=C.UTF-8 /usr/sbin/rabbitmqctl -n "$B43_NODE" "$@"
}

b43_version() {
  chroot "$B43_ROOT" dpkg-query -W -f='${Version}' rabbitmq-server
}

b43_start() {
  # epmd, which the node registers with, comes with the machine's broker.
  ensure_broker
  debian_tree "$B43_ROOT" forky rabbitmq-server
  if b43_answers; then
    return 0
  fi
  tree_mount "$B43_ROOT"
  cat >"$B43_ROOT/etc/rabbitmq/rabbitmq.conf" <<EOF
listeners.tcp.local = 127.0.0.1:$B43_PORT
loopback_users.guest = true
# 3.x's limit (4.0 lowered the default to 16 MiB): the fault tests send a 96 MiB message.
max_message_size = 134217728
EOF
  echo "== starting RabbitMQ $(b43_version) ($B43_NODE) on 127.0.0.1:$B43_PORT" >&2
  b43_run /usr/lib/rabbitmq/bin/rabbitmq-server -detached >/dev/null 2>&1 || true
  local deadline=$((SECONDS + 120))
  until b43_answers && b43_ctl await_startup >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "error: $B43_NODE did not start in 120 s; its log: $B43_ROOT/var/log/rabbitmq/" >&2
      return 1
    fi
    sleep 1
  done
  echo "RabbitMQ $(b43_version) answers on 127.0.0.1:$B43_PORT"
}

b43_stop() {
  [ -d "$B43_ROOT" ] || return 0
  if b43_answers; then
    b43_ctl stop >/dev/null 2>&1 || b43_kill
  fi
  # Any process left in the chroot (a stuck node, epmd started there) keeps its mounts busy.
  b43_kill
  tree_umount "$B43_ROOT"
}

b43_kill() {
  local pid root
  root=$(readlink -f "$B43_ROOT")
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$root" ] && kill -KILL "$pid" 2>/dev/null || true
  done
}

# A folder with a `rabbitmqctl` that talks to this node.
b43_bin() {
  local bin="$B43_DIR/bin" self
  self="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/broker43.sh"
  mkdir -p "$bin"
  printf '#!/bin/sh\nexec %q ctl "$@"\n' "$self" >"$bin/rabbitmqctl"
  chmod 0755 "$bin/rabbitmqctl"
  echo "$bin"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in
    start) b43_start ;;
    stop) b43_stop ;;
    url) echo "amqp://guest:guest@127.0.0.1:$B43_PORT/%2f" ;;
    ctl) shift && b43_ctl "$@" ;;
    bin) b43_bin ;;
    wipe) b43_stop && rm -rf "$B43_ROOT/var/lib/rabbitmq/mnesia" ;;
    *)
      sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
      exit 2
      ;;
  esac
fi
