//! A publish as the outbox keeps it: exchange, routing key and body beside its properties as
//! JSON (content type, headers, delay, the correlation id it carries).

use std::time::Duration;

use crate::capability::sql::outbox::Outgoing;
use crate::plugin::Publish;

/// The properties column.
#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    content_type: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    headers: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    delay_ms: Option<u64>,
    /// The input's correlation id (else its message id), as a direct publish carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    correlation_id: Option<String>,
}

/// A stored message whose properties cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("outbox: unreadable properties of a stored message: {0}")]
pub(crate) struct Unreadable(serde_json::Error);

/// `publish` as the outbox records it, carrying `correlation_id`.
pub(super) fn to_outgoing(publish: &Publish, correlation_id: &str) -> Outgoing {
    let stored = Stored {
        content_type: publish.content_type.clone(),
        headers: publish.headers.clone(),
        delay_ms: publish.delay.map(|d| d.as_millis() as u64),
        correlation_id: Some(correlation_id.to_string()),
    };
    Outgoing {
        exchange: publish.exchange.clone(),
        routing_key: publish.routing_key.clone(),
        // Strings and numbers only: serializing cannot fail.
        properties: serde_json::to_string(&stored).unwrap_or_default(),
        body: publish.body.clone(),
    }
}

/// A publish read back from the outbox, and the correlation id it carries.
pub(super) fn from_outgoing(o: Outgoing) -> Result<(Publish, Option<String>), Unreadable> {
    let stored: Stored = serde_json::from_str(&o.properties).map_err(Unreadable)?;
    let publish = Publish {
        exchange: o.exchange,
        routing_key: o.routing_key,
        body: o.body,
        delay: stored.delay_ms.map(Duration::from_millis),
        content_type: stored.content_type,
        headers: stored.headers,
    };
    Ok((publish, stored.correlation_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_publish_reads_back_as_it_was_stored() {
        let publish = Publish {
            exchange: "x".into(),
            routing_key: "k".into(),
            body: b"b".to_vec(),
            delay: Some(Duration::from_millis(1500)),
            content_type: Some("text/plain".into()),
            headers: vec![("h".into(), "v".into())],
        };
        let (back, correlation) = from_outgoing(to_outgoing(&publish, "c")).expect("readable");
        assert_eq!(correlation.as_deref(), Some("c"));
        assert_eq!(back.exchange, "x");
        assert_eq!(back.delay, publish.delay);
        assert_eq!(back.headers, publish.headers);
    }
}
