//! One subscription's consumer: prefetch-limited deliveries, `concurrency` handler calls in
//! flight, and for each message a confirmed republish (retry, failed, plugin publishes) before
//! the ack. Each delivery runs through the stages of `pipeline`; this module is the setup they
//! share (`Subscriber`); `dispatch` is the loop that feeds them, running short calls in its own
//! task (see `pace`). Acks, confirms and handler calls of different messages overlap; acks go
//! out in batches (see `acks`). While the broker blocks publishing, no call starts and nothing is
//! published (the link's publisher holds back). A channel error stays the size of a channel: the consumer ends and is
//! started again on a fresh channel, and a handler result whose channel died is dropped.

mod acks;
mod delivery;
mod dispatch;
mod inline;
mod invoke;
mod pace;
mod pause;
mod pipeline;
mod precheck;
mod publish;
mod settle;
mod source;
mod strikes;

use std::sync::Arc;

use self::acks::Acks;
use self::delivery::ChannelDeath;
use self::dispatch::Run;
use self::inline::Inline;
use self::pace::Pace;
use self::pause::{Breaker, Turn};
use self::settle::Settler;
use self::strikes::Strikes;
use arc_swap::ArcSwap;
use lapin::Connection;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use self::source::{Channel, Deliveries};
use crate::broker::Publisher;
use crate::capability::Granted;
use crate::config::{Exchanges, InstanceMode, Secret, Subscription};
use crate::delay::Delayer;
use crate::metrics::{Metrics, QueueMetrics};
use crate::outbox::Outbox;
use crate::plugin::{Instances, Limits, Plugin, PublishPolicy};
use crate::topology::Keeper;

/// What a consumer uses of its connection: the connection itself, the shared confirm-mode
/// publisher, and the keeper of the topology declared on it.
#[derive(Clone)]
pub(crate) struct Link {
    pub conn: Arc<Connection>,
    pub publisher: Arc<Publisher>,
    pub keeper: Arc<Keeper>,
    /// Set when each consumer takes its deliveries on a consume connection of the host's own
    /// (`broker::wire`) instead of a channel of `conn`.
    pub own: Option<Arc<OwnConsume>>,
    /// Calls of runs whose own consume connection died, finishing meanwhile (their results
    /// are dropped: the broker redelivers) while the consumer starts again at once.
    pub orphans: TaskTracker,
}

/// Where the host's own consume connections go: the broker URL `conn` answered on, and the
/// name the broker lists them under.
pub(crate) struct OwnConsume {
    pub url: Secret,
    pub name: String,
}

/// Everything a subscription's consumer needs; lives across reconnects and reloads.
pub(crate) struct Subscriber {
    /// The subscription as configured.
    pub sub: Arc<Subscription>,
    /// Names of the master, retry and failed exchanges.
    pub exchanges: Arc<Exchanges>,
    /// The plugin version new calls use; swapped by hot reload.
    pub plugin: Arc<ArcSwap<Plugin>>,
    config_json: Arc<str>,
    policy: Arc<PublishPolicy>,
    granted: Arc<Granted>,
    limits: Limits,
    delayer: Option<Delayer>,
    metrics: QueueMetrics,
    /// Messages whose call outlived the broker's consumer timeout, by identity.
    strikes: Strikes,
    /// With `outbox = true`: handled messages and their publishes are recorded.
    outbox: Option<Outbox>,
    /// Counts answers that are not ok in a row (`pause_after`).
    breaker: Breaker,
    /// How long calls take: whether they run in the consumer's task.
    pace: Pace,
}

impl Subscriber {
    /// Prepares a subscription to run `plugin`.
    pub(crate) fn new(
        sub: Arc<Subscription>,
        exchanges: Arc<Exchanges>,
        plugin: Arc<ArcSwap<Plugin>>,
        delayer: Option<Delayer>,
        granted: Arc<Granted>,
        metrics: Arc<Metrics>,
    ) -> Subscriber {
        let config_json: Arc<str> = sub.config.to_string().into();
        let policy = Arc::new(PublishPolicy {
            allowed_exchanges: sub.publish.clone(),
            max_delay: delayer.as_ref().map(Delayer::max_delay),
            ..PublishPolicy::default()
        });
        let limits = Limits {
            timeout: sub.timeout,
            memory_limit: sub.memory_limit,
            instance: match sub.instance {
                InstanceMode::Fresh => Instances::Fresh,
                InstanceMode::Reuse => Instances::Reuse {
                    max_messages: sub.instance_max_messages,
                },
            },
        };
        let retention = sub.grants.outbox.as_ref().map(|o| o.retention);
        let outbox = Outbox::of(&granted, &sub.queue, policy.clone(), retention);
        let metrics = metrics.for_queue(&sub.queue);
        metrics.set_paused(false);
        let pause = sub.pause;
        Subscriber {
            sub,
            exchanges,
            plugin,
            config_json,
            policy,
            granted,
            limits,
            delayer,
            metrics,
            strikes: Strikes::default(),
            outbox,
            breaker: Breaker::new(pause),
            pace: Pace::default(),
        }
    }

    /// Consumes until `cancel` fires or the channel fails. Returns once every message it took
    /// has been settled (acked, or left unacked for the broker to redeliver). With
    /// `pause_after`, a run ends when the breaker turns: no deliveries for `pause_for`, then
    /// one at a time until one answers ok.
    pub(crate) async fn consume(
        self: Arc<Self>,
        link: Link,
        cancel: CancellationToken,
    ) -> anyhow::Result<()> {
        let queue = self.sub.queue.as_str();
        loop {
            let run = cancel.child_token();
            let probing = self.breaker.start_run(run.clone());
            self.clone().consume_run(&link, run, probing).await?;
            if cancel.is_cancelled() {
                self.metrics.set_paused(false);
                return Ok(());
            }
            match (self.breaker.turn(), self.sub.pause) {
                (Some(Turn::Pause), Some(pause)) => {
                    self.metrics.set_paused(true);
                    warn!(
                        queue,
                        "paused for {}: {} answers in a row were not ok (or the message tried \
                         after a pause was not); messages wait in the queue",
                        humantime::format_duration(pause.pause_for),
                        pause.after
                    );
                    tokio::select! {
                        _ = cancel.cancelled() => {
                            self.metrics.set_paused(false);
                            return Ok(());
                        }
                        _ = tokio::time::sleep(pause.pause_for) => {}
                    }
                    info!(queue, "pause over: trying one message at a time");
                }
                (Some(Turn::Resume), _) => {
                    self.metrics.set_paused(false);
                    info!(queue, "resumed: a message answered ok after the pause");
                }
                _ => return Ok(()),
            }
        }
    }

    /// One run of the consumer on a channel of its own, until `cancel` fires or the channel
    /// fails; one message at a time when `probing`.
    async fn consume_run(
        self: Arc<Self>,
        link: &Link,
        cancel: CancellationToken,
        probing: bool,
    ) -> anyhow::Result<()> {
        let link = link.clone();
        // One message at a time when probing: through the dispatch loop alone.
        let inline = (link.own.is_some() && !probing).then(Inline::default);
        let (channel, mut deliveries, tag) = self.open(&link, probing, inline.as_ref()).await?;
        let queue = self.sub.queue.as_str();
        debug!(queue, consumer_tag = %tag, own = link.own.is_some(), "consuming");

        let channel = Arc::new(channel);
        let (acks, ack_task) = Acks::start(channel.clone(), self.hold_limit());
        let concurrency = if probing { 1 } else { self.sub.concurrency };
        let mut run = Run {
            settler: Arc::new(Settler {
                link,
                channel,
                acks,
                death: Arc::new(ChannelDeath::default()),
            }),
            tasks: TaskTracker::new(),
            here: Default::default(),
            slots: Arc::new(Semaphore::new(concurrency as usize)),
            inline,
        };
        let sweeping = cancel.child_token();
        run.tasks.spawn(
            self.clone()
                .sweep(run.settler.link.clone(), sweeping.clone()),
        );
        if let Some(inline) = &run.inline {
            inline.arm(&self, &run.settler, &run.slots, &run.tasks, &cancel);
        }
        let result = self.dispatch(&mut run, &mut deliveries, &cancel).await;
        // No call starts in place once this returns, and none is being polled there.
        if let Some(inline) = &run.inline {
            inline.disarm();
        }
        sweeping.cancel();
        // Stop new deliveries; what was prefetched but not started goes back when the channel
        // closes. Calls in flight finish (bounded by their timeout) and settle meanwhile.
        if result.is_ok() {
            let cancelling = run.settler.channel.cancel(&tag);
            let _ = tokio::join!(cancelling, run.here.finish());
        }
        let orphans = run.settler.link.orphans.clone();
        let own = matches!(deliveries, Deliveries::Own(_));
        let drained = async move {
            run.drain(ack_task).await;
            if let Deliveries::Own(feed) = deliveries {
                feed.close().await;
            }
        };
        if result.is_err() && own {
            // The consume connection is gone: its calls' results go nowhere, and waiting for
            // them would leave the queue without a consumer for up to their timeout.
            orphans.spawn(drained);
        } else {
            drained.await;
        }
        result
    }

    /// Opens the consumer's channel (on the link's connection, or a connection of its own)
    /// with the prefetch and starts consuming; says the consumer tag. A missing queue is
    /// handed to the keeper to declare again, so the restart that follows finds it.
    async fn open(
        &self,
        link: &Link,
        probing: bool,
        inline: Option<&Inline>,
    ) -> anyhow::Result<(Channel, Deliveries, String)> {
        let queue = self.sub.queue.as_str();
        let prefetch = if probing { 1 } else { self.sub.prefetch };
        let opened = match &link.own {
            Some(own) => {
                let hook = inline.map(Inline::hook);
                source::open_own(own.url.expose(), &own.name, queue, prefetch, hook).await
            }
            None => source::open_lapin(link, queue, prefetch)
                .await
                .map(|(c, d)| {
                    let tag = d.tag("");
                    (c, d, tag)
                }),
        };
        match opened {
            Ok(opened) => Ok(opened),
            Err(failed) => {
                if failed.missing {
                    let why = format!("queue \"{queue}\" is missing");
                    let _ = link.keeper.repair(&why).await;
                }
                Err(failed.error)
            }
        }
    }

    /// Half the prefetch window at most waits for a lower tag to settle (prefetch 0 is
    /// unlimited).
    fn hold_limit(&self) -> usize {
        match self.sub.prefetch {
            0 => 64,
            p => usize::from(p / 2),
        }
    }
}
