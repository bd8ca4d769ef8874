//! Calls run in place on the consume thread of the host's own connection: the batch consumer
//! of docs/performance.md. The thread that read a delivery starts its call right there and
//! polls it once, with the service's runtime entered; a call done by then (an ok WAT or Rust
//! handler, a reused instance) has gone from the socket to the ack book with no task, channel
//! or wake-up, and the thread sends the acks of the read before it waits again. A call not
//! done by then (it waits for I/O, a commit or a confirm, or the engine's epoch tick made it
//! yield) goes on as a task of the run, as every call of the dispatch loop does.
//!
//! A delivery runs in place only while the subscription's calls are short (`pace`), a handler
//! slot is free, the broker does not block publishing, the run is not ending, and no delivery
//! handed to the dispatch loop before it is still waiting there (so calls start in delivery
//! order, and the ack book learns of deliveries in that order). Everything else goes to the
//! dispatch loop, unchanged.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Context;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Subscriber;
use super::acks;
use super::settle::Settler;
use crate::broker::Delivery;
use crate::broker::wire::feed;

/// One consumer run's side of the in-place calls; the hook its consume thread calls shares it.
#[derive(Default)]
pub(super) struct Inline(Arc<Shared>);

#[derive(Default)]
struct Shared {
    /// Deliveries handed to the dispatch loop and not started there yet.
    queued: AtomicUsize,
    /// What calls in place need; `None` before the run is set up and once it ends. Held by
    /// the consume thread while it runs a read's calls.
    ctx: Mutex<Option<Ctx>>,
}

struct Ctx {
    subscriber: Arc<Subscriber>,
    settler: Arc<Settler>,
    slots: Arc<Semaphore>,
    tasks: TaskTracker,
    runtime: tokio::runtime::Handle,
    cancel: CancellationToken,
}

impl Inline {
    /// The hook for the run's feed.
    pub(super) fn hook(&self) -> Box<dyn feed::Inline> {
        Box::new(Hook(self.0.clone()))
    }

    /// From now on the consume thread may run calls of a run in place: settled by `settler`,
    /// in its handler `slots`, those not done at once on its `tasks`. Called on the runtime.
    pub(super) fn arm(
        &self,
        subscriber: &Arc<Subscriber>,
        settler: &Arc<Settler>,
        slots: &Arc<Semaphore>,
        tasks: &TaskTracker,
        cancel: &CancellationToken,
    ) {
        *self.ctx() = Some(Ctx {
            subscriber: subscriber.clone(),
            settler: settler.clone(),
            slots: slots.clone(),
            tasks: tasks.clone(),
            runtime: tokio::runtime::Handle::current(),
            cancel: cancel.clone(),
        });
    }

    /// No call starts in place once this returns, and none is being polled there: a read's
    /// calls take a few milliseconds at most (a call that runs longer yields at the engine's
    /// epoch tick and goes on as a task).
    pub(super) fn disarm(&self) {
        self.ctx().take();
    }

    /// The dispatch loop started one of the deliveries the hook handed it.
    pub(super) fn started_forwarded(&self) {
        self.0.queued.fetch_sub(1, Ordering::AcqRel);
    }

    fn ctx(&self) -> MutexGuard<'_, Option<Ctx>> {
        lock(&self.0)
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, Option<Ctx>> {
    // Setting or taking the option cannot be left half done by a panic.
    shared.ctx.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the consume thread calls with each read's deliveries.
struct Hook(Arc<Shared>);

impl feed::Inline for Hook {
    fn take(&mut self, batch: &mut Vec<Delivery>) {
        let guard = lock(&self.0);
        let started = match guard.as_ref() {
            Some(ctx) if self.0.queued.load(Ordering::Acquire) == 0 => ctx.run_some(batch),
            _ => 0,
        };
        if started > 0
            && let Some(ctx) = guard.as_ref()
        {
            // Their acks, queued for this thread to send before it waits again.
            ctx.settler.acks.flush();
        }
        drop(guard);
        // Handed over, in order, after those started here.
        self.0.queued.fetch_add(batch.len(), Ordering::AcqRel);
    }
}

impl Ctx {
    /// Starts the calls of a prefix of `batch` in place and leaves the rest in it; says how
    /// many started.
    fn run_some(&self, batch: &mut Vec<Delivery>) -> usize {
        let _entered = self.runtime.enter();
        let mut started = 0;
        acks::quietly(|| {
            for delivery in std::mem::take(batch) {
                if !batch.is_empty() || !self.may_start() {
                    batch.push(delivery);
                    continue;
                }
                let Ok(permit) = self.slots.clone().try_acquire_owned() else {
                    batch.push(delivery);
                    continue;
                };
                let mut call = self.subscriber.call(&self.settler, delivery, permit);
                let mut cx = Context::from_waker(std::task::Waker::noop());
                if call.as_mut().poll(&mut cx).is_pending() {
                    // Polled again by the runtime at once, with a waker of its own.
                    self.tasks.spawn(call);
                }
                started += 1;
            }
        });
        started
    }

    fn may_start(&self) -> bool {
        !self.cancel.is_cancelled()
            && self.subscriber.pace.short()
            && !self.settler.link.publisher.is_blocked()
            && self.settler.connected()
    }
}
