//! The publish stage: what a verdict sends, confirmed before the ack. On ok, the plugin's
//! publishes (target exchanges checked first, so a missing one is blamed on its message alone;
//! then all sent at once on the shared confirm channel; with the outbox each carries its
//! `<input id>:<n>` message id and is marked sent once confirmed); on retry or fail, the
//! message itself, stamped, to the retry or failed exchange (or through the delay levels when
//! the handler asked for a delay).
//!
//! Blame stays with the message that earned it: a plugin publish to a missing exchange is
//! found by a check before publishing (see `broker::Publisher`), and that message alone is
//! retried with the broker's reason; the channel the other messages share stays open.

use std::time::Duration;

use futures_util::future::join_all;
use lapin::{BasicProperties, Channel};
use tokio_util::sync::CancellationToken;

use super::delivery::Received;
use super::pipeline::Verdict;
use super::{Link, Subscriber};
use crate::broker::{self, PERSISTENT, PublishError};
use crate::delay::Delayer;
use crate::headers::{self, Stamp};
use crate::outbox::{Failpoint, Outbound};
use crate::outcome::{self, Decision, FailedReason};
use crate::plugin::{Input, Plugin};

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
    /// Runs the outbox's sweeper (publishing what a crash left unsent) until `cancel`.
    pub(super) async fn sweep(self: std::sync::Arc<Self>, link: Link, cancel: CancellationToken) {
        let Some(outbox) = &self.outbox else {
            return;
        };
        let send = |correlation: Option<String>, list: Vec<Outbound>| {
            let (this, link) = (&self, &link);
            async move {
                let sent = this
                    .send_publishes(link, correlation.as_deref(), &list)
                    .await;
                (list, sent)
            }
        };
        outbox.sweep(send, cancel).await;
    }
}

impl Subscriber {
    /// The publish stage: sends what the verdict needs, confirmed; returns the decision that
    /// was carried out (an ok whose publish the broker refused becomes a retry).
    pub(super) async fn publish(
        &self,
        verdict: Verdict,
        input: &Input,
        received: &Received,
        plugin: &Plugin,
        link: &Link,
    ) -> Result<Decision, PublishError> {
        let Verdict {
            decision,
            outbound: publishes,
            correlation,
            ..
        } = verdict;
        let decision = match decision {
            Decision::Ack => {
                match (self.send_publishes(link, correlation.as_deref(), &publishes)).await {
                    Ok(()) => {
                        if let (Some(outbox), Some(id)) = (&self.outbox, self.outbox_id(input)) {
                            Failpoint::AfterPublish.hit();
                            outbox.sent(id, &publishes).await;
                            Failpoint::AfterMark.hit();
                        }
                        return Ok(Decision::Ack);
                    }
                    Err(Blame::Broker(err)) => return Err(err),
                    Err(Blame::Message(cause)) => {
                        outcome::retry_or_park(cause, input.meta.attempt, self.sub.max_retries)
                    }
                }
            }
            other => other,
        };
        let (exchange, key, cause, failed) = match &decision {
            Decision::Ack => return Ok(Decision::Ack),
            Decision::Retry {
                retry,
                cause,
                after,
            } => {
                if let (Some(after), Some(delayer)) = (after, &self.delayer) {
                    let props = republished(
                        &received.properties,
                        &self.stamp(received, cause, plugin, None),
                    );
                    self.retry_after(link, delayer, *after, &input.body, props)
                        .await?;
                    return Ok(decision);
                }
                let delay = self.sub.delay_for_retry(*retry);
                let key = self.sub.retry_queue_name(delay);
                (self.exchanges.retry.as_str(), key, cause, None)
            }
            Decision::Park { reason, cause } => {
                let key = self.sub.queue.clone();
                (self.exchanges.failed.as_str(), key, cause, Some(*reason))
            }
        };
        let props = republished(
            &received.properties,
            &self.stamp(received, cause, plugin, failed),
        );
        republish(link, exchange, &key, &input.body, props).await?;
        Ok(decision)
    }

    fn stamp<'a>(
        &self,
        received: &'a Received,
        cause: &'a str,
        plugin: &'a Plugin,
        failed: Option<FailedReason>,
    ) -> Stamp<'a> {
        Stamp {
            routing_key: &received.routing_key,
            attempts: received.calls,
            cause,
            plugin: plugin.name(),
            plugin_sha256: plugin.sha256(),
            failed,
        }
    }

    /// A retry the handler asked to come back after `after`: through the delay levels straight
    /// to this queue (by the default exchange), so any delay works without a retry queue.
    async fn retry_after(
        &self,
        link: &Link,
        delayer: &Delayer,
        after: Duration,
        body: &[u8],
        props: BasicProperties,
    ) -> Result<(), PublishError> {
        let channel = link.publisher.confirm_channel().await?;
        let after = after.min(delayer.max_delay());
        delayer
            .publish(&channel, "", &self.sub.queue, body, props, after)
            .await
            .map_err(|err| err.into_publish(""))
    }
}

/// Republishes to one of our own exchanges, mandatory. When it comes back unroutable or the
/// exchange is missing, the topology is declared again and the publish tried once more; when
/// another publish closed the shared channel, it is tried once more on a fresh one.
async fn republish(
    link: &Link,
    exchange: &str,
    key: &str,
    body: &[u8],
    props: BasicProperties,
) -> Result<(), PublishError> {
    let mut tried_again = false;
    loop {
        let channel = link.publisher.confirm_channel().await?;
        let err =
            match broker::publish_confirmed(&channel, exchange, key, body, props.clone(), true)
                .await
            {
                Ok(()) => return Ok(()),
                Err(err) => err,
            };
        let missing = match &err {
            PublishError::Unroutable { .. } => true,
            PublishError::ChannelClosed { .. } => err.is_not_found(),
            _ => return Err(err),
        };
        if tried_again {
            return Err(err);
        }
        tried_again = true;
        if missing {
            // A failed repair shows in the second publish's error.
            let _ = link.keeper.repair(&err.to_string()).await;
        }
    }
}

/// The original properties with the host's headers, persistent.
fn republished(properties: &BasicProperties, stamp: &Stamp<'_>) -> BasicProperties {
    let headers = headers::stamp_headers(properties.headers().as_ref(), stamp);
    properties
        .clone()
        .with_headers(headers)
        .with_delivery_mode(PERSISTENT)
}
