//! What a handler answers: [`Outcome`], and the [`Error`] that `?` turns into a retry or a fail.

use std::fmt;
use std::time::Duration;

use worker_abi::Answer;

/// A handler's answer for one message.
///
/// The host acks on [`Outcome::Ok`] (after publishing what the handler asked to publish),
/// redelivers later on [`Outcome::Retry`] (or [`Outcome::RetryAfter`]) and parks the message in
/// `<queue>@failed` on [`Outcome::Fail`]. The reason is recorded in the `worker-error` header.
///
/// ```
/// use std::time::Duration;
/// use worker_plugin_sdk::Outcome;
///
/// let outcome = Outcome::retry("stock service busy");
/// assert_eq!(outcome.reason(), Some("stock service busy"));
/// assert_eq!(outcome.code(), 1);
///
/// let later = Outcome::retry_after("rate limited", Duration::from_secs(30));
/// assert!(later.is_retry());
/// assert_eq!(later.retry_delay(), Some(Duration::from_secs(30)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Outcome {
    /// Done: ack the message.
    Ok,
    /// Try again later, with the cause (a transient problem); the subscription's `retry_delays`
    /// say when.
    Retry(String),
    /// Try again no sooner than this, with the cause: the component world's `retry-request` with
    /// `after-ms` (the host brings the message back through its delay levels). ABI v1 has no such
    /// answer: there it is a plain [`Outcome::Retry`], with a warning logged.
    RetryAfter(String, Duration),
    /// Give up and park the message for a person, with the cause (retrying cannot help).
    Fail(String),
}

impl Outcome {
    /// A retry with this reason.
    pub fn retry(reason: impl Into<String>) -> Self {
        Outcome::Retry(reason.into())
    }

    /// A retry with this reason, no sooner than `after` (rounded up to whole milliseconds).
    pub fn retry_after(reason: impl Into<String>, after: Duration) -> Self {
        Outcome::RetryAfter(reason.into(), after)
    }

    /// A fail with this reason.
    pub fn fail(reason: impl Into<String>) -> Self {
        Outcome::Fail(reason.into())
    }

    /// The ABI answer code: 0 ok, 1 retry, 2 fail.
    pub fn code(&self) -> i32 {
        self.answer().code()
    }

    /// The ABI answer, without the reason.
    pub fn answer(&self) -> Answer {
        match self {
            Outcome::Ok => Answer::Ok,
            Outcome::Retry(_) | Outcome::RetryAfter(..) => Answer::Retry,
            Outcome::Fail(_) => Answer::Fail,
        }
    }

    /// The reason of a retry or fail.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Outcome::Ok => None,
            Outcome::Retry(r) | Outcome::RetryAfter(r, _) | Outcome::Fail(r) => Some(r),
        }
    }

    /// The delay of an [`Outcome::RetryAfter`].
    pub fn retry_delay(&self) -> Option<Duration> {
        match self {
            Outcome::RetryAfter(_, after) => Some(*after),
            _ => None,
        }
    }

    /// Whether this is [`Outcome::Ok`].
    pub fn is_ok(&self) -> bool {
        matches!(self, Outcome::Ok)
    }

    /// Whether this is [`Outcome::Retry`] or [`Outcome::RetryAfter`].
    pub fn is_retry(&self) -> bool {
        matches!(self, Outcome::Retry(_) | Outcome::RetryAfter(..))
    }

    /// Whether this is [`Outcome::Fail`].
    pub fn is_fail(&self) -> bool {
        matches!(self, Outcome::Fail(_))
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok => f.write_str("ok"),
            Outcome::Retry(r) => write!(f, "retry: {r}"),
            Outcome::RetryAfter(r, after) => write!(f, "retry after {after:?}: {r}"),
            Outcome::Fail(r) => write!(f, "fail: {r}"),
        }
    }
}

/// A handler error that knows whether retrying can help.
///
/// Handlers returning `Result<(), Error>` can use `?` on SDK calls: a malformed JSON body fails
/// the message, a refused publish or an unreadable config retries it. Other errors pick a side
/// with [`ResultExt::or_retry`] / [`ResultExt::or_fail`], or [`Error::retry`] / [`Error::fail`].
///
/// ```
/// use worker_plugin_sdk::{Error, Outcome};
///
/// let err = Error::fail("no order id");
/// assert_eq!(Outcome::from(err), Outcome::fail("no order id"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    retry: bool,
    reason: String,
    /// For a retry: no sooner than this.
    after: Option<Duration>,
}

impl Error {
    /// An error that retries the message.
    pub fn retry(reason: impl fmt::Display) -> Self {
        Error {
            retry: true,
            reason: reason.to_string(),
            after: None,
        }
    }

    /// An error that retries the message no sooner than `after` ([`Outcome::RetryAfter`]).
    pub fn retry_after(reason: impl fmt::Display, after: Duration) -> Self {
        Error {
            retry: true,
            reason: reason.to_string(),
            after: Some(after),
        }
    }

    /// An error that parks the message as failed.
    pub fn fail(reason: impl fmt::Display) -> Self {
        Error {
            retry: false,
            reason: reason.to_string(),
            after: None,
        }
    }

    /// Whether this error retries the message (otherwise it fails it).
    pub fn is_retry(&self) -> bool {
        self.retry
    }

    /// The reason recorded with the message.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for Error {}

impl From<Error> for Outcome {
    fn from(e: Error) -> Self {
        if e.retry {
            match e.after {
                Some(after) => Outcome::RetryAfter(e.reason, after),
                None => Outcome::Retry(e.reason),
            }
        } else {
            Outcome::Fail(e.reason)
        }
    }
}

/// A malformed body or value never gets better by retrying.
impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::fail(format_args!("malformed JSON: {e}"))
    }
}

impl From<std::str::Utf8Error> for Error {
    fn from(e: std::str::Utf8Error) -> Self {
        Error::fail(format_args!("body is not UTF-8: {e}"))
    }
}

/// Picks retry or fail for any error, so `?` works on it in a handler.
///
/// ```
/// use worker_plugin_sdk::{Error, ResultExt};
///
/// fn parse(text: &str) -> Result<u32, Error> {
///     Ok(text.parse::<u32>().or_fail()?)
/// }
/// assert!(!parse("x").unwrap_err().is_retry());
/// ```
pub trait ResultExt<T> {
    /// On error, retry the message with the error as reason.
    fn or_retry(self) -> Result<T, Error>;
    /// On error, fail the message with the error as reason.
    fn or_fail(self) -> Result<T, Error>;
}

impl<T, E: fmt::Display> ResultExt<T> for Result<T, E> {
    fn or_retry(self) -> Result<T, Error> {
        self.map_err(Error::retry)
    }

    fn or_fail(self) -> Result<T, Error> {
        self.map_err(Error::fail)
    }
}

/// What a handler function may return: [`Outcome`], `()` (always ok), or `Result<(), E>` /
/// `Result<Outcome, E>` with `E: Into<Error>`.
pub trait IntoOutcome {
    /// The answer to give the host.
    fn into_outcome(self) -> Outcome;
}

impl IntoOutcome for Outcome {
    fn into_outcome(self) -> Outcome {
        self
    }
}

impl IntoOutcome for () {
    fn into_outcome(self) -> Outcome {
        Outcome::Ok
    }
}

impl<E: Into<Error>> IntoOutcome for Result<(), E> {
    fn into_outcome(self) -> Outcome {
        match self {
            Ok(()) => Outcome::Ok,
            Err(e) => e.into().into(),
        }
    }
}

impl<E: Into<Error>> IntoOutcome for Result<Outcome, E> {
    fn into_outcome(self) -> Outcome {
        self.unwrap_or_else(|e| e.into().into())
    }
}
