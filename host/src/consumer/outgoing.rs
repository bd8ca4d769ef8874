//! A plugin's publishes on their way out: target exchanges checked first (so a missing one is
//! blamed on its message alone), then all sent at once on the shared confirm channel and every
//! confirm awaited; with the outbox, each carries its `<input id>:<n>` message id.

use futures_util::future::join_all;
use lapin::{BasicProperties, Channel};

use super::outbox::Outbound;
use super::{Link, Subscriber};
use crate::broker::{self, PERSISTENT, PublishError};
use crate::headers;
use crate::plugin::Input;

/// Why a message's plugin publishes did not go out.
#[derive(Debug, thiserror::Error)]
pub(super) enum Blame {
    /// The broker refused this message's own publish: the message is retried with this cause.
    #[error("{0}")]
    Message(String),
    /// The broker could not take them now: the message is requeued.
    #[error(transparent)]
    Broker(PublishError),
}

impl Subscriber {
    /// Publishes what the plugin buffered, all at once, and waits for every confirm. Target
    /// exchanges are checked first, so a missing one is blamed on this message alone.
    pub(super) async fn send_publishes(
        &self,
        link: &Link,
        correlation: Option<&str>,
        publishes: &[Outbound],
    ) -> Result<(), Blame> {
        if publishes.is_empty() {
            return Ok(());
        }
        // Delayed publishes go to our own delay exchange; the mover checks their target.
        for publish in publishes
            .iter()
            .map(|o| &o.publish)
            .filter(|p| p.delay.is_none())
        {
            match link.publisher.check_exchange(&publish.exchange).await {
                Ok(()) => {}
                Err(err @ PublishError::ChannelClosed { .. }) => {
                    return Err(Blame::Message(err.to_string()));
                }
                Err(err) => return Err(Blame::Broker(err)),
            }
        }
        let shared = link
            .publisher
            .confirm_channel()
            .await
            .map_err(Blame::Broker)?;
        let sends = publishes
            .iter()
            .map(|o| self.send_one(&shared, correlation, o));
        for result in join_all(sends).await {
            if let Err(err) = result {
                // An exchange deleted since it was checked: check again on redelivery.
                if matches!(err, PublishError::ChannelClosed { .. }) {
                    link.publisher.forget_exchanges();
                }
                return Err(Blame::Broker(err));
            }
        }
        Ok(())
    }

    /// Publishes one buffered message (through the delay levels when it has a delay).
    async fn send_one(
        &self,
        channel: &Channel,
        correlation: Option<&str>,
        o: &Outbound,
    ) -> Result<(), PublishError> {
        let p = &o.publish;
        let mut props = BasicProperties::default().with_delivery_mode(PERSISTENT);
        if let Some(content_type) = &p.content_type {
            props = props.with_content_type(content_type.as_str().into());
        }
        if !p.headers.is_empty() {
            let mut headers = lapin::types::FieldTable::default();
            for (name, value) in &p.headers {
                headers.insert(name.as_str().into(), headers::text(value));
            }
            props = props.with_headers(headers);
        }
        if let Some(id) = correlation {
            props = props.with_correlation_id(id.into());
        }
        if let Some(id) = &o.message_id {
            props = props.with_message_id(id.as_str().into());
        }
        let Some(delay) = p.delay else {
            return broker::publish_confirmed(
                channel,
                &p.exchange,
                &p.routing_key,
                &p.body,
                props,
                false,
            )
            .await;
        };
        // The import refuses delays unless [delay] is configured.
        let Some(delayer) = self.delayer.as_ref() else {
            return Err(PublishError::Broken {
                exchange: p.exchange.clone(),
                text: "delayed publish without [delay]".into(),
            });
        };
        delayer
            .publish(channel, &p.exchange, &p.routing_key, &p.body, props, delay)
            .await
            .map_err(|err| err.into_publish(&p.exchange))
    }
}

/// The correlation id a plugin's publishes carry: the input's, else its message id.
pub(super) fn input_correlation(input: &Input) -> Option<String> {
    let meta = &input.meta;
    meta.correlation_id.clone().or(meta.message_id.clone())
}

impl Subscriber {
    /// Publishes `list` (the outbox sweeper's way in), confirmed.
    pub(super) async fn send_outbound(
        &self,
        link: &Link,
        correlation: Option<&str>,
        list: &[Outbound],
    ) -> Result<(), Blame> {
        self.send_publishes(link, correlation, list).await
    }
}
