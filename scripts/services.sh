#!/usr/bin/env bash
# Makes sure the servers the capability tests use answer: PostgreSQL 127.0.0.1:5432 (database
# `test`, trust for local TCP), MariaDB 127.0.0.1:3306 (root without a password, database `test`)
# and Redis 127.0.0.1:6379. Installs a missing one (Debian), starts a stopped one. Sourced by
# test.sh and .ci/run; also runnable on its own.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/packages.sh"

port_answers() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Waits up to 60 s for a port; names the start command when it never answers.
await_port() {
  local port=$1 what=$2 start=$3 deadline=$((SECONDS + 60))
  until port_answers "$port"; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "error: $what does not answer on 127.0.0.1:$port after 60 s." >&2
      echo "       start it by hand with: $start" >&2
      return 1
    fi
    sleep 1
  done
}

ensure_postgres() {
  port_answers 5432 && return 0
  local fresh=0
  command -v pg_lsclusters >/dev/null 2>&1 || { ensure_packages postgres; fresh=1; }
  echo "== starting PostgreSQL (service postgresql start)" >&2
  service postgresql start >/dev/null 2>&1 || true
  await_port 5432 PostgreSQL "service postgresql start"
  if [ "$fresh" = 1 ]; then
    # A new install answers only with passwords on TCP: trust local TCP like the test machines.
    local hba
    hba=$(su postgres -c "psql -tAc 'SHOW hba_file'")
    sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/' "$hba"
    su postgres -c "psql -qc 'SELECT pg_reload_conf()'" >/dev/null
    su postgres -c "createdb test" 2>/dev/null || true
  fi
}

ensure_mariadb() {
  port_answers 3306 && return 0
  local fresh=0
  command -v mariadbd >/dev/null 2>&1 || { ensure_packages mariadb; fresh=1; }
  echo "== starting MariaDB (service mariadb start)" >&2
  service mariadb start >/dev/null 2>&1 || true
  await_port 3306 MariaDB "service mariadb start"
  if [ "$fresh" = 1 ]; then
    # Root over TCP without a password, like the test machines (a new install allows only the socket).
    mariadb -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket; CREATE DATABASE IF NOT EXISTS test;"
  fi
}

ensure_redis() {
  port_answers 6379 && return 0
  command -v redis-server >/dev/null 2>&1 || ensure_packages redis
  echo "== starting Redis (redis-server --daemonize yes)" >&2
  redis-server --daemonize yes --save '' >/dev/null
  await_port 6379 Redis "redis-server --daemonize yes"
}

ensure_services() {
  ensure_postgres
  ensure_mariadb
  ensure_redis
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  ensure_services
  echo "PostgreSQL, MariaDB and Redis answer"
fi
