//! The overview's memory of the last 15 minutes: every `SAMPLE_EVERY` the counters of each
//! subscription (`metrics`) are read into a ring of bounded length, from which rates now and
//! sparklines are computed. Nothing is kept beyond the window, and nothing survives a restart.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::metrics::{Metrics, QueueCounts};

/// How often the counters are read.
pub(super) const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// How far back the sparklines reach.
pub(super) const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Samples kept per subscription: the window, and one more to start its first interval.
const RING: usize = (WINDOW.as_secs() / SAMPLE_EVERY.as_secs()) as usize + 1;
/// Rates "now" are taken over at least this long, so one burst does not read as a spike.
const RATE_OVER: Duration = Duration::from_secs(10);

/// One reading of a subscription's counters.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    ok: u64,
    retry: u64,
    fail: u64,
}

impl Sample {
    fn of(at: Instant, counts: &QueueCounts) -> Sample {
        Sample {
            at,
            ok: counts.ok,
            retry: counts.retry,
            fail: counts.fail,
        }
    }

    /// Per second from `before` to `self`: ok, retry, fail.
    fn rates_since(&self, before: &Sample) -> [f64; 3] {
        let secs = self.at.saturating_duration_since(before.at).as_secs_f64();
        if secs <= 0.0 {
            return [0.0; 3];
        }
        let per = |now: u64, then: u64| now.saturating_sub(then) as f64 / secs;
        [
            per(self.ok, before.ok),
            per(self.retry, before.retry),
            per(self.fail, before.fail),
        ]
    }
}

/// Rates of ok, retry and fail answers, per second.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Rates {
    pub ok: f64,
    pub retry: f64,
    pub fail: f64,
}

impl From<[f64; 3]> for Rates {
    fn from([ok, retry, fail]: [f64; 3]) -> Rates {
        Rates { ok, retry, fail }
    }
}

/// The rings of every subscription, in the order of the config.
pub(super) struct Sampler {
    metrics: Arc<Metrics>,
    queues: Vec<String>,
    rings: Mutex<Vec<VecDeque<Sample>>>,
}

impl Sampler {
    pub(super) fn new(metrics: Arc<Metrics>, queues: Vec<String>) -> Sampler {
        let rings = queues
            .iter()
            .map(|_| VecDeque::with_capacity(RING))
            .collect();
        Sampler {
            metrics,
            queues,
            rings: Mutex::new(rings),
        }
    }

    /// Samples now and every `SAMPLE_EVERY` until `cancel`.
    pub(super) async fn run(self: Arc<Self>, cancel: CancellationToken) {
        let mut every = tokio::time::interval(SAMPLE_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = every.tick() => self.sample(Instant::now()),
            }
        }
    }

    /// The counters of `queue` now.
    pub(super) fn counts(&self, queue: &str) -> QueueCounts {
        self.metrics.for_queue(queue).counts()
    }

    fn sample(&self, at: Instant) {
        let samples: Vec<Sample> = self
            .queues
            .iter()
            .map(|q| Sample::of(at, &self.counts(q)))
            .collect();
        let mut rings = self.lock();
        for (ring, sample) in rings.iter_mut().zip(samples) {
            if ring.len() == RING {
                ring.pop_front();
            }
            ring.push_back(sample);
        }
    }

    /// The rates of subscription `index` now (`counts` read now), over at least `RATE_OVER`
    /// when the ring reaches that far back; and its sparkline, one rate per sample interval,
    /// oldest first.
    pub(super) fn rates(&self, index: usize, counts: &QueueCounts) -> (Rates, Vec<[f64; 3]>) {
        self.rates_at(index, Sample::of(Instant::now(), counts))
    }

    fn rates_at(&self, index: usize, now: Sample) -> (Rates, Vec<[f64; 3]>) {
        let rings = self.lock();
        let Some(ring) = rings.get(index) else {
            return (Rates::default(), Vec::new());
        };
        let since = ring
            .iter()
            .rev()
            .find(|s| now.at.saturating_duration_since(s.at) >= RATE_OVER)
            .or(ring.front());
        let rates = since.map_or([0.0; 3], |s| now.rates_since(s));
        let spark = ring
            .iter()
            .zip(ring.iter().skip(1))
            .map(|(a, b)| b.rates_since(a))
            .collect();
        (rates.into(), spark)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<VecDeque<Sample>>> {
        // Rings are replaced whole under the lock: a panic cannot leave one half-written.
        self.rings.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(ok: u64, retry: u64, fail: u64) -> QueueCounts {
        QueueCounts {
            ok,
            retry,
            fail,
            ..QueueCounts::default()
        }
    }

    fn sampler() -> Sampler {
        Sampler::new(Arc::new(Metrics::new()), vec!["q".into()])
    }

    #[test]
    fn rings_stay_within_the_window_and_rates_are_per_second() {
        let sampler = sampler();
        let start = Instant::now();
        let at = |i: u64| start + SAMPLE_EVERY * u32::try_from(i).expect("small");
        let last = RING as u64 + 10;
        for i in 0..last {
            let mut rings = sampler.lock();
            if rings[0].len() == RING {
                rings[0].pop_front();
            }
            rings[0].push_back(Sample::of(at(i), &counts(10 * i, i, 0)));
        }
        let now = Sample::of(at(last), &counts(10 * last, last - 1, 0));
        let (rates, spark) = sampler.rates_at(0, now);
        assert_eq!(spark.len(), RING - 1, "15 minutes of intervals");
        assert_eq!(spark[0], [2.0, 0.2, 0.0], "10 ok and 1 retry per 5 s");
        assert_eq!(rates.ok, 2.0, "{rates:?}");
        assert!(rates.retry > 0.0 && rates.retry < 0.2, "{rates:?}");
        let back = Sample::of(at(last), &counts(0, 0, 0));
        assert_eq!(
            sampler.rates_at(0, back).0,
            Rates::default(),
            "a counter that went back counts as none"
        );
    }

    #[test]
    fn a_fresh_ring_rates_from_its_first_sample() {
        let sampler = sampler();
        let start = Instant::now();
        sampler.lock()[0].push_back(Sample::of(start, &counts(0, 0, 0)));
        let now = Sample::of(start + SAMPLE_EVERY, &counts(5, 0, 5));
        let (rates, spark) = sampler.rates_at(0, now);
        assert_eq!((rates.ok, rates.fail), (1.0, 1.0));
        assert!(spark.is_empty());
        assert_eq!(sampler.rates(7, &counts(1, 1, 1)).0, Rates::default());
    }

    #[test]
    fn sampling_reads_the_metrics() {
        let sampler = sampler();
        let queue = sampler.metrics.for_queue("q");
        queue.handled(crate::metrics::Settled::Ok, None);
        queue.handled(crate::metrics::Settled::RetriesExhausted, None);
        sampler.sample(Instant::now());
        let rings = sampler.lock();
        let ring = &rings[0];
        assert_eq!((ring[0].ok, ring[0].retry, ring[0].fail), (1, 0, 1));
        assert!(sampler.counts("q").last_ok.is_some());
    }
}
