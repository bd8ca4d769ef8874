#!/usr/bin/env bash
# The Python toolchain of the Python plugins: a venv under plugins/target with the pinned
# componentize-py (plugin-sdk/python/requirements.txt). Sourced by build-python.sh and
# test-python.sh; `ensure_python_venv TARGET_DIR` sets PY (the venv's python) and PY_VENV.
# `ensure_python_venv TARGET_DIR REQUIREMENTS NAME` makes another venv, TARGET_DIR/NAME, from
# other pinned requirements (scripts/bench.sh: the bench's Python peers).
# The machine's python3 makes the venv when it can (it needs venv and ensurepip); else Debian's,
# group python-plugins of scripts/packages.txt.
source "$(dirname "${BASH_SOURCE[0]}")/packages.sh"

PY_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY_REQUIREMENTS="$PY_REPO/plugin-sdk/python/requirements.txt"

# The world of the Python plugins, as componentize-py options: worker:python-sdk/handler
# (plugin-sdk/python/wit: worker:plugin/handler@2.0.0 of wit/ plus wasi:http, for worker.http),
# each imported interface given the module name worker/component*.py imports (else `types` would
# be `worker_plugin_types`, as wasi:http has a `types` too). One world that includes `handler`,
# not two `-w` merged: componentize-py 0.25.1 panics on the export of a merged world.
PY_SDK_WIT="$PY_REPO/plugin-sdk/python/wit"
PY_WORLD_ARGS=(
  -d "$PY_REPO/wit" -d "$PY_SDK_WIT"
  -w worker:python-sdk/handler
  --import-interface-name worker:plugin/host@2.0.0=host
  --import-interface-name worker:plugin/kv@2.0.0=kv
  --import-interface-name worker:plugin/sql@2.0.0=sql
  --import-interface-name worker:plugin/types@2.0.0=types
  --import-interface-name wasi:http/types@0.2.12=http_types
  --import-interface-name wasi:http/outgoing-handler@0.2.12=outgoing_handler
  --import-interface-name wasi:io/poll@0.2.12=poll
  --import-interface-name wasi:io/streams@0.2.12=streams
  --import-interface-name wasi:io/error@0.2.12=error
  --import-interface-name wasi:clocks/monotonic-clock@0.2.12=monotonic_clock
)

# Prints a python3 that can make a venv with pip, installing Debian's when none can.
venv_capable_python() {
  local py
  for py in "$(command -v python3 || true)" /usr/bin/python3; do
    [ -n "$py" ] && [ -x "$py" ] && "$py" -c 'import venv, ensurepip' 2>/dev/null && { echo "$py"; return 0; }
  done
  ensure_packages python-plugins >&2 || return 1
  /usr/bin/python3 -c 'import venv, ensurepip' || return 1
  echo /usr/bin/python3
}

ensure_python_venv() { # TARGET_DIR [REQUIREMENTS NAME]
  local requirements="${2:-$PY_REQUIREMENTS}"
  PY_VENV="$1/${3:-python-venv}"
  PY="$PY_VENV/bin/python"
  # A venv whose interpreter is gone (another machine, a removed python) is made anew.
  if [ ! -x "$PY" ] || ! "$PY" -c 'import sys' 2>/dev/null; then
    local base
    base=$(venv_capable_python) || { echo "python: no python3 with venv and pip" >&2; return 1; }
    rm -rf "$PY_VENV"
    mkdir -p "$1"
    echo "== python: venv $PY_VENV ($("$base" --version 2>&1))" >&2
    "$base" -m venv "$PY_VENV" || return 1
  fi
  # pip runs only when the pinned requirements changed since the last install.
  local want stamp="$PY_VENV/.requirements.sha256"
  want=$(sha256sum <"$requirements")
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "== python: pip install -r ${requirements#"$PY_REPO/"}" >&2
    ensure_packages python-pip || return 1
    "$PY" -m pip install -q --disable-pip-version-check -r "$requirements" || return 1
    echo "$want" >"$stamp"
  fi
}
