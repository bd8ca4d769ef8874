//! The console's JSON API under `/api/` on a running service with `[admin] token`: every
//! request, reads too, answers 401 without the token (or with a wrong one); with it, list,
//! replay, discard and dry-run do what the `failed` commands do. `guard` has what a web page
//! could send.

mod edit;
pub(crate) mod groups;
mod guard;
pub(crate) mod jobs;
pub(crate) mod overview;

use std::net::SocketAddr;
use std::time::Duration;

use lapin::BasicProperties;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::capabilities::db::{self, Kind, Pool};
use crate::capabilities::support::{Probe, Sub, probe_wasm};
use crate::harness::{self, free_addr};

pub(crate) const TOKEN: &str = "console-test-token-7f3c";

/// One HTTP/1.1 request with a JSON body; the status and the JSON answer (`null` if none).
pub(crate) async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, Value) {
    let json = ("application/json", body.as_bytes());
    send(addr, (method, path), token, json).await
}

/// One HTTP/1.1 request with a body of content type `kind`.
async fn send(
    addr: SocketAddr,
    (method, path): (&str, &str),
    token: Option<&str>,
    (kind, body): (&str, &[u8]),
) -> (u16, Value) {
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let head =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: {kind}\r\n");
    raw(addr, &head, body).await
}

/// Sends `head` (the request line and header lines, each ending in CRLF, as a browser or curl
/// would write them) and `body`, with `Content-Length` and `Connection: close` added; the
/// status and the JSON answer.
async fn raw(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, Value) {
    let mut s = begin(addr, head, body.len()).await;
    s.write_all(body).await.expect("send");
    answer(&mut s).await
}

/// Sends `head` announcing a body of `len` bytes, and none of it yet.
async fn begin(addr: SocketAddr, head: &str, len: usize) -> TcpStream {
    let mut s = TcpStream::connect(addr)
        .await
        .expect("connect to the admin port");
    let head = format!("{head}Connection: close\r\nContent-Length: {len}\r\n\r\n");
    s.write_all(head.as_bytes()).await.expect("send");
    s
}

/// Reads the answer to the end: its status and JSON body (`null` if none).
async fn answer(s: &mut TcpStream) -> (u16, Value) {
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.expect("read");
    let text = String::from_utf8_lossy(&out);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text}"));
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_api_lists_replays_discards_and_dry_runs_and_refuses_all_without_the_token() {
    let mut fixture = Parking::start("console", &format!("token = \"{TOKEN}\"")).await;
    fixture.park(&["c-1", "c-2", "c-3", "c-4"]).await;
    fixture.wait_parked(4).await;
    let (admin, queue, failed) = (fixture.admin, fixture.queue.clone(), fixture.failed.clone());

    // Reads show message bodies: they need the token too; the page itself does not.
    for path in ["/api/failed".to_string(), format!("/api/failed/{queue}")] {
        for token in [None, Some("wrong")] {
            let (status, body) = request(admin, "GET", &path, token, "").await;
            assert_eq!(status, 401, "{path}: {body}");
            assert!(
                body["error"].as_str().is_some_and(|e| e.contains("Bearer")),
                "{body}"
            );
        }
    }
    let page = crate::harness::http_get(admin, "/failed").await;
    assert_eq!(
        page.map(|(status, _)| status),
        Some(200),
        "the page asks for the token"
    );

    let (status, all) = request(admin, "GET", "/api/failed", Some(TOKEN), "").await;
    assert_eq!(status, 200, "{all}");
    let entry = all["queues"]
        .as_array()
        .and_then(|q| q.iter().find(|e| e["queue"] == json!(queue)))
        .unwrap_or_else(|| panic!("{queue} not in {all}"));
    assert_eq!(entry["count"], json!(4));
    let (status, listed) = request(
        admin,
        "GET",
        &format!("/api/failed/{queue}?limit=10"),
        Some(TOKEN),
        "",
    )
    .await;
    assert_eq!(status, 200);
    let mut ids: Vec<&str> = listed["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, ["c-1", "c-2", "c-3", "c-4"]);

    let discard = format!("/api/failed/{queue}/discard");
    let c2 = r#"{"ids": ["c-2"]}"#;
    for token in [None, Some("wrong")] {
        let (status, body) = request(admin, "POST", &discard, token, c2).await;
        assert_eq!(status, 401, "{body}");
        assert!(
            body["error"].as_str().is_some_and(|e| e.contains("Bearer")),
            "{body}"
        );
    }
    assert_eq!(
        harness::depth(&fixture.probe.ch, &failed).await,
        4,
        "nothing moved without the token"
    );
    let (status, done) = request(admin, "POST", &discard, Some(TOKEN), c2).await;
    assert_eq!((status, done), (200, json!({"done": 1, "missing": []})));
    let (status, body) = request(admin, "POST", &discard, Some(TOKEN), r#"{"limit": 1}"#).await;
    assert_eq!(status, 400, "discard takes ids or all: {body}");

    let dry = format!("/api/failed/{queue}/dry-run");
    let (status, tried) = request(admin, "POST", &dry, Some(TOKEN), r#"{"ids": ["c-3"]}"#).await;
    assert_eq!(status, 200, "{tried}");
    assert_eq!(tried["results"][0]["id"], json!("c-3"));
    assert_eq!(tried["results"][0]["answer"], json!("fail"), "{tried}");

    // An uploaded plugin, checked like any plugin; the selection in the query.
    let select = "?select=%7B%22ids%22%3A%5B%22c-3%22%5D%7D";
    let upload = ("application/wasm", &probe_wasm()[..]);
    let (status, tried) = send(
        admin,
        ("POST", &format!("{dry}{select}")),
        Some(TOKEN),
        upload,
    )
    .await;
    assert_eq!(status, 200, "{tried}");
    assert_eq!(
        tried["results"][0]["plugin"],
        json!("upload.wasm"),
        "{tried}"
    );
    let junk = ("application/wasm", &b"not a plugin"[..]);
    let (status, body) = send(
        admin,
        ("POST", &format!("{dry}{select}")),
        Some(TOKEN),
        junk,
    )
    .await;
    assert_eq!(status, 400, "{body}");

    // With the flag table there, the replayed message is handled: its report comes back.
    fixture.allow().await;
    let replay = format!("/api/failed/{queue}/replay");
    let (status, done) = request(admin, "POST", &replay, None, r#"{"ids": ["c-1"]}"#).await;
    assert_eq!(status, 401, "{done}");
    let (status, done) = request(
        admin,
        "POST",
        &replay,
        Some(TOKEN),
        r#"{"ids": ["c-1", "nope"]}"#,
    )
    .await;
    assert_eq!(
        (status, done),
        (200, json!({"done": 1, "missing": ["nope"]}))
    );
    let report = fixture.probe.report("c-1").await;
    assert_eq!(report["id"], json!("c-1"));
    assert_eq!(
        harness::depth(&fixture.probe.ch, &failed).await,
        2,
        "c-3 and c-4 are parked"
    );

    // The other selections: by reason, the first N, all.
    let others = [
        (r#"{"reason": "fail"}"#, 2),
        (r#"{"limit": 1}"#, 1),
        (r#"{"all": true}"#, 2),
    ];
    for (select, n) in others {
        let (status, tried) = request(admin, "POST", &dry, Some(TOKEN), select).await;
        assert_eq!(status, 200, "{tried}");
        let results = tried["results"].as_array().map(Vec::len);
        assert_eq!(results, Some(n), "{select}: {tried}");
    }
    let (status, done) = request(admin, "POST", &replay, Some(TOKEN), r#"{"limit": 1}"#).await;
    assert_eq!((status, &done["done"]), (200, &json!(1)), "{done}");
    let (status, done) = request(admin, "POST", &discard, Some(TOKEN), r#"{"all": true}"#).await;
    assert_eq!((status, &done["done"]), (200, &json!(1)), "{done}");
    assert_eq!(harness::depth(&fixture.probe.ch, &failed).await, 0);

    let (status, body) = request(
        admin,
        "POST",
        &replay,
        Some(TOKEN),
        r#"{"all": true, "limit": 1}"#,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = request(admin, "GET", "/api/failed/no-such-queue", Some(TOKEN), "").await;
    assert_eq!(status, 404, "{body}");
    fixture.stop().await;
}

/// A running service with `[admin]` whose subscription parks every message the test sends
/// while a flag table is missing; once [`Parking::allow`] creates it, a replayed message is
/// handled and reports. Shared by the API and browser tests.
pub(crate) struct Parking {
    pub probe: Probe,
    pub admin: SocketAddr,
    /// The subscription queue and its failed queue.
    pub queue: String,
    pub failed: String,
    db: Pool,
    flag: String,
    _state: tempfile::TempDir,
}

impl Parking {
    /// `admin_lines`: the lines of `[admin]` after `listen` (`token = ...`, `hosts = [...]`).
    pub async fn start(test: &str, admin_lines: &str) -> Parking {
        let state = tempfile::tempdir().expect("state dir");
        let db = Pool::connect(Kind::Sqlite, state.path()).await;
        let flag = db::table(&format!("{}_flag", test.replace('-', "_")));
        let admin = free_addr();
        let tables = format!(
            "[admin]\nlisten = \"{admin}\"\n{admin_lines}\n\n[sql.db]\nurl = \"{}\"\n",
            Kind::Sqlite.toml_url()
        );
        let subs = [Sub::new("pk", "sql = \"db\"\nmax_retries = 0")];
        let probe = Probe::start(test, &subs, state.path(), &tables).await;
        let queue = format!("{}.pk", probe.n.p);
        let failed = format!("{queue}@failed");
        Parking {
            probe,
            admin,
            queue,
            failed,
            db,
            flag,
            _state: state,
        }
    }

    /// Sends one message per id (as its message id) that fails while the flag table is missing.
    pub async fn park(&self, ids: &[&str]) {
        let step = json!({"sql": "query", "statement": format!("SELECT 1 FROM {}", self.flag)});
        for id in ids {
            let props = BasicProperties::default().with_message_id((*id).into());
            let script = json!({"id": id, "steps": [step], "on_error": "fail"});
            self.probe.send_with("pk", &script, props).await;
        }
    }

    /// Sends `body` as it is, with message id `id` (a body that is no script is parked too).
    pub async fn park_raw(&self, id: &str, body: &[u8]) {
        let key = format!("{}.pk.x", self.probe.n.p);
        let props = BasicProperties::default().with_message_id(id.into());
        harness::publish(&self.probe.ch, &self.probe.n.master(), &key, body, props).await;
    }

    pub async fn wait_parked(&self, n: u32) {
        harness::eventually(Duration::from_secs(20), &format!("{n} parked"), || async {
            (harness::depth(&self.probe.ch, &self.failed).await == n).then_some(())
        })
        .await;
    }

    /// Creates the flag table: from now on the messages are handled.
    pub async fn allow(&self) {
        self.db
            .exec(&format!("CREATE TABLE {} (x INTEGER)", self.flag))
            .await;
    }

    pub async fn stop(self) {
        self.probe.stop().await;
    }
}
