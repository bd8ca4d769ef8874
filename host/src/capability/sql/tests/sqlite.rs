//! SQLite: a file in a temporary directory (its parent directories created by the host).

use std::time::Duration;

use super::{Ctx, assert_values, e, open, scenarios, text};
use crate::capability::Capability as _;
use crate::config::SqlKind;
use crate::wit::worker::plugin::sql::{Host as _, Value};

async fn sqlite() -> Ctx {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}/nested/state/test.db", dir.path().display());
    open(SqlKind::Sqlite, &url, Some(dir)).await
}

#[tokio::test]
async fn opening_creates_the_file_and_its_directory() {
    let ctx = sqlite().await;
    let dir = ctx._dir.as_ref().expect("dir").path();
    assert!(dir.join("nested/state/test.db").is_file());
    assert_eq!(ctx.db.ping().await, Ok(()));
}

#[tokio::test]
async fn a_path_that_cannot_be_created_fails_at_open() {
    let url = "sqlite:///dev/null/cannot/test.db";
    let config = super::config(SqlKind::Sqlite, url, "bad");
    let recorder = crate::capability::Recorder::detached("sql", "bad");
    assert!(super::Database::open(&config, recorder).await.is_err());
}

#[tokio::test]
async fn values_round_trip() {
    let ctx = sqlite().await;
    scenarios::round_trip(&ctx, ["BOOLEAN", "INTEGER", "REAL", "TEXT", "BLOB"]).await;
}

#[tokio::test]
async fn values_come_back_by_storage_class() {
    let ctx = sqlite().await;
    let mut m = ctx.message(Duration::from_secs(5));
    let sql = "SELECT 7, 0.5, 'x', x'00ff', NULL, date('2024-05-01'), ?1 || '!'";
    let rows = m.query(sql.into(), vec![text("hi")]).await.expect("select");
    assert_values(
        &rows.rows[0],
        &[
            Value::Int(7),
            Value::Float(0.5),
            text("x"),
            Value::Bytes(vec![0, 255]),
            Value::Null,
            text("2024-05-01"),
            text("hi!"),
        ],
    );
    assert_eq!(m.finish(true).await, Ok(()));
}

#[tokio::test]
async fn commit_is_visible_and_rollback_leaves_nothing() {
    scenarios::commit_is_visible_and_rollback_leaves_nothing(&sqlite().await).await;
}

#[tokio::test]
async fn constraint_violation_is_reported_and_the_rest_commits() {
    scenarios::constraint_violation_is_reported_and_the_rest_commits(&sqlite().await).await;
}

#[tokio::test]
async fn invalid_statements() {
    scenarios::invalid_statements(&sqlite().await).await;
}

/// Two messages writing at once: the second waits for the first's commit (BEGIN IMMEDIATE and
/// the busy timeout) instead of failing, and both commit.
#[tokio::test]
async fn concurrent_writers_wait_for_each_other() {
    let ctx = sqlite().await;
    let t = super::unique("sql_writers");
    ctx.exec(&format!("CREATE TABLE {t} (id INTEGER PRIMARY KEY)"))
        .await;
    let insert = format!("INSERT INTO {t} (id) VALUES (?)");
    let mut first = ctx.message(Duration::from_secs(10));
    assert_eq!(
        e(first.execute(insert.clone(), vec![Value::Int(1)]).await),
        Ok(1)
    );
    let mut second = ctx.message(Duration::from_secs(10));
    let waiting = tokio::spawn(async move {
        let done = second.execute(insert, vec![Value::Int(2)]).await;
        (done, second.finish(true).await)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiting.is_finished(),
        "the second writer waits for the lock"
    );
    assert_eq!(first.finish(true).await, Ok(()));
    let (done, committed) = waiting.await.expect("join");
    assert_eq!(e(done), Ok(1));
    assert_eq!(committed, Ok(()));
    assert_eq!(ctx.count(&t).await, 2);
}

/// `/readyz` hears once that the database went away and once that it came back.
#[tokio::test]
async fn health_changes_are_reported() {
    let ctx = sqlite().await;
    assert_eq!(ctx.up(), None, "nothing reported before any change");
    let down = super::super::error::Failure::unavailable("gone");
    ctx.db.health(Some(&down));
    assert_eq!(ctx.up(), Some(0));
    let mut m = ctx.message(Duration::from_secs(5));
    assert!(m.query("SELECT 1".into(), vec![]).await.is_ok());
    assert_eq!(ctx.up(), Some(1), "a call that succeeds reports it back");
    assert_eq!(m.finish(true).await, Ok(()));
}

/// A script of several statements is refused whole: nothing of it runs (one statement per
/// call, so a `COMMIT` cannot hide in a script).
#[tokio::test]
async fn a_script_is_refused() {
    let ctx = sqlite().await;
    let t = super::unique("sql_script");
    let script = format!(
        "CREATE TABLE {t} (a INTEGER); INSERT INTO {t} VALUES (1); COMMIT; INSERT INTO {t} VALUES (2)"
    );
    let mut m = ctx.message(Duration::from_secs(5));
    let why = super::assert_kind(m.execute(script, vec![]).await, "invalid");
    assert!(why.contains("one statement per call"), "{why}");
    assert_eq!(m.finish(true).await, Ok(()));
    let exists = format!("SELECT count(*) FROM sqlite_master WHERE name = '{t}'");
    let mut m = ctx.message(Duration::from_secs(5));
    let rows = m.query(exists, vec![]).await.expect("select");
    assert_values(&rows.rows[0], &[Value::Int(0)]);
    assert_eq!(m.finish(true).await, Ok(()));
}

/// A runaway query stops at the deadline inside SQLite too (the progress handler), so the
/// write lock its transaction held is free for the next message at once.
#[tokio::test]
async fn a_runaway_query_stops_at_the_deadline() {
    let ctx = sqlite().await;
    let t = super::unique("sql_runaway");
    ctx.exec(&format!("CREATE TABLE {t} (a INTEGER)")).await;
    let insert = format!("INSERT INTO {t} VALUES (1)");
    let mut m = ctx.message(Duration::from_secs(1));
    assert_eq!(e(m.execute(insert.clone(), vec![]).await), Ok(1));
    let forever = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) \
                   SELECT count(*) FROM c";
    super::assert_kind(m.query(forever.into(), vec![]).await, "unavailable");
    assert_eq!(m.finish(false).await, Ok(()));
    let started = std::time::Instant::now();
    let mut next = ctx.message(Duration::from_secs(10));
    assert_eq!(e(next.execute(insert, vec![]).await), Ok(1));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the next writer waited {:?} for the lock",
        started.elapsed()
    );
    assert_eq!(next.finish(true).await, Ok(()));
}

/// The authorizer refuses what the statement guard would let through only by mistake: the
/// host's tables reached through a view made before these rules, say.
#[tokio::test]
async fn the_authorizer_judges_what_a_statement_touches() {
    let ctx = sqlite().await;
    // Made from outside the host's pool, whose connections are the plugins'.
    let dir = ctx._dir.as_ref().expect("dir").path();
    let url = format!("sqlite://{}/nested/state/test.db", dir.display());
    let outside = sqlx::SqlitePool::connect(&url).await.expect("open");
    let v = super::unique("sql_view");
    for sql in [
        "CREATE TABLE worker_inbox_probe (a INTEGER)".to_string(),
        format!("CREATE VIEW {v} AS SELECT * FROM worker_inbox_probe"),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&outside)
            .await
            .expect("setup");
    }
    outside.close().await;
    let mut m = ctx.message(Duration::from_secs(5));
    let why = super::assert_kind(
        m.query(format!("SELECT * FROM {v}"), vec![]).await,
        "invalid",
    );
    assert!(why.contains("the host's table"), "{why}");
    assert_eq!(m.finish(false).await, Ok(()));
}

/// `sqlite::memory:` is one database shared by the pool's connections, kept while the host
/// runs.
#[tokio::test]
async fn an_in_memory_database_is_shared_by_the_pool() {
    let ctx = open(SqlKind::Sqlite, "sqlite::memory:", None).await;
    let t = super::unique("sql_memory");
    let mut m = ctx.message(Duration::from_secs(5));
    let create = format!("CREATE TABLE {t} (a INTEGER)");
    assert!(e(m.execute(create, vec![]).await).is_ok());
    let insert = format!("INSERT INTO {t} VALUES (1)");
    assert_eq!(e(m.execute(insert, vec![]).await), Ok(1));
    assert_eq!(m.finish(true).await, Ok(()));
    assert_eq!(ctx.count(&t).await, 1);
}

/// A plugin cannot load native code into the host through SQLite.
#[tokio::test]
async fn extensions_cannot_be_loaded() {
    let ctx = sqlite().await;
    let mut m = ctx.message(Duration::from_secs(5));
    let load = "SELECT load_extension('/tmp/nothing.so')".to_string();
    let why = super::assert_kind(m.query(load, vec![]).await, "invalid");
    assert!(why.contains("load_extension() reaches past"), "{why}");
    assert_eq!(m.finish(false).await, Ok(()));
}

/// Statements in a message run on the caller's thread (`inline.rs`), where parameters bind as
/// sqlx binds them; a named one is refused and the message goes on.
#[tokio::test]
async fn parameters_bind_by_position_and_number() {
    let ctx = sqlite().await;
    let mut m = ctx.message(Duration::from_secs(5));
    let (a, b) = (text("a"), text("b"));
    let rows = m.query("SELECT ?2, ?1".into(), vec![a.clone(), b.clone()]);
    assert_values(&rows.await.expect("?NNN").rows[0], &[b.clone(), a.clone()]);
    let rows = m.query("SELECT $2, $1".into(), vec![a.clone(), b.clone()]);
    assert_values(&rows.await.expect("$NNN").rows[0], &[b.clone(), a.clone()]);
    let rows = m.query("SELECT ?, ?".into(), vec![a.clone(), b.clone()]);
    assert_values(&rows.await.expect("positional").rows[0], &[a.clone(), b]);
    let why = super::assert_kind(
        m.query("SELECT ?2".into(), vec![a.clone()]).await,
        "invalid",
    );
    assert!(why.contains("takes 2 parameters, 1 given"), "{why}");
    let named = m.query("SELECT :x".into(), vec![a]).await;
    let why = super::assert_kind(named, "invalid");
    assert!(why.contains("parameter :x"), "{why}");
    let none = m.query("SELECT 1 AS one WHERE 0".into(), vec![]).await;
    let none = none.expect("no rows");
    assert_eq!(
        (none.columns, none.rows.len()),
        (vec!["one".to_string()], 0)
    );
    assert_eq!(m.finish(true).await, Ok(()));
}

/// The outbox's reads run on the reader, on the caller's thread (`reader.rs`); an in-memory
/// database has none (no write-ahead log: a read there can wait for the writer).
#[tokio::test]
async fn a_file_database_reads_on_its_reader() {
    let ctx = sqlite().await;
    let (Some(reader), super::super::backend::Pool::Sqlite(pool)) = (&ctx.db.reader, &ctx.db.pool)
    else {
        panic!("a SQLite file has a reader");
    };
    let read = reader.read(pool, "SELECT ?1 + 1", &[Value::Int(1)]).await;
    match read {
        Some(super::super::backend::Output::Rows(rows)) => {
            assert_values(&rows.rows[0], &[Value::Int(2)])
        }
        _ => panic!("the reader did not answer"),
    }
    let memory = open(SqlKind::Sqlite, "sqlite::memory:", None).await;
    assert!(memory.db.reader.is_none());
}
