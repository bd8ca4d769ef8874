//! SQLite: a connection of the host's own, outside the pool, for the outbox's duplicate check,
//! run on the caller's thread (`inline.rs`).
//!
//! With the outbox on, every message asks whether it was handled before its call. Through the
//! pool that was a connection taken, its handle locked, and the statement run: two round trips
//! to the connection's thread on every message's path. A read in WAL mode waits for no writer,
//! so it can run where the message is. Not on the group's connection: that one reads the
//! group's uncommitted records too, and a record that never commits must not make a message
//! look handled. The reader waits for no lock either: a read that would (SQLite recovering its
//! log after a crash) fails at once, and the caller asks through the pool, as before.

use std::sync::Arc;

use sqlx::sqlite::SqliteConnection;
use sqlx::{ConnectOptions as _, SqlitePool};
use tokio::sync::Mutex;

use super::execute::{Output, Want};
use super::inline::{Handle, Prepared};
use super::sqlite::{self, Watch};
use crate::wit::worker::plugin::sql::Value;

/// The reader of one SQLite database, opened on first use and again after a failure.
#[derive(Default)]
pub(super) struct Reader(Mutex<Option<Open>>);

struct Open {
    watch: Arc<Watch>,
    handle: Handle,
    /// The host's reads, kept prepared: planning the duplicate check's join costs more than
    /// running it. Declared before `_conn`, so finalized before the connection closes.
    prepared: Prepared,
    /// Kept open for `handle`, which points into it; closed when dropped.
    _conn: SqliteConnection,
}

impl Reader {
    /// Runs the host's read `statement`; `None` if the reader cannot (it could not open, the
    /// read failed or would wait, or the text is not one it runs): then the caller uses the pool.
    pub(super) async fn read(
        &self,
        pool: &SqlitePool,
        statement: &str,
        params: &[Value],
    ) -> Option<Output> {
        let mut open = self.0.lock().await;
        if open.is_none() {
            *open = Some(connect(pool).await.ok()?);
        }
        let reader = open.as_mut()?;
        let _host = reader.watch.host();
        let read = (reader.handle).run(&mut reader.prepared, statement, params, Want::Rows);
        match read? {
            Ok(rows) => Some(rows),
            // A reader that failed may be broken: the next read opens another.
            Err(_) => {
                *open = None;
                None
            }
        }
    }
}

/// A connection with the pool's options, set up as the pool's are, that never waits for a lock.
async fn connect(pool: &SqlitePool) -> Result<Open, sqlx::Error> {
    let mut conn = pool.connect_options().connect().await?;
    sqlite::install(&mut conn).await?;
    let (watch, handle) = Watch::of(&mut conn).await?;
    handle.never_wait();
    Ok(Open {
        watch,
        handle,
        prepared: Prepared::default(),
        _conn: conn,
    })
}
