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

# Runs `check` until it succeeds (up to 120 s). After its first failure runs `configure` (a
# missing database, a password rule); when that has not helped within 10 s, runs `restart` once.
# A port that answers is not enough: a server still starting up fails the tests too, and so does
# one left running from an environment it no longer has (seen: a PostgreSQL restarted by an
# earlier session's tests answered its port, then failed every connection with "could not fork
# new process for connection"). Names the last error and the start command when nothing helps.
await_query() {
  local what=$1 start=$2 check=$3 configure=$4 restart=$5
  local deadline=$((SECONDS + 120)) out configured=0 restarted=0
  until out=$($check 2>&1); do
    if [ "$configured" = 0 ]; then
      echo "== $what does not answer a query ($(echo "$out" | tail -n1)); configuring it" >&2
      $configure || true
      configured=$SECONDS
    elif [ "$restarted" = 0 ] && [ $((SECONDS - configured)) -ge 10 ]; then
      echo "== $what still does not answer a query ($(echo "$out" | tail -n1)); restarting it" >&2
      $restart || true
      restarted=1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "error: $what answers on its port but not a query after 120 s: $out" >&2
      echo "       start it by hand with: $start" >&2
      return 1
    fi
    sleep 1
  done
}

postgres_query() {
  PGCONNECT_TIMEOUT=5 timeout -s KILL 10 psql -w -h 127.0.0.1 -U postgres -d test -Atqc 'SELECT 1'
}

# Trust for local TCP (the tests connect without a password) and a database `test`.
postgres_configure() {
  local hba
  hba=$(timeout -s KILL 10 su postgres -c "psql -tAc 'SHOW hba_file'") || return 1
  sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/' "$hba"
  timeout -s KILL 10 su postgres -c "psql -qc 'SELECT pg_reload_conf()'" >/dev/null
  timeout -s KILL 10 su postgres -c "createdb test" 2>/dev/null || true
}

# Stops every cluster (fast, then by force: a postmaster that cannot fork may not stop cleanly),
# waits for all its processes to be gone (a live one keeps the socket's lock file), and starts
# them again from this process, then configures them.
postgres_restart() {
  local version deadline
  for version in $(ls /etc/postgresql 2>/dev/null); do
    timeout -s KILL 30 pg_ctlcluster --skip-systemctl-redirect "$version" main stop -m fast 2>/dev/null || true
  done
  pkill -KILL -u postgres 2>/dev/null || true
  deadline=$((SECONDS + 20))
  while pgrep -u postgres >/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 1; done
  # Left behind by a killed postmaster; with none running, no one holds them.
  pgrep -u postgres >/dev/null || rm -f /var/run/postgresql/.s.PGSQL.*.lock
  for version in $(ls /etc/postgresql 2>/dev/null); do
    pg_ctlcluster --skip-systemctl-redirect "$version" main start || service postgresql start
  done
  await_port 5432 PostgreSQL "service postgresql start" && postgres_configure
}

ensure_postgres() {
  if ! port_answers 5432; then
    command -v pg_lsclusters >/dev/null 2>&1 || ensure_packages postgres
    echo "== starting PostgreSQL (service postgresql start)" >&2
    service postgresql start >/dev/null 2>&1 || true
    await_port 5432 PostgreSQL "service postgresql start"
  fi
  command -v psql >/dev/null 2>&1 || ensure_packages postgres
  # It answers while its tracer lives, and fails every connection once that is gone.
  untrace_services
  await_query PostgreSQL "service postgresql start" postgres_query postgres_configure postgres_restart
}

mariadb_query() {
  timeout -s KILL 10 mariadb --connect-timeout=5 -h 127.0.0.1 -P 3306 -u root test -Nse 'SELECT 1'
}

# Root over TCP without a password (a new install allows only the socket) and a database `test`.
mariadb_configure() {
  timeout -s KILL 10 mariadb -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket; CREATE DATABASE IF NOT EXISTS test;"
}

mariadb_restart() {
  timeout -s KILL 30 mariadb-admin shutdown 2>/dev/null || pkill -KILL -x mariadbd || true
  local deadline=$((SECONDS + 30))
  while pgrep -x mariadbd >/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 1; done
  service mariadb start >/dev/null 2>&1 ||
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  await_port 3306 MariaDB "service mariadb start" && mariadb_configure
}

ensure_mariadb() {
  if ! port_answers 3306; then
    command -v mariadbd >/dev/null 2>&1 || ensure_packages mariadb
    echo "== starting MariaDB (service mariadb start)" >&2
    service mariadb start >/dev/null 2>&1 || true
    await_port 3306 MariaDB "service mariadb start"
  fi
  command -v mariadb >/dev/null 2>&1 || ensure_packages mariadb
  await_query MariaDB "service mariadb start" mariadb_query mariadb_configure mariadb_restart
}

ensure_redis() {
  port_answers 6379 && return 0
  command -v redis-server >/dev/null 2>&1 || ensure_packages redis
  echo "== starting Redis (redis-server --daemonize yes)" >&2
  redis-server --daemonize yes --save '' >/dev/null
  await_port 6379 Redis "redis-server --daemonize yes"
}

# Whether any process of `user` runs under a seccomp filter: one a test restarted under CI's trace
# (scripts/check-packages.sh). Once that trace ends, the filter fails the server's every fork
# with ENOSYS (PostgreSQL: "could not fork new process for connection").
traced() {
  local p
  for p in $(pgrep -u "$1" || true); do
    grep -q '^Seccomp:[[:space:]]*2' "/proc/$p/status" 2>/dev/null && return 0
  done
  return 1
}

# Restarts, from this untraced process, a server a test restarted under the trace, so CI leaves
# the machine's servers as it found them. RabbitMQ's restart tests restart its application, not
# its process, so only PostgreSQL can be left so.
untrace_services() {
  if traced postgres; then
    echo "== restarting PostgreSQL, restarted under the trace by a test" >&2
    postgres_restart
  fi
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
