#!/usr/bin/env bash
# Builds every JavaScript plugin in plugins/ (a folder with app.js and package.json) into a
# component plugins/<name>.wasm (dashes as underscores) of the world in wit/worker-plugin.wit,
# from any working directory. scripts/build-plugins.sh calls it; it also runs alone.
#
# Node.js and npm come from Debian (groups js, js-npm of scripts/packages.txt), installed when
# missing; the tools (componentize-js, esbuild: scripts/js/package.json and its lock) are installed
# with npm ci into plugins/target/js, a plugin's own packages (the `worker` SDK, anything else it
# imports) into its folder's node_modules. scripts/js/componentize.mjs bundles and componentizes.
#
# Idempotent: a plugin whose bundled source, WIT and tools are those of its last build is not
# componentized again (hash in plugins/target/js/build/<name>/), and an output is replaced
# (atomically) only when its bytes changed. Prints each component's size and time.
#
#   scripts/build-js.sh                  # every JS plugin in plugins/
#   scripts/build-js.sh plugins/demo-js  # these plugin folders only
#   PLUGINS_DIR=... PLUGINS_TARGET_DIR=...   # another plugins folder / target dir
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PLUGINS="${PLUGINS_DIR:-$ROOT/plugins}"
TARGET_DIR="${PLUGINS_TARGET_DIR:-$PLUGINS/target}"
TOOLS="$TARGET_DIR/js"
START_NS=$(date +%s%N)
source "$ROOT/scripts/node.sh"

say() { printf '%s\n' "$*" >&2; }
die() { say "build-js: $*"; exit 1; }

# The plugin folders: the arguments, else every folder of plugins/ with app.js and package.json.
folders=()
if [[ $# -gt 0 ]]; then
    for dir in "$@"; do
        [[ -f $dir/app.js && -f $dir/package.json ]] || die "$dir is not a JavaScript plugin (app.js and package.json)"
        folders+=("$(cd "$dir" && pwd)")
    done
else
    shopt -s nullglob
    for app in "$PLUGINS"/*/app.js; do
        [[ -f ${app%/app.js}/package.json ]] && folders+=("${app%/app.js}")
    done
fi
if [[ ${#folders[@]} -eq 0 ]]; then
    say "js: no JavaScript plugins in $PLUGINS"
    exit 0
fi

ensure_node
say "js: componentize-js ($(node -p 'require(process.argv[1]).dependencies["@bytecodealliance/componentize-js"]' "$ROOT/scripts/js/package.json"), node $(node --version))"
js_tools "$TOOLS"
for dir in "${folders[@]}"; do
    name=$(basename "$dir")
    npm_deps "$dir"
    out="$(dirname "$dir")/${name//-/_}.wasm"
    node "$ROOT/scripts/js/componentize.mjs" --tools "$TOOLS" --wit "$ROOT/wit/worker-plugin.wit" \
        --stage "$TOOLS/build" "$dir" "$out"
done
END_NS=$(date +%s%N)
say "js: ${#folders[@]} plugin(s) in $(awk "BEGIN{printf \"%.1f\", ($END_NS-$START_NS)/1e9}") s"
