#!/usr/bin/env bash
# Runs worker-host with an example config, after making sure RabbitMQ answers.
#
#   scripts/run-example.sh                  # ./worker.toml: its plugins are committed, nothing
#                                           # is built but the host (no Node.js, Python or clang)
#   scripts/run-example.sh --orders         # examples/orders.toml: the order flow in Python and
#                                           # JavaScript; builds those components first
#   scripts/run-example.sh --delay SECONDS  # the same, its waits shortened for a quick try
#
# `--delay SECONDS` shortens the order flow's payment window (order.delay.queue) to SECONDS and
# the stock's own check (stock.delay.queue) to twice that, in a copy, examples/orders.quick.toml.
# Other arguments go to `worker-host run`.
#
# A RabbitMQ found running on 127.0.0.1:5672 is used as it is: this script changes broker
# settings (consumer_timeout, alarms) only on a broker it started itself (scripts/broker.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/broker.sh
source scripts/rust.sh

config=worker.toml
orders=0
delay=
while [ $# -gt 0 ]; do
  case "$1" in
    --orders) orders=1; shift ;;
    --delay)
      delay=${2:?"--delay needs a number of seconds"}
      [[ "$delay" =~ ^[1-9][0-9]*$ ]] || { echo "--delay: expected whole seconds, got $delay" >&2; exit 2; }
      orders=1
      shift 2
      ;;
    *) break ;;
  esac
done

ensure_cargo
ensure_broker
if [ "$orders" = 1 ]; then
  config=examples/orders.toml
  # Idempotent: a component whose sources did not change is not built again.
  scripts/build-python.sh
  scripts/build-js.sh
else
  for wasm in user_monitor flaky c_echo demo_rust; do
    [ -f "plugins/$wasm.wasm" ] || {
      echo "plugins/$wasm.wasm is missing: it is committed (git checkout plugins/$wasm.wasm), or build it with scripts/build-plugins.sh" >&2
      exit 1
    }
  done
fi
if [ -n "$delay" ]; then
  quick=examples/orders.quick.toml
  sed -e "s/^message_ttl = \"30m\"/message_ttl = \"${delay}s\"/" \
      -e "s/^message_ttl = \"40m\"/message_ttl = \"$((delay * 2))s\"/" "$config" >"$quick"
  grep -q "message_ttl = \"${delay}s\"" "$quick" || { echo "$config: no 30m delay queue to shorten" >&2; exit 1; }
  config=$quick
  echo "== $config: the payment window is ${delay}s, the stock check $((delay * 2))s (RabbitMQ keeps a queue's TTL: if the example ran with other waits, delete order.delay.queue and stock.delay.queue first)" >&2
fi
exec cargo run --release --locked -p worker-host -- run -c "$config" "$@"
