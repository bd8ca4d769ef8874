#!/usr/bin/env bash
# Builds every Python plugin (a folder of plugins/ with an app.py) into plugins/<name>.wasm, a
# component of the world `handler` of wit/worker-plugin.wit plus wasi:http's outgoing-handler (for
# worker.http; plugin-sdk/python/wit, options in scripts/python.sh), with componentize-py (pinned
# in plugin-sdk/python/requirements.txt, installed into plugins/target/python-venv).
#
# The component holds the plugin's sources (not its test_*.py or tests/), the `worker` package of
# plugin-sdk/python and, when the plugin's requirements.txt names any, those packages (pure
# Python wheels only: there is no compiler for native extensions). Its entry is worker.entry,
# which imports app.py; app.py registers its handler with @worker.handler.
#
# Idempotent and fast when nothing changed: a hash of every input (sources, SDK, WIT,
# requirements, this script) is kept beside the build in plugins/target/python/, and a plugin
# whose hash is unchanged is not rebuilt. An output is replaced (atomically) only when its bytes
# changed, so the host's plugin watcher sees no spurious reloads.
#
#   scripts/build-python.sh                       # build every Python plugin
#   PLUGINS_DIR=... PLUGINS_TARGET_DIR=...        # another plugins folder / target dir
#   PYTHON_FORCE_BUILD=1                          # ignore the stored hashes
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PLUGINS="${PLUGINS_DIR:-$ROOT/plugins}"
TARGET_DIR="${PLUGINS_TARGET_DIR:-$PLUGINS/target}"
SDK="$ROOT/plugin-sdk/python"
WIT="$ROOT/wit"
source "$ROOT/scripts/python.sh"
source "$ROOT/scripts/replace.sh"

say() { printf '%s\n' "$*" >&2; }
die() { say "build-python: $*"; exit 1; }
now_ns() { date +%s%N; }
secs() { awk "BEGIN{printf \"%.1f\", ($2-$1)/1e9}"; }

# Copies folder $1 into $2 without tests, caches or build leftovers.
stage_sources() {
    mkdir -p "$2"
    tar -C "$1" --exclude=__pycache__ --exclude='test_*.py' --exclude=tests --exclude='*.pyc' \
        --exclude='*.wasm' --exclude=requirements.txt -cf - . | tar -C "$2" -xf -
}

# One hash of everything a plugin's component is made of.
inputs_hash() { # PLUGIN_DIR
    {
        printf '%s\n' "$("$PY_VENV/bin/componentize-py" --version)"
        (cd "$1" && find . -type f ! -path '*/__pycache__/*' ! -name 'test_*.py' ! -path './tests/*' \
            ! -name '*.pyc' -print0 | LC_ALL=C sort -z | xargs -0r sha256sum)
        (cd "$SDK" && find worker -type f -name '*.py' -print0 | LC_ALL=C sort -z | xargs -0r sha256sum)
        (cd "$WIT" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0r sha256sum)
        (cd "$PY_SDK_WIT" && find . -type f -name '*.wit' -print0 | LC_ALL=C sort -z | xargs -0r sha256sum)
        sha256sum <"$ROOT/scripts/python.sh" # the world's options
        sha256sum <"$PY_REQUIREMENTS"
        sha256sum <"${BASH_SOURCE[0]}"
    } | sha256sum | cut -d' ' -f1
}

# Whether a requirements file names any package (lines other than blanks and comments).
has_requirements() {
    [[ -f $1 ]] && grep -qvE '^[[:space:]]*(#|$)' "$1"
}

# Replaces $2 with $1 only if the bytes differ.
publish_component() {
    [[ -s $1 ]] || die "expected $1 after the build"
    replace_if_changed "$1" "$2"
}

size_line() { # FILE NOTE
    local size
    size=$(wc -c <"$1")
    printf '  %-24s %9d bytes  (%s MiB)  %s\n' "$(basename "$1")" "$size" \
        "$(awk "BEGIN{printf \"%.1f\", $size/1048576}")" "$2"
}

shopt -s nullglob
apps=("$PLUGINS"/*/app.py)
[[ ${#apps[@]} -gt 0 ]] || { say "build-python: no Python plugins (folders with an app.py) in $PLUGINS"; exit 0; }
[[ -f $SDK/worker/entry.py ]] || die "the worker package is missing: $SDK/worker"

ensure_python_venv "$TARGET_DIR"
COMPONENTIZE="$PY_VENV/bin/componentize-py"

for app in "${apps[@]}"; do
    dir=$(dirname "$app")
    name=$(basename "$dir")
    lib=${name//-/_}
    out="$PLUGINS/$lib.wasm"
    work="$TARGET_DIR/python/$lib"
    stamp="$TARGET_DIR/python/$lib.inputs.sha256"
    hash=$(inputs_hash "$dir")
    if [[ -z ${PYTHON_FORCE_BUILD:-} && -s $work/$lib.wasm && $(cat "$stamp" 2>/dev/null) == "$hash" ]]; then
        publish_component "$work/$lib.wasm" "$out" # in case the output was removed or changed
        size_line "$out" "(inputs unchanged)"
        continue
    fi
    say "python: $name"
    start=$(now_ns)
    rm -rf "$work"
    stage_sources "$dir" "$work/app"
    stage_sources "$SDK/worker" "$work/sdk/worker"
    paths=(-p "$work/app" -p "$work/sdk")
    if has_requirements "$dir/requirements.txt"; then
        # Pure-Python wheels only (platform "any"): native wheels could not run in the component.
        ensure_packages python-pip
        "$PY" -m pip install -q --disable-pip-version-check --no-compile --target "$work/deps" \
            --only-binary=:all: --platform any --implementation py -r "$dir/requirements.txt" ||
            die "$name: pip could not install requirements.txt as pure-Python wheels"
        paths+=(-p "$work/deps")
    fi
    "$COMPONENTIZE" -q "${PY_WORLD_ARGS[@]}" componentize "${paths[@]}" worker.entry \
        -o "$work/$lib.wasm" || die "$name: componentize-py failed"
    publish_component "$work/$lib.wasm" "$out"
    echo "$hash" >"$stamp"
    size_line "$out" "(componentize-py: $(secs "$start" "$(now_ns)") s)"
done
