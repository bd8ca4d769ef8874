#!/usr/bin/env bash
# Runs every test: starts (or installs) RabbitMQ, builds the example plugins from source
# (installing the wasm toolchain when missing), then the workspace's unit, doc and integration
# tests and the plugins' own native tests.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/broker.sh

ensure_broker
echo "== building plugins from source"
scripts/build-plugins.sh
echo "== host and SDK tests (unit, doc, integration against RabbitMQ)"
cargo test --workspace --locked -- --skip broker_restart_
echo "== tests that restart RabbitMQ (alone, one at a time)"
cargo test --locked -p worker-host --test integration broker_restart_ -- --test-threads=1
echo "== the new-plugin template builds and passes its test"
scripts/new-plugin.sh --check
echo "== plugins' native tests"
cargo test --locked --manifest-path plugins/Cargo.toml
