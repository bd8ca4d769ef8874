//! The settle stage, and the `Settler` that owns what settling needs of one run of a
//! consumer: the consumer channel, its acks (batched, see `acks`) and what is known of its
//! death. A message is acked only after its publishes are confirmed; a requeue when the broker
//! could not take them; nothing at all when the channel died (the broker redelivers).

use std::sync::Arc;
use std::time::Duration;

use tracing::{Span, debug, error, warn};

use super::acks::Acks;
use super::delivery::{ChannelDeath, Received, identity};
use super::source::Channel;
use super::{Link, Subscriber};
use crate::broker::PublishError;
use crate::metrics::Settled;
use crate::outcome::{Decision, FailedReason};
use crate::plugin::{Input, Plugin};
use crate::telemetry;

/// What the calls of one consumer run settle through.
pub(super) struct Settler {
    pub link: Link,
    pub acks: Acks,
    /// The consumer channel the deliveries came on.
    pub channel: Arc<Channel>,
    pub death: Arc<ChannelDeath>,
}

impl Settler {
    /// Whether the consumer channel is still open (a message can still be acked).
    pub(super) fn connected(&self) -> bool {
        self.channel.connected()
    }
}

impl Subscriber {
    /// The settle stage: acks once published; otherwise leaves the message for the broker to
    /// redeliver. Counted, logged and put on the delivery's span either way.
    pub(super) async fn settle(
        &self,
        settler: &Settler,
        settled: Result<Decision, PublishError>,
        input: &Input,
        received: &Received,
        plugin: &Plugin,
        elapsed: Option<Duration>,
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
                if settler.connected() {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                if let Err(err) = settler.acks.nack_requeue(received.tag).await {
                    debug!(
                        queue,
                        message_id, "nack failed (the channel is gone): {err}"
                    );
                }
                return;
            }
        };
        // Acked soon, possibly with others (see `acks`); never before this point.
        settler.acks.settled(received.tag);
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

    /// The result of a call whose consumer channel died is dropped. If the broker gave up on
    /// this very message (consumer timeout), its redelivery will count as this failed call.
    pub(super) async fn drop_result(&self, settler: &Settler, input: &Input, received: &Received) {
        telemetry::outcome(&Span::current(), "dropped");
        self.metrics.dropped();
        let queue = self.sub.queue.as_str();
        let message_id = input.meta.message_id.as_deref().unwrap_or("");
        match settler.death.timeout_cause(received.at).await {
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
