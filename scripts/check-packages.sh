#!/usr/bin/env bash
# Runs a command with every program it executes recorded (strace, execve only), then fails when one
# of them comes from a Debian package that the scripts do not install: a package outside
# scripts/packages.txt and outside what those packages depend on (Depends, Pre-Depends) and what
# every Debian system has (Essential or Priority: required). Such a tool is there only because
# someone installed it by hand, so a fresh machine would not have it.
#
#   scripts/check-packages.sh COMMAND [ARG...]   # exit status: COMMAND's if it failed, else the check's
#   scripts/check-packages.sh --check TRACE...   # check strace output written before
#   CHECK_PACKAGES_TRACE=FILE                    # keep the trace of COMMAND in FILE
#
# A command reached through /etc/alternatives (awk, cc) counts as listed when any alternative for
# its name is. Programs from no package (rustup's, the project's own) are counted, not checked.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/packages.sh"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# Prints `path<TAB>script` for each program a trace shows executed: the path as executed and the
# nearest scripts/*.sh (or .ci/run) among the process and its ancestors, "-" if none. What apt and
# dpkg run (maintainer scripts, hooks) is theirs, not the scripts', and is left out; so is what
# apt-key runs (gpgconf, gpg-connect-agent), since apt's signature checks call it, and inside a
# container (systemd-nspawn) the chain back to apt-get is in another pid namespace.
executed() {
  awk '
    # A process is its pid and how many processes with that pid exited before it ("+++ exited"
    # lines): pids wrap around (pid_max may be 32768) in a long run.
    function key(pid) { return pid ":" (gen[pid] + 0) }
    function quoted(s, n,   i) {   # the n-th "..." string of s
      for (i = 1; i <= n; i++) {
        if (!match(s, /"[^"]*"/)) return ""
        if (i == n) return substr(s, RSTART + 1, RLENGTH - 2)
        s = substr(s, RSTART + RLENGTH)
      }
    }
    function exec_ok(pid, path, arg1,   s, k) {
      pid = key(pid)
      n++; epid[n] = pid; epath[n] = path
      s = ""
      if (path ~ /(\.sh|\/\.ci\/run)$/) s = path
      else if (path ~ /\/(ba|da)?sh$/ && arg1 ~ /(\.sh|\.ci\/run)$/) s = arg1
      if (s != "") { k = ++ns[pid]; sname[pid, k] = s; sseq[pid, k] = n }
      if (path ~ /\/(apt-get|apt|dpkg|apt-key)$/ && !(pid in pm)) pm[pid] = n
    }
    / (execve|execveat)\(/ {
      path = quoted($0, 1); arg1 = quoted($0, 3)
      if ($0 ~ /<unfinished \.\.\.>$/) { pend[$1] = path; pend1[$1] = arg1; next }
      if ($0 ~ /\) += 0$/) exec_ok($1, path, arg1)
      next
    }
    /<\.\.\. execve(at)? resumed>/ {
      if ($0 ~ /\) += 0$/ && ($1 in pend)) exec_ok($1, pend[$1], pend1[$1])
      delete pend[$1]; next
    }
    / (<\.\.\. )?(clone3?|v?fork)[( ]/ && $0 ~ /= [0-9]+$/ { parent[key($NF)] = key($1) }
    $2 == "+++" && ($3 == "exited" || $3 == "killed") { gen[$1]++ }
    END {
      for (i = 1; i <= n; i++) {
        p = epid[i]; found = ""; by_pm = 0
        for (depth = 0; p != "" && depth < 500; depth++) {
          if ((p in pm) && pm[p] < i) { by_pm = 1; break }
          for (k = ns[p]; k >= 1 && found == ""; k--) if (sseq[p, k] < i) found = sname[p, k]
          p = (p in parent) ? parent[p] : ""
        }
        if (!by_pm) print epath[i] "\t" (found == "" ? "-" : found)
      }
    }
  ' "$@" | awk -F'\t' '!seen[$1]++'
}

# Prints the /etc/alternatives name a path goes through, if any.
alternative_of() {
  local p=$1 t i
  for ((i = 0; i < 40; i++)); do
    case $p in /etc/alternatives/*) echo "${p#/etc/alternatives/}"; return ;; esac
    [ -L "$p" ] || return 0
    t=$(readlink "$p")
    case $t in /*) p=$t ;; *) p="$(dirname "$p")/$t" ;; esac
  done
}

# Reads paths; prints `path<TAB>package` for each path a package lists (as /usr/x or, merged, /x).
owners() {
  local pat="$TMP/owner-patterns"
  sed -e 'p' -e 's,^/usr/\(bin\|sbin\|lib\|lib64\)/,/\1/,' | sort -u >"$pat"
  [ -s "$pat" ] || return 0
  find /var/lib/dpkg/info -name '*.list' -print0 |
    xargs -0 grep -F -x -f "$pat" -H 2>/dev/null |
    sed -e 's,^/var/lib/dpkg/info/\([^:/]*\)\(:[^:/]*\)\?\.list:,\1\t,' |
    awk -F'\t' '{ p = $2; sub(/^\/(bin|sbin|lib|lib64)\//, "/usr/&", p); sub(/^\/usr\/\//, "/usr/", p); print p "\t" $1 }'
}

# Prints the installed packages a fresh machine running the scripts has: the list's, Debian's
# Essential and required ones, and everything they depend on.
allowed_packages() {
  {
    packages_of | sed 's/^/root /'
    dpkg-query -W -f='${db:Status-Abbrev}\t${Package}\t${Essential}\t${Priority}\t${Provides}\t${Pre-Depends}, ${Depends}\n'
  } | awk -F'\t' '
    function bare(d) { gsub(/\([^)]*\)|:[a-z0-9]+|[ \t]/, "", d); return d }
    /^root / { split($0, rr, " "); root[rr[2]] = 1; next }
    $1 !~ /^ii/ { next }
    {
      pkg = $2; installed[pkg] = 1; deps[pkg] = $6
      if ($3 == "yes" || $4 == "required") root[pkg] = 1
      np = split($5, pv, ",")
      for (i = 1; i <= np; i++) if ((v = bare(pv[i])) != "") providers[v] = providers[v] " " pkg
    }
    function add(name,   i, np, pv) {
      if (name in installed && !(name in ok)) { ok[name] = 1; queue[++tail] = name }
      np = split(providers[name], pv, " ")
      for (i = 1; i <= np; i++) if (!(pv[i] in ok)) { ok[pv[i]] = 1; queue[++tail] = pv[i] }
    }
    END {
      for (r in root) add(r)
      for (head = 1; head <= tail; head++) {
        nd = split(deps[queue[head]], d, /[,|]/)
        for (i = 1; i <= nd; i++) if ((x = bare(d[i])) != "") add(x)
      }
      for (p in ok) print p
    }
  ' | sort -u
}

# Reads `path<TAB>script`; prints `real path<TAB>path<TAB>script<TAB>alternative name` for the
# file each path is, and for a script's interpreter (#!).
programs() {
  local path script real line
  while IFS=$'\t' read -r path script; do
    [[ $path == /* && -e $path ]] || continue
    script=${script#"$ROOT"/}
    real=$(readlink -f "$path")
    printf '%s\t%s\t%s\t%s\n' "$real" "$path" "$script" "$(alternative_of "$path")"
    line=$(head -c 200 "$real" 2>/dev/null | head -n1 | tr -d '\0') || true
    if [[ $line == '#!'/* ]]; then
      line=${line#\#!}
      line=${line%% *}
      [[ ! -e $line ]] || printf '%s\t%s\t%s\t\n' "$(readlink -f "$line")" "$line" "$script"
    fi
  done | sort -u -t$'\t' -k1,1 -k4,4
}

# Reads alternative names; prints `name<TAB>real path` for each candidate of each.
alternatives() {
  local alt cand
  while read -r alt; do
    [ -n "$alt" ] || continue
    for cand in $(update-alternatives --list "$alt" 2>/dev/null); do
      printf '%s\t%s\n' "$alt" "$(readlink -f "$cand")"
    done
  done
}

check() {
  executed "$@" | programs >"$TMP/programs"
  cut -f4 "$TMP/programs" | sort -u | alternatives >"$TMP/alternatives"
  cut -f1 "$TMP/programs" "$TMP/alternatives" | owners >"$TMP/owners"
  allowed_packages >"$TMP/allowed"
  verdict "$TMP/programs"
}

# Reads programs (as printed by `programs`); fails naming each package outside the allowed ones.
verdict() {
  awk -F'\t' -v alts="$TMP/alternatives" -v owners="$TMP/owners" -v allowed="$TMP/allowed" '
    BEGIN {
      while ((getline l < allowed) > 0) ok[l] = 1
      while ((getline l < owners) > 0) { split(l, o, "\t"); owner[o[1]] = owner[o[1]] (owner[o[1]] == "" ? "" : " ") o[2] }
      while ((getline l < alts) > 0) { split(l, a, "\t"); cand[a[1]] = cand[a[1]] " " a[2] }
    }
    function listed(pkgs,   i, n, p) { n = split(pkgs, p, " "); for (i = 1; i <= n; i++) if (p[i] in ok) return 1; return 0 }
    function alt_listed(name,   i, n, c) {
      n = split(cand[name], c, " ")
      for (i = 1; i <= n; i++) if (listed(owner[c[i]])) return 1
      return 0
    }
    {
      real = $1; path = $2; script = $3; alt = $4
      if (!(real in owner)) { other++; next }
      used[owner[real]] = 1
      if (listed(owner[real]) || (alt != "" && alt_listed(alt))) { good++; next }
      pkg = owner[real]
      if (!(pkg in bad)) order[++nbad] = pkg
      bad[pkg] = bad[pkg] (bad[pkg] == "" ? "" : ", ") path (path == real ? "" : " -> " real) (script == "-" ? "" : " (run under " script ")")
    }
    END {
      for (i = 1; i <= nbad; i++)
        printf "check-packages: %s is not installed by the scripts (not in scripts/packages.txt, nor a dependency of a package there), but this run executed %s\n", order[i], bad[order[i]]
      if (nbad) {
        print "check-packages: a fresh machine lacks those: add each package to the group of scripts/packages.txt that the script running it installs (or stop using the tool)"
        exit 1
      }
      n = 0; names = ""
      for (p in used) { n++; u[n] = p }
      for (i = 2; i <= n; i++) for (j = i; j > 1 && u[j - 1] > u[j]; j--) { t = u[j]; u[j] = u[j - 1]; u[j - 1] = t }
      for (i = 1; i <= n; i++) names = names " " u[i]
      printf "check-packages: %d programs from %d Debian packages, each installed by the scripts or by Debian itself:%s; %d programs from no package (rustup, the project, ...)\n", good, n, names, other
    }
  ' "$1"
}

# Sends SIGINT (strace detaches and exits) to a tracer still following a process the command left
# running, such as a broker it started.
stop_tracer() {
  local pid
  for pid in $(pgrep -x strace || true); do
    if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "-o $1 "; then
      kill -INT "$pid" 2>/dev/null || true
    fi
  done
}

if [ "${1:-}" = --check ]; then
  shift
  [ $# -gt 0 ] || { echo "usage: scripts/check-packages.sh --check TRACE..." >&2; exit 2; }
  check "$@"
  exit
fi
[ $# -gt 0 ] || { echo "usage: scripts/check-packages.sh COMMAND [ARG...]  |  --check TRACE..." >&2; exit 2; }
ensure_packages ci
trace="${CHECK_PACKAGES_TRACE:-$TMP/trace}"
# -D: the command runs as this script's child, so a daemon it starts does not keep us waiting.
# --seccomp-bpf: only the traced calls stop the process, so the command runs at full speed.
status=0
# -q, not -qq: the "+++ exited" lines tell a process from a later one given the same pid.
strace -D -f --seccomp-bpf -q -e signal=none -s 200 \
  -e trace=execve,execveat,clone,clone3,fork,vfork -o "$trace" -- "$@" || status=$?
stop_tracer "$trace"
check "$trace" || { [ "$status" -ne 0 ] || status=1; }
exit "$status"
