#!/usr/bin/env bash
# Makes sure `cargo` runs: the rustup toolchain when present, else Debian's rustc-web/cargo-web
# (Rust 1.96 on Debian 12), installed with apt-get; either way with the C compiler that links
# host code. Sourced by the other scripts.
source "$(dirname "${BASH_SOURCE[0]}")/packages.sh"

ensure_cargo() {
  ensure_packages rust-host
  if command -v cargo >/dev/null 2>&1; then
    return 0
  fi
  if [ ! -x /usr/bin/cargo ] || [ ! -x /usr/bin/rustc ]; then
    echo "== no cargo on PATH: Debian's Rust instead" >&2
    ensure_packages rust-debian
  fi
  export PATH="/usr/bin:$PATH" RUSTC=/usr/bin/rustc
}
