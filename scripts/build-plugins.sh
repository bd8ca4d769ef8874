#!/usr/bin/env bash
# Builds every plugin in plugins/ into plugins/<name>.wasm, from any working directory.
#
# Rust plugins (folders with a Cargo.toml, members of the separate plugins/ workspace) are of two
# kinds, told apart by the crate's `[package.metadata.worker] abi` (plugins/README.md):
# - ABI v1 core modules (no key, or `abi = 1`): built for wasm32-unknown-unknown (WASM_TARGET)
#   with rustup's target, which the script adds when missing; when rustup is missing or cannot add
#   it (offline), with Debian's rustc-web and -Zbuild-std (std compiled from rust-web-src).
# - components of the world worker:plugin/handler@2.0.0 (`abi = 2`): built for rustup's
#   wasm32-wasip2 target (added when missing); without it, with Debian's rustc-web for
#   wasm32-wasip1 (-Zbuild-std, wasi-libc) and made a component by tools/componentize (the WASI
#   preview1 adapter, applied with wit-component), which the host's own cargo builds.
# Every component is checked by tools/componentize (exports `handle` as the world types it,
# imports only the world and WASI); every core module by check_abi.
# C plugins (folders with *.c and no Cargo.toml) build with clang --target=wasm32 and lld's wasm-ld,
# without any libc. Packages come from scripts/packages.txt (groups wasm-debian, wasi-debian,
# c-plugins), installed when missing.
#
# Idempotent: an output is replaced (atomically) only when its bytes changed, so the host's plugin
# watcher sees no spurious reloads. Prints each module's size and the total time.
#
#   scripts/build-plugins.sh            # build everything
#   WASM_TARGET=wasm32-wasip1 scripts/build-plugins.sh   # ABI v1 modules for WASI (see README)
#   WORKER_WASM_TOOLCHAIN=debian|rustup                  # force one Rust toolchain (default: auto)
#   PLUGINS_DIR=... PLUGINS_TARGET_DIR=...               # another plugins workspace / target dir
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PLUGINS="${PLUGINS_DIR:-$ROOT/plugins}"
TARGET_DIR="${PLUGINS_TARGET_DIR:-$PLUGINS/target}"
TARGET="${WASM_TARGET:-wasm32-unknown-unknown}"   # of ABI v1 modules
COMPONENT_TARGET=wasm32-wasip2                    # of components, with rustup
TOOLCHAIN="${WORKER_WASM_TOOLCHAIN:-auto}"
START_NS=$(date +%s%N)
source "$ROOT/scripts/packages.sh"
source "$ROOT/scripts/replace.sh"

say() { printf '%s\n' "$*" >&2; }
die() { say "build-plugins: $*"; exit 1; }

# Replaces $2 with $1 only if the bytes differ; prints the size line.
publish_module() {
    local built=$1 out=$2
    [[ -f $built ]] || die "expected $built after the build"
    replace_if_changed "$built" "$out"
    local size
    size=$(wc -c <"$out")
    printf '  %-24s %8d bytes  (%s KiB)\n' "$(basename "$out")" "$size" "$(awk "BEGIN{printf \"%.1f\", $size/1024}")"
    BUILT+=("$out")
}

# Checks the ABI v1 exports and that imports come only from worker_v1 (or WASI), if python3 exists.
check_abi() {
    command -v python3 >/dev/null || { say "(python3 not found: skipping the export check)"; return 0; }
    python3 - "$@" <<'PY'
import sys
def leb(b, i):
    r = s = 0
    while True:
        x = b[i]; i += 1; r |= (x & 0x7f) << s; s += 7
        if x < 0x80: return r, i
def name(b, i):
    n, i = leb(b, i); return b[i:i + n].decode(), i + n
bad = False
for path in sys.argv[1:]:
    b = open(path, 'rb').read()
    if b[:4] != b'\0asm':
        print(f"{path}: not a wasm module"); bad = True; continue
    i, imports, exports = 8, [], set()
    while i < len(b):
        sid = b[i]; size, i = leb(b, i + 1); end = i + size
        if sid == 2:
            n, j = leb(b, i)
            for _ in range(n):
                m, j = name(b, j); f, j = name(b, j); k = b[j]; j += 1
                if k == 0: _, j = leb(b, j)
                elif k == 1: flags, j = leb(b, j + 1); _, j = leb(b, j); j = leb(b, j)[1] if flags & 1 else j
                elif k == 2: flags, j = leb(b, j); _, j = leb(b, j); j = leb(b, j)[1] if flags & 1 else j
                elif k == 3: j += 2
                imports.append((m, f))
        elif sid == 7:
            n, j = leb(b, i)
            for _ in range(n):
                f, j = name(b, j); j += 1; _, j = leb(b, j); exports.add(f)
        i = end
    missing = {"memory", "worker_abi_v1", "worker_handle"} - exports
    foreign = sorted({m for m, _ in imports} - {"worker_v1", "wasi_snapshot_preview1"})
    if missing or foreign:
        bad = True
        print(f"{path}: missing exports {sorted(missing)}; imports from unknown modules {foreign}")
sys.exit(1 if bad else 0)
PY
}

# True when rustup has TARGET, adding it if missing (time-bounded: offline, it may hang).
rustup_target() { # TARGET
    command -v rustup >/dev/null || return 1
    local out
    out=$(cd "$PLUGINS" && rustup target list --installed 2>/dev/null) || true
    grep -qx "$1" <<<"$out" && return 0
    if out=$(cd "$PLUGINS" && timeout 120 rustup --quiet target add "$1" 2>&1); then
        say "rust: added rustup's $1 target"
        return 0
    fi
    say "rust: rustup could not add $1: $(printf '%s\n' "$out" | tail -n1)"
    return 1
}

# Sets RUST_BUILD, the cargo command for WANTED (a wasm target), and RUST_TARGET, the target it
# builds for: rustup's WANTED target, else Debian's rustc-web with -Zbuild-std for DEBIAN_TARGET
# (WANTED by default; components take wasm32-wasip1 there, which Debian's wasi-libc supports).
rust_toolchain() { # WANTED [DEBIAN_TARGET]
    local wanted=$1 debian_target=${2:-$1}
    case $TOOLCHAIN in
        auto | rustup)
            if rustup_target "$wanted"; then
                say "rust: rustup's $wanted target"
                RUST_BUILD=(env -u RUSTC -u RUSTC_BOOTSTRAP cargo build)
                RUST_TARGET=$wanted
                return 0
            fi
            [[ $TOOLCHAIN == auto ]] || die "WORKER_WASM_TOOLCHAIN=rustup, but rustup has no $wanted target"
            ;;
        debian) ;;
        *) die "WORKER_WASM_TOOLCHAIN is auto, rustup or debian, not '$TOOLCHAIN'" ;;
    esac
    say "rust: Debian's rustc-web with -Zbuild-std for $debian_target"
    ensure_packages wasm-debian
    [[ $debian_target != wasm32-wasi* ]] || ensure_packages wasi-debian
    [[ -x /usr/bin/rustc && -x /usr/bin/cargo ]] || die "/usr/bin/rustc or /usr/bin/cargo missing after install"
    # rustc's default wasm linker, /usr/bin/rust-lld, comes with rust-web-llvm, a Recommends that
    # pulls all of llvm-22 (90 MB) and still not lld-22; lld's wasm-ld is the same linker.
    WASM_LD=$(versioned_tool wasm-debian lld wasm-ld)
    local linker_var flags=()
    linker_var="CARGO_TARGET_$(tr 'a-z-' 'A-Z_' <<<"$debian_target")_LINKER"
    # WASI's libc is Debian's wasi-libc, not one shipped with the target.
    [[ $debian_target != wasm32-wasi* ]] ||
        flags=("RUSTFLAGS=-C link-self-contained=no -L native=/usr/lib/wasm32-wasi")
    RUST_BUILD=(env -u RUSTFLAGS "${flags[@]}" RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1
        "$linker_var=$WASM_LD" /usr/bin/cargo build -Zbuild-std=std,panic_abort)
    RUST_TARGET=$debian_target
}

# The ABI a plugin crate is built for: its `[package.metadata.worker] abi`, 1 without one.
crate_abi() { # MANIFEST
    local abi
    abi=$(awk '/^[[:space:]]*\[/ { section = $0; gsub(/[[:space:]]/, "", section); next }
        section == "[package.metadata.worker]" && /^[[:space:]]*abi[[:space:]]*=/ {
            sub(/^[^=]*=[[:space:]]*/, ""); sub(/[^0-9].*$/, ""); print; exit }' "$1")
    case ${abi:-1} in
        1 | 2) echo "${abi:-1}" ;;
        *) die "$1: [package.metadata.worker] abi is 1 or 2, not '$abi'" ;;
    esac
}

# The crate's package name.
crate_name() { # MANIFEST
    sed -n 's/^name *= *"\(.*\)"/\1/p' "$1" | head -n1
}

# The crate's library name, the built file's stem: its package name with `_` for `-`.
crate_lib() { # MANIFEST
    local crate
    crate=$(crate_name "$1")
    echo "${crate//-/_}"
}

# `-p NAME` for each crate, one word a line (for mapfile).
packages_args() { # MANIFEST...
    local manifest
    for manifest in "$@"; do
        printf -- '-p\n%s\n' "$(crate_name "$manifest")"
    done
}

# Builds tools/componentize with the host's own cargo (release, in the root workspace's target
# dir) and sets COMPONENTIZE to it.
componentize_tool() {
    [[ -z ${COMPONENTIZE:-} ]] || return 0
    source "$ROOT/scripts/rust.sh"
    ensure_cargo
    say "rust: building tools/componentize (host cargo)"
    local target_dir=${CARGO_TARGET_DIR:-$ROOT/target}
    (cd "$ROOT" && env -u RUSTFLAGS -u CARGO_BUILD_TARGET cargo build --release \
        -p componentize --target-dir "$target_dir")
    COMPONENTIZE=$target_dir/release/componentize
    [[ -x $COMPONENTIZE ]] || die "expected $COMPONENTIZE after the build"
}

# Prints the path of TOOL-N, N being the version of the PACKAGE-N in GROUP of
# scripts/packages.txt (so the list alone says which LLVM); plain TOOL without such a package.
versioned_tool() { # GROUP PACKAGE TOOL
    local v
    v=$(packages_of "$1" | sed -n "s/^$2-\([0-9][0-9]*\)\$/\1/p" | head -n1)
    { [[ -n $v ]] && command -v "$3-$v"; } || command -v "$3" ||
        die "no $3: group $1 of scripts/packages.txt needs $2-N (Debian 12: $2-22)"
}

# Sets CLANG and WASM_LD: clang and wasm-ld of one LLVM, group c-plugins (installed when missing).
c_toolchain() {
    [[ -z ${CLANG:-} ]] || return 0
    ensure_packages c-plugins
    CLANG=$(versioned_tool c-plugins clang clang)
    WASM_LD=$(versioned_tool c-plugins lld wasm-ld)
}

BUILT=()      # every output, for the size list
MODULES=()    # core modules, for check_abi
COMPONENTS=() # components, for componentize check
shopt -s nullglob

# --- Rust plugins ---------------------------------------------------------------------------
v1_crates=()
component_crates=()
for manifest in "$PLUGINS"/*/Cargo.toml; do
    case $(crate_abi "$manifest") in
        1) v1_crates+=("$manifest") ;;
        2) component_crates+=("$manifest") ;;
    esac
done
# One cargo run per kind, naming its crates: their targets and the SDK's features differ.
if [[ ${#v1_crates[@]} -gt 0 || ${#component_crates[@]} -gt 0 ]]; then
    ensure_packages rust-host # build scripts and proc macros link natively, with cc
    unset CARGO_BUILD_TARGET
fi
if [[ ${#component_crates[@]} -gt 0 ]]; then
    componentize_tool # before CARGO_TARGET_DIR is dropped: it may point at the host's target dir
fi
unset CARGO_TARGET_DIR

if [[ ${#v1_crates[@]} -gt 0 ]]; then
    rust_toolchain "$TARGET"
    features=()
    # On a WASI target the SDK would make a component; these crates are ABI v1.
    [[ $RUST_TARGET != wasm32-wasi* ]] || features=(--features worker-plugin-sdk/abi-v1)
    mapfile -t packages < <(packages_args "${v1_crates[@]}")
    (cd "$PLUGINS" && "${RUST_BUILD[@]}" --release "${packages[@]}" "${features[@]}" \
        --target "$RUST_TARGET" --target-dir "$TARGET_DIR")
    for manifest in "${v1_crates[@]}"; do
        lib=$(crate_lib "$manifest")
        publish_module "$TARGET_DIR/$RUST_TARGET/release/$lib.wasm" "$PLUGINS/$lib.wasm"
        MODULES+=("$PLUGINS/$lib.wasm")
    done
fi

if [[ ${#component_crates[@]} -gt 0 ]]; then
    rust_toolchain "$COMPONENT_TARGET" wasm32-wasip1
    mapfile -t packages < <(packages_args "${component_crates[@]}")
    (cd "$PLUGINS" && "${RUST_BUILD[@]}" --release "${packages[@]}" \
        --target "$RUST_TARGET" --target-dir "$TARGET_DIR")
    for manifest in "${component_crates[@]}"; do
        lib=$(crate_lib "$manifest")
        built="$TARGET_DIR/$RUST_TARGET/release/$lib.wasm"
        if [[ $RUST_TARGET != "$COMPONENT_TARGET" ]]; then
            # A wasip1 core module: the adapter makes it a component.
            mkdir -p "$TARGET_DIR/components"
            "$COMPONENTIZE" adapt "$built" "$TARGET_DIR/components/$lib.wasm"
            built="$TARGET_DIR/components/$lib.wasm"
        fi
        publish_module "$built" "$PLUGINS/$lib.wasm"
        COMPONENTS+=("$PLUGINS/$lib.wasm")
    done
fi

# --- C plugins ------------------------------------------------------------------------------
CLANG=""
for dir in "$PLUGINS"/*/; do
    dir=${dir%/}
    [[ -f $dir/Cargo.toml ]] && continue
    sources=("$dir"/*.c)
    [[ ${#sources[@]} -gt 0 ]] || continue
    c_toolchain
    name=$(basename "$dir")
    out="$PLUGINS/${name//-/_}.wasm"
    mkdir -p "$TARGET_DIR/c"
    built="$TARGET_DIR/c/${name//-/_}.wasm"
    say "c: $name"
    # No libc: exports come from export_name attributes; memory is exported by default.
    # -ffreestanding: no calls to libc the optimizer invents (a strlen loop becomes strlen()).
    "$CLANG" --target=wasm32 -nostdlib -ffreestanding -O2 -Wall -Wextra -fuse-ld="$WASM_LD" \
        -Wl,--no-entry -Wl,--strip-all -o "$built" "${sources[@]}"
    publish_module "$built" "$out"
    MODULES+=("$out")
done

# --- JavaScript plugins (folders with app.js and package.json) --------------------------------
# Components, built by scripts/build-js.sh, which prints their sizes; not in BUILT: check_abi
# reads ABI v1 modules.
if compgen -G "$PLUGINS/*/app.js" >/dev/null; then
    PLUGINS_DIR="$PLUGINS" PLUGINS_TARGET_DIR="$TARGET_DIR" "$ROOT/scripts/build-js.sh"
fi

# --- Python plugins -------------------------------------------------------------------------
# Folders with an app.py: components made by componentize-py, in scripts/build-python.sh (its own
# venv and skip-when-unchanged check). Not in BUILT: check_abi is for ABI v1 modules.
python_apps=("$PLUGINS"/*/app.py)
if [[ ${#python_apps[@]} -gt 0 ]]; then
    PLUGINS_DIR="$PLUGINS" PLUGINS_TARGET_DIR="$TARGET_DIR" "$ROOT/scripts/build-python.sh"
fi

[[ ${#BUILT[@]} -gt 0 ]] || die "no plugins found in $PLUGINS"
[[ ${#MODULES[@]} -eq 0 ]] || check_abi "${MODULES[@]}"
if [[ ${#COMPONENTS[@]} -gt 0 ]]; then
    componentize_tool
    "$COMPONENTIZE" check "${COMPONENTS[@]}"
fi
END_NS=$(date +%s%N)
printf 'built %d plugins in %s s\n' "${#BUILT[@]}" "$(awk "BEGIN{printf \"%.1f\", ($END_NS-$START_NS)/1e9}")"
