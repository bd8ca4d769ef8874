//! A [`Consume`] on a thread of its own, for async callers: the deliveries of one read are
//! handed over as one batch (one wake-up of the caller per read, where lapin's consumer wakes
//! it per delivery), and acks and rejects queued from any thread go out from that thread,
//! woken once for all that were queued meanwhile. An [`Inline`] hook may take deliveries on the
//! thread itself first (the consumer runs short calls in place there): only what it leaves is
//! handed over, and what it settles meanwhile goes out before the thread waits again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::ThreadId;

use tokio::sync::mpsc;

use super::consume::{Consume, Delivery};
use super::{Waker, WireError};

/// An ack or a reject, queued for the consume thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settle {
    Ack {
        tag: u64,
        multiple: bool,
    },
    Reject {
        tag: u64,
        requeue: bool,
    },
    /// basic.cancel: no more deliveries, the connection stays for acks.
    Cancel,
}

/// What the caller's side and the consume thread share.
struct Control {
    queue: Mutex<Vec<Settle>>,
    waker: Waker,
    /// Asked to close the connection (after what was queued before is sent).
    stop: AtomicBool,
    /// The consume thread still runs: acks can still go out.
    open: AtomicBool,
    /// The consume thread, which need not wake itself: it sends what is queued before it
    /// waits again.
    thread: OnceLock<ThreadId>,
}

/// Takes deliveries on the consume thread, before they are handed over.
pub trait Inline: Send + 'static {
    /// Called on the consume thread with the deliveries of one read, in order; what it leaves
    /// in `batch` goes to [`Feed::next`], in order. Anything it settles through the feed's
    /// [`Settler`] is sent before the thread reads again.
    fn take(&mut self, batch: &mut Vec<Delivery>);
}

/// The deliveries of a consume thread, batch by batch; dropping it stops the thread.
pub struct Feed {
    batches: mpsc::UnboundedReceiver<Result<Vec<Delivery>, WireError>>,
    settler: Settler,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Acks and rejects for a [`Feed`]'s deliveries, from any thread or task; cheap to clone.
#[derive(Clone)]
pub struct Settler(Arc<Control>);

impl Feed {
    /// Moves `consume` to a thread named `name` that reads until the connection ends or
    /// [`Settler::stop`] is called; each read's deliveries go through `inline` first.
    pub fn start(
        consume: Consume,
        name: &str,
        inline: Option<Box<dyn Inline>>,
    ) -> std::io::Result<Feed> {
        let control = Arc::new(Control {
            queue: Mutex::new(Vec::new()),
            waker: consume.waker(),
            stop: AtomicBool::new(false),
            open: AtomicBool::new(true),
            thread: OnceLock::new(),
        });
        let (tx, batches) = mpsc::unbounded_channel();
        let shared = control.clone();
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let _ = shared.thread.set(std::thread::current().id());
                run(consume, &shared, &tx, inline)
            })?;
        Ok(Feed {
            batches,
            settler: Settler(control),
            thread: Some(thread),
        })
    }

    /// The deliveries of the next read; `Err` once, when the connection ended other than by
    /// [`Settler::stop`]; `None` after that, or after a stop.
    pub async fn next(&mut self) -> Option<Result<Vec<Delivery>, WireError>> {
        self.batches.recv().await
    }

    /// What settles this feed's deliveries.
    pub fn settler(&self) -> Settler {
        self.settler.clone()
    }

    /// Stops the thread (sending what was queued, then closing the connection, which gives
    /// unacked deliveries back to their queue) and waits for it to end.
    pub async fn close(mut self) {
        self.settler.stop();
        if let Some(thread) = self.thread.take() {
            // The thread ends within the connection close's own wait (a few seconds).
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        // Not joined here: a drop must not block. The thread ends on its own.
        self.settler.stop();
    }
}

impl Settler {
    fn queue(&self) -> MutexGuard<'_, Vec<Settle>> {
        // The lock is only held to push or to swap the queue out: nothing in between can
        // panic, and the queue stays whole if one did.
        self.0
            .queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn push(&self, settle: Settle) {
        let mut queue = self.queue();
        let first = queue.is_empty();
        queue.push(settle);
        drop(queue);
        // One wake-up for a run of settles: the thread takes the whole queue. The thread
        // itself sends it before it waits again.
        if first && self.0.thread.get() != Some(&std::thread::current().id()) {
            self.0.waker.wake();
        }
    }

    /// Acks `tag`, and with `multiple` every delivery before it.
    pub fn ack(&self, tag: u64, multiple: bool) {
        self.push(Settle::Ack { tag, multiple });
    }

    /// Gives `tag` back to its queue (`requeue`) or drops it.
    pub fn reject(&self, tag: u64, requeue: bool) {
        self.push(Settle::Reject { tag, requeue });
    }

    /// Asks the broker for no more deliveries (after what was queued before); acks still go
    /// out until [`Settler::stop`].
    pub fn cancel(&self) {
        self.push(Settle::Cancel);
    }

    /// Asks the thread to send what is queued and close the connection.
    pub fn stop(&self) {
        self.0.stop.store(true, Ordering::SeqCst);
        self.0.waker.wake();
    }

    /// Whether the consume thread still runs, so a queued ack can still go out.
    pub fn is_open(&self) -> bool {
        self.0.open.load(Ordering::SeqCst)
    }
}

/// The consume thread: settles what was queued, reads, hands each read's deliveries over.
fn run(
    mut consume: Consume,
    control: &Control,
    batches: &mpsc::UnboundedSender<Result<Vec<Delivery>, WireError>>,
    mut inline: Option<Box<dyn Inline>>,
) {
    let ended = loop {
        // Read before the queue is taken: every settle queued before the stop goes out.
        let stopping = control.stop.load(Ordering::SeqCst);
        if let Err(err) = settle_queued(&mut consume, control) {
            break Some(err);
        }
        if stopping {
            break None;
        }
        let mut ready = Vec::new();
        match consume.next(None, &mut ready) {
            Ok(_) if ready.is_empty() => {}
            Ok(_) => {
                if let Some(inline) = inline.as_mut() {
                    inline.take(&mut ready);
                    if ready.is_empty() {
                        continue;
                    }
                }
                if batches.send(Ok(ready)).is_err() {
                    // Nobody takes deliveries any more: what was not acked goes back.
                    break None;
                }
            }
            Err(err) => break Some(err),
        }
    };
    control.open.store(false, Ordering::SeqCst);
    match ended {
        None => {
            let _ = consume.close("worker-host: consumer stopped");
        }
        Some(err) => {
            let _ = batches.send(Err(err));
        }
    }
}

/// Sends every ack and reject queued so far, in the order they were queued.
fn settle_queued(consume: &mut Consume, control: &Control) -> Result<(), WireError> {
    let queued = {
        let mut queue = control
            .queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        std::mem::take(&mut *queue)
    };
    for settle in queued {
        match settle {
            Settle::Ack { tag, multiple } => consume.ack(tag, multiple)?,
            Settle::Reject { tag, requeue } => consume.reject(tag, requeue)?,
            Settle::Cancel => consume.cancel()?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
