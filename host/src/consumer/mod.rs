//! One subscription's consumer: prefetch-limited deliveries, `concurrency` handler calls in
//! flight, and for each message a confirmed republish (retry, failed, plugin publishes) before
//! the ack. Each delivery runs through the stages of `pipeline`; this module is the setup they
//! share (`Subscriber`) and the loop that feeds them. Acks, confirms and handler calls of different messages overlap; acks go out in
//! batches (see `acks`). While the broker blocks publishing, no call starts and nothing is
//! published (the link's publisher holds back). A channel error stays the size of a channel: the consumer ends and is
//! started again on a fresh channel, and a handler result whose channel died is dropped.

mod acks;
mod delivery;
mod invoke;
mod pause;
mod pipeline;
mod precheck;
mod publish;
mod settle;
mod strikes;

use std::sync::Arc;

use self::acks::Acks;
use self::delivery::ChannelDeath;
use self::pause::{Breaker, Turn};
use self::settle::Settler;
use self::strikes::Strikes;
use anyhow::Context as _;
use arc_swap::ArcSwap;
use futures_util::StreamExt;
use lapin::Connection;
use lapin::message::Delivery;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use tokio::sync::Semaphore;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::broker::{self, Publisher};
use crate::capability::Granted;
use crate::config::{Exchanges, InstanceMode, Subscription};
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
        let (channel, deliveries) = self.open(&link, probing).await?;
        let tag = deliveries.tag();
        let queue = self.sub.queue.as_str();
        debug!(queue, consumer_tag = %tag, "consuming");

        let (acks, ack_task) = Acks::start(channel.clone(), self.hold_limit());
        let death = Arc::new(ChannelDeath::default());
        // The reader always polls the deliveries, so the death of the channel is heard at once
        // even while every handler slot is busy; calls in flight then stop (see `settle`).
        let (mut inbox, reader) = read(deliveries, death.clone());
        let run = Run {
            settler: Arc::new(Settler {
                link,
                channel: Arc::new(channel),
                acks,
                death,
            }),
            tasks: TaskTracker::new(),
        };
        let sweeping = cancel.child_token();
        run.tasks.spawn(
            self.clone()
                .sweep(run.settler.link.clone(), sweeping.clone()),
        );
        let result = self.dispatch(&run, &mut inbox, &cancel, probing).await;
        sweeping.cancel();
        // Stop new deliveries; what was prefetched but not started goes back when the channel
        // closes. In-flight calls finish (bounded by their timeout) and settle.
        if result.is_ok() {
            let _ = run
                .settler
                .channel
                .basic_cancel(tag.clone(), BasicCancelOptions::default())
                .await;
        }
        reader.abort();
        run.drain(ack_task).await;
        result
    }

    /// Opens the consumer channel with the prefetch and starts consuming. A missing queue is
    /// handed to the keeper to declare again, so the restart that follows finds it.
    async fn open(
        &self,
        link: &Link,
        probing: bool,
    ) -> anyhow::Result<(lapin::Channel, lapin::Consumer)> {
        let queue = self.sub.queue.as_str();
        let channel = link
            .conn
            .create_channel()
            .await
            .context("opening a consumer channel")?;
        channel
            .basic_qos(
                if probing { 1 } else { self.sub.prefetch },
                BasicQosOptions::default(),
            )
            .await
            .context("setting prefetch")?;
        let consumed = channel
            .basic_consume(
                queue.into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await;
        match consumed {
            Ok(deliveries) => Ok((channel, deliveries)),
            Err(err) => {
                if broker::is_not_found(&err) {
                    let why = format!("queue \"{queue}\" is missing");
                    let _ = link.keeper.repair(&why).await;
                }
                Err(anyhow::Error::new(err).context(format!("consuming {queue}")))
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

    /// The dispatch loop: one call spawned per delivery, never more than `concurrency` at once.
    /// Ok when `cancel` fires; Err when the deliveries end, saying why.
    async fn dispatch(
        self: &Arc<Self>,
        run: &Run,
        inbox: &mut mpsc::UnboundedReceiver<Delivery>,
        cancel: &CancellationToken,
        probing: bool,
    ) -> anyhow::Result<()> {
        let concurrency = if probing { 1 } else { self.sub.concurrency };
        let calls = Arc::new(Semaphore::new(concurrency as usize));
        loop {
            // Take a handler slot first, so a delivery is only taken when it can run.
            let permit = tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                permit = calls.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => return Ok(()), // The semaphore is never closed.
                },
            };
            let delivery = tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                next = inbox.recv() => next,
            };
            let Some(delivery) = delivery else {
                let s = &run.settler;
                return Err(self.reader_ended(&s.death, &s.channel, &s.link).await);
            };
            // While the broker blocks publishing no call starts: its effects could not go out,
            // and after a shutdown meanwhile its redelivery would run it again. A delivery
            // dropped here goes back to the queue when the channel closes.
            tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                _ = run.settler.link.publisher.unblocked() => {}
            }
            run.settler.acks.received(delivery.delivery_tag);
            let this = self.clone();
            let settler = run.settler.clone();
            run.tasks.spawn(async move {
                // Boxed: the call's future is ~6 KiB, and spawning moves the task's future
                // several times, a memcpy each (with 22 KiB, a quarter of the host's CPU).
                Box::pin(this.handle(delivery, &settler, permit)).await;
            });
        }
    }
}

/// What one run of a consumer shares between its dispatch loop, its calls and its drain.
struct Run {
    settler: Arc<Settler>,
    tasks: TaskTracker,
}

impl Run {
    /// Waits for every call in flight to settle, then sends the last acks and closes the
    /// channel, so no settled message is left unacked by the close.
    async fn drain(self, ack_task: tokio::task::JoinHandle<()>) {
        self.tasks.close();
        self.tasks.wait().await;
        // Every handler has settled: the last acks go out before the channel closes.
        self.settler.acks.close();
        let _ = ack_task.await;
        let _ = self.settler.channel.close(200, "bye".into()).await;
    }
}

/// Moves deliveries from lapin's consumer into a channel the dispatch loop takes them from
/// (lapin buffers at most the prefetch window anyway); records the error that ends them.
fn read(
    mut deliveries: lapin::Consumer,
    death: Arc<ChannelDeath>,
) -> (
    mpsc::UnboundedReceiver<Delivery>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        while let Some(next) = deliveries.next().await {
            match next {
                Ok(delivery) => {
                    if tx.send(delivery).is_err() {
                        return;
                    }
                }
                Err(err) => {
                    death.record(&err);
                    return;
                }
            }
        }
    });
    (rx, reader)
}

impl Subscriber {
    /// Why the deliveries ended: the channel died, or the broker cancelled the consumer (its
    /// queue was deleted: declared again before the consumer restarts).
    async fn reader_ended(
        &self,
        death: &ChannelDeath,
        channel: &lapin::Channel,
        link: &Link,
    ) -> anyhow::Error {
        let queue = self.sub.queue.as_str();
        if let Some(text) = death.text() {
            return anyhow::anyhow!("consuming {queue}: {text}");
        }
        if channel.status().connected() {
            let why = format!("the broker cancelled the consumer of \"{queue}\"");
            let _ = link.keeper.repair(&why).await;
            return anyhow::anyhow!("{why}");
        }
        anyhow::anyhow!("the channel of {queue} closed")
    }
}
