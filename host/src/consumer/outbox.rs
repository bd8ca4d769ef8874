//! The consumer's side of the outbox (`outbox = true`): a delivery whose message id is already
//! recorded is not handed to the plugin again, only what it published and the broker never
//! confirmed goes out; recorded publishes carry message id `<input id>:<n>` and are marked
//! sent once confirmed; a sweeper publishes what a crash left unsent and prunes old records.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{Link, Subscriber};
use crate::capability::sql::Database;
use crate::capability::sql::outbox::{Unsent, now_ms};
use crate::plugin::{Input, Pending, Publish};

/// How often the sweeper looks for unsent messages and old records.
const SWEEP_EVERY: Duration = Duration::from_secs(30);
/// A record this old whose messages are still unsent was left by a crash (or a host that
/// lost its broker); younger ones may be on their way from a handler now.
const UNSENT_AFTER: Duration = Duration::from_secs(60);
/// Rows read or deleted per statement, so no sweep holds a long transaction.
const BATCH: u32 = 200;

/// A publish on its way, with the message id the outbox gives it.
pub(super) struct Outbound {
    pub publish: Publish,
    pub message_id: Option<String>,
}

/// What the outbox says of a delivery before the plugin is called.
pub(super) enum Check {
    /// No outbox, or a message without an id: call the plugin.
    Handle,
    /// Recorded already: publish what is unsent (with its correlation id), then ack.
    Duplicate(Vec<Outbound>, Option<String>),
    /// The database did not answer: the message is retried.
    Unavailable(String),
}

impl Subscriber {
    /// The database the outbox is kept in, when the subscription has one.
    fn outbox(&self) -> Option<&Arc<Database>> {
        self.granted
            .outbox
            .then_some(self.granted.sql.as_ref())
            .flatten()
    }

    /// The id the outbox records `input` under, when it records it.
    pub(super) fn outbox_id<'a>(&self, input: &'a Input) -> Option<&'a str> {
        self.outbox()?;
        input.meta.message_id.as_deref().filter(|id| !id.is_empty())
    }

    /// Whether `input` was handled before; counts messages the outbox cannot deduplicate.
    pub(super) async fn outbox_check(&self, input: &Input) -> Check {
        let Some(db) = self.outbox() else {
            return Check::Handle;
        };
        let Some(id) = self.outbox_id(input) else {
            self.metrics.without_id();
            return Check::Handle;
        };
        // Boxed, as the database calls below: their futures are large, and would otherwise make
        // every delivery's task as large, outbox or not (see `Subscriber::dispatch`).
        match Box::pin(db.handled(&self.sub.queue, id)).await {
            Ok(None) => Check::Handle,
            Ok(Some(unsent)) => {
                self.metrics.duplicate();
                match self.outbound(id, unsent).await {
                    Ok((list, correlation)) => Check::Duplicate(list, correlation),
                    Err(why) => Check::Unavailable(why),
                }
            }
            Err(why) => Check::Unavailable(format!("outbox unavailable: {why}")),
        }
    }

    /// Gives the plugin's publishes of `input` their outbox ids, `<input id>:<n>` from 1.
    pub(super) fn outbox_ids(&self, input: &Input, publishes: Vec<Publish>) -> Vec<Outbound> {
        let id = self.outbox_id(input);
        publishes
            .into_iter()
            .enumerate()
            .map(|(i, publish)| Outbound {
                publish,
                message_id: id.map(|id| format!("{id}:{}", i + 1)),
            })
            .collect()
    }

    /// Marks confirmed publishes as sent. A failure is only logged: the sweeper would publish
    /// them again under the same ids, which downstream deduplication absorbs.
    pub(super) async fn outbox_sent(&self, input_id: &str, sent: &[Outbound]) {
        let ns: Vec<u32> = sent.iter().filter_map(|o| number(input_id, o)).collect();
        self.outbox_mark_sent(input_id, &ns).await;
    }

    /// Marks messages `ns` of `input_id` as sent (or settled without sending).
    async fn outbox_mark_sent(&self, input_id: &str, ns: &[u32]) {
        let Some(db) = self.outbox() else { return };
        if let Err(why) = Box::pin(db.mark_sent(&self.sub.queue, input_id, ns)).await {
            warn!(queue = %self.sub.queue, message_id = input_id, "outbox: marking {} messages sent failed: {why}", ns.len());
        }
    }

    /// Publishes what a crash left unsent and prunes old records, every [`SWEEP_EVERY`],
    /// until `cancel`. The first pass takes everything recorded before this process started.
    pub(super) async fn sweep(self: Arc<Self>, link: Link, cancel: CancellationToken) {
        let Some(db) = self.outbox().cloned() else {
            return;
        };
        let mut before = self.started_ms;
        loop {
            self.sweep_once(&db, &link, before).await;
            before = now_ms() - UNSENT_AFTER.as_millis() as i64;
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(SWEEP_EVERY) => {}
            }
        }
    }

    async fn sweep_once(&self, db: &Database, link: &Link, before_ms: i64) {
        let queue = self.sub.queue.as_str();
        match db.unsent(queue, before_ms, BATCH).await {
            Ok(rows) if !rows.is_empty() => self.resend(link, rows).await,
            Ok(_) => {}
            Err(why) => warn!(queue, "outbox sweep: {why}"),
        }
        if let Some(retention) = self.sub.grants.outbox.as_ref().map(|o| o.retention) {
            let cutoff = SystemTime::now()
                .checked_sub(retention)
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis() as i64);
            loop {
                match db.prune(queue, cutoff, BATCH).await {
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
    async fn resend(&self, link: &Link, rows: Vec<(String, Unsent)>) {
        let queue = self.sub.queue.as_str();
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
            match self
                .send_outbound(link, correlation.as_deref(), &list)
                .await
            {
                Ok(()) => {
                    info!(queue, message_id = %id, "outbox: published {} message(s) a crash left unsent", list.len());
                    self.outbox_sent(&id, &list).await;
                }
                Err(why) => {
                    warn!(queue, message_id = %id, "outbox sweep: publishing failed, tried again later: {why}")
                }
            }
        }
    }
}

impl Subscriber {
    /// Stored messages as publishes with their ids, and the correlation id they carry. Each
    /// passes the subscription's publish policy again, as it did when the plugin published it:
    /// a row the host did not write from a call (or one the config no longer allows) is not
    /// sent, but marked sent, with a warning, so it is not tried again.
    async fn outbound(
        &self,
        id: &str,
        unsent: Vec<Unsent>,
    ) -> Result<(Vec<Outbound>, Option<String>), String> {
        let mut correlation = None;
        let mut ids = Vec::with_capacity(unsent.len());
        let mut refused = Vec::new();
        let mut checked = Pending::default();
        for u in unsent {
            let (publish, corr) = Publish::from_outgoing(u.message)?;
            let message_id = Some(format!("{id}:{}", u.n));
            let exchange = publish.exchange.clone();
            match checked.push(&self.policy, publish) {
                Ok(()) => {
                    correlation = correlation.or(corr);
                    ids.push(message_id);
                }
                Err(r) => {
                    warn!(queue = %self.sub.queue, message_id = id, exchange,
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
        self.outbox_mark_sent(id, &refused).await;
        Ok((list, correlation))
    }
}

/// `n` of an outbound message id `<input id>:<n>`.
fn number(input_id: &str, o: &Outbound) -> Option<u32> {
    o.message_id
        .as_deref()?
        .strip_prefix(input_id)?
        .strip_prefix(':')?
        .parse()
        .ok()
}
