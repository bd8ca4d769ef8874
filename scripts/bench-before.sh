#!/usr/bin/env bash
# Before and after in one run: builds worker-host at REV (a commit, tag or branch; release, in a
# cache dir kept across runs) and runs scripts/bench.sh with it as WORKER_BENCH_BEFORE, so (b),
# (c), (d) and (k) are measured on both binaries, interleaved, and compared in one table.
#   scripts/bench-before.sh 857420e --only bcdk --runs 3
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/rust.sh

rev=${1:?usage: scripts/bench-before.sh REV [bench arguments]}
shift
sha=$(git rev-parse --verify "$rev^{commit}")
cache="${XDG_CACHE_HOME:-$HOME/.cache}/worker-host/bench-before"
src="$cache/src-$sha"
ensure_cargo
if [ ! -f "$src/Cargo.toml" ]; then
  rm -rf "$src.tmp"
  mkdir -p "$src.tmp"
  git archive "$sha" | tar -x -C "$src.tmp"
  mv "$src.tmp" "$src"
fi
echo "== building worker-host at $rev ($sha)"
(cd "$src" && CARGO_TARGET_DIR="$cache/target" cargo build --release --locked -p worker-host)
before="$cache/target/release/worker-host-$sha"
cp "$cache/target/release/worker-host" "$before"
WORKER_BENCH_BEFORE="$before" scripts/bench.sh "$@"
