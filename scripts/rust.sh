#!/usr/bin/env bash
# Makes sure `cargo` runs: the rustup toolchain when present, else Debian's rustc-web/cargo-web
# (Rust 1.96 on Debian 12), installed with apt-get. Sourced by the other scripts.

ensure_cargo() {
  if command -v cargo >/dev/null 2>&1; then
    return 0
  fi
  if [ ! -x /usr/bin/cargo ] || [ ! -x /usr/bin/rustc ]; then
    echo "== no cargo on PATH: installing Debian's rustc-web and cargo-web (apt-get)" >&2
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq rustc-web cargo-web >/dev/null
  fi
  export PATH="/usr/bin:$PATH" RUSTC=/usr/bin/rustc
}
