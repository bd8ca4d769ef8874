#!/usr/bin/env bash
# A three-node RabbitMQ cluster on this one machine, for the cluster tests and for trying many
# hosts against one cluster. The machine's default broker (127.0.0.1:5672) is left alone.
#
#   scripts/cluster.sh start       start the three nodes; the first start joins them into one
#   scripts/cluster.sh stop        stop them (their data stays, the next start is quick)
#   scripts/cluster.sh restart     stop and start (what the tests use: no node left over from
#                                  an earlier run, in whatever state, is trusted)
#   scripts/cluster.sh kill N      SIGKILL node N (1-3), as a crash or a pulled cable would
#   scripts/cluster.sh revive N    start node N again after a kill; it rejoins by itself
#   scripts/cluster.sh status      the nodes the cluster sees running
#   scripts/cluster.sh urls        the AMQP URLs, one per line (for `[broker] urls`)
#   scripts/cluster.sh wipe        stop the nodes and delete their data
#
# Node N is `wh-cN@localhost`: AMQP on 127.0.0.1:567(2+N), Erlang distribution on 2567(2+N),
# data and logs under /var/lib/rabbitmq/worker-host-cluster/nN. The nodes run as the rabbitmq
# user with its Erlang cookie, so `rabbitmqctl -n wh-c1@localhost ...` works as usual.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/broker.sh"

CLUSTER_DIR=/var/lib/rabbitmq/worker-host-cluster
CLUSTER_NODES=(1 2 3)

cluster_node() { echo "wh-c$1@localhost"; }
cluster_port() { echo $((5672 + $1)); }

cluster_ctl() {
  local n=$1
  shift
  timeout -s KILL 60 rabbitmqctl -q -n "$(cluster_node "$n")" "$@"
}

# The environment one node runs in: its name, ports, config and folders.
cluster_env() {
  local n=$1 dir="$CLUSTER_DIR/n$1"
  echo "HOME=/var/lib/rabbitmq RABBITMQ_NODENAME=$(cluster_node "$n")" \
    "RABBITMQ_NODE_PORT=$(cluster_port "$n") RABBITMQ_DIST_PORT=$((25672 + n))" \
    "RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf RABBITMQ_ADVANCED_CONFIG_FILE=$dir/advanced.config" \
    "RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins" \
    "RABBITMQ_MNESIA_BASE=$dir/mnesia RABBITMQ_LOG_BASE=$dir/log RABBITMQ_PID_FILE=$dir/pid"
}

cluster_prepare() {
  local n=$1 dir="$CLUSTER_DIR/n$1"
  mkdir -p "$dir/mnesia" "$dir/log"
  cat >"$dir/rabbitmq.conf" <<EOF
listeners.tcp.local = 127.0.0.1:$(cluster_port "$n")
loopback_users.guest = true
# A node that loses its peers keeps serving what it can; the tests kill nodes on purpose.
cluster_partition_handling = ignore
EOF
  echo "[]." >"$dir/enabled_plugins"
  # At-least-once dead-lettering (the retry queues) resends what its target did not confirm
  # after this long (RabbitMQ's default: 3 minutes), so a kill's lost confirms cost seconds.
  echo "[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, 5000}]}]." >"$dir/advanced.config"
  chown -R rabbitmq:rabbitmq "$CLUSTER_DIR"
}

cluster_running() {
  (exec 3<>"/dev/tcp/127.0.0.1/$(cluster_port "$1")") 2>/dev/null
}

# Starts node N in the background and waits until it has booted.
cluster_start_node() {
  local n=$1
  if cluster_running "$n"; then
    return 0
  fi
  cluster_prepare "$n"
  echo "== starting $(cluster_node "$n") on 127.0.0.1:$(cluster_port "$n")" >&2
  su rabbitmq -s /bin/sh -c "cd /var/lib/rabbitmq && env $(cluster_env "$n") \
    /usr/lib/rabbitmq/bin/rabbitmq-server -detached" >/dev/null 2>&1
}

cluster_await_node() {
  local n=$1 deadline=$((SECONDS + 120))
  until cluster_running "$n" && cluster_ctl "$n" await_startup >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "error: $(cluster_node "$n") did not start in 120 s; its log: $CLUSTER_DIR/n$n/log" >&2
      return 1
    fi
    sleep 1
  done
}

# Joins nodes 2 and 3 to node 1, once (a marker file remembers).
cluster_join() {
  local n
  for n in 2 3; do
    [ -e "$CLUSTER_DIR/n$n/joined" ] && continue
    echo "== joining $(cluster_node "$n") to $(cluster_node 1)" >&2
    local out
    if ! out=$(cluster_ctl "$n" stop_app 2>&1 && cluster_ctl "$n" reset 2>&1 &&
      cluster_ctl "$n" join_cluster "$(cluster_node 1)" 2>&1 && cluster_ctl "$n" start_app 2>&1); then
      echo "$out" >&2
      echo "error: $(cluster_node "$n") could not join $(cluster_node 1)" >&2
      return 1
    fi
    touch "$CLUSTER_DIR/n$n/joined"
  done
}

cluster_start() {
  command -v rabbitmq-server >/dev/null 2>&1 || ensure_packages broker
  # epmd, which the nodes register with, comes with the default broker.
  ensure_broker
  local n
  for n in "${CLUSTER_NODES[@]}"; do cluster_start_node "$n"; done
  # Started together: after a full stop, a node waits for its peers before it finishes booting.
  for n in "${CLUSTER_NODES[@]}"; do cluster_await_node "$n"; done
  cluster_join
  cluster_status
}

cluster_stop() {
  local n
  for n in "${CLUSTER_NODES[@]}"; do
    cluster_running "$n" && { cluster_ctl "$n" stop >/dev/null 2>&1 || cluster_kill "$n"; } &
  done
  wait
}

cluster_kill() {
  local n=$1 pid
  pid=$(cat "$CLUSTER_DIR/n$n/pid" 2>/dev/null || true)
  [ -n "$pid" ] || pid=$(pgrep -f "beam.*-sname $(cluster_node "$n")" | head -n1 || true)
  if [ -z "$pid" ]; then
    echo "$(cluster_node "$n") is not running" >&2
    return 0
  fi
  kill -KILL "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 30))
  while cluster_running "$n" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
  echo "killed $(cluster_node "$n") (pid $pid)"
}

cluster_status() {
  local n
  for n in "${CLUSTER_NODES[@]}"; do
    if cluster_running "$n"; then
      echo "running nodes (seen from $(cluster_node "$n")):"
      cluster_ctl "$n" eval 'lists:sort(rabbit_nodes:all_running()).'
      return 0
    fi
  done
  echo "no node of the cluster is running (scripts/cluster.sh start)"
}

cluster_urls() {
  local n
  for n in "${CLUSTER_NODES[@]}"; do echo "amqp://guest:guest@127.0.0.1:$(cluster_port "$n")/%2f"; done
}

node_arg() {
  case "${1:-}" in
    1 | 2 | 3) echo "$1" ;;
    *) echo "usage: scripts/cluster.sh $2 1|2|3" >&2; exit 2 ;;
  esac
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in
    start) cluster_start ;;
    stop) cluster_stop ;;
    restart)
      cluster_stop
      cluster_start || {
        echo "== the cluster did not start; deleting its data and starting it afresh" >&2
        cluster_stop && rm -rf "$CLUSTER_DIR" && cluster_start
      }
      ;;
    kill) cluster_kill "$(node_arg "${2:-}" kill)" ;;
    revive) n=$(node_arg "${2:-}" revive) && cluster_start_node "$n" && cluster_await_node "$n" ;;
    status) cluster_status ;;
    urls) cluster_urls ;;
    wipe) cluster_stop && rm -rf "$CLUSTER_DIR" ;;
    *)
      sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
      exit 2
      ;;
  esac
fi
