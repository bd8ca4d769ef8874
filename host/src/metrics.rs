//! Prometheus metrics and the health state behind `/metrics`, `/healthz` and `/readyz`.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::reload::PluginSet;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueOutcome {
    queue: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabel {
    queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabel {
    plugin: String,
    sha256: String,
}

fn duration_histogram() -> Histogram {
    // 100 µs .. ~26 s.
    Histogram::new(exponential_buckets(0.0001, 4.0, 10))
}

/// Every metric the host exports, plus what readiness is judged on.
pub struct Metrics {
    registry: Registry,
    messages: Family<QueueOutcome, Counter>,
    retries: Family<QueueLabel, Counter>,
    failed: Family<QueueLabel, Counter>,
    duration: Family<QueueLabel, Histogram, fn() -> Histogram>,
    in_flight: Family<QueueLabel, Gauge>,
    reloads: Family<ResultLabel, Counter>,
    connected: Gauge,
    consumers: AtomicI64,
    plugin_info: Family<PluginLabel, Gauge>,
    expected_consumers: AtomicI64,
    started: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("worker");
        let messages = Family::<QueueOutcome, Counter>::default();
        let retries = Family::<QueueLabel, Counter>::default();
        let failed = Family::<QueueLabel, Counter>::default();
        let duration = Family::<QueueLabel, Histogram, fn() -> Histogram>::new_with_constructor(
            duration_histogram,
        );
        let in_flight = Family::<QueueLabel, Gauge>::default();
        let reloads = Family::<ResultLabel, Counter>::default();
        let connected = Gauge::default();
        let plugin_info = Family::<PluginLabel, Gauge>::default();
        registry.register(
            "messages",
            "Messages handled, by queue and outcome",
            messages.clone(),
        );
        registry.register(
            "retries",
            "Messages sent round a retry queue",
            retries.clone(),
        );
        registry.register(
            "failed",
            "Messages parked in <queue>@failed",
            failed.clone(),
        );
        registry.register(
            "handler_duration_seconds",
            "Wall-clock time of one handler call",
            duration.clone(),
        );
        registry.register("in_flight", "Handler calls running now", in_flight.clone());
        registry.register(
            "plugin_reloads",
            "Plugin reloads by result",
            reloads.clone(),
        );
        registry.register(
            "broker_connected",
            "1 while connected to RabbitMQ",
            connected.clone(),
        );
        registry.register(
            "plugin_info",
            "The plugin versions serving now",
            plugin_info.clone(),
        );
        Metrics {
            registry,
            messages,
            retries,
            failed,
            duration,
            in_flight,
            reloads,
            connected,
            consumers: AtomicI64::new(0),
            plugin_info,
            expected_consumers: AtomicI64::new(0),
            started: AtomicBool::new(false),
        }
    }

    /// The per-message metrics of `queue`, looked up once so the hot path does no label
    /// allocation or map lookup.
    pub fn for_queue(&self, queue: &str) -> QueueMetrics {
        let label = QueueLabel {
            queue: queue.to_string(),
        };
        let outcome = |outcome: &str| {
            self.messages
                .get_or_create(&QueueOutcome {
                    queue: queue.to_string(),
                    outcome: outcome.to_string(),
                })
                .clone()
        };
        QueueMetrics {
            ok: outcome("ok"),
            retry: outcome("retry"),
            fail: outcome("fail"),
            exhausted: outcome("retries-exhausted"),
            requeued: outcome("requeued"),
            retries: self.retries.get_or_create(&label).clone(),
            failed: self.failed.get_or_create(&label).clone(),
            duration: self.duration.get_or_create(&label).clone(),
            in_flight: self.in_flight.get_or_create(&label).clone(),
        }
    }

    /// The broker connection went up or down.
    pub fn set_connected(&self, up: bool) {
        self.connected.set(i64::from(up));
    }

    /// How many consumers should run, and how many do.
    pub fn set_consumers(&self, expected: usize, running: usize) {
        self.expected_consumers
            .store(expected as i64, Ordering::Relaxed);
        self.consumers.store(running as i64, Ordering::Relaxed);
        self.started.store(true, Ordering::Relaxed);
    }

    /// Ready: connected, and every subscription has a consumer.
    pub fn ready(&self) -> bool {
        self.started.load(Ordering::Relaxed)
            && self.connected.get() == 1
            && self.consumers.load(Ordering::Relaxed)
                >= self.expected_consumers.load(Ordering::Relaxed)
    }

    /// Prometheus text, with the reload counters and plugin versions read at scrape time.
    pub fn encode(&self, plugins: Option<&PluginSet>) -> String {
        if let Some(plugins) = plugins {
            let stats = &plugins.stats;
            // The reloader keeps the counts; mirror them so the type is `counter` (`_total`).
            for (result, counter) in [
                ("ok", &stats.ok),
                ("failed", &stats.failed),
                ("unchanged", &stats.unchanged),
            ] {
                self.reloads
                    .get_or_create(&ResultLabel {
                        result: result.to_string(),
                    })
                    .inner()
                    .store(counter.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            self.plugin_info.clear();
            for (plugin, sha256) in plugins.versions() {
                self.plugin_info
                    .get_or_create(&PluginLabel { plugin, sha256 })
                    .set(1);
            }
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// One queue's handles into the families above (each an `Arc` to the same series).
#[derive(Clone)]
pub struct QueueMetrics {
    ok: Counter,
    retry: Counter,
    fail: Counter,
    exhausted: Counter,
    requeued: Counter,
    retries: Counter,
    failed: Counter,
    duration: Histogram,
    in_flight: Gauge,
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

    /// A message was parked as `fail` without a handler call (it could not be decoded).
    pub fn parked_unhandled(&self) {
        self.fail.inc();
        self.failed.inc();
    }

    /// A message was settled with `outcome` (`ok`, `retry`, `fail`, `retries-exhausted`) after
    /// a call of `elapsed`.
    pub fn handled(&self, outcome: &str, elapsed: Duration) {
        self.duration.observe(elapsed.as_secs_f64());
        match outcome {
            "ok" => {
                self.ok.inc();
            }
            "retry" => {
                self.retry.inc();
                self.retries.inc();
            }
            "fail" => {
                self.fail.inc();
                self.failed.inc();
            }
            _ => {
                self.exhausted.inc();
                self.failed.inc();
            }
        }
    }
}

/// Decrements the in-flight gauge when dropped.
pub struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}
