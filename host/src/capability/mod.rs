//! Capabilities a subscription may be granted beyond the broker: outbound HTTP, key-value
//! state and SQL (SPEC section 9). Each is its own module of one shape ([`Capability`]): it
//! links its imports, opens what its config section defines, and builds the per-message state
//! the guest's calls run against. The component engine knows them only through this module.

pub mod capture;
pub(crate) mod http;
pub(crate) mod kv;
mod reason;
pub(crate) mod sql;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use anyhow::Context as _;
use wasmtime::component::Linker;
use wasmtime_wasi_http::WasiHttpView;

use self::reason::public_reason;
use crate::config::{Config, KvBackend, Secret, Subscription};
use crate::metrics::{CapabilityOk, Metrics};

/// The shape every capability has.
pub(crate) trait Capability: Default + Send + 'static {
    /// What a grant hands the message: a store, a database pool, an HTTP policy.
    type Grant: Send + Sync + 'static;
    /// Why [`Capability::finish`] could not commit.
    type Error: std::error::Error + Send;

    /// Adds the capability's imports to `linker`; the store data reaches this state through
    /// [`Host::capabilities`].
    fn link<T: Host>(linker: &mut Linker<T>) -> wasmtime::Result<()>;

    /// Starts one message under `grant`; without one every call answers `denied`.
    fn begin(&mut self, grant: Option<Arc<Self::Grant>>, scope: &Scope);

    /// Ends the message: on `ok` its effects are committed (an error means they were not),
    /// otherwise undone. Leaves the state as `Default` until the next `begin`.
    fn finish(&mut self, ok: bool) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Whether [`Capability::finish`] has anything to commit or undo. A capability whose
    /// effects take place when made holds none; dropping its state ends the message as well.
    fn holds_effects(&self) -> bool {
        false
    }
}

/// The store data of a component instance, as the capabilities see it.
pub(crate) trait Host: WasiHttpView + Send + 'static {
    fn capabilities(&mut self) -> &mut Instances;
}

/// Who is calling, and until when: every capability call ends by `deadline`.
#[derive(Debug, Clone)]
pub(crate) struct Scope {
    /// The plugin file, for log lines.
    pub plugin: Arc<str>,
    pub queue: String,
    pub deadline: Instant,
    /// A dry run: effects are recorded here, not performed.
    pub capture: Option<Arc<capture::Capture>>,
    /// The message's id, under which the outbox may have claimed it (`sql::outbox`).
    pub message_id: Option<String>,
}

/// The per-message state of every capability, kept in the component's store data.
#[derive(Default)]
pub(crate) struct Instances {
    pub http: http::Instance,
    pub kv: kv::Instance,
    pub sql: sql::Instance,
}

impl Instances {
    pub(crate) fn begin(&mut self, granted: &Granted, scope: &Scope) {
        self.http.begin(granted.http.clone(), scope);
        self.kv.begin(granted.kv.clone(), scope);
        self.sql.begin(granted.sql.clone(), scope);
    }

    /// Whether any capability has effects to commit or undo.
    fn hold_effects(&self) -> bool {
        self.http.holds_effects() || self.kv.holds_effects() || self.sql.holds_effects()
    }

    /// Commits (on ok) or undoes every capability's effects; the first commit error wins.
    /// `record` goes into the SQL transaction (the outbox).
    pub(crate) async fn finish(
        &mut self,
        ok: bool,
        record: Option<&sql::outbox::Record>,
    ) -> Result<(), String> {
        let sql = self
            .sql
            .finish_recorded(ok, record)
            .await
            .map_err(|e| e.to_string());
        // Their effects take place when made: nothing to commit, no error.
        let Ok(()) = self.kv.finish(ok).await;
        let Ok(()) = self.http.finish(ok).await;
        sql
    }
}

/// One message's capability effects, still open after its call: the caller commits them (on
/// ok) or undoes them with [`Effects::finish`], so what it must record with them (the outbox)
/// is its business, not the plugin engine's. Dropped unfinished, they are undone (a SQL
/// transaction whose connection closes is rolled back by the server).
#[derive(Default)]
pub(crate) struct Effects {
    instances: Instances,
    /// A dry run: nothing is ever committed.
    dry: bool,
}

impl std::fmt::Debug for Effects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Effects")
            .field("dry", &self.dry)
            .finish_non_exhaustive()
    }
}

impl Effects {
    /// Takes the effects out of a store's `instances`, leaving them idle for the next `begin`.
    pub(crate) fn take(instances: &mut Instances, dry: bool) -> Effects {
        Effects {
            instances: std::mem::take(instances),
            dry,
        }
    }

    /// Whether finishing has nothing to do (no capability holds effects, and with no
    /// `record` none is to be written): the caller may drop them instead, which saves building
    /// and boxing the commit's future for every message of a plugin without open effects.
    pub(crate) fn is_idle(&self) -> bool {
        !self.instances.hold_effects()
    }

    /// Commits (on ok) or undoes the effects; `record` goes into the SQL transaction. A dry
    /// run commits nothing. An error means nothing was committed.
    pub(crate) async fn finish(
        mut self,
        ok: bool,
        record: Option<&sql::outbox::Record>,
    ) -> Result<(), String> {
        let ok = ok && !self.dry;
        self.instances.finish(ok, record.filter(|_| ok)).await
    }
}

/// Adds every capability's imports to `linker`.
pub(crate) fn link<T: Host>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    http::Instance::link(linker)?;
    kv::Instance::link(linker)?;
    sql::Instance::link(linker)?;
    Ok(())
}

/// What one subscription was granted, resolved to open stores and databases.
#[derive(Default)]
pub struct Granted {
    pub(crate) http: Option<Arc<http::Grant>>,
    pub(crate) kv: Option<Arc<kv::Store>>,
    pub(crate) sql: Option<Arc<sql::Database>>,
    /// `outbox = true`: handled messages and their publishes are recorded in `sql`.
    pub(crate) outbox: bool,
    /// A dry run: every capability records its effects here instead of performing them.
    pub(crate) capture: Option<Arc<capture::Capture>>,
}

impl Granted {
    /// The same grants for a dry run recording into `capture`.
    pub fn capturing(&self, capture: Arc<capture::Capture>) -> Granted {
        Granted {
            http: self.http.clone(),
            kv: self.kv.clone(),
            sql: self.sql.clone(),
            outbox: false,
            capture: Some(capture),
        }
    }
}

impl std::fmt::Debug for Granted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Granted")
            .field("http", &self.http.is_some())
            .field("kv", &self.kv.is_some())
            .field("sql", &self.sql.is_some())
            .field("outbox", &self.outbox)
            .finish()
    }
}

/// Every store and database of the config, opened once and shared by the subscriptions
/// granted them.
pub struct Capabilities {
    /// Each with the recorder its health goes through.
    kv: BTreeMap<String, (Arc<kv::Store>, Recorder)>,
    sql: BTreeMap<String, (Arc<sql::Database>, Recorder)>,
    metrics: Arc<Metrics>,
}

impl Capabilities {
    /// Nothing opened: every grant resolves to nothing (tools, tests).
    pub fn none() -> Capabilities {
        Capabilities {
            kv: BTreeMap::new(),
            sql: BTreeMap::new(),
            metrics: Arc::new(Metrics::new()),
        }
    }

    /// Opens every `[kv.NAME]` and `[sql.NAME]`. Embedded files must open; a server that is
    /// down only makes calls answer `unavailable` until it is back.
    pub async fn open(config: &Config, metrics: Arc<Metrics>) -> anyhow::Result<Capabilities> {
        let mut kv = BTreeMap::new();
        for store in &config.kv {
            let mut recorder = Recorder::new(&metrics, "kv", &store.name);
            if let KvBackend::Redis { url } = &store.backend {
                recorder = recorder.hiding(url);
            }
            let opened = kv::Store::open(store, recorder.clone())
                .await
                .with_context(|| format!("cannot open [kv.{}]", store.name))?;
            kv.insert(store.name.clone(), (Arc::new(opened), recorder));
        }
        let mut sql = BTreeMap::new();
        for db in &config.sql {
            let recorder = Recorder::new(&metrics, "sql", &db.name).hiding(&db.url);
            let opened = sql::Database::open(db, recorder.clone())
                .await
                .with_context(|| format!("cannot open [sql.{}]", db.name))?;
            sql.insert(db.name.clone(), (Arc::new(opened), recorder));
        }
        Ok(Capabilities { kv, sql, metrics })
    }

    /// What `sub` is granted; a name the config did not define (cannot pass validation)
    /// resolves to nothing, so calls answer `denied`.
    pub fn grant(&self, sub: &Subscription) -> Arc<Granted> {
        let g = &sub.grants;
        let http = (!g.http.allowed.is_empty()).then(|| {
            Arc::new(http::Grant::new(
                &g.http,
                Recorder::new(&self.metrics, "http", &sub.queue),
            ))
        });
        Arc::new(Granted {
            http,
            kv: g
                .kv
                .as_ref()
                .and_then(|n| self.kv.get(n))
                .map(|(s, _)| s.clone()),
            sql: g
                .sql
                .as_ref()
                .and_then(|n| self.sql.get(n))
                .map(|(d, _)| d.clone()),
            outbox: g.outbox.is_some(),
            capture: None,
        })
    }

    /// Lets what the databases still do for the host end (cancels of timed-out statements).
    pub async fn close(&self) {
        for (db, _) in self.sql.values() {
            db.close().await;
        }
    }

    /// Asks every store and database whether it answers, and reports it to `/readyz`.
    pub async fn check_health(&self) {
        for (store, recorder) in self.kv.values() {
            recorder.health(store.ping().await.err().as_deref());
        }
        for (db, recorder) in self.sql.values() {
            recorder.health(db.ping().await.err().map(|e| e.why).as_deref());
        }
    }
}

/// Records calls of one capability and store into the metrics, and its health.
#[derive(Clone)]
pub(crate) struct Recorder {
    metrics: Arc<Metrics>,
    capability: &'static str,
    store: Arc<str>,
    /// Words of the store's URL `/readyz` must not show (see [`Secret::url_words`]).
    hidden: Arc<[String]>,
    /// Where `ok` calls count, once one was made.
    ok: OnceLock<CapabilityOk>,
}

impl Recorder {
    pub(crate) fn new(metrics: &Arc<Metrics>, capability: &'static str, store: &str) -> Recorder {
        Recorder {
            metrics: metrics.clone(),
            capability,
            store: store.into(),
            hidden: Arc::new([]),
            ok: OnceLock::new(),
        }
    }

    /// The same recorder, keeping the words of `url` out of `/readyz`.
    pub(crate) fn hiding(mut self, url: &Secret) -> Recorder {
        self.hidden = url.url_words().into();
        self
    }

    /// A recorder that goes nowhere (unit tests).
    #[cfg(test)]
    pub(crate) fn detached(capability: &'static str, store: &str) -> Recorder {
        Recorder::new(&Arc::new(Metrics::new()), capability, store)
    }

    pub(crate) fn store(&self) -> &str {
        &self.store
    }

    /// One call that began at `started`; `result` is `ok` or an error kind (`denied`,
    /// `unavailable`, `constraint`, ...).
    pub(crate) fn call(&self, started: Instant, result: &str) {
        if result == "ok" {
            let series = || self.metrics.capability_ok(self.capability, &self.store);
            self.ok.get_or_init(series).observe(started.elapsed());
            return;
        }
        self.metrics
            .capability_call(self.capability, &self.store, result, started.elapsed());
    }

    /// The store answered (`None`) or is unavailable (`Some(why)`, shown by `/readyz` as
    /// [`public_reason`] makes it).
    pub(crate) fn health(&self, down: Option<&str>) {
        let shown = down.map(|why| public_reason(why, &self.hidden));
        self.metrics
            .set_capability_health(self.capability, &self.store, shown.as_deref());
    }
}
