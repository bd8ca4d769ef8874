//! The dispatch loop of one consumer run: it takes deliveries straight from lapin's consumer,
//! starts a call for each when a handler slot is free, and runs calls known to be short (see
//! `pace`) inside its own task, the others on a task each. The loop always polls the
//! deliveries, so the death of the channel is heard at once even while every slot is busy.

use std::collections::VecDeque;
use std::sync::Arc;

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Subscriber;
use super::inline::Inline;
use super::pace;
use super::pipeline::Call;
use super::settle::Settler;
use super::source::{Deliveries, Ended};
use crate::broker::Delivery;

/// Most deliveries taken from lapin in one go before the calls run.
const TAKE_AT_ONCE: usize = 256;

/// What one run of a consumer shares between its dispatch loop, its calls and its drain.
pub(super) struct Run {
    pub settler: Arc<Settler>,
    /// Calls that got a task of their own.
    pub tasks: TaskTracker,
    /// Calls that run in the dispatch loop's task.
    pub here: Here,
    /// The handler slots: never more than `concurrency` calls at once, wherever they run.
    pub slots: Arc<Semaphore>,
    /// On the host's own consume connection: calls run in place on its thread.
    pub inline: Option<Inline>,
}

/// The calls run in the consumer's own task, polled by the dispatch loop.
#[derive(Default)]
pub(super) struct Here(FuturesUnordered<Call>);

impl Here {
    /// Runs the calls left until each has settled its message.
    pub(super) async fn finish(&mut self) {
        while self.0.next().await.is_some() {}
    }
}

impl Run {
    /// Waits for every call in flight to settle, then sends the last acks and closes the
    /// channel, so no settled message is left unacked by the close.
    pub(super) async fn drain(mut self, ack_task: tokio::task::JoinHandle<()>) {
        self.here.finish().await;
        self.tasks.close();
        self.tasks.wait().await;
        // Every handler has settled: the last acks go out before the channel closes.
        self.settler.acks.close();
        let _ = ack_task.await;
        self.settler.channel.close().await;
    }
}

impl Subscriber {
    /// The dispatch loop: never more than `concurrency` calls at once. Ok when `cancel` fires;
    /// Err when the deliveries end, saying why. Calls still running are left in `run`.
    pub(super) async fn dispatch(
        self: &Arc<Self>,
        run: &mut Run,
        deliveries: &mut Deliveries,
        cancel: &CancellationToken,
    ) -> anyhow::Result<()> {
        let slots = run.slots.clone();
        let publisher = run.settler.link.publisher.clone();
        // Taken from lapin (which holds at most the prefetch window anyway), not started yet.
        let mut waiting: VecDeque<Delivery> = VecDeque::new();
        loop {
            // While the broker blocks publishing no call starts: its effects could not go out,
            // and after a shutdown meanwhile its redelivery would run it again. A delivery left
            // waiting goes back to the queue when the channel closes.
            while !waiting.is_empty() && !publisher.is_blocked() {
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    break;
                };
                if let Some(delivery) = waiting.pop_front() {
                    self.start(run, delivery, permit);
                }
            }
            let startable = !waiting.is_empty();
            let blocked = startable && publisher.is_blocked();
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Ok(()),
                Some(()) = run.here.0.next(), if !run.here.0.is_empty() => {}
                // Everything there is now, so the calls of one read start together and settle
                // under one ack.
                taken = deliveries.take(&mut waiting, TAKE_AT_ONCE) => {
                    if let Err(ended) = taken {
                        return Err(self.deliveries_ended(&run.settler, ended).await);
                    }
                }
                // A slot freed by a call on its own task.
                permit = slots.clone().acquire_owned(), if startable && !blocked => {
                    if let (Ok(permit), Some(delivery)) = (permit, waiting.pop_front()) {
                        self.start(run, delivery, permit);
                    }
                }
                _ = publisher.unblocked(), if blocked => {}
            }
        }
    }

    /// Starts the call of `delivery`: here when calls are short, else on a task of its own.
    fn start(self: &Arc<Self>, run: &Run, delivery: Delivery, permit: OwnedSemaphorePermit) {
        if let Some(inline) = &run.inline {
            inline.started_forwarded();
        }
        let call = self.call(&run.settler, delivery, permit);
        if self.pace.short() {
            run.here.0.push(call);
        } else {
            run.tasks.spawn(call);
        }
    }

    /// Counts a call's time towards where the next calls run.
    pub(super) fn paced(&self, elapsed: std::time::Duration) {
        let queue = self.sub.queue.as_str();
        match self.pace.observe(elapsed) {
            pace::Change::None => {}
            pace::Change::Short(average) => tracing::debug!(
                queue,
                ?average,
                "calls are short: they now run in the consumer's task"
            ),
            pace::Change::Long(average) => tracing::debug!(
                queue,
                ?average,
                "calls take longer: each now gets a task of its own"
            ),
        }
    }

    /// Why the deliveries ended: the channel died, or the broker cancelled the consumer (its
    /// queue was deleted: declared again before the consumer restarts).
    async fn deliveries_ended(&self, settler: &Settler, ended: Ended) -> anyhow::Error {
        let queue = self.sub.queue.as_str();
        let cancelled = match ended {
            Ended::Failed { text, channel_only } => {
                settler.death.record(text, channel_only);
                false
            }
            Ended::Cancelled => true,
            // lapin ends the stream without an error on a cancel, with the channel still open.
            Ended::Closed => settler.channel.connected(),
        };
        if let Some(text) = settler.death.text() {
            return anyhow::anyhow!("consuming {queue}: {text}");
        }
        if cancelled {
            let why = format!("the broker cancelled the consumer of \"{queue}\"");
            let _ = settler.link.keeper.repair(&why).await;
            return anyhow::anyhow!("{why}");
        }
        anyhow::anyhow!("the channel of {queue} closed")
    }
}
