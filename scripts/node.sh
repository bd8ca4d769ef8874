#!/usr/bin/env bash
# Node.js and npm for the JavaScript plugin scripts (build-js.sh, test-js.sh): Debian's nodejs and
# npm (groups js and js-npm of scripts/packages.txt), and the npm installs those scripts make.
# Sourced by them.
source "$(dirname "${BASH_SOURCE[0]}")/packages.sh"

NODE_MIN_MAJOR=18 # Debian 12's nodejs is 18.20: import attributes, node --test, util.parseArgs

# Makes sure `node` and `npm` run. Debian's nodejs has no npm (its own package, group js-npm);
# NodeSource's nodejs brings npm and conflicts with that package, so it is only asked for when
# no npm is on PATH.
ensure_node() {
  ensure_packages js
  command -v npm >/dev/null 2>&1 || ensure_packages js-npm
  local major
  major=$(node -p 'process.versions.node.split(".")[0]')
  if [ "$major" -lt "$NODE_MIN_MAJOR" ]; then
    echo "error: node $(node --version) is too old: JavaScript plugins need Node.js >= $NODE_MIN_MAJOR" >&2
    return 1
  fi
}

# Prints a hash of the given files (a missing one counts as empty).
files_hash() {
  local f
  for f in "$@"; do
    printf '%s\n' "$f"
    cat "$f" 2>/dev/null || true
  done | sha256sum | cut -d' ' -f1
}

# Installs a JavaScript project's packages into DIR/node_modules: `npm ci` from its
# package-lock.json (`npm install` when it has none yet, which writes it), skipped when it has
# no dependencies or package.json and the lock are those of the last install.
npm_deps() {
  local dir=$1 stamp hash
  if [ "$(cd "$dir" && node -p 'const p = require("./package.json");
      Object.keys({ ...p.dependencies, ...p.devDependencies, ...p.optionalDependencies }).length')" = 0 ]; then
    return 0
  fi
  stamp="$dir/node_modules/.worker-deps.sha256"
  hash=$(cd "$dir" && files_hash package.json package-lock.json)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
    return 0
  fi
  local npm=(npm --no-audit --no-fund --loglevel=error)
  if [ -f "$dir/package-lock.json" ]; then
    (cd "$dir" && "${npm[@]}" ci) >&2
  else
    echo "== $dir has no package-lock.json: npm install writes one (commit it)" >&2
    (cd "$dir" && "${npm[@]}" install) >&2
  fi
  hash=$(cd "$dir" && files_hash package.json package-lock.json)
  mkdir -p "$dir/node_modules"
  printf '%s\n' "$hash" >"$stamp"
}

# Installs the build tools (scripts/js/package.json: componentize-js, esbuild) into DIR with
# `npm ci` from the committed lock, unless they are there already.
js_tools() {
  local dir=$1 src
  src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/js"
  mkdir -p "$dir"
  cmp -s "$src/package.json" "$dir/package.json" || cp "$src/package.json" "$dir/package.json"
  cmp -s "$src/package-lock.json" "$dir/package-lock.json" || cp "$src/package-lock.json" "$dir/package-lock.json"
  npm_deps "$dir"
}
