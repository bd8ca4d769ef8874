//! The SQL tests' view of their databases from outside the host, through sqlx: each backend's
//! URL (as worker.toml writes it and as the test connects), placeholders, unique table names,
//! and the statements that create, read and drop a test's tables.

use std::path::Path;

use sqlx::{AssertSqlSafe, MySqlPool, PgPool, SqlitePool};

use super::support::{self, MARIADB, POSTGRES};
use crate::harness;

/// A database backend the host supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
    MariaDb,
}

/// The file of the SQLite database under the test's `[state] dir`.
const SQLITE_FILE: &str = "probe.db";

impl Kind {
    /// `url` of the `[sql.NAME]` table.
    pub fn toml_url(self) -> String {
        match self {
            Kind::Sqlite => format!("sqlite:{SQLITE_FILE}"),
            Kind::Postgres => "postgres://postgres@127.0.0.1:5432/test".to_owned(),
            Kind::MariaDb => "mysql://root@127.0.0.1:3306/test".to_owned(),
        }
    }

    /// Placeholder `i` (from 1) in this backend's own syntax.
    pub fn param(self, i: usize) -> String {
        match self {
            Kind::Postgres => format!("${i}"),
            Kind::Sqlite | Kind::MariaDb => "?".to_owned(),
        }
    }

    /// A statement that takes `secs` seconds on the server (none for SQLite).
    pub fn sleep(self, secs: u32) -> Option<String> {
        match self {
            Kind::Postgres => Some(format!("SELECT pg_sleep({secs})")),
            Kind::MariaDb => Some(format!("SELECT SLEEP({secs})")),
            Kind::Sqlite => None,
        }
    }
}

/// A table name no other test or run uses (lower case, at most 63 bytes for PostgreSQL).
pub fn table(prefix: &str) -> String {
    harness::unique(prefix)
        .replace('-', "_")
        .to_ascii_lowercase()
}

/// A connection pool of the test's own.
pub enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
    MariaDb(MySqlPool),
}

impl Pool {
    /// Connects to `kind` (the SQLite file under `state` is created); a server that does not
    /// answer fails the test with its start command.
    pub async fn connect(kind: Kind, state: &Path) -> Pool {
        match kind {
            Kind::Sqlite => {
                let url = format!("sqlite://{}?mode=rwc", state.join(SQLITE_FILE).display());
                Pool::Sqlite(SqlitePool::connect(&url).await.expect("open SQLite"))
            }
            Kind::Postgres => {
                support::require(&POSTGRES);
                let pool = PgPool::connect(&kind.toml_url()).await;
                Pool::Postgres(pool.unwrap_or_else(|e| panic!("PostgreSQL: {e}")))
            }
            Kind::MariaDb => {
                support::require(&MARIADB);
                let pool = MySqlPool::connect(&kind.toml_url()).await;
                Pool::MariaDb(pool.unwrap_or_else(|e| panic!("MariaDB: {e}")))
            }
        }
    }

    /// Runs one statement.
    pub async fn exec(&self, statement: &str) {
        let sql = || AssertSqlSafe(statement.to_owned());
        let done = match self {
            Pool::Sqlite(p) => sqlx::query(sql()).execute(p).await.map(|_| ()),
            Pool::Postgres(p) => sqlx::query(sql()).execute(p).await.map(|_| ()),
            Pool::MariaDb(p) => sqlx::query(sql()).execute(p).await.map(|_| ()),
        };
        done.unwrap_or_else(|e| panic!("{statement}: {e}"));
    }

    /// The one integer `statement` selects.
    pub async fn scalar(&self, statement: &str) -> i64 {
        let q = || AssertSqlSafe(statement.to_owned());
        let value = match self {
            Pool::Sqlite(p) => sqlx::query_scalar::<_, i64>(q()).fetch_one(p).await,
            Pool::Postgres(p) => sqlx::query_scalar::<_, i64>(q()).fetch_one(p).await,
            Pool::MariaDb(p) => sqlx::query_scalar::<_, i64>(q()).fetch_one(p).await,
        };
        value.unwrap_or_else(|e| panic!("{statement}: {e}"))
    }

    /// Column `id` of every row of `table`, sorted.
    pub async fn ids(&self, table: &str) -> Vec<String> {
        let sql = format!("SELECT id FROM {table} ORDER BY id");
        let q = || AssertSqlSafe(sql.clone());
        let rows = match self {
            Pool::Sqlite(p) => sqlx::query_scalar::<_, String>(q()).fetch_all(p).await,
            Pool::Postgres(p) => sqlx::query_scalar::<_, String>(q()).fetch_all(p).await,
            Pool::MariaDb(p) => sqlx::query_scalar::<_, String>(q()).fetch_all(p).await,
        };
        rows.unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Drops `tables`, ignoring ones already gone, and closes the pool.
    pub async fn drop_tables(self, tables: &[&str]) {
        for t in tables {
            let sql = AssertSqlSafe(format!("DROP TABLE IF EXISTS {t}"));
            let _ = match &self {
                Pool::Sqlite(p) => sqlx::query(sql).execute(p).await.map(|_| ()),
                Pool::Postgres(p) => sqlx::query(sql).execute(p).await.map(|_| ()),
                Pool::MariaDb(p) => sqlx::query(sql).execute(p).await.map(|_| ()),
            };
        }
        match self {
            Pool::Sqlite(p) => p.close().await,
            Pool::Postgres(p) => p.close().await,
            Pool::MariaDb(p) => p.close().await,
        }
    }
}
