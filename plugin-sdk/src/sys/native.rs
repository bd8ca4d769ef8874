//! Natively, the `worker_v1` calls act on a per-thread context that [`crate::testing`] fills in
//! before calling a handler and reads back afterwards. Outside such a run the message is empty,
//! logs go to stderr and publishes are dropped.

use std::cell::RefCell;
use std::collections::BTreeMap;

use worker_abi::{PUBLISH_ACCEPTED, PublishRefusal, limits};

/// What the host would hold for one handler call.
#[derive(Debug, Default)]
pub(crate) struct Context {
    pub(crate) body: Vec<u8>,
    pub(crate) meta: BTreeMap<String, String>,
    pub(crate) config: Option<Vec<u8>>,
    /// `None` allows every exchange.
    pub(crate) allowed_exchanges: Option<Vec<String>>,
    /// `false` refuses delayed publishes, as a host without `[delay]` does.
    pub(crate) delays: bool,
    /// Answer every publish with this code instead of accepting it.
    pub(crate) publish_refusal: Option<i32>,
    pub(crate) logs: Vec<(i32, String)>,
    pub(crate) reason: Option<String>,
    pub(crate) publishes: Vec<RawPublish>,
}

/// One accepted `publish` call.
#[derive(Debug)]
pub(crate) struct RawPublish {
    pub(crate) exchange: String,
    pub(crate) routing_key: String,
    pub(crate) body: Vec<u8>,
    pub(crate) delay_ms: i64,
}

thread_local! {
    static CONTEXT: RefCell<Option<Context>> = const { RefCell::new(None) };
}

/// Makes `ctx` the current thread's host.
pub(crate) fn enter(ctx: Context) {
    CONTEXT.with(|c| *c.borrow_mut() = Some(ctx));
}

/// Ends the current run and hands back what the handler did.
pub(crate) fn leave() -> Option<Context> {
    CONTEXT.with(|c| c.borrow_mut().take())
}

/// Whether a test run is in progress on this thread.
pub(crate) fn active() -> bool {
    CONTEXT.with(|c| c.borrow().is_some())
}

fn with<R>(f: impl FnOnce(&mut Context) -> R) -> Option<R> {
    // `try_`: the panic hook may call in while a frame further up holds the borrow.
    CONTEXT.with(|c| c.try_borrow_mut().ok()?.as_mut().map(f))
}

pub(crate) fn body() -> Vec<u8> {
    with(|c| c.body.clone()).unwrap_or_default()
}

pub(crate) fn meta(key: &str) -> Option<String> {
    with(|c| c.meta.get(key).cloned()).flatten()
}

pub(crate) fn config() -> Option<Vec<u8>> {
    with(|c| c.config.clone()).flatten()
}

pub(crate) fn log(level: i32, message: &str) {
    if with(|c| c.logs.push((level, message.to_owned()))).is_none() {
        eprintln!("[plugin log {level}] {message}");
    }
}

pub(crate) fn set_reason(reason: &str) {
    with(|c| c.reason = Some(reason.to_owned()));
}

pub(crate) fn publish(exchange: &str, routing_key: &str, body: &[u8], delay_ms: i64) -> i32 {
    with(|c| {
        if let Some(code) = c.publish_refusal {
            return code;
        }
        if let Some(refusal) = c.refusal(exchange, routing_key, body, delay_ms) {
            return refusal.code();
        }
        c.publishes.push(RawPublish {
            exchange: exchange.to_owned(),
            routing_key: routing_key.to_owned(),
            body: body.to_vec(),
            delay_ms,
        });
        PUBLISH_ACCEPTED
    })
    .unwrap_or(PUBLISH_ACCEPTED)
}

impl Context {
    /// What the host would refuse, in the host's order, with its default per-call limits.
    fn refusal(
        &self,
        exchange: &str,
        routing_key: &str,
        body: &[u8],
        delay_ms: i64,
    ) -> Option<PublishRefusal> {
        if exchange.len() > limits::MAX_NAME_LEN || routing_key.len() > limits::MAX_NAME_LEN {
            return Some(PublishRefusal::Invalid);
        }
        if let Some(allowed) = &self.allowed_exchanges
            && !allowed.iter().any(|a| a == exchange)
        {
            return Some(PublishRefusal::ExchangeNotAllowed);
        }
        if delay_ms < 0 || (delay_ms > 0 && !self.delays) {
            return Some(PublishRefusal::DelayRefused);
        }
        if self.publishes.len() >= limits::MAX_PUBLISHES {
            return Some(PublishRefusal::TooManyMessages);
        }
        let buffered: usize = self
            .publishes
            .iter()
            .map(|p| p.routing_key.len() + p.body.len())
            .sum();
        if buffered + routing_key.len() + body.len() > limits::MAX_PUBLISH_BYTES {
            return Some(PublishRefusal::TooManyBytes);
        }
        None
    }
}
