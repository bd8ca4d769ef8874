//! The outbox (`outbox = true`) on SQLite and PostgreSQL: a message id is handled once, its
//! publishes carry `<id>:<n>`; an answer other than ok leaves nothing; and a crash at each point
//! between commit and ack (the binary aborting at a crash point, then started again) causes no
//! second effect and no publish under a new id.

use std::time::Duration;

use lapin::BasicProperties;
use serde_json::{Value, json};

use super::db::{self, Kind, Pool};
use super::support::{Probe, Sub, id_of};
use worker_host::failpoint::FAILPOINT_ENV;

/// One test's rows table and the probe subscription `ob` writing to it.
struct Case {
    kind: Kind,
    db: Pool,
    rows: String,
    state: tempfile::TempDir,
}

impl Case {
    async fn new(kind: Kind) -> Case {
        let state = tempfile::tempdir().expect("state dir");
        let db = Pool::connect(kind, state.path()).await;
        let rows = db::table("outbox_rows");
        db.exec(&format!("CREATE TABLE {rows} (id VARCHAR(64) NOT NULL)"))
            .await;
        Case {
            kind,
            db,
            rows,
            state,
        }
    }

    /// Subscription `ob`, one message at a time, with `keys` added.
    fn subs(&self, keys: &str) -> [Sub; 1] {
        let keys = format!("sql = \"db\"\noutbox = true\nconcurrency = 1\nprefetch = 1\n{keys}");
        [Sub::new("ob", &keys)]
    }

    fn tables(&self) -> String {
        format!("[sql.db]\nurl = \"{}\"\n", self.kind.toml_url())
    }

    /// A script inserting its id into the rows table, answering `answer` (the probe then
    /// publishes its report: the one publish of an ok).
    fn script(&self, id: &str, answer: &str) -> Value {
        let statement = format!(
            "INSERT INTO {} (id) VALUES ({})",
            self.rows,
            self.kind.param(1)
        );
        json!({"id": id, "steps": [{"sql": "execute", "statement": statement, "params": [id]}],
               "answer": answer})
    }

    /// How many rows hold `id`.
    async fn effects(&self, id: &str) -> usize {
        self.db
            .ids(&self.rows)
            .await
            .iter()
            .filter(|r| *r == id)
            .count()
    }

    async fn done(self) {
        self.db.drop_tables(&[&self.rows]).await;
    }
}

fn with_id(id: &str) -> BasicProperties {
    BasicProperties::default().with_message_id(id.into())
}

/// Reports until the one of `last` arrives: (report id, message id) of each.
async fn reports_until(probe: &mut Probe, last: &str) -> Vec<(String, Option<String>)> {
    let mut seen = Vec::new();
    loop {
        let Some(msg) = probe.next_report(Duration::from_secs(20)).await else {
            panic!(
                "no report of {last} after 20 s; got {seen:?}; log:\n{}",
                probe.log()
            );
        };
        let report: Value = serde_json::from_slice(&msg.delivery.data).expect("a report");
        let id = id_of(&report);
        let message_id = msg
            .delivery
            .properties
            .message_id()
            .as_ref()
            .map(|s| s.to_string());
        seen.push((id.clone(), message_id));
        if id == last {
            return seen;
        }
    }
}

#[tokio::test]
async fn sqlite_outbox_handles_a_message_id_once() {
    handled_once(Kind::Sqlite).await;
}

#[tokio::test]
async fn postgres_outbox_handles_a_message_id_once() {
    handled_once(Kind::Postgres).await;
}

/// A redelivered message id is acked without a call; publishes are numbered `<id>:1`; a
/// message without an id is handled as usual; a retry leaves no effect and no record.
async fn handled_once(kind: Kind) {
    let case = Case::new(kind).await;
    let test = format!("outbox-once-{kind:?}").to_ascii_lowercase();
    let subs = case.subs("max_retries = 0");
    let mut probe = Probe::start(&test, &subs, case.state.path(), &case.tables()).await;

    probe
        .send_with("ob", &case.script("m-1", "ok"), with_id("m-1"))
        .await;
    probe
        .send_with("ob", &case.script("m-1", "ok"), with_id("m-1"))
        .await;
    probe
        .send_with("ob", &case.script("m-2", "retry"), with_id("m-2"))
        .await;
    probe.send("ob", &case.script("m-3", "ok")).await;
    let seen = reports_until(&mut probe, "m-3").await;
    assert_eq!(
        seen,
        [
            ("m-1".to_string(), Some("m-1:1".to_string())),
            ("m-3".to_string(), None)
        ],
        "one report of m-1, under its outbox id; m-3 has no id to number from"
    );
    probe.parked("ob", "m-2").await;
    assert_eq!(case.effects("m-1").await, 1, "m-1 handled once");
    assert_eq!(case.effects("m-2").await, 0, "a retry leaves nothing");
    assert_eq!(case.effects("m-3").await, 1);
    probe.stop().await;
    case.done().await;
}

#[tokio::test]
async fn sqlite_crash_before_commit_leaves_one_effect() {
    crash_at(Kind::Sqlite, "outbox-before-commit").await;
}

#[tokio::test]
async fn sqlite_crash_after_commit_leaves_one_effect() {
    crash_at(Kind::Sqlite, "outbox-after-commit").await;
}

#[tokio::test]
async fn sqlite_crash_after_publish_leaves_one_effect() {
    crash_at(Kind::Sqlite, "outbox-after-publish").await;
}

#[tokio::test]
async fn sqlite_crash_after_mark_leaves_one_effect() {
    crash_at(Kind::Sqlite, "outbox-after-mark").await;
}

#[tokio::test]
async fn postgres_crash_after_commit_leaves_one_effect() {
    crash_at(Kind::Postgres, "outbox-after-commit").await;
}

#[tokio::test]
async fn postgres_crash_after_publish_leaves_one_effect() {
    crash_at(Kind::Postgres, "outbox-after-publish").await;
}

/// The binary aborts at `point` while handling m-1, then runs again: m-1's row exists once,
/// and every report of it carries `m-1:1` (a crash after publishing may send that id twice).
async fn crash_at(kind: Kind, point: &str) {
    let case = Case::new(kind).await;
    let test = format!("outbox-crash-{kind:?}").to_ascii_lowercase();
    let subs = case.subs("");
    let env = [(FAILPOINT_ENV, point)];
    let mut probe = Probe::start_child(&test, &subs, case.state.path(), &case.tables(), &env).await;
    probe
        .send_with("ob", &case.script("m-1", "ok"), with_id("m-1"))
        .await;
    let status = probe.exited().await;
    assert!(!status.success(), "{point}: exited with {status}");
    probe.restart_child(&[]).await;
    probe
        .send_with("ob", &case.script("m-2", "ok"), with_id("m-2"))
        .await;
    let seen = reports_until(&mut probe, "m-2").await;
    let m1: Vec<_> = seen.iter().filter(|(id, _)| id == "m-1").collect();
    assert!(!m1.is_empty(), "{point}: m-1 never published: {seen:?}");
    assert!(
        m1.iter().all(|(_, mid)| mid.as_deref() == Some("m-1:1")),
        "{point}: a report of m-1 under another id: {seen:?}"
    );
    // After the commit, the redelivery and the start-up sweep may both send m-1:1.
    if matches!(point, "outbox-before-commit" | "outbox-after-mark") {
        assert_eq!(m1.len(), 1, "{point}: {seen:?}");
    }
    assert_eq!(case.effects("m-1").await, 1, "{point}: m-1's effect");
    assert_eq!(case.effects("m-2").await, 1);
    probe.stop().await;
    case.done().await;
}
