//! Ending a message's transaction: the commit, bounded by the message's deadline, and the
//! rollback, which closes the connection rather than wait on one that does not answer.

use std::time::Instant;

use tokio::time::{timeout, timeout_at};

use super::backend::Conn;
use super::error::{self, CommitError, classify};
use super::{COMMIT_MIN, Database, ROLLBACK_GRACE};

/// Commits, bounded by the deadline (at least [`COMMIT_MIN`] from now).
pub(super) async fn commit(
    db: &Database,
    mut conn: Conn,
    deadline: Instant,
) -> Result<(), CommitError> {
    let store = db.recorder.store().to_string();
    if conn.busy() {
        return Err(CommitError::CutOff { store });
    }
    let deadline = deadline.max(Instant::now() + COMMIT_MIN);
    match timeout_at(deadline.into(), conn.commit()).await {
        Ok(Ok(())) => {
            db.health(None);
            Ok(())
        }
        Ok(Err(e)) => {
            let failure = classify(&e);
            db.health(Some(&failure));
            Err(CommitError::Failed {
                store,
                why: error::message(&failure.error).to_string(),
            })
        }
        Err(_) => Err(CommitError::TimedOut { store }),
    }
}

/// Rolls back; a connection cut off mid-statement, or a rollback that fails or takes too
/// long, is closed instead, which rolls back on the server.
pub(super) async fn rollback(mut conn: Conn) {
    if !conn.busy() {
        let _ = timeout(ROLLBACK_GRACE, conn.rollback()).await;
    }
}
