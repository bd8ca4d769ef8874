//! Tests of the SQL capability on the real backends: SQLite in a temporary directory, and the
//! PostgreSQL and MariaDB servers of this machine (a server that does not answer fails the test
//! with the command that starts it). Every test works on tables of its own name. The server
//! tests are built with the `server-tests` feature, which scripts/test.sh always turns on, so
//! `cargo test --lib` alone needs no server.

mod group;
#[cfg(feature = "server-tests")]
mod mysql;
mod outbox;
#[cfg(feature = "server-tests")]
mod postgres;
mod scenarios;
#[cfg(feature = "server-tests")]
mod server;
mod sqlite;

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::backend::Pool;
use super::{Database, Instance};
use crate::capability::{Capability as _, Recorder, Scope};
use crate::config::{Secret, SqlDatabaseConfig, SqlKind};
use crate::metrics::Metrics;
pub(super) use crate::testing::unique;
use crate::wit::worker::plugin::sql::{Host as _, SqlError, Value};

/// A database under test, and how its statements write parameters.
pub(super) struct Ctx {
    pub db: Arc<Database>,
    pub metrics: Arc<Metrics>,
    pub kind: SqlKind,
    /// Keeps a SQLite file's directory alive.
    pub _dir: Option<tempfile::TempDir>,
}

impl Ctx {
    /// The `n`th (1-based) placeholder: `$n` on PostgreSQL, `?` elsewhere.
    pub(super) fn p(&self, n: usize) -> String {
        match self.kind {
            SqlKind::Postgres => format!("${n}"),
            _ => "?".to_string(),
        }
    }

    /// `VALUES (...)` placeholders for `n` parameters.
    pub(super) fn values(&self, n: usize) -> String {
        let list: Vec<String> = (1..=n).map(|i| self.p(i)).collect();
        format!("VALUES ({})", list.join(", "))
    }

    /// An instance that has begun a message with `timeout` to go.
    pub(super) fn message(&self, timeout: Duration) -> Instance {
        message(Some(self.db.clone()), timeout)
    }

    /// Runs `sql` outside any message (setup, cleanup, checks), on a connection of the pool.
    pub(super) async fn exec(&self, sql: &str) {
        let sql = sqlx::AssertSqlSafe(sql.to_string());
        let done = match &self.db.pool {
            Pool::Sqlite(p) => sqlx::raw_sql(sql).execute(p).await.map(drop),
            Pool::Postgres(p) => sqlx::raw_sql(sql).execute(p).await.map(drop),
            Pool::MySql(p) => sqlx::raw_sql(sql).execute(p).await.map(drop),
        };
        done.expect("setup statement");
    }

    /// `SELECT COUNT(*) FROM table`, seen from another connection.
    pub(super) async fn count(&self, table: &str) -> i64 {
        let sql = sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}"));
        match &self.db.pool {
            Pool::Sqlite(p) => sqlx::query_scalar(sql).fetch_one(p).await,
            Pool::Postgres(p) => sqlx::query_scalar(sql).fetch_one(p).await,
            Pool::MySql(p) => sqlx::query_scalar(sql).fetch_one(p).await,
        }
        .expect("count")
    }

    /// The `capability_up` gauge of this database, once set.
    pub(super) fn up(&self) -> Option<i64> {
        let store = format!("store=\"{}\"", self.db.recorder.store());
        let text = self.metrics.encode(None);
        text.lines()
            .filter(|l| l.starts_with("capability_up") || l.contains("_capability_up{"))
            .find(|l| l.contains("capability=\"sql\"") && l.contains(&store))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// How many calls the metrics counted with `result`.
    pub(super) fn calls(&self, result: &str) -> u64 {
        let store = self.db.recorder.store();
        let text = self.metrics.encode(None);
        let needle = format!("result=\"{result}\"");
        text.lines()
            .filter(|l| l.contains("capability_calls") && l.contains("capability=\"sql\""))
            .filter(|l| l.contains(&format!("store=\"{store}\"")) && l.contains(&needle))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }
}

/// An instance under `grant` that has begun a message with `timeout` to go.
pub(super) fn message(grant: Option<Arc<Database>>, timeout: Duration) -> Instance {
    let mut instance = Instance::default();
    instance.begin(grant, &scope(timeout));
    instance
}

/// A message's scope with `timeout` to go.
pub(super) fn scope(timeout: Duration) -> Scope {
    Scope {
        plugin: "test.wasm".into(),
        queue: "q".into(),
        deadline: Instant::now() + timeout,
        capture: None,
        message_id: None,
    }
}

pub(super) fn config(kind: SqlKind, url: &str, name: &str) -> SqlDatabaseConfig {
    SqlDatabaseConfig {
        name: name.to_string(),
        kind,
        url: Secret::new(url),
        max_connections: 4,
    }
}

/// Opens `url` as a database with its own metrics.
pub(super) async fn open(kind: SqlKind, url: &str, dir: Option<tempfile::TempDir>) -> Ctx {
    let metrics = Arc::new(Metrics::new());
    let name = unique("db");
    let recorder = Recorder::new(&metrics, "sql", &name);
    let db = Database::open(&config(kind, url, &name), recorder)
        .await
        .expect("open the database");
    Ctx {
        db: Arc::new(db),
        metrics,
        kind,
        _dir: dir,
    }
}

pub(super) fn text(s: &str) -> Value {
    Value::Text(s.to_string())
}

/// Values compared by their debug form (the generated type has no `PartialEq`).
#[track_caller]
pub(super) fn assert_values(got: &[Value], want: &[Value]) {
    assert_eq!(format!("{got:?}"), format!("{want:?}"));
}

/// A statement's error as its `Debug` text, to compare (the generated error has no
/// `PartialEq`).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Shown(String);

/// A result with its error shown, to compare.
pub(super) fn e<T>(result: Result<T, SqlError>) -> Result<T, Shown> {
    result.map_err(|e| Shown(format!("{e:?}")))
}

#[track_caller]
pub(super) fn assert_kind<T: std::fmt::Debug>(got: Result<T, SqlError>, kind: &str) -> String {
    match got {
        Err(e) => {
            assert_eq!(super::error::kind(&e), kind, "{e:?}");
            super::error::message(&e).to_string()
        }
        Ok(v) => panic!("expected {kind}, got {v:?}"),
    }
}

#[tokio::test]
async fn without_a_grant_every_call_is_denied() {
    let mut instance = message(None, Duration::from_secs(5));
    assert_kind(instance.query("SELECT 1".into(), vec![]).await, "denied");
    assert_kind(instance.execute("SELECT 1".into(), vec![]).await, "denied");
    assert_eq!(instance.finish(true).await, Ok(()));
}
