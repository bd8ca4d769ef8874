//! The AMQP headers the host reads and writes: their names, the attempt count a delivery's
//! headers record, the stamp on what the host republishes, and header values as text or JSON.
//! Pure data over `lapin`'s types, below everything that decides or publishes.

use std::collections::BTreeMap;
use std::time::SystemTime;

use lapin::types::{AMQPValue, FieldTable, LongString};

/// Header: the routing key the message was first published with.
pub const ORIG_ROUTING_KEY: &str = "x-orig-routing-key";
/// Header: handler calls made so far.
pub const ATTEMPTS: &str = "worker-attempts";
/// Header: the last cause of a retry or fail.
pub const ERROR: &str = "worker-error";
/// Header: `fail` or `retries-exhausted`.
pub const FAILED_REASON: &str = "worker-failed-reason";
/// Header: the plugin file that ran last.
pub const PLUGIN: &str = "worker-plugin";
/// Header: the sha256 of the plugin version that ran last.
pub const PLUGIN_SHA256: &str = "worker-plugin-sha256";
/// Header: RFC 3339 time the message was parked.
pub const FAILED_AT: &str = "worker-failed-at";

/// Why a message was parked in `<queue>@failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailedReason {
    /// The handler answered fail.
    Fail,
    /// The handler asked for a retry on its last allowed call.
    RetriesExhausted,
}

impl FailedReason {
    /// The header value.
    pub fn as_str(self) -> &'static str {
        match self {
            FailedReason::Fail => "fail",
            FailedReason::RetriesExhausted => "retries-exhausted",
        }
    }
}
/// Handler calls already made for this message before this delivery: `worker-attempts` when the
/// host wrote it, else the `x-death` counts of `queue`'s retry queues (seed-style publishers).
pub fn calls_made(headers: Option<&FieldTable>, queue: &str) -> u32 {
    let Some(headers) = headers else { return 0 };
    let table = headers.inner();
    if let Some(value) = table.get(ATTEMPTS) {
        return as_u64(value).map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX));
    }
    let Some(AMQPValue::FieldArray(deaths)) = table.get("x-death") else {
        return 0;
    };
    let retry_prefix = format!("{queue}@retry");
    let mut count: u64 = 0;
    for death in deaths.as_slice() {
        let AMQPValue::FieldTable(death) = death else {
            continue;
        };
        let death = death.inner();
        let is_retry_queue = death.get("queue").and_then(text_of).is_some_and(|q| {
            q == retry_prefix
                || q.strip_prefix(retry_prefix.as_str())
                    .is_some_and(|rest| rest.starts_with('.'))
        });
        if is_retry_queue {
            count += death.get("count").and_then(as_u64).unwrap_or(1);
        }
    }
    u32::try_from(count).unwrap_or(u32::MAX)
}
/// The routing key the message was first published with.
pub fn original_routing_key(headers: Option<&FieldTable>, routing_key: &str) -> String {
    headers
        .and_then(|h| h.inner().get(ORIG_ROUTING_KEY))
        .and_then(text_of)
        .map_or_else(|| routing_key.to_string(), str::to_string)
}

/// What the host records about the call that led to a republish.
pub struct Stamp<'a> {
    /// Routing key of the delivery, kept as `x-orig-routing-key` when not yet set.
    pub routing_key: &'a str,
    /// Calls made, this one included.
    pub attempts: u32,
    /// The cause recorded in `worker-error`.
    pub cause: &'a str,
    /// Plugin file name.
    pub plugin: &'a str,
    /// Plugin version hash.
    pub plugin_sha256: &'a str,
    /// Set when the message is parked.
    pub failed: Option<FailedReason>,
}

/// The headers of a republished message: its own, plus the host's. The broker's dead-letter
/// records are dropped: they are the broker's to write (RabbitMQ 4 ignores or chokes on
/// client-sent ones, and a malformed `x-death` could wedge a retry queue), and the count they
/// carry lives on in `worker-attempts`.
pub fn stamp_headers(original: Option<&FieldTable>, stamp: &Stamp<'_>) -> FieldTable {
    let mut headers = original
        .map(|h| {
            let own = h.inner().iter().filter(|(k, _)| !broker_owned(k.as_str()));
            FieldTable::from(
                own.map(|(k, v)| (k.clone(), v.clone()))
                    .collect::<BTreeMap<_, _>>(),
            )
        })
        .unwrap_or_default();
    if !headers.contains_key(ORIG_ROUTING_KEY) {
        headers.insert(ORIG_ROUTING_KEY.into(), text(stamp.routing_key));
    }
    headers.insert(
        ATTEMPTS.into(),
        AMQPValue::LongLongInt(i64::from(stamp.attempts)),
    );
    headers.insert(ERROR.into(), text(stamp.cause));
    headers.insert(PLUGIN.into(), text(stamp.plugin));
    headers.insert(PLUGIN_SHA256.into(), text(stamp.plugin_sha256));
    if let Some(reason) = stamp.failed {
        headers.insert(FAILED_REASON.into(), text(reason.as_str()));
        let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
        headers.insert(FAILED_AT.into(), text(&now));
    }
    headers
}

/// The broker's summaries of a message's first and last dead-lettering.
pub const DEATH_SUMMARY: [&str; 6] = [
    "x-first-death-queue",
    "x-first-death-reason",
    "x-first-death-exchange",
    "x-last-death-queue",
    "x-last-death-reason",
    "x-last-death-exchange",
];

/// Headers only the broker writes: `x-death` and the `x-first-death-*` / `x-last-death-*`
/// summaries.
pub fn broker_owned(name: &str) -> bool {
    name == "x-death" || name.starts_with("x-first-death-") || name.starts_with("x-last-death-")
}

/// A header value as a long string.
pub fn text(value: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(value.as_bytes().to_vec()))
}

/// Headers rendered as text for plugins: numbers and booleans as text, tables and arrays as JSON.
pub fn render_headers(headers: Option<&FieldTable>) -> Vec<(String, String)> {
    headers
        .map(|h| {
            h.inner()
                .iter()
                .map(|(k, v)| (k.as_str().to_string(), render(v)))
                .collect()
        })
        .unwrap_or_default()
}

/// One AMQP value as text.
pub fn render(value: &AMQPValue) -> String {
    match value {
        AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        AMQPValue::ShortString(s) => s.as_str().to_string(),
        AMQPValue::FieldArray(_) | AMQPValue::FieldTable(_) => to_json(value).to_string(),
        AMQPValue::Void => String::new(),
        other => match to_json(other) {
            serde_json::Value::String(s) => s,
            v => v.to_string(),
        },
    }
}

/// One AMQP value as JSON: numbers and booleans as such, tables and arrays nested, byte arrays
/// as hex, strings as text.
pub fn to_json(value: &AMQPValue) -> serde_json::Value {
    use serde_json::Value;
    match value {
        AMQPValue::Boolean(b) => Value::Bool(*b),
        AMQPValue::ShortShortInt(n) => Value::from(*n),
        AMQPValue::ShortShortUInt(n) => Value::from(*n),
        AMQPValue::ShortInt(n) => Value::from(*n),
        AMQPValue::ShortUInt(n) => Value::from(*n),
        AMQPValue::LongInt(n) => Value::from(*n),
        AMQPValue::LongUInt(n) => Value::from(*n),
        AMQPValue::LongLongInt(n) => Value::from(*n),
        AMQPValue::Timestamp(n) => Value::from(*n),
        AMQPValue::Float(n) => Value::from(*n),
        AMQPValue::Double(n) => Value::from(*n),
        AMQPValue::DecimalValue(d) => {
            Value::from(f64::from(d.value) / 10f64.powi(i32::from(d.scale)))
        }
        AMQPValue::ShortString(s) => Value::from(s.as_str()),
        AMQPValue::LongString(s) => Value::from(String::from_utf8_lossy(s.as_bytes())),
        AMQPValue::ByteArray(b) => Value::from(hex::encode(b.as_slice())),
        AMQPValue::FieldArray(a) => Value::Array(a.as_slice().iter().map(to_json).collect()),
        AMQPValue::FieldTable(t) => Value::Object(
            t.inner()
                .iter()
                .map(|(k, v)| (k.as_str().to_string(), to_json(v)))
                .collect(),
        ),
        AMQPValue::Void => Value::Null,
    }
}

/// A string header value (long or short string) as text.
pub fn text_of(value: &AMQPValue) -> Option<&str> {
    match value {
        AMQPValue::LongString(s) => std::str::from_utf8(s.as_bytes()).ok(),
        AMQPValue::ShortString(s) => Some(s.as_str()),
        _ => None,
    }
}

fn as_u64(value: &AMQPValue) -> Option<u64> {
    match *value {
        AMQPValue::ShortShortInt(n) => u64::try_from(n).ok(),
        AMQPValue::ShortShortUInt(n) => Some(u64::from(n)),
        AMQPValue::ShortInt(n) => u64::try_from(n).ok(),
        AMQPValue::ShortUInt(n) => Some(u64::from(n)),
        AMQPValue::LongInt(n) => u64::try_from(n).ok(),
        AMQPValue::LongUInt(n) => Some(u64::from(n)),
        AMQPValue::LongLongInt(n) => u64::try_from(n).ok(),
        AMQPValue::Timestamp(n) => Some(n),
        AMQPValue::LongString(ref s) => std::str::from_utf8(s.as_bytes()).ok()?.trim().parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_array(values: Vec<AMQPValue>) -> AMQPValue {
        AMQPValue::FieldArray(lapin::types::FieldArray::from(values))
    }

    fn death(queue: &str, count: i64) -> AMQPValue {
        let mut t = FieldTable::default();
        t.insert("queue".into(), text(queue));
        t.insert("count".into(), AMQPValue::LongLongInt(count));
        AMQPValue::FieldTable(t)
    }

    #[test]
    fn calls_made_prefers_worker_attempts() {
        let mut h = FieldTable::default();
        h.insert(ATTEMPTS.into(), AMQPValue::LongLongInt(2));
        h.insert("x-death".into(), field_array(vec![death("q@retry.1s", 5)]));
        assert_eq!(calls_made(Some(&h), "q"), 2);
    }

    #[test]
    fn calls_made_reads_x_death_of_own_retry_queues() {
        let mut h = FieldTable::default();
        h.insert(
            "x-death".into(),
            field_array(vec![
                death("q@retry.1s", 2),
                death("q@retry", 1),
                death("other@retry.1s", 7),
                death("q@retryx", 9),
            ]),
        );
        assert_eq!(calls_made(Some(&h), "q"), 3);
        assert_eq!(calls_made(None, "q"), 0);
    }

    #[test]
    fn stamp_drops_broker_owned_headers() {
        let mut h = FieldTable::default();
        h.insert("mine".into(), text("kept"));
        // Malformed on purpose: an array holding a string, not tables.
        h.insert("x-death".into(), field_array(vec![text("not a table")]));
        for name in DEATH_SUMMARY {
            h.insert(name.into(), text("q@retry.1s"));
        }
        h.insert("x-deathly".into(), text("not the broker's"));
        let stamp = Stamp {
            routing_key: "k",
            attempts: 2,
            cause: "later",
            plugin: "p.wasm",
            plugin_sha256: "abc",
            failed: None,
        };
        let out = stamp_headers(Some(&h), &stamp);
        let names: Vec<&str> = out.inner().keys().map(|k| k.as_str()).collect();
        assert!(!names.iter().any(|n| broker_owned(n)), "{names:?}");
        assert!(names.contains(&"mine") && names.contains(&"x-deathly"));
        assert_eq!(
            calls_made(Some(&h), "q"),
            0,
            "a malformed x-death counts nothing"
        );
    }

    #[test]
    fn stamp_keeps_headers_and_original_key() {
        let mut h = FieldTable::default();
        h.insert("mine".into(), text("kept"));
        let stamp = Stamp {
            routing_key: "user.created",
            attempts: 1,
            cause: "boom",
            plugin: "p.wasm",
            plugin_sha256: "abc",
            failed: None,
        };
        let out = stamp_headers(Some(&h), &stamp);
        let rendered: std::collections::BTreeMap<_, _> =
            render_headers(Some(&out)).into_iter().collect();
        assert_eq!(rendered["mine"], "kept");
        assert_eq!(rendered[ORIG_ROUTING_KEY], "user.created");
        assert_eq!(rendered[ATTEMPTS], "1");
        assert!(!rendered.contains_key(FAILED_AT));

        // A second hop keeps the first key.
        let again = Stamp {
            routing_key: "q",
            attempts: 2,
            failed: Some(FailedReason::RetriesExhausted),
            ..stamp
        };
        let out = stamp_headers(Some(&out), &again);
        let rendered: std::collections::BTreeMap<_, _> =
            render_headers(Some(&out)).into_iter().collect();
        assert_eq!(rendered[ORIG_ROUTING_KEY], "user.created");
        assert_eq!(rendered[FAILED_REASON], "retries-exhausted");
        assert!(rendered[FAILED_AT].ends_with('Z'));
    }
}
