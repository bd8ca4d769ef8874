//! Where the outbox keeps its records: a small trait, implemented by the SQL capability's
//! [`Database`] (the record itself is written in the handler's transaction, by
//! `Effects::finish`).

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use crate::capability::sql::Database;
use crate::capability::sql::outbox::{Claimed, Unsent};

/// The outbox's storage.
pub(crate) trait Store: Send + Sync + 'static {
    type Error: Display + Send;

    /// Whether `queue` has handled `message_id` (if so, what it published that the broker
    /// has not confirmed), claiming it for this delivery if not; `timeout` is the handler's.
    fn claim(
        &self,
        queue: &str,
        message_id: &str,
        now_ms: i64,
        timeout: Duration,
    ) -> impl Future<Output = Result<Claimed, Self::Error>> + Send;

    /// Marks messages `ns` of (`queue`, `message_id`) as confirmed at `now_ms`.
    fn mark_sent(
        &self,
        queue: &str,
        message_id: &str,
        ns: &[u32],
        now_ms: i64,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Up to `limit` messages of `queue` left unsent by handlers that recorded them before
    /// `before_ms`, oldest first, each with its input's message id.
    fn unsent(
        &self,
        queue: &str,
        before_ms: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<(String, Unsent)>, Self::Error>> + Send;

    /// Deletes up to `batch` fully sent records of `queue` handled before `before_ms`;
    /// returns how many went.
    fn prune(
        &self,
        queue: &str,
        before_ms: i64,
        batch: u32,
    ) -> impl Future<Output = Result<u64, Self::Error>> + Send;
}

impl Store for Database {
    type Error = crate::capability::sql::outbox::OutboxError;

    async fn claim(
        &self,
        queue: &str,
        id: &str,
        now_ms: i64,
        timeout: Duration,
    ) -> Result<Claimed, Self::Error> {
        Database::claim(self, queue, id, now_ms, timeout).await
    }

    async fn mark_sent(
        &self,
        queue: &str,
        id: &str,
        ns: &[u32],
        now: i64,
    ) -> Result<(), Self::Error> {
        Database::mark_sent(self, queue, id, ns, now).await
    }

    async fn unsent(
        &self,
        queue: &str,
        before_ms: i64,
        limit: u32,
    ) -> Result<Vec<(String, Unsent)>, Self::Error> {
        Database::unsent(self, queue, before_ms, limit).await
    }

    async fn prune(&self, queue: &str, before_ms: i64, batch: u32) -> Result<u64, Self::Error> {
        Database::prune(self, queue, before_ms, batch).await
    }
}
