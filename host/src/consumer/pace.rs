//! How long a subscription's calls take, as its consumer sees them. Calls known to be short run
//! inside the consumer's own task: no task is spawned and woken per message, so a delivery goes
//! from lapin's consumer to the plugin and to the ack book on one thread. Calls that take
//! longer get a task each, so several of them can use several cores and none holds up the
//! deliveries of the others.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// A subscription whose calls average less than this runs them in the consumer's task.
const SHORT: Duration = Duration::from_micros(200);
/// ... and goes back to a task per call once they average more than this (hysteresis, so a
/// subscription near the bound does not flip at every call).
const LONG: Duration = Duration::from_micros(500);

/// The running average of a subscription's call times; shared by its consumer runs, so it
/// survives reconnects and hot reloads (a slower version pushes it up within a few calls).
///
/// A new subscription counts as short: its first answer sets the average, so a slow plugin
/// costs at most the calls started before that answer sharing one thread.
pub(super) struct Pace {
    /// Exponentially weighted average, in nanoseconds (weight 1/8 for the newest call).
    average_ns: AtomicU64,
    seen: AtomicBool,
    short: AtomicBool,
}

impl Default for Pace {
    fn default() -> Self {
        Pace {
            average_ns: AtomicU64::new(0),
            seen: AtomicBool::new(false),
            short: AtomicBool::new(true),
        }
    }
}

impl Pace {
    /// Whether the next call runs in the consumer's task.
    pub(super) fn short(&self) -> bool {
        self.short.load(Ordering::Relaxed)
    }

    /// Counts one answered call. Calls of one consumer may report concurrently; a lost update
    /// only shifts the average a little.
    pub(super) fn observe(&self, elapsed: Duration) -> Change {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let average = if self.seen.swap(true, Ordering::Relaxed) {
            let old = self.average_ns.load(Ordering::Relaxed);
            old - old / 8 + ns / 8
        } else {
            ns
        };
        self.average_ns.store(average, Ordering::Relaxed);
        let was = self.short();
        let now = if was {
            average <= LONG.as_nanos() as u64
        } else {
            average < SHORT.as_nanos() as u64
        };
        if now == was {
            return Change::None;
        }
        self.short.store(now, Ordering::Relaxed);
        let average = Duration::from_nanos(average);
        if now {
            Change::Short(average)
        } else {
            Change::Long(average)
        }
    }
}

/// What one observation changed.
#[derive(Debug, PartialEq)]
pub(super) enum Change {
    None,
    /// Calls now run in the consumer's task; their average.
    Short(Duration),
    /// Calls now get a task each; their average.
    Long(Duration),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(pace: &Pace, elapsed: Duration, n: u32) -> Vec<Change> {
        (0..n)
            .map(|_| pace.observe(elapsed))
            .filter(|c| *c != Change::None)
            .collect()
    }

    #[test]
    fn a_new_subscription_runs_calls_here_until_its_first_slow_answer() {
        let pace = Pace::default();
        assert!(pace.short());
        assert!(feed(&pace, Duration::from_micros(20), 10).is_empty());
        let pace = Pace::default();
        let changes = feed(&pace, Duration::from_millis(3), 1);
        assert!(matches!(changes[..], [Change::Long(_)]), "{changes:?}");
        assert!(!pace.short());
        // Short answers bring it back once the average falls below the lower bound.
        let changes = feed(&pace, Duration::from_micros(20), 40);
        assert!(matches!(changes[..], [Change::Short(_)]), "{changes:?}");
        assert!(pace.short());
    }

    #[test]
    fn slow_calls_go_back_to_a_task_each_and_the_bounds_do_not_flap() {
        let pace = Pace::default();
        feed(&pace, Duration::from_micros(20), 1);
        assert!(pace.short());
        // Between the two bounds nothing changes either way.
        assert!(feed(&pace, Duration::from_micros(300), 100).is_empty());
        assert!(pace.short());
        let changes = feed(&pace, Duration::from_millis(5), 3);
        assert!(matches!(changes[..], [Change::Long(_)]), "{changes:?}");
        assert!(!pace.short());
        assert!(feed(&pace, Duration::from_micros(300), 100).is_empty());
        assert!(!pace.short());
    }
}
