//! One delivery from arrival to settlement: the checks that need no plugin (size, consumer
//! timeout strikes), the plugin call, the decision, the confirmed publishes it needs, then the
//! ack, or a requeue when the broker could not take the publishes.
//!
//! Blame stays with the message that earned it: a plugin publish to a missing exchange is
//! found by a check before publishing (see `broker::Publisher`), and that message alone is
//! retried with the broker's reason; the channel the other messages share stays open.

use std::time::Duration;

use lapin::{BasicProperties, Channel};
use tokio::sync::OwnedSemaphorePermit;
use tracing::{Instrument, Span, debug, error, warn};

use super::acks::Acks;
use super::delivery::{ChannelDeath, Received, identity};
use super::outbox::{Check, Outbound};
use super::outgoing::{Blame, input_correlation};
use super::{Link, Subscriber};
use crate::broker::{self, PERSISTENT, PublishError};
use crate::delay::Delayer;
use crate::failpoint;
use crate::headers::{self, Stamp};
use crate::metrics::Settled;
use crate::outcome::{self, Decision, FailedReason};
use crate::plugin::{Input, Plugin};
use crate::poison;
use crate::telemetry;

/// The consumer's side of one handler task.
pub(super) struct Call<'a> {
    pub link: &'a Link,
    pub acks: &'a Acks,
    /// The consumer channel the delivery came on.
    pub channel: &'a Channel,
    pub death: &'a ChannelDeath,
}

impl Subscriber {
    /// Runs one delivery through the plugin and settles it. Never fails: problems are logged
    /// and the message is left for the broker to redeliver.
    pub(super) async fn handle(
        &self,
        delivery: lapin::message::Delivery,
        call: Call<'_>,
        permit: OwnedSemaphorePermit,
    ) {
        let (input, received) = self.receive(delivery);
        let span = telemetry::delivery_span(
            &self.sub.queue,
            &received.routing_key,
            &received.properties,
            input.meta.attempt,
        );
        self.deliver(input, received, call, permit)
            .instrument(span)
            .await;
    }

    async fn deliver(
        &self,
        input: std::sync::Arc<Input>,
        mut received: Received,
        call: Call<'_>,
        permit: OwnedSemaphorePermit,
    ) {
        let plugin = self.plugin.load_full();
        let mut correlation = input_correlation(&input);
        let mut check = Check::Handle;
        let decision = self.precheck(&input, &mut received);
        if decision.is_none() {
            check = self.outbox_check(&input).await;
        }
        let (decision, publishes, elapsed) = match (decision, check) {
            (Some(decision), _) => (decision, Vec::new(), None),
            (None, Check::Duplicate(publishes, stored)) => {
                correlation = stored.or(correlation);
                (Decision::Ack, publishes, None)
            }
            (None, Check::Unavailable(why)) => {
                let decision =
                    outcome::retry_or_park(why, input.meta.attempt, self.sub.max_retries);
                (decision, Vec::new(), None)
            }
            (None, Check::Handle) => {
                let in_flight = self.metrics.call_started();
                // A call whose channel died cannot settle its message: stop it at once.
                let span = telemetry::span!(
                    "plugin",
                    otel.name = %format_args!("handle {}", plugin.name()),
                    worker.plugin = plugin.name(),
                    worker.plugin.sha256 = plugin.sha256(),
                );
                let handling = plugin.handle(input.clone(), &self.limits).instrument(span);
                let invocation = tokio::select! {
                    invocation = handling => invocation,
                    _ = call.death.died() => {
                        drop((in_flight, permit));
                        self.drop_result(&input, &received, call.death).await;
                        return;
                    }
                };
                drop(in_flight);
                invocation.emit_logs(&plugin, &self.sub.queue);
                let mut decision = outcome::decide(
                    &invocation.answer,
                    invocation.reason.as_deref(),
                    input.meta.attempt,
                    self.sub.max_retries,
                );
                if let Decision::Retry { after, .. } = &mut decision {
                    *after = invocation.retry_after;
                }
                if matches!(decision, Decision::Ack) && self.outbox_id(&input).is_some() {
                    failpoint::hit("outbox-after-commit");
                }
                let publishes = self.outbox_ids(&input, invocation.publishes);
                (decision, publishes, Some(invocation.elapsed))
            }
        };
        drop(permit);
        // A call whose channel died publishes nothing and acks nothing: the broker redelivers
        // the message, and that copy is the only one that goes on.
        if !call.channel.status().connected() {
            self.drop_result(&input, &received, call.death).await;
            return;
        }
        let settled = self
            .publish(
                decision,
                (correlation.as_deref(), publishes),
                &input,
                &received,
                &plugin,
                call.link,
            )
            .await;
        // Only plugin answers count towards pause_after; a broker that refused is not one.
        if let (Some(_), Ok(decision)) = (elapsed, &settled) {
            self.breaker.answered(matches!(decision, Decision::Ack));
        }
        self.settle(settled, &input, &received, &plugin, elapsed, &call)
            .await;
    }

    /// A decision that needs no plugin call: a delivery the client could not decode, or one
    /// over `max_message_size`, is parked untouched (no call is counted); a redelivery of a
    /// message whose call outlived the consumer timeout counts as that failed call.
    fn precheck(&self, input: &Input, received: &mut Received) -> Option<Decision> {
        let park = |cause: String| Decision::Park {
            reason: FailedReason::Fail,
            cause,
        };
        if let Some(problem) = poison::undecodable(&received.properties) {
            received.properties = poison::without_marker(&received.properties);
            received.calls = received.calls.saturating_sub(1);
            return Some(park(poison::cause(&problem)));
        }
        let size = input.body.len() as u64;
        if size > self.sub.max_message_size {
            received.calls = received.calls.saturating_sub(1);
            return Some(park(format!(
                "message of {size} bytes is larger than max_message_size ({} bytes); parked \
                 without running the plugin",
                self.sub.max_message_size
            )));
        }
        if received.redelivered && !self.strikes.is_empty() {
            let cause = self.strikes.take(&identity(input))?;
            return Some(outcome::retry_or_park(
                cause,
                input.meta.attempt,
                self.sub.max_retries,
            ));
        }
        None
    }

    /// The result of a call whose consumer channel died is dropped. If the broker gave up on
    /// this very message (consumer timeout), its redelivery will count as this failed call.
    async fn drop_result(&self, input: &Input, received: &Received, death: &ChannelDeath) {
        telemetry::outcome(&Span::current(), "dropped");
        self.metrics.dropped();
        let queue = self.sub.queue.as_str();
        let message_id = input.meta.message_id.as_deref().unwrap_or("");
        match death.timeout_cause(received.at).await {
            Some(cause) => {
                warn!(
                    queue,
                    message_id,
                    attempt = input.meta.attempt,
                    "result dropped, the call outlived the broker's consumer timeout; its \
                     redelivery counts as a failed call ({cause})"
                );
                self.strikes.add(identity(input), cause);
            }
            None => debug!(
                queue,
                message_id, "result dropped: the channel closed; the broker redelivers"
            ),
        }
    }

    /// Sends what `decision` needs, confirmed; returns the decision that was carried out (an
    /// ok whose publish the broker refused becomes a retry).
    async fn publish(
        &self,
        decision: Decision,
        (correlation, publishes): (Option<&str>, Vec<Outbound>),
        input: &Input,
        received: &Received,
        plugin: &Plugin,
        link: &Link,
    ) -> Result<Decision, PublishError> {
        let decision = match decision {
            Decision::Ack => match self.send_publishes(link, correlation, &publishes).await {
                Ok(()) => {
                    if let Some(id) = self.outbox_id(input) {
                        failpoint::hit("outbox-after-publish");
                        self.outbox_sent(id, &publishes).await;
                        failpoint::hit("outbox-after-mark");
                    }
                    return Ok(Decision::Ack);
                }
                Err(Blame::Broker(err)) => return Err(err),
                Err(Blame::Message(cause)) => {
                    outcome::retry_or_park(cause, input.meta.attempt, self.sub.max_retries)
                }
            },
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

    /// Acks once published; otherwise leaves the message for the broker to redeliver.
    async fn settle(
        &self,
        settled: Result<Decision, PublishError>,
        input: &Input,
        received: &Received,
        plugin: &Plugin,
        elapsed: Option<Duration>,
        call: &Call<'_>,
    ) {
        let queue = self.sub.queue.as_str();
        let message_id = input.meta.message_id.as_deref().unwrap_or("");
        let attempt = input.meta.attempt;
        let sha = plugin.short_sha();
        let decision = match settled {
            Ok(decision) => decision,
            Err(err) => {
                telemetry::outcome(&Span::current(), "requeued");
                self.metrics.requeued();
                error!(
                    queue,
                    message_id, attempt, "not acked, the broker will redeliver: {err}"
                );
                // Back off a little so a broken route does not spin. With the channel gone
                // there is nothing to nack: the broker requeues it.
                if call.channel.status().connected() {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                if let Err(err) = call.acks.nack_requeue(received.tag).await {
                    debug!(
                        queue,
                        message_id, "nack failed (the channel is gone): {err}"
                    );
                }
                return;
            }
        };
        // Acked soon, possibly with others (see `acks`); never before this point.
        call.acks.settled(received.tag);
        let settled = settled_as(&decision);
        telemetry::outcome(&Span::current(), settled.as_str());
        self.metrics.handled(settled, elapsed);
        match &decision {
            Decision::Ack => debug!(queue, message_id, attempt, "handled"),
            Decision::Retry {
                retry,
                cause,
                after,
            } => {
                let delay = match (after, &self.delayer) {
                    (Some(after), Some(_)) => humantime::format_duration(*after).to_string(),
                    (Some(_), None) => {
                        warn!(
                            queue,
                            "the handler asked for a retry delay, but [delay] is off: retry_delays apply"
                        );
                        self.sub.delay_for_retry(*retry).text.clone()
                    }
                    (None, _) => self.sub.delay_for_retry(*retry).text.clone(),
                };
                warn!(queue, message_id, attempt, plugin = %sha, delay = %delay, cause = %cause, "retry");
            }
            Decision::Park { reason, cause } => {
                warn!(queue, message_id, attempt, plugin = %sha, reason = reason.as_str(), cause = %cause, "parked in {}", self.sub.failed_queue());
            }
        }
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

fn settled_as(decision: &Decision) -> Settled {
    match decision {
        Decision::Ack => Settled::Ok,
        Decision::Retry { .. } => Settled::Retry,
        Decision::Park {
            reason: FailedReason::Fail,
            ..
        } => Settled::Fail,
        Decision::Park {
            reason: FailedReason::RetriesExhausted,
            ..
        } => Settled::RetriesExhausted,
    }
}
