//! Ending a plugin's statement on the database server once the host has given up on it: the
//! handler's deadline passed, the guest got an error, and the statement must not run on with
//! its locks and a core (SPEC section 9).
//!
//! - SQLite needs nothing here: its progress handler stops the statement at the deadline
//!   (`sqlite.rs`).
//! - PostgreSQL and MySQL/MariaDB get a cancel through a connection of its own (the message's
//!   connection is busy with the statement, and the pool may be exhausted):
//!   `pg_cancel_backend(pid)` and `KILL QUERY id`, with the session id read at BEGIN. It is
//!   sent from a task of its own, started before the host stops waiting, so the handler's
//!   call ending cannot drop it; the tasks are tracked and bounded by [`CANCEL_TIMEOUT`].
//!   PostgreSQL also has `statement_timeout` set at BEGIN, which ends the statement even if
//!   the host is gone.

use std::time::Duration;

use sqlx::Connection as _;
use tokio_util::task::TaskTracker;

use super::backend::Pool;

/// How long a cancel may take, connecting included.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(5);

/// The cancels in flight of one database.
#[derive(Default)]
pub(super) struct Cancels(TaskTracker);

impl Cancels {
    /// Cancels what session `id` runs (nothing without an id, or on SQLite).
    pub(super) fn cancel(&self, pool: &Pool, id: Option<u64>) {
        let Some(id) = id else { return };
        let job = match pool {
            Pool::Sqlite(_) => return,
            Pool::Postgres(p) => {
                let options = p.connect_options();
                let Ok(pid) = i32::try_from(id) else { return };
                Box::pin(async move {
                    let mut conn = sqlx::PgConnection::connect_with(&options).await?;
                    sqlx::query("SELECT pg_cancel_backend($1)")
                        .bind(pid)
                        .execute(&mut conn)
                        .await?;
                    conn.close().await
                })
                    as std::pin::Pin<Box<dyn Future<Output = sqlx::Result<()>> + Send>>
            }
            Pool::MySql(p) => {
                let options = p.connect_options();
                Box::pin(async move {
                    let mut conn = sqlx::MySqlConnection::connect_with(&options).await?;
                    // `id` is a number the server gave: nothing to quote.
                    let kill = sqlx::AssertSqlSafe(format!("KILL QUERY {id}"));
                    sqlx::raw_sql(kill).execute(&mut conn).await?;
                    conn.close().await
                })
            }
        };
        self.0.spawn(async move {
            match tokio::time::timeout(CANCEL_TIMEOUT, job).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!("[sql] cancelling a timed-out statement failed: {e}"),
                Err(_) => tracing::warn!("[sql] cancelling a timed-out statement timed out"),
            }
        });
    }

    /// Waits for the cancels in flight (at most [`CANCEL_TIMEOUT`] each).
    pub(super) async fn finished(&self) {
        self.0.close();
        self.0.wait().await;
        self.0.reopen();
    }
}
