//! The outbox (`outbox = true`) on SQLite and PostgreSQL: a message id is handled once, its
//! publishes carry `<id>:<n>`; an answer other than ok leaves nothing; and a crash at each point
//! between commit and ack (the binary aborting at a crash point, then started again) causes no
//! second effect and no publish under a new id.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use lapin::BasicProperties;
use serde_json::{Value, json};

use super::db::{self, Kind, Pool};
use super::support::{Probe, Seen, Sub, seen_of};
use worker_host::failpoint::FAILPOINT_ENV;

/// One test's rows table and the probe subscription `ob` writing to it.
pub(crate) struct Case {
    pub(crate) kind: Kind,
    pub(crate) db: Pool,
    pub(crate) rows: String,
    pub(crate) state: tempfile::TempDir,
}

impl Case {
    pub(crate) async fn new(kind: Kind) -> Case {
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
        self.sub(&format!("concurrency = 1\nprefetch = 1\n{keys}"))
    }

    /// Subscription `ob` with its grant, the outbox and `keys`.
    pub(crate) fn sub(&self, keys: &str) -> [Sub; 1] {
        [Sub::new(
            "ob",
            &format!("sql = \"db\"\noutbox = true\n{keys}"),
        )]
    }

    pub(crate) fn tables(&self) -> String {
        format!("[sql.db]\nurl = \"{}\"\n", self.kind.toml_url())
    }

    /// A script inserting its id into the rows table, answering `answer` (the probe then
    /// publishes its report: the one publish of an ok).
    pub(crate) fn script(&self, id: &str, answer: &str) -> Value {
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

    pub(crate) async fn done(self) {
        self.db.drop_tables(&[&self.rows]).await;
    }
}

pub(crate) fn with_id(id: &str) -> BasicProperties {
    BasicProperties::default().with_message_id(id.into())
}

/// Reports until the one of `last` arrives.
async fn reports_until(probe: &mut Probe, last: &str) -> Vec<Seen> {
    reports_while(probe, last, |seen| {
        seen.last().is_some_and(|(id, _)| id == last)
    })
    .await
}

/// Reports until one of each of `ids` arrived (a message handled twice may report twice).
pub(crate) async fn reports_of_all(probe: &mut Probe, ids: &[String]) -> Vec<Seen> {
    let mut missing: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
    if missing.is_empty() {
        return Vec::new();
    }
    reports_while(probe, "every id", |seen| {
        if let Some((id, _)) = seen.last() {
            missing.remove(id.as_str());
        }
        missing.is_empty()
    })
    .await
}

/// Reports, each as it arrives, until `enough` says so; fails after 20 s without one.
pub(crate) async fn reports_while(
    probe: &mut Probe,
    what: &str,
    mut enough: impl FnMut(&[Seen]) -> bool,
) -> Vec<Seen> {
    let mut seen = Vec::new();
    loop {
        let Some(msg) = probe.next_report(Duration::from_secs(20)).await else {
            panic!(
                "no report after 20 s waiting for {what}; got {seen:?}; log:\n{}",
                probe.log()
            );
        };
        seen.push(seen_of(&msg));
        if enough(&seen) {
            return seen;
        }
    }
}

/// Every one of `ids` was published, each report of it under its outbox id `<id>:1` and none
/// under another; how many reports each had.
pub(crate) fn published_under_own_ids(seen: &[Seen], ids: &[String]) -> BTreeMap<String, usize> {
    let mut count = BTreeMap::new();
    for id in ids {
        let own = Some(format!("{id}:1"));
        let of_id: Vec<_> = seen.iter().filter(|(r, _)| r == id).collect();
        assert!(!of_id.is_empty(), "{id} never published: {seen:?}");
        assert!(
            of_id.iter().all(|(_, mid)| *mid == own),
            "a report of {id} under another id: {seen:?}"
        );
        count.insert(id.clone(), of_id.len());
    }
    count
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
    let m1 = published_under_own_ids(&seen, &["m-1".to_string()])["m-1"];
    // After the commit, the redelivery and the start-up sweep may both send m-1:1.
    if matches!(point, "outbox-before-commit" | "outbox-after-mark") {
        assert_eq!(m1, 1, "{point}: {seen:?}");
    }
    assert_eq!(case.effects("m-1").await, 1, "{point}: m-1's effect");
    assert_eq!(case.effects("m-2").await, 1);
    probe.stop().await;
    case.done().await;
}
