//! Messages whose handler call outlived the broker's consumer timeout. The broker closed the
//! channel and redelivers them; the redelivery counts as the failed call it replaces (retried
//! or parked without running the plugin again), so such a message ends parked instead of
//! looping.

use std::collections::HashMap;
use std::sync::Mutex;

use tracing::warn;

/// More strikes than this at once means something else is wrong; they are forgotten (the
/// messages then simply run again).
const MAX_STRIKES: usize = 10_000;

#[derive(Default)]
pub(super) struct Strikes(Mutex<HashMap<String, String>>);

impl Strikes {
    /// Remembers that the call for `identity` failed with `cause`.
    pub(super) fn add(&self, identity: String, cause: String) {
        let mut map = self.lock();
        if map.len() >= MAX_STRIKES {
            warn!(
                "{} consumer-timeout strikes pending; forgetting them",
                map.len()
            );
            map.clear();
        }
        map.insert(identity, cause);
    }

    /// The cause recorded for `identity`, forgotten as it is taken.
    pub(super) fn take(&self, identity: &str) -> Option<String> {
        self.lock().remove(identity)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        // The map stays consistent even if a holder panicked.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
