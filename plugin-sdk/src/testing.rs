//! Native unit tests for plugins: call a handler with a made-up message and get back its answer,
//! the messages it asked to publish and the lines it logged. Only built for non-wasm targets.
//!
//! ```
//! use worker_plugin_sdk::{Message, Outcome, testing::TestMessage};
//!
//! fn handle(msg: &Message) -> Outcome {
//!     if msg.attempt() < 3 { Outcome::retry("not yet") } else { Outcome::Ok }
//! }
//!
//! assert_eq!(TestMessage::new("").run(handle).outcome, Outcome::retry("not yet"));
//! assert_eq!(TestMessage::new("").attempt(3).run(handle).outcome, Outcome::Ok);
//! ```

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use worker_abi::{Answer, meta};

use crate::sys::native::{self, Context};
use crate::{IntoOutcome, Level, Message, Outcome, rt};

/// A message to call a handler with, built up like the host would deliver it.
///
/// Defaults: routing key `test.message` (also the original routing key unless set), exchange
/// `master`, queue `test@queue`, attempt 1, not redelivered, no config, every exchange allowed,
/// delays accepted. Publishes are checked like the host does, with its default per-call limits.
#[derive(Debug, Clone)]
#[must_use]
pub struct TestMessage {
    body: Vec<u8>,
    meta: BTreeMap<String, String>,
    config: Option<Vec<u8>>,
    allowed_exchanges: Option<Vec<String>>,
    delays: bool,
    publish_refusal: Option<i32>,
}

impl TestMessage {
    /// A message with this body.
    pub fn new(body: impl Into<Vec<u8>>) -> Self {
        let meta = [
            (meta::ROUTING_KEY, "test.message"),
            (meta::EXCHANGE, "master"),
            (meta::QUEUE, "test@queue"),
            (meta::ATTEMPT, "1"),
            (meta::REDELIVERED, meta::FALSE),
        ];
        TestMessage {
            body: body.into(),
            meta: meta
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            config: None,
            allowed_exchanges: None,
            delays: true,
            publish_refusal: None,
        }
    }

    /// A message whose body is `value` as JSON, with content type `application/json`.
    ///
    /// # Panics
    /// If `value` cannot be serialized (a test bug).
    pub fn json(value: &(impl Serialize + ?Sized)) -> Self {
        let body = serde_json::to_vec(value).expect("test message body must serialize to JSON");
        TestMessage::new(body).content_type("application/json")
    }

    /// Sets any ABI `meta_get` key.
    pub fn meta(mut self, key: &str, value: impl ToString) -> Self {
        self.meta.insert(key.to_owned(), value.to_string());
        self
    }

    /// The routing key of this delivery.
    pub fn routing_key(self, key: &str) -> Self {
        self.meta(meta::ROUTING_KEY, key)
    }

    /// The key it was first published with (defaults to the routing key).
    pub fn original_routing_key(self, key: &str) -> Self {
        self.meta(meta::ORIGINAL_ROUTING_KEY, key)
    }

    /// The exchange it came through.
    pub fn exchange(self, exchange: &str) -> Self {
        self.meta(meta::EXCHANGE, exchange)
    }

    /// The queue consumed.
    pub fn queue(self, queue: &str) -> Self {
        self.meta(meta::QUEUE, queue)
    }

    /// Which call this is (1 = first).
    pub fn attempt(self, attempt: u32) -> Self {
        self.meta(meta::ATTEMPT, attempt)
    }

    /// The broker's redelivered flag.
    pub fn redelivered(self, redelivered: bool) -> Self {
        self.meta(meta::REDELIVERED, redelivered)
    }

    /// The `message_id` property.
    pub fn message_id(self, id: &str) -> Self {
        self.meta(meta::MESSAGE_ID, id)
    }

    /// The `correlation_id` property.
    pub fn correlation_id(self, id: &str) -> Self {
        self.meta(meta::CORRELATION_ID, id)
    }

    /// The `content_type` property.
    pub fn content_type(self, content_type: &str) -> Self {
        self.meta(meta::CONTENT_TYPE, content_type)
    }

    /// The `timestamp` property, in seconds since the Unix epoch.
    pub fn timestamp(self, seconds: u64) -> Self {
        self.meta(meta::TIMESTAMP, seconds)
    }

    /// An AMQP header, as the text the host would hand over.
    pub fn header(self, name: &str, value: impl ToString) -> Self {
        self.meta(&format!("{}{name}", meta::HEADER_PREFIX), value)
    }

    /// The subscription config, as the `[subscription.config]` table would arrive.
    ///
    /// # Panics
    /// If `value` cannot be serialized (a test bug).
    pub fn config(mut self, value: impl Serialize) -> Self {
        self.config = Some(serde_json::to_vec(&value).expect("test config must serialize to JSON"));
        self
    }

    /// Only these exchanges may be published to (the subscription's `publish` list); others are
    /// refused with [`PublishError::ExchangeNotAllowed`](crate::PublishError::ExchangeNotAllowed).
    pub fn allow_publish<S: Into<String>>(
        mut self,
        exchanges: impl IntoIterator<Item = S>,
    ) -> Self {
        self.allowed_exchanges = Some(exchanges.into_iter().map(Into::into).collect());
        self
    }

    /// Refuses delayed publishes with [`PublishError::DelayRefused`](crate::PublishError::DelayRefused),
    /// as a host without `[delay]` in worker.toml does.
    pub fn refuse_delays(mut self) -> Self {
        self.delays = false;
        self
    }

    /// Refuses every publish with this refusal, or this (negative) ABI code, to test the refusal
    /// path.
    ///
    /// ```
    /// use worker_plugin_sdk::{PublishError, publish, testing::TestMessage};
    /// use worker_plugin_sdk::abi::PublishRefusal;
    ///
    /// TestMessage::new("").refuse_publish(PublishRefusal::DelayRefused).run(|_: &_| {
    ///     assert_eq!(publish("master", "k", ""), Err(PublishError::DelayRefused));
    /// });
    /// ```
    pub fn refuse_publish(mut self, refusal: impl Into<i32>) -> Self {
        self.publish_refusal = Some(refusal.into());
        self
    }

    /// Calls `handler` through the same path as the wasm export and reports what it did.
    ///
    /// A panic becomes [`Outcome::Retry`] with the panic message, as a trap does in the host.
    pub fn run<R: IntoOutcome>(self, handler: impl FnOnce(&Message) -> R) -> TestRun {
        install_panic_hook();
        let mut meta = self.meta;
        if !meta.contains_key(meta::ORIGINAL_ROUTING_KEY) {
            let key = meta.get(meta::ROUTING_KEY).cloned().unwrap_or_default();
            meta.insert(meta::ORIGINAL_ROUTING_KEY.to_owned(), key);
        }
        native::enter(Context {
            body: self.body,
            meta,
            config: self.config,
            allowed_exchanges: self.allowed_exchanges,
            delays: self.delays,
            publish_refusal: self.publish_refusal,
            ..Context::default()
        });
        let code = catch_unwind(AssertUnwindSafe(|| rt::handle(handler)));
        let ctx = native::leave().unwrap_or_default();
        let reason = ctx.reason.unwrap_or_default();
        let outcome = match code.ok().and_then(Answer::from_code) {
            Some(Answer::Ok) => Outcome::Ok,
            Some(Answer::Fail) => Outcome::Fail(reason),
            // Retry, or a panic (a trap on wasm).
            Some(Answer::Retry) | None => Outcome::Retry(if reason.is_empty() {
                "panicked".to_owned()
            } else {
                reason
            }),
        };
        TestRun {
            outcome,
            publishes: ctx
                .publishes
                .into_iter()
                .map(|p| Published {
                    exchange: p.exchange,
                    routing_key: p.routing_key,
                    body: p.body,
                    delay: (p.delay_ms > 0)
                        .then(|| Duration::from_millis(p.delay_ms.unsigned_abs())),
                })
                .collect(),
            logs: ctx
                .logs
                .into_iter()
                .map(|(level, message)| LogLine {
                    level: Level::from_code(level),
                    message,
                })
                .collect(),
        }
    }
}

/// What a handler did with one [`TestMessage`].
#[derive(Debug, Clone)]
pub struct TestRun {
    /// Its answer, with the reason it set.
    pub outcome: Outcome,
    /// The publishes it asked for, in order. The host sends them only if the outcome is ok.
    pub publishes: Vec<Published>,
    /// The lines it logged, in order.
    pub logs: Vec<LogLine>,
}

impl TestRun {
    /// Whether any log line contains `needle`.
    pub fn logged(&self, needle: &str) -> bool {
        self.logs.iter().any(|l| l.message.contains(needle))
    }
}

/// One message a handler asked to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// Target exchange.
    pub exchange: String,
    /// Routing key.
    pub routing_key: String,
    /// Body bytes.
    pub body: Vec<u8>,
    /// The delay asked for, if any.
    pub delay: Option<Duration>,
}

impl Published {
    /// The body parsed as JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    /// The body as text (lossy).
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One logged line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// Its level.
    pub level: Level,
    /// Its text.
    pub message: String,
}

/// Routes panics inside a test run to the run (as the wasm hook does) and leaves every other
/// panic to the previous hook, so the test harness still reports failing asserts.
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if native::active() {
                rt::on_panic(info);
            } else {
                previous(info);
            }
        }));
    });
}

#[cfg(test)]
mod tests;
