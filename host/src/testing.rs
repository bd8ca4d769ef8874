//! What the unit tests of several modules share: names no other test or earlier run uses.

use std::sync::atomic::{AtomicU32, Ordering};

/// `prefix` followed by the process id, a counter and the clock's nanoseconds: unique across
/// the tests of one run and across runs; letters, digits and `_` only, so it is a valid SQL
/// table name and key-value store name.
pub(crate) fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{prefix}_{}_{n}_{nanos}", std::process::id())
}
