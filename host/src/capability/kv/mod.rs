//! Key-value state: `[kv.NAME]` stores (an embedded redb file or a Redis server) and the
//! guest's `kv` imports.
//!
//! The rules a guest sees, the same on both backends:
//! - Keys are 1 to [`MAX_KEY_LEN`] bytes (`invalid-key` otherwise); values at most the store's
//!   `max_value_size` (`too-large` otherwise). Each store is its own namespace.
//! - Every operation is atomic and takes effect at once (not part of the message's
//!   transaction); every call ends by the handler's deadline (`unavailable("timed out ...")`).
//! - A TTL is in milliseconds: 0 is taken as 1 (Redis refuses `PX 0`) and anything over
//!   [`MAX_TTL_MS`] as that. `set` and a `compare-and-swap` that writes replace the TTL (none
//!   given: the key no longer expires); `increment` keeps it, as Redis `INCRBY` does.
//! - `increment` stores the count as decimal text, so `get` reads it back as bytes like Redis.
//!   An existing value that is not a decimal `s64` answers `invalid-key`, and a result outside
//!   `s64` answers `too-large` (see [`not_a_counter`] and [`overflow`] for why).
//! - A store that cannot be reached answers `unavailable(why)` and `/readyz` says so until a
//!   call or a ping gets through again.

mod dry;
mod embedded;
mod redis;

#[cfg(test)]
mod tests;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tokio::time::timeout_at;
use tracing::Instrument;
use wasmtime::component::{HasSelf, Linker};

use self::dry::Dry;
use self::embedded::Embedded;
use self::redis::Redis;
use super::{Capability, Host, Recorder, Scope};
use crate::config::{KvBackend, KvStoreConfig};
use crate::telemetry;
use crate::wit::worker::plugin::kv;
use crate::wit::worker::plugin::kv::KvError;

/// The longest key, in bytes: Redis would take more, but a key is a name, not data.
pub(crate) const MAX_KEY_LEN: usize = 1024;
/// The longest TTL, 100 years: far enough to mean "for good", near enough that `now + ttl` fits
/// Redis's millisecond clock and our own.
pub(crate) const MAX_TTL_MS: u64 = 100 * 365 * 24 * 3600 * 1000;

/// One opened store, shared by every subscription granted it.
pub(crate) struct Store {
    backend: Backend,
    max_value_size: u64,
    recorder: Recorder,
    /// What `/readyz` was last told, so that only changes are reported.
    down: AtomicBool,
}

enum Backend {
    Embedded(Embedded),
    Redis(Redis),
}

impl Store {
    /// Opens the store. An embedded file is created (with its directory) and opened now, so a
    /// path that cannot be is a start-up error; Redis connects lazily, so a server that is down
    /// at start only makes calls answer `unavailable` until it is back.
    pub(crate) async fn open(config: &KvStoreConfig, recorder: Recorder) -> anyhow::Result<Store> {
        let backend = match &config.backend {
            KvBackend::Embedded { path } => Backend::Embedded(Embedded::open(path).await?),
            KvBackend::Redis { url } => Backend::Redis(Redis::open(&config.name, url)?),
        };
        Ok(Store {
            backend,
            max_value_size: config.max_value_size,
            recorder,
            down: AtomicBool::new(false),
        })
    }

    /// Whether the store answers, for `/readyz`: an embedded file is open, so it does; Redis
    /// must answer PING within a short time.
    pub(crate) async fn ping(&self) -> Result<(), String> {
        let result = match &self.backend {
            Backend::Embedded(_) => Ok(()),
            Backend::Redis(r) => r.ping().await,
        };
        self.down.store(result.is_err(), Ordering::Relaxed);
        result
    }

    pub(crate) async fn get(
        &self,
        key: &str,
        deadline: Instant,
    ) -> Result<Option<Vec<u8>>, KvError> {
        let work = async {
            match &self.backend {
                Backend::Embedded(e) => e.get(key).await,
                Backend::Redis(r) => r.get(key).await,
            }
        };
        self.run("get", check_key(key), deadline, work).await
    }

    pub(crate) async fn set(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
        deadline: Instant,
    ) -> Result<(), KvError> {
        let check = check_key(key).and_then(|()| self.check_value(&value));
        let ttl_ms = ttl_ms.map(clamp_ttl);
        let work = async {
            match &self.backend {
                Backend::Embedded(e) => e.set(key, value, ttl_ms, deadline).await,
                Backend::Redis(r) => r.set(key, value, ttl_ms).await,
            }
        };
        self.run("set", check, deadline, work).await
    }

    /// Whether the key existed (an expired key did not).
    pub(crate) async fn delete(&self, key: &str, deadline: Instant) -> Result<bool, KvError> {
        let work = async {
            match &self.backend {
                Backend::Embedded(e) => e.delete(key, deadline).await,
                Backend::Redis(r) => r.delete(key).await,
            }
        };
        self.run("delete", check_key(key), deadline, work).await
    }

    /// The new count; an absent key counts as 0.
    pub(crate) async fn increment(
        &self,
        key: &str,
        delta: i64,
        deadline: Instant,
    ) -> Result<i64, KvError> {
        let work = async {
            match &self.backend {
                Backend::Embedded(e) => e.increment(key, delta, deadline).await,
                Backend::Redis(r) => r.increment(key, delta).await,
            }
        };
        self.run("increment", check_key(key), deadline, work).await
    }

    /// Writes `value` only if the current value is `expected` (`None`: only if absent).
    pub(crate) async fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<Vec<u8>>,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
        deadline: Instant,
    ) -> Result<bool, KvError> {
        let check = check_key(key).and_then(|()| self.check_value(&value));
        let ttl_ms = ttl_ms.map(clamp_ttl);
        let work = async {
            match &self.backend {
                Backend::Embedded(e) => {
                    e.compare_and_swap(key, expected, value, ttl_ms, deadline)
                        .await
                }
                Backend::Redis(r) => r.compare_and_swap(key, expected, value, ttl_ms).await,
            }
        };
        self.run("compare-and-swap", check, deadline, work).await
    }

    fn check_value(&self, value: &[u8]) -> Result<(), KvError> {
        match u64::try_from(value.len()) {
            Ok(len) if len <= self.max_value_size => Ok(()),
            _ => Err(KvError::TooLarge),
        }
    }

    /// Runs one call: refused by `check` without touching the store, otherwise `work` bounded
    /// by `deadline`; counted in the metrics either way.
    async fn run<T>(
        &self,
        op: &'static str,
        check: Result<(), KvError>,
        deadline: Instant,
        work: impl Future<Output = Result<T, KvError>>,
    ) -> Result<T, KvError> {
        let span = telemetry::span!(
            "kv",
            otel.name = %format_args!("kv {op}"),
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            db.system.name = self.system(),
            db.namespace = self.recorder.store(),
            db.operation.name = op,
            error.type = tracing::field::Empty,
        );
        let result = self
            .run_in(check, deadline, work)
            .instrument(span.clone())
            .await;
        if result.is_err() {
            telemetry::failed(&span, result_kind(&result));
        }
        result
    }

    /// The backend's name, as OpenTelemetry's `db.system.name`.
    fn system(&self) -> &'static str {
        match self.backend {
            Backend::Embedded(_) => "redb",
            Backend::Redis(_) => "redis",
        }
    }

    async fn run_in<T>(
        &self,
        check: Result<(), KvError>,
        deadline: Instant,
        work: impl Future<Output = Result<T, KvError>>,
    ) -> Result<T, KvError> {
        let started = Instant::now();
        // Past the deadline nothing starts: a call that answered "timed out" changed nothing
        // (unless the store was already writing when the time ran out).
        let result = match check {
            Err(e) => Err(e),
            Ok(()) if Instant::now() >= deadline => Err(self.timed_out()),
            Ok(()) => match timeout_at(deadline.into(), work).await {
                Ok(result) => {
                    self.health(&result);
                    result
                }
                // Not a sign that the store is down (the handler may have had no time left);
                // a store that hangs is found by the ping of `/readyz`.
                Err(_) => Err(self.timed_out()),
            },
        };
        self.recorder.call(started, result_kind(&result));
        result
    }

    fn timed_out(&self) -> KvError {
        KvError::Unavailable(format!(
            "timed out: [kv.{}] did not answer within the handler's time",
            self.recorder.store()
        ))
    }

    /// Tells `/readyz` when the store went away or came back: any answer of the store, even an
    /// error about the value, means it is there.
    fn health<T>(&self, result: &Result<T, KvError>) {
        match result {
            Err(KvError::Unavailable(why)) => {
                if !self.down.swap(true, Ordering::Relaxed) {
                    let store = self.recorder.store();
                    tracing::warn!(store, "[kv] unavailable: {why}");
                    self.recorder.health(Some(why));
                }
            }
            _ => {
                if self.down.swap(false, Ordering::Relaxed) {
                    tracing::info!(store = self.recorder.store(), "[kv] available again");
                    self.recorder.health(None);
                }
            }
        }
    }
}

/// A key is a non-empty name of at most [`MAX_KEY_LEN`] bytes.
fn check_key(key: &str) -> Result<(), KvError> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        Err(KvError::InvalidKey)
    } else {
        Ok(())
    }
}

fn clamp_ttl(ttl_ms: u64) -> u64 {
    ttl_ms.clamp(1, MAX_TTL_MS)
}

/// `increment` on a value that is not a decimal `s64` (Redis: "value is not an integer or out
/// of range"). `invalid-key` because the key names something that is not a counter: the
/// guest's mistake, which no retry mends (`unavailable` would make plugins retry forever), and
/// neither the value's size (`too-large`) nor the grant (`denied`) is at fault.
pub(crate) fn not_a_counter() -> KvError {
    KvError::InvalidKey
}

/// `increment` whose result does not fit an `s64` (Redis: "increment or decrement would
/// overflow"): the value would be too large for a counter, which is what `too-large` says.
pub(crate) fn overflow() -> KvError {
    KvError::TooLarge
}

/// The `result` label of the call metrics.
fn result_kind<T>(result: &Result<T, KvError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(KvError::Denied) => "denied",
        Err(KvError::Unavailable(_)) => "unavailable",
        Err(KvError::TooLarge) => "too-large",
        Err(KvError::InvalidKey) => "invalid-key",
    }
}

/// The `kv` state of one message: the granted store and the handler's deadline, and in a dry
/// run the call's overlay.
#[derive(Default)]
pub(crate) struct Instance {
    granted: Option<(Arc<Store>, Instant)>,
    dry: Option<Dry>,
}

impl Instance {
    /// The store and deadline, or `denied` when the subscription has no `kv` grant.
    fn store(&self) -> Result<(Arc<Store>, Instant), KvError> {
        self.granted.clone().ok_or(KvError::Denied)
    }
}

impl Capability for Instance {
    type Grant = Store;
    type Error = Infallible;

    fn link<T: Host>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
        kv::add_to_linker::<T, HasSelf<Instance>>(linker, |t| &mut t.capabilities().kv)
    }

    fn begin(&mut self, grant: Option<Arc<Store>>, scope: &Scope) {
        self.granted = grant.map(|store| (store, scope.deadline));
        self.dry = scope.capture.clone().map(Dry::new);
    }

    /// Writes took effect when made: nothing to commit or undo.
    async fn finish(&mut self, _ok: bool) -> Result<(), Infallible> {
        self.granted = None;
        self.dry = None;
        Ok(())
    }
}

impl kv::Host for Instance {
    async fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, KvError> {
        let (store, deadline) = self.store()?;
        match &self.dry {
            Some(dry) => dry.get(&store, &key, deadline).await,
            None => store.get(&key, deadline).await,
        }
    }

    async fn set(
        &mut self,
        key: String,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
    ) -> Result<(), KvError> {
        let (store, deadline) = self.store()?;
        match &mut self.dry {
            Some(dry) => dry.set(&store, &key, value, ttl_ms),
            None => store.set(&key, value, ttl_ms, deadline).await,
        }
    }

    async fn delete(&mut self, key: String) -> Result<bool, KvError> {
        let (store, deadline) = self.store()?;
        match &mut self.dry {
            Some(dry) => dry.delete(&store, &key, deadline).await,
            None => store.delete(&key, deadline).await,
        }
    }

    async fn increment(&mut self, key: String, delta: i64) -> Result<i64, KvError> {
        let (store, deadline) = self.store()?;
        match &mut self.dry {
            Some(dry) => dry.increment(&store, &key, delta, deadline).await,
            None => store.increment(&key, delta, deadline).await,
        }
    }

    async fn compare_and_swap(
        &mut self,
        key: String,
        expected: Option<Vec<u8>>,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
    ) -> Result<bool, KvError> {
        let (store, deadline) = self.store()?;
        match &mut self.dry {
            Some(dry) => {
                let swap = (expected, value);
                dry.compare_and_swap(&store, &key, swap, ttl_ms, deadline)
                    .await
            }
            None => {
                store
                    .compare_and_swap(&key, expected, value, ttl_ms, deadline)
                    .await
            }
        }
    }
}
