#!/usr/bin/env bash
# Starts a new Rust plugin (a component): plugins/NAME/ from scripts/plugin-template/rust/, ready
# to test and build.
# (`worker-host new-plugin NAME` writes the same files from the same templates; it also has
# `--lang python|js`.)
#
#   scripts/new-plugin.sh NAME     # NAME: lowercase letters, digits and dashes, e.g. audit-log
#   scripts/new-plugin.sh --check  # creates a throwaway plugin outside the tree, runs its tests
#                                  # natively and builds it for wasm; exit status says if it works
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TEMPLATE="$ROOT/scripts/plugin-template"

die() { printf 'new-plugin: %s\n' "$*" >&2; exit 1; }

# write_plugin DIR NAME SDK_PATH
write_plugin() {
    local dir=$1 name=$2 sdk=$3 lib=${2//-/_} file
    mkdir -p "$dir/src"
    for file in Cargo.toml src/lib.rs; do
        sed -e "s|{{name}}|$name|g" -e "s|{{lib}}|$lib|g" -e "s|{{sdk}}|$sdk|g" \
            "$TEMPLATE/rust/$(basename "$file").tmpl" >"$dir/$file"
    done
}

if [[ ${1:-} == --check ]]; then
    source "$ROOT/scripts/rust.sh"
    ensure_cargo
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    # A copy of the plugins workspace manifest, so the check uses the same release profile.
    mkdir -p "$tmp/plugins"
    sed -e 's/^exclude = .*/exclude = ["target"]/' "$ROOT/plugins/Cargo.toml" >"$tmp/plugins/Cargo.toml"
    cp "$ROOT/plugins/Cargo.lock" "$tmp/plugins/" 2>/dev/null || true
    write_plugin "$tmp/plugins/template-check" template-check "$ROOT/plugin-sdk"
    # Share the real target dir so dependencies are not compiled again.
    export CARGO_TARGET_DIR="$ROOT/plugins/target"
    (cd "$tmp/plugins" && cargo test -q)
    unset CARGO_TARGET_DIR
    PLUGINS_DIR="$tmp/plugins" PLUGINS_TARGET_DIR="$ROOT/plugins/target" "$ROOT/scripts/build-plugins.sh"
    [[ -s $tmp/plugins/template_check.wasm ]] || die "template_check.wasm was not built"
    echo "new-plugin template: tests pass and the module builds"
    exit 0
fi

name=${1:-}
[[ -n $name ]] || die "usage: scripts/new-plugin.sh NAME   (or --check)"
[[ $name =~ ^[a-z][a-z0-9]*(-[a-z0-9]+)*$ ]] || die "NAME must be lowercase letters, digits and single dashes, starting with a letter: $name"
dir="$ROOT/plugins/$name"
[[ ! -e $dir ]] || die "$dir already exists"
write_plugin "$dir" "$name" "../../plugin-sdk"
cat <<MSG
created plugins/$name (writes plugins/${name//-/_}.wasm)
  test:  cargo test --manifest-path plugins/Cargo.toml -p $name
  build: scripts/build-plugins.sh
MSG
