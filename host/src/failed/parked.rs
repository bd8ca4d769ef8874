//! What the `failed` commands know about one parked message: its stable id, why it was parked
//! and the last cause.

use lapin::BasicProperties;
use lapin::message::Delivery;
use lapin::types::AMQPValue;
use sha2::{Digest, Sha256};

use crate::headers;

/// Prefix of a digest id. A message id is shown as it is, so an id with this prefix names a
/// message that had no message id.
pub const DIGEST_PREFIX: &str = "sha256:";

/// Hex characters of the digest kept in an id (64 bits).
const DIGEST_HEX: usize = 16;

/// Headers quorum queues set on every redelivery (`x-delivery-count`) and, from RabbitMQ 4.0,
/// on every acquisition (`x-acquired-count`); they change on each `failed list`, so the digest
/// leaves them out.
const REDELIVERY_COUNTS: [&str; 2] = ["x-delivery-count", "x-acquired-count"];

/// One parked message as the `failed` commands see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parked {
    /// The stable id: the message id when set, else `sha256:<16 hex>` over properties and body.
    pub(crate) id: String,
    /// `worker-failed-reason`: `fail` or `retries-exhausted`.
    pub(crate) reason: Option<String>,
    /// `worker-error`: the last cause.
    pub(crate) cause: Option<String>,
    /// `worker-plugin` and `worker-plugin-sha256`: the plugin version that parked it.
    pub(crate) plugin: Option<String>,
    pub(crate) plugin_sha256: Option<String>,
}

impl Parked {
    /// Reads the id, reason and cause of a fetched message.
    pub(crate) fn of(delivery: &Delivery) -> Parked {
        let props = &delivery.properties;
        let header = |name: &str| {
            props
                .headers()
                .as_ref()
                .and_then(|h| h.inner().get(name))
                .map(headers::render)
        };
        Parked {
            id: id(props, &delivery.data),
            reason: header(headers::FAILED_REASON),
            cause: header(headers::ERROR),
            plugin: header(headers::PLUGIN),
            plugin_sha256: header(headers::PLUGIN_SHA256),
        }
    }
}

/// The id of a message: its message id when set and not empty, else a digest of it.
pub(crate) fn id(props: &BasicProperties, body: &[u8]) -> String {
    match props.message_id() {
        Some(id) if !id.as_str().is_empty() => id.as_str().to_string(),
        _ => digest(props, body),
    }
}

/// `sha256:` and the first 16 hex of SHA-256 over the properties as the broker sent them
/// (headers included, the redelivery counts left out) followed by the body. Nothing in it changes
/// when the message is fetched and put back, so it is stable across listings.
pub(crate) fn digest(props: &BasicProperties, body: &[u8]) -> String {
    let mut props = props.clone();
    if let Some(headers) = props.headers().as_ref()
        && REDELIVERY_COUNTS
            .iter()
            .any(|name| headers.contains_key(name))
    {
        let kept: std::collections::BTreeMap<_, _> = headers
            .inner()
            .iter()
            .filter(|(name, _)| !REDELIVERY_COUNTS.contains(&name.as_str()))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        props = props.with_headers(kept.into());
    }
    let mut hasher = Sha256::new();
    hasher.update(encode(&props));
    hasher.update(body);
    let hex = hex::encode(hasher.finalize());
    format!("{DIGEST_PREFIX}{}", &hex[..DIGEST_HEX])
}

/// The properties in AMQP wire form: a canonical encoding (headers are a sorted map).
fn encode(props: &BasicProperties) -> Vec<u8> {
    let write = lapin::protocol::basic::gen_properties::<Vec<u8>>(props);
    match write(Vec::new().into()) {
        Ok(done) => done.write,
        // Only over-long strings fail, and decoded properties never hold one; the debug form
        // is deterministic too.
        Err(_) => format!("{props:?}").into_bytes(),
    }
}

/// A header value as JSON: numbers as numbers, booleans as booleans, tables as objects, arrays
/// as arrays, byte arrays as lowercase hex, strings as text (invalid UTF-8 replaced by U+FFFD).
pub(crate) fn header_json(value: &AMQPValue) -> serde_json::Value {
    headers::to_json(value)
}

#[cfg(test)]
mod tests {
    use lapin::types::FieldTable;

    use super::*;

    fn props(headers: FieldTable) -> BasicProperties {
        BasicProperties::default()
            .with_content_type("text/plain".into())
            .with_headers(headers)
    }

    #[test]
    fn the_message_id_is_the_id_when_set() {
        let p = BasicProperties::default().with_message_id("m-1".into());
        assert_eq!(id(&p, b"x"), "m-1");
        let empty = BasicProperties::default().with_message_id("".into());
        assert!(id(&empty, b"x").starts_with(DIGEST_PREFIX));
    }

    #[test]
    fn headers_keep_their_json_kinds() {
        use lapin::types::{ByteArray, FieldArray};
        let mut t = FieldTable::default();
        t.insert("n".into(), AMQPValue::ShortInt(-2));
        let array = FieldArray::from(vec![AMQPValue::Boolean(false), headers::text("s")]);
        assert_eq!(
            header_json(&AMQPValue::LongLongInt(3)),
            serde_json::json!(3)
        );
        assert_eq!(
            header_json(&AMQPValue::Boolean(true)),
            serde_json::json!(true)
        );
        assert_eq!(header_json(&headers::text("x")), serde_json::json!("x"));
        let bytes = AMQPValue::ByteArray(ByteArray::from(vec![0, 255]));
        assert_eq!(header_json(&bytes), serde_json::json!("00ff"));
        let table = AMQPValue::FieldTable(t);
        assert_eq!(header_json(&table), serde_json::json!({"n": -2}));
        let array = AMQPValue::FieldArray(array);
        assert_eq!(header_json(&array), serde_json::json!([false, "s"]));
    }

    #[test]
    fn the_digest_covers_body_and_headers_but_not_the_redelivery_counts() {
        let mut h = FieldTable::default();
        h.insert("mine".into(), headers::text("a"));
        let base = digest(&props(h.clone()), b"body");
        assert_eq!(base.len(), DIGEST_PREFIX.len() + DIGEST_HEX);
        assert_eq!(base, digest(&props(h.clone()), b"body"), "stable");
        assert_ne!(base, digest(&props(h.clone()), b"other"), "body counts");

        let mut changed = h.clone();
        changed.insert("mine".into(), headers::text("b"));
        assert_ne!(base, digest(&props(changed), b"body"), "headers count");

        // RabbitMQ 3.x quorum queues add the first, 4.x both.
        for name in REDELIVERY_COUNTS {
            let mut counted = h.clone();
            counted.insert(name.into(), AMQPValue::LongLongInt(3));
            assert_eq!(base, digest(&props(counted), b"body"), "{name} ignored");
        }
    }
}
