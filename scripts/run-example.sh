#!/usr/bin/env bash
# Runs worker-host with the example worker.toml and plugins, after making sure RabbitMQ answers.
# Extra arguments go to `worker-host run` (for example: -c other.toml).
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
exec cargo run --release --locked -p worker-host -- run -c worker.toml "$@"
