//! Acknowledging one consumer channel's deliveries: one `basic.ack` with `multiple=true` per
//! contiguous run of settled delivery tags, sent in order by a single task.
//!
//! Handler calls finish out of order, so a tag is only covered by a multiple-ack once every
//! lower tag is settled. RabbitMQ closes the channel on an ack of an unknown tag, and a
//! multiple-ack whose own tag was already acked is one, so a batch always ends on a tag that
//! nothing acked yet. A settled message stuck behind a slow one is not held for long: after
//! [`MAX_HOLD`], or once too many wait, the waiting ones are acked one by one, so a single slow
//! call never eats the prefetch window.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lapin::Channel;
use lapin::options::{BasicAckOptions, BasicNackOptions};
use tokio::sync::Notify;
use tracing::{debug, error};

/// Longest a settled message waits for a lower tag before it is acked on its own.
const MAX_HOLD: Duration = Duration::from_millis(50);

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

struct Shared {
    book: Mutex<Book>,
    wake: Notify,
    /// The consumer channel the deliveries came on.
    channel: Channel,
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
        channel: Channel,
        hold_limit: usize,
    ) -> (Acks, tokio::task::JoinHandle<()>) {
        let acks = Acks {
            shared: Arc::new(Shared {
                book: Mutex::new(Book::default()),
                wake: Notify::new(),
                channel,
            }),
        };
        let task = tokio::spawn(acks.clone().run(hold_limit.max(1)));
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
        self.shared.wake.notify_one();
    }

    /// Requeues it. The nack is sent before the tag leaves the book, so no multiple-ack can
    /// cover it first.
    pub(super) async fn nack_requeue(&self, tag: u64) -> Result<(), lapin::Error> {
        let sent = self
            .shared
            .channel
            .basic_nack(
                tag,
                BasicNackOptions {
                    requeue: true,
                    ..BasicNackOptions::default()
                },
            )
            .await;
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

    async fn run(self, hold_limit: usize) {
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
            let (multiple, single, closing) = {
                let mut book = self.book();
                let multiple = book.take_prefix();
                let (single, next) = book.take_stuck(hold_limit, Instant::now());
                recheck = next;
                (multiple, single, book.closing)
            };
            // The batch first: every tag acked alone lies above it.
            let sends = multiple
                .map(|tag| (tag, true))
                .into_iter()
                .chain(single.into_iter().map(|tag| (tag, false)));
            for (tag, multiple) in sends {
                let options = BasicAckOptions { multiple };
                if let Err(err) = self.shared.channel.basic_ack(tag, options).await {
                    // The channel is gone: the broker redelivers, which may duplicate publishes.
                    error!(
                        delivery_tag = tag,
                        "ack failed, the broker will redeliver: {err}"
                    );
                    return;
                }
            }
            if closing {
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
