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

use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, MySql, Postgres, Sqlite};

use super::error::{Failure, classify};
pub(super) use super::execute::{Output, Want};
use super::execute::{mysql, postgres, sqlite};
use super::inline::{Handle, Prepared};
use super::sqlite::Watch;
use crate::wit::worker::plugin::sql::Value;

/// The savepoint each PostgreSQL statement runs under.
const SAVEPOINT: &str = "worker_host_statement";

/// A savepoint's statements, written out once (kept prepared on SQLite, by their text).
pub(super) struct Savepoint {
    pub open: &'static str,
    pub release: &'static str,
    pub rollback_to: &'static str,
}

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
        let (mut watch, mut handle) = (None, None);
        let link = match self {
            Pool::Sqlite(p) => {
                let mut c = p.acquire().await?;
                let (w, h) = Watch::of(&mut c).await?;
                (watch, handle) = (Some(w), Some(h));
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
            handle,
            inline: false,
            prepared_host: Prepared::default(),
            prepared_plugin: Prepared::default(),
            server_id: None,
        })
    }
}

enum Link {
    Sqlite(PoolConnection<Sqlite>),
    Postgres(PoolConnection<Postgres>),
    MySql(PoolConnection<MySql>),
}

/// Whose statement runs on a connection: the authorizer judges the two apart, so each keeps
/// its own prepared statements.
#[derive(Clone, Copy)]
enum Whose {
    Host,
    Plugin,
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
    /// SQLite: the connection's handle, for statements on the caller's thread.
    handle: Option<Handle>,
    /// SQLite: the connection holds the write lock, so its statements run on the caller's
    /// thread (`inline.rs`).
    inline: bool,
    /// SQLite: the statements run on the caller's thread, kept prepared for the next message,
    /// the host's apart from the plugins' (finalized when this drops, before the connection
    /// goes back).
    prepared_host: Prepared,
    prepared_plugin: Prepared,
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
        self.inline = write && self.handle.is_some();
        Ok(())
    }

    /// PostgreSQL, the outbox's claim (`outbox/claim.rs`): begins a message's transaction as
    /// [`Conn::begin`] does, with `first` (a statement that returns one row or none) run
    /// first in it, in the same round trip; whether `first` returned its row.
    pub(super) async fn begin_with(
        &mut self,
        remaining: Duration,
        first: &str,
    ) -> Result<bool, sqlx::Error> {
        self.clean = false;
        let Link::Postgres(c) = &mut self.link else {
            return Err(sqlx::Error::Protocol(
                "a claim is made on PostgreSQL only".into(),
            ));
        };
        let ms = remaining.as_millis().clamp(1, i32::MAX as u128);
        let statement = format!(
            "BEGIN; SET LOCAL statement_timeout = {ms}; {first}; SAVEPOINT {SAVEPOINT}; \
             SELECT pg_backend_pid()::bigint"
        );
        self.busy = true;
        let rows = sqlx::raw_sql(AssertSqlSafe(statement))
            .fetch_all(&mut **c)
            .await?;
        self.busy = false;
        // `first`'s row (if any), then the session's id.
        let inserted = rows.len() == 2;
        self.server_id = last_int(rows)?.and_then(|id| u64::try_from(id).ok());
        self.savepoint_fresh = true;
        Ok(inserted)
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
        self.inline = false;
        self.control("COMMIT".into()).await?;
        self.clean = true;
        Ok(())
    }

    /// Runs `statement` (one of the host's, text protocol) and commits, in one round trip.
    /// On an error the transaction is not committed: roll it back (or close the connection).
    pub(super) async fn commit_after(&mut self, statement: &str) -> Result<(), sqlx::Error> {
        self.inline = false;
        self.control(format!("{statement}; COMMIT")).await?;
        self.clean = true;
        Ok(())
    }

    pub(super) async fn rollback(&mut self) -> Result<(), sqlx::Error> {
        self.inline = false;
        self.control("ROLLBACK".into()).await?;
        self.clean = true;
        Ok(())
    }

    /// Runs `savepoint`'s statement that opens it in the transaction (group commit: one per
    /// message).
    pub(super) async fn savepoint(&mut self, savepoint: &Savepoint) -> Result<(), Failure> {
        self.in_transaction_control(&[savepoint.open]).await
    }

    /// Ends `savepoint`, keeping what was done under it.
    pub(super) async fn release(&mut self, savepoint: &Savepoint) -> Result<(), Failure> {
        self.in_transaction_control(&[savepoint.release]).await
    }

    /// Undoes what was done since `savepoint`, and ends it.
    pub(super) async fn rollback_to(&mut self, savepoint: &Savepoint) -> Result<(), Failure> {
        self.in_transaction_control(&[savepoint.rollback_to, savepoint.release])
            .await
    }

    /// Transaction-control statements of the host's inside the transaction, in order: on the
    /// caller's thread, kept prepared among the host's, where the connection allows.
    async fn in_transaction_control(&mut self, statements: &[&str]) -> Result<(), Failure> {
        if self.runs_inline() {
            let _host = self.watch.as_ref().map(Watch::host);
            for statement in statements {
                let done = self.try_inline(Whose::Host, statement, &[], Want::Affected);
                done.ok_or_else(|| Failure::other("not a single statement"))??;
            }
            return Ok(());
        }
        self.control(statements.join("; "))
            .await
            .map(drop)
            .map_err(|e| classify(&e))
    }

    /// Whether statements run on the caller's thread: SQLite holding the write lock, and no
    /// sqlx operation cut off on the connection.
    fn runs_inline(&self) -> bool {
        self.inline && !self.busy && self.handle.is_some()
    }

    /// Runs `statement` on the caller's thread if the connection allows and the text is one
    /// that path takes (`inline.rs`), kept prepared among `whose` statements for next time.
    fn try_inline(
        &mut self,
        whose: Whose,
        statement: &str,
        params: &[Value],
        want: Want,
    ) -> Option<Result<Output, Failure>> {
        if !self.runs_inline() {
            return None;
        }
        let handle = self.handle.as_ref()?;
        let prepared = match whose {
            Whose::Host => &mut self.prepared_host,
            Whose::Plugin => &mut self.prepared_plugin,
        };
        handle.run(prepared, statement, params, want)
    }

    /// A transaction-control statement of the host's (text protocol: PostgreSQL and MySQL take
    /// several at once); the first column of the last row it returns, if any.
    ///
    /// Boxed, as every way through sqlx here: its futures are kilobytes, which each future
    /// awaiting this one would carry and copy when it moves, on the hot path too (a SQLite
    /// message's statements run on the caller's thread and take none of these ways).
    async fn control(&mut self, statement: String) -> Result<Option<i64>, sqlx::Error> {
        let _host = self.watch.as_ref().map(Watch::host);
        self.busy = true;
        let last = Box::pin(async {
            let sql = sqlx::raw_sql(AssertSqlSafe(statement));
            match &mut self.link {
                Link::Sqlite(c) => sql.execute(&mut **c).await.map(|_| None),
                Link::Postgres(c) => last_int(sql.fetch_all(&mut **c).await?),
                Link::MySql(c) => last_int(sql.fetch_all(&mut **c).await?),
            }
        })
        .await?;
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
        if let Some(done) = self.try_inline(Whose::Host, statement, &params, want) {
            return done;
        }
        self.busy = true;
        // Boxed (see `control`).
        let result = Box::pin(async {
            match &mut self.link {
                Link::Sqlite(c) => sqlite(c, statement, params, want).await,
                Link::Postgres(c) => postgres(c, statement, params, want)
                    .await
                    .map_err(Failure::lost),
                Link::MySql(c) => mysql(c, statement, params, want).await,
            }
        })
        .await;
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
        let mut result = match self.try_inline(Whose::Plugin, statement, &params, want) {
            Some(done) => done,
            None => {
                self.busy = true;
                // Boxed (see `control`).
                let result = Box::pin(self.dispatch(statement, params, want)).await;
                self.busy = false;
                result
            }
        };
        if let (Err(failure), Some(watch)) = (&mut result, &self.watch)
            && let Some(why) = watch.take_refusal()
        {
            *failure = Failure::invalid(why);
        }
        if let Err(failure) = &mut result
            && !failure.lost
            && !self.in_transaction()
        {
            // SQLite ended the transaction itself: what follows would commit statement by
            // statement.
            failure.lost = true;
        }
        result
    }

    /// Whether the transaction is still open: always on the servers (they report a lost one
    /// by their errors, and have no handle); on SQLite as the connection says.
    pub(super) fn in_transaction(&self) -> bool {
        self.handle.as_ref().is_none_or(Handle::in_transaction)
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
        // Before the connection goes back to the pool, or is closed: a statement left
        // unfinalized would keep it from closing.
        self.prepared_host.clear();
        self.prepared_plugin.clear();
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
