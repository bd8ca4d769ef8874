//! The outbox's storage in a subscription's own database (the rules are `crate::outbox`'s):
//! which messages a queue has handled, and what each one published, written in the handler's
//! transaction so that the effects and the record of them commit together or not at all. The
//! host creates the tables (versioned migrations) on first use; nobody writes them by hand.
//!
//! `worker_inbox` holds one row per handled message (queue, message id, when); a redelivery
//! finds its row and is not handled again. `worker_outbox` holds what the handler published,
//! numbered from 1, with `sent_at` set once the broker confirmed it.

use std::time::{Duration, Instant};

use super::backend::{Conn, Output, Pool, Want};
use super::error::{self, Failure, classify};
use super::{Database, First, commit, rollback};
use crate::config::SqlKind;
use crate::wit::worker::plugin::sql::{Rows, Value};

mod claim;
mod record;
mod schema;

pub(in crate::capability::sql) use claim::Claims;
pub(crate) use claim::{Claim, Claimed};
pub(in crate::capability::sql) use schema::Schema;

/// How long one outbox operation outside a message may take.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// One message a handler published, as the outbox keeps it. `properties` is the publisher's
/// own encoding (content type, headers, delay); the database only stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outgoing {
    pub exchange: String,
    pub routing_key: String,
    pub properties: String,
    pub body: Vec<u8>,
}

/// An outgoing message not yet confirmed by the broker, and its number (from 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unsent {
    pub n: u32,
    pub message: Outgoing,
}

/// What one handled message records: written with its effects.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub queue: String,
    pub message_id: String,
    /// When it was handled (Unix ms).
    pub handled_at_ms: i64,
    pub messages: Vec<Outgoing>,
}

/// Why recording a handled message did not commit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RecordError {
    /// Another delivery of the same message committed first: this one's effects are undone.
    #[error("already handled by another delivery of this message; its effects were undone")]
    Duplicate,
    #[error("{0}")]
    Failed(String),
}

/// Why an outbox operation outside a message failed (the database's reason, one line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct OutboxError(String);

impl From<&str> for OutboxError {
    fn from(why: &str) -> OutboxError {
        OutboxError(why.to_string())
    }
}

impl Database {
    fn kind(&self) -> SqlKind {
        self.pool.kind()
    }

    /// Placeholder `n` (from 1) in this database's syntax.
    fn p(&self, n: usize) -> String {
        match self.kind() {
            SqlKind::Postgres => format!("${n}"),
            _ => "?".to_string(),
        }
    }

    /// A connection in a transaction of its own, for work outside any message (`write`: it
    /// will write).
    async fn begun(&self, deadline: Instant, write: bool) -> Result<Conn, OutboxError> {
        let first = if write { First::Begin } else { First::Read };
        self.connected(deadline, first).await.map_err(|f| {
            // Down for the outbox is down for `/readyz` too.
            self.health(Some(&f));
            OutboxError(self.describe(&f))
        })
    }

    async fn commit_now(&self, conn: Conn) -> Result<(), OutboxError> {
        commit(self, conn, Instant::now() + OPERATION_TIMEOUT)
            .await
            .map_err(|e| OutboxError(e.to_string()))
    }

    /// Runs `statement` by itself on a pooled connection, outside any transaction: one round
    /// trip (no BEGIN, no COMMIT), within [`OPERATION_TIMEOUT`]; a statement cut off there
    /// leaves its connection closed. A pooled connection the server closed since (restart,
    /// idle limit) fails as down: the next one is tried, up to a pool's worth, so `statement`
    /// must be one that may run twice (a read, an idempotent update).
    async fn once(
        &self,
        statement: &str,
        params: Vec<Value>,
        want: Want,
    ) -> Result<Output, OutboxError> {
        let attempt = async {
            let mut stale = 0;
            loop {
                let mut conn = self.pool.acquire().await.map_err(|e| classify(&e))?;
                match conn.once(statement, params.clone(), want).await {
                    Err(f) if f.lost && f.down && stale < self.max_connections => stale += 1,
                    result => return result,
                }
            }
        };
        let result = match tokio::time::timeout(OPERATION_TIMEOUT, attempt).await {
            Ok(result) => result,
            Err(_) => Err(Failure::unavailable(
                "the outbox's statement did not finish in time: the database did not answer or \
                 the pool was busy",
            )),
        };
        // Down for the outbox is down for `/readyz` too; an answer says it is up.
        self.health(result.as_ref().err());
        result.map_err(|f| OutboxError(self.describe(&f)))
    }

    /// A read by itself: on SQLite's reader, on the caller's thread (`reader.rs`); where there
    /// is none or it cannot, as [`Database::once`].
    async fn read_once(&self, statement: &str, params: Vec<Value>) -> Result<Output, OutboxError> {
        if let (Some(reader), Pool::Sqlite(pool)) = (&self.reader, &self.pool)
            && let Some(rows) = reader.read(pool, statement, &params).await
        {
            self.health(None);
            return Ok(rows);
        }
        self.once(statement, params, Want::Rows).await
    }

    fn describe(&self, f: &Failure) -> String {
        format!(
            "[sql.{}] {}",
            self.recorder.store(),
            error::message(&f.error)
        )
    }

    /// Whether `queue` has handled `message_id`; if so, what it published that the broker has
    /// not confirmed. One statement, so one round trip and one consistent read: the inbox row
    /// joined with the unsent outbox rows (one row of NULLs when none is left).
    pub(crate) async fn handled(
        &self,
        queue: &str,
        message_id: &str,
    ) -> Result<Option<Vec<Unsent>>, OutboxError> {
        self.outbox_ready().await?;
        let select = format!(
            "SELECT o.n, o.exchange, o.routing_key, o.properties, o.body FROM worker_inbox i \
             LEFT JOIN worker_outbox o ON o.queue = i.queue AND o.message_id = i.message_id \
             AND o.sent_at IS NULL WHERE i.queue = {} AND i.message_id = {} ORDER BY o.n",
            self.p(1),
            self.p(2)
        );
        let key = vec![
            Value::Text(queue.to_string()),
            Value::Text(message_id.to_string()),
        ];
        let rows = rows(self.read_once(&select, key).await?);
        match rows.first().and_then(|r| r.first()) {
            None => Ok(None),
            Some(Value::Null) => Ok(Some(Vec::new())),
            Some(_) => rows
                .iter()
                .map(|r| unsent_of(r))
                .collect::<Result<_, _>>()
                .map(Some),
        }
    }

    /// Marks messages `ns` of (`queue`, `message_id`) as confirmed by the broker: one
    /// statement, atomic by itself, outside any transaction.
    pub(crate) async fn mark_sent(
        &self,
        queue: &str,
        message_id: &str,
        ns: &[u32],
        now_ms: i64,
    ) -> Result<(), OutboxError> {
        if ns.is_empty() {
            return Ok(());
        }
        let list = (0..ns.len())
            .map(|i| self.p(i + 4))
            .collect::<Vec<_>>()
            .join(", ");
        let update = format!(
            "UPDATE worker_outbox SET sent_at = {} WHERE queue = {} AND message_id = {} AND n IN ({list})",
            self.p(1),
            self.p(2),
            self.p(3)
        );
        let mut params = vec![
            Value::Int(now_ms),
            Value::Text(queue.to_string()),
            Value::Text(message_id.to_string()),
        ];
        params.extend(ns.iter().map(|n| Value::Int(i64::from(*n))));
        if let Some(group) = &self.group {
            // SQLite: a sync of its own per message would cost what the group commit saves.
            let deadline = Instant::now() + OPERATION_TIMEOUT;
            let mut member = group
                .join(self, deadline)
                .await
                .map_err(|f| OutboxError(self.describe(&f)))?;
            let marked = run(member.conn(), &update, params, Want::Affected).await;
            let left = member.leave(marked.is_ok()).await;
            marked?;
            return left.map_err(|e| OutboxError(e.to_string()));
        }
        self.once(&update, params, Want::Affected).await.map(drop)
    }

    /// Up to `limit` messages of `queue` left unsent by a handler that recorded them before
    /// `before_ms` (a crash between commit and publish), oldest first.
    pub(crate) async fn unsent(
        &self,
        queue: &str,
        before_ms: i64,
        limit: u32,
    ) -> Result<Vec<(String, Unsent)>, OutboxError> {
        self.outbox_ready().await?;
        let mut conn = self
            .begun(Instant::now() + OPERATION_TIMEOUT, false)
            .await?;
        let select = format!(
            "SELECT o.message_id, o.n, o.exchange, o.routing_key, o.properties, o.body \
             FROM worker_outbox o JOIN worker_inbox i \
             ON i.queue = o.queue AND i.message_id = o.message_id \
             WHERE o.queue = {} AND o.sent_at IS NULL AND i.handled_at < {} \
             ORDER BY i.handled_at, o.message_id, o.n LIMIT {limit}",
            self.p(1),
            self.p(2)
        );
        let params = vec![Value::Text(queue.to_string()), Value::Int(before_ms)];
        let rows = rows(run(&mut conn, &select, params, Want::Rows).await?);
        rollback(conn).await;
        rows.into_iter()
            .map(|r| {
                let id = text(r.first())?;
                Ok((id, unsent_of(&r[1..])?))
            })
            .collect()
    }

    /// Deletes up to `batch` records of `queue` handled before `before_ms`, with what they
    /// published; unsent messages stay. Returns how many inbox rows went.
    pub(crate) async fn prune(
        &self,
        queue: &str,
        before_ms: i64,
        batch: u32,
    ) -> Result<u64, OutboxError> {
        self.outbox_ready().await?;
        let mut conn = self.begun(Instant::now() + OPERATION_TIMEOUT, true).await?;
        // The oldest records first; MySQL takes no LIMIT in an IN subquery, so ids are read
        // and deleted by key.
        let select = format!(
            "SELECT message_id FROM worker_inbox i WHERE queue = {} AND handled_at < {} \
             AND NOT EXISTS (SELECT 1 FROM worker_outbox o WHERE o.queue = i.queue \
             AND o.message_id = i.message_id AND o.sent_at IS NULL) \
             ORDER BY handled_at LIMIT {batch}",
            self.p(1),
            self.p(2)
        );
        let params = vec![Value::Text(queue.to_string()), Value::Int(before_ms)];
        let ids = rows(run(&mut conn, &select, params, Want::Rows).await?);
        let mut deleted = 0;
        for row in ids {
            let id = text(row.first())?;
            let key = vec![Value::Text(queue.to_string()), Value::Text(id)];
            for table in ["worker_outbox", "worker_inbox"] {
                let delete = format!(
                    "DELETE FROM {table} WHERE queue = {} AND message_id = {}",
                    self.p(1),
                    self.p(2)
                );
                let n = affected(run(&mut conn, &delete, key.clone(), Want::Affected).await?);
                if table == "worker_inbox" {
                    deleted += n;
                }
            }
        }
        self.commit_now(conn).await?;
        Ok(deleted)
    }
}

async fn run(
    conn: &mut Conn,
    statement: &str,
    params: Vec<Value>,
    want: Want,
) -> Result<Output, OutboxError> {
    conn.run(statement, params, want)
        .await
        .map_err(|f| OutboxError(format!("outbox: {}", error::message(&f.error))))
}

fn rows(output: Output) -> Vec<Vec<Value>> {
    match output {
        Output::Rows(Rows { rows, .. }) => rows,
        Output::Affected(_) => Vec::new(),
    }
}

fn affected(output: Output) -> u64 {
    match output {
        Output::Affected(n) => n,
        Output::Rows(r) => r.rows.len() as u64,
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        Value::Text(t) => t.parse().ok(),
        _ => None,
    }
}

fn text(v: Option<&Value>) -> Result<String, OutboxError> {
    match v {
        Some(Value::Text(t)) => Ok(t.clone()),
        Some(Value::Bytes(b)) => {
            String::from_utf8(b.clone()).map_err(|_| "outbox: a text column holds bytes".into())
        }
        other => Err(OutboxError(format!("outbox: expected text, got {other:?}"))),
    }
}

/// `n, exchange, routing_key, properties, body` as a message.
fn unsent_of(row: &[Value]) -> Result<Unsent, OutboxError> {
    let [n, exchange, routing_key, properties, body] = row else {
        return Err("outbox: a row of the wrong shape".into());
    };
    let body = match body {
        Value::Bytes(b) => b.clone(),
        Value::Text(t) => t.clone().into_bytes(),
        other => return Err(OutboxError(format!("outbox: body of {other:?}"))),
    };
    Ok(Unsent {
        n: int(n)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or("outbox: a bad message number")?,
        message: Outgoing {
            exchange: text(Some(exchange))?,
            routing_key: text(Some(routing_key))?,
            properties: text(Some(properties))?,
            body,
        },
    })
}
