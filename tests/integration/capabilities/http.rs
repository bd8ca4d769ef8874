//! Outbound HTTP through the real binary against local test servers: the request an
//! `allowed_hosts` entry names reaches the server with the host's `http_headers` (a `${VAR}`
//! secret from the binary's environment) that the guest never sees; another port, host or
//! scheme, a name resolving to loopback that is not itself allowed, a redirect, an oversized
//! answer and a server that never answers are each refused or cut as SPEC section 9 says, with
//! a warning in the log naming the plugin and the URL, and never the secret.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::support::{PROBE, Probe, Sub, outcomes, results, script};
use crate::harness;

/// One request a test server received.
#[derive(Debug, Clone)]
pub(crate) struct Hit {
    port: u16,
    path: String,
    headers: Vec<(String, String)>,
}

impl Hit {
    fn values(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// Every request the test servers received, in order.
#[derive(Clone, Default)]
pub(crate) struct Hits(Arc<Mutex<Vec<Hit>>>);

impl Hits {
    pub(crate) fn all(&self) -> Vec<Hit> {
        self.0.lock().expect("hits").clone()
    }

    /// How many requests asked for `path`.
    pub(crate) fn to(&self, path: &str) -> usize {
        self.0
            .lock()
            .expect("hits")
            .iter()
            .filter(|h| h.path == path)
            .count()
    }
}

/// Starts a test server on 127.0.0.1 (a free port) that records into `hits`.
pub(crate) async fn serve(hits: Hits) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a test server");
    let addr = listener.local_addr().expect("local addr");
    let app = Router::new()
        .fallback(answer)
        .with_state((hits, addr.port()));
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// Records the request, then answers by path: `/hello`, `/redirect` (302 to `/target`),
/// `/small` (1000 bytes), `/big` (64 KiB with a content-length), `/big-chunked` (64 KiB without
/// one), `/slow` ("slow" after a second), `/hang` (nothing for a minute). It never echoes what
/// it received.
async fn answer(State((hits, port)): State<(Hits, u16)>, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    let headers = req
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into(),
            )
        })
        .collect();
    hits.0.lock().expect("hits").push(Hit {
        port,
        path: path.clone(),
        headers,
    });
    match path.as_str() {
        "/hello" => "hello".into_response(),
        "/redirect" => {
            let to = format!("http://127.0.0.1:{port}/target");
            (StatusCode::FOUND, [(header::LOCATION, to)], "moved").into_response()
        }
        "/target" => "target".into_response(),
        "/small" => "s".repeat(1000).into_response(),
        "/big" => "b".repeat(64 << 10).into_response(),
        "/big-chunked" => {
            let chunks = (0..64).map(|_| Ok::<_, std::io::Error>(vec![b'c'; 1024]));
            Body::from_stream(futures_util::stream::iter(chunks)).into_response()
        }
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(1)).await;
            "slow".into_response()
        }
        "/hang" => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            "late".into_response()
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

pub(crate) fn get(url: String) -> Value {
    json!({"http": "GET", "url": url})
}

pub(crate) fn url(port: u16, path: &str) -> String {
    format!("http://127.0.0.1:{port}{path}")
}

/// `web` may reach 127.0.0.1:`a` (with the secret header) and localhost:`o`, answers up to
/// 4 KiB, 5 s per message; `slow` may reach 127.0.0.1:`a`, 1 s per message.
fn subs(a: u16, o: u16, var: &str) -> [Sub; 2] {
    let web = Sub::new(
        "web",
        &format!(
            "allowed_hosts = [\"http://127.0.0.1:{a}\", \"http://localhost:{o}\"]\n\
             http_max_response = \"4KiB\"\ntimeout = \"5s\"\nmax_retries = 0"
        ),
    )
    .tables(&format!(
        "[subscription.http_headers.\"http://127.0.0.1:{a}\"]\n\
         X-Probe-Secret = \"Bearer ${{{var}}}\"\n"
    ));
    let slow = Sub::new(
        "slow",
        &format!("allowed_hosts = [\"http://127.0.0.1:{a}\"]\ntimeout = \"1s\"\nmax_retries = 0"),
    );
    [web, slow]
}

/// The `web` script: 0 allowed (with the guest's own headers); 1-4 refused (another port, a
/// host not listed, another scheme, a listed name resolving to loopback that is not allowed);
/// 5 a redirect; 6 small, 7 and 8 big answers; 9 a guest timeout; 10 the secret's variable.
fn web_steps(a: u16, o: u16, var: &str) -> Value {
    let mut steps = vec![json!({"http": "GET", "url": url(a, "/hello"),
        "headers": {"x-mine": "guest", "x-probe-secret": "forged"}})];
    let refused = [
        url(o, "/hello"),
        format!("http://127.0.0.2:{a}/hello"),
        format!("https://127.0.0.1:{a}/hello"),
        format!("http://localhost:{o}/hello"),
    ];
    steps.extend(refused.map(get));
    steps.extend(["/redirect", "/small", "/big", "/big-chunked"].map(|p| get(url(a, p))));
    steps.push(json!({"http": "GET", "url": url(a, "/hang"), "timeout_ms": 300}));
    steps.push(json!({"env": var}));
    json!(steps)
}

/// What the guest saw, but step 8 (see [`check_body_cut_short`]); never the secret.
fn check_guest(report: &Value, a: u16, secret: &str) {
    let names = outcomes(report);
    let others: Vec<&str> = [0, 1, 2, 3, 4, 5, 6, 7, 9, 10]
        .iter()
        .map(|&i| names[i].as_str())
        .collect();
    let expected = [
        "ok",
        "denied",
        "denied",
        "denied",
        "denied",
        "ok",
        "ok",
        "too-large",
        "timeout",
        "ok",
    ];
    assert_eq!(others, expected, "{report}");
    let r = results(report);
    assert_eq!(
        (r[0]["ok"]["status"].as_u64(), r[0]["ok"]["body"].as_str()),
        (Some(200), Some("hello"))
    );
    let redirect = &r[5]["ok"];
    assert_eq!(
        redirect["status"], 302,
        "a redirect comes back, not followed"
    );
    assert_eq!(redirect["headers"]["location"], url(a, "/target"));
    assert_eq!(r[6]["ok"]["body_len"], 1000);
    assert_eq!(r[10]["ok"], Value::Null, "the guest has no environment");
    assert!(
        !report.to_string().contains(secret),
        "the guest saw the secret: {report}"
    );
}

/// The servers saw only the allowed requests, each with the host's header instead of the
/// guest's, and never the redirect's target.
fn check_servers(hits: &Hits, a: u16, secret: &str) {
    let seen = hits.all();
    let paths: Vec<(u16, &str)> = seen.iter().map(|h| (h.port, h.path.as_str())).collect();
    let allowed = [
        "/hello",
        "/redirect",
        "/small",
        "/big",
        "/big-chunked",
        "/hang",
    ];
    assert_eq!(paths, allowed.map(|p| (a, p)), "what reached the servers");
    let bearer = format!("Bearer {secret}");
    for hit in &seen {
        assert_eq!(hit.values("x-probe-secret"), [bearer.as_str()], "{hit:?}");
    }
    assert_eq!(seen[0].values("x-mine"), ["guest"]);
}

/// Each refusal is a warning naming the plugin and the destination; the secret is nowhere.
fn check_log(log: &str, a: u16, o: u16, secret: &str) {
    let refused = [
        format!("127.0.0.1:{o}"),
        format!("127.0.0.2:{a}"),
        format!("localhost:{o}"),
    ];
    for target in refused {
        assert!(
            log.lines()
                .any(|l| l.contains("WARN") && l.contains(PROBE) && l.contains(&target)),
            "no warning naming {PROBE} and {target} in the log:\n{log}"
        );
    }
    assert!(!log.contains(secret), "the secret is in the log:\n{log}");
}

/// Step 8, a body over the cap without a content-length: the host ends it mid-stream with
/// HTTP-response-body-size, which wasmtime 48 hands the guest only as the stream error's text,
/// so too-large here rests on the SDK reading that text (plugin-sdk/src/sys/component_http.rs).
fn check_body_cut_short(report: &Value) {
    let (names, r) = (outcomes(report), results(report));
    assert_eq!(
        names[8], "too-large",
        "a body over http_max_response without a content-length should be too-large (an \
         unavailable retries the message forever): {}",
        r[8]
    );
}

#[tokio::test]
async fn requests_go_only_where_the_grant_says_with_the_hosts_headers() {
    let hits = Hits::default();
    let a = serve(hits.clone()).await.port();
    let o = serve(hits.clone()).await.port();
    let var = harness::unique("CAP_PROBE_TOKEN")
        .replace('-', "_")
        .to_ascii_uppercase();
    let secret = harness::unique("s3cret");
    let state = tempfile::tempdir().expect("state dir");
    let env = [(var.as_str(), secret.as_str())];
    let subs = subs(a, o, &var);
    let mut probe = Probe::start_child("cap-http", &subs, state.path(), "", &env).await;
    let report = probe.run("web", script("web", web_steps(a, o, &var))).await;
    check_guest(&report, a, &secret);
    check_servers(&hits, a, &secret);

    // A request whose answer never comes ends with the handler's timeout.
    let sent = Instant::now();
    let hang = script("slow", json!([get(url(a, "/hang"))]));
    probe.send("slow", &hang).await;
    let parked = probe.parked("slow", "slow").await;
    assert!(
        sent.elapsed() < Duration::from_secs(10),
        "a hanging request under a 1 s timeout took {:?}: {parked:?}",
        sent.elapsed()
    );
    check_log(&probe.log(), a, o, &secret);
    probe.stop().await;
    // Last, so a failure here leaves every check above done.
    check_body_cut_short(&report);
}

/// A plugin makes at most `http_max_requests` (default 100) requests per message: of 1,000 GETs
/// in one message exactly 100 reach the server and the rest get an error, with one warning in
/// the log naming the plugin; the next message has its own 100.
#[tokio::test]
async fn a_message_makes_at_most_http_max_requests_requests() {
    let hits = Hits::default();
    let a = serve(hits.clone()).await.port();
    let state = tempfile::tempdir().expect("state dir");
    let subs = [Sub::new(
        "many",
        &format!("allowed_hosts = [\"http://127.0.0.1:{a}\"]\ntimeout = \"60s\"\nmax_retries = 0"),
    )];
    let mut probe = Probe::start_child("cap-http-many", &subs, state.path(), "", &[]).await;
    let steps: Vec<Value> = (0..1000).map(|_| get(url(a, "/hello"))).collect();
    let report = probe.run("many", script("many", json!(steps))).await;
    let names = outcomes(&report);
    assert_eq!(names.len(), 1000);
    assert!(
        names[..100].iter().all(|n| n == "ok"),
        "{:?}",
        &names[..100]
    );
    assert!(
        names[100..].iter().all(|n| n == "unavailable"),
        "{:?}",
        &names[100..110]
    );
    assert!(
        results(&report)[100]["text"]
            .as_str()
            .is_some_and(|t| t.contains("ConnectionLimitReached")),
        "{}",
        results(&report)[100]
    );
    assert_eq!(hits.all().len(), 100, "requests that reached the server");

    let again = probe.run("many", script("again", json!(steps[..5]))).await;
    assert_eq!(outcomes(&again), ["ok"; 5], "a new message, a new budget");
    assert_eq!(hits.all().len(), 105);
    let log = probe.log();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("http_max_requests"))
        .collect();
    assert_eq!(warnings.len(), 1, "one warning for the message:\n{log}");
    assert!(
        warnings[0].contains(PROBE) && warnings[0].contains("WARN"),
        "{}",
        warnings[0]
    );
    probe.stop().await;
}
