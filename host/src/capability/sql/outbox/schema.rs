//! The outbox's tables: created or upgraded by versioned, idempotent migrations the first time
//! a process uses a database's outbox.

use std::time::Instant;

use tokio::sync::OnceCell;

use super::super::Database;
use super::super::backend::Want;
use super::{OPERATION_TIMEOUT, OutboxError, int, rows, run};
use crate::config::SqlKind;

/// Taken first in a migration's transaction on PostgreSQL, so hosts starting at once on one
/// database migrate one after the other: there two `CREATE TABLE IF NOT EXISTS` of one table
/// at once can both go ahead, and the second fails on the first one's row types. The lock
/// ends with the transaction; its key is "whoutbox" read as a big-endian integer. MySQL
/// locks a table's name for its DDL itself, and SQLite's migration holds the write lock from
/// its BEGIN.
const MIGRATION_LOCK_PG: &str = "SELECT pg_advisory_xact_lock(8604249638345797496)";

/// The migrations, in order; the schema's version is the number applied. Every statement is
/// idempotent, so a migration cut off half-way is done again whole.
fn migrations(kind: SqlKind) -> Vec<Vec<&'static str>> {
    let v1 = match kind {
        SqlKind::MySql => vec![
            "CREATE TABLE IF NOT EXISTS worker_outbox_schema (version INTEGER NOT NULL)",
            "CREATE TABLE IF NOT EXISTS worker_inbox (queue VARCHAR(255) NOT NULL, \
             message_id VARCHAR(255) NOT NULL, handled_at BIGINT NOT NULL, \
             PRIMARY KEY (queue, message_id), INDEX worker_inbox_handled (handled_at))",
            "CREATE TABLE IF NOT EXISTS worker_outbox (queue VARCHAR(255) NOT NULL, \
             message_id VARCHAR(255) NOT NULL, n INTEGER NOT NULL, \
             exchange VARCHAR(255) NOT NULL, routing_key VARCHAR(255) NOT NULL, \
             properties TEXT NOT NULL, body LONGBLOB NOT NULL, sent_at BIGINT NULL, \
             PRIMARY KEY (queue, message_id, n), INDEX worker_outbox_sent (sent_at))",
        ],
        SqlKind::Postgres | SqlKind::Sqlite => {
            let blob = if kind == SqlKind::Postgres {
                "BYTEA"
            } else {
                "BLOB"
            };
            let outbox: &'static str = if kind == SqlKind::Postgres {
                OUTBOX_TABLE_PG
            } else {
                OUTBOX_TABLE_SQLITE
            };
            debug_assert!(outbox.contains(blob));
            vec![
                "CREATE TABLE IF NOT EXISTS worker_outbox_schema (version INTEGER NOT NULL)",
                "CREATE TABLE IF NOT EXISTS worker_inbox (queue VARCHAR(255) NOT NULL, \
                 message_id VARCHAR(255) NOT NULL, handled_at BIGINT NOT NULL, \
                 PRIMARY KEY (queue, message_id))",
                "CREATE INDEX IF NOT EXISTS worker_inbox_handled ON worker_inbox (handled_at)",
                outbox,
                "CREATE INDEX IF NOT EXISTS worker_outbox_sent ON worker_outbox (sent_at)",
            ]
        }
    };
    vec![v1]
}

const OUTBOX_TABLE_PG: &str = "CREATE TABLE IF NOT EXISTS worker_outbox (\
     queue VARCHAR(255) NOT NULL, message_id VARCHAR(255) NOT NULL, n INTEGER NOT NULL, \
     exchange VARCHAR(255) NOT NULL, routing_key VARCHAR(255) NOT NULL, \
     properties TEXT NOT NULL, body BYTEA NOT NULL, sent_at BIGINT NULL, \
     PRIMARY KEY (queue, message_id, n))";
const OUTBOX_TABLE_SQLITE: &str = "CREATE TABLE IF NOT EXISTS worker_outbox (\
     queue VARCHAR(255) NOT NULL, message_id VARCHAR(255) NOT NULL, n INTEGER NOT NULL, \
     exchange VARCHAR(255) NOT NULL, routing_key VARCHAR(255) NOT NULL, \
     properties TEXT NOT NULL, body BLOB NOT NULL, sent_at BIGINT NULL, \
     PRIMARY KEY (queue, message_id, n))";

/// The schema's state in one database: migrated once per process.
#[derive(Default)]
pub(in crate::capability::sql) struct Schema(OnceCell<()>);

impl Database {
    /// Creates or upgrades the outbox tables, once per process; an error is retried next time.
    pub(crate) async fn outbox_ready(&self) -> Result<(), OutboxError> {
        self.outbox_schema
            .0
            .get_or_try_init(|| self.migrate())
            .await
            .map(drop)
    }

    async fn migrate(&self) -> Result<(), OutboxError> {
        let all = migrations(self.kind());
        let mut conn = self.begun(Instant::now() + OPERATION_TIMEOUT, true).await?;
        if self.kind() == SqlKind::Postgres {
            run(&mut conn, MIGRATION_LOCK_PG, vec![], Want::Affected).await?;
        }
        for statement in &all[0][..1] {
            run(&mut conn, statement, vec![], Want::Affected).await?;
        }
        let rows = rows(
            run(
                &mut conn,
                "SELECT MAX(version) FROM worker_outbox_schema",
                vec![],
                Want::Rows,
            )
            .await?,
        );
        let current = rows
            .first()
            .and_then(|r| r.first())
            .and_then(int)
            .unwrap_or(0)
            .max(0) as usize;
        for (i, statements) in all.iter().enumerate().skip(current) {
            for statement in statements {
                run(&mut conn, statement, vec![], Want::Affected).await?;
            }
            let insert = format!(
                "INSERT INTO worker_outbox_schema (version) VALUES ({})",
                i + 1
            );
            run(&mut conn, &insert, vec![], Want::Affected).await?;
        }
        self.commit_now(conn).await
    }
}
