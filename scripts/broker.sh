#!/usr/bin/env bash
# Makes sure a RabbitMQ broker answers on 127.0.0.1:5672: installs it (Debian) when missing,
# starts it when stopped. Sourced by the other scripts; also runnable on its own.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/packages.sh"

broker_answers() {
  (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null
}

ensure_broker() {
  if broker_answers; then
    return 0
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
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  ensure_broker
  echo "RabbitMQ answers on 127.0.0.1:5672"
fi
