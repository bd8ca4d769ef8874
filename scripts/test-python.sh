#!/usr/bin/env bash
# Runs the Python plugins' native tests under CPython (no wasm): the worker package's own tests
# (plugin-sdk/python/tests, its component adapter against componentize-py's generated bindings)
# and each Python plugin's test_*.py (plugins/*/ with an app.py), each plugin in its own process
# since every plugin's module is named `app`. Uses the build's venv (scripts/python.sh).
# Ends with one line: `python: N passed, N failed`; exit status 1 if any failed.
#
#   scripts/test-python.sh              # the SDK and every Python plugin
#   scripts/test-python.sh --template   # also: a plugin made from scripts/plugin-template/python
#                                       # passes its test and builds (scripts/build-python.sh)
#   PLUGINS_DIR=... PLUGINS_TARGET_DIR=...
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PLUGINS="${PLUGINS_DIR:-$ROOT/plugins}"
TARGET_DIR="${PLUGINS_TARGET_DIR:-$ROOT/plugins/target}"
SDK="$ROOT/plugin-sdk/python"
TEMPLATE="$ROOT/scripts/plugin-template/python"
source "$ROOT/scripts/python.sh"

template=no
case ${1:-} in
    --template) template=yes ;;
    "") ;;
    *) echo "usage: scripts/test-python.sh [--template]" >&2; exit 2 ;;
esac

ensure_python_venv "$TARGET_DIR"
export PYTHONDONTWRITEBYTECODE=1 # no __pycache__ in the source folders

# The generated bindings (stubs with the real types), made again when the WIT or the pin changed.
BINDINGS="$TARGET_DIR/python-bindings"
want=$({ cat "$ROOT"/wit/*.wit "$PY_SDK_WIT"/*.wit "$PY_REQUIREMENTS"; printf '%s\n' "${PY_WORLD_ARGS[@]}"; } | sha256sum)
if [[ $(cat "$BINDINGS.sha256" 2>/dev/null) != "$want" ]]; then
    rm -rf "$BINDINGS"
    "$PY_VENV/bin/componentize-py" -q "${PY_WORLD_ARGS[@]}" bindings "$BINDINGS"
    echo "$want" >"$BINDINGS.sha256"
fi

passed=0 failed=0
# Runs unittest discovery in DIR with PYTHONPATH; adds its counts.
suite() { # LABEL DIR PYTHONPATH
    local out ran bad
    echo "== python: $1"
    out=$(cd "$2" && WORKER_BINDINGS=${WORKER_BINDINGS:-} PYTHONPATH="$3" "$PY" -m unittest discover -s . -p 'test_*.py' 2>&1) || true
    printf '%s\n' "$out" | tail -n 40
    ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in .*/\1/p' <<<"$out" | tail -n1)
    bad=$(sed -n 's/^FAILED (\(.*\))$/\1/p' <<<"$out" | tr ',' '\n' | sed -n 's/.*\(failures\|errors\|unexpected successes\)=\([0-9]*\).*/\2/p' |
        awk '{ s += $1 } END { print s + 0 }')
    if [[ -z $ran ]]; then # it did not even load: count it as one failure
        failed=$((failed + 1))
        return
    fi
    [[ $ran -gt 0 ]] || { echo "   (no tests found)"; }
    passed=$((passed + ran - bad))
    failed=$((failed + bad))
}

WORKER_BINDINGS=1 suite "worker package" "$SDK/tests" "$SDK:$BINDINGS"

shopt -s nullglob
for app in "$PLUGINS"/*/app.py; do
    dir=$(dirname "$app")
    tests=("$dir"/test_*.py)
    if [[ ${#tests[@]} -eq 0 ]]; then
        echo "== python: $(basename "$dir"): no test_*.py"
        continue
    fi
    suite "$(basename "$dir")" "$dir" "$dir:$SDK"
done

if [[ $template == yes ]]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    name=template-check
    mkdir -p "$tmp/plugins/$name"
    for file in app.py test_app.py requirements.txt; do
        sed -e "s|{{name}}|$name|g" -e "s|{{lib}}|${name//-/_}|g" "$TEMPLATE/$file.tmpl" \
            >"$tmp/plugins/$name/$file"
    done
    suite "template ($name)" "$tmp/plugins/$name" "$tmp/plugins/$name:$SDK"
    echo "== python: template builds"
    if PLUGINS_DIR="$tmp/plugins" PLUGINS_TARGET_DIR="$TARGET_DIR" "$ROOT/scripts/build-python.sh" &&
        [[ -s $tmp/plugins/${name//-/_}.wasm ]]; then
        passed=$((passed + 1))
    else
        echo "the template plugin did not build"
        failed=$((failed + 1))
    fi
fi

echo "python: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
