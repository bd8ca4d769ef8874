//! Acknowledging one consumer channel's deliveries: one `basic.ack` with `multiple=true` per
//! contiguous run of settled delivery tags, sent in order by a single task.
//!
//! Handler calls finish out of order, so a tag is only covered by a multiple-ack once every
//! lower tag is settled. RabbitMQ closes the channel on an ack of an unknown tag, and a
//! multiple-ack whose own tag was already acked is one, so a batch always ends on a tag that
//! nothing acked yet. A settled message stuck behind a slow one is not held for long: after
//! [`MAX_HOLD`], or once too many wait, the waiting ones are acked one by one, so a single slow
//! call never eats the prefetch window.
//!
//! Calls run in place on the host's own consume thread (`inline`) settle quietly: the thread
//! flushes the book itself after each read ([`Acks::flush`]), so the ack task is not woken per
//! read. On that connection every ack is queued for the thread while the book is locked,
//! whoever takes it from the book, so they leave in the order they were taken.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tracing::{debug, error};

use super::source::Channel;

/// Longest a settled message waits for a lower tag before it is acked on its own.
const MAX_HOLD: Duration = Duration::from_millis(50);

thread_local! {
    /// Set while this thread runs calls in place: their settles do not wake the ack task, as
    /// the thread flushes the book itself once they are done.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with settles on this thread not waking the ack task; flush the book after it.
pub(super) fn quietly<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            QUIET.with(|q| q.set(self.0));
        }
    }
    let _reset = Reset(QUIET.with(|q| q.replace(true)));
    f()
}

/// Where one delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Its handler has not finished.
    Pending,
    /// Its publishes are confirmed; it waits for a (multiple) ack.
    Settled(Instant),
    /// The broker no longer counts it as unacked (acked on its own, or nacked).
    Done,
}

#[derive(Default)]
struct Book {
    /// Every delivery not yet acked by a multiple-ack, by increasing tag.
    slots: VecDeque<(u64, Slot)>,
    /// How many `slots` are `Settled`.
    settled: usize,
    /// No more deliveries will come: flush and stop.
    closing: bool,
}

impl Book {
    fn slot(&mut self, tag: u64) -> Option<&mut Slot> {
        let i = self.slots.binary_search_by_key(&tag, |(t, _)| *t).ok()?;
        Some(&mut self.slots[i].1)
    }

    /// Drops the settled prefix; returns the tag to ack with `multiple=true`, if any.
    fn take_prefix(&mut self) -> Option<u64> {
        let mut last = None;
        while let Some(&(tag, slot)) = self.slots.front() {
            match slot {
                Slot::Pending => break,
                Slot::Settled(_) => {
                    self.settled -= 1;
                    last = Some(tag);
                }
                Slot::Done => {}
            }
            self.slots.pop_front();
        }
        last
    }

    /// The settled tags to ack one by one now (marked done), and when to look again otherwise.
    fn take_stuck(&mut self, hold_limit: usize, now: Instant) -> (Vec<u64>, Option<Instant>) {
        if self.settled == 0 {
            return (Vec::new(), None);
        }
        let oldest = self
            .slots
            .iter()
            .filter_map(|(_, s)| match s {
                Slot::Settled(at) => Some(*at),
                _ => None,
            })
            .min();
        let due = oldest.map(|at| at + MAX_HOLD);
        if !self.closing && self.settled <= hold_limit && due.is_some_and(|d| d > now) {
            return (Vec::new(), due);
        }
        let mut tags = Vec::with_capacity(self.settled);
        for (tag, slot) in self.slots.iter_mut() {
            if matches!(slot, Slot::Settled(_)) {
                *slot = Slot::Done;
                tags.push(*tag);
            }
        }
        self.settled = 0;
        (tags, None)
    }
}

impl Book {
    /// Everything to send now, the multiple-ack first (every tag acked alone lies above it),
    /// and when to look again otherwise.
    fn take_due(&mut self, hold_limit: usize, now: Instant) -> (Vec<(u64, bool)>, Option<Instant>) {
        let multiple = self.take_prefix();
        let (single, recheck) = self.take_stuck(hold_limit, now);
        let sends = multiple
            .map(|tag| (tag, true))
            .into_iter()
            .chain(single.into_iter().map(|tag| (tag, false)))
            .collect();
        (sends, recheck)
    }
}

struct Shared {
    book: Mutex<Book>,
    wake: Notify,
    /// The consumer channel the deliveries came on.
    channel: Arc<Channel>,
    hold_limit: usize,
}

/// What the ack task takes from the book in one look.
struct Due {
    /// Still to send (a lapin channel; on the host's own connection they were queued already).
    sends: Vec<(u64, bool)>,
    recheck: Option<Instant>,
    closing: bool,
    /// The own connection's thread had ended when they were queued.
    gone: Option<String>,
}

/// A consumer channel's ack book; cheap to clone into handler tasks.
#[derive(Clone)]
pub(super) struct Acks {
    shared: Arc<Shared>,
}

impl Acks {
    /// Starts the ack task of `channel`. Settled messages wait at most [`MAX_HOLD`]; no more
    /// than `hold_limit` of them wait behind an unsettled one.
    pub(super) fn start(
        channel: Arc<Channel>,
        hold_limit: usize,
    ) -> (Acks, tokio::task::JoinHandle<()>) {
        let acks = Acks {
            shared: Arc::new(Shared {
                book: Mutex::new(Book::default()),
                wake: Notify::new(),
                channel,
                hold_limit: hold_limit.max(1),
            }),
        };
        let task = tokio::spawn(acks.clone().run());
        (acks, task)
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        // A panic while holding this lock would be a bug in this module; the book stays
        // consistent anyway (every change is one step), so carry on with it.
        self.shared
            .book
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A delivery arrived; call in delivery order, before its handler runs.
    pub(super) fn received(&self, tag: u64) {
        self.book().slots.push_back((tag, Slot::Pending));
    }

    /// Its publishes are confirmed: ack it (soon, possibly together with others).
    pub(super) fn settled(&self, tag: u64) {
        let mut book = self.book();
        if let Some(slot) = book.slot(tag)
            && *slot == Slot::Pending
        {
            *slot = Slot::Settled(Instant::now());
            book.settled += 1;
        }
        drop(book);
        if !QUIET.with(Cell::get) {
            self.shared.wake.notify_one();
        }
    }

    /// On the host's own consume thread, after calls ran in place: queues the acks due now
    /// (the thread sends them before it waits again). The ack task is woken only when settled
    /// messages are left waiting behind a lower tag, for their [`MAX_HOLD`].
    pub(super) fn flush(&self) {
        let due = self.take_due();
        debug_assert!(
            due.sends.is_empty(),
            "flush is for the host's own connection"
        );
        if due.recheck.is_some() {
            self.shared.wake.notify_one();
        }
    }

    /// Takes what is due from the book; on the host's own connection queues it for the
    /// consume thread before the book is unlocked.
    fn take_due(&self) -> Due {
        let mut book = self.book();
        let (mut sends, recheck) = book.take_due(self.shared.hold_limit, Instant::now());
        let mut gone = None;
        if let Channel::Own(settler) = &*self.shared.channel {
            for (tag, multiple) in sends.drain(..) {
                settler.ack(tag, multiple);
            }
            if !settler.is_open() {
                gone = Some("the consume connection is closed".to_string());
            }
        }
        Due {
            sends,
            recheck,
            closing: book.closing,
            gone,
        }
    }

    /// Requeues it. The nack is sent before the tag leaves the book, so no multiple-ack can
    /// cover it first.
    pub(super) async fn nack_requeue(&self, tag: u64) -> Result<(), String> {
        let sent = self.shared.channel.requeue(tag).await;
        if let Some(slot) = self.book().slot(tag) {
            *slot = Slot::Done;
        }
        self.shared.wake.notify_one();
        sent
    }

    /// No more deliveries: ack what is settled and let the task end. Call once every handler
    /// has settled its message.
    pub(super) fn close(&self) {
        self.book().closing = true;
        self.shared.wake.notify_one();
    }

    async fn run(self) {
        let mut recheck: Option<Instant> = None;
        loop {
            match recheck {
                Some(at) => {
                    let _ = tokio::time::timeout_at(at.into(), self.shared.wake.notified()).await;
                }
                None => self.shared.wake.notified().await,
            }
            // Let handler tasks that are ready settle too, so one ack covers them all.
            tokio::task::yield_now().await;
            let due = self.take_due();
            recheck = due.recheck;
            if let Some(err) = due.gone {
                error!("acks not sent, the broker will redeliver: {err}");
                return;
            }
            for (tag, multiple) in due.sends {
                if let Err(err) = self.shared.channel.ack(tag, multiple).await {
                    // The channel is gone: the broker redelivers, which may duplicate publishes.
                    error!(
                        delivery_tag = tag,
                        "ack failed, the broker will redeliver: {err}"
                    );
                    return;
                }
            }
            if due.closing {
                let left = self.book().slots.len();
                if left > 0 {
                    debug!(
                        left,
                        "deliveries left unacked at close; the broker redelivers them"
                    );
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn book(tags: &[u64]) -> Book {
        let mut b = Book::default();
        for &t in tags {
            b.slots.push_back((t, Slot::Pending));
        }
        b
    }

    fn settle(b: &mut Book, tag: u64, at: Instant) {
        *b.slot(tag).expect("known tag") = Slot::Settled(at);
        b.settled += 1;
    }

    #[test]
    fn acks_only_a_contiguous_settled_prefix() {
        let now = Instant::now();
        let mut b = book(&[1, 2, 3, 4, 5]);
        settle(&mut b, 2, now);
        settle(&mut b, 3, now);
        assert_eq!(b.take_prefix(), None, "1 is not settled");
        settle(&mut b, 1, now);
        assert_eq!(b.take_prefix(), Some(3));
        assert_eq!(b.take_prefix(), None);
        settle(&mut b, 5, now);
        assert_eq!(b.take_prefix(), None, "4 is not settled");
        assert_eq!(b.settled, 1);
    }

    #[test]
    fn a_batch_never_ends_on_a_tag_acked_or_nacked_before() {
        let now = Instant::now();
        let mut b = book(&[1, 2, 3, 4]);
        settle(&mut b, 2, now);
        *b.slot(3).expect("known") = Slot::Done; // nacked
        settle(&mut b, 1, now);
        // 1..=3 leave the book; the batch ends on 2, the last one still unacked.
        assert_eq!(b.take_prefix(), Some(2));
        assert_eq!(b.slots.front().map(|s| s.0), Some(4));

        let mut b = book(&[7, 8]);
        *b.slot(7).expect("known") = Slot::Done;
        *b.slot(8).expect("known") = Slot::Done;
        assert_eq!(b.take_prefix(), None, "nothing left to ack");
        assert!(b.slots.is_empty());
    }

    #[test]
    fn settled_messages_behind_a_slow_one_are_acked_alone_after_a_while() {
        let now = Instant::now();
        let mut b = book(&[1, 2, 3]);
        settle(&mut b, 2, now);
        settle(&mut b, 3, now);
        assert_eq!(b.take_prefix(), None);
        let (single, recheck) = b.take_stuck(10, now);
        assert!(single.is_empty());
        assert_eq!(recheck, Some(now + MAX_HOLD));
        let (single, _) = b.take_stuck(10, now + MAX_HOLD);
        assert_eq!(single, vec![2, 3]);
        // Once 1 settles, the batch ends on 1: 2 and 3 are no longer unacked.
        settle(&mut b, 1, now);
        assert_eq!(b.take_prefix(), Some(1));
        assert!(b.slots.is_empty());
    }

    #[test]
    fn too_many_waiting_are_acked_alone_at_once() {
        let now = Instant::now();
        let mut b = book(&[1, 2, 3, 4]);
        for t in 2..=4 {
            settle(&mut b, t, now);
        }
        let (single, _) = b.take_stuck(2, now);
        assert_eq!(single, vec![2, 3, 4]);
        assert_eq!(b.settled, 0);
    }

    #[test]
    fn closing_flushes_everything_settled() {
        let now = Instant::now();
        let mut b = book(&[1, 2]);
        settle(&mut b, 2, now);
        b.closing = true;
        assert_eq!(b.take_prefix(), None);
        assert_eq!(b.take_stuck(10, now).0, vec![2]);
    }
}
