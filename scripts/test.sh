#!/usr/bin/env bash
# Runs every test: starts (or installs) RabbitMQ and the capability servers, builds the example
# plugins from source (installing the wasm toolchain when missing), then the workspace's unit, doc
# and integration tests, the tests that restart RabbitMQ or PostgreSQL or change RabbitMQ's
# settings (alone), the tests on a local three-node cluster (alone), the new-plugin template, and the plugins' own native tests. Ends with one
# line counting every test run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/packages.sh
source scripts/broker.sh
source scripts/services.sh
source scripts/rust.sh

# One run at a time: the tests restart and reconfigure the shared broker, PostgreSQL and the
# cluster, so a second run beside this one (a CI run started while another goes on) fails both.
exec 9>"${TMPDIR:-/tmp}/worker-host-tests.lock"
if ! flock -n 9; then
  echo "== another scripts/test.sh runs on this machine: waiting for it to end"
  flock 9
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Runs a step, keeping its output for the final count.
step() {
  echo "== $1"
  shift
  "$@" 2>&1 | tee -a "$log"
}

ensure_cargo
ensure_broker
# The tests lower RabbitMQ's consumer_timeout and raise alarms (then restore them): undo what a
# killed run left, on whichever broker they use.
reset_broker
ensure_services
ensure_packages tests browser
step "building plugins from source" scripts/build-plugins.sh
step "host and SDK tests (unit, doc, integration against RabbitMQ)" \
  cargo test --workspace --locked -- --skip broker_restart_ --skip broker_global_ --skip server_restart_ \
    --skip cluster_
# The integration test binary the step above built, run directly: another cargo selection (`-p
# worker-host`, `--test integration`) resolves other features and compiles the host again (9 min
# on 2 cores). Run from host/, as cargo runs it.
integration() {
  local bin
  bin=$(cargo test --workspace --locked --no-run --message-format=json 2>/dev/null |
    grep '"name":"integration"' | grep -o '"executable":"[^"]*"' | cut -d'"' -f4)
  if [ ! -x "$bin" ]; then
    echo "test.sh: no integration test binary from cargo test --workspace --no-run" >&2
    return 1
  fi
  (cd host && "$bin" "$@")
}
# broker_restart_*: stop and start RabbitMQ; broker_global_*: raise an alarm or lower the
# consumer timeout of the whole broker. Each restores the broker in every outcome.
# server_restart_*: restart a capability server (PostgreSQL) under the tests that use it.
step "tests that restart RabbitMQ or PostgreSQL or change RabbitMQ for everyone (alone, one at a time)" \
  integration --test-threads=1 broker_restart_ broker_global_ server_restart_
# cluster_*: many hosts on a three-node RabbitMQ cluster on this machine (scripts/cluster.sh),
# killing nodes; the cluster is started for them and stopped after, whatever they answer.
cluster_tests() {
  scripts/cluster.sh restart || return 1
  local rc=0
  integration --test-threads=1 cluster_ || rc=$?
  scripts/cluster.sh stop || true
  return "$rc"
}
step "tests on a three-node RabbitMQ cluster (scripts/cluster.sh, alone)" cluster_tests
step "the new-plugin template builds and passes its test" scripts/new-plugin.sh --check
step "plugins' native tests" cargo test --locked --manifest-path plugins/Cargo.toml
step "JavaScript SDK and plugins' native tests" scripts/test-js.sh
step "the JavaScript template builds and passes its test" scripts/test-js.sh --template
step "Python SDK and plugins' native tests, and the Python template" scripts/test-python.sh --template

awk '/^test result:/ { p += $4; f += $6 }
     /^js tests:/ { p += $3; f += $5 }
     /^python: [0-9]+ passed/ { p += $2; f += $4 } END { printf "all tests: %d passed, %d failed\n", p, f }' "$log"
