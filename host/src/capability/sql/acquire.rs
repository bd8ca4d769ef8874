//! Taking a connection from a database's pool and starting it in the same round trip:
//! a transaction begun, `SELECT 1` answered, or the outbox's claim made. A pooled connection
//! the server closed since (restart, idle limit) fails there, before anything happened on it,
//! and the next one is tried.

use std::time::{Duration, Instant};

use tokio::time::timeout_at;

use super::Database;
use super::backend::Conn;
use super::error::{Failure, classify};

/// What a fresh connection does first.
#[derive(Clone, Copy)]
pub(super) enum First<'a> {
    Begin,
    /// A transaction that only reads.
    Read,
    Ping,
    /// A transaction begun with this statement in BEGIN's round trip, its statements limited
    /// to the duration (the outbox's claim, on PostgreSQL).
    Claim(&'a str, Duration),
}

impl Database {
    /// A connection that has begun a transaction or answered `SELECT 1`.
    pub(super) async fn connected(
        &self,
        deadline: Instant,
        first: First<'_>,
    ) -> Result<Conn, Failure> {
        self.started(deadline, first).await.map(|(conn, _)| conn)
    }

    /// A connection that has done `first`, and whether that returned a row (only a claim can
    /// return none); stale pooled connections are replaced, up to a pool's worth.
    pub(super) async fn started(
        &self,
        deadline: Instant,
        first: First<'_>,
    ) -> Result<(Conn, bool), Failure> {
        // Boxed: taking and starting a connection goes through sqlx's futures, kilobytes that
        // every future awaiting this one would carry (and copy each time it moves) otherwise,
        // though a SQLite message's turn rarely takes this way (once per group).
        let attempt = Box::pin(async {
            let mut stale = 0;
            loop {
                let mut conn = self.pool.acquire().await.map_err(|e| classify(&e))?;
                let remaining = deadline.saturating_duration_since(Instant::now());
                let started = match first {
                    First::Begin => conn.begin(remaining, true).await.map(|()| true),
                    First::Read => conn.begin(remaining, false).await.map(|()| true),
                    First::Ping => conn.ping().await.map(|()| true),
                    First::Claim(insert, limit) => conn.begin_with(limit, insert).await,
                };
                match started {
                    Ok(row) => return Ok((conn, row)),
                    Err(e) => {
                        let failure = classify(&e);
                        if !failure.lost || stale >= self.max_connections {
                            return Err(failure.lost());
                        }
                        stale += 1;
                    }
                }
            }
        });
        match timeout_at(deadline.into(), attempt).await {
            Ok(result) => result,
            // Said to be down: a server that refuses connections keeps the pool retrying until
            // here, while a busy pool is worth reporting as well.
            Err(_) => Err(Failure::unavailable(match first {
                First::Claim(..) => {
                    "the outbox's claim did not finish in time: the database did not answer, \
                     the pool was busy or another delivery of the message held it"
                }
                _ => {
                    "no connection within the handler's time: the database did not answer or \
                     the pool was busy"
                }
            })),
        }
    }
}
