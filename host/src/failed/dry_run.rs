//! `failed dry-run`: parked messages run through a plugin in the sandbox with every effect
//! captured instead of performed (publishes, HTTP requests, key-value writes, SQL in a
//! transaction that is always rolled back). The messages stay parked; one JSON line each.

use std::io::Write;
use std::sync::Arc;

use lapin::message::Delivery;
use serde_json::{Value, json};

use super::list::print_each;
use super::parked::Parked;
use super::select::Selection;
use crate::capability::Granted;
use crate::capability::capture::{Capture, bytes_json};
use crate::config::{Config, Subscription};
use crate::headers;
use crate::plugin::{Answer, Input, Instances, Invocation, Limits, Meta, Plugin, PublishPolicy};
use crate::topology::delay_levels::DelayLevels;

/// What a dry run runs: a plugin (the subscription's own, or another file) under the
/// subscription's grants.
pub struct Trial<'a> {
    pub plugin: &'a Plugin,
    pub granted: &'a Granted,
}

/// Runs the selected messages of `<queue>@failed` through `trial`, writing one JSON object per
/// message to `out`; returns how many. Every message goes back in place when the walk closes.
pub async fn dry_run(
    config: &Config,
    queue: &str,
    trial: &Trial<'_>,
    selection: &Selection,
    out: &mut impl Write,
) -> anyhow::Result<u64> {
    let sub = super::subscription(config, queue)?;
    let failed = sub.failed_queue();
    let name = "worker-host failed dry-run";
    print_each(
        config,
        (&failed, name),
        selection,
        out,
        |picked| async move {
            try_one(config, sub, trial, &picked.parked, &picked.message.delivery).await
        },
    )
    .await
}

/// Runs one parked message as a replay would deliver it (attempt 1, its original routing key)
/// and describes what the handler answered and what it would have done.
pub(crate) async fn try_one(
    config: &Config,
    sub: &Subscription,
    trial: &Trial<'_>,
    parked: &Parked,
    delivery: &Delivery,
) -> Value {
    let props = &delivery.properties;
    let key =
        headers::original_routing_key(props.headers().as_ref(), delivery.routing_key.as_str());
    let mut meta = Meta::of(&sub.queue, &sub.exchange, &key, false, props);
    meta.attempt = 1;
    let capture = Arc::new(Capture::default());
    let max_delay = DelayLevels::from_config(config)
        .ok()
        .flatten()
        .map(|d| d.max_delay());
    let input = Arc::new(Input {
        body: delivery.data.clone().into(),
        meta,
        config_json: sub.config.to_string().into(),
        publish: Arc::new(PublishPolicy {
            allowed_exchanges: sub.publish.clone(),
            max_delay,
            ..PublishPolicy::default()
        }),
        granted: Arc::new(trial.granted.capturing(capture.clone())),
    });
    let limits = Limits {
        timeout: sub.timeout,
        memory_limit: sub.memory_limit,
        instance: Instances::Fresh,
    };
    let invocation = trial.plugin.handle(input, &limits).await;
    describe(parked, trial.plugin, &invocation, capture.take())
}

/// The JSON line of one dry-run call: its answer, and its effects in the order they were made
/// (the publishes last: the host sends them after the call).
fn describe(parked: &Parked, plugin: &Plugin, call: &Invocation, effects: Vec<Value>) -> Value {
    let (answer, error) = match &call.answer {
        Ok(Answer::Ok) => ("ok", None),
        Ok(Answer::Retry) => ("retry", None),
        Ok(Answer::Fail) => ("fail", None),
        Err(e) => ("error", Some(e.to_string())),
    };
    let mut all = effects;
    for p in &call.publishes {
        all.push(json!({
            "publish": p.exchange,
            "routing_key": p.routing_key,
            "body": bytes_json(&p.body),
            "delay_ms": p.delay.map(|d| d.as_millis() as u64),
            "headers": p.headers.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
        }));
    }
    let logs: Vec<Value> = call
        .logs
        .iter()
        .map(|l| json!({"level": format!("{:?}", l.level).to_lowercase(), "message": l.message}))
        .collect();
    json!({
        "id": parked.id,
        "plugin": plugin.name(),
        "sha256": plugin.sha256(),
        "answer": answer,
        "reason": call.reason,
        "error": error,
        "effects": all,
        "logs": logs,
        "elapsed_ms": call.elapsed.as_millis() as u64,
    })
}
