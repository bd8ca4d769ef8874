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

# Runs `check` until it succeeds (up to 60 s), running `repair` once after its first failure;
# names the last error and the start command when it never does. A port that answers is not
# enough: a server still starting up, a missing database or a password rule fails the tests too.
await_query() {
  local what=$1 start=$2 check=$3 repair=$4 deadline=$((SECONDS + 60)) out repaired=0
  until out=$($check 2>&1); do
    if [ "$repaired" = 0 ]; then
      echo "== $what does not answer a query yet ($(echo "$out" | tail -n1)); configuring it" >&2
      $repair || true
      repaired=1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "error: $what answers on its port but not a query after 60 s: $out" >&2
      echo "       start it by hand with: $start" >&2
      return 1
    fi
    sleep 1
  done
}

postgres_query() {
  psql -w -h 127.0.0.1 -U postgres -d test -Atqc 'SELECT 1'
}

# Trust for local TCP (the tests connect without a password) and a database `test`.
postgres_configure() {
  local hba
  hba=$(su postgres -c "psql -tAc 'SHOW hba_file'") || return 1
  sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/' "$hba"
  su postgres -c "psql -qc 'SELECT pg_reload_conf()'" >/dev/null
  su postgres -c "createdb test" 2>/dev/null || true
}

ensure_postgres() {
  if ! port_answers 5432; then
    command -v pg_lsclusters >/dev/null 2>&1 || ensure_packages postgres
    echo "== starting PostgreSQL (service postgresql start)" >&2
    service postgresql start >/dev/null 2>&1 || true
    await_port 5432 PostgreSQL "service postgresql start"
  fi
  command -v psql >/dev/null 2>&1 || ensure_packages postgres
  await_query PostgreSQL "service postgresql start" postgres_query postgres_configure
}

mariadb_query() {
  mariadb -h 127.0.0.1 -P 3306 -u root test -Nse 'SELECT 1'
}

# Root over TCP without a password (a new install allows only the socket) and a database `test`.
mariadb_configure() {
  mariadb -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket; CREATE DATABASE IF NOT EXISTS test;"
}

ensure_mariadb() {
  if ! port_answers 3306; then
    command -v mariadbd >/dev/null 2>&1 || ensure_packages mariadb
    echo "== starting MariaDB (service mariadb start)" >&2
    service mariadb start >/dev/null 2>&1 || true
    await_port 3306 MariaDB "service mariadb start"
  fi
  command -v mariadb >/dev/null 2>&1 || ensure_packages mariadb
  await_query MariaDB "service mariadb start" mariadb_query mariadb_configure
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
