//! SQL: `[sql.NAME]` databases (SQLite, PostgreSQL, MySQL/MariaDB through sqlx), one pool
//! each, and the guest's `sql` imports, all statements of one message in one transaction.
//!
//! The rules a guest sees:
//! - The first statement of a message begins its transaction; the host commits it when the
//!   handler answers ok (a failed commit turns the answer into a retry) and rolls it back
//!   otherwise.
//! - A statement reaches only the granted database (`guard.rs` on its text, SQLite's
//!   authorizer on what it touches): one statement per call; no transaction control, session
//!   settings, temporary objects, other databases, files or programs, and none of the host's
//!   own tables; all refused as `invalid`. On MySQL/MariaDB, DDL (which commits by itself) may
//!   only be a message's first statement.
//! - A statement that fails is undone by itself and the transaction goes on (PostgreSQL through
//!   a savepoint per statement), unless the failure loses the transaction (connection lost,
//!   deadline passed, a MySQL deadlock): then later statements fail the same way and the message
//!   cannot commit.
//! - Every statement ends by the handler's deadline, on the server too (`cancel.rs`,
//!   `sqlite.rs`); so does the commit, given at least [`COMMIT_MIN`] so that work already done
//!   is not thrown away for want of a millisecond.
//! - Values map as `value.rs` says; errors as `error.rs` says. No message names the URL.

mod acquire;
mod backend;
mod cancel;
mod dry;
mod error;
mod execute;
mod finish;
mod group;
mod guard;
mod inline;
pub(crate) mod outbox;
mod reader;
mod sqlite;
mod statement;
mod text;
mod value;

#[cfg(test)]
mod tests;

use std::str::FromStr as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use sqlx::mysql::MySqlConnectOptions;
use sqlx::pool::PoolOptions;
use sqlx::postgres::PgConnectOptions;
use tokio::time::timeout_at;
use tracing::Instrument;
use wasmtime::component::{HasSelf, Linker};

use self::acquire::First;
use self::backend::{Conn, Output, Pool, Want};
pub(crate) use self::error::{CommitError, PingError};
use self::error::{Failure, classify};
use self::finish::{commit, rollback};
use self::guard::Pass;
use self::statement::operation;
use super::capture::Capture;
use super::{Capability, Host, Recorder, Scope};
use crate::config::{Secret, SqlDatabaseConfig, SqlKind};
use crate::telemetry;
use crate::wit::worker::plugin::sql;

/// How long a message waits for a pooled connection (or for a new one to open, the server
/// refusing meanwhile) before its statement answers `unavailable`.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `/readyz` waits for `SELECT 1`.
const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// The least time a commit is given, even past the handler's deadline.
const COMMIT_MIN: Duration = Duration::from_secs(1);
/// How long a rollback may take before the connection is closed instead (the server then
/// rolls back by itself).
const ROLLBACK_GRACE: Duration = Duration::from_secs(1);

/// One database and its pool, shared by every subscription granted it.
pub(crate) struct Database {
    pool: Pool,
    recorder: Recorder,
    /// Only for `/readyz` messages, redacted.
    url: Secret,
    max_connections: u32,
    /// What `/readyz` was last told, so health changes are reported once.
    down: AtomicBool,
    /// Whether the outbox tables are there (created on first use).
    outbox_schema: outbox::Schema,
    /// Statements the host gave up on, being cancelled on the server.
    cancels: cancel::Cancels,
    /// SQLite: the messages' shared transaction (`group.rs`).
    group: Option<group::Group>,
    /// SQLite on a file: the outbox's reads on the caller's thread (`reader.rs`).
    reader: Option<reader::Reader>,
    /// PostgreSQL: the outbox's claimed transactions waiting for their calls.
    claims: Arc<outbox::Claims>,
    /// The guard's verdicts on the texts plugins sent.
    checked: guard::Checked,
}

impl Database {
    /// The server kind, as OpenTelemetry's `db.system.name`.
    fn system(&self) -> &'static str {
        match self.pool.kind() {
            SqlKind::Sqlite => "sqlite",
            SqlKind::Postgres => "postgresql",
            SqlKind::MySql => "mysql",
        }
    }

    /// Builds the pool. PostgreSQL and MySQL connect lazily, so a server that is down at start
    /// only makes calls answer `unavailable`; a SQLite file is opened (and created, with its
    /// directory) now, so a path that cannot be is a start-up error.
    pub(crate) async fn open(
        config: &SqlDatabaseConfig,
        recorder: Recorder,
    ) -> anyhow::Result<Database> {
        let url = config.url.expose();
        let redacted = config.url.redacted_url();
        let max = config.max_connections;
        let pool = match config.kind {
            SqlKind::Sqlite => Pool::Sqlite(sqlite::open(config, pool_options(max)).await?),
            SqlKind::Postgres => {
                let connect = PgConnectOptions::from_str(url)
                    .with_context(|| format!("invalid PostgreSQL URL {redacted}"))?
                    // Shows in pg_stat_activity which [sql.NAME] a connection serves.
                    .application_name(&format!("worker-host sql.{}", config.name));
                Pool::Postgres(pool_options(max).connect_lazy_with(connect))
            }
            SqlKind::MySql => {
                let connect = MySqlConnectOptions::from_str(url)
                    .with_context(|| format!("invalid MySQL URL {redacted}"))?;
                Pool::MySql(pool_options(max).connect_lazy_with(connect))
            }
        };
        Ok(Database {
            pool,
            recorder,
            url: config.url.clone(),
            max_connections: config.max_connections,
            down: AtomicBool::new(false),
            outbox_schema: outbox::Schema::default(),
            cancels: cancel::Cancels::default(),
            group: (config.kind == SqlKind::Sqlite).then(group::Group::default),
            reader: (config.kind == SqlKind::Sqlite && !sqlite::in_memory(url))
                .then(reader::Reader::default),
            claims: Arc::default(),
            checked: guard::Checked::new(config.kind),
        })
    }

    /// Waits for the cancels of timed-out statements still on their way (shutdown).
    pub(crate) async fn close(&self) {
        self.cancels.finished().await;
    }

    /// Whether the database answers `SELECT 1` within [`PING_TIMEOUT`], for `/readyz`.
    pub(crate) async fn ping(&self) -> Result<(), PingError> {
        let deadline = Instant::now() + PING_TIMEOUT;
        let result = self.connected(deadline, First::Ping).await.map(drop);
        self.down.store(result.is_err(), Ordering::Relaxed);
        result.map_err(|f| PingError {
            why: super::reason::without_url(error::message(&f.error), &self.url),
        })
    }

    /// A message's transaction: a turn in the group one on SQLite, a connection of its own
    /// on the servers.
    async fn transaction(&self, deadline: Instant) -> Result<Tx, Failure> {
        Ok(match &self.group {
            Some(group) => Tx::Member(group.join(self, deadline).await?),
            None => Tx::Open(self.connected(deadline, First::Begin).await?),
        })
    }

    /// Counts a call and tells `/readyz` when the database went away or came back.
    fn observe(&self, started: Instant, failure: Option<&Failure>) {
        self.recorder
            .call(started, failure.map_or("ok", Failure::kind));
        self.health(failure);
    }

    fn health(&self, failure: Option<&Failure>) {
        match failure {
            Some(f) if f.down => {
                if !self.down.swap(true, Ordering::Relaxed) {
                    let why = error::message(&f.error);
                    tracing::warn!(database = self.recorder.store(), "[sql] unavailable: {why}");
                    self.recorder.health(Some(why));
                }
            }
            Some(f) if matches!(f.error, sql::SqlError::Unavailable(_)) => {}
            // Answered, even if with an error of the statement.
            _ => {
                if self.down.swap(false, Ordering::Relaxed) {
                    tracing::info!(database = self.recorder.store(), "[sql] available again");
                    self.recorder.health(None);
                }
            }
        }
    }
}

/// What every pool shares. Connections are not pinged before each use (a round trip per
/// message): a stale one fails at BEGIN and is replaced (`Database::connected`).
fn pool_options<DB: sqlx::Database>(max_connections: u32) -> PoolOptions<DB> {
    PoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .test_before_acquire(false)
}

/// The `sql` state of one message: its transaction, begun at the first statement.
#[derive(Default)]
pub(crate) struct Instance {
    database: Option<Arc<Database>>,
    deadline: Option<Instant>,
    tx: Tx,
    /// Statements the plugin ran in this message.
    statements: u32,
    /// A dry run: each statement is recorded (the transaction is rolled back in the end).
    capture: Option<Arc<Capture>>,
    /// PostgreSQL: the message's (queue, id), under which the outbox may have claimed it.
    key: Option<(String, String)>,
    /// The transaction is the outbox's claim: the message's inbox row is in it already.
    claimed: bool,
}

#[derive(Default)]
enum Tx {
    #[default]
    Idle,
    Open(Conn),
    /// A turn in the database's group transaction (SQLite).
    Member(group::Member),
    /// The transaction is gone (its connection closed): every later statement answers this.
    Lost(sql::SqlError),
}

impl Capability for Instance {
    type Grant = Database;

    fn link<T: Host>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
        sql::add_to_linker::<T, HasSelf<Instance>>(linker, |t| &mut t.capabilities().sql)
    }

    fn begin(&mut self, grant: Option<Arc<Database>>, scope: &Scope) {
        self.key = (grant.as_ref())
            .filter(|db| db.pool.kind() == SqlKind::Postgres)
            .and(scope.message_id.as_ref())
            .map(|id| (scope.queue.clone(), id.clone()));
        self.claimed = false;
        self.database = grant;
        self.deadline = Some(scope.deadline);
        self.capture = scope.capture.clone();
        self.statements = 0;
        // Normally idle already; a transaction left over is closed, so rolled back.
        self.tx = Tx::Idle;
    }

    type Error = CommitError;

    /// A transaction (or a group turn, or a lost one to report) is open.
    fn holds_effects(&self) -> bool {
        !matches!(self.tx, Tx::Idle)
    }

    async fn finish(&mut self, ok: bool) -> Result<(), CommitError> {
        self.capture = None;
        let tx = std::mem::take(&mut self.tx);
        let database = self.database.take();
        let deadline = self.deadline.take().unwrap_or_else(Instant::now);
        match (tx, database) {
            (Tx::Open(conn), Some(db)) if ok => commit(&db, conn, deadline).await,
            (Tx::Open(conn), _) => {
                rollback(conn).await;
                Ok(())
            }
            (Tx::Member(member), Some(_)) => member.leave(ok).await,
            (Tx::Member(member), None) => member.leave(false).await,
            (Tx::Lost(error), Some(db)) if ok => Err(CommitError::Lost {
                store: db.recorder.store().to_string(),
                why: error::message(&error).to_string(),
            }),
            _ => Ok(()),
        }
    }
}

impl Instance {
    /// The message's transaction: the one the outbox claimed for it, or a new one.
    async fn open(&mut self, db: &Database, deadline: Instant) -> Result<Tx, Failure> {
        if let Some((queue, id)) = &self.key
            && let Some(conn) = db.claims.take(queue, id)
        {
            self.claimed = true;
            return Ok(Tx::Open(conn));
        }
        db.transaction(deadline).await
    }

    /// The error that lost the message's transaction, if one did.
    fn lost(&self) -> Option<&sql::SqlError> {
        match &self.tx {
            Tx::Lost(e) => Some(e),
            _ => None,
        }
    }

    /// One guest call: denied without a grant, counted in the metrics otherwise.
    async fn call(
        &mut self,
        statement: String,
        params: Vec<sql::Value>,
        want: Want,
    ) -> Result<Output, sql::SqlError> {
        let Some(db) = self.database.clone() else {
            return Err(sql::SqlError::Denied);
        };
        let span = telemetry::span!(
            "sql",
            otel.name = %format_args!("sql {}", operation(&statement)),
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            db.system.name = db.system(),
            db.namespace = db.recorder.store(),
            db.operation.name = operation(&statement),
            error.type = tracing::field::Empty,
        );
        let started = Instant::now();
        let shown = self.capture.as_ref().map(|_| params.clone());
        let result = self
            .run(&db, &statement, params, want)
            .instrument(span.clone())
            .await;
        if let Err(failure) = &result {
            telemetry::failed(&span, failure.kind());
        }
        if let (Some(capture), Some(params)) = (&self.capture, shown) {
            let effect = dry::effect(db.recorder.store(), &statement, &params, &result);
            capture.record(effect);
        }
        db.observe(started, result.as_ref().err());
        result.map_err(|f| f.error)
    }

    async fn run(
        &mut self,
        db: &Database,
        statement: &str,
        params: Vec<sql::Value>,
        want: Want,
    ) -> Result<Output, Failure> {
        let pass = db
            .checked
            .check(statement)
            .map_err(|r| Failure::invalid(r.0))?;
        if pass == Pass::ImplicitCommit && self.statements > 0 {
            return Err(Failure::invalid(
                "on MySQL/MariaDB this statement commits the transaction by itself: run it \
                 before the message's other statements (or make the tables ahead of time)",
            ));
        }
        if let Some(error) = self.lost() {
            return Err(Failure {
                error: error.clone(),
                lost: true,
                down: false,
            });
        }
        let deadline = self.deadline.unwrap_or_else(Instant::now);
        if matches!(self.tx, Tx::Idle) {
            self.tx = self.open(db, deadline).await?;
        }
        let conn = match &mut self.tx {
            Tx::Open(conn) => conn,
            Tx::Member(member) => member.conn(),
            _ => return Err(Failure::other("the transaction is not open")),
        };
        self.statements += 1;
        let run = conn.run_guest(statement, params, want, deadline);
        let mut result = match timeout_at(deadline.into(), run).await {
            Ok(result) => result,
            Err(_) => {
                db.cancels.cancel(&db.pool, conn.server_id());
                Err(Failure::timed_out(
                    "the statement ran past the handler's deadline and was cancelled",
                ))
            }
        };
        if pass == Pass::ImplicitCommit && !conn.busy() {
            // MySQL committed (an empty transaction) and runs in autocommit from here.
            let remaining = deadline.saturating_duration_since(Instant::now());
            if let Err(e) = conn.begin(remaining, true).await {
                result = Err(classify(&e).lost());
            }
        }
        if let Err(failure) = &result
            && failure.lost
        {
            // Dropping the connection closes it: the server rolls back.
            self.tx = Tx::Lost(with_message(
                &failure.error,
                format!(
                    "the message's transaction was rolled back after an earlier error: {}",
                    error::message(&failure.error)
                ),
            ));
        }
        result
    }
}

/// The same kind of error with another text.
fn with_message(error: &sql::SqlError, text: String) -> sql::SqlError {
    use sql::SqlError as E;
    match error {
        E::Denied => E::Denied,
        E::Unavailable(_) => E::Unavailable(text),
        E::Constraint(_) => E::Constraint(text),
        E::Invalid(_) => E::Invalid(text),
        E::Other(_) => E::Other(text),
    }
}

impl sql::Host for Instance {
    async fn query(
        &mut self,
        statement: String,
        params: Vec<sql::Value>,
    ) -> Result<sql::Rows, sql::SqlError> {
        match self.call(statement, params, Want::Rows).await? {
            Output::Rows(rows) => Ok(rows),
            Output::Affected(_) => Ok(sql::Rows {
                columns: Vec::new(),
                rows: Vec::new(),
            }),
        }
    }

    async fn execute(
        &mut self,
        statement: String,
        params: Vec<sql::Value>,
    ) -> Result<u64, sql::SqlError> {
        match self.call(statement, params, Want::Affected).await? {
            Output::Affected(n) => Ok(n),
            Output::Rows(rows) => Ok(rows.rows.len() as u64),
        }
    }
}
