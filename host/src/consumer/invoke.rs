//! The invoke and decide stages: the plugin call (stopped at once if the consumer channel
//! dies), the commit of its effects (with the outbox, its record in the same transaction), and
//! the decision its answer makes, with the publishes that go out on ok.

use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

use super::Subscriber;
use super::pipeline::Verdict;
use super::publish::input_correlation;
use super::settle::Settler;
use crate::outbox::{self, Failpoint};
use crate::outcome::{self, Decision};
use crate::plugin::{Input, Invocation, Plugin};
use crate::telemetry;

impl Subscriber {
    /// Calls the plugin in its handler `slot` and finishes the call's effects; `None` when the
    /// consumer channel died meanwhile (the call is stopped, its effects undone).
    pub(super) async fn invoke(
        &self,
        plugin: &Plugin,
        input: &Arc<Input>,
        settler: &Settler,
        slot: OwnedSemaphorePermit,
    ) -> Option<Invocation> {
        let in_flight = self.metrics.call_started();
        let span = telemetry::span!(
            "plugin",
            otel.name = %format_args!("handle {}", plugin.name()),
            worker.plugin = plugin.name(),
            worker.plugin.sha256 = plugin.sha256(),
        );
        let calling = plugin.invoke(input.clone(), &self.limits).instrument(span);
        let mut invocation = tokio::select! {
            invocation = calling => invocation,
            _ = settler.death.died() => return None,
        };
        drop(in_flight);
        // The slot bounds calls, not commits: a message waiting for its commit (on SQLite, a
        // group's, shared with the calls that run meanwhile) lets the next call start.
        drop(slot);
        self.commit(input, &mut invocation).await;
        invocation.emit_logs(plugin, &self.sub.queue);
        Some(invocation)
    }

    /// Commits an ok call's effects (with the outbox, its record in the same transaction) or
    /// undoes them; a commit that fails turns the answer into that error.
    async fn commit(&self, input: &Input, invocation: &mut Invocation) {
        let ok = invocation.is_ok();
        let record = (self.outbox.as_ref())
            .filter(|_| ok)
            .and_then(|o| o.record(input, &invocation.publishes));
        if record.is_some() {
            Failpoint::BeforeCommit.hit();
        }
        let effects = std::mem::take(&mut invocation.effects);
        if record.is_none() && effects.is_idle() {
            return;
        }
        if let Err(why) = Box::pin(effects.finish(ok, record.as_ref())).await
            && ok
        {
            invocation.commit_failed(why);
        }
    }

    /// The decision for the plugin's answer.
    pub(super) fn decide(&self, input: &Input, invocation: Invocation) -> Verdict {
        let outbox_id = self.outbox_id(input);
        let verdict = verdict(invocation, input, self.sub.max_retries, outbox_id);
        if matches!(verdict.decision, Decision::Ack) && outbox_id.is_some() {
            Failpoint::AfterCommit.hit();
        }
        verdict
    }
}

/// The decision for an answer to call number `input.meta.attempt`, and the publishes that go
/// out with it (each with its outbox id under `outbox_id`).
fn verdict(
    invocation: Invocation,
    input: &Input,
    max_retries: u32,
    outbox_id: Option<&str>,
) -> Verdict {
    let mut decision = outcome::decide(
        &invocation.answer,
        invocation.reason.as_deref(),
        input.meta.attempt,
        max_retries,
    );
    if let Decision::Retry { after, .. } = &mut decision {
        *after = invocation.retry_after;
    }
    Verdict {
        decision,
        outbound: outbox::with_ids(outbox_id, invocation.publishes),
        correlation: input_correlation(input),
        elapsed: Some(invocation.elapsed),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::plugin::{Answer, Publish};

    fn input(attempt: u32) -> Input {
        Input {
            body: Default::default(),
            meta: crate::plugin::Meta {
                message_id: Some("m".into()),
                attempt,
                ..Default::default()
            },
            config_json: "{}".into(),
            publish: Default::default(),
            granted: Default::default(),
        }
    }

    fn answered(answer: Answer, publishes: Vec<Publish>) -> Invocation {
        Invocation {
            answer: Ok(answer),
            reason: None,
            retry_after: Some(Duration::from_secs(3)),
            publishes,
            logs: Vec::new(),
            elapsed: Duration::from_millis(5),
            effects: Default::default(),
        }
    }

    fn publish() -> Publish {
        Publish {
            exchange: "x".into(),
            routing_key: "k".into(),
            body: Vec::new(),
            delay: None,
            content_type: None,
            headers: Vec::new(),
        }
    }

    #[test]
    fn an_ok_sends_its_publishes_with_outbox_ids() {
        let v = verdict(
            answered(Answer::Ok, vec![publish(), publish()]),
            &input(1),
            3,
            Some("m"),
        );
        assert_eq!(v.decision, Decision::Ack);
        let ids: Vec<_> = v.outbound.iter().map(|o| o.message_id.clone()).collect();
        assert_eq!(ids, [Some("m:1".to_string()), Some("m:2".to_string())]);
        assert_eq!(v.correlation.as_deref(), Some("m"));
        assert_eq!(v.elapsed, Some(Duration::from_millis(5)));
    }

    #[test]
    fn a_retry_keeps_the_delay_asked_for_until_the_retries_are_used_up() {
        let v = verdict(answered(Answer::Retry, vec![]), &input(1), 1, None);
        assert!(matches!(
            v.decision,
            Decision::Retry { retry: 1, after: Some(d), .. } if d == Duration::from_secs(3)
        ));
        let v = verdict(answered(Answer::Retry, vec![]), &input(2), 1, None);
        assert!(matches!(v.decision, Decision::Park { .. }));
    }
}
