//! Crash points for the tests of what survives a crash: with `WORKER_HOST_FAILPOINT=NAME` in its
//! environment the process aborts (as a kill would stop it) when it reaches point `NAME`. Unset,
//! as in production, a check is one load of a cached value.

use std::sync::OnceLock;

/// The environment variable that names the point to crash at.
pub const FAILPOINT_ENV: &str = "WORKER_HOST_FAILPOINT";

/// Aborts the process if `name` is the configured crash point.
pub(crate) fn hit(name: &str) {
    static POINT: OnceLock<Option<String>> = OnceLock::new();
    let point = POINT.get_or_init(|| std::env::var(FAILPOINT_ENV).ok().filter(|p| !p.is_empty()));
    if point.as_deref() == Some(name) {
        eprintln!("worker-host: crash point {name} reached ({FAILPOINT_ENV}); aborting");
        std::process::abort();
    }
}
