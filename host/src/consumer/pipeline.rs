//! One delivery as a pipeline of typed stages, each in its own file and each run once, in
//! order: receive (`delivery.rs`) → precheck (`precheck.rs`) → invoke and decide
//! (`invoke.rs`) → publish (`publish.rs`) → settle (`settle.rs`). A stage takes the values the
//! one before made and hands on its own (`Received`, `Verdict`, the carried-out `Decision`);
//! the subscriber is only their setup. Never fails: problems are logged and the message is left
//! for the broker to redeliver.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

use super::Subscriber;
use super::delivery::Received;
use super::settle::Settler;
use crate::broker::Delivery;
use crate::outbox::{Claim, Outbound};
use crate::outcome::Decision;
use crate::plugin::Input;
use crate::telemetry;

/// What is to be done with a delivery, before anything is published: the decision, the
/// plugin's publishes (with their outbox ids) and the correlation id they carry.
pub(super) struct Verdict {
    pub decision: Decision,
    pub outbound: Vec<Outbound>,
    pub correlation: Option<String>,
    /// How long the plugin took, when it answered (only its answers count for `pause_after`).
    pub elapsed: Option<Duration>,
}

/// What the precheck leaves to do.
pub(super) enum Precheck {
    /// Decided without the plugin.
    Decided(Verdict),
    /// Call the plugin; the outbox's claim, if it made one, is kept until the call's effects
    /// are finished (a claim no call took is rolled back when dropped).
    Call(Option<Claim>),
}

impl Verdict {
    /// An ok with nothing to publish: the publish stage has nothing to do.
    pub(super) fn sends_nothing(&self) -> bool {
        matches!(self.decision, Decision::Ack) && self.outbound.is_empty()
    }

    /// A decision made without the plugin.
    pub(super) fn without_call(decision: Decision) -> Verdict {
        Verdict {
            decision,
            outbound: Vec::new(),
            correlation: None,
            elapsed: None,
        }
    }
}

/// One delivery's run, boxed: spawning moves a task's future several times, a memcpy each
/// (unboxed, with 22 KiB, that was a quarter of the host's CPU).
pub(super) type Call = Pin<Box<dyn Future<Output = ()> + Send>>;

impl Subscriber {
    /// The run of `delivery`, entered in the ack book (in delivery order: every delivery is
    /// started through here, in the order it came).
    pub(super) fn call(
        self: &Arc<Self>,
        settler: &Arc<Settler>,
        delivery: Delivery,
        permit: OwnedSemaphorePermit,
    ) -> Call {
        settler.acks.received(delivery.tag);
        let this = self.clone();
        let settler = settler.clone();
        Box::pin(async move { this.handle(delivery, &settler, permit).await })
    }

    /// Runs one delivery through the stages.
    pub(super) async fn handle(
        &self,
        delivery: Delivery,
        settler: &Settler,
        permit: OwnedSemaphorePermit,
    ) {
        let (input, received) = self.receive(delivery);
        let span = telemetry::delivery_span(
            &self.sub.queue,
            &received.routing_key,
            &received.properties,
            input.meta.attempt,
        );
        self.flow(input, received, settler, permit)
            .instrument(span)
            .await;
    }

    async fn flow(
        &self,
        input: Arc<Input>,
        mut received: Received,
        settler: &Settler,
        permit: OwnedSemaphorePermit,
    ) {
        let plugin = self.plugin.load_full();
        let verdict = match self.precheck(&input, &mut received).await {
            Precheck::Decided(verdict) => {
                drop(permit);
                verdict
            }
            Precheck::Call(claim) => match self.invoke(&plugin, &input, settler, permit).await {
                Some(invocation) => {
                    drop(claim);
                    self.decide(&input, invocation)
                }
                None => {
                    drop(claim);
                    // The channel died during the call: nothing settles this message.
                    self.drop_result(settler, &input, &received).await;
                    return;
                }
            },
        };
        if let Some(elapsed) = verdict.elapsed {
            self.paced(elapsed);
        }
        // A call whose channel died publishes nothing and acks nothing: the broker redelivers
        // the message, and that copy is the only one that goes on.
        if !settler.connected() {
            self.drop_result(settler, &input, &received).await;
            return;
        }
        let answered = verdict.elapsed;
        // The publish stage's future is most of this one's size (3.6 KiB of 5.2): boxed, and
        // skipped for an ok that sends nothing, so the common call moves a small future.
        let settled = if self.outbox.is_none() && verdict.sends_nothing() {
            Ok(verdict.decision)
        } else {
            Box::pin(self.publish(verdict, &input, &received, &plugin, &settler.link)).await
        };
        // Only plugin answers count towards pause_after; a broker that refused is not one.
        if let (Some(_), Ok(decision)) = (answered, &settled) {
            self.breaker.answered(matches!(decision, Decision::Ack));
        }
        self.settle(settler, settled, &input, &received, &plugin, answered)
            .await;
    }
}
