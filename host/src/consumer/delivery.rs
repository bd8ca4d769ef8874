//! A delivery as the consumer keeps it: the plugin's input built from it, its identity, and
//! what is known about the death of the channel it came on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lapin::BasicProperties;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use super::Subscriber;
use crate::broker::Delivery;
use crate::plugin::{Input, Meta};

/// What the consumer keeps of a delivery besides the plugin's input.
pub(super) struct Received {
    pub tag: u64,
    pub routing_key: String,
    pub redelivered: bool,
    pub properties: BasicProperties,
    pub at: Instant,
    /// Handler calls made for this message, this one included (`worker-attempts`).
    pub calls: u32,
}

impl Subscriber {
    /// Splits a delivery into the plugin's input (the body moves, it is not copied) and the
    /// rest.
    pub(super) fn receive(&self, delivery: Delivery) -> (Arc<Input>, Received) {
        let at = Instant::now();
        let Delivery {
            tag,
            exchange,
            routing_key,
            redelivered,
            properties,
            body,
        } = delivery;
        let meta = Meta::of(
            &self.sub.queue,
            &exchange,
            &routing_key,
            redelivered,
            &properties,
        );
        let input = Arc::new(Input {
            body: body.into(),
            meta,
            config_json: self.config_json.clone(),
            publish: self.policy.clone(),
            granted: self.granted.clone(),
        });
        let received = Received {
            calls: input.meta.attempt,
            tag,
            routing_key,
            redelivered,
            properties,
            at,
        };
        (input, received)
    }
}

/// Who a message is across redeliveries: its message id, else a digest of its body.
pub(super) fn identity(input: &Input) -> String {
    match input.meta.message_id.as_deref() {
        Some(id) if !id.is_empty() => format!("id:{id}"),
        _ => format!("sha256:{}", hex::encode(Sha256::digest(&input.body))),
    }
}

/// Why and when the broker closed a consumer channel, recorded once by the consume loop.
pub(super) struct ChannelDeath(watch::Sender<Option<Death>>);

#[derive(Clone)]
struct Death {
    text: String,
    /// The broker's consumer timeout, when that is what closed the channel.
    consumer_timeout: Option<Duration>,
}

impl Default for ChannelDeath {
    fn default() -> Self {
        ChannelDeath(watch::Sender::new(None))
    }
}

impl ChannelDeath {
    /// Records the error that ended the consumer's deliveries: the broker's text, and
    /// whether it closed only the channel (as the consumer timeout does).
    pub(super) fn record(&self, text: String, channel_only: bool) {
        let consumer_timeout = if channel_only {
            consumer_timeout(&text)
        } else {
            None
        };
        self.0.send_replace(Some(Death {
            text,
            consumer_timeout,
        }));
    }

    /// The error that ended the deliveries, once recorded.
    pub(super) fn text(&self) -> Option<String> {
        self.0.borrow().as_ref().map(|d| d.text.clone())
    }

    /// Resolves once the channel's death is recorded.
    pub(super) async fn died(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(Option::is_some).await;
    }

    /// When the channel died of the broker's consumer timeout and a message received at
    /// `received` had been held that long, so it is the one the broker gave up on: the cause
    /// to record. The consume loop may record the death a moment after a handler saw its
    /// channel closed, so this waits briefly for it.
    pub(super) async fn timeout_cause(&self, received: Instant) -> Option<String> {
        let mut rx = self.0.subscribe();
        let wait = rx.wait_for(Option::is_some);
        let death = tokio::time::timeout(Duration::from_millis(500), wait)
            .await
            .ok()?
            .ok()?
            .clone()?;
        let limit = death.consumer_timeout?;
        (received.elapsed() >= limit).then(|| format!("consumer timeout: {}", death.text))
    }
}

/// RabbitMQ's "delivery acknowledgement on channel 1 timed out. Timeout value used: 1800000
/// ms. ..." as the timeout it names (zero when it names none).
fn consumer_timeout(text: &str) -> Option<Duration> {
    if !text.contains("timed out") {
        return None;
    }
    let ms = text
        .split_once("Timeout value used:")
        .and_then(|(_, rest)| {
            let digits: String = rest
                .trim_start()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        })
        .unwrap_or(0);
    Some(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_consumer_timeout_from_the_close_text() {
        let text = "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. \
                    Timeout value used: 2000 ms. This timeout value can be configured";
        assert_eq!(consumer_timeout(text), Some(Duration::from_secs(2)));
        assert_eq!(
            consumer_timeout("delivery acknowledgement timed out"),
            Some(Duration::ZERO)
        );
        assert_eq!(consumer_timeout("NOT_FOUND - no queue 'q'"), None);
    }
}
