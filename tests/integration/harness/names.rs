//! Names no other test (or earlier run) uses, and one test's private topology derived from
//! such a name: its queue Q, the exchanges of `[exchanges]`, an `out` exchange with a `seen`
//! queue collecting what the plugin published, the parked and retry queues of Q, and deleting
//! all of it when the test ends.

use std::sync::atomic::{AtomicU32, Ordering};

/// The retry delays the tests' subscriptions use, so cleanup finds their retry queues.
const RETRY_DELAYS: [&str; 6] = ["200ms", "300ms", "400ms", "1s", "4s", "30s"];

/// A name no other test (or earlier run) uses: `prefix-<pid>-<n>-<nanos>`.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// One test's private topology, every name under the unique prefix `p`.
pub struct Names {
    pub p: String,
}

impl Names {
    pub fn new(test: &str) -> Names {
        Names { p: unique(test) }
    }
    /// The test's subscription queue.
    pub fn q(&self) -> String {
        format!("{}.q", self.p)
    }
    /// A second subscription queue.
    pub fn q2(&self) -> String {
        format!("{}.q2", self.p)
    }
    pub fn master(&self) -> String {
        format!("{}.master", self.p)
    }
    /// The exchange the plugin publishes to.
    pub fn out(&self) -> String {
        format!("{}.out", self.p)
    }
    /// The queue collecting what reaches `out`.
    pub fn seen(&self) -> String {
        format!("{}.seen", self.p)
    }
    /// Q's parked messages.
    pub fn failed(&self) -> String {
        format!("{}.q@failed", self.p)
    }
    /// Q's retry queue for `delay` (`"30s"`).
    pub fn retry(&self, delay: &str) -> String {
        format!("{}.q@retry.{delay}", self.p)
    }
    /// A routing key under the `<p>.key.*` binding.
    pub fn key(&self) -> String {
        format!("{}.key.x", self.p)
    }

    /// `[broker]` on the test broker.
    pub fn broker_toml(&self) -> String {
        format!("[broker]\nurl = \"{}\"\n\n", super::broker_url())
    }

    /// `[exchanges]`: master, retry and failed under the prefix.
    pub fn exchanges_toml(&self) -> String {
        format!(
            "[exchanges]\nmaster = \"{p}.master\"\nretry = \"{p}.retry\"\nfailed = \"{p}.failed\"\n\n",
            p = self.p
        )
    }

    /// The `out` exchange of `kind` (`fanout` or `topic`) and the `seen` queue bound to all of
    /// it.
    pub fn out_toml(&self, kind: &str) -> String {
        let key = if kind == "topic" { "#" } else { "" };
        format!(
            "[[exchange]]\nname = \"{p}.out\"\ntype = \"{kind}\"\n\n\
             [[queue]]\nname = \"{p}.seen\"\nbindings = [{{ exchange = \"{p}.out\", key = \"{key}\" }}]\n\n",
            p = self.p
        )
    }

    /// `queue`, its parked queue and its retry queues of every delay the tests use.
    pub fn queues_of(queue: &str) -> Vec<String> {
        let mut all = vec![queue.to_string(), format!("{queue}@failed")];
        all.extend(RETRY_DELAYS.iter().map(|d| format!("{queue}@retry.{d}")));
        all
    }

    /// The exchanges under the prefix: master, retry, failed, out.
    pub fn exchanges(&self) -> Vec<String> {
        ["master", "retry", "failed", "out"]
            .iter()
            .map(|e| format!("{}.{e}", self.p))
            .collect()
    }

    /// Deletes each of `queues` with its parked and retry queues, `seen` and the exchanges
    /// (ones already gone, or never made, are ignored).
    pub async fn cleanup(&self, queues: &[String]) {
        let mut all: Vec<String> = queues.iter().flat_map(|q| Names::queues_of(q)).collect();
        all.push(self.seen());
        super::cleanup(&all, &self.exchanges()).await;
    }
}
