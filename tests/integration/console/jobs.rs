//! Jobs through the API with `[admin] token`: a replay of more than 500 parked messages
//! answers 202 with a job whose progress runs to the end; a cancelled one leaves the rest
//! parked and the moved ones handled exactly once; reading and cancelling need the token, a
//! cross-site cancel is refused; one audit line when a job starts and one when it ends. The
//! subscription's plugin fails every message, so each replayed one comes back parked once
//! (`worker_failed_total` counts them) behind the ones the job walks.

use std::net::SocketAddr;
use std::time::Duration;

use lapin::BasicProperties;
use lapin::types::FieldTable;
use serde_json::{Value, json};

use super::{TOKEN, raw, request};
use crate::harness::{self, Host, free_addr};

/// Answers fail to every message (ABI v1).
const FAILING: &str = r#"(module (memory (export "memory") 1) (func (export "worker_abi_v1")) (func (export "worker_handle") (result i32) i32.const 2))"#;

/// The service (the real binary, logging JSON) with one failing subscription `<p>.q` and
/// `[admin]` with the test token. Shared with the browser test.
pub(crate) struct JobHost {
    pub host: Host,
    pub admin: SocketAddr,
    pub p: String,
    conn: lapin::Connection,
    pub ch: lapin::Channel,
}

impl JobHost {
    pub async fn start(test: &str) -> JobHost {
        let p = harness::unique(test);
        let admin = free_addr();
        let toml = format!(
            "[broker]\nurl = \"{url}\"\n\n\
             [exchanges]\nmaster = \"{p}.master\"\nretry = \"{p}.retry\"\nfailed = \"{p}.failed\"\n\n\
             [admin]\nlisten = \"{admin}\"\ntoken = \"{TOKEN}\"\n\n\
             [[subscription]]\nqueue = \"{p}.q\"\nplugin = \"failing.wasm\"\nmax_retries = 0\n",
            url = harness::broker_url(),
        );
        let wasm = wat::parse_str(FAILING).expect("the failing plugin parses");
        let dir = harness::folder(&[("failing.wasm", &wasm)]);
        let config = harness::write_config(dir.path(), &toml);
        let host = Host::child(&config).admin(admin).start_owning(dir);
        let (conn, ch) = harness::channel().await;
        harness::wait_consuming(&conn, &format!("{p}.q")).await;
        JobHost {
            host,
            admin,
            p,
            conn,
            ch,
        }
    }

    pub fn q(&self) -> String {
        format!("{}.q", self.p)
    }

    pub fn failed(&self) -> String {
        format!("{}.q@failed", self.p)
    }

    /// Parks `n` messages (`j-0`...) straight into the failed queue as the host parks them,
    /// confirms pipelined a thousand at a time.
    pub async fn park(&self, n: usize) {
        let failed = self.failed();
        let text = |s: &str| lapin::types::AMQPValue::LongString(s.as_bytes().to_vec().into());
        for start in (0..n).step_by(1000) {
            let batch = (start..n.min(start + 1000)).map(|i| {
                let mut headers = FieldTable::default();
                headers.insert(
                    "worker-error".into(),
                    text("sql error: no such table: flags"),
                );
                headers.insert("worker-failed-reason".into(), text("fail"));
                headers.insert(
                    "worker-attempts".into(),
                    lapin::types::AMQPValue::LongLongInt(1),
                );
                headers.insert("worker-failed-at".into(), text("2026-11-28T08:00:00Z"));
                headers.insert("x-orig-routing-key".into(), text(&self.q()));
                let props = BasicProperties::default()
                    .with_message_id(format!("j-{i}").into())
                    .with_headers(headers);
                let body = format!("{{\"order\": {i}}}").into_bytes();
                (failed.clone(), body, props)
            });
            harness::publish_pipelined(&self.ch, "", batch).await;
        }
        // The broker's count may trail its confirms for a moment.
        harness::eventually(Duration::from_secs(20), &format!("{n} parked"), || async {
            (self.depth(&failed).await as usize == n).then_some(())
        })
        .await;
    }

    pub async fn depth(&self, queue: &str) -> u32 {
        harness::depth(&self.ch, queue).await
    }

    /// Messages the plugin answered fail to (each parked again): `worker_failed_total`.
    pub async fn handled(&self) -> u64 {
        let (_, text) = harness::http_get(self.admin, "/metrics")
            .await
            .expect("/metrics answers");
        let name = format!("worker_failed_total{{queue=\"{}\"}} ", self.q());
        text.lines()
            .find_map(|l| l.strip_prefix(name.as_str()))
            .map_or(0, |n| n.trim().parse().expect("a count"))
    }

    /// Waits until every moved message was handled once and parked again: nothing in the
    /// queue, `moved` handled, `total` parked.
    pub async fn settled(&self, moved: u64, total: u32) {
        let what = format!("{moved} handled once and {total} parked");
        harness::eventually(Duration::from_secs(60), &what, || async {
            let (q, failed) = (
                self.depth(&self.q()).await,
                self.depth(&self.failed()).await,
            );
            (q == 0 && failed == total && self.handled().await == moved).then_some(())
        })
        .await;
        // No more than once: nothing moves on afterwards.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(self.handled().await, moved);
        assert_eq!(self.depth(&self.failed()).await, total);
    }

    pub async fn stop(self) {
        let _ = self.conn.close(200, "bye".into()).await;
        let p = self.p.clone();
        self.host.stop().await;
        let queues = [
            p.clone() + ".q",
            p.clone() + ".q@failed",
            p.clone() + ".q@retry.30s",
        ];
        let exchanges = ["master", "retry", "failed"].map(|e| format!("{p}.{e}"));
        harness::cleanup(&queues, &exchanges).await;
    }
}

/// `GET path` with the token: the JSON answer, which must be 200.
async fn get(admin: SocketAddr, path: &str) -> Value {
    let (status, body) = request(admin, "GET", path, Some(TOKEN), "").await;
    assert_eq!(status, 200, "{path}: {body}");
    body
}

/// Polls the job until `done` says so of its view (30 s at most); the last view.
async fn job_until(
    admin: SocketAddr,
    id: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let path = format!("/api/jobs/{id}");
    harness::eventually(Duration::from_secs(60), what, || async {
        let view = get(admin, &path).await;
        done(&view).then_some(view)
    })
    .await
}

/// The audit lines of job `id` in the host's JSON log, by message.
fn audits(log: &str, id: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["target"] == "worker_host::audit" && l["fields"]["job"] == json!(id))
        .map(|l| l["fields"].clone())
        .collect()
}

#[tokio::test]
async fn a_replay_of_many_messages_runs_as_a_job_to_the_end_each_moved_once() {
    let fixture = JobHost::start("jobs-done").await;
    fixture.park(2000).await;
    let (admin, q) = (fixture.admin, fixture.q());
    let replay = format!("/api/failed/{q}/replay");

    for path in ["/api/jobs", "/api/jobs/j-0-1"] {
        let (status, body) = request(admin, "GET", path, None, "").await;
        assert_eq!(status, 401, "{path}: {body}");
    }
    let head = format!(
        "POST {replay} HTTP/1.1\r\nHost: {admin}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
    );
    let (status, started, location) = raw_with_location(admin, &head, br#"{"all": true}"#).await;
    assert_eq!(status, 202, "{started}");
    let job = &started["job"];
    let id = job["id"].as_str().expect("a job id").to_string();
    assert_eq!(
        location.as_deref(),
        Some(format!("/api/jobs/{id}").as_str())
    );
    assert_eq!(job["action"], json!("replay"));
    assert_eq!(job["target"], json!({ "queue": q }));
    assert_eq!(job["total"], json!(2000), "{job}");

    let end = job_until(admin, &id, "the job done", |v| v["state"] == "done").await;
    assert_eq!(
        (&end["done"], &end["examined"], &end["total"]),
        (&json!(2000), &json!(2000), &json!(2000)),
        "{end}"
    );
    assert!(end["rate"].as_f64().is_some_and(|r| r > 0.0), "{end}");
    assert_eq!(end["eta_seconds"], Value::Null);
    fixture.settled(2000, 2000).await;

    let listed = get(admin, "/api/jobs").await;
    assert_eq!(listed["jobs"][0]["id"], json!(id), "{listed}");
    let cancel = format!("/api/jobs/{id}/cancel");
    let (status, body) = request(admin, "POST", &cancel, Some(TOKEN), "{}").await;
    assert_eq!(status, 409, "an ended job: {body}");
    let (status, body) = request(admin, "GET", "/api/jobs/j-nope", Some(TOKEN), "").await;
    assert_eq!(status, 404, "{body}");

    // A few messages are answered at once, as before.
    let (status, body) = request(admin, "POST", &replay, Some(TOKEN), r#"{"limit": 10}"#).await;
    assert_eq!((status, &body["done"]), (200, &json!(10)), "{body}");

    let lines = audits(&fixture.host.log(), &id);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["message"], json!("job started"));
    assert_eq!(lines[0]["total"], json!(2000));
    assert_eq!(lines[1]["message"], json!("job ended"));
    assert_eq!(lines[1]["done"], json!(2000));
    assert_eq!(lines[1]["cancelled"], json!(false));
    fixture.stop().await;
}

#[tokio::test]
async fn a_cancelled_job_leaves_the_rest_parked_and_cancel_needs_the_token_and_the_origin() {
    let fixture = JobHost::start("jobs-cancel").await;
    let total = 10_000;
    fixture.park(total as usize).await;
    let (admin, q) = (fixture.admin, fixture.q());
    let replay = format!("/api/failed/{q}/replay");
    let (status, started) = request(admin, "POST", &replay, Some(TOKEN), r#"{"all": true}"#).await;
    assert_eq!(status, 202, "{started}");
    let id = started["job"]["id"].as_str().expect("a job id").to_string();
    let under_way = job_until(admin, &id, "some progress", |v| {
        v["examined"].as_u64().is_some_and(|n| n > 0)
    })
    .await;
    assert_eq!(under_way["state"], json!("running"), "{under_way}");

    let cancel = format!("/api/jobs/{id}/cancel");
    let (status, body) = request(admin, "POST", &cancel, None, "{}").await;
    assert_eq!(status, 401, "{body}");
    let cross_site = format!(
        "POST {cancel} HTTP/1.1\r\nHost: {admin}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nOrigin: http://evil.example\r\nSec-Fetch-Site: cross-site\r\n"
    );
    let (status, body) = raw(admin, &cross_site, b"{}").await;
    assert_eq!(status, 403, "{body}");
    let form = format!(
        "POST {cancel} HTTP/1.1\r\nHost: {admin}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: text/plain\r\n"
    );
    let (status, body) = raw(admin, &form, b"{}").await;
    assert_eq!(status, 415, "{body}");
    let (status, body) = request(admin, "POST", &cancel, Some(TOKEN), "{}").await;
    assert_eq!(status, 202, "{body}");

    let end = job_until(admin, &id, "the job cancelled", |v| {
        v["state"] == "cancelled"
    })
    .await;
    let moved = end["done"].as_u64().expect("done");
    assert!(moved > 0 && moved < total as u64, "{end}");
    // The rest stayed parked; each moved one was handled once and parked again behind them.
    fixture.settled(moved, total).await;
    let lines = audits(&fixture.host.log(), &id);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[1]["cancelled"], json!(true));
    assert_eq!(lines[1]["done"], json!(moved));
    fixture.stop().await;
}

/// As `raw`, with the `Location` header of the answer.
async fn raw_with_location(
    addr: SocketAddr,
    head: &str,
    body: &[u8],
) -> (u16, Value, Option<String>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = super::begin(addr, head, body.len()).await;
    s.write_all(body).await.expect("send");
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.expect("read");
    let text = String::from_utf8_lossy(&out);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let location = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("location: ")
                .or_else(|| l.strip_prefix("Location: "))
        })
        .map(str::to_string);
    (
        status,
        serde_json::from_str(body).unwrap_or(Value::Null),
        location,
    )
}

#[tokio::test]
async fn a_group_discard_past_500_messages_runs_as_a_job() {
    let fixture = JobHost::start("jobs-group").await;
    fixture.park(600).await;
    let admin = fixture.admin;
    let listing = get(admin, "/api/groups?scan=10").await;
    let group = listing["groups"][0]["group"]
        .as_str()
        .unwrap_or_else(|| panic!("no group in {listing}"))
        .to_string();
    let path = format!("/api/groups/{group}/discard");
    let (status, started) = request(admin, "POST", &path, Some(TOKEN), "{}").await;
    assert_eq!(status, 202, "{started}");
    assert_eq!(started["job"]["target"], json!({ "group": group }));
    assert_eq!(started["job"]["total"], json!(600), "{started}");
    let id = started["job"]["id"].as_str().expect("a job id").to_string();
    let end = job_until(admin, &id, "the job done", |v| v["state"] == "done").await;
    assert_eq!(
        (&end["done"], &end["examined"]),
        (&json!(600), &json!(600)),
        "{end}"
    );
    assert_eq!(fixture.depth(&fixture.failed()).await, 0);
    let discarded = fixture
        .host
        .log()
        .lines()
        .filter(|l| l.contains("\"message\":\"discarded\""))
        .count();
    assert_eq!(discarded, 600, "one audit line per message, as ever");
    fixture.stop().await;
}
