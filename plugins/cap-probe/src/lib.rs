//! `cap-probe`: runs the capability script in the message body (key-value, SQL and HTTP steps)
//! and reports what each step answered, so the host's capability tests see exactly what a guest
//! sees. Not an example to copy: a test instrument.
//!
//! The body is a JSON object:
//!
//! ```json
//! {"id": "m-1",
//!  "steps": [{"kv": "set", "key": "a", "value": "1", "ttl_ms": 100},
//!            {"sql": "execute", "statement": "INSERT INTO t VALUES (?, ?)", "params": ["m-1", 2]},
//!            {"http": "GET", "url": "http://127.0.0.1:8080/x", "headers": {"accept": "text/plain"}}],
//!  "answer": "ok", "on_error": "retry", "until_attempt": 2}
//! ```
//!
//! Every step runs, in order, whatever the ones before answered (the step forms are in
//! [`steps`]). The report is `{"id", "attempt", "results", "headers"}`, one result per step:
//! `{"ok": value}` or `{"error": "<the world's variant name>", "text": "<the SDK's message>"}`.
//! What happens to it depends on the answer (`on_error`, when given, replaces `answer` if any
//! step failed; with `until_attempt: n` they apply while the delivery's attempt is below n, then
//! the answer is ok):
//!
//! - `ok` (default): the report is published as JSON to the exchange named by the
//!   subscription's config key `report`, with routing key `id` (default: the delivery's routing
//!   key). The host sends it only because the answer is ok.
//! - `retry`, `fail`: the report without `headers` is the reason, which the host stamps on the
//!   message as `worker-error` (cut to 1 KiB), so a test reads it on the parked message.
//! - `trap`: panics after the steps (the host sees a trap).
//! - `sleep`: spins after the steps until the host's timeout stops the call.
//!
//! Every report is also logged at info.

#![forbid(unsafe_code)]

pub mod steps;

use std::collections::BTreeMap;

use serde::Deserialize;
use worker_plugin_sdk::serde_json::{Value, json};
use worker_plugin_sdk::{Error, Message, Outcome, Outgoing, config, info};

/// The message body.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Script {
    /// The report's `id` and routing key; default: the delivery's routing key.
    pub id: Option<String>,
    /// The steps, each a JSON object (see [`steps::Step`]); one that does not parse reports
    /// `bad-step` and the others still run.
    pub steps: Vec<Value>,
    /// What to answer after the steps.
    pub answer: Answer,
    /// What to answer instead when any step failed.
    pub on_error: Option<Answer>,
    /// From this attempt on, answer ok whatever `answer` and `on_error` say.
    pub until_attempt: Option<u32>,
}

/// The handler's answer after the steps.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Answer {
    /// Ok, publishing the report.
    #[default]
    Ok,
    /// Retry, with the report as the reason.
    Retry,
    /// Fail, with the report as the reason.
    Fail,
    /// Panic: a trap in the host.
    Trap,
    /// Never return: the host's timeout ends the call.
    Sleep,
}

/// The subscription's `[subscription.config]`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Config {
    /// The exchange an ok answer's report goes to; none: the report is only logged.
    report: Option<String>,
}

/// Runs the script in the body and answers as it says.
pub fn handle(msg: &Message) -> Result<Outcome, Error> {
    let script: Script = msg.json()?;
    let results: Vec<steps::StepResult> = script.steps.iter().map(steps::run).collect();
    let failed = results.iter().any(Result::is_err);
    let answer = match script.on_error {
        _ if script.until_attempt.is_some_and(|n| msg.attempt() >= n) => Answer::Ok,
        Some(instead) if failed => instead,
        _ => script.answer,
    };
    let id = script
        .id
        .clone()
        .unwrap_or_else(|| msg.routing_key().to_owned());
    let summary = json!({
        "id": id,
        "attempt": msg.attempt(),
        "results": results.iter().map(steps::result_json).collect::<Vec<_>>(),
    });
    info!("cap-probe {answer:?}: {summary}");
    match answer {
        Answer::Ok => {
            report(msg, &id, summary)?;
            Ok(Outcome::Ok)
        }
        Answer::Retry => Ok(Outcome::retry(summary.to_string())),
        Answer::Fail => Ok(Outcome::fail(summary.to_string())),
        Answer::Trap => panic!("cap-probe: trap requested"),
        Answer::Sleep => spin(),
    }
}

worker_plugin_sdk::handler!(handle);

/// Publishes the report with the delivery's headers to the configured exchange, if any.
fn report(msg: &Message, id: &str, mut summary: Value) -> Result<(), Error> {
    let cfg: Config = config()?;
    let Some(exchange) = cfg.report else {
        return Ok(());
    };
    let headers: BTreeMap<&str, &str> = msg
        .headers()
        .unwrap_or_default()
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    if let Value::Object(map) = &mut summary {
        map.insert("headers".to_owned(), json!(headers));
    }
    Outgoing::json(&exchange, id, &summary)
        .and_then(Outgoing::publish)
        .map_err(|e| Error::fail(format_args!("report refused: {}", e.name())))
}

/// Never returns; the host's timeout must stop it.
fn spin() -> ! {
    let mut n = 0u64;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

#[cfg(test)]
mod tests;
