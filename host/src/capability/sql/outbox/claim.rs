//! The outbox's claim on PostgreSQL: before its call, a message's inbox row is inserted in the
//! transaction the call then uses, in the round trip that begins it, so the duplicate lookup
//! costs no round trip of its own. A row already there (committed by an earlier delivery)
//! means handled; one being written by another delivery makes this one wait for that one's
//! end, as a second writer of the same record always did. The claimed transaction waits here
//! under the message's key until its call takes it (`Instance::open`); one that no call takes
//! is rolled back when its [`Claim`] is dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::super::backend::Conn;
use super::super::{Database, First, rollback};
use super::record::dollar_quoted;
use super::{OPERATION_TIMEOUT, OutboxError, Unsent};
use crate::config::SqlKind;

type Key = (String, String);

/// Claimed transactions waiting for their calls, by (queue, message id).
#[derive(Default)]
pub(in crate::capability::sql) struct Claims {
    next: AtomicU64,
    waiting: Mutex<HashMap<Key, (u64, Conn)>>,
}

impl Claims {
    fn lock(&self) -> MutexGuard<'_, HashMap<Key, (u64, Conn)>> {
        // A panic elsewhere cannot leave the map half-changed: every change is one call.
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The claimed transaction of (`queue`, `message_id`), for its call.
    pub(in crate::capability::sql) fn take(&self, queue: &str, message_id: &str) -> Option<Conn> {
        let mut waiting = self.lock();
        if waiting.is_empty() {
            return None;
        }
        let key = (queue.to_string(), message_id.to_string());
        waiting.remove(&key).map(|(_, conn)| conn)
    }
}

/// A message's claim, held by the consumer until its call's effects are finished.
pub(crate) struct Claim {
    claims: Arc<Claims>,
    key: Key,
    token: u64,
}

impl Drop for Claim {
    /// A claimed transaction its call never took is closed, which rolls it back.
    fn drop(&mut self) {
        let mut waiting = self.claims.lock();
        if waiting
            .get(&self.key)
            .is_some_and(|(token, _)| *token == self.token)
        {
            let left = waiting.remove(&self.key);
            drop(waiting);
            drop(left);
        }
    }
}

/// What a claim found.
pub(crate) enum Claimed {
    /// Not handled yet: call the plugin, with the claim where one was made.
    Free(Option<Claim>),
    /// Handled already, with what it published that the broker has not confirmed.
    Handled(Vec<Unsent>),
}

impl Database {
    /// Whether `queue` has handled `message_id`, claiming it if not: on PostgreSQL by the
    /// inbox row inserted in the transaction the call will use (`handled_at_ms`, statements
    /// limited to `timeout` there as in any message's transaction); elsewhere by a lookup.
    pub(crate) async fn claim(
        &self,
        queue: &str,
        message_id: &str,
        handled_at_ms: i64,
        timeout: Duration,
    ) -> Result<Claimed, OutboxError> {
        let insert = (self.kind() == SqlKind::Postgres)
            .then(|| inbox_insert(queue, message_id, handled_at_ms))
            .flatten();
        if let Some(insert) = insert {
            self.outbox_ready().await?;
            let (conn, inserted) = self.claimed(&insert, timeout).await?;
            if inserted {
                let token = self.claims.next.fetch_add(1, Ordering::Relaxed);
                let key = (queue.to_string(), message_id.to_string());
                let stale = self.claims.lock().insert(key.clone(), (token, conn));
                // None can be there: a claim waiting holds the row this one just inserted.
                drop(stale);
                let claims = self.claims.clone();
                return Ok(Claimed::Free(Some(Claim { claims, key, token })));
            }
            rollback(conn).await;
        }
        Ok(match self.handled(queue, message_id).await? {
            None => Claimed::Free(None),
            Some(unsent) => Claimed::Handled(unsent),
        })
    }

    /// A connection in a transaction begun with `insert`, and whether that inserted its row.
    async fn claimed(&self, insert: &str, timeout: Duration) -> Result<(Conn, bool), OutboxError> {
        let deadline = Instant::now() + OPERATION_TIMEOUT.max(timeout);
        let result = self.started(deadline, First::Claim(insert, timeout)).await;
        self.health(result.as_ref().err());
        result.map_err(|f| OutboxError(self.describe(&f)))
    }
}

/// The inbox row of (`queue`, `message_id`) as one statement with its values written in (so
/// it can go in BEGIN's round trip, where parameters cannot), returning a row if it inserted
/// one; `None` for a value with a NUL, which no SQL text can carry.
fn inbox_insert(queue: &str, message_id: &str, handled_at_ms: i64) -> Option<String> {
    Some(format!(
        "INSERT INTO worker_inbox (queue, message_id, handled_at) VALUES ({}, {}, {handled_at_ms}) \
         ON CONFLICT DO NOTHING RETURNING 0::bigint",
        dollar_quoted(queue)?,
        dollar_quoted(message_id)?,
    ))
}
