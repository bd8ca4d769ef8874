//! One pooled connection carrying one message's transaction on one of the three backends:
//! BEGIN, each statement, COMMIT or ROLLBACK, issued by the host itself (sqlx's `Transaction`
//! cannot hand its connection back to be closed, which a timed-out statement needs).
//!
//! Per backend:
//! - SQLite: `BEGIN IMMEDIATE` takes the write lock up front, so two messages writing at once
//!   wait for each other (busy timeout) instead of failing on a stale snapshot.
//! - PostgreSQL: `BEGIN; SET LOCAL statement_timeout` to the handler's remaining time, so the
//!   server stops a statement even if the host is gone (the host also cancels one it gives up
//!   on, `cancel.rs`); and every plugin statement runs under a savepoint,
//!   so a failed statement (a duplicate key the guest expects) is undone alone and the message's
//!   transaction goes on, as it does on MySQL and SQLite. The savepoint rides in the same round
//!   trip as BEGIN, or as the previous statement's release. The host's own statements skip it:
//!   any failure of theirs abandons the transaction anyway.
//! - MySQL/MariaDB: `BEGIN`; DDL commits implicitly there, so the host begins again after it.
//! - SQLite: the connection's [`Watch`] says whose statement runs, for the authorizer and the
//!   progress handler (`sqlite.rs`); the host's own statements run in its turn.
//!
//! A connection that is not known to be outside a transaction with nothing in flight is closed
//! when dropped, never returned to the pool: the server then rolls back what it held.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::SqlKind;

use futures_util::TryStreamExt as _;
use sqlx::pool::PoolConnection;
use sqlx::{
    AssertSqlSafe, Column as _, Database, Either, Executor, IntoArguments, MySql, Postgres,
    SqlSafeStr as _, Sqlite, Statement as _,
};

use super::error::{Failure, classify};
use super::sqlite::Watch;
use super::value::{self, ReadError};
use crate::wit::worker::plugin::sql::{Rows, Value};

/// The most a query's result may hold in memory (roughly: bytes of text and blobs and 16 per
/// value) before the host refuses it: a guest cannot make the host buffer a whole table.
pub(super) const MAX_RESULT_BYTES: usize = 32 << 20;

/// The savepoint each PostgreSQL statement runs under.
const SAVEPOINT: &str = "worker_host_statement";

/// A database's pool: one per `[sql.NAME]`.
pub(super) enum Pool {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
    MySql(sqlx::MySqlPool),
}

impl Pool {
    pub(super) fn kind(&self) -> SqlKind {
        match self {
            Pool::Sqlite(_) => SqlKind::Sqlite,
            Pool::Postgres(_) => SqlKind::Postgres,
            Pool::MySql(_) => SqlKind::MySql,
        }
    }

    /// A connection of the pool (opened if none is idle).
    pub(super) async fn acquire(&self) -> Result<Conn, sqlx::Error> {
        let mut watch = None;
        let link = match self {
            Pool::Sqlite(p) => {
                let mut c = p.acquire().await?;
                watch = Some(Watch::of(&mut c).await?);
                Link::Sqlite(c)
            }
            Pool::Postgres(p) => Link::Postgres(p.acquire().await?),
            Pool::MySql(p) => Link::MySql(p.acquire().await?),
        };
        Ok(Conn {
            link,
            clean: true,
            busy: false,
            savepoint_fresh: false,
            watch,
            server_id: None,
        })
    }
}

/// What a statement is run for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Want {
    Rows,
    Affected,
}

pub(super) enum Output {
    Rows(Rows),
    Affected(u64),
}

enum Link {
    Sqlite(PoolConnection<Sqlite>),
    Postgres(PoolConnection<Postgres>),
    MySql(PoolConnection<MySql>),
}

/// A connection and where it stands.
pub(super) struct Conn {
    link: Link,
    /// Outside any transaction, nothing pending: it may go back to the pool.
    clean: bool,
    /// An operation was started and has not finished (its future was dropped, say): the
    /// connection's state is unknown.
    busy: bool,
    /// PostgreSQL: the savepoint exists and no statement has run under it yet.
    savepoint_fresh: bool,
    /// SQLite: whose statements run, read by the authorizer and the progress handler.
    watch: Option<Arc<Watch>>,
    /// The server's id of this session (PostgreSQL's backend pid, MySQL's connection id), read
    /// at BEGIN, to cancel a statement the host gave up on.
    server_id: Option<u64>,
}

impl Conn {
    /// Whether an operation was cut off mid-way.
    pub(super) fn busy(&self) -> bool {
        self.busy
    }

    /// Begins the message's transaction; `remaining` is the handler's time left. On SQLite a
    /// transaction that will write takes the write lock now (`write`), so it never fails later
    /// for want of it; one that only reads does not wait for writers. On the servers the same
    /// round trip reads the session's id, to cancel a statement later if need be.
    pub(super) async fn begin(
        &mut self,
        remaining: Duration,
        write: bool,
    ) -> Result<(), sqlx::Error> {
        self.clean = false;
        let statement = match self.link {
            Link::Sqlite(_) if write => "BEGIN IMMEDIATE".to_string(),
            Link::Sqlite(_) => "BEGIN".to_string(),
            Link::Postgres(_) => {
                // 0 would mean no limit; the host's own timeout (and cancel) stays the precise one.
                let ms = remaining.as_millis().clamp(1, i32::MAX as u128);
                format!(
                    "BEGIN; SET LOCAL statement_timeout = {ms}; SAVEPOINT {SAVEPOINT}; \
                     SELECT pg_backend_pid()::bigint"
                )
            }
            Link::MySql(_) => "BEGIN; SELECT CAST(CONNECTION_ID() AS SIGNED)".to_string(),
        };
        if let Some(id) = self.control(statement).await? {
            self.server_id = u64::try_from(id).ok();
        }
        self.savepoint_fresh = true;
        Ok(())
    }

    /// The server's id of this session, once a transaction began.
    pub(super) fn server_id(&self) -> Option<u64> {
        self.server_id
    }

    /// `SELECT 1`, outside any transaction.
    pub(super) async fn ping(&mut self) -> Result<(), sqlx::Error> {
        let _host = self.watch.as_ref().map(Watch::host);
        self.busy = true;
        match &mut self.link {
            Link::Sqlite(c) => sqlx::query("SELECT 1").execute(&mut **c).await.map(drop),
            Link::Postgres(c) => sqlx::query("SELECT 1").execute(&mut **c).await.map(drop),
            Link::MySql(c) => sqlx::query("SELECT 1").execute(&mut **c).await.map(drop),
        }?;
        self.busy = false;
        Ok(())
    }

    pub(super) async fn commit(&mut self) -> Result<(), sqlx::Error> {
        self.control("COMMIT".into()).await?;
        self.clean = true;
        Ok(())
    }

    pub(super) async fn rollback(&mut self) -> Result<(), sqlx::Error> {
        self.control("ROLLBACK".into()).await?;
        self.clean = true;
        Ok(())
    }

    /// Opens savepoint `name` in the transaction (group commit: one per message).
    pub(super) async fn savepoint(&mut self, name: &str) -> Result<(), sqlx::Error> {
        self.control(format!("SAVEPOINT {name}")).await.map(drop)
    }

    /// Keeps what was done since savepoint `name`, in the transaction.
    pub(super) async fn release(&mut self, name: &str) -> Result<(), sqlx::Error> {
        self.control(format!("RELEASE SAVEPOINT {name}"))
            .await
            .map(drop)
    }

    /// Undoes what was done since savepoint `name`, and ends it.
    pub(super) async fn rollback_to(&mut self, name: &str) -> Result<(), sqlx::Error> {
        let statement = format!("ROLLBACK TO SAVEPOINT {name}; RELEASE SAVEPOINT {name}");
        self.control(statement).await.map(drop)
    }

    /// A transaction-control statement of the host's (text protocol: PostgreSQL and MySQL take
    /// several at once); the first column of the last row it returns, if any.
    async fn control(&mut self, statement: String) -> Result<Option<i64>, sqlx::Error> {
        let _host = self.watch.as_ref().map(Watch::host);
        self.busy = true;
        let sql = sqlx::raw_sql(AssertSqlSafe(statement));
        let last = match &mut self.link {
            Link::Sqlite(c) => sql.execute(&mut **c).await.map(|_| None),
            Link::Postgres(c) => last_int(sql.fetch_all(&mut **c).await?),
            Link::MySql(c) => last_int(sql.fetch_all(&mut **c).await?),
        }?;
        self.busy = false;
        Ok(last)
    }

    /// Runs one of the host's own statements (the outbox's) in an open transaction that a
    /// failure abandons: the caller rolls back (or drops the connection, which closes it) on any
    /// error, so PostgreSQL runs it without renewing the savepoint (a round trip saved), and
    /// its failure aborts the transaction there, reported as lost. A plugin statement after
    /// a successful one renews the savepoint first (`savepoint_fresh` is cleared), so it is
    /// still undone alone if it fails.
    pub(super) async fn run(
        &mut self,
        statement: &str,
        params: Vec<Value>,
        want: Want,
    ) -> Result<Output, Failure> {
        let _host = self.watch.as_ref().map(Watch::host);
        self.busy = true;
        let result = match &mut self.link {
            Link::Sqlite(c) => sqlite(c, statement, params, want).await,
            Link::Postgres(c) => postgres(c, statement, params, want)
                .await
                .map_err(Failure::lost),
            Link::MySql(c) => mysql(c, statement, params, want).await,
        };
        self.savepoint_fresh = false;
        self.busy = false;
        result
    }

    /// Runs one of the host's statements by itself on a connection outside any transaction
    /// (the server commits it alone): one round trip, and the connection stays clean, so it
    /// goes back to the pool. On SQLite it runs in the host's turn.
    pub(super) async fn once(
        &mut self,
        statement: &str,
        params: Vec<Value>,
        want: Want,
    ) -> Result<Output, Failure> {
        if !self.clean {
            return Err(Failure::other("a one-off statement inside a transaction"));
        }
        let _host = self.watch.as_ref().map(Watch::host);
        self.busy = true;
        let result = match &mut self.link {
            Link::Sqlite(c) => sqlite(c, statement, params, want).await,
            Link::Postgres(c) => postgres(c, statement, params, want).await,
            Link::MySql(c) => mysql(c, statement, params, want).await,
        };
        self.busy = false;
        result
    }

    /// Runs a plugin's statement (which passed the guard) in the message's transaction; on
    /// SQLite it is stopped at `deadline` and the authorizer judges what it touches.
    pub(super) async fn run_guest(
        &mut self,
        statement: &str,
        params: Vec<Value>,
        want: Want,
        deadline: Instant,
    ) -> Result<Output, Failure> {
        if let Some(watch) = &self.watch {
            watch.guest(deadline);
        }
        self.busy = true;
        let mut result = self.dispatch(statement, params, want).await;
        self.busy = false;
        if let (Err(failure), Some(watch)) = (&mut result, &self.watch)
            && let Some(why) = watch.take_refusal()
        {
            *failure = Failure::invalid(why);
        }
        if let Err(failure) = &mut result
            && !failure.lost
            && !self.in_transaction().await
        {
            // SQLite ended the transaction itself: what follows would commit statement by
            // statement.
            failure.lost = true;
        }
        result
    }

    /// Whether the transaction is still open: always on the servers (they report a lost one
    /// by their errors); on SQLite as the connection says (false if it cannot say).
    pub(super) async fn in_transaction(&mut self) -> bool {
        match &mut self.link {
            Link::Sqlite(c) => super::sqlite::in_transaction(c).await.unwrap_or(false),
            Link::Postgres(_) | Link::MySql(_) => true,
        }
    }

    async fn dispatch(
        &mut self,
        statement: &str,
        params: Vec<Value>,
        want: Want,
    ) -> Result<Output, Failure> {
        match &mut self.link {
            Link::Sqlite(c) => sqlite(c, statement, params, want).await,
            Link::Postgres(_) => self.postgres_guarded(statement, params, want).await,
            Link::MySql(c) => mysql(c, statement, params, want).await,
        }
    }

    /// A PostgreSQL statement under the savepoint, rolled back to it if it fails.
    async fn postgres_guarded(
        &mut self,
        statement: &str,
        params: Vec<Value>,
        want: Want,
    ) -> Result<Output, Failure> {
        let Link::Postgres(c) = &mut self.link else {
            return Err(Failure::other("not a PostgreSQL connection"));
        };
        if !self.savepoint_fresh {
            let renew = format!("RELEASE SAVEPOINT {SAVEPOINT}; SAVEPOINT {SAVEPOINT}");
            let renewed = sqlx::raw_sql(AssertSqlSafe(renew)).execute(&mut **c).await;
            renewed.map_err(|e| classify(&e).lost())?;
        }
        self.savepoint_fresh = false;
        let result = postgres(c, statement, params, want).await;
        if let Err(failure) = &result
            && !failure.lost
        {
            let undo = format!("ROLLBACK TO SAVEPOINT {SAVEPOINT}");
            let undone = sqlx::raw_sql(AssertSqlSafe(undo)).execute(&mut **c).await;
            undone.map_err(|e| classify(&e).lost())?;
            self.savepoint_fresh = true;
        }
        result
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if !self.clean || self.busy {
            match &mut self.link {
                Link::Sqlite(c) => c.close_on_drop(),
                Link::Postgres(c) => c.close_on_drop(),
                Link::MySql(c) => c.close_on_drop(),
            }
        }
    }
}

/// The first column of the last row, as an integer.
fn last_int<R: sqlx::Row>(rows: Vec<R>) -> Result<Option<i64>, sqlx::Error>
where
    usize: sqlx::ColumnIndex<R>,
    i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    rows.last().map(|r| r.try_get::<i64, _>(0usize)).transpose()
}

fn encode_failure(e: sqlx::error::BoxDynError) -> Failure {
    Failure::invalid(format!("cannot bind a parameter: {e}"))
}

/// A PostgreSQL statement, as it comes (no savepoint). Its text carries the parameters' types:
/// sqlx caches one prepared statement per text, and a text bound with other types would fail.
async fn postgres(
    conn: &mut PoolConnection<Postgres>,
    statement: &str,
    params: Vec<Value>,
    want: Want,
) -> Result<Output, Failure> {
    let sql = if params.is_empty() {
        statement.to_string()
    } else {
        format!(
            "{statement}\n-- worker-host params {}",
            value::signature(&params)
        )
    };
    let args = value::pg_args(params).map_err(encode_failure)?;
    run::<Postgres>(conn, sql, args, want, value::pg_row, |r| r.rows_affected()).await
}

/// A SQLite statement. A script whose later statements need its earlier ones cannot be
/// prepared ahead: it runs unchecked and reports its own errors.
async fn sqlite(
    conn: &mut PoolConnection<Sqlite>,
    statement: &str,
    params: Vec<Value>,
    want: Want,
) -> Result<Output, Failure> {
    if let Ok(Some(expected)) = parameters::<Sqlite>(conn, statement).await {
        count_matches(expected, params.len())?;
    }
    let args = value::sqlite_args(params).map_err(encode_failure)?;
    let sql = statement.to_string();
    run::<Sqlite>(conn, sql, args, want, value::sqlite_row, |r| {
        r.rows_affected()
    })
    .await
}

/// A MySQL statement (one statement: a prepared one cannot hold more).
async fn mysql(
    conn: &mut PoolConnection<MySql>,
    statement: &str,
    params: Vec<Value>,
    want: Want,
) -> Result<Output, Failure> {
    let expected = parameters::<MySql>(conn, statement).await;
    if let Some(expected) = expected.map_err(|e| classify(&e))? {
        count_matches(expected, params.len())?;
    }
    let args = value::mysql_args(params).map_err(encode_failure)?;
    let sql = statement.to_string();
    run::<MySql>(conn, sql, args, want, value::mysql_row, |r| {
        r.rows_affected()
    })
    .await
}

/// How many parameters `sql` takes, from its prepared statement (sqlx caches it per
/// connection, so the statement is still parsed once). The host checks the count itself
/// because sqlx does not help: SQLite binds missing parameters as NULL, and a mismatch on
/// MySQL leaves the connection waiting for an answer that never comes.
async fn parameters<DB>(conn: &mut DB::Connection, sql: &str) -> Result<Option<usize>, sqlx::Error>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    let sql = AssertSqlSafe(sql.to_string()).into_sql_str();
    let prepared = conn.prepare(sql).await?;
    Ok(match prepared.parameters() {
        Some(Either::Right(n)) => Some(n),
        Some(Either::Left(types)) => Some(types.len()),
        None => None,
    })
}

fn count_matches(expected: usize, given: usize) -> Result<(), Failure> {
    if expected == given {
        return Ok(());
    }
    Err(Failure::invalid(format!(
        "the statement takes {expected} parameters, {given} given"
    )))
}

/// Runs `sql` on any backend: the rows (bounded by [`MAX_RESULT_BYTES`]) or the count.
async fn run<DB>(
    conn: &mut DB::Connection,
    sql: String,
    args: DB::Arguments,
    want: Want,
    read: fn(&DB::Row) -> Result<Vec<Value>, ReadError>,
    affected: fn(DB::QueryResult) -> u64,
) -> Result<Output, Failure>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    let query = sqlx::query_with::<DB, _>(AssertSqlSafe(sql.clone()), args);
    if want == Want::Affected {
        let done = query.execute(&mut *conn).await.map_err(|e| classify(&e))?;
        return Ok(Output::Affected(affected(done)));
    }
    let mut columns = None;
    let mut rows = Vec::new();
    let mut size = 0usize;
    {
        let mut stream = query.fetch(&mut *conn);
        while let Some(row) = stream.try_next().await.map_err(|e| classify(&e))? {
            if columns.is_none() {
                columns = Some(value::columns(&row));
            }
            let values = read(&row).map_err(|e| match e {
                ReadError::Unmapped(why) => Failure::invalid(why),
                ReadError::Bad(why) => Failure::other(format!("cannot read a value: {why}")),
            })?;
            size += values.iter().map(value::size_of).sum::<usize>();
            if size > MAX_RESULT_BYTES {
                return Err(Failure::other(format!(
                    "the result passed {} MiB after {} rows; select fewer rows or columns",
                    MAX_RESULT_BYTES >> 20,
                    rows.len()
                )));
            }
            rows.push(values);
        }
    }
    let columns = match columns {
        Some(c) => c,
        // No row to read names from: the prepared statement has them (cached, no round trip).
        None => match conn.prepare(AssertSqlSafe(sql).into_sql_str()).await {
            Ok(prepared) => prepared
                .columns()
                .iter()
                .map(|c| c.name().to_string())
                .collect(),
            Err(_) => Vec::new(),
        },
    };
    Ok(Output::Rows(Rows { columns, rows }))
}
