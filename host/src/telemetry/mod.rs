//! OpenTelemetry tracing behind `[tracing]`: the OTLP export, the spans of a delivery and of
//! what it does, and the W3C trace context every message and HTTP request the host sends
//! carries. With tracing off no span is built at all.

mod export;
mod propagation;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use lapin::BasicProperties;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{Protocol, RetryPolicy, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::{Level, Span, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

use export::Counts;
pub(crate) use propagation::{extract_amqp, inject_amqp, inject_http};

static ENABLED: AtomicBool = AtomicBool::new(false);
static COUNTS: OnceLock<Arc<Counts>> = OnceLock::new();

/// Whether spans are built and exported (`[tracing] otlp` is set and the exporter started).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Spans sent to the collector since start.
pub(crate) fn spans_exported() -> u64 {
    COUNTS
        .get()
        .map_or(0, |c| c.exported.load(Ordering::Relaxed))
}

/// Spans dropped since start: the collector was slow, gone or refused them.
pub(crate) fn spans_dropped() -> u64 {
    COUNTS
        .get()
        .map_or(0, |c| c.dropped.load(Ordering::Relaxed))
}

/// A span of this crate when tracing is on, else `Span::none()` (nothing is built).
macro_rules! span {
    ($($arg:tt)*) => {
        if $crate::telemetry::enabled() {
            tracing::info_span!($($arg)*)
        } else {
            tracing::Span::none()
        }
    };
}
pub(crate) use span;

/// The running export; [`Telemetry::shutdown`] sends what is still queued.
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// Starts exporting to `traces_url` (the collector's `/v1/traces`) as `service_name`,
    /// recording `sample_ratio` of new traces, sending from `runtime`; the layer feeds this
    /// crate's spans (and its warnings, as span events) to it.
    pub fn start<S>(
        traces_url: &str,
        service_name: &str,
        sample_ratio: f64,
        runtime: tokio::runtime::Handle,
    ) -> anyhow::Result<(Telemetry, impl Layer<S> + Send + Sync + 'static)>
    where
        S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync + 'static,
    {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(traces_url)
            .with_http_client(export::Client { runtime })
            .with_retry_policy(RetryPolicy::disabled())
            .build()
            .context("cannot set up the OTLP exporter")?;
        let counts = COUNTS.get_or_init(Default::default).clone();
        let resource = Resource::builder()
            .with_service_name(service_name.to_string())
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(export::processor(exporter, counts))
            .with_resource(resource)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                sample_ratio,
            ))))
            .build();
        let tracer = provider.tracer("worker-host");
        let ours = tracing_subscriber::filter::filter_fn(|meta| {
            meta.target().starts_with("worker_host")
                && (meta.is_span() || *meta.level() <= Level::WARN)
        });
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_filter(ours);
        ENABLED.store(true, Ordering::Relaxed);
        Ok((Telemetry { provider }, layer))
    }

    /// Exports what is queued, waiting at most a few seconds.
    pub fn shutdown(self) {
        ENABLED.store(false, Ordering::Relaxed);
        let _ = self.provider.shutdown_with_timeout(Duration::from_secs(3));
    }
}

/// The consumer span of one delivery: the child of the `traceparent` the message carries (a
/// new trace when it carries none), its trace id recorded so every log line of the delivery
/// shows it.
pub(crate) fn delivery_span(
    queue: &str,
    routing_key: &str,
    properties: &BasicProperties,
    attempt: u32,
) -> Span {
    if !enabled() {
        return Span::none();
    }
    let message_id = properties.message_id().as_ref().map_or("", |s| s.as_str());
    let span = tracing::info_span!(
        "delivery",
        otel.name = %format_args!("{queue} process"),
        otel.kind = "consumer",
        otel.status_code = tracing::field::Empty,
        messaging.system = "rabbitmq",
        messaging.operation.type = "process",
        messaging.destination.name = queue,
        messaging.rabbitmq.destination.routing_key = routing_key,
        messaging.message.id = message_id,
        worker.attempt = attempt,
        worker.outcome = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    let parent = extract_amqp(properties.headers().as_ref());
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
    let trace_id = span.context().span().span_context().trace_id();
    span.record("trace_id", tracing::field::display(trace_id));
    span
}

/// Records how the current delivery ended (`ok`, `retry`, `fail`, ...) on its span.
pub(crate) fn outcome(span: &Span, outcome: &str) {
    span.record("worker.outcome", outcome);
    if outcome != "ok" {
        span.record("otel.status_code", "ERROR");
    }
}

/// The producer span of a publish made while handling a delivery, and the properties with its
/// trace context. Outside a delivery (the delay mover, the outbox sweeper, a replay) the
/// message keeps the context it has, so its trace goes on unbroken.
pub(crate) fn publish_span(
    exchange: &str,
    routing_key: &str,
    properties: BasicProperties,
) -> (Span, BasicProperties) {
    if !enabled() || Span::current().is_none() {
        return (Span::none(), properties);
    }
    let destination = if exchange.is_empty() {
        "(default)"
    } else {
        exchange
    };
    let span = tracing::info_span!(
        "publish",
        otel.name = %format_args!("{destination} send"),
        otel.kind = "producer",
        otel.status_code = tracing::field::Empty,
        messaging.system = "rabbitmq",
        messaging.operation.type = "send",
        messaging.destination.name = exchange,
        messaging.rabbitmq.destination.routing_key = routing_key,
        error.type = tracing::field::Empty,
    );
    let mut headers = properties.headers().clone().unwrap_or_default();
    inject_amqp(&span, &mut headers);
    (span, properties.with_headers(headers))
}

/// Marks `span` failed, with a short kind of error.
pub(crate) fn failed(span: &Span, kind: &str) {
    span.record("otel.status_code", "ERROR");
    span.record("error.type", kind);
}
