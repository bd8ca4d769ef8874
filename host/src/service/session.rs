//! One connection's session: its consumers, the delay mover, the topology keeper, and the
//! events that end it (shutdown, the connection lost) or change it (a config reload, a
//! consumer that stopped, the broker blocking publishing).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use futures_util::{Stream, StreamExt as _};
use lapin::Connection;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};

use super::consumers::{Consumers, Ended as ConsumerEnded};
use super::{Service, Shutdown, close_within, config_change};
use crate::broker::{self, Blocked, Publisher};
use crate::config::Secret;
use crate::consumer::{Link, OwnConsume};
use crate::reload::Change;
use crate::topology::{Keeper, Plan};

/// How long a consumer that stopped on its own waits before it starts again.
const RESTART_PAUSE: Duration = Duration::from_secs(1);

/// Why a session ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Ended {
    Shutdown,
    Lost,
}

impl Service {
    /// Runs every subscription on `conn` (whose topology `plan` was just declared) until
    /// shutdown or until the connection is lost.
    pub(super) async fn session(
        &mut self,
        (conn, url): (Arc<Connection>, Secret),
        plan: Plan,
        shutdown: Shutdown<'_>,
    ) -> Ended {
        // Listening before reading the status, so no block goes unheard.
        let events = conn.events_listener();
        let (blocked_tx, blocked) = Blocked::channel(conn.status().blocked());
        let link = Link {
            publisher: Arc::new(Publisher::new(conn.clone(), blocked.clone())),
            keeper: Arc::new(Keeper::new(conn.clone(), plan, self.metrics.clone())),
            conn: conn.clone(),
            own: own_consume(url, &self.name),
            orphans: TaskTracker::new(),
        };
        self.metrics.set_blocked(None);
        self.metrics.set_connected(true);
        let mut consumers = Consumers::new();
        for subscriber in self.state.subscribers.values() {
            consumers.start(&link, subscriber.clone());
        }
        info!(subscriptions = consumers.running.len(), "consuming");
        self.count_consumers(&consumers);
        let helpers = self.start_helpers(&link, &blocked);

        let ended = self
            .events(&link, &mut consumers, (events, &blocked_tx), shutdown)
            .await;
        self.metrics.set_connected(false);
        helpers.cancel.cancel();
        let mut tasks = helpers.tasks;
        let helpers_ended = async move { while tasks.join_next().await.is_some() {} };
        if ended == Ended::Shutdown {
            self.drain(&link, consumers, helpers_ended).await;
            return Ended::Shutdown;
        }
        // The connection is gone: what waits for a block to lift goes on and fails on it.
        blocked_tx.send_replace(false);
        helpers_ended.await;
        self.orphaned.spawn(async move {
            consumers.drain().await;
            link.orphans.close();
            link.orphans.wait().await;
            close_within(
                &link.conn,
                Duration::from_secs(5),
                "worker-host reconnecting",
            )
            .await;
        });
        while self.orphaned.try_join_next().is_some() {}
        Ended::Lost
    }

    /// Lets in-flight messages settle and closes the connection, for at most
    /// `shutdown_timeout`: while the broker blocks publishing, what waits to publish never
    /// ends, and is left unacked for the broker to redeliver.
    async fn drain(
        &self,
        link: &Link,
        mut consumers: Consumers,
        helpers_ended: impl Future<Output = ()>,
    ) {
        info!("shutting down: draining in-flight messages");
        let grace = self.state.config.broker.shutdown_timeout;
        let drain = async {
            tokio::join!(helpers_ended, consumers.drain());
            link.orphans.close();
            link.orphans.wait().await;
            link.publisher.close().await;
            let _ = link.conn.close(200, "worker-host stopping".into()).await;
        };
        match tokio::time::timeout(grace, drain).await {
            Ok(()) => info!("drained; bye"),
            Err(_) => warn!(
                "shutdown_timeout ({}) reached: messages not yet settled stay unacked and \
                 the broker redelivers them",
                humantime::format_duration(grace)
            ),
        }
    }

    /// The delay mover and the topology keeper of this connection.
    fn start_helpers(&self, link: &Link, blocked: &Blocked) -> Helpers {
        let cancel = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let every = self.state.config.broker.topology_check;
        tasks.spawn(link.keeper.clone().run(every, cancel.clone()));
        if let Some(delayer) = self.state.delayer.clone() {
            let (conn, blocked, cancel) = (link.conn.clone(), blocked.clone(), cancel.clone());
            tasks.spawn(async move { delayer.mover_loop(&conn, &blocked, cancel).await });
        }
        Helpers { cancel, tasks }
    }

    /// Handles the session's events until shutdown or the connection is lost; the broker's
    /// blocks go to `blocked` (true while it blocks publishing).
    async fn events(
        &mut self,
        link: &Link,
        consumers: &mut Consumers,
        (mut events, blocked): (
            impl Stream<Item = lapin::Event> + Unpin,
            &watch::Sender<bool>,
        ),
        mut shutdown: Shutdown<'_>,
    ) -> Ended {
        // Connection errors reach the consumers only once their in-flight calls end; this
        // hears them at once, so readiness drops and the reconnect starts without waiting.
        if *blocked.borrow() {
            self.metrics
                .set_blocked(Some("blocked when the connection opened"));
        }
        // Consumers that stopped on their own, each waiting out its pause before it starts
        // again. Waited here, beside the events, so a connection lost meanwhile is heard at
        // once (a consume connection of the host's own can end a moment before the service's).
        let mut restarts: FuturesUnordered<BoxFuture<'static, String>> = FuturesUnordered::new();
        loop {
            tokio::select! {
                _ = &mut shutdown => return Ended::Shutdown,
                Some(event) = events.next() => match event {
                    lapin::Event::Error(err) => {
                        // A channel error closes one channel; its owner reopens it.
                        if broker::is_channel_error(&err) && link.conn.status().connected() {
                            debug!("a channel was closed by the broker: {err}");
                            continue;
                        }
                        warn!("lost the connection to RabbitMQ: {err}");
                        return Ended::Lost;
                    }
                    lapin::Event::ConnectionBlocked(reason) => {
                        warn!(
                            "RabbitMQ blocks publishing: no handler call starts and nothing is \
                             published until it unblocks: {reason}"
                        );
                        self.metrics.set_blocked(Some(&reason));
                        blocked.send_replace(true);
                    }
                    lapin::Event::ConnectionUnblocked => {
                        info!("RabbitMQ unblocked publishing");
                        self.metrics.set_blocked(None);
                        blocked.send_replace(false);
                    }
                    _ => {}
                },
                Some(change) = self.changes.recv() => {
                    if change == Change::Config {
                        config_change::apply_config_change(&mut self.state, link, consumers).await;
                        self.count_consumers(consumers);
                    }
                }
                Some(ended) = consumers.tasks.join_next() => {
                    let Ok(ended) = ended else {
                        error!("a consumer task failed");
                        continue;
                    };
                    match self.consumer_ended(ended, link, consumers) {
                        Some(queue) => restarts.push(Box::pin(async move {
                            tokio::time::sleep(RESTART_PAUSE).await;
                            queue
                        })),
                        None if link.conn.status().connected() => {}
                        None => return Ended::Lost,
                    }
                }
                Some(queue) = restarts.next(), if !restarts.is_empty() => {
                    if !link.conn.status().connected() {
                        return Ended::Lost;
                    }
                    self.restart(&queue, link, consumers);
                }
            }
        }
    }

    /// A consumer ended on its own: the queue to start again after a pause, if it is still
    /// wanted; `None` when it was stopped on purpose or the connection is gone.
    fn consumer_ended(
        &mut self,
        (queue, id, result): ConsumerEnded,
        link: &Link,
        consumers: &mut Consumers,
    ) -> Option<String> {
        if !consumers.is_current(&queue, id) {
            return None; // Stopped on purpose (removed or restarted).
        }
        consumers.running.remove(&queue);
        self.count_consumers(consumers);
        match &result {
            Ok(()) => warn!(queue, "consumer stopped"),
            Err(err) => warn!(queue, "consumer stopped: {err:#}; starting it again"),
        }
        link.conn.status().connected().then_some(queue)
    }

    /// Starts the consumer of `queue` again after its pause, unless a config change removed
    /// its subscription or already started it meanwhile.
    fn restart(&mut self, queue: &str, link: &Link, consumers: &mut Consumers) {
        if consumers.running.contains_key(queue) {
            return;
        }
        if let Some(subscriber) = self.state.subscribers.get(queue) {
            consumers.start(link, subscriber.clone());
        }
        self.count_consumers(consumers);
    }

    fn count_consumers(&self, consumers: &Consumers) {
        self.metrics
            .set_consumers(self.state.subscribers.len(), consumers.running.len());
    }
}

/// Each consumer takes its deliveries on a consume connection of the host's own (the batch
/// consumer, docs/performance.md) unless this is `lapin`: then on a channel of the service's
/// connection, as `amqps://` URLs always do (that connection does not speak TLS yet).
const CONSUME_ENV: &str = "WORKER_CONSUME";

fn own_consume(url: Secret, name: &str) -> Option<Arc<OwnConsume>> {
    let wanted = std::env::var(CONSUME_ENV).map_or(true, |v| v != "lapin");
    (wanted && url.expose().starts_with("amqp://")).then(|| {
        Arc::new(OwnConsume {
            url,
            name: format!("{name} (consuming)"),
        })
    })
}

/// Tasks that live as long as one connection.
struct Helpers {
    cancel: CancellationToken,
    tasks: JoinSet<()>,
}
