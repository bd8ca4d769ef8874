//! Publishing from a handler. The host only buffers: messages go out (confirmed) when the handler
//! answers ok, before the input is acked, and are dropped on retry or fail.

use std::fmt;
use std::time::Duration;

use serde::Serialize;
use worker_abi::{PUBLISH_ACCEPTED, PublishRefusal};

use crate::{Error, sys};

/// Why a publish was refused. Every variant but [`PublishError::Serialize`] is the host's answer;
/// the ABI code of each is [`PublishError::code`].
///
/// ```
/// use worker_plugin_sdk::{PublishError, publish, testing::TestMessage};
/// use worker_plugin_sdk::abi::PublishRefusal;
///
/// TestMessage::new("").refuse_publish(PublishRefusal::TooManyMessages).run(|_: &_| {
///     assert_eq!(publish("master", "k", "x"), Err(PublishError::TooManyMessages));
/// });
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PublishError {
    /// The exchange is not in the subscription's `publish` list.
    ExchangeNotAllowed(String),
    /// The delay was refused: delayed delivery is not enabled (`[delay]` in worker.toml), or the
    /// delay is longer than its maximum.
    DelayRefused,
    /// More messages than the subscription allows per call (by default
    /// [`MAX_PUBLISHES`](crate::abi::limits::MAX_PUBLISHES)).
    TooManyMessages,
    /// More bytes, routing keys plus bodies, than the subscription allows per call (by default
    /// [`MAX_PUBLISH_BYTES`](crate::abi::limits::MAX_PUBLISH_BYTES)).
    TooManyBytes,
    /// The exchange or routing key is longer than
    /// [`MAX_NAME_LEN`](crate::abi::limits::MAX_NAME_LEN) bytes.
    Invalid,
    /// A refusal code this SDK does not know, from a newer host.
    Other(i32),
    /// The value could not be serialized to JSON ([`publish_json`]); the host was not called.
    Serialize(String),
}

impl PublishError {
    /// The error for what the host's `publish` returned for a publish to `exchange`; `None` when
    /// the code means accepted.
    ///
    /// ```
    /// use worker_plugin_sdk::PublishError;
    ///
    /// assert_eq!(PublishError::from_code(0, "master"), None);
    /// assert_eq!(PublishError::from_code(-2, "master"), Some(PublishError::DelayRefused));
    /// assert_eq!(PublishError::from_code(-99, "master"), Some(PublishError::Other(-99)));
    /// ```
    pub fn from_code(code: i32, exchange: &str) -> Option<PublishError> {
        if code >= PUBLISH_ACCEPTED {
            return None;
        }
        Some(match PublishRefusal::from_code(code) {
            Some(PublishRefusal::ExchangeNotAllowed) => {
                PublishError::ExchangeNotAllowed(exchange.to_owned())
            }
            Some(PublishRefusal::DelayRefused) => PublishError::DelayRefused,
            Some(PublishRefusal::TooManyMessages) => PublishError::TooManyMessages,
            Some(PublishRefusal::TooManyBytes) => PublishError::TooManyBytes,
            Some(PublishRefusal::Invalid) => PublishError::Invalid,
            None => PublishError::Other(code),
        })
    }

    /// The host's refusal, if it is one this SDK knows.
    pub fn refusal(&self) -> Option<PublishRefusal> {
        match self {
            PublishError::ExchangeNotAllowed(_) => Some(PublishRefusal::ExchangeNotAllowed),
            PublishError::DelayRefused => Some(PublishRefusal::DelayRefused),
            PublishError::TooManyMessages => Some(PublishRefusal::TooManyMessages),
            PublishError::TooManyBytes => Some(PublishRefusal::TooManyBytes),
            PublishError::Invalid => Some(PublishRefusal::Invalid),
            PublishError::Other(_) | PublishError::Serialize(_) => None,
        }
    }

    /// The error's name in the component world's `publish-error` (`not-allowed`, `delay-refused`,
    /// `too-many`, `too-large`, `invalid`); `other` and `serialize` for the two that are not the
    /// host's.
    ///
    /// ```
    /// use worker_plugin_sdk::PublishError;
    ///
    /// assert_eq!(PublishError::ExchangeNotAllowed("x".into()).name(), "not-allowed");
    /// ```
    pub fn name(&self) -> &'static str {
        match self {
            PublishError::ExchangeNotAllowed(_) => "not-allowed",
            PublishError::DelayRefused => "delay-refused",
            PublishError::TooManyMessages => "too-many",
            PublishError::TooManyBytes => "too-large",
            PublishError::Invalid => "invalid",
            PublishError::Other(_) => "other",
            PublishError::Serialize(_) => "serialize",
        }
    }

    /// The code the host returned; `None` for [`PublishError::Serialize`].
    pub fn code(&self) -> Option<i32> {
        match self {
            PublishError::Other(code) => Some(*code),
            other => other.refusal().map(PublishRefusal::code),
        }
    }
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self, self.refusal()) {
            (PublishError::ExchangeNotAllowed(ex), Some(r)) => write!(
                f,
                "publish to {ex:?} refused ({}): {}",
                r.code(),
                r.description()
            ),
            (_, Some(r)) => write!(f, "publish refused ({}): {}", r.code(), r.description()),
            (PublishError::Serialize(e), None) => write!(f, "publish: cannot serialize body: {e}"),
            (other, None) => match other.code() {
                Some(code) => write!(f, "publish refused (code {code})"),
                None => f.write_str("publish refused"),
            },
        }
    }
}

impl std::error::Error for PublishError {}

/// A refusal is usually configuration (fixable without touching the message), so it retries.
impl From<PublishError> for Error {
    fn from(e: PublishError) -> Self {
        Error::retry(e)
    }
}

/// One message to publish: the exchange, routing key and body, with the properties the component
/// world also carries (content type, headers) and an optional delay.
///
/// [`publish`], [`publish_json`] and [`publish_delayed`] cover the common cases; this builder is
/// for the rest. Under ABI v1 the host takes no content type or headers: there they are dropped.
///
/// ```
/// use std::time::Duration;
/// use worker_plugin_sdk::{Error, Message, Outgoing, testing::TestMessage};
///
/// fn handle(msg: &Message) -> Result<(), Error> {
///     Outgoing::new("master", "audit.seen", msg.body())
///         .content_type("text/plain")
///         .header("tenant", "acme")
///         .delay(Duration::from_secs(5))
///         .publish()?;
///     Ok(())
/// }
///
/// let run = TestMessage::new("x").run(handle);
/// let sent = &run.publishes[0];
/// assert_eq!(sent.content_type.as_deref(), Some("text/plain"));
/// assert_eq!(sent.headers, [("tenant".to_owned(), "acme".to_owned())]);
/// assert_eq!(sent.delay, Some(Duration::from_secs(5)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Outgoing {
    pub(crate) exchange: String,
    pub(crate) routing_key: String,
    pub(crate) body: Vec<u8>,
    pub(crate) content_type: Option<String>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) delay: Duration,
}

impl Outgoing {
    /// A message with this body, no properties, published at once.
    pub fn new(
        exchange: impl Into<String>,
        routing_key: impl Into<String>,
        body: impl Into<Vec<u8>>,
    ) -> Self {
        Outgoing {
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            body: body.into(),
            content_type: None,
            headers: Vec::new(),
            delay: Duration::ZERO,
        }
    }

    /// A message whose body is `value` as JSON, with content type `application/json`.
    pub fn json<T: Serialize + ?Sized>(
        exchange: impl Into<String>,
        routing_key: impl Into<String>,
        value: &T,
    ) -> Result<Self, PublishError> {
        let body = serde_json::to_vec(value).map_err(|e| PublishError::Serialize(e.to_string()))?;
        Ok(Outgoing::new(exchange, routing_key, body).content_type(JSON))
    }

    /// Sets the `content_type` property.
    pub fn content_type(mut self, content_type: impl Into<String>) -> Self {
        self.content_type = Some(content_type.into());
        self
    }

    /// Adds an AMQP header (a text value).
    pub fn header(mut self, name: impl Into<String>, value: impl ToString) -> Self {
        self.headers.push((name.into(), value.to_string()));
        self
    }

    /// Delivers it after `delay` (needs `[delay]` in worker.toml). Below one millisecond rounds up
    /// to one; [`Duration::ZERO`] (the default) publishes at once.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Asks the host to publish it once this call answers ok.
    pub fn publish(self) -> Result<(), PublishError> {
        sys::publish(&self)
    }

    /// The delay in whole milliseconds, rounded up from below one; 0 for none.
    pub(crate) fn delay_ms(&self) -> u64 {
        let ms = u64::try_from(self.delay.as_millis()).unwrap_or(u64::MAX);
        if ms == 0 && !self.delay.is_zero() {
            1
        } else {
            ms
        }
    }
}

/// The content type [`publish_json`] and [`Outgoing::json`] set.
const JSON: &str = "application/json";

/// Asks the host to publish `body` to `exchange` with `routing_key` once this call answers ok.
///
/// ```
/// use worker_plugin_sdk::{Error, Message, publish, testing::TestMessage};
///
/// fn handle(msg: &Message) -> Result<(), Error> {
///     publish("master", "audit.seen", msg.body())?;
///     Ok(())
/// }
///
/// let run = TestMessage::new("x").allow_publish(["master"]).run(handle);
/// assert_eq!(run.publishes[0].routing_key, "audit.seen");
/// ```
pub fn publish(
    exchange: &str,
    routing_key: &str,
    body: impl AsRef<[u8]>,
) -> Result<(), PublishError> {
    Outgoing::new(exchange, routing_key, body.as_ref()).publish()
}

/// Like [`publish`], delivered after `delay` (needs `[delay]` in worker.toml). Below one
/// millisecond rounds up to one; [`Duration::ZERO`] publishes at once.
///
/// ```
/// use std::time::Duration;
/// use worker_plugin_sdk::{Error, Message, publish_delayed, testing::TestMessage};
///
/// fn handle(_msg: &Message) -> Result<(), Error> {
///     publish_delayed("master", "reminder.send", "{}", Duration::from_secs(3600))?;
///     Ok(())
/// }
///
/// let run = TestMessage::new("").run(handle);
/// assert_eq!(run.publishes[0].delay, Some(Duration::from_secs(3600)));
/// ```
pub fn publish_delayed(
    exchange: &str,
    routing_key: &str,
    body: impl AsRef<[u8]>,
    delay: Duration,
) -> Result<(), PublishError> {
    Outgoing::new(exchange, routing_key, body.as_ref())
        .delay(delay)
        .publish()
}

/// Like [`publish`], with `value` serialized as the JSON body and content type
/// `application/json`.
///
/// ```
/// use worker_plugin_sdk::{Error, Message, publish_json, testing::TestMessage};
///
/// fn handle(_msg: &Message) -> Result<(), Error> {
///     publish_json("master", "user.greeted", &serde_json::json!({"id": 1}))?;
///     Ok(())
/// }
///
/// let run = TestMessage::new("").run(handle);
/// let body: serde_json::Value = run.publishes[0].json().unwrap();
/// assert_eq!(body["id"], 1);
/// assert_eq!(run.publishes[0].content_type.as_deref(), Some("application/json"));
/// ```
pub fn publish_json<T: Serialize + ?Sized>(
    exchange: &str,
    routing_key: &str,
    value: &T,
) -> Result<(), PublishError> {
    Outgoing::json(exchange, routing_key, value)?.publish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/abi.md names the variant of each code; the names must be this enum's.
    #[test]
    fn docs_name_each_refusal_by_its_variant() {
        let doc = include_str!("../../docs/abi.md")
            .split_whitespace()
            .collect::<Vec<_>>();
        let doc = doc.join(" ");
        for refusal in PublishRefusal::ALL {
            let err = PublishError::from_code(refusal.code(), "x").expect("a refusal");
            let debug = format!("{err:?}");
            let variant = debug.split('(').next().unwrap_or_default();
            let named = format!("`{}` `{variant}`", refusal.code());
            assert!(doc.contains(&named), "docs/abi.md does not say {named}");
        }
        assert!(doc.contains("`Other(code)`"));
    }
}
