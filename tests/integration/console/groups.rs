//! Failure groups across queues and search, through the API with `[admin] token`: messages
//! parked in two queues with three distinct causes (one with a different number in each
//! message) make three groups with the right counts; a group is dry-run, discarded and
//! replayed as a whole; a body word finds its one message.

use std::net::SocketAddr;

use lapin::BasicProperties;
use lapin::types::FieldTable;
use serde_json::{Value, json};

use super::{TOKEN, request};
use crate::capabilities::support::{Probe, Sub};
use crate::harness;
use crate::harness::free_addr;

const DUPLICATE: &str =
    r#"sql error: constraint: duplicate key value violates unique constraint "orders_pkey""#;

/// A running service with two probe subscriptions, `ga` and `gb`.
pub(crate) struct TwoQueues {
    pub probe: Probe,
    pub admin: SocketAddr,
    _state: tempfile::TempDir,
}

impl TwoQueues {
    pub async fn start(test: &str) -> TwoQueues {
        let state = tempfile::tempdir().expect("state dir");
        let admin = free_addr();
        let tables = format!("[admin]\nlisten = \"{admin}\"\ntoken = \"{TOKEN}\"\n");
        let subs = [Sub::new("ga", ""), Sub::new("gb", "")];
        let probe = Probe::start(test, &subs, state.path(), &tables).await;
        TwoQueues {
            probe,
            admin,
            _state: state,
        }
    }

    pub fn queue(&self, sub: &str) -> String {
        format!("{}.{sub}", self.probe.n.p)
    }

    /// Parks a message in `sub`'s failed queue as the host would: its cause, reason, plugin
    /// version and time; the body a script the probe answers ok to (a replay is handled).
    pub async fn park(&self, sub: &str, id: &str, cause: &str, at: &str) {
        let mut headers = FieldTable::default();
        let text = |s: &str| lapin::types::AMQPValue::LongString(s.as_bytes().to_vec().into());
        headers.insert("worker-error".into(), text(cause));
        headers.insert("worker-failed-reason".into(), text("fail"));
        headers.insert("worker-plugin".into(), text("cap_probe.wasm"));
        headers.insert("worker-plugin-sha256".into(), text("ab12"));
        headers.insert("worker-failed-at".into(), text(at));
        headers.insert(
            "x-orig-routing-key".into(),
            text(&format!("{}.{sub}.x", self.probe.n.p)),
        );
        let props = BasicProperties::default()
            .with_message_id(id.into())
            .with_correlation_id(format!("corr-{id}").into())
            .with_headers(headers);
        let body = json!({"id": id, "note": format!("parcel for {id}")}).to_string();
        let failed = format!("{}@failed", self.queue(sub));
        harness::publish(&self.probe.ch, "", &failed, body.as_bytes(), props).await;
    }

    pub async fn depth(&self, sub: &str) -> u32 {
        harness::depth(&self.probe.ch, &format!("{}@failed", self.queue(sub))).await
    }
}

/// The group whose fingerprint starts with `start`.
fn group<'a>(listing: &'a Value, start: &str) -> &'a Value {
    listing["groups"]
        .as_array()
        .and_then(|g| {
            g.iter().find(|g| {
                g["fingerprint"]
                    .as_str()
                    .is_some_and(|f| f.starts_with(start))
            })
        })
        .unwrap_or_else(|| panic!("no group {start:?} in {listing}"))
}

#[tokio::test]
async fn three_causes_in_two_queues_make_three_groups_acted_on_as_a_whole() {
    let fixture = TwoQueues::start("console-groups").await;
    let (ga, gb) = (fixture.queue("ga"), fixture.queue("gb"));
    for (sub, id, n, at) in [
        ("ga", "d-1", 4711, "2026-11-01T10:00:00Z"),
        ("ga", "d-2", 12, "2026-11-01T11:00:00Z"),
        ("gb", "d-3", 99_001, "2026-11-01T09:00:00Z"),
    ] {
        let cause = format!("{DUPLICATE} (id={n})");
        fixture.park(sub, id, &cause, at).await;
    }
    let no_table = "sql error: no such table: flags";
    fixture
        .park("ga", "t-1", no_table, "2026-11-02T00:00:00Z")
        .await;
    fixture
        .park("gb", "t-2", no_table, "2026-11-02T00:00:01Z")
        .await;
    let timeout = "timeout: still running after 8s";
    fixture
        .park("gb", "s-1", timeout, "2026-11-03T00:00:00Z")
        .await;
    assert_eq!(
        (fixture.depth("ga").await, fixture.depth("gb").await),
        (3, 3)
    );
    let admin = fixture.admin;

    let (status, body) = request(admin, "GET", "/api/groups", None, "").await;
    assert_eq!(status, 401, "reads need the token: {body}");
    let (status, listing) = request(admin, "GET", "/api/groups", Some(TOKEN), "").await;
    assert_eq!(status, 200, "{listing}");
    assert_eq!(
        listing["groups"].as_array().map(Vec::len),
        Some(3),
        "{listing}"
    );
    let dup = group(&listing, "sql error: constraint");
    assert_eq!(
        dup["fingerprint"],
        json!(
            r#"sql error: constraint: duplicate key value violates unique constraint "*" (id=*)"#
        )
    );
    assert_eq!(dup["count"], json!(3));
    assert_eq!(dup["queues"], json!({ ga.clone(): 2, gb.clone(): 1 }));
    assert_eq!(dup["first_seen"], json!("2026-11-01T09:00:00Z"));
    assert_eq!(dup["last_seen"], json!("2026-11-01T11:00:00Z"));
    assert_eq!(dup["plugin_sha256"], json!("ab12"));
    assert_eq!(dup["example"]["id"], json!("d-1"), "{dup}");
    assert_eq!(group(&listing, "sql error: no such")["count"], json!(2));
    assert_eq!(group(&listing, "timeout")["count"], json!(1));
    let covered = listing["scanned"].as_array().expect("scanned");
    assert_eq!(covered.len(), 2, "{listing}");
    for c in covered {
        assert_eq!(
            (&c["depth"], &c["scanned"], &c["complete"]),
            (&json!(3), &json!(3), &json!(true)),
            "{c}"
        );
    }
    assert_eq!(fixture.depth("ga").await, 3, "listing moves nothing");

    // A bounded scan says what part it covers.
    let (status, part) = request(admin, "GET", "/api/groups?scan=1", Some(TOKEN), "").await;
    assert_eq!(status, 200, "{part}");
    assert_eq!(part["scanned"][0]["scanned"], json!(1));
    assert_eq!(part["scanned"][0]["complete"], json!(false));
    let (status, _) = request(admin, "GET", "/api/groups?scan=100000", Some(TOKEN), "").await;
    assert_eq!(status, 400);

    // Actions on a whole group, across both queues.
    let id = |g: &Value| g["group"].as_str().expect("group id").to_string();
    let (dup_id, table_id, timeout_id) = (
        id(dup),
        id(group(&listing, "sql error: no such")),
        id(group(&listing, "timeout")),
    );
    let path = |g: &str, action: &str| format!("/api/groups/{g}/{action}");
    let (status, body) = request(admin, "POST", &path(&timeout_id, "discard"), None, "{}").await;
    assert_eq!(status, 401, "{body}");
    // What another web page could send is refused, as for every change.
    let discard = path(&timeout_id, "discard");
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");
    for (head, status) in [
        (
            format!(
                "POST {discard} HTTP/1.1\r\nHost: {admin}\r\n{auth}Content-Type: text/plain\r\n"
            ),
            415,
        ),
        (
            format!(
                "POST {discard} HTTP/1.1\r\nHost: {admin}\r\n{auth}Content-Type: application/json\r\n\
                 Origin: http://evil.example\r\n"
            ),
            403,
        ),
    ] {
        let (got, body) = super::raw(admin, &head, b"{}").await;
        assert_eq!(got, status, "{head}{body}");
    }
    assert_eq!(fixture.depth("gb").await, 3, "nothing discarded");
    let (status, tried) = request(
        admin,
        "POST",
        &path(&table_id, "dry-run"),
        Some(TOKEN),
        "{}",
    )
    .await;
    assert_eq!((status, &tried["done"]), (200, &json!(2)), "{tried}");
    let (status, done) = request(
        admin,
        "POST",
        &path(&timeout_id, "discard"),
        Some(TOKEN),
        "{}",
    )
    .await;
    assert_eq!((status, &done["done"]), (200, &json!(1)), "{done}");
    let (status, done) = request(admin, "POST", &path(&dup_id, "replay"), Some(TOKEN), "{}").await;
    assert_eq!((status, &done["done"]), (200, &json!(3)), "{done}");
    assert_eq!(
        (fixture.depth("ga").await, fixture.depth("gb").await),
        (1, 1),
        "t-1 and t-2 stay"
    );
    let (status, _) = request(admin, "POST", &path(&dup_id, "explode"), Some(TOKEN), "{}").await;
    assert_eq!(status, 404);
    fixture.probe.stop().await;
}

#[tokio::test]
async fn a_body_word_an_id_or_a_header_value_finds_its_message() {
    let fixture = TwoQueues::start("console-search").await;
    fixture
        .park("ga", "f-1", "boom 1", "2026-11-01T00:00:00Z")
        .await;
    fixture
        .park("ga", "f-2", "boom 2", "2026-11-01T00:00:00Z")
        .await;
    fixture
        .park("gb", "f-3", "boom 3", "2026-11-01T00:00:00Z")
        .await;
    let admin = fixture.admin;
    let search = |q: &str| format!("/api/search?q={q}");

    let (status, _) = request(admin, "GET", &search("f-3"), None, "").await;
    assert_eq!(status, 401, "reads need the token");
    // "parcel for f-2" is in the body of f-2 only.
    let (status, found) =
        request(admin, "GET", &search("PARCEL%20FOR%20F-2"), Some(TOKEN), "").await;
    assert_eq!(status, 200, "{found}");
    let messages = found["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 1, "{found}");
    assert_eq!(messages[0]["id"], json!("f-2"));
    assert_eq!(messages[0]["queue"], json!(fixture.queue("ga")));
    assert_eq!(messages[0]["found_in"], json!(["body"]));
    assert_eq!(
        found["scanned"].as_array().map(Vec::len),
        Some(2),
        "{found}"
    );

    let (_, found) = request(admin, "GET", &search("corr-f-3"), Some(TOKEN), "").await;
    assert_eq!(
        found["messages"][0]["found_in"],
        json!(["correlation_id"]),
        "{found}"
    );
    let (_, found) = request(admin, "GET", &search("boom%203"), Some(TOKEN), "").await;
    assert_eq!(
        found["messages"][0]["found_in"],
        json!(["header:worker-error"]),
        "{found}"
    );
    // One queue only, and every match with a limit.
    let only = format!("{}&queue={}", search("f-"), fixture.queue("gb"));
    let (_, found) = request(admin, "GET", &only, Some(TOKEN), "").await;
    assert_eq!(
        found["messages"].as_array().map(Vec::len),
        Some(1),
        "{found}"
    );
    let (_, found) = request(
        admin,
        "GET",
        &format!("{}&limit=2", search("f-")),
        Some(TOKEN),
        "",
    )
    .await;
    assert_eq!(
        (found["messages"].as_array().map(Vec::len), &found["more"]),
        (Some(2), &json!(true))
    );
    let (status, _) = request(admin, "GET", &search(""), Some(TOKEN), "").await;
    assert_eq!(status, 400);
    assert_eq!(
        (fixture.depth("ga").await, fixture.depth("gb").await),
        (2, 1),
        "nothing moved"
    );
    fixture.probe.stop().await;
}
