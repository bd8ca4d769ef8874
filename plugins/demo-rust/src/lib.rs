//! `demo-rust`: the demo component, doing what the message body asks, the same in Rust, Python
//! and JavaScript (the host's integration tests drive all three alike).
//!
//! The body is a JSON object; every key is optional and they apply in this order:
//!
//! ```json
//! {"log": "to host.log", "print": "to stdout", "grow_mb": 64, "trap": true, "loop": true,
//!  "echo": {"exchange": "master", "routing_key": "echo.back"},
//!  "publish": [{"exchange": "master", "routing_key": "k", "body": "text", "delay_ms": 0}],
//!  "outcome": "retry", "reason": "db down", "after_ms": 5000}
//! ```
//!
//! After `loop`, on every message, the demo uses the capabilities its subscription grants
//! ([`capabilities`]): a count per original routing key in the key-value store, an audit row in the
//! database; then `"http": {"url", "method", "body", "headers"}` sends that request.
//!
//! `echo` publishes a JSON report of what the plugin received (config, a per-instance call count,
//! attempt, routing keys, message id, headers, body length, `seen` and `audited` (null without
//! their grant), and `http` when asked). A refused publish fails the message with `publish
//! refused: <the world's publish-error name>`. `outcome` is `ok` (default), `retry` (with
//! `after_ms`: no sooner than that) or `fail`; `reason` defaults to `requested`.

#![forbid(unsafe_code)]

pub mod capabilities;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use worker_plugin_sdk::serde_json::{self, Value, json};
use worker_plugin_sdk::{Error, Message, Outcome, Outgoing, PublishError, config, info};

/// What the body asks for.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Request {
    /// A line for `host.log` at info.
    pub log: Option<String>,
    /// A line for stdout.
    pub print: Option<String>,
    /// MiB to allocate and touch.
    pub grow_mb: Option<u64>,
    /// Crash (a panic, a trap in the host).
    pub trap: bool,
    /// Never return.
    #[serde(rename = "loop")]
    pub spin: bool,
    /// An HTTP request to send.
    pub http: Option<capabilities::HttpCall>,
    /// Publish a report of the delivery here.
    pub echo: Option<Target>,
    /// Messages to publish.
    pub publish: Vec<Publish>,
    /// `ok`, `retry` or `fail`.
    pub outcome: Option<String>,
    /// The reason of a retry or fail.
    pub reason: Option<String>,
    /// A retry's delay.
    pub after_ms: Option<u64>,
}

/// Where `echo` publishes.
#[derive(Debug, Deserialize)]
pub struct Target {
    /// Exchange.
    pub exchange: String,
    /// Routing key.
    pub routing_key: String,
}

/// One message of `publish`.
#[derive(Debug, Deserialize)]
pub struct Publish {
    /// Exchange.
    pub exchange: String,
    /// Routing key.
    pub routing_key: String,
    /// Body text.
    #[serde(default)]
    pub body: String,
    /// Delay; 0 publishes at once.
    #[serde(default)]
    pub delay_ms: u64,
}

thread_local! {
    /// Calls handled by this instance. A component has one thread, so this is the module-global
    /// counter (1 in a fresh instance); natively each test thread counts on its own.
    static CALLS: Cell<u64> = const { Cell::new(0) };
}

/// Does what the message asks.
pub fn handle(msg: &Message) -> Result<Outcome, Error> {
    let count = CALLS.with(|c| {
        c.set(c.get() + 1);
        c.get()
    });
    let body: Value = serde_json::from_slice(msg.body()).unwrap_or(Value::Null);
    if !body.is_object() {
        return Err(Error::fail("not a JSON object"));
    }
    let req: Request = serde_json::from_value(body)
        .map_err(|e| Error::fail(format_args!("bad demo request: {e}")))?;
    if let Some(line) = &req.log {
        info!("{line}");
    }
    if let Some(line) = &req.print {
        println!("{line}");
    }
    if let Some(mb) = req.grow_mb {
        grow(mb);
    }
    if req.trap {
        panic!("trap requested");
    }
    if req.spin {
        spin();
    }
    let granted = match granted(msg, &req) {
        Ok(granted) => granted,
        Err(outcome) => return Ok(outcome),
    };
    if let Some(to) = &req.echo {
        let report = echo_report(msg, count, granted)?;
        send(Outgoing::json(&to.exchange, &to.routing_key, &report))?;
    }
    for p in &req.publish {
        let out = Outgoing::new(&p.exchange, &p.routing_key, p.body.as_bytes())
            .delay(Duration::from_millis(p.delay_ms));
        send(Ok(out))?;
    }
    let reason = req.reason.unwrap_or_else(|| "requested".to_owned());
    match req.outcome.as_deref().unwrap_or("ok") {
        "ok" => Ok(Outcome::Ok),
        "retry" => Ok(match req.after_ms {
            Some(ms) => Outcome::retry_after(reason, Duration::from_millis(ms)),
            None => Outcome::retry(reason),
        }),
        "fail" => Ok(Outcome::fail(reason)),
        other => Err(Error::fail(format_args!("unknown outcome {other:?}"))),
    }
}

worker_plugin_sdk::handler!(handle);

/// The echo's report of the capabilities: `seen`, `audited` and, when asked, `http`.
fn granted(msg: &Message, req: &Request) -> Result<Value, Outcome> {
    let mut report = json!({
        "seen": capabilities::count_seen(msg)?,
        "audited": capabilities::audit(msg)?,
    });
    if let Some(call) = &req.http {
        report["http"] = json!(capabilities::fetch(call));
    }
    Ok(report)
}

/// What `echo` publishes: what this call received.
fn echo_report(msg: &Message, count: u64, granted: Value) -> Result<Value, Error> {
    let config: Value = config()?;
    let headers: BTreeMap<&str, &str> = msg
        .headers()
        .unwrap_or_default()
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let mut report = json!({
        "config": config,
        "count": count,
        "attempt": msg.attempt(),
        "routing_key": msg.routing_key(),
        "original_routing_key": msg.original_routing_key(),
        "message_id": msg.message_id(),
        "headers": headers,
        "body_len": msg.body().len(),
    });
    if let (Value::Object(report), Value::Object(granted)) = (&mut report, granted) {
        report.extend(granted);
    }
    Ok(report)
}

/// Publishes; a refusal fails the message, named as the world names it.
fn send(out: Result<Outgoing, PublishError>) -> Result<(), Error> {
    out.and_then(Outgoing::publish)
        .map_err(|e| Error::fail(format_args!("publish refused: {}", e.name())))
}

/// Allocates `mb` MiB and writes to every page, so the memory is really committed; past the
/// host's `memory_limit` the allocation fails, which aborts (a trap).
fn grow(mb: u64) {
    const PAGE: usize = 4096;
    let bytes = usize::try_from(mb)
        .unwrap_or(usize::MAX)
        .saturating_mul(1 << 20);
    let mut hoard = vec![0u8; bytes];
    for i in (0..hoard.len()).step_by(PAGE) {
        hoard[i] = 1;
    }
    std::hint::black_box(&hoard);
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
