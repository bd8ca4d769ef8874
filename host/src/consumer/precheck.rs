//! The precheck stage: the decisions that need no plugin call. A delivery the client could not
//! decode, or one over `max_message_size`, is parked untouched; a redelivery of a message whose
//! call outlived the consumer timeout counts as that failed call; with the outbox, a message
//! already handled only sends what it published and the broker never confirmed.

use super::Subscriber;
use super::delivery::{Received, identity};
use super::pipeline::{Precheck, Verdict};
use crate::outbox::Check;
use crate::outcome::{self, Decision, FailedReason};
use crate::plugin::Input;
use crate::poison;

impl Subscriber {
    /// Decides what needs no plugin call; a parked delivery is not counted as a call.
    pub(super) async fn precheck(&self, input: &Input, received: &mut Received) -> Precheck {
        if let Some(decision) = self.undeliverable(input, received) {
            return Precheck::Decided(Verdict::without_call(decision));
        }
        match self.outbox_check(input).await {
            Check::Handle(claim) => Precheck::Call(claim),
            Check::WithoutId => Precheck::Call(None),
            Check::Duplicate(outbound, stored) => Precheck::Decided(Verdict {
                decision: Decision::Ack,
                outbound,
                correlation: stored.or_else(|| super::publish::input_correlation(input)),
                elapsed: None,
            }),
            Check::Unavailable(why) => Precheck::Decided(Verdict::without_call(
                outcome::retry_or_park(why, input.meta.attempt, self.sub.max_retries),
            )),
        }
    }

    /// Undecodable, too large, or a strike of the consumer timeout.
    fn undeliverable(&self, input: &Input, received: &mut Received) -> Option<Decision> {
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

    /// What the outbox says of `input` before a call; counted in the metrics.
    async fn outbox_check(&self, input: &Input) -> Check {
        let Some(outbox) = &self.outbox else {
            return Check::Handle(None);
        };
        let check = outbox.check(input, self.limits.timeout).await;
        match &check {
            Check::WithoutId => self.metrics.without_id(),
            Check::Duplicate(..) => self.metrics.duplicate(),
            Check::Handle(_) | Check::Unavailable(_) => {}
        }
        check
    }

    /// The id the outbox records `input` under, when there is an outbox and an id.
    pub(super) fn outbox_id<'a>(&self, input: &'a Input) -> Option<&'a str> {
        self.outbox.as_ref()?.id(input)
    }
}
