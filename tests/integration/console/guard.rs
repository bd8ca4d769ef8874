//! What a web page the operator visits could send to the admin listener, sent as a browser
//! would: a `text/plain` or form body, a foreign `Origin`, `Sec-Fetch-Site: cross-site`, a
//! rebound `Host` name. Each is refused with a reason and moves nothing; the listener's own
//! page, curl, and an `[admin] hosts` name are answered. Also the listener's bounds: listings
//! of at most 1,000 messages, one upload at a time, a few API requests at once while the
//! probes keep answering.

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use super::{Parking, TOKEN, answer, begin, raw};
use crate::capabilities::support::probe_wasm;
use crate::harness::{self, http_get};

/// The `[admin] hosts` name of these tests (never resolved: only sent as `Host`).
const LISTED: &str = "console.guard.test";

fn error_of(body: &Value) -> &str {
    body["error"].as_str().unwrap_or("(no error text)")
}

#[tokio::test]
async fn what_a_web_page_can_send_is_refused_on_a_loopback_listener_without_a_token() {
    let fixture = Parking::start("guard", &format!("hosts = [\"{LISTED}\"]")).await;
    fixture.park(&["g-1", "g-2"]).await;
    fixture.wait_parked(2).await;
    let (admin, queue, port) = (fixture.admin, fixture.queue.clone(), fixture.admin.port());
    let replay = format!("/api/failed/{queue}/replay");
    let discard = format!("/api/failed/{queue}/discard");
    let pick = br#"{"ids": ["g-1", "g-2"]}"#;
    let own = format!("http://{admin}");

    // A "simple" request any page may send anywhere, without asking (fetch no-cors, a form).
    let refused = [
        (
            format!(
                "POST {replay} HTTP/1.1\r\nHost: {admin}\r\nContent-Type: text/plain;charset=UTF-8\r\nOrigin: {own}\r\n"
            ),
            415,
            "Content-Type text/plain",
        ),
        (
            format!(
                "POST {discard} HTTP/1.1\r\nHost: {admin}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            ),
            415,
            "must send Content-Type: application/json",
        ),
        (
            format!(
                "POST {discard} HTTP/1.1\r\nHost: {admin}\r\nContent-Type: application/json\r\nOrigin: http://evil.example\r\nSec-Fetch-Site: cross-site\r\n"
            ),
            403,
            "cross-site request refused: Sec-Fetch-Site: cross-site",
        ),
        (
            format!(
                "POST {discard} HTTP/1.1\r\nHost: {admin}\r\nContent-Type: application/json\r\nOrigin: http://evil.example\r\n"
            ),
            403,
            "cross-site request refused: Origin http://evil.example is not this listener's",
        ),
        // Another web server on this host is the same site, not the same origin.
        (
            format!(
                "POST {discard} HTTP/1.1\r\nHost: {admin}\r\nContent-Type: application/json\r\nSec-Fetch-Site: same-site\r\n"
            ),
            403,
            "Sec-Fetch-Site: same-site",
        ),
        // DNS rebinding: the page's own name now points here, so it is same-origin to itself.
        (
            format!(
                "POST {discard} HTTP/1.1\r\nHost: evil.example:{port}\r\nContent-Type: application/json\r\nOrigin: http://evil.example:{port}\r\nSec-Fetch-Site: same-origin\r\n"
            ),
            403,
            "Host evil.example",
        ),
    ];
    for (head, status, why) in &refused {
        let (got, body) = raw(admin, head, pick).await;
        assert_eq!(got, *status, "{head}{body}");
        assert!(error_of(&body).contains(why), "{head}{body}");
    }
    assert_eq!(
        harness::depth(&fixture.probe.ch, &fixture.failed).await,
        2,
        "nothing was replayed or discarded"
    );

    // A rebound name can read neither the page nor the messages.
    for path in ["/failed".to_string(), format!("/api/failed/{queue}")] {
        let head = format!("GET {path} HTTP/1.1\r\nHost: evil.example:{port}\r\n");
        let (status, body) = raw(admin, &head, b"").await;
        assert_eq!(status, 403, "{path}: {body}");
        assert!(error_of(&body).contains("DNS rebinding"), "{body}");
    }
    // Probes and Prometheus name the pod's address or a service: not refused by Host.
    for path in ["/healthz", "/readyz", "/metrics"] {
        let head = format!("GET {path} HTTP/1.1\r\nHost: worker-host.monitoring.svc:{port}\r\n");
        let (status, _) = raw(admin, &head, b"").await;
        assert_eq!(status, 200, "{path}");
    }

    // An [admin] hosts name (a reverse proxy's) is answered, and its pages are its own origin.
    let head = format!("GET /failed HTTP/1.1\r\nHost: {LISTED}\r\n");
    assert_eq!(raw(admin, &head, b"").await.0, 200);
    let head = format!(
        "POST /api/failed/{queue}/dry-run HTTP/1.1\r\nHost: {LISTED}\r\n\
         Content-Type: application/json\r\nOrigin: https://{LISTED}\r\nSec-Fetch-Site: same-origin\r\n"
    );
    let (status, tried) = raw(admin, &head, br#"{"ids": ["g-1"]}"#).await;
    assert_eq!(status, 200, "{tried}");
    assert_eq!(tried["results"][0]["id"], json!("g-1"), "{tried}");

    // The listener's own page, as Chromium sends its request; and curl, with no Origin.
    let head = format!(
        "POST {discard} HTTP/1.1\r\nHost: {admin}\r\nContent-Type: application/json\r\n\
         Origin: {own}\r\nSec-Fetch-Site: same-origin\r\n"
    );
    let (status, done) = raw(admin, &head, br#"{"ids": ["g-2"]}"#).await;
    assert_eq!((status, done), (200, json!({"done": 1, "missing": []})));
    let head =
        format!("POST {discard} HTTP/1.1\r\nHost: {admin}\r\nContent-Type: application/json\r\n");
    let (status, done) = raw(admin, &head, br#"{"ids": ["g-1"]}"#).await;
    assert_eq!((status, done), (200, json!({"done": 1, "missing": []})));

    // A listing returns at most 1,000 messages: a larger limit is refused, not cut silently.
    let list =
        |limit: u32| format!("GET /api/failed/{queue}?limit={limit} HTTP/1.1\r\nHost: {admin}\r\n");
    let (status, body) = raw(admin, &list(5000), b"").await;
    assert_eq!(status, 400, "{body}");
    assert!(
        error_of(&body).contains("at most 1000 messages, got 5000"),
        "{body}"
    );
    let (status, body) = raw(admin, &list(1000), b"").await;
    assert_eq!((status, &body["messages"]), (200, &json!([])), "{body}");
    fixture.stop().await;
}

#[tokio::test]
async fn one_upload_runs_at_a_time_and_busy_api_requests_leave_room_for_the_probes() {
    let fixture = Parking::start("guard-busy", &format!("token = \"{TOKEN}\"")).await;
    fixture.park(&["u-1"]).await;
    fixture.wait_parked(1).await;
    let (admin, queue) = (fixture.admin, fixture.queue.clone());
    let wasm = probe_wasm();
    let select = "?select=%7B%22ids%22%3A%5B%22u-1%22%5D%7D";
    let upload = format!(
        "POST /api/failed/{queue}/dry-run{select} HTTP/1.1\r\nHost: {admin}\r\n\
         Authorization: Bearer {TOKEN}\r\nContent-Type: application/wasm\r\n"
    );

    // Two uploads under way at once: whichever the listener took first runs, the other is
    // refused before its body is read.
    let mut a = begin(admin, &upload, wasm.len()).await;
    let mut b = begin(admin, &upload, wasm.len()).await;
    let (refused, mut winner) = tokio::select! {
        got = answer(&mut a) => (got, b),
        got = answer(&mut b) => (got, a),
    };
    assert_eq!(refused.0, 429, "{}", refused.1);
    assert!(
        error_of(&refused.1).contains("one upload runs at a time"),
        "{}",
        refused.1
    );
    winner.write_all(&wasm).await.expect("send the plugin");
    let (status, tried) = answer(&mut winner).await;
    assert_eq!(status, 200, "{tried}");
    assert_eq!(
        tried["results"][0]["plugin"],
        json!("upload.wasm"),
        "{tried}"
    );

    // API requests that stall (here: bodies that never come) take a few places at most; the
    // next is answered 429 at once, and the probes keep answering.
    let stalled_head = format!(
        "POST /api/failed/{queue}/replay HTTP/1.1\r\nHost: {admin}\r\n\
         Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
    );
    let list = format!(
        "GET /api/failed/{queue} HTTP/1.1\r\nHost: {admin}\r\nAuthorization: Bearer {TOKEN}\r\n"
    );
    let mut stalled = Vec::new();
    let busy = loop {
        stalled.push(begin(admin, &stalled_head, 100).await);
        let (status, body) = raw(admin, &list, b"").await;
        if status == 429 {
            break body;
        }
        assert!(
            stalled.len() < 20,
            "{} stalled requests, and a listing still answered: {status} {body}",
            stalled.len()
        );
    };
    assert!(error_of(&busy).contains("API requests at once"), "{busy}");
    for path in ["/readyz", "/healthz", "/metrics"] {
        let status = http_get(admin, path).await.map(|(s, _)| s);
        assert_eq!(status, Some(200), "{path} while the API is busy");
    }
    drop(stalled);
    harness::eventually(
        std::time::Duration::from_secs(15),
        "the API answering again",
        || async { (raw(admin, &list, b"").await.0 == 200).then_some(()) },
    )
    .await;
    fixture.stop().await;
}
