#!/bin/sh
# The inside of scripts/test-package.sh's VM test: runs at each boot of the Debian 12 guest (the
# unit wh-test.service), from the folder the host shares (/mnt/share: worker-host.deb,
# demo_python.wasm; this script's output goes to guest.log there). Boot 1 installs the package
# and drives the service; boot 2, after a reboot, checks the compile cache and purges. POSIX sh:
# the guest is a minimal Debian.
set -u
SHARE=/mnt/share
PHASE=/var/lib/wh-test/phase
CONF=/etc/worker-host/worker.toml
mkdir -p /var/lib/wh-test

say() { echo "$*"; }
ok() { echo "ok: $*"; }
fail() {
  echo "FAILED: $*"
  echo "--- journalctl -u worker-host (last 40 lines)"
  journalctl -u worker-host --no-pager -n 40 -o cat | sed 's/^/    /'
  echo "guest: a check failed"
  systemctl poweroff 2>/dev/null
  exit 1
}
# The service's journal lines of this boot, as an operator reads them.
journal() { journalctl -b -u worker-host --no-pager -o short-precise "$@"; }
# quote PATTERN: prints this boot's journal lines of worker-host that match.
quote() { journal | grep -E "$1" | sed 's/^/    | /'; }
count() { journal -o cat | grep -cE "$1" || true; }
# wait_for SECONDS PATTERN WHAT [N]: until this boot's journal has N lines (1) matching PATTERN.
wait_for() {
  n=0
  until [ "$(count "$2")" -ge "${4:-1}" ]; do
    n=$((n + 1))
    [ "$n" -le "$(($1 * 2))" ] || fail "$3: no line matching /$2/ in the journal after $1 s"
    sleep 0.5
  done
}
# The compiled components: name, size, modification time.
cache_listing() { find /var/lib/worker-host/compiled -type f -printf '%f %s bytes, modified %TT\n' | sort; }
publish() {
  worker-host publish -c "$CONF" --exchange master --routing-key "$1" --body "$2" >/dev/null ||
    fail "worker-host publish $1"
}

boot1() {
  say "== boot 1: $(uname -r), $(systemctl is-system-running 2>/dev/null || true)"
  systemctl start rabbitmq-server
  n=0
  until rabbitmqctl -q await_startup >/dev/null 2>&1; do
    n=$((n + 1))
    [ "$n" -le 60 ] || fail "RabbitMQ did not start"
    sleep 1
  done
  ok "RabbitMQ $(dpkg-query -W -f='${Version}' rabbitmq-server) runs"

  say "== install: dpkg -i worker-host.deb (its postinst enables and starts the unit)"
  dpkg -i "$SHARE/worker-host.deb" 2>&1 | sed 's/^/    /'
  [ "$(systemctl is-active worker-host)" = active ] || fail "worker-host is not active after install"
  wait_for 60 '"consuming"' "start"
  ok "systemctl: worker-host is $(systemctl is-active worker-host) and $(systemctl is-enabled worker-host), as user $(stat -c %U "/proc/$(systemctl show -p MainPID --value worker-host)")"
  quote 'Started|"consuming"|plugin loaded'
  [ -d /var/lib/worker-host/compiled ] || fail "no /var/lib/worker-host/compiled"
  ok "state in /var/lib/worker-host: $(ls /var/lib/worker-host | tr '\n' ' ')"

  say "== a message for the Rust component (demo_rust.wasm)"
  publish demo-rust.hello '{"log": "hello from Rust, installed by the package"}'
  wait_for 30 'hello from Rust, installed by the package' "the Rust plugin's log line"
  ok "the Rust plugin handled it"
  quote 'hello from Rust'

  say "== reload: the Python component added to worker.toml, then systemctl reload"
  install -m 0644 "$SHARE/demo_python.wasm" /etc/worker-host/plugins/demo_python.wasm
  cat >>"$CONF" <<'EOF'

[[subscription]]
queue = "demo@python"
plugin = "demo_python.wasm"
bindings = ["demo-python.#"]
publish = ["master"]
instance = "reuse"
kv = "demo"
sql = "demo"
[subscription.config]
language = "python"
EOF
  systemctl reload worker-host || fail "systemctl reload"
  wait_for 120 '"config reloaded"' "reload"
  ok "the reload added the subscription (the unit stayed up: $(systemctl is-active worker-host))"
  quote 'Reloading|Reloaded|SIGHUP|config reloaded|subscription added|demo_python.wasm.*compiled'
  publish demo-python.hello '{"log": "hello from Python, added by a reload"}'
  wait_for 60 'hello from Python, added by a reload' "the Python plugin's log line"
  ok "the Python plugin handled it"
  quote 'hello from Python'

  say "== stop: systemctl stop drains and exits 0"
  systemctl stop worker-host
  code=$(systemctl show -p ExecMainCode --value worker-host)
  status=$(systemctl show -p ExecMainStatus --value worker-host)
  result=$(systemctl show -p Result --value worker-host)
  # ExecMainCode 1 is CLD_EXITED: the process exited by itself (not killed by a signal).
  [ "$code" = 1 ] && [ "$status" = 0 ] && [ "$result" = success ] ||
    fail "stop: code=$code status=$status result=$result"
  ok "stopped: exited with status $status (result $result)"
  quote 'Stopping|signal received|draining|drained|Deactivated|Stopped'

  say "== start again, then reboot"
  systemctl start worker-host
  wait_for 60 '"consuming"' "start after stop" 2
  ok "systemctl start: consuming again"
  quote '"consuming"' | tail -n 1
  cache_listing >/var/lib/wh-test/cache-before
  sed 's/^/    /' /var/lib/wh-test/cache-before
  [ -s /var/lib/wh-test/cache-before ] || fail "the compile cache is empty"
  echo 2 >"$PHASE"
  sync
  say "== rebooting (systemctl reboot)"
  systemctl reboot 2>/dev/null
}

boot2() {
  say "== boot 2 (after the reboot)"
  [ "$(systemctl is-enabled worker-host)" = enabled ] || fail "worker-host is not enabled"
  wait_for 120 '"consuming"' "start at boot"
  ok "worker-host started at boot: $(systemctl is-active worker-host)"
  quote 'Started|"consuming"|plugin loaded|compiled component'
  [ "$(count 'compiled component')" = 0 ] || fail "a component was compiled again after the reboot"
  cache_listing >/var/lib/wh-test/cache-after
  cmp -s /var/lib/wh-test/cache-before /var/lib/wh-test/cache-after ||
    fail "the compile cache changed: $(diff /var/lib/wh-test/cache-before /var/lib/wh-test/cache-after)"
  ok "nothing compiled at boot: the compile cache is as before the reboot (same files, sizes, times)"
  publish demo-python.again '{"log": "hello from Python after the reboot"}'
  wait_for 60 'hello from Python after the reboot' "the Python plugin after the reboot"
  ok "the Python plugin handled a message after the reboot"

  say "== purge: dpkg -P worker-host"
  dpkg -P worker-host 2>&1 | sed 's/^/    /'
  quote 'Stopping|drained|Stopped'
  for path in /usr/bin/worker-host /etc/worker-host/worker.toml /var/lib/worker-host /usr/share/worker-host \
    /usr/share/doc/worker-host /lib/systemd/system/worker-host.service \
    /etc/systemd/system/multi-user.target.wants/worker-host.service; do
    [ ! -e "$path" ] || fail "purge left $path"
  done
  ! getent passwd worker-host >/dev/null || fail "purge left the user worker-host"
  ! getent group worker-host >/dev/null || fail "purge left the group worker-host"
  [ "$(systemctl is-active worker-host 2>/dev/null)" != active ] || fail "worker-host still runs"
  # dpkg deletes its own files only: the plugin this test added stays, as dpkg's warning says.
  left=$(find /etc/worker-host -type f 2>/dev/null)
  [ "$left" = /etc/worker-host/plugins/demo_python.wasm ] || fail "purge left in /etc/worker-host: $left"
  ok "purged: no binary, config, state, unit, user or group left (the service is $(systemctl is-active worker-host 2>/dev/null)); only the plugin added by hand stays: $left"
  echo 3 >"$PHASE"
  echo "guest: all checks passed"
  systemctl poweroff 2>/dev/null
}

case "$(cat "$PHASE" 2>/dev/null || echo 1)" in
  1) boot1 ;;
  2) boot2 ;;
  *) systemctl poweroff ;;
esac
