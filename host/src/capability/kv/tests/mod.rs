//! Tests of the key-value capability on both backends: redb files in temporary directories and
//! the Redis server of this machine (a server that does not answer fails the test with the
//! command that starts it). Every Redis test works in a store of its own name and removes its
//! keys. The Redis tests are built with the `server-tests` feature, which scripts/test.sh always
//! turns on, so `cargo test --lib` alone needs no server.

mod embedded;
#[cfg(feature = "server-tests")]
mod redis;
mod scenarios;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Instance, Store};
use crate::capability::{Capability as _, Recorder, Scope};
use crate::config::{DEFAULT_KV_MAX_VALUE, KvBackend, KvStoreConfig};
use crate::metrics::Metrics;

/// A store under test and the metrics it records into.
pub(super) struct Ctx {
    pub store: Arc<Store>,
    pub metrics: Arc<Metrics>,
    pub name: String,
    /// Removes a Redis store's keys when the test ends, passed or not.
    _keys: Option<Box<dyn Send + Sync>>,
}

impl Ctx {
    /// An instance that has begun a message with `timeout` to go (no store: not granted).
    pub(super) fn message(&self, timeout: Duration) -> Instance {
        message(Some(self.store.clone()), timeout)
    }
}

pub(super) fn message(store: Option<Arc<Store>>, timeout: Duration) -> Instance {
    let scope = Scope {
        plugin: "test.wasm".into(),
        queue: "test".into(),
        deadline: Instant::now() + timeout,
        capture: None,
        message_id: None,
    };
    let mut instance = Instance::default();
    instance.begin(store, &scope);
    instance
}

/// A deadline far enough for any call of these tests.
pub(super) fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

pub(super) async fn open(name: &str, backend: KvBackend, max_value_size: u64) -> Ctx {
    let metrics = Arc::new(Metrics::new());
    // Ready but for the capabilities, so that `readiness()` shows what the store reported.
    metrics.set_connected(true);
    metrics.set_consumers(0, 0);
    let config = KvStoreConfig {
        name: name.to_string(),
        backend,
        max_value_size,
    };
    let store = Store::open(&config, Recorder::new(&metrics, "kv", name))
        .await
        .expect("open the store");
    Ctx {
        store: Arc::new(store),
        metrics,
        name: name.to_string(),
        _keys: None,
    }
}

/// An embedded store in `dir`, as the config lays it out.
pub(super) async fn embedded(dir: &Path, name: &str) -> Ctx {
    let path = dir.join("kv").join(format!("{name}.redb"));
    open(name, KvBackend::Embedded { path }, DEFAULT_KV_MAX_VALUE).await
}
