//! Getting spans to the collector without ever holding up a message: a bounded hand-off that
//! drops (and counts) spans when the exporter falls behind, the SDK's batching processor on its
//! own thread, and the OTLP/HTTP request sent by hyper on the service's runtime.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use opentelemetry::Context;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Span, SpanData, SpanExporter, SpanProcessor,
};
use tokio::runtime::Handle;

/// Spans waiting for export beyond this are dropped: the queue's memory stays bounded when the
/// collector is slow or gone.
const QUEUE: usize = 4096;
/// How long one export may take, connection included.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// A collector's answer is small; anything larger is not read.
const MAX_RESPONSE: usize = 64 << 10;

/// Spans exported and dropped since start, for `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub exported: AtomicU64,
    pub dropped: AtomicU64,
    /// Spans handed to the batch processor and not yet given to the exporter.
    waiting: AtomicUsize,
}

/// The processor chain: [`Bounded`] in front of the SDK's batch processor, exporting through
/// [`Counting`].
pub(crate) fn processor<E>(exporter: E, counts: Arc<Counts>) -> Bounded
where
    E: SpanExporter + 'static,
{
    let config = BatchConfigBuilder::default()
        // Twice ours, so the SDK's own queue never drops uncounted.
        .with_max_queue_size(QUEUE * 2)
        .with_max_export_batch_size(512)
        .with_scheduled_delay(Duration::from_secs(1))
        .build();
    let counting = Counting {
        inner: exporter,
        counts: counts.clone(),
    };
    let inner = BatchSpanProcessor::builder(counting)
        .with_batch_config(config)
        .build();
    Bounded { inner, counts }
}

/// Hands ended spans to the batch processor while fewer than [`QUEUE`] wait; drops and counts
/// the rest. Never blocks.
#[derive(Debug)]
pub(crate) struct Bounded {
    inner: BatchSpanProcessor,
    counts: Arc<Counts>,
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        let waiting = self.counts.waiting.fetch_add(1, Ordering::AcqRel);
        if waiting >= QUEUE {
            self.counts.waiting.fetch_sub(1, Ordering::AcqRel);
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP exporter, counting what it sent and what it lost.
#[derive(Debug)]
struct Counting<E> {
    inner: E,
    counts: Arc<Counts>,
}

impl<E: SpanExporter> SpanExporter for Counting<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        self.counts.waiting.fetch_sub(n, Ordering::AcqRel);
        let result = self.inner.export(batch).await;
        let counter = match result {
            Ok(()) => &self.counts.exported,
            Err(_) => &self.counts.dropped,
        };
        counter.fetch_add(n as u64, Ordering::Relaxed);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// The exporter's HTTP client: one plain-HTTP/1.1 connection per export, run on the service's
/// runtime (the batch processor's thread has none) and bounded by [`EXPORT_TIMEOUT`].
#[derive(Debug)]
pub(crate) struct Client {
    pub runtime: Handle,
}

#[async_trait::async_trait]
impl HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        // The timer is made on the runtime: this thread has none.
        let work = async move { tokio::time::timeout(EXPORT_TIMEOUT, send(request)).await };
        match self.runtime.spawn(work).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err("the collector did not answer in time".into()),
            Err(e) => Err(format!("export task ended: {e}").into()),
        }
    }
}

async fn send(request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
    let uri = request.uri().clone();
    let host = uri.host().ok_or("the collector URL has no host")?;
    let port = uri.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host, port)).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let conn = tokio::spawn(conn);
    let (mut parts, body) = request.into_parts();
    // The request line carries only the path; Host names the collector.
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = path.parse()?;
    if let Ok(value) = http::HeaderValue::from_str(&format!("{host}:{port}")) {
        parts.headers.insert(http::header::HOST, value);
    }
    let response = sender
        .send_request(http::Request::from_parts(parts, Full::new(body)))
        .await?;
    let (parts, body) = response.into_parts();
    let body = Limited::new(body, MAX_RESPONSE).collect().await?.to_bytes();
    conn.abort();
    Ok(Response::from_parts(parts, body))
}
