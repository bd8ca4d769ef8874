//! The long-running service: load plugins, connect, declare, consume every subscription,
//! apply config changes, reconnect when the broker goes away, and drain on shutdown. Every
//! wait (connecting, declaring, backing off, draining) gives way to shutdown, and the drain is
//! bounded by `shutdown_timeout`.

mod config_change;
mod consumers;
mod session;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::broker::{self, Backoff};
use crate::capability::Capabilities;
use crate::config::{Config, Subscription};
use crate::consumer::Subscriber;
use crate::delay::Delayer;
use crate::metrics::Metrics;
use crate::plugin::{CompilePriority, Runtime, RuntimeConfig};
use crate::reload::{self, Change, PluginSet};
use crate::topology::{Plan, TopologyError};

/// The process-wide plugin runtime, sized for `config`.
pub fn runtime_for(config: &Config, priority: CompilePriority) -> anyhow::Result<Runtime> {
    let calls: u32 = config
        .subscriptions
        .iter()
        .map(|s| s.concurrency)
        .fold(0u32, u32::saturating_add);
    let max_memory = config
        .subscriptions
        .iter()
        .map(|s| s.memory_limit)
        .max()
        .unwrap_or(64 << 20);
    // Headroom: a reload keeps old calls running while new ones start, and a config reload may
    // raise concurrency.
    let runtime = Runtime::new(&RuntimeConfig {
        max_instances: calls.saturating_mul(2).max(32),
        max_memory,
        cache_dir: Some(config.compiled_dir()),
        compiler_exe: compiler_exe(),
        compile_priority: priority,
    })
    .context("starting the plugin runtime")?;
    runtime.set_max_plugin_size(config.plugins.max_plugin_size);
    Ok(runtime)
}

/// The running `worker-host` executable, which compiles components in a child process; `None`
/// when this process is another program (a test binary), which then compiles in place.
fn compiler_exe() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let name = exe.file_stem()?.to_str()?;
    (name == "worker-host").then_some(exe)
}

/// What the service is running: the config and a subscriber per subscription queue.
struct State {
    config: Config,
    plugins: PluginSet,
    metrics: Arc<Metrics>,
    delayer: Option<Delayer>,
    /// Key-value stores and SQL databases, opened once; `[kv]`/`[sql]` changes need a restart.
    capabilities: Arc<Capabilities>,
    subscribers: HashMap<String, Arc<Subscriber>>,
}

impl State {
    async fn new(
        config: Config,
        plugins: PluginSet,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<State> {
        let delayer = Delayer::from_config(&config)?;
        let capabilities = Arc::new(Capabilities::open(&config, metrics.clone()).await?);
        let mut state = State {
            config,
            plugins,
            metrics,
            delayer,
            capabilities,
            subscribers: HashMap::new(),
        };
        let subs = state.config.subscriptions.clone();
        for sub in subs {
            let subscriber = state.subscriber(Arc::new(sub)).await?;
            state
                .subscribers
                .insert(subscriber.sub.queue.clone(), subscriber);
        }
        Ok(state)
    }

    async fn subscriber(&self, sub: Arc<Subscription>) -> anyhow::Result<Arc<Subscriber>> {
        let slot = self.plugins.slot(&sub.plugin_path).await?;
        if sub.grants != Default::default() && !slot.load().is_component() {
            warn!(
                queue = %sub.queue,
                plugin = %sub.plugin,
                "the subscription grants HTTP, kv or sql, but its plugin is an ABI v1 module: capabilities are for components only"
            );
        }
        let granted = self.capabilities.grant(&sub);
        Ok(Arc::new(Subscriber::new(
            sub,
            Arc::new(self.config.exchanges.clone()),
            slot,
            self.delayer.clone(),
            granted,
            self.metrics.clone(),
        )))
    }
}

/// The shutdown future, pinned so every wait can select on it.
type Shutdown<'a> = Pin<&'a mut (dyn Future<Output = ()> + Send)>;

/// Runs the service until `shutdown` resolves, then drains in-flight work and returns.
/// Broker outages are ridden out with backoff; only user errors (bad plugin, inequivalent
/// queue arguments at start) end it early.
pub async fn run(config: Config, shutdown: impl Future<Output = ()> + Send) -> anyhow::Result<()> {
    let runtime = runtime_for(&config, CompilePriority::Background)?;
    let plugins = PluginSet::new(runtime);
    let metrics = Arc::new(Metrics::new());
    let state = State::new(config, plugins.clone(), metrics.clone()).await?;
    let admin_cancel = CancellationToken::new();
    let health = tokio::spawn(watch_capabilities(
        state.capabilities.clone(),
        admin_cancel.clone(),
    ));
    let admin = match state.config.admin.as_ref() {
        Some(admin) => Some(
            crate::admin::serve(
                admin.listen,
                metrics.clone(),
                crate::admin::Console {
                    config: Arc::new(state.config.clone()),
                    plugins: plugins.clone(),
                    capabilities: state.capabilities.clone(),
                    jobs: crate::admin::Jobs::new(admin_cancel.child_token()),
                },
                admin_cancel.clone(),
            )
            .await?,
        ),
        None => None,
    };

    let (changes_tx, changes) = mpsc::channel(8);
    let _watcher = reload::watch(
        &state.config.plugins.dir,
        &state.config.path,
        plugins,
        changes_tx.clone(),
    )
    .map_err(|err| warn!("hot reload is off: cannot watch files: {err:#}"))
    .ok();
    let hangup = spawn_sighup(changes_tx);

    let grace = state.config.broker.shutdown_timeout;
    let mut service = Service {
        name: format!("worker-host {}", state.config.path.display()),
        state,
        metrics,
        changes,
        backoff: Backoff::default(),
        orphaned: JoinSet::new(),
    };
    let mut shutdown = std::pin::pin!(shutdown);
    let result = service.serve(shutdown.as_mut()).await;
    // Consumers of a lost connection may still be finishing calls whose results are dropped.
    let orphans = async { while service.orphaned.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(grace, orphans).await;
    service.state.capabilities.close().await;
    hangup.abort();
    admin_cancel.cancel();
    let _ = health.await;
    if let Some(admin) = admin {
        let _ = tokio::time::timeout(Duration::from_secs(1), admin).await;
    }
    result
}

/// The run loop's state across connections.
struct Service {
    name: String,
    state: State,
    metrics: Arc<Metrics>,
    changes: mpsc::Receiver<Change>,
    backoff: Backoff,
    /// Consumers of a lost connection still finishing their in-flight calls, whose results are
    /// dropped (the broker redelivers those messages); the service reconnects meanwhile.
    orphaned: JoinSet<()>,
}

impl Service {
    /// Connects, declares and runs sessions until shutdown; reconnects with backoff.
    async fn serve(&mut self, mut shutdown: Shutdown<'_>) -> anyhow::Result<()> {
        let mut first = true;
        loop {
            let urls = &self.state.config.broker.urls;
            let (conn, url) = tokio::select! {
                _ = &mut shutdown => return Ok(()),
                (conn, url) = broker::connect_forever(urls, &self.name, &mut self.backoff) => (Arc::new(conn), url),
            };
            let plan = Plan::from_config(&self.state.config);
            let declared = tokio::select! {
                _ = &mut shutdown => {
                    close_within(&conn, Duration::from_secs(1), "worker-host stopping").await;
                    return Ok(());
                }
                declared = plan.declare(&conn) => declared,
            };
            match declared {
                Ok(()) => {}
                // At start a mismatch is the user's to fix; later (someone changed the broker
                // under us) keep retrying so the service comes back once it is fixed.
                Err(err @ TopologyError::Inequivalent { .. }) if first => return Err(err.into()),
                Err(err) => {
                    warn!("declaring the topology failed: {err}; reconnecting");
                    close_within(&conn, Duration::from_secs(1), "retry").await;
                    if !self.pause(shutdown.as_mut()).await {
                        return Ok(());
                    }
                    continue;
                }
            }
            first = false;
            self.backoff.reset();
            if self.session((conn, url), plan, shutdown.as_mut()).await == session::Ended::Shutdown
            {
                return Ok(());
            }
            warn!("lost the broker; reconnecting");
            if !self.pause(shutdown.as_mut()).await {
                return Ok(());
            }
        }
    }

    /// Waits one backoff step; false if shutdown came first.
    async fn pause(&mut self, shutdown: Shutdown<'_>) -> bool {
        let wait = self.backoff.next_delay();
        tokio::select! {
            _ = shutdown => false,
            _ = tokio::time::sleep(wait) => true,
        }
    }
}

/// Closes a connection, giving up after `within` (a blocked broker may never answer).
async fn close_within(conn: &lapin::Connection, within: Duration, why: &str) {
    let _ = tokio::time::timeout(within, conn.close(200, why.into())).await;
}

/// How often stores and databases are asked whether they answer, for `/readyz`.
const HEALTH_EVERY: Duration = Duration::from_secs(5);

/// Checks the stores and databases until `cancel`.
async fn watch_capabilities(capabilities: Arc<Capabilities>, cancel: CancellationToken) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = capabilities.check_health() => {}
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(HEALTH_EVERY) => {}
        }
    }
}

/// SIGHUP asks for a config reload, like a change of the file.
fn spawn_sighup(changes: mpsc::Sender<Change>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            return;
        };
        while hup.recv().await.is_some() {
            info!("SIGHUP: reloading the config");
            if changes.send(Change::Config).await.is_err() {
                return;
            }
        }
    })
}
