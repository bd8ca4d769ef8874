//! Search over parked messages: the fields of one message a query text is found in, by its id,
//! correlation id, any header value, or text in its body; case-insensitive.

use lapin::types::FieldTable;
use serde::Serialize;
use serde_json::Value;

use super::list::describe_picked;
use super::scan::{Covered, scan};
use super::select::Picked;
use crate::config::Config;
use crate::headers;

/// What a search found.
#[derive(Debug, Serialize)]
pub struct Found {
    /// The matching messages as `failed list` shows them, each with `queue` and `found_in`.
    pub messages: Vec<Value>,
    /// Whether more matched than were returned.
    pub more: bool,
    /// What part of each queue was searched.
    pub scanned: Vec<Covered>,
}

/// Searches the first `per_queue` parked messages of `only` (every queue when `None`) for
/// `text`, returning at most `limit` of them with `preview` bytes of body; nothing moves.
pub async fn search(
    config: &Config,
    only: Option<&str>,
    text: &str,
    (per_queue, limit): (u64, usize),
    preview: usize,
) -> anyhow::Result<Found> {
    let Some(query) = Query::new(text) else {
        anyhow::bail!(super::FailedError::EmptySearch);
    };
    let mut messages = Vec::new();
    let mut more = false;
    let scanned = scan(config, only, per_queue, |queue, picked| {
        let found_in = query.found_in(picked);
        if found_in.is_empty() {
            return;
        }
        if messages.len() >= limit {
            more = true;
            return;
        }
        let mut shown = describe_picked(picked, preview);
        shown["queue"] = Value::from(queue);
        shown["found_in"] = Value::from(found_in);
        messages.push(shown);
    })
    .await?;
    Ok(Found {
        messages,
        more,
        scanned,
    })
}

/// A query, lowercased once.
pub(crate) struct Query {
    lower: String,
}

impl Query {
    /// `None` for an empty query: it would find every message.
    pub(crate) fn new(text: &str) -> Option<Query> {
        let lower = text.trim().to_lowercase();
        (!lower.is_empty()).then_some(Query { lower })
    }

    fn finds(&self, text: &str) -> bool {
        text.to_lowercase().contains(&self.lower)
    }

    /// Where the query is found in `picked`: `id`, `correlation_id`, `header:<name>` for each
    /// header, `body`; empty when nowhere.
    pub(crate) fn found_in(&self, picked: &Picked) -> Vec<String> {
        let props = &picked.message.delivery.properties;
        let mut found = Vec::new();
        if self.finds(&picked.parked.id) {
            found.push("id".to_string());
        }
        if props
            .correlation_id()
            .as_ref()
            .is_some_and(|c| self.finds(c.as_str()))
        {
            found.push("correlation_id".to_string());
        }
        found.extend(self.headers(props.headers().as_ref()));
        if self.finds(&String::from_utf8_lossy(&picked.message.delivery.data)) {
            found.push("body".to_string());
        }
        found
    }

    fn headers(&self, headers: Option<&FieldTable>) -> Vec<String> {
        headers::render_headers(headers)
            .into_iter()
            .filter(|(_, value)| self.finds(value))
            .map(|(name, _)| format!("header:{name}"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use lapin::types::FieldTable;

    use super::*;

    #[test]
    fn an_empty_query_finds_nothing_to_search_for() {
        assert!(Query::new("  ").is_none());
        assert!(Query::new("x").is_some());
    }

    #[test]
    fn headers_are_searched_case_insensitively() {
        let q = Query::new("ORDER-4711").expect("a query");
        let mut h = FieldTable::default();
        h.insert("customer".into(), headers::text("c-1"));
        h.insert("ref".into(), headers::text("see order-4711 now"));
        assert_eq!(q.headers(Some(&h)), ["header:ref"]);
        assert!(q.headers(None).is_empty());
        assert!(q.finds("Order-4711"));
    }
}
