//! Which parked messages a command acts on (`Selection`), and the walk over `<queue>@failed`
//! that hands them out while every other message stays where it is.

use std::collections::BTreeSet;

use anyhow::Context as _;
use lapin::message::BasicGetMessage;
use lapin::options::{BasicGetOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection};

use super::FailedError;
use super::parked::Parked;

/// The parked messages a command takes. Only the messages present when the command starts are
/// considered, in queue order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Every message.
    All,
    /// The first N messages.
    First(u64),
    /// The messages with one of these ids (all of them when several share an id).
    Ids(BTreeSet<String>),
    /// The messages whose `worker-error` contains this text, or whose `worker-failed-reason`
    /// is exactly this text; case-sensitive.
    Reason(String),
    /// The messages of one failure group (its id, as `groups` names it).
    Group(String),
}

impl Selection {
    /// `First(n)` with a limit, else `All`.
    pub fn limit(limit: Option<u64>) -> Selection {
        limit.map_or(Selection::All, Selection::First)
    }

    /// `Ids` from a list.
    pub fn ids<I: IntoIterator<Item = S>, S: Into<String>>(ids: I) -> Selection {
        Selection::Ids(ids.into_iter().map(Into::into).collect())
    }

    /// Whether `parked` is selected (`First` is counted by the walk, not here).
    pub(crate) fn matches(&self, parked: &Parked) -> bool {
        match self {
            Selection::All | Selection::First(_) => true,
            Selection::Ids(ids) => ids.contains(&parked.id),
            Selection::Reason(text) => {
                parked.reason.as_deref() == Some(text.as_str())
                    || parked
                        .cause
                        .as_deref()
                        .is_some_and(|c| c.contains(text.as_str()))
            }
            Selection::Group(group) => super::fingerprint::id_of(parked) == *group,
        }
    }

    /// Whether no further message can be selected after `picked` were.
    fn exhausted(&self, picked: u64) -> bool {
        matches!(self, Selection::First(n) if picked >= *n)
    }
}

/// A selected message, fetched and not yet acked.
pub(crate) struct Picked {
    /// Its id, reason and cause.
    pub(crate) parked: Parked,
    /// The message; ack it to take it out of the failed queue for good.
    pub(crate) message: BasicGetMessage,
}

/// A walk over the messages present in a failed queue when it opened. Every fetched message
/// stays unacked on the walk's channel, so those not acked go back to their places, in order,
/// when it closes; messages parked after it opened are never reached.
pub(crate) struct Walk<'s> {
    channel: Channel,
    queue: String,
    selection: &'s Selection,
    depth: u64,
    left: u64,
    picked: u64,
    seen: BTreeSet<String>,
}

impl<'s> Walk<'s> {
    /// Counts the messages in `queue` (a user error when it does not exist) and opens the walk.
    pub(crate) async fn open(
        conn: &Connection,
        queue: &str,
        selection: &'s Selection,
    ) -> anyhow::Result<Walk<'s>> {
        let left = count(conn, queue).await?;
        let channel = conn.create_channel().await.context("opening a channel")?;
        Ok(Walk {
            channel,
            queue: queue.to_string(),
            selection,
            depth: left,
            left,
            picked: 0,
            seen: BTreeSet::new(),
        })
    }

    /// The next selected message, or None when the walk has seen every message it counted.
    pub(crate) async fn next(&mut self) -> anyhow::Result<Option<Picked>> {
        while self.left > 0 && !self.selection.exhausted(self.picked) {
            let fetched = self
                .channel
                .basic_get(
                    self.queue.as_str().into(),
                    BasicGetOptions { no_ack: false },
                )
                .await
                .with_context(|| format!("fetching from {}", self.queue))?;
            // Someone else took the rest.
            let Some(message) = fetched else {
                self.left = 0;
                break;
            };
            self.left -= 1;
            let parked = Parked::of(&message.delivery);
            if self.selection.matches(&parked) {
                self.picked += 1;
                if matches!(self.selection, Selection::Ids(_)) {
                    self.seen.insert(parked.id.clone());
                }
                return Ok(Some(Picked { parked, message }));
            }
            // Not selected: dropping it leaves it unacked, so it goes back when the walk closes.
        }
        Ok(None)
    }

    /// The messages the queue held when the walk opened: all it can reach.
    pub(crate) fn depth(&self) -> u64 {
        self.depth
    }

    /// The messages the walk will look at, at most: the depth when it opened, or fewer for
    /// the first N.
    pub(crate) fn total(&self) -> u64 {
        match self.selection {
            Selection::First(n) => self.depth.min(*n),
            _ => self.depth,
        }
    }

    /// The messages looked at so far, selected or not.
    pub(crate) fn examined(&self) -> u64 {
        self.depth - self.left
    }

    /// Ids asked for that no message had (for `Ids`; empty otherwise). Complete once `next`
    /// returned None.
    pub(crate) fn missing(&self) -> Vec<String> {
        match self.selection {
            Selection::Ids(ids) => ids.difference(&self.seen).cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// Returns once the broker has handled every ack sent on this walk so far: it answers a
    /// passive declare on the same channel only after the frames before it.
    pub(crate) async fn settled(&self) -> anyhow::Result<()> {
        self.channel
            .queue_declare(self.queue.as_str().into(), passive(), FieldTable::default())
            .await
            .with_context(|| {
                format!("waiting for the broker to take the acks on {}", self.queue)
            })?;
        Ok(())
    }

    /// Closes the walk: every fetched message not acked goes back in its place.
    pub(crate) async fn close(self) {
        let _ = self.channel.close(200, "done".into()).await;
    }
}

fn passive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    }
}

/// Messages ready in `queue`, asked on a throwaway channel (a missing queue closes it).
pub(crate) async fn count(conn: &Connection, queue: &str) -> anyhow::Result<u64> {
    let channel = conn.create_channel().await.context("opening a channel")?;
    match crate::broker::queue_state(&channel, queue).await {
        Ok(Some(q)) => {
            let _ = channel.close(200, "counted".into()).await;
            Ok(u64::from(q.message_count()))
        }
        Ok(None) => Err(FailedError::Missing {
            queue: queue.to_string(),
        }
        .into()),
        Err(err) => Err(anyhow::Error::new(err).context(format!("reading the depth of {queue}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parked(id: &str, reason: Option<&str>, cause: Option<&str>) -> Parked {
        Parked {
            id: id.into(),
            reason: reason.map(Into::into),
            cause: cause.map(Into::into),
            plugin: None,
            plugin_sha256: None,
        }
    }

    #[test]
    fn ids_match_exactly() {
        let s = Selection::ids(["a", "sha256:00"]);
        assert!(s.matches(&parked("a", None, None)));
        assert!(s.matches(&parked("sha256:00", None, None)));
        assert!(!s.matches(&parked("ab", None, None)));
    }

    #[test]
    fn reason_is_a_substring_of_the_cause_or_the_exact_reason() {
        let s = Selection::Reason("timeout".into());
        assert!(s.matches(&parked(
            "a",
            Some("fail"),
            Some("timeout: still running after 8s")
        )));
        assert!(!s.matches(&parked("a", Some("fail"), Some("Timeout"))));
        assert!(!s.matches(&parked("a", None, None)));
        let s = Selection::Reason("retries-exhausted".into());
        assert!(s.matches(&parked("a", Some("retries-exhausted"), Some("later"))));
        assert!(!s.matches(&parked("a", Some("fail"), Some("later"))));
    }

    #[test]
    fn first_is_counted_by_the_walk() {
        assert!(Selection::First(2).matches(&parked("a", None, None)));
        assert!(!Selection::First(2).exhausted(1));
        assert!(Selection::First(2).exhausted(2));
        assert!(!Selection::All.exhausted(u64::MAX));
        assert_eq!(Selection::limit(None), Selection::All);
        assert_eq!(Selection::limit(Some(3)), Selection::First(3));
    }
}
