//! Native unit tests for plugins: call a handler with a made-up message and get back its answer,
//! the messages it asked to publish, the lines it logged, the key-value store afterwards, the SQL
//! statements it ran and the HTTP requests it sent. Only built for native targets.
//!
//! [`TestMessage::run`] calls the handler the way a component host does (the world's `handle`,
//! through the generated bindings); [`TestMessage::run_v1`] the way an ABI v1 host does. Key-value
//! and SQL are in-memory fakes, HTTP a scripted one: preload the store with [`TestMessage::kv`],
//! script query answers with [`TestMessage::sql_rows`] and HTTP answers with
//! [`TestMessage::http_response`], and read [`TestRun::kv`], [`TestRun::sql`] and [`TestRun::http`]
//! afterwards.
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

use std::collections::{BTreeMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use worker_abi::{Answer, meta};

use crate::bindings::worker::plugin::types::{Delivery, Header};
use crate::http::{HttpError, Request, Response};
use crate::kv::KvError;
use crate::sql::{Rows, SqlError};
use crate::sys::native::{self, Context};
pub use crate::sys::native::{SqlCall, SqlKind};
use crate::{IntoOutcome, Level, Message, Outcome, Outgoing, rt, wit};

/// A message to call a handler with, built up like the host would deliver it.
///
/// Defaults: routing key `test.message` (also the original routing key unless set), exchange
/// `master`, queue `test@queue`, attempt 1, not redelivered, no config, every exchange allowed,
/// delays accepted, an empty key-value store and a database that answers every query with no
/// rows and every execute with 0. Publishes are checked like the host does, with its default
/// per-call limits.
#[derive(Debug, Clone)]
#[must_use]
pub struct TestMessage {
    body: Vec<u8>,
    meta: BTreeMap<String, String>,
    config: Option<Vec<u8>>,
    allowed_exchanges: Option<Vec<String>>,
    delays: bool,
    publish_refusal: Option<i32>,
    kv: BTreeMap<String, Vec<u8>>,
    kv_error: Option<KvError>,
    sql_error: Option<SqlError>,
    sql_rows: VecDeque<Rows>,
    sql_affected: VecDeque<u64>,
    http_error: Option<HttpError>,
    http_responses: VecDeque<Response>,
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
            kv: BTreeMap::new(),
            kv_error: None,
            sql_error: None,
            sql_rows: VecDeque::new(),
            sql_affected: VecDeque::new(),
            http_error: None,
            http_responses: VecDeque::new(),
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

    /// Puts `key` = `value` in the key-value store before the call.
    pub fn kv(mut self, key: &str, value: impl Into<Vec<u8>>) -> Self {
        self.kv.insert(key.to_owned(), value.into());
        self
    }

    /// Answers every key-value call with this error: [`KvError::Denied`] for a subscription
    /// without a `kv` grant, [`KvError::Unavailable`] for a store that is down.
    pub fn kv_error(mut self, error: KvError) -> Self {
        self.kv_error = Some(error);
        self
    }

    /// Answers the next `sql::query` (in call order) with these rows; queries beyond the scripted
    /// ones get no rows.
    pub fn sql_rows(mut self, rows: Rows) -> Self {
        self.sql_rows.push_back(rows);
        self
    }

    /// Answers the next `sql::execute` (in call order) with this row count; executes beyond the
    /// scripted ones get 0.
    pub fn sql_affected(mut self, rows: u64) -> Self {
        self.sql_affected.push_back(rows);
        self
    }

    /// Answers every SQL call with this error (the call is still recorded).
    ///
    /// ```
    /// use worker_plugin_sdk::{Error, Message, sql, testing::TestMessage};
    /// use worker_plugin_sdk::sql::SqlError;
    ///
    /// let run = TestMessage::new("")
    ///     .sql_error(SqlError::Constraint("duplicate key".into()))
    ///     .run(|_: &Message| -> Result<(), Error> {
    ///         sql::execute("INSERT INTO seen VALUES ($1)", &["m-1".into()])?;
    ///         Ok(())
    ///     });
    /// assert!(run.outcome.is_fail());
    /// assert_eq!(run.sql.len(), 1);
    /// ```
    pub fn sql_error(mut self, error: SqlError) -> Self {
        self.sql_error = Some(error);
        self
    }

    /// Answers the next HTTP request (in call order) with this response; requests beyond the
    /// scripted ones get [`HttpError::Unavailable`].
    pub fn http_response(mut self, response: Response) -> Self {
        self.http_responses.push_back(response);
        self
    }

    /// Answers every HTTP request with this error (the request is still recorded).
    pub fn http_error(mut self, error: HttpError) -> Self {
        self.http_error = Some(error);
        self
    }

    /// Calls `handler` the way a component host does (the world's `handle` export, through the
    /// generated bindings) and reports what it did.
    ///
    /// A panic becomes [`Outcome::Retry`] with the panic message, as a trap does in the host.
    pub fn run<R: IntoOutcome>(self, handler: impl FnOnce(&Message) -> R) -> TestRun {
        let delivery = self.delivery();
        self.call(false, |_| {
            let outcome = rt::handle_delivery(handler, delivery);
            Some(wit::outcome_from_wit(outcome))
        })
    }

    /// Calls `handler` the way an ABI v1 host does (the `worker_handle` export, with the message
    /// read through `worker_v1` imports) and reports what it did: publishes lose their content
    /// type and headers, [`Message::headers`] is `None`, and a retry-after is a plain retry.
    pub fn run_v1<R: IntoOutcome>(self, handler: impl FnOnce(&Message) -> R) -> TestRun {
        self.call(true, |reason| {
            let code = rt::handle(handler);
            let reason = reason().unwrap_or_default();
            Some(match Answer::from_code(code)? {
                Answer::Ok => Outcome::Ok,
                Answer::Retry => Outcome::Retry(reason),
                Answer::Fail => Outcome::Fail(reason),
            })
        })
    }

    /// The world's delivery record for this message.
    fn delivery(&self) -> Delivery {
        let get = |key: &str| self.meta.get(key).cloned();
        let routing_key = get(meta::ROUTING_KEY).unwrap_or_default();
        Delivery {
            body: self.body.clone(),
            original_routing_key: get(meta::ORIGINAL_ROUTING_KEY)
                .unwrap_or_else(|| routing_key.clone()),
            routing_key,
            exchange: get(meta::EXCHANGE).unwrap_or_default(),
            queue: get(meta::QUEUE).unwrap_or_default(),
            message_id: get(meta::MESSAGE_ID),
            correlation_id: get(meta::CORRELATION_ID),
            content_type: get(meta::CONTENT_TYPE),
            timestamp: get(meta::TIMESTAMP).and_then(|t| t.parse().ok()),
            attempt: get(meta::ATTEMPT).and_then(|a| a.parse().ok()).unwrap_or(1),
            redelivered: get(meta::REDELIVERED).is_some_and(|r| r == meta::TRUE),
            headers: self
                .meta
                .iter()
                .filter_map(|(key, value)| {
                    Some(Header {
                        name: key.strip_prefix(meta::HEADER_PREFIX)?.to_owned(),
                        value: value.clone(),
                    })
                })
                .collect(),
        }
    }

    /// Makes this message the thread's host, runs `call` (`None`: no valid answer) and reads back
    /// what the handler did. `call` gets the reason the handler set so far.
    fn call(
        self,
        abi_v1: bool,
        call: impl FnOnce(&dyn Fn() -> Option<String>) -> Option<Outcome>,
    ) -> TestRun {
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
            abi_v1,
            kv: self.kv.into_iter().map(|(k, v)| (k, (v, None))).collect(),
            kv_error: self.kv_error,
            sql_error: self.sql_error,
            sql_rows: self.sql_rows,
            sql_affected: self.sql_affected,
            http_error: self.http_error,
            http_responses: self.http_responses,
            ..Context::default()
        });
        let answer = catch_unwind(AssertUnwindSafe(|| call(&native::reason)));
        let ctx = native::leave().unwrap_or_default();
        let outcome = match answer {
            Ok(Some(outcome)) => outcome,
            // A panic (a trap on wasm), or a code ABI v1 does not know.
            _ => Outcome::Retry(ctx.reason.unwrap_or_else(|| "panicked".to_owned())),
        };
        TestRun {
            outcome,
            publishes: ctx.publishes.into_iter().map(Published::from).collect(),
            logs: ctx
                .logs
                .into_iter()
                .map(|(level, message)| LogLine { level, message })
                .collect(),
            kv_ttl: ctx
                .kv
                .iter()
                .filter_map(|(k, (_, ttl))| Some((k.clone(), (*ttl)?)))
                .collect(),
            kv: ctx.kv.into_iter().map(|(k, (v, _))| (k, v)).collect(),
            sql: ctx.sql_calls,
            http: ctx.http_calls,
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
    /// The key-value store after the call (writes take effect at once, whatever the outcome).
    pub kv: BTreeMap<String, Vec<u8>>,
    /// The TTL of each key last written with one.
    pub kv_ttl: BTreeMap<String, Duration>,
    /// The SQL statements it ran, in order. The host commits them only if the outcome is ok.
    pub sql: Vec<SqlCall>,
    /// The HTTP requests it sent, in order.
    pub http: Vec<Request>,
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
    /// The content type (a component's publishes only).
    pub content_type: Option<String>,
    /// The headers, in order (a component's publishes only).
    pub headers: Vec<(String, String)>,
}

impl From<Outgoing> for Published {
    fn from(out: Outgoing) -> Self {
        Published {
            delay: (!out.delay.is_zero()).then(|| Duration::from_millis(out.delay_ms())),
            exchange: out.exchange,
            routing_key: out.routing_key,
            body: out.body,
            content_type: out.content_type,
            headers: out.headers,
        }
    }
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

#[cfg(test)]
mod component_tests;
