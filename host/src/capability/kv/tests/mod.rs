//! Tests of the key-value capability on both backends: redb files in temporary directories and
//! the Redis server of this machine (a server that does not answer fails the test with the
//! command that starts it). Every Redis test works in a store of its own name and removes its
//! keys.

mod embedded;
mod redis;
mod scenarios;

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::{Instance, Store};
use crate::capability::{Capability as _, Recorder, Scope};
use crate::config::{DEFAULT_KV_MAX_VALUE, KvBackend, KvStoreConfig, Secret};
use crate::metrics::Metrics;

pub(super) const REDIS_URL: &str = "redis://127.0.0.1:6379/0";

/// A store under test and the metrics it records into.
pub(super) struct Ctx {
    pub store: Arc<Store>,
    pub metrics: Arc<Metrics>,
    pub name: String,
    /// Removes a Redis store's keys when the test ends, passed or not.
    _keys: Option<RedisKeys>,
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
    };
    let mut instance = Instance::default();
    instance.begin(store, &scope);
    instance
}

/// A deadline far enough for any call of these tests.
pub(super) fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

/// A name no other test (or earlier run) uses.
pub(super) fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{prefix}{}x{nanos}x{n}", std::process::id())
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

/// A Redis store of a fresh name; fails the test if Redis does not answer.
pub(super) async fn redis(max_value_size: u64) -> Ctx {
    redis_up();
    let url = Secret::new(REDIS_URL);
    let name = unique("t");
    let mut ctx = open(&name, KvBackend::Redis { url }, max_value_size).await;
    ctx._keys = Some(RedisKeys(name));
    ctx
}

/// Fails (never skips) when the machine's Redis is not there.
pub(super) fn redis_up() {
    let addr = SocketAddr::from(([127, 0, 0, 1], 6379));
    if TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err() {
        panic!(
            "Redis does not answer on 127.0.0.1:6379: start it with `redis-server --daemonize yes`"
        );
    }
}

/// A raw connection to the test Redis, beside the store's.
pub(super) async fn raw_redis() -> ::redis::aio::MultiplexedConnection {
    ::redis::Client::open(REDIS_URL)
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("Redis answers: start it with `redis-server --daemonize yes`")
}

/// The keys of a Redis store under test, removed from the server on drop.
struct RedisKeys(String);

impl Drop for RedisKeys {
    fn drop(&mut self) {
        let removed = ::redis::Client::open(REDIS_URL)
            .and_then(|c| c.get_connection())
            .and_then(|mut conn| {
                let keys: Vec<String> = ::redis::cmd("KEYS")
                    .arg(format!("kv:{}:*", self.0))
                    .query(&mut conn)?;
                if !keys.is_empty() {
                    ::redis::cmd("DEL").arg(keys).exec(&mut conn)?;
                }
                Ok(())
            });
        if let Err(e) = removed {
            eprintln!("could not remove the keys of store {}: {e}", self.0);
        }
    }
}

/// A port on which nothing listens.
pub(super) fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("local addr").port();
    drop(listener);
    port
}
