//! The outbox's storage in a subscription's own database (the rules are `crate::outbox`'s):
//! which messages a queue has handled, and what each one published, written in the handler's
//! transaction so that the effects and the record of them commit together or not at all. The
//! host creates the tables (versioned migrations) on first use; nobody writes them by hand.
//!
//! `worker_inbox` holds one row per handled message (queue, message id, when); a redelivery
//! finds its row and is not handled again. `worker_outbox` holds what the handler published,
//! numbered from 1, with `sent_at` set once the broker confirmed it.

use std::time::{Duration, Instant};

use super::backend::{Conn, Output, Want};
use super::error::{self, Failure};
use super::{COMMIT_MIN, Database, First, Instance, Tx, commit, rollback};
use crate::capability::Capability as _;
use crate::config::SqlKind;
use crate::wit::worker::plugin::sql::{Rows, SqlError, Value};

mod schema;

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

    fn describe(&self, f: &Failure) -> String {
        format!(
            "[sql.{}] {}",
            self.recorder.store(),
            error::message(&f.error)
        )
    }

    /// Writes `record` into the message's open transaction `conn`: its inbox row first, so a
    /// second delivery of the same message waits for (or fails against) this one.
    pub(super) async fn write_record(
        &self,
        conn: &mut Conn,
        record: &Record,
    ) -> Result<(), RecordError> {
        let failed = |f: Failure| RecordError::Failed(self.describe(&f));
        let inbox = format!(
            "INSERT INTO worker_inbox (queue, message_id, handled_at) VALUES ({}, {}, {})",
            self.p(1),
            self.p(2),
            self.p(3)
        );
        let params = vec![
            Value::Text(record.queue.clone()),
            Value::Text(record.message_id.clone()),
            Value::Int(record.handled_at_ms),
        ];
        match conn.run(&inbox, params, Want::Affected).await {
            Ok(_) => {}
            Err(f) if matches!(f.error, SqlError::Constraint(_)) => {
                return Err(RecordError::Duplicate);
            }
            Err(f) => return Err(failed(f)),
        }
        let insert = format!(
            "INSERT INTO worker_outbox (queue, message_id, n, exchange, routing_key, properties, \
             body) VALUES ({})",
            (1..=7).map(|i| self.p(i)).collect::<Vec<_>>().join(", ")
        );
        for (i, m) in record.messages.iter().enumerate() {
            let params = vec![
                Value::Text(record.queue.clone()),
                Value::Text(record.message_id.clone()),
                Value::Int(i as i64 + 1),
                Value::Text(m.exchange.clone()),
                Value::Text(m.routing_key.clone()),
                Value::Text(m.properties.clone()),
                Value::Bytes(m.body.clone()),
            ];
            conn.run(&insert, params, Want::Affected)
                .await
                .map_err(failed)?;
        }
        Ok(())
    }

    /// Whether `queue` has handled `message_id`; if so, what it published that the broker has
    /// not confirmed.
    pub(crate) async fn handled(
        &self,
        queue: &str,
        message_id: &str,
    ) -> Result<Option<Vec<Unsent>>, OutboxError> {
        self.outbox_ready().await?;
        let mut conn = self
            .begun(Instant::now() + OPERATION_TIMEOUT, false)
            .await?;
        let key = || {
            vec![
                Value::Text(queue.to_string()),
                Value::Text(message_id.to_string()),
            ]
        };
        let seen = format!(
            "SELECT 1 FROM worker_inbox WHERE queue = {} AND message_id = {}",
            self.p(1),
            self.p(2)
        );
        let found = !rows(run(&mut conn, &seen, key(), Want::Rows).await?).is_empty();
        if !found {
            rollback(conn).await;
            return Ok(None);
        }
        let unsent = format!(
            "SELECT n, exchange, routing_key, properties, body FROM worker_outbox \
             WHERE queue = {} AND message_id = {} AND sent_at IS NULL ORDER BY n",
            self.p(1),
            self.p(2)
        );
        let rows = rows(run(&mut conn, &unsent, key(), Want::Rows).await?);
        rollback(conn).await;
        rows.into_iter()
            .map(|r| unsent_of(&r))
            .collect::<Result<_, _>>()
            .map(Some)
    }

    /// Marks messages `ns` of (`queue`, `message_id`) as confirmed by the broker.
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
        let deadline = Instant::now() + OPERATION_TIMEOUT;
        if let Some(group) = &self.group {
            // SQLite: a sync of its own per message would cost what the group commit saves.
            let mut member = group
                .join(self, deadline)
                .await
                .map_err(|f| OutboxError(self.describe(&f)))?;
            let marked = run(member.conn(), &update, params, Want::Affected).await;
            let left = member.leave(marked.is_ok()).await;
            marked?;
            return left.map_err(|e| OutboxError(e.to_string()));
        }
        let mut conn = self.begun(deadline, true).await?;
        run(&mut conn, &update, params, Want::Affected).await?;
        self.commit_now(conn).await
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

impl Instance {
    /// Ends the message as [`Capability::finish`] does, first writing `record` (the message
    /// handled, what it published) into its transaction on ok, so both commit or neither.
    pub(crate) async fn finish_recorded(
        &mut self,
        ok: bool,
        record: Option<&Record>,
    ) -> Result<(), RecordError> {
        let (true, Some(record), Some(db)) = (ok, record, self.database.clone()) else {
            return self
                .finish(ok)
                .await
                .map_err(|e| RecordError::Failed(e.to_string()));
        };
        let deadline = self.deadline.take().unwrap_or_else(Instant::now);
        // The handler may have used its time: recording gets what a commit gets.
        let deadline = deadline.max(Instant::now() + COMMIT_MIN);
        self.database = None;
        let failed = |why: String| RecordError::Failed(why);
        let described = |f: Failure| failed(db.describe(&f));
        let tx = match std::mem::take(&mut self.tx) {
            // The consumer has made the tables before the call (it looked the message up).
            Tx::Idle => db.transaction(deadline).await.map_err(described)?,
            Tx::Lost(error) => {
                return Err(failed(format!(
                    "[sql.{}] {}",
                    db.recorder.store(),
                    error::message(&error)
                )));
            }
            tx => tx,
        };
        match tx {
            Tx::Member(mut member) => {
                let written = record_by(&db, member.conn(), record, deadline).await;
                let kept = written.is_ok();
                let left = member.leave(kept).await;
                written?;
                left.map_err(|e| failed(e.to_string()))
            }
            Tx::Open(mut conn) => {
                if let Err(e) = record_by(&db, &mut conn, record, deadline).await {
                    rollback(conn).await;
                    return Err(e);
                }
                commit(&db, conn, deadline)
                    .await
                    .map_err(|e| failed(e.to_string()))
            }
            Tx::Idle | Tx::Lost(_) => Err(failed("the transaction is not open".into())),
        }
    }
}

/// Writes `record` into the open transaction `conn`, by `deadline`.
async fn record_by(
    db: &Database,
    conn: &mut Conn,
    record: &Record,
    deadline: Instant,
) -> Result<(), RecordError> {
    match tokio::time::timeout_at(deadline.into(), db.write_record(conn, record)).await {
        Ok(written) => written,
        Err(_) => Err(RecordError::Failed(format!(
            "[sql.{}] recording the outbox timed out",
            db.recorder.store()
        ))),
    }
}
