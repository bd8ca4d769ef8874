//! Failure groups across queues: parked messages keyed by the fingerprint of their cause and
//! the plugin version that parked them, each group with its count, its queues, when it was
//! first and last seen, and one example.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use serde_json::Value;

use super::fingerprint::{fingerprint, id_of};
use super::list::describe_picked;
use super::parked::Parked;
use super::scan::{Covered, scan};
use super::select::Picked;
use crate::config::Config;
use crate::headers;

/// Groups one listing keeps; messages of further groups are only counted.
pub(crate) const MAX_GROUPS: usize = 1000;

/// One failure group as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Group {
    pub group: String,
    /// The cause with its varying parts masked.
    pub fingerprint: String,
    pub plugin: Option<String>,
    pub plugin_sha256: Option<String>,
    /// Messages in the scanned part of the queues.
    pub count: u64,
    /// Messages per subscription queue.
    pub queues: BTreeMap<String, u64>,
    /// Messages per `worker-failed-reason`.
    pub reasons: BTreeMap<String, u64>,
    /// The earliest and latest `worker-failed-at` among them (RFC 3339, UTC).
    pub first_seen: Option<String>,
    pub last_seen: Option<String>,
    /// The first message met, as `failed list` shows it.
    pub example: Value,
}

/// The failure groups of the scanned part of every failed queue.
#[derive(Debug, Serialize)]
pub struct Listing {
    pub groups: Vec<Group>,
    /// Messages of groups past the first 1000, counted in none.
    pub ungrouped: u64,
    /// What part of each queue the counts cover.
    pub scanned: Vec<Covered>,
}

/// Groups the first `per_queue` parked messages of every queue (each example with `preview`
/// bytes of body); nothing moves.
pub async fn groups(config: &Config, per_queue: u64, preview: usize) -> anyhow::Result<Listing> {
    let mut grouper = Grouper::default();
    let scanned = scan(config, None, per_queue, |queue, picked| {
        grouper.add(queue, picked, || describe_picked(picked, preview));
    })
    .await?;
    let ungrouped = grouper.ungrouped;
    Ok(Listing {
        groups: grouper.finish(),
        ungrouped,
        scanned,
    })
}

/// Groups being built from scanned messages.
#[derive(Default)]
pub(crate) struct Grouper {
    groups: HashMap<String, Group>,
    /// Messages of groups past `MAX_GROUPS`.
    pub(crate) ungrouped: u64,
}

impl Grouper {
    /// Counts `picked`, parked in `queue`, in its group; `example` makes the example of a new
    /// group.
    pub(crate) fn add(&mut self, queue: &str, picked: &Picked, example: impl FnOnce() -> Value) {
        let parked = &picked.parked;
        let headers = picked.message.delivery.properties.headers().as_ref();
        let at = headers
            .and_then(|h| h.inner().get(headers::FAILED_AT))
            .and_then(headers::text_of)
            .map(str::to_string);
        self.count(queue, parked, at, example);
    }

    fn count(
        &mut self,
        queue: &str,
        parked: &Parked,
        at: Option<String>,
        example: impl FnOnce() -> Value,
    ) {
        let id = id_of(parked);
        if !self.groups.contains_key(&id) {
            if self.groups.len() >= MAX_GROUPS {
                self.ungrouped += 1;
                return;
            }
            let group = Group {
                group: id.clone(),
                fingerprint: fingerprint(parked.cause.as_deref().unwrap_or_default()),
                plugin: parked.plugin.clone(),
                plugin_sha256: parked.plugin_sha256.clone(),
                count: 0,
                queues: BTreeMap::new(),
                reasons: BTreeMap::new(),
                first_seen: None,
                last_seen: None,
                example: example(),
            };
            self.groups.insert(id.clone(), group);
        }
        let Some(group) = self.groups.get_mut(&id) else {
            return;
        };
        group.count += 1;
        *group.queues.entry(queue.to_string()).or_default() += 1;
        let reason = parked.reason.clone().unwrap_or_default();
        *group.reasons.entry(reason).or_default() += 1;
        if let Some(at) = at {
            // RFC 3339 times in UTC, as the host writes them, sort as text.
            if group.first_seen.as_ref().is_none_or(|f| at < *f) {
                group.first_seen = Some(at.clone());
            }
            if group.last_seen.as_ref().is_none_or(|l| at > *l) {
                group.last_seen = Some(at);
            }
        }
    }

    /// The groups, largest first.
    pub(crate) fn finish(self) -> Vec<Group> {
        let mut groups: Vec<Group> = self.groups.into_values().collect();
        groups.sort_by(|a, b| b.count.cmp(&a.count).then(a.group.cmp(&b.group)));
        groups
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parked(cause: &str, sha: &str) -> Parked {
        Parked {
            id: "m".into(),
            reason: Some("fail".into()),
            cause: Some(cause.into()),
            plugin: Some("p.wasm".into()),
            plugin_sha256: Some(sha.into()),
        }
    }

    #[test]
    fn causes_differing_in_numbers_share_a_group_per_plugin_version() {
        let mut g = Grouper::default();
        let at = |s: &str| Some(s.to_string());
        g.count(
            "a",
            &parked("key (id=1)", "s1"),
            at("2026-01-02T00:00:00Z"),
            || json!(1),
        );
        g.count(
            "b",
            &parked("key (id=22)", "s1"),
            at("2026-01-01T00:00:00Z"),
            || json!(2),
        );
        g.count("a", &parked("key (id=3)", "s2"), None, || json!(3));
        g.count("a", &parked("timeout", "s1"), None, || json!(4));
        let groups = g.finish();
        assert_eq!(groups.len(), 3);
        let big = &groups[0];
        assert_eq!((big.count, big.fingerprint.as_str()), (2, "key (id=*)"));
        assert_eq!(
            big.queues,
            BTreeMap::from([("a".into(), 1), ("b".into(), 1)])
        );
        assert_eq!(big.first_seen.as_deref(), Some("2026-01-01T00:00:00Z"));
        assert_eq!(big.last_seen.as_deref(), Some("2026-01-02T00:00:00Z"));
        assert_eq!(big.example, json!(1), "the first message met");
        assert_eq!(big.group, id_of(&parked("key (id=99)", "s1")));
        assert_ne!(big.group, id_of(&parked("key (id=99)", "s2")));
    }
}
