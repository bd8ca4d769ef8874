//! The series of a store's `ok` calls, looked up once per store rather than per call.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

use super::{CapabilityCall, CapabilityStore, Metrics};

/// The series of one store's `ok` calls ([`Metrics::capability_ok`]); they share their values
/// with the families they came from.
#[derive(Clone)]
pub(crate) struct CapabilityOk {
    calls: Counter,
    seconds: Histogram,
}

impl CapabilityOk {
    pub(crate) fn observe(&self, elapsed: Duration) {
        self.calls.inc();
        self.seconds.observe(elapsed.as_secs_f64());
    }
}

impl Metrics {
    /// The series a store's `ok` calls count in, looked up once: a call then counts without
    /// building and hashing its labels.
    pub(crate) fn capability_ok(&self, capability: &str, store: &str) -> CapabilityOk {
        let calls = self.capability_calls.get_or_create(&CapabilityCall {
            capability: capability.to_string(),
            store: store.to_string(),
            result: "ok".to_string(),
        });
        let seconds = self.capability_seconds.get_or_create(&CapabilityStore {
            capability: capability.to_string(),
            store: store.to_string(),
        });
        CapabilityOk {
            calls: calls.clone(),
            seconds: seconds.clone(),
        }
    }
}
