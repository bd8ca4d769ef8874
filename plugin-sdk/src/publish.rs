//! Publishing from a handler. The host only buffers: messages go out (confirmed) when the handler
//! answers ok, before the input is acked, and are dropped on retry or fail.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::{Error, sys};

/// Why the host refused a publish.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PublishError {
    /// The exchange is not in the subscription's `publish` list (code -1).
    ExchangeNotAllowed(String),
    /// Too many or too large publishes for one call (code -2).
    LimitExceeded,
    /// The delay was refused: no `[delay]` configured, or too long (code -3).
    DelayRefused,
    /// The host rejected an argument, e.g. an over-long routing key (code -4).
    BadArgument,
    /// Another negative code, from a newer host.
    Refused(i32),
    /// The value could not be serialized to JSON ([`publish_json`]).
    Serialize(String),
}

impl PublishError {
    fn from_code(code: i32, exchange: &str) -> Self {
        match code {
            -1 => PublishError::ExchangeNotAllowed(exchange.to_owned()),
            -2 => PublishError::LimitExceeded,
            -3 => PublishError::DelayRefused,
            -4 => PublishError::BadArgument,
            other => PublishError::Refused(other),
        }
    }
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublishError::ExchangeNotAllowed(ex) => {
                write!(
                    f,
                    "publish refused: exchange {ex:?} is not in this subscription's `publish` list"
                )
            }
            PublishError::LimitExceeded => {
                f.write_str("publish refused: too many or too large messages")
            }
            PublishError::DelayRefused => {
                f.write_str("publish refused: delay not available or too long")
            }
            PublishError::BadArgument => f.write_str("publish refused: bad argument"),
            PublishError::Refused(code) => write!(f, "publish refused (code {code})"),
            PublishError::Serialize(e) => write!(f, "publish: cannot serialize body: {e}"),
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
    publish_raw(exchange, routing_key, body.as_ref(), 0)
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
    let mut ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
    if ms == 0 && !delay.is_zero() {
        ms = 1;
    }
    publish_raw(exchange, routing_key, body.as_ref(), ms)
}

/// Like [`publish`], with `value` serialized as the JSON body.
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
/// ```
pub fn publish_json<T: Serialize + ?Sized>(
    exchange: &str,
    routing_key: &str,
    value: &T,
) -> Result<(), PublishError> {
    let body = serde_json::to_vec(value).map_err(|e| PublishError::Serialize(e.to_string()))?;
    publish_raw(exchange, routing_key, &body, 0)
}

fn publish_raw(
    exchange: &str,
    routing_key: &str,
    body: &[u8],
    delay_ms: i64,
) -> Result<(), PublishError> {
    match sys::publish(exchange, routing_key, body, delay_ms) {
        code if code >= 0 => Ok(()),
        code => Err(PublishError::from_code(code, exchange)),
    }
}
