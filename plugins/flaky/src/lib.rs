//! `flaky`: answers whatever the message tells it to, for demos and smoke tests.
//!
//! The body is JSON, every field optional:
//!
//! ```json
//! {"outcome": "retry", "until_attempt": 3, "reason": "db down", "log": "hi",
//!  "publish": [{"exchange": "master", "routing_key": "k", "body": {"a": 1}, "delay_ms": 5000}]}
//! ```
//!
//! `outcome` is `ok` (default), `retry`, `fail`, `panic`, `trap` (a bare `unreachable`), `loop`
//! (spins until the host's timeout) or `oom` (allocates until the memory limit). With
//! `until_attempt: n` the outcome applies while the attempt is below n, then the answer is ok.
//! Publishes are requested before answering, so a retry or fail shows they are dropped.

#![forbid(unsafe_code)]

use std::time::Duration;

use serde::Deserialize;
use worker_plugin_sdk::serde_json::Value;
use worker_plugin_sdk::{Error, Message, Outcome, info, publish_delayed};

/// The instructions in the message body.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Script {
    /// What to answer.
    pub outcome: Option<String>,
    /// From this attempt on, answer ok.
    pub until_attempt: Option<u32>,
    /// The reason for retry/fail/panic.
    pub reason: Option<String>,
    /// A line to log first.
    pub log: Option<String>,
    /// Messages to publish first.
    pub publish: Vec<Publish>,
}

/// One publish request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Publish {
    /// Target exchange.
    pub exchange: String,
    /// Routing key.
    pub routing_key: String,
    /// A string is sent as is, anything else as JSON.
    #[serde(default)]
    pub body: Value,
    /// Delay in milliseconds (0 = none).
    #[serde(default)]
    pub delay_ms: u64,
}

/// Follows the script in the message body.
pub fn handle(msg: &Message) -> Result<Outcome, Error> {
    let script: Script = msg.json()?;
    if let Some(line) = &script.log {
        info!("{line}");
    }
    for p in &script.publish {
        let body = match &p.body {
            Value::String(s) => s.clone().into_bytes(),
            other => other.to_string().into_bytes(),
        };
        publish_delayed(
            &p.exchange,
            &p.routing_key,
            body,
            Duration::from_millis(p.delay_ms),
        )?;
    }
    let outcome = script.outcome.as_deref().unwrap_or("ok");
    if script.until_attempt.is_some_and(|n| msg.attempt() >= n) {
        info!(
            "attempt {} reached until_attempt; ok instead of {outcome}",
            msg.attempt()
        );
        return Ok(Outcome::Ok);
    }
    let reason = script
        .reason
        .unwrap_or_else(|| format!("flaky: {outcome} on attempt {}", msg.attempt()));
    match outcome {
        "ok" => Ok(Outcome::Ok),
        "retry" => Ok(Outcome::Retry(reason)),
        "fail" => Ok(Outcome::Fail(reason)),
        "panic" => panic!("{reason}"),
        "trap" => trap(),
        "loop" => spin(),
        "oom" => exhaust_memory(),
        other => Err(Error::fail(format_args!(
            "flaky: unknown outcome {other:?}"
        ))),
    }
}

/// A trap with no reason set, as a buggy plugin in any language would produce.
fn trap() -> ! {
    #[cfg(target_family = "wasm")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_family = "wasm"))]
    panic!("trap");
}

/// Never returns; the host's timeout must stop it.
fn spin() -> ! {
    let mut n = 0u64;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

/// Grows memory until allocation fails, which aborts (traps) at the host's memory limit.
fn exhaust_memory() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        hoard.push(vec![1u8; 1 << 20]);
        std::hint::black_box(&hoard);
    }
}

worker_plugin_sdk::handler!(handle);

#[cfg(test)]
mod tests {
    use super::*;
    use worker_plugin_sdk::serde_json::json;
    use worker_plugin_sdk::testing::TestMessage;

    fn run(script: Value, attempt: u32) -> worker_plugin_sdk::testing::TestRun {
        TestMessage::json(&script).attempt(attempt).run(handle)
    }

    #[test]
    fn retries_until_the_given_attempt() {
        let script = json!({"outcome": "retry", "until_attempt": 3});
        assert_eq!(
            run(script.clone(), 1).outcome,
            Outcome::retry("flaky: retry on attempt 1")
        );
        assert!(run(script.clone(), 2).outcome.is_retry());
        assert_eq!(run(script.clone(), 3).outcome, Outcome::Ok);
        assert_eq!(run(script, 4).outcome, Outcome::Ok);
    }

    #[test]
    fn ok_fail_and_reasons() {
        assert_eq!(run(json!({}), 1).outcome, Outcome::Ok);
        assert_eq!(
            run(json!({"outcome": "fail", "reason": "bad"}), 1).outcome,
            Outcome::fail("bad")
        );
        assert!(
            run(json!({"outcome": "nope"}), 1)
                .outcome
                .reason()
                .unwrap()
                .contains("unknown outcome")
        );
        assert!(TestMessage::new("not json").run(handle).outcome.is_fail());
    }

    #[test]
    fn panic_and_trap_become_retries() {
        let panicked = run(json!({"outcome": "panic", "reason": "kaboom"}), 1);
        assert!(panicked.outcome.is_retry());
        assert!(panicked.outcome.reason().unwrap().ends_with("kaboom"));
        assert!(run(json!({"outcome": "trap"}), 1).outcome.is_retry());
        assert!(
            run(json!({"outcome": "trap", "until_attempt": 2}), 2)
                .outcome
                .is_ok()
        );
    }

    #[test]
    fn publishes_and_logs() {
        let script = json!({
            "log": "hello",
            "publish": [
                {"exchange": "master", "routing_key": "a", "body": "text"},
                {"exchange": "master", "routing_key": "b", "body": {"n": 1}, "delay_ms": 1500},
            ],
        });
        let r = run(script, 1);
        assert!(r.outcome.is_ok());
        assert!(r.logged("hello"));
        assert_eq!(r.publishes[0].body_text(), "text");
        assert_eq!(r.publishes[1].body_text(), r#"{"n":1}"#);
        assert_eq!(r.publishes[1].delay, Some(Duration::from_millis(1500)));
    }

    #[test]
    fn refused_delay_retries() {
        let script =
            json!({"publish": [{"exchange": "master", "routing_key": "a", "delay_ms": 10}]});
        let r = TestMessage::json(&script).refuse_delays().run(handle);
        assert!(
            r.outcome.reason().unwrap().contains("delay"),
            "{:?}",
            r.outcome
        );
    }
}
