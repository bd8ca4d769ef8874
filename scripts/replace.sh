# Sourced by the build scripts: replace_if_changed BUILT OUT copies BUILT over OUT only when the
# bytes differ (copy beside OUT, then rename: atomic), so the host's plugin watcher sees no
# spurious reloads.
replace_if_changed() {
    local built=$1 out=$2
    if ! cmp -s "$built" "$out"; then
        cp "$built" "$out.tmp.$$"
        mv -f "$out.tmp.$$" "$out"
    fi
}
