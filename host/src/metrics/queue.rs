//! One queue's handles into the registry's families: what the consumer of that queue counts.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::Settled;

/// One queue's handles into the families above (each an `Arc` to the same series).
#[derive(Clone)]
pub struct QueueMetrics {
    pub(super) ok: Counter,
    pub(super) retry: Counter,
    pub(super) fail: Counter,
    pub(super) exhausted: Counter,
    pub(super) requeued: Counter,
    pub(super) retries: Counter,
    pub(super) failed: Counter,
    pub(super) duration: Histogram,
    pub(super) in_flight: Gauge,
    pub(super) dropped: Counter,
    pub(super) duplicates: Counter,
    pub(super) without_id: Counter,
    pub(super) paused: Gauge,
    /// Unix milliseconds of the last ok; 0 before the first.
    pub(super) last_ok: Gauge,
}

/// What one queue has counted so far, read at once: what the console's overview samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct QueueCounts {
    pub ok: u64,
    pub retry: u64,
    /// Parked: `fail` answers and retries exhausted.
    pub fail: u64,
    pub in_flight: i64,
    pub paused: bool,
    /// Unix milliseconds of the last ok, if any.
    pub last_ok: Option<i64>,
}

impl QueueMetrics {
    /// A handler call starts; the guard ends it.
    pub fn call_started(&self) -> InFlight {
        self.in_flight.inc();
        InFlight(self.in_flight.clone())
    }

    /// A message whose republish failed was left for the broker to redeliver.
    pub fn requeued(&self) {
        self.requeued.inc();
    }

    /// A handler result was dropped because its consumer channel died.
    pub fn dropped(&self) {
        self.dropped.inc();
    }

    /// A delivery the outbox had recorded as handled was acked without a call.
    pub fn duplicate(&self) {
        self.duplicates.inc();
    }

    /// A message without a message id was handled under the outbox.
    pub fn without_id(&self) {
        self.without_id.inc();
    }

    /// The subscription paused (`true`) or took deliveries again.
    pub fn set_paused(&self, paused: bool) {
        self.paused.set(i64::from(paused));
    }

    /// A message was settled with `outcome` (`ok`, `retry`, `fail`, `retries-exhausted`) after
    /// a call of `elapsed` (None: settled without a handler call).
    pub fn handled(&self, outcome: Settled, elapsed: Option<Duration>) {
        if let Some(elapsed) = elapsed {
            self.duration.observe(elapsed.as_secs_f64());
        }
        match outcome {
            Settled::Ok => {
                self.ok.inc();
                self.last_ok.set(unix_millis());
            }
            Settled::Retry => {
                self.retry.inc();
                self.retries.inc();
            }
            Settled::Fail => {
                self.fail.inc();
                self.failed.inc();
            }
            Settled::RetriesExhausted => {
                self.exhausted.inc();
                self.failed.inc();
            }
        }
    }
}

impl QueueMetrics {
    /// The counts so far.
    pub(crate) fn counts(&self) -> QueueCounts {
        let last_ok = self.last_ok.get();
        QueueCounts {
            ok: self.ok.get(),
            retry: self.retry.get(),
            fail: self.fail.get() + self.exhausted.get(),
            in_flight: self.in_flight.get(),
            paused: self.paused.get() == 1,
            last_ok: (last_ok > 0).then_some(last_ok),
        }
    }
}

/// Now in Unix milliseconds (0 on a clock set before 1970).
pub(crate) fn unix_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Decrements the in-flight gauge when dropped.
pub struct InFlight(pub(super) Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}
