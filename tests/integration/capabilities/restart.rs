//! A database restarted while messages flow: handlers get `unavailable` and answer retry, the
//! messages come back, and at the end every message's row is there exactly once. The test
//! stops and starts the machine's PostgreSQL (`service postgresql stop|start`), so it runs
//! alone: scripts/test.sh skips the `server_restart_` prefix in the main run and runs it after.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lapin::BasicProperties;
use serde_json::json;

use super::db::{self, Kind, Pool};
use super::support::{POSTGRES, Probe, Sub};
use crate::harness::{free_addr, http_get};

/// PostgreSQL stopped; started again by [`Stopped::start`], or when dropped (a failing test).
struct Stopped {
    up: bool,
}

impl Stopped {
    async fn stop() -> Stopped {
        service("stop").await;
        Stopped { up: false }
    }

    async fn start(mut self) {
        service("start").await;
        self.up = true;
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if !self.up {
            let _ = std::process::Command::new("service")
                .args(["postgresql", "start"])
                .status();
        }
    }
}

/// `service postgresql <action>`; fails naming the start command.
async fn service(action: &str) {
    let out = tokio::process::Command::new("service")
        .args(["postgresql", action])
        .output()
        .await
        .unwrap_or_else(|e| panic!("run service postgresql {action}: {e}"));
    assert!(
        out.status.success(),
        "service postgresql {action} failed: {}{}\nstart it with: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        POSTGRES.start
    );
}

/// `worker_capability_calls_total` of the SQL database `pg` with result `unavailable`.
async fn unavailable_calls(admin: SocketAddr) -> u64 {
    let labels = [
        "capability=\"sql\"",
        "store=\"pg\"",
        "result=\"unavailable\"",
    ];
    metric(admin, "worker_capability_calls_total", &labels).await
}

/// The sum of the series of `name` whose labels include `labels`.
async fn metric(admin: SocketAddr, name: &str, labels: &[&str]) -> u64 {
    let Some((_, metrics)) = http_get(admin, "/metrics").await else {
        return 0;
    };
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// Publishes message `i` under message id `m-<i>`.
async fn send(probe: &Probe, body: &serde_json::Value, i: usize) {
    let props = BasicProperties::default().with_message_id(id(i).into());
    probe.send_with("pg", body, props).await;
}

fn id(i: usize) -> String {
    format!("m-{i:04}")
}

#[tokio::test]
async fn server_restart_postgres_mid_stream_retries_and_loses_nothing() {
    mid_stream(false).await;
}

/// The same with `outbox = true`: the outbox's own lookups and records go through the stopped
/// server too, and still every message is handled once.
#[tokio::test]
async fn server_restart_postgres_mid_stream_with_the_outbox_loses_and_doubles_nothing() {
    mid_stream(true).await;
}

async fn mid_stream(outbox: bool) {
    let state = tempfile::tempdir().expect("state dir");
    let db = Pool::connect(Kind::Postgres, state.path()).await;
    let t = db::table("cap_restart");
    db.exec(&format!("CREATE TABLE {t} (id VARCHAR(64) NOT NULL)"))
        .await;
    let keys = "sql = \"pg\"\nconcurrency = 4\nmax_retries = 1000\ntimeout = \"10s\"";
    let keys = if outbox {
        format!("{keys}\noutbox = true")
    } else {
        keys.to_string()
    };
    let sub = Sub::new("pg", &keys);
    let admin = free_addr();
    let tables = format!(
        "[admin]\nlisten = \"{admin}\"\n\n[sql.pg]\nurl = \"{}\"\nmax_connections = 4\n",
        Kind::Postgres.toml_url()
    );
    let mut probe = Probe::start("cap-pg-restart", &[sub], state.path(), &tables).await;
    let insert = format!("INSERT INTO {t} (id) VALUES ($1)");
    let message = |i: usize| {
        let step = json!({"sql": "execute", "statement": insert, "params": [id(i)]});
        json!({"id": id(i), "steps": [step], "on_error": "retry"})
    };

    // A steady stream; PostgreSQL stops once it flows, and stays down until a handler has
    // been answered `unavailable`.
    let mut sent = 0;
    for _ in 0..20 {
        send(&probe, &message(sent), sent).await;
        sent += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut reports = BTreeMap::new();
    reports.insert(id(9), probe.report(&id(9)).await);
    let stopped = Stopped::stop().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    // With the outbox, the lookup before the call fails first: the message is retried.
    let retried = || metric(admin, "worker_messages_total", &["outcome=\"retry\""]);
    while unavailable_calls(admin).await == 0 && !(outbox && retried().await > 0) {
        assert!(
            Instant::now() < deadline,
            "no SQL call answered unavailable in 30 s with PostgreSQL stopped"
        );
        send(&probe, &message(sent), sent).await;
        sent += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stopped.start().await;
    for _ in 0..20 {
        send(&probe, &message(sent), sent).await;
        sent += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    for i in 0..sent {
        if let Entry::Vacant(slot) = reports.entry(id(i)) {
            slot.insert(probe.report(&id(i)).await);
        }
    }
    let retried: Vec<&str> = reports
        .values()
        .filter(|r| r["attempt"].as_u64() > Some(1))
        .map(|r| r["headers"]["worker-error"].as_str().unwrap_or(""))
        .collect();
    println!(
        "{sent} messages, {} retried, {} unavailable calls",
        retried.len(),
        unavailable_calls(admin).await
    );
    let expected: Vec<String> = (0..sent).map(id).collect();
    assert_eq!(db.ids(&t).await, expected, "every message's row, once");
    // The handler's `unavailable`, or with the outbox its lookup before the call.
    assert!(
        retried.iter().any(|why| why.contains("unavailable")),
        "no message was retried after its handler got unavailable: {retried:?}"
    );
    probe.stop().await;
    db.drop_tables(&[&t]).await;
}
