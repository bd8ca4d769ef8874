#!/usr/bin/env bash
# Builds every plugin in plugins/ into plugins/<name>.wasm, from any working directory.
#
# Rust plugins (folders with a Cargo.toml, members of the separate plugins/ workspace) build for
# wasm32-unknown-unknown with rustup's target, which the script adds when missing; when rustup is
# missing or cannot add it (offline), with Debian's rustc-web and -Zbuild-std (std compiled from
# rust-web-src). C plugins (folders with *.c and no Cargo.toml) build with clang --target=wasm32
# and lld's wasm-ld, without any libc. Packages come from scripts/packages.txt (groups
# wasm-debian, wasi-debian, c-plugins), installed when missing.
#
# Idempotent: an output is replaced (atomically) only when its bytes changed, so the host's plugin
# watcher sees no spurious reloads. Prints each module's size and the total time.
#
#   scripts/build-plugins.sh            # build everything
#   WASM_TARGET=wasm32-wasip1 scripts/build-plugins.sh   # the WASI target instead (see README)
#   WORKER_WASM_TOOLCHAIN=debian|rustup                  # force one Rust toolchain (default: auto)
#   PLUGINS_DIR=... PLUGINS_TARGET_DIR=...               # another plugins workspace / target dir
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PLUGINS="${PLUGINS_DIR:-$ROOT/plugins}"
TARGET_DIR="${PLUGINS_TARGET_DIR:-$PLUGINS/target}"
TARGET="${WASM_TARGET:-wasm32-unknown-unknown}"
TOOLCHAIN="${WORKER_WASM_TOOLCHAIN:-auto}"
START_NS=$(date +%s%N)
source "$ROOT/scripts/packages.sh"

say() { printf '%s\n' "$*" >&2; }
die() { say "build-plugins: $*"; exit 1; }

# Replaces $2 with $1 only if the bytes differ; prints the size line.
publish_module() {
    local built=$1 out=$2
    [[ -f $built ]] || die "expected $built after the build"
    if ! cmp -s "$built" "$out"; then
        cp "$built" "$out.tmp.$$"
        mv -f "$out.tmp.$$" "$out"
    fi
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

# True when rustup has the target, adding it if missing (time-bounded: offline, it may hang).
rustup_target() {
    command -v rustup >/dev/null || return 1
    local out
    out=$(cd "$PLUGINS" && rustup target list --installed 2>/dev/null) || true
    grep -qx "$TARGET" <<<"$out" && return 0
    if out=$(cd "$PLUGINS" && timeout 120 rustup --quiet target add "$TARGET" 2>&1); then
        say "rust: added rustup's $TARGET target"
        return 0
    fi
    say "rust: rustup could not add $TARGET: $(printf '%s\n' "$out" | tail -n1)"
    return 1
}

# Sets RUST_BUILD, the cargo command: rustup's target, else Debian's rustc-web with -Zbuild-std.
rust_toolchain() {
    case $TOOLCHAIN in
        auto | rustup)
            if rustup_target; then
                say "rust: rustup's $TARGET target"
                RUST_BUILD=(env -u RUSTC -u RUSTC_BOOTSTRAP cargo build)
                return 0
            fi
            [[ $TOOLCHAIN == auto ]] || die "WORKER_WASM_TOOLCHAIN=rustup, but rustup has no $TARGET target"
            ;;
        debian) ;;
        *) die "WORKER_WASM_TOOLCHAIN is auto, rustup or debian, not '$TOOLCHAIN'" ;;
    esac
    say "rust: Debian's rustc-web with -Zbuild-std"
    ensure_packages wasm-debian
    [[ $TARGET != wasm32-wasip1 ]] || ensure_packages wasi-debian
    [[ -x /usr/bin/rustc && -x /usr/bin/cargo ]] || die "/usr/bin/rustc or /usr/bin/cargo missing after install"
    # rustc's default wasm linker, /usr/bin/rust-lld, comes with rust-web-llvm, a Recommends that
    # pulls all of llvm-22 (90 MB) and still not lld-22; lld's wasm-ld is the same linker.
    WASM_LD=$(versioned_tool wasm-debian lld wasm-ld)
    local linker_var
    linker_var="CARGO_TARGET_$(tr 'a-z-' 'A-Z_' <<<"$TARGET")_LINKER"
    RUST_BUILD=(env RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 "$linker_var=$WASM_LD" /usr/bin/cargo build
        -Zbuild-std=std,panic_abort)
    if [[ $TARGET == wasm32-wasip1 ]]; then
        export RUSTFLAGS="-C link-self-contained=no -L native=/usr/lib/wasm32-wasi"
    else
        unset RUSTFLAGS
    fi
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

BUILT=()
shopt -s nullglob

# --- Rust plugins ---------------------------------------------------------------------------
rust_crates=()
for manifest in "$PLUGINS"/*/Cargo.toml; do rust_crates+=("$manifest"); done
if [[ ${#rust_crates[@]} -gt 0 ]]; then
    ensure_packages rust-host # build scripts and proc macros link natively, with cc
    rust_toolchain
    unset CARGO_BUILD_TARGET CARGO_TARGET_DIR
    (cd "$PLUGINS" && "${RUST_BUILD[@]}" --release --workspace --target "$TARGET" --target-dir "$TARGET_DIR")
    for manifest in "${rust_crates[@]}"; do
        crate=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$manifest" | head -n1)
        lib=${crate//-/_}
        publish_module "$TARGET_DIR/$TARGET/release/$lib.wasm" "$PLUGINS/$lib.wasm"
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
check_abi "${BUILT[@]}"
END_NS=$(date +%s%N)
printf 'built %d plugins in %s s\n' "${#BUILT[@]}" "$(awk "BEGIN{printf \"%.1f\", ($END_NS-$START_NS)/1e9}")"
