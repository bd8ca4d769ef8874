//! The long-running service: load plugins, connect, declare, consume every subscription,
//! apply config changes, reconnect when the broker goes away, and drain on shutdown.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures_util::StreamExt as _;
use lapin::Connection;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::broker::{self, Backoff};
use crate::config::{Config, Subscription};
use crate::consumer::Subscriber;
use crate::delay::Delayer;
use crate::metrics::Metrics;
use crate::plugin::{Plugin, Runtime, RuntimeConfig};
use crate::reload::{self, Change, PluginSet};
use crate::topology::{Plan, TopologyError};

/// The process-wide plugin runtime, sized for `config`.
pub fn runtime_for(config: &Config) -> anyhow::Result<Runtime> {
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
    Runtime::new(&RuntimeConfig {
        max_instances: calls.saturating_mul(2).max(32),
        max_memory,
    })
    .context("starting the plugin runtime")
}

/// Compiles one plugin file off the async workers.
pub async fn load_plugin(runtime: &Runtime, path: &Path) -> anyhow::Result<Arc<Plugin>> {
    let runtime = runtime.clone();
    let owned = path.to_path_buf();
    let loaded = tokio::task::spawn_blocking(move || runtime.load_file(&owned))
        .await
        .context("plugin compile task failed")?;
    Ok(loaded?)
}

/// What the service is running: the config and a subscriber per subscription queue.
struct State {
    config: Config,
    plugins: PluginSet,
    metrics: Arc<Metrics>,
    delayer: Option<Delayer>,
    subscribers: HashMap<String, Arc<Subscriber>>,
}

impl State {
    async fn new(
        config: Config,
        plugins: PluginSet,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<State> {
        let delayer = Delayer::from_config(&config)?;
        let mut state = State {
            config,
            plugins,
            metrics,
            delayer,
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
        Ok(Arc::new(Subscriber::new(
            sub,
            Arc::new(self.config.exchanges.clone()),
            slot,
            self.delayer.clone(),
            self.metrics.clone(),
        )))
    }
}

/// The consumers running on one connection, each stoppable on its own.
struct Consumers {
    tasks: JoinSet<(String, u64, anyhow::Result<()>)>,
    running: HashMap<String, (u64, CancellationToken)>,
    next_id: u64,
}

impl Consumers {
    fn new() -> Consumers {
        Consumers {
            tasks: JoinSet::new(),
            running: HashMap::new(),
            next_id: 0,
        }
    }

    fn start(&mut self, conn: &Arc<Connection>, subscriber: Arc<Subscriber>) {
        let queue = subscriber.sub.queue.clone();
        self.stop(&queue);
        let cancel = CancellationToken::new();
        self.next_id += 1;
        let id = self.next_id;
        self.running.insert(queue.clone(), (id, cancel.clone()));
        let conn = conn.clone();
        self.tasks
            .spawn(async move { (queue, id, subscriber.consume(&conn, cancel).await) });
    }

    /// Stops taking deliveries for `queue`; its in-flight messages still settle.
    fn stop(&mut self, queue: &str) {
        if let Some((_, cancel)) = self.running.remove(queue) {
            cancel.cancel();
        }
    }

    /// Stops everything and waits for in-flight messages to settle.
    async fn drain(&mut self) {
        for (_, cancel) in self.running.values() {
            cancel.cancel();
        }
        self.running.clear();
        while let Some(ended) = self.tasks.join_next().await {
            if let Ok((queue, _, Err(err))) = ended {
                warn!(queue, "consumer ended: {err:#}");
            }
        }
    }
}

/// Runs the service until `shutdown` resolves, then drains in-flight work and returns.
/// Broker outages are ridden out with backoff; only user errors (bad plugin, inequivalent
/// queue arguments at start) end it early.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let runtime = runtime_for(&config)?;
    let plugins = PluginSet::new(runtime);
    let metrics = Arc::new(Metrics::new());
    let mut state = State::new(config, plugins.clone(), metrics.clone()).await?;
    let admin_cancel = CancellationToken::new();
    let admin = match state.config.admin.as_ref() {
        Some(admin) => Some(
            crate::admin::serve(
                admin.listen,
                metrics.clone(),
                plugins.clone(),
                admin_cancel.clone(),
            )
            .await?,
        ),
        None => None,
    };

    let (changes_tx, mut changes) = mpsc::channel(8);
    let _watcher = reload::watch(
        &state.config.plugins.dir,
        &state.config.path,
        plugins,
        changes_tx.clone(),
    )
    .map_err(|err| warn!("hot reload is off: cannot watch files: {err:#}"))
    .ok();
    let hangup = spawn_sighup(changes_tx);

    let name = format!("worker-host {}", state.config.path.display());
    tokio::pin!(shutdown);
    let mut backoff = Backoff::default();
    let mut first = true;
    // Consumers of a lost connection still finishing their in-flight calls, whose results are
    // dropped (the broker redelivers those messages); the service reconnects meanwhile.
    let mut orphaned = JoinSet::new();
    let result = loop {
        let conn = tokio::select! {
            _ = &mut shutdown => break Ok(()),
            conn = broker::connect_forever(&state.config.broker.urls, &name, &mut backoff) => Arc::new(conn),
        };
        match Plan::from_config(&state.config).declare(&conn).await {
            Ok(()) => {}
            // At start a mismatch is the user's to fix; later (someone changed the broker under
            // us) keep retrying so the service comes back once it is fixed.
            Err(err @ TopologyError::Inequivalent { .. }) if first => break Err(err.into()),
            Err(err) => {
                warn!("declaring the topology failed: {err}; reconnecting");
                let _ = conn.close(200, "retry".into()).await;
                tokio::select! {
                    _ = &mut shutdown => break Ok(()),
                    _ = tokio::time::sleep(backoff.next_delay()) => continue,
                }
            }
        }
        first = false;
        backoff.reset();
        metrics.set_connected(true);

        let mut consumers = Consumers::new();
        for subscriber in state.subscribers.values() {
            consumers.start(&conn, subscriber.clone());
        }
        info!(subscriptions = consumers.running.len(), "consuming");
        metrics.set_consumers(state.subscribers.len(), consumers.running.len());
        // Delivers delayed messages when they are due; restarts itself while the connection lives.
        let mover_cancel = CancellationToken::new();
        let mover = state.delayer.clone().map(|delayer| {
            let (conn, cancel) = (conn.clone(), mover_cancel.clone());
            tokio::spawn(async move { delayer.mover_loop(&conn, cancel).await })
        });

        // Connection errors reach the consumers only once their in-flight calls end; this hears
        // them at once, so readiness drops and the reconnect starts without waiting on them.
        let mut events = conn.events_listener();
        let stopping = loop {
            tokio::select! {
                _ = &mut shutdown => break true,
                Some(event) = events.next() => match event {
                    lapin::Event::Error(err) => {
                        warn!("lost the connection to RabbitMQ: {err}");
                        break false;
                    }
                    lapin::Event::ConnectionBlocked(reason) => {
                        warn!("RabbitMQ blocks publishing (confirms wait until it unblocks): {reason}");
                    }
                    lapin::Event::ConnectionUnblocked => info!("RabbitMQ unblocked publishing"),
                    _ => {}
                },
                Some(change) = changes.recv() => {
                    if change == Change::Config {
                        apply_config_change(&mut state, &conn, &mut consumers).await;
                        metrics.set_consumers(state.subscribers.len(), consumers.running.len());
                    }
                }
                Some(ended) = consumers.tasks.join_next() => {
                    let (queue, id, result) = match ended {
                        Ok(ended) => ended,
                        Err(err) => { error!("consumer task failed: {err}"); continue; }
                    };
                    let current = consumers.running.get(&queue).is_some_and(|(running, _)| *running == id);
                    if !current {
                        continue; // Stopped on purpose (removed or restarted).
                    }
                    consumers.running.remove(&queue);
                    metrics.set_consumers(state.subscribers.len(), consumers.running.len());
                    match result {
                        Ok(()) => warn!(queue, "consumer stopped"),
                        Err(err) => error!(queue, "consumer stopped: {err:#}"),
                    }
                    if !conn.status().connected() {
                        break false;
                    }
                    // The connection is fine: restart this subscription alone after a pause.
                    tokio::select! {
                        _ = &mut shutdown => break true,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                    if let Some(subscriber) = state.subscribers.get(&queue) {
                        consumers.start(&conn, subscriber.clone());
                    }
                    metrics.set_consumers(state.subscribers.len(), consumers.running.len());
                }
            }
        };
        if stopping {
            info!("shutting down: draining in-flight messages");
        }
        metrics.set_connected(false);
        mover_cancel.cancel();
        if let Some(mover) = mover {
            let _ = mover.await;
        }
        if stopping {
            consumers.drain().await;
            let _ = conn.close(200, "worker-host stopping".into()).await;
            info!("drained; bye");
            break Ok(());
        }
        orphaned.spawn(async move {
            consumers.drain().await;
            let _ = conn.close(200, "worker-host reconnecting".into()).await;
        });
        while orphaned.try_join_next().is_some() {}
        let wait = backoff.next_delay();
        warn!("lost the broker; reconnecting in {wait:?}");
        tokio::select! {
            _ = &mut shutdown => break Ok(()),
            _ = tokio::time::sleep(wait) => {}
        }
    };
    while orphaned.join_next().await.is_some() {}
    hangup.abort();
    admin_cancel.cancel();
    if let Some(admin) = admin {
        let _ = admin.await;
    }
    result
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

/// Reloads worker.toml and applies subscription changes: added ones start, removed ones stop
/// taking deliveries (their in-flight messages still settle), changed ones restart on fresh
/// channels while the old consumer drains. Everything that can fail (parsing, compiling new
/// plugins, declaring) happens before anything running is touched; a broken file keeps what runs.
async fn apply_config_change(state: &mut State, conn: &Arc<Connection>, consumers: &mut Consumers) {
    // SIGHUP also means "look at the plugins again": some filesystems send no events.
    state.plugins.recheck().await;
    let new = match reload_config(&state.config) {
        Ok(new) => new,
        Err(why) => {
            warn!("config not reloaded, keeping the running one: {why:#}");
            return;
        }
    };
    let next = match prepare_subscribers(state, &new).await {
        Ok(next) => next,
        Err(err) => {
            warn!("config not reloaded, keeping the running one: {err:#}");
            prune_plugins(state);
            return;
        }
    };
    if let Err(err) = Plan::from_config(&new).declare(conn).await {
        if conn.status().connected() {
            warn!("config not reloaded, keeping the running one: {err}");
            prune_plugins(state);
            return;
        }
        // The broker went away meanwhile: adopt the new config; the reconnect declares its
        // topology and starts every subscriber, so the change is not lost.
        warn!("config accepted; it applies once the broker is back ({err})");
        state.subscribers = next;
        state.config = new;
        prune_plugins(state);
        return;
    }
    let (mut added, mut removed, mut restarted) = (0, 0, 0);
    for queue in state.subscribers.keys() {
        if !next.contains_key(queue) {
            info!(queue, "subscription removed: stopping its consumer");
            consumers.stop(queue);
            removed += 1;
        }
    }
    for (queue, subscriber) in &next {
        match state.subscribers.get(queue) {
            Some(old) if Arc::ptr_eq(old, subscriber) => {}
            Some(_) => {
                info!(queue, "subscription changed: restarting its consumer");
                consumers.start(conn, subscriber.clone());
                restarted += 1;
            }
            None => {
                info!(queue, "subscription added: starting its consumer");
                consumers.start(conn, subscriber.clone());
                added += 1;
            }
        }
    }
    state.subscribers = next;
    state.config = new;
    prune_plugins(state);
    info!(added, removed, restarted, "config reloaded");
}

/// Reads worker.toml again. Sections the running service cannot change in place keep their
/// running values (with a warning); a change to `[exchanges]` or `plugins.dir` refuses the
/// whole reload, since subscriptions, retry routes and the watcher depend on them.
fn reload_config(old: &Config) -> anyhow::Result<Config> {
    let (mut new, warnings) = Config::load(&old.path).map_err(|err| anyhow::anyhow!("{err}"))?;
    for w in warnings {
        warn!("{w}");
    }
    if new.exchanges != old.exchanges {
        anyhow::bail!("[exchanges] changed; that needs a restart");
    }
    if new.plugins.dir != old.plugins.dir {
        anyhow::bail!("[plugins] dir changed; that needs a restart");
    }
    let mut later = Vec::new();
    if new.broker != old.broker {
        later.push("[broker]");
        new.broker = old.broker.clone();
    }
    if new.admin != old.admin {
        later.push("[admin]");
        new.admin = old.admin.clone();
    }
    if new.delay != old.delay {
        later.push("[delay]");
        new.delay = old.delay;
    }
    if !later.is_empty() {
        warn!(
            "changes to {} apply at the next restart; the rest is applied now",
            later.join(", ")
        );
    }
    Ok(new)
}

/// A subscriber per subscription of `new`: the running one when unchanged, else a new one
/// (compiling its plugin if no subscription used that file yet).
async fn prepare_subscribers(
    state: &State,
    new: &Config,
) -> anyhow::Result<HashMap<String, Arc<Subscriber>>> {
    let mut next = HashMap::new();
    for sub in &new.subscriptions {
        let same = state
            .subscribers
            .get(&sub.queue)
            .filter(|s| *s.sub == *sub)
            .cloned();
        let subscriber = match same {
            Some(s) => s,
            None => state.subscriber(Arc::new(sub.clone())).await?,
        };
        next.insert(sub.queue.clone(), subscriber);
    }
    Ok(next)
}

/// Drops the plugin slots no subscription uses any more.
fn prune_plugins(state: &State) {
    state.plugins.retain(|path| {
        state
            .subscribers
            .values()
            .any(|s| s.sub.plugin_path == path)
    });
}
