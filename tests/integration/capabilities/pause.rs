//! `pause_after` with a dependency that is down (an SQL statement that fails while a flag row
//! exists): after three answers in a row that are not ok the subscription stops taking
//! deliveries, the rest wait ready in the queue instead of using up their retries, and once the
//! dependency is back one message at a time answers ok and the subscription resumes.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;

use super::db::{self, Kind, Pool};
use super::support::{Probe, Sub};
use crate::faults::support::metric;
use crate::harness::{self, free_addr, http_get};

/// `worker_subscription_paused` of `queue`, once /metrics answers.
async fn paused(admin: SocketAddr, queue: &str) -> Option<i64> {
    let (_, text) = http_get(admin, "/metrics").await?;
    let label = format!("queue=\"{queue}\"");
    Some(metric(&text, "worker_subscription_paused", &label) as i64)
}

#[tokio::test]
async fn pause_after_keeps_messages_ready_and_resumes_when_one_answers_ok() {
    let state = tempfile::tempdir().expect("state dir");
    let db = Pool::connect(Kind::Sqlite, state.path()).await;
    let flag = db::table("pause_flag");
    db.exec(&format!("CREATE TABLE {flag} (x INTEGER)")).await;
    db.exec(&format!("INSERT INTO {flag} VALUES (1)")).await;
    let admin = free_addr();
    let keys = "sql = \"db\"\npause_after = 3\npause_for = \"1s\"\nmax_retries = 20\n\
                retry_delays = [\"200ms\"]\nconcurrency = 1\nprefetch = 1";
    let tables = format!(
        "[admin]\nlisten = \"{admin}\"\n\n[sql.db]\nurl = \"{}\"\n",
        Kind::Sqlite.toml_url()
    );
    let mut probe = Probe::start("pause", &[Sub::new("ps", keys)], state.path(), &tables).await;
    let queue = format!("{}.ps", probe.n.p);
    // Integer overflow while the flag row exists: the handler answers retry.
    let statement = format!(
        "SELECT CASE WHEN EXISTS (SELECT 1 FROM {flag}) THEN abs(-9223372036854775808) ELSE 1 END"
    );
    let id = |i: usize| format!("p-{i:02}");
    for i in 0..20 {
        let step = json!({"sql": "query", "statement": statement});
        let script = json!({"id": id(i), "steps": [step], "on_error": "retry"});
        probe.send("ps", &script).await;
    }

    harness::eventually(
        Duration::from_secs(20),
        "the subscription paused",
        || async { (paused(admin, &queue).await == Some(1)).then_some(()) },
    )
    .await;
    let ready = harness::depth(&probe.ch, &queue).await;
    assert!(
        ready >= 10,
        "only {ready} messages wait in {queue} while it is paused"
    );
    let failed = format!("{queue}@failed");
    assert_eq!(
        harness::depth(&probe.ch, &failed).await,
        0,
        "nothing parked"
    );

    db.exec(&format!("DELETE FROM {flag}")).await;
    for i in 0..20 {
        let report = probe.report(&id(i)).await;
        assert_eq!(
            report["results"][0]["ok"]["rows"][0][0],
            json!(1),
            "{report}"
        );
    }
    harness::eventually(
        Duration::from_secs(10),
        "the subscription resumed",
        || async { (paused(admin, &queue).await == Some(0)).then_some(()) },
    )
    .await;
    assert_eq!(
        harness::depth(&probe.ch, &failed).await,
        0,
        "no message used up its retries"
    );
    probe.stop().await;
    db.drop_tables(&[&flag]).await;
}
