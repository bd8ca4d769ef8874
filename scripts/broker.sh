#!/usr/bin/env bash
# Makes sure a RabbitMQ broker answers on 127.0.0.1:5672: installs it (Debian) when missing,
# starts it when stopped. Sourced by the other scripts; also runnable on its own.
#
# A broker found running is used as it is: its settings (consumer_timeout, alarms, ...) are
# changed only on a broker this script started itself (BROKER_STARTED=1 then). scripts/test.sh
# resets them on any broker, as its tests change them (reset_broker below).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/packages.sh"

# 1 once ensure_broker has started the broker (or its stopped application) itself.
BROKER_STARTED=0

broker_answers() {
  (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null
}

ensure_broker() {
  if broker_answers; then
    return 0
  fi
  BROKER_STARTED=1
  # A run killed between the tests' `stop_app` and `start_app` leaves the node up, its port shut.
  if command -v rabbitmqctl >/dev/null 2>&1 && timeout -s KILL 30 rabbitmqctl -q ping >/dev/null 2>&1; then
    echo "== starting RabbitMQ's application (node up, app stopped: rabbitmqctl start_app)" >&2
    timeout -s KILL 120 rabbitmqctl start_app >/dev/null 2>&1 || true
  fi
  command -v rabbitmq-server >/dev/null 2>&1 || ensure_packages broker
  if ! broker_answers; then
    echo "== starting RabbitMQ (rabbitmq-server -detached)" >&2
    rabbitmq-server -detached >/dev/null 2>&1 || true
  fi
  local deadline=$((SECONDS + 90))
  until broker_answers; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "error: RabbitMQ does not answer on 127.0.0.1:5672 after 90 s." >&2
      echo "       start it by hand with: rabbitmq-server -detached" >&2
      return 1
    fi
    sleep 1
  done
  # The port opens before the broker finishes booting.
  rabbitmqctl await_startup >/dev/null 2>&1 || true
  reset_broker
}

# Undoes what a killed test run can leave on the broker: the consumer timeout lowered to a
# second (broker_global_consumer_timeout_*) and a memory alarm raised by hand
# (broker_global_blocked_*). Each test restores them when it ends, but not when it is killed. (A
# real memory alarm cleared here fails the tests either way: the machine is out of memory.)
# Run on a broker ensure_broker started (a node left by a killed run keeps its settings), and
# by scripts/test.sh on any broker.
reset_broker() {
  local timeout
  timeout=$(timeout -s KILL 30 rabbitmqctl -q eval 'application:get_env(rabbit, consumer_timeout).' 2>/dev/null || true)
  if [[ "$timeout" =~ ^\{ok,([0-9]+)\}$ ]] && [ "${BASH_REMATCH[1]}" -lt 60000 ]; then
    echo "== RabbitMQ's consumer_timeout is ${BASH_REMATCH[1]} ms, left by a killed test run: back to 30 min" >&2
    timeout -s KILL 30 rabbitmqctl -q eval 'application:set_env(rabbit, consumer_timeout, 1800000).' >/dev/null 2>&1 || true
  fi
  timeout -s KILL 30 rabbitmqctl -q eval 'rabbit_alarm:clear_alarm({resource_limit, memory, node()}).' >/dev/null 2>&1 || true
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  ensure_broker
  echo "RabbitMQ answers on 127.0.0.1:5672"
fi
