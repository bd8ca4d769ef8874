#!/usr/bin/env bash
# Runs the native tests of the JavaScript side under plain Node (node --test, no wasm): the
# `worker` SDK (plugin-sdk/js) and every JavaScript plugin in plugins/ (app.js + package.json),
# installing their packages first. Ends with "js tests: N passed, N failed".
#
#   scripts/test-js.sh              # the SDK and every JS plugin
#   scripts/test-js.sh DIR...       # these folders only
#   scripts/test-js.sh --template   # writes a throwaway plugin from scripts/plugin-template/js/
#                                   # outside the tree, runs its test and builds its component
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/node.sh"

die() { printf 'test-js: %s\n' "$*" >&2; exit 1; }

# Writes the JS template into DIR as plugin NAME, with the SDK at SDK (as `worker-host new-plugin
# NAME --lang js` does).
write_template() {
    local dir=$1 name=$2 sdk=$3 file
    mkdir -p "$dir"
    for file in app.js app.test.js package.json; do
        sed -e "s|{{name}}|$name|g" -e "s|{{lib}}|${name//-/_}|g" -e "s|{{sdk}}|$sdk|g" \
            "$ROOT/scripts/plugin-template/js/$file.tmpl" >"$dir/$file"
    done
}

ensure_node
passed=0
failed=0
# Runs node --test in DIR and adds its counts (the spec reporter's "ℹ pass N" lines).
run_tests() {
    local dir=$1 out status=0
    echo "== node --test in ${dir#"$ROOT"/}"
    npm_deps "$dir"
    out=$(mktemp)
    (cd "$dir" && node --test --test-reporter=spec) 2>&1 | tee "$out" || status=$?
    local p f
    p=$(sed -n 's/^ℹ pass \([0-9]*\)$/\1/p' "$out" | tail -n1)
    f=$(sed -n 's/^ℹ fail \([0-9]*\)$/\1/p' "$out" | tail -n1)
    rm -f "$out"
    passed=$((passed + ${p:-0}))
    failed=$((failed + ${f:-0}))
    if [ "$status" -ne 0 ] && [ "${f:-0}" -eq 0 ]; then
        failed=$((failed + 1)) # node itself failed (a syntax error, a missing import)
    fi
}

if [ "${1:-}" = --template ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    write_template "$tmp/plugins/template-check-js" template-check-js "$ROOT/plugin-sdk"
    run_tests "$tmp/plugins/template-check-js"
    [ "$failed" -eq 0 ] || die "the template's tests failed"
    PLUGINS_TARGET_DIR="$ROOT/plugins/target" "$ROOT/scripts/build-js.sh" "$tmp/plugins/template-check-js"
    [ -s "$tmp/plugins/template_check_js.wasm" ] || die "template_check_js.wasm was not built"
    echo "js template: tests pass and the component builds"
    echo "js tests: $passed passed, $failed failed"
    exit 0
fi

dirs=()
if [ $# -gt 0 ]; then
    for d in "$@"; do dirs+=("$(cd "$d" && pwd)"); done
else
    dirs+=("$ROOT/plugin-sdk/js")
    shopt -s nullglob
    for app in "$ROOT"/plugins/*/app.js; do
        [ -f "${app%/app.js}/package.json" ] && dirs+=("${app%/app.js}")
    done
fi
for d in "${dirs[@]}"; do run_tests "$d"; done
echo "js tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
