#!/usr/bin/env bash
# Builds every plugin in plugins/ into plugins/<name>.wasm, from any working directory.
#
# Rust plugins (folders with a Cargo.toml, members of the separate plugins/ workspace) build for
# wasm32-unknown-unknown: with rustup's target when installed, otherwise with Debian's rustc-web
# and -Zbuild-std (std compiled from rust-web-src). C plugins (folders with *.c and no Cargo.toml)
# build with clang --target=wasm32 and lld's wasm-ld, without any libc.
#
# Idempotent: an output is replaced (atomically) only when its bytes changed, so the host's plugin
# watcher sees no spurious reloads. Prints each module's size and the total time.
#
#   scripts/build-plugins.sh            # build everything
#   WASM_TARGET=wasm32-wasip1 scripts/build-plugins.sh   # the WASI target instead (see README)
#   PLUGINS_DIR=... PLUGINS_TARGET_DIR=...               # another plugins workspace / target dir
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PLUGINS="${PLUGINS_DIR:-$ROOT/plugins}"
TARGET_DIR="${PLUGINS_TARGET_DIR:-$PLUGINS/target}"
TARGET="${WASM_TARGET:-wasm32-unknown-unknown}"
START_NS=$(date +%s%N)

say() { printf '%s\n' "$*" >&2; }
die() { say "build-plugins: $*"; exit 1; }

# Installs Debian packages that are missing; `apt-get update` only if one has no candidate.
ensure_packages() {
    local missing=() pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get to install them"
    local sudo=()
    [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    say "installing ${missing[*]}"
    for pkg in "${missing[@]}"; do
        if ! apt-cache policy "$pkg" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
            "${sudo[@]}" apt-get update -q
            break
        fi
    done
    "${sudo[@]}" apt-get install -y -q "${missing[@]}"
}

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

BUILT=()
shopt -s nullglob

# --- Rust plugins ---------------------------------------------------------------------------
rust_crates=()
for manifest in "$PLUGINS"/*/Cargo.toml; do rust_crates+=("$manifest"); done
if [[ ${#rust_crates[@]} -gt 0 ]]; then
    build=()
    if command -v rustup >/dev/null && rustup target list --installed 2>/dev/null | grep -qx "$TARGET"; then
        say "rust: rustup's $TARGET target"
        build=(env -u RUSTC -u RUSTC_BOOTSTRAP cargo build)
    else
        say "rust: no rustup $TARGET target; Debian rustc-web with -Zbuild-std"
        ensure_packages rustc-web cargo-web rust-web-src
        [[ $TARGET == wasm32-wasip1 ]] && ensure_packages wasi-libc
        [[ -x /usr/bin/rustc && -x /usr/bin/cargo ]] || die "/usr/bin/rustc or /usr/bin/cargo missing after install"
        build=(env RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 /usr/bin/cargo build
            -Zbuild-std=std,panic_abort)
        if [[ $TARGET == wasm32-wasip1 ]]; then
            export RUSTFLAGS="-C link-self-contained=no -L native=/usr/lib/wasm32-wasi"
        else
            unset RUSTFLAGS
        fi
    fi
    unset CARGO_BUILD_TARGET CARGO_TARGET_DIR
    (cd "$PLUGINS" && "${build[@]}" --release --workspace --target "$TARGET" --target-dir "$TARGET_DIR")
    for manifest in "${rust_crates[@]}"; do
        crate=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$manifest" | head -n1)
        lib=${crate//-/_}
        publish_module "$TARGET_DIR/$TARGET/release/$lib.wasm" "$PLUGINS/$lib.wasm"
    done
fi

# --- C plugins ------------------------------------------------------------------------------
for dir in "$PLUGINS"/*/; do
    dir=${dir%/}
    [[ -f $dir/Cargo.toml ]] && continue
    sources=("$dir"/*.c)
    [[ ${#sources[@]} -gt 0 ]] || continue
    command -v clang >/dev/null || ensure_packages clang
    wasm_ld=$(command -v wasm-ld || command -v wasm-ld-22 || ls /usr/lib/llvm-*/bin/wasm-ld 2>/dev/null | tail -n1 || true)
    if [[ -z $wasm_ld ]]; then
        ensure_packages lld-22
        wasm_ld=/usr/bin/wasm-ld-22
    fi
    name=$(basename "$dir")
    out="$PLUGINS/${name//-/_}.wasm"
    mkdir -p "$TARGET_DIR/c"
    built="$TARGET_DIR/c/${name//-/_}.wasm"
    say "c: $name"
    # No libc: exports come from export_name attributes; memory is exported by default.
    clang --target=wasm32 -nostdlib -O2 -Wall -Wextra -fuse-ld="$wasm_ld" \
        -Wl,--no-entry -Wl,--strip-all -o "$built" "${sources[@]}"
    publish_module "$built" "$out"
done

[[ ${#BUILT[@]} -gt 0 ]] || die "no plugins found in $PLUGINS"
check_abi "${BUILT[@]}"
END_NS=$(date +%s%N)
printf 'built %d plugins in %s s\n' "${#BUILT[@]}" "$(awk "BEGIN{printf \"%.1f\", ($END_NS-$START_NS)/1e9}")"
