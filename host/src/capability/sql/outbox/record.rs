//! Writing a handled message's record into its own transaction: the inbox row first, then what
//! it published, in as few statements as the backends allow; then the commit.

use std::ops::Range;
use std::time::Instant;

use super::super::backend::{Conn, Want};
use super::super::error::{self, Failure};
use super::super::{COMMIT_MIN, Database, Instance, Tx, commit, rollback};
use super::{Outgoing, Record, RecordError};
use crate::capability::Capability as _;
use crate::config::SqlKind;
use crate::wit::worker::plugin::sql::{SqlError, Value};

/// The most outbox rows one INSERT writes: 7 parameters each, 700 in all, under every
/// backend's limit (even SQLite's old 999).
const ROWS_PER_INSERT: usize = 100;
/// The most bytes of messages one INSERT carries (a larger message goes alone), well under
/// MySQL's smallest default packet limit.
const BYTES_PER_INSERT: usize = 1 << 20;

impl Database {
    /// Writes `record` into the message's open transaction `conn`: its inbox row first, so a
    /// second delivery of the same message waits for (or fails against) this one; then its
    /// messages, many to an INSERT. Any error leaves the transaction to be rolled back.
    pub(super) async fn write_record(
        &self,
        conn: &mut Conn,
        record: &Record,
        claimed: bool,
    ) -> Result<(), RecordError> {
        let failed = |f: Failure| RecordError::Failed(self.describe(&f));
        if claimed {
            // The claim inserted the inbox row already (`claim.rs`).
            return self.write_messages(conn, record).await.map_err(failed);
        }
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
        self.write_messages(conn, record).await.map_err(failed)
    }

    /// Writes what `record` published, many messages to an INSERT.
    async fn write_messages(&self, conn: &mut Conn, record: &Record) -> Result<(), Failure> {
        for rows in chunks(&record.messages) {
            let (insert, params) = self.outbox_insert(record, rows);
            conn.run(&insert, params, Want::Affected).await?;
        }
        Ok(())
    }

    /// PostgreSQL, a record without messages: its inbox row as one statement with its values
    /// written in (each dollar-quoted under a tag it does not contain, which PostgreSQL takes
    /// literally whatever its settings), to go in the COMMIT's round trip, where parameters
    /// cannot. `None` on other backends, with messages, or for a value with a NUL (the
    /// parameter path reports that one).
    pub(super) fn inbox_literal(&self, record: &Record) -> Option<String> {
        if self.kind() != SqlKind::Postgres || !record.messages.is_empty() {
            return None;
        }
        Some(format!(
            "INSERT INTO worker_inbox (queue, message_id, handled_at) VALUES ({}, {}, {})",
            dollar_quoted(&record.queue)?,
            dollar_quoted(&record.message_id)?,
            record.handled_at_ms
        ))
    }

    /// One INSERT of `record`'s messages `rows` (numbered from 1 in the record).
    fn outbox_insert(&self, record: &Record, rows: Range<usize>) -> (String, Vec<Value>) {
        let values = (0..rows.len())
            .map(|r| {
                let row = (1..=7).map(|c| self.p(r * 7 + c)).collect::<Vec<_>>();
                format!("({})", row.join(", "))
            })
            .collect::<Vec<_>>()
            .join(", ");
        let insert = format!(
            "INSERT INTO worker_outbox (queue, message_id, n, exchange, routing_key, properties, \
             body) VALUES {values}"
        );
        let mut params = Vec::with_capacity(rows.len() * 7);
        for i in rows {
            let m = &record.messages[i];
            params.extend([
                Value::Text(record.queue.clone()),
                Value::Text(record.message_id.clone()),
                Value::Int(i as i64 + 1),
                Value::Text(m.exchange.clone()),
                Value::Text(m.routing_key.clone()),
                Value::Text(m.properties.clone()),
                Value::Bytes(m.body.clone()),
            ]);
        }
        (insert, params)
    }
}

/// `text` as a PostgreSQL dollar-quoted literal, `$wh$...$wh$` with a tag (`wh`, `wh1`, ...)
/// that `text` does not contain; `None` for text with a NUL, which no SQL text can carry.
pub(super) fn dollar_quoted(text: &str) -> Option<String> {
    if text.contains('\0') {
        return None;
    }
    let tag = (0..)
        .map(|n: u32| {
            if n == 0 {
                "wh".to_string()
            } else {
                format!("wh{n}")
            }
        })
        .find(|tag| !text.contains(&format!("${tag}")))?;
    Some(format!("${tag}${text}${tag}$"))
}

/// `messages` cut into runs of at most [`ROWS_PER_INSERT`] rows and [`BYTES_PER_INSERT`] bytes
/// (or one larger message), one INSERT each.
fn chunks(messages: &[Outgoing]) -> Vec<Range<usize>> {
    let size =
        |m: &Outgoing| m.exchange.len() + m.routing_key.len() + m.properties.len() + m.body.len();
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (i, m) in messages.iter().enumerate() {
        let full = i - start == ROWS_PER_INSERT || bytes + size(m) > BYTES_PER_INSERT;
        if i > start && full {
            out.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += size(m);
    }
    if start < messages.len() {
        out.push(start..messages.len());
    }
    out
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
            Tx::Idle => self.open(&db, deadline).await.map_err(described)?,
            Tx::Lost(error) => {
                return Err(failed(format!(
                    "[sql.{}] {}",
                    db.recorder.store(),
                    error::message(&error)
                )));
            }
            tx => tx,
        };
        let claimed = std::mem::take(&mut self.claimed);
        match tx {
            Tx::Member(mut member) => {
                let written = record_by(&db, member.conn(), record, false, deadline).await;
                let kept = written.is_ok();
                let left = member.leave(kept).await;
                written?;
                left.map_err(|e| failed(e.to_string()))
            }
            Tx::Open(conn) if !claimed && db.inbox_literal(record).is_some() => {
                let statement = db.inbox_literal(record).unwrap_or_default();
                record_and_commit(&db, conn, &statement, deadline).await
            }
            Tx::Open(mut conn) => {
                if let Err(e) = record_by(&db, &mut conn, record, claimed, deadline).await {
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

/// PostgreSQL: writes a record without messages (its inbox row alone) and commits, in one
/// round trip where it took two; a duplicate is told apart as [`RecordError::Duplicate`].
async fn record_and_commit(
    db: &Database,
    mut conn: Conn,
    statement: &str,
    deadline: Instant,
) -> Result<(), RecordError> {
    let store = db.recorder.store();
    let deadline = deadline.max(Instant::now() + COMMIT_MIN);
    match tokio::time::timeout_at(deadline.into(), conn.commit_after(statement)).await {
        Ok(Ok(())) => {
            db.health(None);
            Ok(())
        }
        Ok(Err(e)) => {
            let failure = error::classify(&e);
            rollback(conn).await;
            if matches!(failure.error, SqlError::Constraint(_)) {
                return Err(RecordError::Duplicate);
            }
            db.health(Some(&failure));
            Err(RecordError::Failed(format!(
                "[sql.{store}] commit failed: {}",
                error::message(&failure.error)
            )))
        }
        Err(_) => Err(RecordError::Failed(format!(
            "[sql.{store}] the commit timed out"
        ))),
    }
}

/// Writes `record` into the open transaction `conn`, by `deadline`.
async fn record_by(
    db: &Database,
    conn: &mut Conn,
    record: &Record,
    claimed: bool,
    deadline: Instant,
) -> Result<(), RecordError> {
    let write = db.write_record(conn, record, claimed);
    match tokio::time::timeout_at(deadline.into(), write).await {
        Ok(written) => written,
        Err(_) => Err(RecordError::Failed(format!(
            "[sql.{}] recording the outbox timed out",
            db.recorder.store()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(body: usize) -> Outgoing {
        Outgoing {
            exchange: String::new(),
            routing_key: String::new(),
            properties: String::new(),
            body: vec![0; body],
        }
    }

    #[test]
    fn dollar_quotes_use_a_tag_the_text_lacks() {
        assert_eq!(dollar_quoted("m-1").as_deref(), Some("$wh$m-1$wh$"));
        assert_eq!(dollar_quoted("a'b").as_deref(), Some("$wh$a'b$wh$"));
        assert_eq!(
            dollar_quoted("x$wh$); DROP TABLE t; --").as_deref(),
            Some("$wh1$x$wh$); DROP TABLE t; --$wh1$")
        );
        assert_eq!(
            dollar_quoted("$wh$wh1").as_deref(),
            Some("$wh2$$wh$wh1$wh2$")
        );
        assert_eq!(dollar_quoted("a\0b"), None);
    }

    #[test]
    fn chunks_bound_rows_and_bytes() {
        assert!(chunks(&[]).is_empty());
        assert_eq!(chunks(&vec![message(10); 3]), [Range { start: 0, end: 3 }]);
        assert_eq!(
            chunks(&vec![message(10); 250]),
            [0..100, 100..200, 200..250]
        );
        let big = vec![
            message(BYTES_PER_INSERT),
            message(1),
            message(BYTES_PER_INSERT),
        ];
        assert_eq!(chunks(&big), [0..1, 1..2, 2..3]);
        let halves = vec![message(BYTES_PER_INSERT / 2); 4];
        assert_eq!(chunks(&halves), [0..2, 2..4]);
    }
}
