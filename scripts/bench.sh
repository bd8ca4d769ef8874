#!/usr/bin/env bash
# End-to-end throughput against the local RabbitMQ, bare lapin vs worker-host in the same run,
# then the per-message wasm cost (criterion). Arguments go to the throughput bench
# (--messages N, --runs R, --only aAbBoxyzcdiktgurpjqms to pick scenarios; q runs the Python peers
# Celery and Dramatiq from a venv built here, pinned in host/benches/peers/requirements.txt).
# Profiling the host under load:
#   WORKER_BENCH_PERF=/tmp/host WORKER_BENCH_PERF_ARGS="-F 999 --call-graph dwarf,16384" \
#     scripts/bench.sh --runs 1 --only bd      # writes /tmp/host-b.data, /tmp/host-d.data
# Method, figures and findings: docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/broker.sh
source scripts/rust.sh
source scripts/python.sh

ensure_cargo
ensure_broker
# The v1 SDK plugin and the three demo components the plugin bench compares (all built by it).
for wasm in user_monitor demo_rust demo_python demo_js; do
    [ -f "plugins/$wasm.wasm" ] || { scripts/build-plugins.sh; break; }
done
# The handlers the targets name (parse the JSON body, answer ok) in Rust, Python and JavaScript,
# for (r), (p), (j) and the plugin bench.
PLUGINS_DIR="$PWD/host/benches/handlers" PLUGINS_TARGET_DIR="$PWD/plugins/target" scripts/build-plugins.sh
ensure_python_venv plugins/target host/benches/peers/requirements.txt bench-peers-venv
# Absolute: the bench runs from host/. (Not realpath: that would leave the venv.)
export WORKER_BENCH_PYTHON="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"
cargo build --release --locked -p worker-host
cargo bench --locked -p worker-host --bench throughput -- "$@"
cargo bench --locked -p worker-host --bench plugin
