#!/usr/bin/env bash
# Builds the Debian package of worker-host and prints its path last:
# target/debian/worker-host_<version>-1_amd64.deb. What it installs: docs/operations.md
# ("Installing the package"); the manifest: [package.metadata.deb] in host/Cargo.toml.
#
#   scripts/package.sh          # release build (about 12 min on 2 cores the first time), then the .deb
#   scripts/package.sh --fast   # the same with quicker, larger compression (the package tests)
#
# cargo-deb, the tool that makes it, is built once (pinned, about 2 min) into
# ~/.cache/worker-host/cargo-deb; the release build goes to cargo's usual target dir.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source scripts/rust.sh

CARGO_DEB_VERSION=3.8.0
CARGO_DEB_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/worker-host/cargo-deb"
CARGO_DEB="$CARGO_DEB_ROOT/bin/cargo-deb"

ensure_cargo_deb() {
  if [ -x "$CARGO_DEB" ] && "$CARGO_DEB" --version 2>/dev/null | grep -qF " $CARGO_DEB_VERSION"; then
    return 0
  fi
  echo "== building cargo-deb $CARGO_DEB_VERSION into $CARGO_DEB_ROOT (once)" >&2
  # Its own target dir (a temporary one), not the project's. LZMA_API_STATIC: liblzma built from
  # the crate's bundled source, the same on every machine, instead of probed with pkg-config.
  env -u CARGO_TARGET_DIR LZMA_API_STATIC=1 cargo install --quiet --locked --force \
    --version "=$CARGO_DEB_VERSION" --root "$CARGO_DEB_ROOT" cargo-deb
}

# The SDKs and the WIT contract, as committed (git ls-files), into packaging/.staged/share: what
# the package installs under /usr/share/worker-host, without a working copy's node_modules or
# caches.
stage_share() {
  local share="$ROOT/packaging/.staged/share" file
  rm -rf "$share"
  mkdir -p "$share"
  git -C "$ROOT" ls-files -z plugin-sdk abi wit | while IFS= read -r -d '' file; do
    [ -f "$file" ] && install -D -m 0644 "$file" "$share/$file"
  done
  [ -f "$share/plugin-sdk/Cargo.toml" ] || { echo "package.sh: staging the SDK failed" >&2; return 1; }
}

fast=()
case "${1:-}" in
  --fast) fast=(--fast) ;;
  "") ;;
  *) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

ensure_cargo
ensure_packages package
ensure_cargo_deb
stage_share
mkdir -p "$ROOT/target/debian"
PATH="$CARGO_DEB_ROOT/bin:$PATH" cargo deb -p worker-host --locked "${fast[@]}" \
  --output "$ROOT/target/debian/"
