#!/usr/bin/env bash
# The Python toolchain of the Python plugins: a venv under plugins/target with the pinned
# componentize-py (plugin-sdk/python/requirements.txt). Sourced by build-python.sh and
# test-python.sh; `ensure_python_venv TARGET_DIR` sets PY (the venv's python) and PY_VENV.
# The machine's python3 makes the venv when it can (it needs venv and ensurepip); else Debian's,
# group python-plugins of scripts/packages.txt.
source "$(dirname "${BASH_SOURCE[0]}")/packages.sh"

PY_REQUIREMENTS="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/plugin-sdk/python/requirements.txt"

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

ensure_python_venv() { # TARGET_DIR
  PY_VENV="$1/python-venv"
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
  want=$(sha256sum <"$PY_REQUIREMENTS")
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "== python: pip install -r plugin-sdk/python/requirements.txt" >&2
    ensure_packages python-pip || return 1
    "$PY" -m pip install -q --disable-pip-version-check -r "$PY_REQUIREMENTS" || return 1
    echo "$want" >"$stamp"
  fi
}
