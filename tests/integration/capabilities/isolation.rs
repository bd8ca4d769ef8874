//! What a SQL grant cannot reach (SPEC section 9), tried by the probe as a hostile plugin
//! would, on SQLite, PostgreSQL and MariaDB: the host's outbox and inbox tables, its
//! transaction, other databases and files, the server's time after the handler's deadline,
//! and the session the next message gets. Each escape comes back `invalid` (or is cut off at
//! the deadline) and leaves nothing behind.

use std::process::Command;
use std::time::{Duration, Instant};

use lapin::BasicProperties;
use serde_json::{Value, json};

use super::db::{self, Kind, Pool};
use super::support::{Probe, Sub, outcomes, results, script, worker_error};
use crate::harness;

/// One probe subscription `iso` on `kind`, with a rows table of its own.
struct Case {
    db: Pool,
    rows: String,
    probe: Probe,
    state: tempfile::TempDir,
}

impl Case {
    async fn start(test: &str, kind: Kind, keys: &str, extra_tables: &str) -> Case {
        let state = tempfile::tempdir().expect("state dir");
        let db = Pool::connect(kind, state.path()).await;
        let rows = db::table("iso_rows");
        db.exec(&format!("CREATE TABLE {rows} (id VARCHAR(64) NOT NULL)"))
            .await;
        let keys = format!("sql = \"db\"\nmax_retries = 0\n{keys}");
        let tables = format!(
            "[sql.db]\nurl = \"{}\"\nmax_connections = 2\n\n{extra_tables}",
            kind.toml_url()
        );
        let test = format!("{test}-{kind:?}").to_ascii_lowercase();
        let probe = Probe::start(&test, &[Sub::new("iso", &keys)], state.path(), &tables).await;
        Case {
            db,
            rows,
            probe,
            state,
        }
    }

    fn insert(&self, id: &str) -> Value {
        let statement = format!("INSERT INTO {} (id) VALUES ('{id}')", self.rows);
        sql(&statement)
    }

    /// Runs `steps`, answered ok; the report.
    async fn run(&mut self, id: &str, steps: Value) -> Value {
        self.probe.run("iso", script(id, steps)).await
    }

    /// Runs `steps` answered `answer` (retry or fail) and waits until it is parked; the report.
    async fn parked(&mut self, id: &str, steps: Value, answer: &str) -> Value {
        worker_error(&self.parked_headers(id, steps, answer).await)
    }

    /// Runs `steps` answered `answer` and waits until it is parked; its `worker-error`.
    async fn parked_why(&mut self, id: &str, steps: Value, answer: &str) -> String {
        let headers = self.parked_headers(id, steps, answer).await;
        headers.get("worker-error").cloned().unwrap_or_default()
    }

    async fn parked_headers(
        &mut self,
        id: &str,
        steps: Value,
        answer: &str,
    ) -> std::collections::BTreeMap<String, String> {
        let body = json!({"id": id, "steps": steps, "answer": answer});
        self.probe.send("iso", &body).await;
        self.probe.parked("iso", id).await
    }

    async fn stop(self) {
        self.probe.stop().await;
        self.db.drop_tables(&[&self.rows]).await;
        drop(self.state);
    }
}

/// Declares `queue` (durable), a destination a forged row would publish to.
async fn declare(ch: &lapin::Channel, queue: &str) {
    let options = lapin::options::QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.queue_declare(queue.into(), options, Default::default())
        .await
        .expect("declare the queue");
}

fn sql(statement: &str) -> Value {
    json!({"sql": "execute", "statement": statement})
}

fn query(statement: &str) -> Value {
    json!({"sql": "query", "statement": statement})
}

/// The `invalid` error text of each result, asserting every one is `invalid`.
fn invalid(report: &Value) -> Vec<String> {
    results(report)
        .iter()
        .map(|r| {
            assert_eq!(r["error"], json!("invalid"), "not refused: {r} in {report}");
            r["text"].as_str().unwrap_or_default().to_owned()
        })
        .collect()
}

// Item 1: the outbox and inbox tables.

#[tokio::test]
async fn isolation_sqlite_a_plugin_cannot_forge_outbox_or_inbox_rows() {
    forged_rows(Kind::Sqlite).await;
}

#[tokio::test]
async fn isolation_postgres_a_plugin_cannot_forge_outbox_or_inbox_rows() {
    forged_rows(Kind::Postgres).await;
}

#[tokio::test]
async fn isolation_mariadb_a_plugin_cannot_forge_outbox_or_inbox_rows() {
    forged_rows(Kind::MariaDb).await;
}

/// A forged outbox row (the default exchange, a queue of the test's as routing key) and a
/// forged inbox row for a message id still to come are refused; that message is then handled
/// by the plugin, and nothing reaches the queue.
async fn forged_rows(kind: Kind) {
    let mut case = Case::start("iso-forge", kind, "outbox = true", "").await;
    let victim = format!("{}.victim", case.probe.n.p);
    declare(&case.probe.ch, &victim).await;
    let queue = format!("{}.iso", case.probe.n.p);
    // The tables exist once a message with an id went through the outbox.
    let props = BasicProperties::default().with_message_id("first".into());
    case.probe
        .send_with("iso", &script("first", json!([])), props)
        .await;
    case.probe.report("first").await;
    let p = |i| kind.param(i);
    let forge_outbox = format!(
        "INSERT INTO worker_outbox (queue, message_id, n, exchange, routing_key, properties, \
         body) VALUES ({}, {}, {}, {}, {}, {}, {})",
        p(1),
        p(2),
        p(3),
        p(4),
        p(5),
        p(6),
        p(7)
    );
    let forge_inbox = format!(
        "INSERT INTO worker_inbox (queue, message_id, handled_at) VALUES ({}, {}, {})",
        p(1),
        p(2),
        p(3)
    );
    let steps = json!([
        {"sql": "execute", "statement": forge_outbox,
         "params": [queue, "forged", 1, "", victim, "{}", "stolen"]},
        {"sql": "execute", "statement": forge_inbox, "params": [queue, "future", 0]},
        {"sql": "execute", "statement": "UPDATE worker_outbox SET sent_at = NULL"},
        {"sql": "query", "statement": "SELECT * FROM \"worker_inbox\""},
    ]);
    let report = case.run("forge", steps).await;
    for why in invalid(&report) {
        assert!(why.contains("the host's table"), "{why}");
    }
    // The id the forged inbox row named is handled: the plugin is called and reports.
    let props = BasicProperties::default().with_message_id("future".into());
    case.probe
        .send_with("iso", &script("future", json!([])), props)
        .await;
    let report = case.probe.report("future").await;
    assert_eq!(report["id"], json!("future"));
    assert_eq!(harness::depth(&case.probe.ch, &victim).await, 0);
    let _ = case
        .probe
        .ch
        .queue_delete(victim.as_str().into(), Default::default())
        .await;
    case.stop().await;
}

/// A row in the outbox that the host did not write from a call (written before these rules,
/// say, or for an exchange the config no longer allows) is not published by the sweeper: it
/// is marked sent with a warning naming it.
#[tokio::test]
async fn isolation_the_sweeper_checks_the_publish_list_again() {
    let state = tempfile::tempdir().expect("state dir");
    let kind = Kind::Sqlite;
    let db = Pool::connect(kind, state.path()).await;
    let subs = [Sub::new(
        "sw",
        "sql = \"db\"\noutbox = true\nmax_retries = 0",
    )];
    let tables = format!("[sql.db]\nurl = \"{}\"\n", kind.toml_url());
    let mut probe = Probe::start_child("iso-sweep", &subs, state.path(), &tables, &[]).await;
    let victim = format!("{}.victim", probe.n.p);
    declare(&probe.ch, &victim).await;
    let queue = format!("{}.sw", probe.n.p);
    let props = BasicProperties::default().with_message_id("first".into());
    probe
        .send_with("sw", &script("first", json!([])), props)
        .await;
    probe.report("first").await;
    assert!(
        probe.terminate().await.success(),
        "worker-host did not stop cleanly"
    );
    db.exec(&format!(
        "INSERT INTO worker_inbox (queue, message_id, handled_at) VALUES ('{queue}', 'old', 0)"
    ))
    .await;
    db.exec(&format!(
        "INSERT INTO worker_outbox (queue, message_id, n, exchange, routing_key, properties, \
         body) VALUES ('{queue}', 'old', 1, '', '{victim}', '{{}}', x'00')"
    ))
    .await;
    probe.restart_child(&[]).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !probe.log().contains("a stored message is not sent") {
        assert!(
            Instant::now() < deadline,
            "no warning of the sweeper after 20s; log:\n{}",
            probe.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(harness::depth(&probe.ch, &victim).await, 0);
    let _ = probe
        .ch
        .queue_delete(victim.as_str().into(), Default::default())
        .await;
    probe.stop().await;
    db.drop_tables(&[]).await;
}

// Item 2: the host's transaction.

#[tokio::test]
async fn isolation_sqlite_a_plugin_cannot_commit_its_own_transaction() {
    own_commit(Kind::Sqlite).await;
}

#[tokio::test]
async fn isolation_postgres_a_plugin_cannot_commit_its_own_transaction() {
    own_commit(Kind::Postgres).await;
}

#[tokio::test]
async fn isolation_mariadb_a_plugin_cannot_commit_its_own_transaction() {
    own_commit(Kind::MariaDb).await;
}

/// A script with COMMIT, and COMMIT or END alone after an insert, are refused; the handler
/// then fails and its insert is rolled back; a dry run of the same message writes nothing.
async fn own_commit(kind: Kind) {
    let mut case = Case::start("iso-commit", kind, "", "").await;
    let script_commit = format!(
        "INSERT INTO {r} (id) VALUES ('scripted'); COMMIT; INSERT INTO {r} (id) VALUES ('after')",
        r = case.rows
    );
    let steps = json!([
        sql(&script_commit),
        sql("COMMIT"),
        sql("END"),
        sql("  /* hidden */ commit"),
        sql(";COMMIT"),
        sql("SAVEPOINT s"),
    ]);
    let report = case.run("refused", steps).await;
    assert_eq!(invalid(&report).len(), 6);
    // DDL after an insert: MySQL/MariaDB would commit the insert with it, so it is refused
    // there; elsewhere it is rolled back with the rest.
    let ddl = format!("CREATE TABLE IF NOT EXISTS {}_ddl (a INT)", case.rows);
    let steps = json!([
        case.insert("inserted"),
        sql(&script_commit),
        sql("COMMIT"),
        sql(&ddl)
    ]);
    let why = case.parked("commit", steps, "fail").await;
    let ddl_answer = if kind == Kind::MariaDb {
        "invalid"
    } else {
        "ok"
    };
    assert_eq!(
        outcomes(&why),
        ["ok", "invalid", "invalid", ddl_answer],
        "{why}"
    );
    assert!(
        case.db.ids(&case.rows).await.is_empty(),
        "a plugin committed its own work"
    );

    // The same message in a dry run, from the command line: still nothing written.
    let queue = format!("{}.iso", case.probe.n.p);
    let config = case.probe.config();
    let out = Command::new(env!("CARGO_BIN_EXE_worker-host"))
        .args(["failed", "dry-run", "-c"])
        .arg(&config.path)
        .args(["--queue", &queue])
        .output()
        .expect("run worker-host failed dry-run");
    assert!(
        out.status.success(),
        "dry-run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(case.db.ids(&case.rows).await.is_empty(), "a dry run wrote");
    case.stop().await;
}

// Item 3: other databases and files.

/// SQLite: ATTACH of a sibling subscription's database and of a new file, VACUUM INTO a new
/// file, and writable PRAGMAs are refused; no file appears.
#[tokio::test]
async fn isolation_sqlite_a_plugin_cannot_attach_other_databases() {
    let sibling = "[sql.other]\nurl = \"sqlite:other.db\"\n";
    let mut case = Case::start("iso-attach", Kind::Sqlite, "", sibling).await;
    let dir = case.state.path().to_path_buf();
    let other = dir.join("other.db");
    let new = dir.join("new.db");
    let copy = dir.join("copy.db");
    let steps = json!([
        sql(&format!("ATTACH DATABASE '{}' AS other", other.display())),
        sql(&format!("attach '{}' as n", new.display())),
        sql(&format!("VACUUM INTO '{}'", copy.display())),
        sql("PRAGMA writable_schema = ON"),
        sql("PRAGMA foreign_keys = OFF"),
        query("SELECT load_extension('/nonexistent.so')"),
        sql("CREATE TEMP TABLE t (a)"),
    ]);
    let report = case.run("attach", steps).await;
    assert_eq!(invalid(&report).len(), 7);
    assert!(!new.exists(), "ATTACH created {}", new.display());
    assert!(!copy.exists(), "VACUUM INTO wrote {}", copy.display());
    let read = json!([
        query("PRAGMA table_info(sqlite_master)"),
        query("PRAGMA foreign_keys")
    ]);
    let report = case.run("pragma", read).await;
    assert_eq!(outcomes(&report), ["ok", "ok"], "{report}");
    assert_eq!(report["results"][1]["ok"]["rows"], json!([[1]]), "{report}");
    case.stop().await;
}

/// PostgreSQL: COPY to a program, server-side file reads and settings by function are
/// refused (the test role is a superuser, for whom all of them would work).
#[tokio::test]
async fn isolation_postgres_a_plugin_cannot_reach_files_or_programs() {
    let mut case = Case::start("iso-files", Kind::Postgres, "", "").await;
    let marker = std::env::temp_dir().join(harness::unique("iso-copy"));
    let steps = json!([
        sql(&format!(
            "COPY (SELECT 1) TO PROGRAM 'touch {}'",
            marker.display()
        )),
        query("SELECT pg_read_file('/etc/hostname')"),
        query("SELECT lo_import('/etc/hostname')"),
        query("SELECT set_config('search_path', 'nowhere', false)"),
        query("DO $$ BEGIN PERFORM 1; END $$"),
    ]);
    let report = case.run("files", steps).await;
    assert_eq!(invalid(&report).len(), 5);
    assert!(!marker.exists(), "COPY ran a program");
    case.stop().await;
}

/// MariaDB: files written or read by the server are refused.
#[tokio::test]
async fn isolation_mariadb_a_plugin_cannot_reach_files() {
    let mut case = Case::start("iso-files", Kind::MariaDb, "", "").await;
    let out = format!("/tmp/{}", harness::unique("iso-outfile"));
    let steps = json!([
        query(&format!("SELECT 1 INTO OUTFILE '{out}'")),
        query("SELECT LOAD_FILE('/etc/hostname')"),
        query(&format!("SELECT 1 /*M!100000 INTO DUMPFILE '{out}' */")),
    ]);
    let report = case.run("files", steps).await;
    assert_eq!(invalid(&report).len(), 3);
    assert!(
        !std::path::Path::new(&out).exists(),
        "the server wrote {out}"
    );
    case.stop().await;
}

// Item 4: the deadline on the server, and the session the next message gets.

/// A runaway recursive query is stopped at the handler's deadline: the write lock it held is
/// free again at once, and the next message writes.
#[tokio::test]
async fn isolation_sqlite_a_runaway_query_ends_at_the_deadline() {
    let mut case = Case::start("iso-runaway", Kind::Sqlite, "timeout = \"1s\"", "").await;
    let forever = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) \
                   SELECT count(*) FROM c";
    let why = case
        .parked_why(
            "runaway",
            json!([case.insert("r"), query(forever)]),
            "retry",
        )
        .await;
    assert!(why.contains("timeout"), "{why}");
    // The test's own connection gets the write lock within SQLite's busy timeout.
    let Pool::Sqlite(pool) = &case.db else {
        unreachable!()
    };
    let started = Instant::now();
    let mut conn = pool.acquire().await.expect("a connection");
    sqlx::query("PRAGMA busy_timeout = 3000")
        .execute(&mut *conn)
        .await
        .expect("busy timeout");
    let locked = sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await;
    assert!(
        locked.is_ok(),
        "the write lock is still held {:?} after the deadline: {locked:?}",
        started.elapsed()
    );
    sqlx::query("ROLLBACK")
        .execute(&mut *conn)
        .await
        .expect("rollback");
    drop(conn);
    let report = case.run("next", json!([case.insert("next")])).await;
    assert_eq!(outcomes(&report), ["ok"], "{report}");
    assert_eq!(case.db.ids(&case.rows).await, ["next"]);
    case.stop().await;
}

#[tokio::test]
async fn isolation_postgres_a_sleep_ends_at_the_deadline_on_the_server() {
    server_sleep(Kind::Postgres).await;
}

#[tokio::test]
async fn isolation_mariadb_a_sleep_ends_at_the_deadline_on_the_server() {
    server_sleep(Kind::MariaDb).await;
}

/// `statement_timeout = 0` is refused, and a sleep of an hour stops on the server within
/// seconds of the handler's deadline.
async fn server_sleep(kind: Kind) {
    let mut case = Case::start("iso-sleep", kind, "timeout = \"2s\"", "").await;
    let marker = harness::unique("iso-sleep").replace('-', "_");
    let sleep = match kind {
        Kind::Postgres => format!("SELECT pg_sleep(3600), '{marker}'"),
        _ => format!("SELECT SLEEP(3600), '{marker}'"),
    };
    let report = case
        .run("set", json!([sql("SET statement_timeout = 0")]))
        .await;
    assert_eq!(invalid(&report).len(), 1);
    let why = case
        .parked_why("sleep", json!([query(&sleep)]), "retry")
        .await;
    assert!(why.contains("timeout"), "{why}");
    let activity = match kind {
        Kind::Postgres => format!(
            "SELECT count(*)::bigint FROM pg_stat_activity WHERE state = 'active' \
             AND query LIKE '%{marker}%' AND pid <> pg_backend_pid()"
        ),
        _ => format!(
            "SELECT count(*) FROM information_schema.processlist \
             WHERE info LIKE '%{marker}%' AND id <> CONNECTION_ID()"
        ),
    };
    let started = Instant::now();
    harness::eventually(
        Duration::from_secs(10),
        "the sleep ended on the server",
        || {
            let db = &case.db;
            let activity = activity.clone();
            async move { (db.scalar(&activity).await == 0).then_some(()) }
        },
    )
    .await;
    println!(
        "the server stopped the sleep {:?} after the park",
        started.elapsed()
    );
    case.stop().await;
}

/// `SET search_path` / `SET ROLE` are refused, so a later message on the same pooled
/// connection sees the session as it was.
#[tokio::test]
async fn isolation_postgres_settings_do_not_outlive_the_message() {
    // One connection: the next message surely gets the same one.
    let mut case = Case::start("iso-set", Kind::Postgres, "concurrency = 1", "").await;
    let steps = json!([
        sql("SET search_path TO nowhere"),
        sql("SET ROLE pg_monitor"),
        sql("SET SESSION AUTHORIZATION DEFAULT"),
        sql("RESET ALL"),
    ]);
    let report = case.run("set", steps).await;
    assert_eq!(invalid(&report).len(), 4);
    let report = case
        .run(
            "show",
            json!([query("SHOW search_path"), query("SELECT current_user")]),
        )
        .await;
    assert_eq!(outcomes(&report), ["ok", "ok"], "{report}");
    assert_eq!(
        report["results"][0]["ok"]["rows"],
        json!([["\"$user\", public"]]),
        "{report}"
    );
    assert_eq!(report["results"][1]["ok"]["rows"], json!([["postgres"]]));
    case.stop().await;
}

/// MariaDB: user variables and settings are refused, so the next message sees none.
#[tokio::test]
async fn isolation_mariadb_session_state_does_not_outlive_the_message() {
    let mut case = Case::start("iso-set", Kind::MariaDb, "concurrency = 1", "").await;
    let steps = json!([
        sql("SET @leak = 'x'"),
        query("SELECT @leak2 := 'y'"),
        sql("SET SESSION sql_mode = 'ANSI_QUOTES'"),
        sql("USE mysql"),
    ]);
    let report = case.run("set", steps).await;
    assert_eq!(invalid(&report).len(), 4);
    let report = case.run("show", json!([query("SELECT DATABASE()")])).await;
    assert_eq!(
        report["results"][0]["ok"]["rows"],
        json!([["test"]]),
        "{report}"
    );
    case.stop().await;
}
