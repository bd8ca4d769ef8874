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
    let code = sys::publish(exchange, routing_key, body, delay_ms);
    PublishError::from_code(code, exchange).map_or(Ok(()), Err)
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
