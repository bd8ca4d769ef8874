//! The depths the overview shows: messages ready and consumers of each subscription's queue, its
//! retry queues and its failed queue, read by passive declares over one broker connection of
//! its own. They are read every `READ_EVERY` while someone looks at the overview (an API
//! request within `IDLE`), never more often whatever the number of pages open, each round
//! within `BUDGET`; the connection is closed when nobody looks. A broker that cannot be reached
//! is a result like any other, retried after `RETRY_AFTER`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lapin::{Channel, Connection};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

/// How often depths are read while the overview is open.
const READ_EVERY: Duration = Duration::from_secs(5);
/// After this long without a request, reading stops and the connection is closed.
const IDLE: Duration = Duration::from_secs(60);
/// The longest one round of reads may take, connecting included.
const BUDGET: Duration = Duration::from_secs(5);
/// The longest one passive declare may take.
const ONE_READ: Duration = Duration::from_secs(2);
/// After a broker that could not be reached, the wait before trying again.
const RETRY_AFTER: Duration = Duration::from_secs(15);

/// One queue as the broker sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Depth {
    Read {
        ready: u32,
        consumers: u32,
    },
    /// The broker says the queue does not exist.
    Missing,
    /// Not read within the round's time.
    Unknown,
}

/// One round of reads: when, and each queue's depth or why none could be read.
#[derive(Debug, Clone)]
pub(super) struct Round {
    pub at: Instant,
    pub depths: Result<BTreeMap<String, Depth>, String>,
}

/// The latest round, and who asks for the next.
pub(super) struct Depths {
    queues: Vec<String>,
    broker: Vec<String>,
    latest: watch::Sender<Option<Round>>,
    wanted: Mutex<Option<Instant>>,
    wake: Notify,
}

impl Depths {
    /// `queues`: every queue to read, in order; `broker`: the broker URLs.
    pub(super) fn new(queues: Vec<String>, broker: Vec<String>) -> Depths {
        Depths {
            queues,
            broker,
            latest: watch::Sender::new(None),
            wanted: Mutex::new(None),
            wake: Notify::new(),
        }
    }

    /// The latest round, waiting up to `wait` for a first or fresh one when the one there is
    /// older than the next round should be (a failed one waits `RETRY_AFTER`); starts the
    /// reads if they were idle.
    pub(super) async fn latest(&self, wait: Duration) -> Option<Round> {
        *self.wanted.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        let mut rx = self.latest.subscribe();
        let due = |r: &Round| match r.depths {
            Ok(_) => READ_EVERY * 2,
            Err(_) => RETRY_AFTER + READ_EVERY,
        };
        let stale = rx
            .borrow_and_update()
            .as_ref()
            .is_none_or(|r| r.at.elapsed() > due(r));
        if stale {
            self.wake.notify_one();
            let _ = tokio::time::timeout(wait, rx.changed()).await;
        }
        rx.borrow().clone()
    }

    fn wanted(&self) -> bool {
        let wanted = *self.wanted.lock().unwrap_or_else(|e| e.into_inner());
        wanted.is_some_and(|at| at.elapsed() < IDLE)
    }

    /// Reads while wanted, until `cancel`; closes its connection when idle and at the end.
    pub(super) async fn run(&self, cancel: CancellationToken) {
        let mut conn: Option<Connection> = None;
        loop {
            let pause = if self.wanted() {
                let round = tokio::select! {
                    _ = cancel.cancelled() => break,
                    round = tokio::time::timeout(BUDGET, self.round(&mut conn)) => round,
                };
                let round = round.unwrap_or_else(|_| Err("no answer from RabbitMQ in time".into()));
                let failed = round.is_err();
                if failed {
                    conn = None;
                }
                self.latest.send_replace(Some(Round {
                    at: Instant::now(),
                    depths: round,
                }));
                if failed { RETRY_AFTER } else { READ_EVERY }
            } else {
                close(conn.take()).await;
                IDLE
            };
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(pause) => {}
            }
        }
        close(conn).await;
    }

    /// One round over `conn`, connecting first when there is none or it died.
    async fn round(
        &self,
        conn: &mut Option<Connection>,
    ) -> Result<BTreeMap<String, Depth>, String> {
        if !conn.as_ref().is_some_and(|c| c.status().connected()) {
            let name = "worker-host console overview";
            let fresh = crate::broker::connect_once(&self.broker, name).await;
            *conn = Some(fresh.map_err(|e| e.to_string())?);
        }
        let Some(conn) = conn.as_ref() else {
            return Err("no connection".into());
        };
        let deadline = Instant::now() + BUDGET;
        let mut out: BTreeMap<String, Depth> = BTreeMap::new();
        let mut channel: Option<Channel> = None;
        for queue in &self.queues {
            if Instant::now() >= deadline {
                out.insert(queue.clone(), Depth::Unknown);
                continue;
            }
            let depth = read(conn, &mut channel, queue).await?;
            out.insert(queue.clone(), depth);
        }
        if let Some(channel) = channel {
            let _ = channel.close(200, "read".into()).await;
        }
        Ok(out)
    }
}

/// One passive declare on `channel` (opened when needed; a missing queue closes it).
async fn read(
    conn: &Connection,
    channel: &mut Option<Channel>,
    queue: &str,
) -> Result<Depth, String> {
    let open = match channel.take() {
        Some(c) if c.status().connected() => c,
        _ => conn
            .create_channel()
            .await
            .map_err(|e| format!("opening a channel: {e}"))?,
    };
    match tokio::time::timeout(ONE_READ, crate::broker::queue_state(&open, queue)).await {
        Ok(Ok(Some(q))) => {
            *channel = Some(open);
            Ok(Depth::Read {
                ready: q.message_count(),
                consumers: q.consumer_count(),
            })
        }
        Ok(Ok(None)) => Ok(Depth::Missing),
        Ok(Err(err)) => Err(format!("reading the depth of {queue}: {err}")),
        Err(_) => Ok(Depth::Unknown),
    }
}

async fn close(conn: Option<Connection>) {
    if let Some(conn) = conn {
        let _ = tokio::time::timeout(Duration::from_secs(1), conn.close(200, "idle".into())).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn a_broker_that_cannot_be_reached_is_a_round_that_says_so() {
        let queues = vec!["q".to_string(), "q@failed".to_string()];
        let depths = Arc::new(Depths::new(queues, vec!["amqp://127.0.0.1:1".into()]));
        let cancel = CancellationToken::new();
        let task = tokio::spawn({
            let (depths, cancel) = (depths.clone(), cancel.clone());
            async move { depths.run(cancel).await }
        });
        let round = depths.latest(BUDGET + Duration::from_secs(1)).await;
        let why = round.expect("a round").depths.expect_err("no broker there");
        assert!(why.contains("127.0.0.1:1"), "{why}");
        cancel.cancel();
        tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .expect("stops on cancel")
            .expect("no panic");
    }
}
