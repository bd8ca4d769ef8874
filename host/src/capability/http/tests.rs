//! The HTTP capability against a local test server, without a wasm guest: the hook's deciding
//! and sending part (`handle`) with plain `http::Request`s. The rules alone are tested in
//! policy.rs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body as AxumBody;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt as _, Empty};
use wasmtime_wasi_http::{Error, WasiBody};

use super::{Grant, Scope, handle};
use crate::capability::Recorder;
use crate::config::{HttpGrant, Origin, OriginHeaders, Secret};
use crate::metrics::Metrics;

/// The cap the tests' grants set.
const CAP: usize = 1024;

/// Requests the test server answered, by route.
#[derive(Default)]
struct Hits {
    echo: AtomicUsize,
    any: AtomicUsize,
}

/// A server on 127.0.0.1:0 with one route per case; its address and hit counts.
async fn server() -> (SocketAddr, Arc<Hits>) {
    let hits = Arc::new(Hits::default());
    let app = Router::new()
        .route("/echo", get(echo))
        .route("/redirect", get(|| async { redirect() }))
        .route("/exact", get(|| async { vec![b'x'; CAP] }))
        .route("/big", get(|| async { vec![b'x'; CAP + 1] }))
        .route("/chunked", get(|| async { chunked(CAP + 1) }))
        .route("/chunked-exact", get(|| async { chunked(CAP) }))
        .route("/slow", get(slow))
        .route("/stall", get(|| async { stall() }))
        .layer(axum::middleware::from_fn_with_state(hits.clone(), count))
        .with_state(hits.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a test server");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, hits)
}

async fn count(
    State(hits): State<Arc<Hits>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    hits.any.fetch_add(1, Ordering::SeqCst);
    next.run(req).await
}

/// The request's `authorization`, `x-guest` and `host` headers, one per line.
async fn echo(State(hits): State<Arc<Hits>>, headers: HeaderMap) -> String {
    hits.echo.fetch_add(1, Ordering::SeqCst);
    let get = |name: &str| {
        let v = headers.get_all(name).iter();
        v.map(|v| v.to_str().unwrap_or("?").to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        "authorization={}\nx-guest={}\nhost={}",
        get("authorization"),
        get("x-guest"),
        get("host")
    )
}

fn redirect() -> impl IntoResponse {
    (StatusCode::FOUND, [(header::LOCATION, "/echo")], "moved")
}

/// `len` bytes in 100-byte chunks, without a Content-Length.
fn chunked(len: usize) -> AxumBody {
    let chunks: Vec<Result<Bytes, std::io::Error>> = vec![b'y'; len]
        .chunks(100)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    AxumBody::from_stream(futures_util::stream::iter(chunks))
}

async fn slow() -> &'static str {
    tokio::time::sleep(Duration::from_secs(30)).await;
    "late"
}

/// A head at once, then one chunk, then nothing for 30 s.
fn stall() -> AxumBody {
    let first = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b"a"))]);
    let never = futures_util::stream::once(async {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok(Bytes::from_static(b"b"))
    });
    AxumBody::from_stream(futures_util::StreamExt::chain(first, never))
}

fn origin(text: &str) -> Origin {
    let (scheme, rest) = text.split_once("://").expect("scheme");
    let (host, port) = rest.rsplit_once(':').expect("port");
    Origin {
        scheme: scheme.into(),
        host: host.trim_start_matches('[').trim_end_matches(']').into(),
        port: (port != "*").then(|| port.parse().expect("port")),
    }
}

fn grant(allowed: &[&str]) -> HttpGrant {
    HttpGrant {
        allowed: allowed.iter().map(|o| origin(o)).collect(),
        headers: Vec::new(),
        max_response: CAP as u64,
        ..HttpGrant::default()
    }
}

fn scope(within: Duration) -> Scope {
    Scope {
        plugin: "test.wasm".into(),
        queue: "http-test".into(),
        deadline: Instant::now() + within,
        capture: None,
        message_id: None,
    }
}

fn request(url: &str) -> Request<WasiBody> {
    let body = Empty::<Bytes>::new().map_err(|never| match never {});
    Request::get(url)
        .body(body.boxed_unsync())
        .expect("a valid request")
}

/// Sends `req` under `config` with a 5 s deadline; the body read in full.
async fn send(config: &HttpGrant, req: Request<WasiBody>) -> Result<(StatusCode, String), Error> {
    send_within(config, req, Duration::from_secs(5)).await
}

async fn send_within(
    config: &HttpGrant,
    req: Request<WasiBody>,
    within: Duration,
) -> Result<(StatusCode, String), Error> {
    let grant = Grant::new(config, Recorder::detached("http", "http-test"));
    let (res, io) = handle(req, Some(&grant), &scope(within), None).await?;
    tokio::spawn(io);
    read(res).await
}

async fn read(res: Response<WasiBody>) -> Result<(StatusCode, String), Error> {
    let status = res.status();
    let body = res.into_body().collect().await?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

#[tokio::test]
async fn allowed_request_reaches_the_server() {
    let (addr, hits) = server().await;
    let config = grant(&[&format!("http://127.0.0.1:{}", addr.port())]);
    let url = format!("http://127.0.0.1:{}/echo", addr.port());
    let (status, body) = send(&config, request(&url)).await.expect("allowed");
    assert_eq!(status, StatusCode::OK);
    assert!(
        body.contains(&format!("host=127.0.0.1:{}", addr.port())),
        "{body}"
    );
    assert_eq!(hits.echo.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn without_a_grant_or_outside_it_requests_are_denied() {
    let (addr, hits) = server().await;
    let port = addr.port();
    let scope = scope(Duration::from_secs(5));
    let none = handle(
        request(&format!("http://127.0.0.1:{port}/echo")),
        None,
        &scope,
        None,
    );
    assert!(matches!(none.await, Err(Error::HttpRequestDenied)));

    let config = grant(&[&format!("http://127.0.0.1:{port}")]);
    for url in [
        format!("http://127.0.0.2:{port}/echo"),
        format!("http://127.0.0.1:{}/echo", port.wrapping_add(1).max(1)),
        format!("https://127.0.0.1:{port}/echo"),
        "http://127.0.0.1/echo".to_string(),
    ] {
        let res = send(&config, request(&url)).await;
        assert!(
            matches!(res, Err(Error::HttpRequestDenied)),
            "{url}: {res:?}"
        );
    }
    assert_eq!(
        hits.any.load(Ordering::SeqCst),
        0,
        "nothing reached the server"
    );
}

#[tokio::test]
async fn a_star_port_allows_any_port() {
    let (addr, hits) = server().await;
    let config = grant(&["http://127.0.0.1:*"]);
    let url = format!("http://127.0.0.1:{}/echo", addr.port());
    let (status, _) = send(&config, request(&url)).await.expect("any port");
    assert_eq!(status, StatusCode::OK);
    assert_eq!(hits.echo.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_redirect_comes_back_to_the_guest_unfollowed() {
    let (addr, hits) = server().await;
    let config = grant(&[&format!("http://127.0.0.1:{}", addr.port())]);
    let url = format!("http://127.0.0.1:{}/redirect", addr.port());
    let grant = Grant::new(&config, Recorder::detached("http", "q"));
    let (res, io) = handle(
        request(&url),
        Some(&grant),
        &scope(Duration::from_secs(5)),
        None,
    )
    .await
    .expect("sent");
    tokio::spawn(io);
    assert_eq!(res.status(), StatusCode::FOUND);
    assert_eq!(res.headers()[header::LOCATION], "/echo");
    assert_eq!(read(res).await.expect("body").1, "moved");
    assert_eq!(
        hits.echo.load(Ordering::SeqCst),
        0,
        "the redirect was followed"
    );
}

#[tokio::test]
async fn a_name_that_resolves_to_loopback_needs_the_address_allowed() {
    let (addr, hits) = server().await;
    let port = addr.port();
    let url = format!("http://localhost:{port}/echo");
    let by_name = grant(&[&format!("http://localhost:{port}")]);
    let res = send(&by_name, request(&url)).await;
    assert!(matches!(res, Err(Error::HttpRequestDenied)), "{res:?}");
    assert_eq!(hits.any.load(Ordering::SeqCst), 0);

    let both = grant(&[
        &format!("http://localhost:{port}"),
        &format!("http://127.0.0.1:{port}"),
    ]);
    let (status, body) = send(&both, request(&url)).await.expect("address allowed");
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains(&format!("host=localhost:{port}")), "{body}");
}

#[tokio::test]
async fn a_content_length_over_the_cap_is_refused_before_reading() {
    let (addr, _) = server().await;
    let config = grant(&[&format!("http://127.0.0.1:{}", addr.port())]);
    let url = |path: &str| format!("http://127.0.0.1:{}/{path}", addr.port());
    let res = send(&config, request(&url("big"))).await;
    assert!(
        matches!(res, Err(Error::HttpResponseBodySize(Some(n))) if n == CAP as u64 + 1),
        "{res:?}"
    );
    let (_, body) = send(&config, request(&url("exact")))
        .await
        .expect("at the cap");
    assert_eq!(body.len(), CAP);
}

#[tokio::test]
async fn a_chunked_body_over_the_cap_fails_at_the_cap() {
    let (addr, _) = server().await;
    let config = grant(&[&format!("http://127.0.0.1:{}", addr.port())]);
    let url = |path: &str| format!("http://127.0.0.1:{}/{path}", addr.port());
    let res = send(&config, request(&url("chunked"))).await;
    assert!(
        matches!(res, Err(Error::HttpResponseBodySize(Some(n))) if n > CAP as u64),
        "{res:?}"
    );
    let (_, body) = send(&config, request(&url("chunked-exact")))
        .await
        .expect("at the cap");
    assert_eq!(body.len(), CAP);
}

#[tokio::test]
async fn the_grants_header_replaces_the_guests_and_reaches_the_server() {
    let (addr, _) = server().await;
    let allowed = format!("http://127.0.0.1:{}", addr.port());
    let mut config = grant(&[&allowed]);
    config.headers.push(OriginHeaders {
        origin: origin(&allowed),
        headers: vec![("Authorization".into(), Secret::new("Bearer s3cret"))],
    });
    let mut req = request(&format!("{allowed}/echo"));
    req.headers_mut()
        .insert("authorization", "Bearer guest".parse().expect("value"));
    req.headers_mut()
        .insert("x-guest", "1".parse().expect("value"));
    let (_, body) = send(&config, req).await.expect("allowed");
    assert!(body.contains("authorization=Bearer s3cret\n"), "{body}");
    assert!(body.contains("x-guest=1\n"), "{body}");

    // Another origin does not get them.
    let mut other = grant(&[&allowed, "http://127.0.0.1:*"]);
    other.headers = vec![OriginHeaders {
        origin: origin("http://127.0.0.1:1"),
        headers: vec![("Authorization".into(), Secret::new("Bearer s3cret"))],
    }];
    let (_, body) = send(&other, request(&format!("{allowed}/echo")))
        .await
        .expect("sent");
    assert!(body.contains("authorization=\n"), "{body}");
}

#[tokio::test]
async fn a_request_past_the_deadline_ends() {
    let (addr, _) = server().await;
    let config = grant(&[&format!("http://127.0.0.1:{}", addr.port())]);
    let url = |path: &str| format!("http://127.0.0.1:{}/{path}", addr.port());
    let started = Instant::now();
    let res = send_within(&config, request(&url("slow")), Duration::from_millis(300)).await;
    assert!(matches!(res, Err(Error::ConnectionReadTimeout)), "{res:?}");
    let res = send_within(&config, request(&url("stall")), Duration::from_millis(300)).await;
    assert!(matches!(res, Err(Error::ConnectionReadTimeout)), "{res:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn https_to_a_plain_server_fails_with_a_tls_error() {
    let (addr, _) = server().await;
    let config = grant(&[&format!("https://127.0.0.1:{}", addr.port())]);
    let url = format!("https://127.0.0.1:{}/echo", addr.port());
    let res = send(&config, request(&url)).await;
    assert!(matches!(res, Err(Error::Tls(_))), "{res:?}");
}

#[tokio::test]
async fn every_request_is_counted_once_with_its_result() {
    let (addr, _) = server().await;
    let metrics = Arc::new(Metrics::new());
    let config = grant(&[&format!("http://127.0.0.1:{}", addr.port())]);
    let grant = Grant::new(&config, Recorder::new(&metrics, "http", "counted"));
    let scope = scope(Duration::from_secs(5));
    let url = |path: &str| format!("http://127.0.0.1:{}/{path}", addr.port());
    for path in ["echo", "chunked"] {
        let (res, io) = handle(request(&url(path)), Some(&grant), &scope, None)
            .await
            .expect("sent");
        tokio::spawn(io);
        let _ = read(res).await;
    }
    let denied = handle(request("http://127.0.0.2/"), Some(&grant), &scope, None).await;
    assert!(denied.is_err());
    let text = metrics.encode(None);
    for result in ["ok", "error", "denied"] {
        let line = text
            .lines()
            .find(|l| {
                l.contains("store=\"counted\"") && l.contains(&format!("result=\"{result}\""))
            })
            .unwrap_or_else(|| panic!("no {result} line in\n{text}"));
        assert!(line.ends_with(" 1"), "{line}");
    }
}

/// Log output kept for a test to read.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log buffer")).into_owned()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl tracing_subscriber::fmt::MakeWriter<'_> for Captured {
    type Writer = Captured;

    fn make_writer(&self) -> Captured {
        self.clone()
    }
}

#[tokio::test]
async fn a_refusal_is_logged_with_plugin_queue_and_url_but_no_secret() {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .finish();
    // The test runtime is single-threaded, so the thread's default sees every line.
    let _guard = tracing::subscriber::set_default(subscriber);
    let mut config = grant(&["http://127.0.0.1:9"]);
    config.headers.push(OriginHeaders {
        origin: origin("http://127.0.0.1:9"),
        headers: vec![("Authorization".into(), Secret::new("Bearer s3cret"))],
    });
    let url = "http://user:pw@evil.example:8080/path?token=abc";
    let res = send(&config, request(url)).await;
    assert!(matches!(res, Err(Error::HttpRequestDenied)), "{res:?}");
    let text = logs.text();
    for expected in [
        "test.wasm",
        "http-test",
        "http://evil.example:8080/path",
        "WARN",
    ] {
        assert!(text.contains(expected), "{expected} in {text}");
    }
    for secret in ["token", "abc", "pw@", "s3cret"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
}
