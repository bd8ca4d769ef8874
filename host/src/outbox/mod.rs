//! Exactly-once effects (`outbox = true`): the id rule, what a handled message records with its
//! effects, the check before a call, marking publishes sent, the sweep of what a crash left
//! unsent, the outbox's clock and its crash points. The tables live in the subscription's own
//! database, behind [`Store`]; the plugin engine knows nothing of any of it.
//!
//! A delivery whose message id is already recorded is not handed to the plugin again: only what
//! it published and the broker never confirmed goes out. Recorded publishes carry message id
//! `<input id>:<n>` (from 1) and are marked sent once confirmed.

mod store;
mod stored;
mod sweep;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::warn;

pub(crate) use self::store::Store;
use crate::capability::Granted;
use crate::capability::sql::Database;
pub(crate) use crate::capability::sql::outbox::Claim;
use crate::capability::sql::outbox::{Claimed, Record};
use crate::failpoint;
use crate::plugin::{Input, Publish, PublishPolicy};

/// The crash points of the outbox's tests, in the order a delivery reaches them.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Failpoint {
    /// The record is built, its transaction not yet committed.
    BeforeCommit,
    /// Committed, nothing published.
    AfterCommit,
    /// Published and confirmed, not yet marked sent.
    AfterPublish,
    /// Marked sent, the input not yet acked.
    AfterMark,
}

impl Failpoint {
    /// The name `WORKER_HOST_FAILPOINT` gives it.
    fn name(self) -> &'static str {
        match self {
            Failpoint::BeforeCommit => "outbox-before-commit",
            Failpoint::AfterCommit => "outbox-after-commit",
            Failpoint::AfterPublish => "outbox-after-publish",
            Failpoint::AfterMark => "outbox-after-mark",
        }
    }

    /// Aborts the process if this is the configured crash point.
    pub(crate) fn hit(self) {
        failpoint::hit(self.name());
    }
}

/// Milliseconds since the Unix epoch, the outbox's clock.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The id a message is recorded under: its message id, when it has a non-empty one.
fn id_of(input: &Input) -> Option<&str> {
    input.meta.message_id.as_deref().filter(|id| !id.is_empty())
}

/// The message id of publish `n` (from 1) of input `id`.
fn publish_id(id: &str, n: usize) -> String {
    format!("{id}:{n}")
}

/// `n` of a publish's message id `<input id>:<n>`.
fn number(input_id: &str, message_id: &str) -> Option<u32> {
    message_id
        .strip_prefix(input_id)?
        .strip_prefix(':')?
        .parse()
        .ok()
}

/// A publish on its way, with the message id the outbox gives it.
pub(crate) struct Outbound {
    pub publish: Publish,
    pub message_id: Option<String>,
}

/// What the outbox says of a delivery before the plugin is called.
pub(crate) enum Check {
    /// Not recorded: call the plugin (keeping the claim, where one was made, until its
    /// effects are finished).
    Handle(Option<Claim>),
    /// A message without an id: call the plugin, though it cannot be deduplicated.
    WithoutId,
    /// Recorded already: publish what is unsent (with its correlation id), then ack.
    Duplicate(Vec<Outbound>, Option<String>),
    /// The database did not answer: the message is retried.
    Unavailable(String),
}

/// One subscription's outbox, in its database `S`.
pub(crate) struct Outbox<S = Database> {
    store: Arc<S>,
    queue: String,
    /// The subscription's publish policy: stored messages pass it again before they go out.
    policy: Arc<PublishPolicy>,
    /// How long handled records are kept.
    retention: Option<Duration>,
    /// When this outbox was made: records older than this that are still unsent were left by
    /// an earlier process.
    started_ms: i64,
}

impl Outbox {
    /// The outbox of a subscription granted `granted`, when it keeps one.
    pub(crate) fn of(
        granted: &Granted,
        queue: &str,
        policy: Arc<PublishPolicy>,
        retention: Option<Duration>,
    ) -> Option<Outbox> {
        let db = granted.outbox.then_some(granted.sql.as_ref()).flatten()?;
        Some(Outbox::new(db.clone(), queue, policy, retention))
    }
}

impl<S: Store> Outbox<S> {
    pub(crate) fn new(
        store: Arc<S>,
        queue: &str,
        policy: Arc<PublishPolicy>,
        retention: Option<Duration>,
    ) -> Outbox<S> {
        Outbox {
            store,
            queue: queue.to_string(),
            policy,
            retention,
            started_ms: now_ms(),
        }
    }

    /// The id this outbox records `input` under, when it records it.
    pub(crate) fn id<'a>(&self, input: &'a Input) -> Option<&'a str> {
        id_of(input)
    }

    /// Whether `input` was handled before, claiming it if not; `timeout` is the handler's.
    pub(crate) async fn check(&self, input: &Input, timeout: Duration) -> Check {
        let Some(id) = id_of(input) else {
            return Check::WithoutId;
        };
        // Boxed, as the database calls below: their futures are large, and would otherwise make
        // every delivery's task as large, outbox or not.
        match Box::pin(self.store.claim(&self.queue, id, now_ms(), timeout)).await {
            Ok(Claimed::Free(claim)) => Check::Handle(claim),
            Ok(Claimed::Handled(unsent)) => match self.outbound(id, unsent).await {
                Ok((list, correlation)) => Check::Duplicate(list, correlation),
                Err(why) => Check::Unavailable(why.to_string()),
            },
            Err(why) => Check::Unavailable(format!("outbox unavailable: {why}")),
        }
    }

    /// What a handled `input` records with its effects, when it has an id: the message, and
    /// what it published (carrying the input's correlation id, else its message id).
    pub(crate) fn record(&self, input: &Input, publishes: &[Publish]) -> Option<Record> {
        let id = id_of(input)?;
        let correlation = input.meta.correlation_id.as_deref().unwrap_or(id);
        Some(Record {
            queue: self.queue.clone(),
            message_id: id.to_string(),
            handled_at_ms: now_ms(),
            messages: publishes
                .iter()
                .map(|p| stored::to_outgoing(p, correlation))
                .collect(),
        })
    }

    /// Marks confirmed publishes of `input_id` as sent. A failure is only logged: the sweeper
    /// would publish them again under the same ids, which downstream deduplication absorbs.
    pub(crate) async fn sent(&self, input_id: &str, sent: &[Outbound]) {
        let ns: Vec<u32> = sent
            .iter()
            .filter_map(|o| number(input_id, o.message_id.as_deref()?))
            .collect();
        self.mark_sent(input_id, &ns).await;
    }

    /// Marks messages `ns` of `input_id` as sent (or settled without sending).
    async fn mark_sent(&self, input_id: &str, ns: &[u32]) {
        let marked = Box::pin(self.store.mark_sent(&self.queue, input_id, ns, now_ms())).await;
        if let Err(why) = marked {
            warn!(queue = %self.queue, message_id = input_id, "outbox: marking {} messages sent failed: {why}", ns.len());
        }
    }
}

/// A call's publishes with the outbox ids of its input `id` (`<id>:<n>` from 1; none without
/// an outbox id).
pub(crate) fn with_ids(id: Option<&str>, publishes: Vec<Publish>) -> Vec<Outbound> {
    publishes
        .into_iter()
        .enumerate()
        .map(|(i, publish)| Outbound {
            publish,
            message_id: id.map(|id| publish_id(id, i + 1)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_ids_count_from_one_and_read_back() {
        assert_eq!(publish_id("m", 1), "m:1");
        assert_eq!(number("m", "m:12"), Some(12));
        assert_eq!(number("m", "mx:1"), None);
        assert_eq!(number("m:1", "m:1:3"), Some(3));
    }

    fn input(message_id: &str) -> Input {
        Input {
            body: Default::default(),
            meta: crate::plugin::Meta {
                message_id: Some(message_id.into()),
                ..Default::default()
            },
            config_json: "{}".into(),
            publish: Default::default(),
            granted: Default::default(),
        }
    }

    #[test]
    fn an_empty_message_id_is_no_id() {
        assert_eq!(id_of(&input("")), None);
        assert_eq!(id_of(&input("a")), Some("a"));
    }
}
