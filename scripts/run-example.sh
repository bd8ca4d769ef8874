#!/usr/bin/env bash
# Runs worker-host with the example worker.toml and plugins, after making sure RabbitMQ answers.
# `--delay SECONDS` first shortens the order flow's waits for a quick try: the payment window
# (order.delay.queue) to SECONDS and the stock's own check (stock.delay.queue) to twice that, in
# a copy, worker.quick.toml. Other arguments go to `worker-host run`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/broker.sh
source scripts/rust.sh

ensure_cargo
ensure_broker
for wasm in plugins/user_monitor.wasm plugins/flaky.wasm \
  plugins/demo_rust.wasm plugins/demo_python.wasm plugins/demo_js.wasm \
  plugins/order_service.wasm plugins/stock_service.wasm; do
  [ -f "$wasm" ] || { scripts/build-plugins.sh; break; }
done
config=worker.toml
if [ "${1:-}" = "--delay" ]; then
  seconds=${2:?"--delay needs a number of seconds"}
  [[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "--delay: expected whole seconds, got $seconds" >&2; exit 2; }
  shift 2
  config=worker.quick.toml
  sed -e "s/^message_ttl = \"30m\"/message_ttl = \"${seconds}s\"/" \
      -e "s/^message_ttl = \"40m\"/message_ttl = \"$((seconds * 2))s\"/" worker.toml >"$config"
  grep -q "message_ttl = \"${seconds}s\"" "$config" || { echo "worker.toml: no 30m delay queue to shorten" >&2; exit 1; }
  echo "== $config: the payment window is ${seconds}s, the stock check $((seconds * 2))s (RabbitMQ keeps a queue's TTL: if the example ran with other waits, delete order.delay.queue and stock.delay.queue first)" >&2
fi
exec cargo run --release --locked -p worker-host -- run -c "$config" "$@"
