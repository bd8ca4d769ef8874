//! An OTLP/HTTP trace receiver and an HTTP server that records `traceparent`, for the tracing
//! tests.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;

/// One exported span, its ids as hex.
#[derive(Debug, Clone)]
pub struct Received {
    pub trace: String,
    pub id: String,
    /// Empty for a root span.
    pub parent: String,
    pub name: String,
    /// `consumer`, `producer`, `client`, `internal`, ...
    pub kind: String,
    attrs: BTreeMap<String, String>,
    resource: BTreeMap<String, String>,
}

impl Received {
    /// An attribute as text (empty when missing).
    pub fn attr(&self, key: &str) -> String {
        self.attrs.get(key).cloned().unwrap_or_default()
    }

    pub fn resource(&self, key: &str) -> String {
        self.resource.get(key).cloned().unwrap_or_default()
    }

    /// What the span stands for in the host: `delivery`, `publish`, `plugin`, `http`, `kv`,
    /// `sql`, or its name.
    pub fn role(&self) -> &str {
        match self.kind.as_str() {
            "consumer" => "delivery",
            "producer" => "publish",
            _ if self.name.starts_with("handle ") => "plugin",
            _ if self.attrs.contains_key("http.request.method") => "http",
            _ if self.name.starts_with("kv ") => "kv",
            _ if self.name.starts_with("sql ") => "sql",
            _ => &self.name,
        }
    }
}

/// The spans of one trace received so far.
#[derive(Debug)]
pub struct Tree(Vec<Received>);

impl Tree {
    pub fn count(&self, role: &str) -> usize {
        self.0.iter().filter(|s| s.role() == role).count()
    }

    pub fn all(&self, role: &str) -> Vec<Received> {
        self.0
            .iter()
            .filter(|s| s.role() == role)
            .cloned()
            .collect()
    }

    /// The one span of `role`; fails the test when there are none or several.
    pub fn one(&self, role: &str) -> Received {
        let all = self.all(role);
        assert_eq!(all.len(), 1, "expected one {role} span in {:#?}", self.0);
        all.into_iter().next().expect("one span")
    }

    pub fn span(&self, id: &str) -> Option<Received> {
        self.0.iter().find(|s| s.id == id).cloned()
    }
}

/// An OTLP/HTTP receiver on a free port of 127.0.0.1 (POST /v1/traces, protobuf).
pub struct Collector {
    pub addr: SocketAddr,
    spans: Arc<Mutex<Vec<Received>>>,
}

impl Collector {
    pub async fn start() -> Collector {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new()
            .route("/v1/traces", post(export))
            .with_state(spans.clone());
        let addr = serve(app).await;
        Collector { addr, spans }
    }

    /// Waits (20 s at most) until the spans of `trace` satisfy `done`, and returns them.
    pub async fn wait_tree(&self, trace: &str, done: impl Fn(&Tree) -> bool) -> Tree {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let tree = self.tree(trace);
            if done(&tree) {
                return tree;
            }
            if std::time::Instant::now() >= deadline {
                panic!("the spans of trace {trace} never got there: {tree:#?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn tree(&self, trace: &str) -> Tree {
        let spans = self.spans.lock().expect("spans");
        Tree(spans.iter().filter(|s| s.trace == trace).cloned().collect())
    }
}

async fn export(State(spans): State<Arc<Mutex<Vec<Received>>>>, body: Bytes) -> StatusCode {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return StatusCode::BAD_REQUEST;
    };
    let mut out = spans.lock().expect("spans");
    for resource_spans in request.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                let kind = SpanKind::try_from(span.kind).map_or("?".to_owned(), |k| {
                    k.as_str_name()
                        .trim_start_matches("SPAN_KIND_")
                        .to_ascii_lowercase()
                });
                out.push(Received {
                    trace: hex::encode(&span.trace_id),
                    id: hex::encode(&span.span_id),
                    parent: hex::encode(&span.parent_span_id),
                    name: span.name.clone(),
                    kind,
                    attrs: attributes(&span.attributes),
                    resource: resource.clone(),
                });
            }
        }
    }
    StatusCode::OK
}

fn attributes(list: &[KeyValue]) -> BTreeMap<String, String> {
    list.iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// An HTTP server on a free port of 127.0.0.1 that answers every GET and keeps the
/// `traceparent` of each request.
pub struct HttpServer {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
}

impl HttpServer {
    pub async fn start() -> HttpServer {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new()
            .route("/{*path}", get(hit))
            .with_state(seen.clone());
        let addr = serve(app).await;
        HttpServer { addr, seen }
    }

    pub fn traceparents(&self) -> Vec<String> {
        self.seen.lock().expect("seen").clone()
    }
}

async fn hit(State(seen): State<Arc<Mutex<Vec<String>>>>, headers: HeaderMap) -> &'static str {
    let traceparent = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("(none)");
    seen.lock().expect("seen").push(traceparent.to_owned());
    "hello"
}

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a test server");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// The trace id of a message's `traceparent` header.
pub fn trace_of(headers: &BTreeMap<String, String>) -> Option<String> {
    let value = headers.get("traceparent")?;
    let mut parts = value.split('-');
    let (_, trace) = (parts.next()?, parts.next()?);
    Some(trace.to_owned())
}
