//! The sweeper: publishes what a crash left unsent and prunes old records, every
//! [`SWEEP_EVERY`]; and the check every stored message passes again before it goes out.

use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::stored::{Unreadable, from_outgoing};
use super::{Outbound, Outbox, Store, now_ms, publish_id};
use crate::capability::sql::outbox::Unsent;
use crate::plugin::Pending;

/// How often the sweeper looks for unsent messages and old records.
const SWEEP_EVERY: Duration = Duration::from_secs(30);
/// A record this old whose messages are still unsent was left by a crash (or a host that
/// lost its broker); younger ones may be on their way from a handler now.
const UNSENT_AFTER: Duration = Duration::from_secs(60);
/// Rows read or deleted per statement, so no sweep holds a long transaction.
const BATCH: u32 = 200;

impl<S: Store> Outbox<S> {
    /// Sweeps until `cancel`; `send` publishes a list (confirmed) with its correlation id.
    /// The first pass takes everything recorded before this outbox was made.
    pub(crate) async fn sweep<F, Fut, E>(&self, send: F, cancel: CancellationToken)
    where
        F: Fn(Option<String>, Vec<Outbound>) -> Fut,
        Fut: Future<Output = (Vec<Outbound>, Result<(), E>)>,
        E: Display,
    {
        let mut before = self.started_ms;
        loop {
            self.sweep_once(&send, before).await;
            before = now_ms() - UNSENT_AFTER.as_millis() as i64;
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(SWEEP_EVERY) => {}
            }
        }
    }

    async fn sweep_once<F, Fut, E>(&self, send: &F, before_ms: i64)
    where
        F: Fn(Option<String>, Vec<Outbound>) -> Fut,
        Fut: Future<Output = (Vec<Outbound>, Result<(), E>)>,
        E: Display,
    {
        let queue = self.queue.as_str();
        match self.store.unsent(queue, before_ms, BATCH).await {
            Ok(rows) if !rows.is_empty() => self.resend(send, rows).await,
            Ok(_) => {}
            Err(why) => warn!(queue, "outbox sweep: {why}"),
        }
        if let Some(retention) = self.retention {
            let cutoff = SystemTime::now()
                .checked_sub(retention)
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis() as i64);
            loop {
                match self.store.prune(queue, cutoff, BATCH).await {
                    Ok(n) if n == u64::from(BATCH) => continue,
                    Ok(_) => break,
                    Err(why) => {
                        warn!(queue, "outbox pruning: {why}");
                        break;
                    }
                }
            }
        }
    }

    /// Publishes unsent messages, grouped by the input that recorded them.
    async fn resend<F, Fut, E>(&self, send: &F, rows: Vec<(String, Unsent)>)
    where
        F: Fn(Option<String>, Vec<Outbound>) -> Fut,
        Fut: Future<Output = (Vec<Outbound>, Result<(), E>)>,
        E: Display,
    {
        let queue = self.queue.as_str();
        let mut groups: Vec<(String, Vec<Unsent>)> = Vec::new();
        for (id, unsent) in rows {
            match groups.last_mut() {
                Some((last, list)) if *last == id => list.push(unsent),
                _ => groups.push((id, vec![unsent])),
            }
        }
        for (id, unsent) in groups {
            let (list, correlation) = match self.outbound(&id, unsent).await {
                Ok(found) => found,
                Err(why) => {
                    warn!(queue, message_id = %id, "outbox sweep: {why}");
                    continue;
                }
            };
            match send(correlation, list).await {
                (list, Ok(())) => {
                    info!(queue, message_id = %id, "outbox: published {} message(s) a crash left unsent", list.len());
                    self.sent(&id, &list).await;
                }
                (_, Err(why)) => {
                    warn!(queue, message_id = %id, "outbox sweep: publishing failed, tried again later: {why}")
                }
            }
        }
    }

    /// Stored messages as publishes with their ids, and the correlation id they carry. Each
    /// passes the subscription's publish policy again, as it did when the plugin published it:
    /// a row the host did not write from a call (or one the config no longer allows) is not
    /// sent, but marked sent, with a warning, so it is not tried again.
    pub(super) async fn outbound(
        &self,
        id: &str,
        unsent: Vec<Unsent>,
    ) -> Result<(Vec<Outbound>, Option<String>), Unreadable> {
        let mut correlation = None;
        let mut ids = Vec::with_capacity(unsent.len());
        let mut refused = Vec::new();
        let mut checked = Pending::default();
        for u in unsent {
            let (publish, corr) = from_outgoing(u.message)?;
            let exchange = publish.exchange.clone();
            match checked.push(&self.policy, publish) {
                Ok(()) => {
                    correlation = correlation.or(corr);
                    ids.push(Some(publish_id(id, u.n as usize)));
                }
                Err(r) => {
                    warn!(queue = %self.queue, message_id = id, exchange,
                        "outbox: a stored message is not sent: {}", r.why);
                    refused.push(u.n);
                }
            }
        }
        let list = (checked.publishes.into_iter().zip(ids))
            .map(|(publish, message_id)| Outbound {
                publish,
                message_id,
            })
            .collect();
        self.mark_sent(id, &refused).await;
        Ok((list, correlation))
    }
}
