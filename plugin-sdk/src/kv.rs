//! Key-value state in the store the subscription is granted (`kv = "NAME"` in worker.toml): the
//! component world's `kv` interface. Writes take effect at once; they are not undone by a retry or
//! fail. Components only (ABI v1 has no key-value calls).
//!
//! ```
//! use worker_plugin_sdk::{Error, Message, kv, testing::TestMessage};
//!
//! fn handle(msg: &Message) -> Result<(), Error> {
//!     let seen = kv::increment(&format!("seen:{}", msg.routing_key()), 1)?;
//!     if seen > 1 {
//!         worker_plugin_sdk::info!("seen {seen} times");
//!     }
//!     Ok(())
//! }
//!
//! let run = TestMessage::new("").routing_key("a").kv("seen:a", "4").run(handle);
//! assert!(run.logged("seen 5 times"));
//! assert_eq!(run.kv["seen:a"], b"5");
//! ```

use std::fmt;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{Error, sys};

/// Why a key-value call failed: the world's `kv-error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvError {
    /// The subscription has no `kv` grant.
    Denied,
    /// The store cannot be reached now, with the host's reason.
    Unavailable(String),
    /// The value is larger than the store takes.
    TooLarge,
    /// The key is empty or otherwise not one the store takes.
    InvalidKey,
}

impl fmt::Display for KvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KvError::Denied => f.write_str("kv: denied (the subscription has no kv grant)"),
            KvError::Unavailable(why) => write!(f, "kv: unavailable: {why}"),
            KvError::TooLarge => f.write_str("kv: value too large"),
            KvError::InvalidKey => f.write_str("kv: invalid key"),
        }
    }
}

impl std::error::Error for KvError {}

/// A missing grant or an unreachable store is fixed outside the message, so those retry; a value
/// or key the store refuses stays refused, so those fail.
impl From<KvError> for Error {
    fn from(e: KvError) -> Self {
        match e {
            KvError::Denied | KvError::Unavailable(_) => Error::retry(e),
            KvError::TooLarge | KvError::InvalidKey => Error::fail(e),
        }
    }
}

/// The value of `key`, or `None` if absent.
pub fn get(key: &str) -> Result<Option<Vec<u8>>, KvError> {
    sys::kv_get(key)
}

/// The value of `key` parsed as JSON, or `None` if absent. A stored value that does not parse
/// fails the message.
///
/// ```
/// use worker_plugin_sdk::{Error, Message, kv, testing::TestMessage};
///
/// #[derive(serde::Serialize, serde::Deserialize, Default)]
/// struct Tally { n: u32 }
///
/// fn handle(_: &Message) -> Result<(), Error> {
///     let mut tally: Tally = kv::get_json("tally")?.unwrap_or_default();
///     tally.n += 1;
///     kv::set_json("tally", &tally)?;
///     Ok(())
/// }
///
/// let run = TestMessage::new("").kv("tally", r#"{"n":2}"#).run(handle);
/// assert_eq!(run.kv["tally"], br#"{"n":3}"#);
/// ```
pub fn get_json<T: DeserializeOwned>(key: &str) -> Result<Option<T>, Error> {
    match get(key)? {
        None => Ok(None),
        Some(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            Error::fail(format_args!(
                "kv: value of {key:?} is not the JSON expected: {e}"
            ))
        }),
    }
}

/// Sets `key` to `value`, without expiry.
pub fn set(key: &str, value: impl AsRef<[u8]>) -> Result<(), KvError> {
    sys::kv_set(key, value.as_ref(), None)
}

/// Sets `key` to `value`; the store drops it after `ttl` (whole milliseconds, at least one).
pub fn set_with_ttl(key: &str, value: impl AsRef<[u8]>, ttl: Duration) -> Result<(), KvError> {
    sys::kv_set(key, value.as_ref(), Some(ttl_ms(ttl)))
}

/// Sets `key` to `value` serialized as JSON, without expiry.
pub fn set_json<T: Serialize + ?Sized>(key: &str, value: &T) -> Result<(), Error> {
    let bytes = serde_json::to_vec(value).map_err(|e| {
        Error::fail(format_args!(
            "kv: cannot serialize the value of {key:?}: {e}"
        ))
    })?;
    Ok(set(key, bytes)?)
}

/// Removes `key`; whether it existed.
pub fn delete(key: &str) -> Result<bool, KvError> {
    sys::kv_delete(key)
}

/// Adds `delta` to the integer stored at `key` (an absent key counts as 0) and returns the new
/// value.
pub fn increment(key: &str, delta: i64) -> Result<i64, KvError> {
    sys::kv_increment(key, delta)
}

/// Writes `value` only if the current value equals `expected` (`None`: only if the key is
/// absent); whether it wrote. `ttl` as in [`set_with_ttl`].
///
/// ```
/// use worker_plugin_sdk::{kv, testing::TestMessage};
///
/// TestMessage::new("").kv("lock", "a").run(|_: &_| {
///     assert_eq!(kv::compare_and_swap("lock", None, "b", None), Ok(false));
///     assert_eq!(kv::compare_and_swap("lock", Some(b"a"), "b", None), Ok(true));
/// });
/// ```
pub fn compare_and_swap(
    key: &str,
    expected: Option<&[u8]>,
    value: impl AsRef<[u8]>,
    ttl: Option<Duration>,
) -> Result<bool, KvError> {
    sys::kv_compare_and_swap(key, expected, value.as_ref(), ttl.map(ttl_ms))
}

/// A TTL in whole milliseconds: rounded up from below one, since 0 would mean "expired".
fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}
