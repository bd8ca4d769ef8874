#!/usr/bin/env bash
# Installs the Debian packages of named groups from scripts/packages.txt, the one list of what the
# scripts install. Sourced by the other scripts; also runnable on its own:
#   scripts/packages.sh GROUP...        # install what is missing of those groups
#   scripts/packages.sh --list [GROUP]  # print the packages (all groups without GROUP)

PACKAGES_LIST="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/packages.txt"

# Prints the packages of the groups (every group without one), one a line, each once.
packages_of() {
  awk -v want="$*" '
    BEGIN { n = split(want, w, " "); for (i = 1; i <= n; i++) asked[w[i]] = 1 }
    /^[[:space:]]*(#|$)/ { next }
    n == 0 || ($1 in asked) { found[$1] = 1; for (i = 2; i <= NF; i++) if (!seen[$i]++) print $i }
    END { for (g in asked) if (!(g in found)) { print "unknown package group: " g > "/dev/stderr"; exit 1 } }
  ' "$PACKAGES_LIST"
}

package_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

# Installs the missing packages of the groups with apt-get (quietly; its log on failure).
ensure_packages() {
  local pkgs missing=() pkg
  pkgs=$(packages_of "$@") || return 1
  if ! command -v dpkg-query >/dev/null 2>&1; then
    return 0 # not Debian: the tools are yours to provide
  fi
  for pkg in $pkgs; do
    package_installed "$pkg" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "== installing ${missing[*]} (apt-get, group $*)" >&2
  local log
  log=$(mktemp)
  if ! _apt_install "${missing[@]}" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "error: could not install ${missing[*]} (group $* of scripts/packages.txt)" >&2
    return 1
  fi
  rm -f "$log"
}

# apt-get install; `apt-get update` first when a package has no candidate, and once more on failure
# (stale lists name files the mirror no longer has).
_apt_install() {
  local apt=(env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o DPkg::Lock::Timeout=300
    --no-install-recommends) pkg
  [ "$(id -u)" = 0 ] || apt=(sudo "${apt[@]}")
  for pkg in "$@"; do
    if ! apt-cache policy "$pkg" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
      "${apt[@]}" update && break
    fi
  done
  "${apt[@]}" install "$@" || { "${apt[@]}" update && "${apt[@]}" install "$@"; }
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  if [ "${1:-}" = --list ]; then
    shift
    packages_of "$@"
  else
    [ $# -gt 0 ] || { echo "usage: scripts/packages.sh GROUP...  |  --list [GROUP...]" >&2; exit 2; }
    ensure_packages "$@"
  fi
fi
