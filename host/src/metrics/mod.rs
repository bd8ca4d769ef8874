//! Prometheus metrics and the health state behind `/metrics`, `/healthz` and `/readyz`.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

mod capability;
mod queue;
#[cfg(test)]
mod tests;

use crate::telemetry;

pub(crate) use capability::CapabilityOk;
pub(crate) use queue::{QueueCounts, QueueMetrics, unix_millis};

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
struct CapabilityCall {
    capability: String,
    store: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CapabilityStore {
    capability: String,
    store: String,
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

/// How a message was settled: the `outcome` label of `worker_messages_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    Ok,
    Retry,
    Fail,
    RetriesExhausted,
}

impl Settled {
    /// The `outcome` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Settled::Ok => "ok",
            Settled::Retry => "retry",
            Settled::Fail => "fail",
            Settled::RetriesExhausted => "retries-exhausted",
        }
    }
}

/// What the plugin reloader reports at scrape time.
pub struct PluginReport {
    /// Reloads by result (`ok`, `failed`, `unchanged`), counted since start.
    pub reloads: [(&'static str, u64); 3],
    /// The plugin files serving now and their versions' sha256.
    pub versions: Vec<(String, String)>,
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
    blocked: Gauge,
    repairing: Gauge,
    topology_repairs: Counter,
    dropped: Family<QueueLabel, Counter>,
    duplicates: Family<QueueLabel, Counter>,
    without_id: Family<QueueLabel, Counter>,
    paused: Family<QueueLabel, Gauge>,
    /// When each queue last settled a message ok (Unix milliseconds); not exported, the
    /// console's overview shows it.
    last_ok: Family<QueueLabel, Gauge>,
    blocked_reason: std::sync::Mutex<String>,
    consumers: AtomicI64,
    plugin_info: Family<PluginLabel, Gauge>,
    expected_consumers: AtomicI64,
    started: AtomicBool,
    capability_calls: Family<CapabilityCall, Counter>,
    capability_seconds: Family<CapabilityStore, Histogram, fn() -> Histogram>,
    capability_up: Family<CapabilityStore, Gauge>,
    /// Mirrors of the span export's own counts (`telemetry`), set at scrape time.
    spans_exported: Counter,
    spans_dropped: Counter,
    /// `capability.store` -> why it is unavailable.
    capability_down: std::sync::Mutex<std::collections::BTreeMap<String, String>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Metrics {
        let mut metrics = Metrics {
            registry: Registry::with_prefix("worker"),
            messages: Family::default(),
            retries: Family::default(),
            failed: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            in_flight: Family::default(),
            reloads: Family::default(),
            connected: Gauge::default(),
            blocked: Gauge::default(),
            repairing: Gauge::default(),
            topology_repairs: Counter::default(),
            dropped: Family::default(),
            duplicates: Family::default(),
            without_id: Family::default(),
            paused: Family::default(),
            last_ok: Family::default(),
            blocked_reason: std::sync::Mutex::new(String::new()),
            consumers: AtomicI64::new(0),
            plugin_info: Family::default(),
            expected_consumers: AtomicI64::new(0),
            started: AtomicBool::new(false),
            capability_calls: Family::default(),
            capability_seconds: Family::new_with_constructor(duration_histogram),
            capability_up: Family::default(),
            spans_exported: Counter::default(),
            spans_dropped: Counter::default(),
            capability_down: std::sync::Mutex::new(Default::default()),
        };
        // Registration order is the order of /metrics.
        metrics.register_broker_trouble();
        metrics.register_messages();
        metrics.register_service_state();
        metrics.register_capabilities();
        metrics.register_tracing();
        metrics
    }

    fn register_tracing(&mut self) {
        self.registry.register(
            "trace_spans_exported",
            "Spans sent to the OpenTelemetry collector ([tracing] otlp)",
            self.spans_exported.clone(),
        );
        self.registry.register(
            "trace_spans_dropped",
            "Spans dropped because the collector was slow, gone or refused them",
            self.spans_dropped.clone(),
        );
    }

    fn register_capabilities(&mut self) {
        self.registry.register(
            "capability_calls",
            "Calls plugins made to HTTP, key-value stores and SQL databases, by result",
            self.capability_calls.clone(),
        );
        self.registry.register(
            "capability_call_seconds",
            "How long plugins' HTTP, key-value and SQL calls took",
            self.capability_seconds.clone(),
        );
        self.registry.register(
            "capability_up",
            "1 while a key-value store or SQL database answers, 0 while it is unavailable",
            self.capability_up.clone(),
        );
    }

    /// One call a plugin made to a capability: `result` is `ok` or the error kind.
    pub fn capability_call(&self, capability: &str, store: &str, result: &str, elapsed: Duration) {
        self.capability_calls
            .get_or_create(&CapabilityCall {
                capability: capability.to_string(),
                store: store.to_string(),
                result: result.to_string(),
            })
            .inc();
        self.capability_seconds
            .get_or_create(&CapabilityStore {
                capability: capability.to_string(),
                store: store.to_string(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// A store or database answered (`None`) or is unavailable (`Some(why)`); `/readyz` reports
    /// the unavailable ones.
    pub fn set_capability_health(&self, capability: &str, store: &str, down: Option<&str>) {
        self.capability_up
            .get_or_create(&CapabilityStore {
                capability: capability.to_string(),
                store: store.to_string(),
            })
            .set(i64::from(down.is_none()));
        let key = format!("{capability}.{store}");
        let mut map = self
            .capability_down
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match down {
            Some(why) => {
                map.insert(key, why.to_string());
            }
            None => {
                map.remove(&key);
            }
        }
    }

    /// The stores and databases unavailable now: `capability.store` -> why.
    pub(crate) fn unavailable(&self) -> std::collections::BTreeMap<String, String> {
        let down = self.capability_down.lock();
        down.unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// What goes wrong with the broker and is worked around: alarms, repairs, dead channels.
    fn register_broker_trouble(&mut self) {
        self.registry.register(
            "broker_blocked",
            "1 while RabbitMQ blocks publishing (a memory or disk alarm)",
            self.blocked.clone(),
        );
        self.registry.register(
            "topology_repairing",
            "1 while missing queues or exchanges are being declared again",
            self.repairing.clone(),
        );
        self.registry.register(
            "topology_repairs",
            "Times the declared topology was found incomplete and declared again",
            self.topology_repairs.clone(),
        );
        self.registry.register(
            "dropped_results",
            "Handler results dropped because their channel died (the broker redelivers)",
            self.dropped.clone(),
        );
        self.registry.register(
            "duplicates",
            "Deliveries the outbox had already recorded as handled: acked without a handler call",
            self.duplicates.clone(),
        );
        self.registry.register(
            "subscription_paused",
            "1 while a subscription takes no deliveries after pause_after answers in a row that were not ok",
            self.paused.clone(),
        );
        self.registry.register(
            "outbox_without_id",
            "Messages without a message id under the outbox: handled, but not deduplicated",
            self.without_id.clone(),
        );
    }

    /// Per-queue message counts, handler durations and calls in flight.
    fn register_messages(&mut self) {
        self.registry.register(
            "messages",
            "Messages handled, by queue and outcome",
            self.messages.clone(),
        );
        self.registry.register(
            "retries",
            "Messages sent round a retry queue",
            self.retries.clone(),
        );
        self.registry.register(
            "failed",
            "Messages parked in <queue>@failed",
            self.failed.clone(),
        );
        self.registry.register(
            "handler_duration_seconds",
            "Wall-clock time of one handler call",
            self.duration.clone(),
        );
        self.registry.register(
            "in_flight",
            "Handler calls running now",
            self.in_flight.clone(),
        );
    }

    /// Plugin reloads and versions, and the broker connection.
    fn register_service_state(&mut self) {
        self.registry.register(
            "plugin_reloads",
            "Plugin reloads by result",
            self.reloads.clone(),
        );
        self.registry.register(
            "broker_connected",
            "1 while connected to RabbitMQ",
            self.connected.clone(),
        );
        self.registry.register(
            "plugin_info",
            "The plugin versions serving now",
            self.plugin_info.clone(),
        );
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
            dropped: self.dropped.get_or_create(&label).clone(),
            duplicates: self.duplicates.get_or_create(&label).clone(),
            without_id: self.without_id.get_or_create(&label).clone(),
            paused: self.paused.get_or_create(&label).clone(),
            last_ok: self.last_ok.get_or_create(&label).clone(),
        }
    }

    /// RabbitMQ blocked publishing (`Some(reason)`) or unblocked it (`None`).
    pub fn set_blocked(&self, reason: Option<&str>) {
        self.blocked.set(i64::from(reason.is_some()));
        let mut text = self
            .blocked_reason
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *text = reason.unwrap_or_default().to_string();
    }

    /// Missing topology is being declared again (true), or that ended (false).
    pub fn set_repairing(&self, repairing: bool) {
        self.repairing.set(i64::from(repairing));
        if repairing {
            self.topology_repairs.inc();
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

    /// Ready: connected, publishing not blocked, topology complete, and every subscription
    /// has a consumer. Otherwise the reason.
    pub fn readiness(&self) -> Result<(), String> {
        if !self.started.load(Ordering::Relaxed) {
            return Err("starting".into());
        }
        if self.connected.get() != 1 {
            return Err("not connected to RabbitMQ".into());
        }
        if self.blocked.get() == 1 {
            let reason = self
                .blocked_reason
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            return Err(format!("RabbitMQ blocks publishing: {reason}"));
        }
        if self.repairing.get() == 1 {
            return Err("declaring missing queues or exchanges again".into());
        }
        let running = self.consumers.load(Ordering::Relaxed);
        let expected = self.expected_consumers.load(Ordering::Relaxed);
        if running < expected {
            return Err(format!("{running} of {expected} subscriptions consuming"));
        }
        let down = self
            .capability_down
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !down.is_empty() {
            let list: Vec<String> = down.iter().map(|(k, why)| format!("[{k}] {why}")).collect();
            return Err(format!("unavailable: {}", list.join("; ")));
        }
        Ok(())
    }

    /// See [`Metrics::readiness`].
    pub fn ready(&self) -> bool {
        self.readiness().is_ok()
    }

    /// Prometheus text, with the plugin reload counts and versions read at scrape time.
    pub fn encode(&self, plugins: Option<&PluginReport>) -> String {
        if let Some(plugins) = plugins {
            // The reloader keeps the counts; mirror them so the type is `counter` (`_total`).
            for (result, count) in plugins.reloads {
                self.reloads
                    .get_or_create(&ResultLabel {
                        result: result.to_string(),
                    })
                    .inner()
                    .store(count, Ordering::Relaxed);
            }
            self.plugin_info.clear();
            for (plugin, sha256) in &plugins.versions {
                self.plugin_info
                    .get_or_create(&PluginLabel {
                        plugin: plugin.clone(),
                        sha256: sha256.clone(),
                    })
                    .set(1);
            }
        }
        let spans = [
            (&self.spans_exported, telemetry::spans_exported()),
            (&self.spans_dropped, telemetry::spans_dropped()),
        ];
        for (counter, count) in spans {
            counter.inner().store(count, Ordering::Relaxed);
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
