//! The subscription's `[subscription.config]` table, handed to the plugin as JSON.

use std::fmt;

use serde::de::DeserializeOwned;

use crate::{Error, sys};

/// The config did not match the type the plugin asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad plugin config: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

/// A config mistake is fixed in worker.toml, not in the message, so the message retries.
impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Self {
        Error::retry(e)
    }
}

/// The subscription's config, deserialized into `T`. A subscription without config reads as an
/// empty table, so a `#[serde(default)]` struct gets its defaults.
///
/// ```
/// use worker_plugin_sdk::{Error, Message, config, testing::TestMessage};
///
/// #[derive(serde::Deserialize)]
/// #[serde(default)]
/// struct Config { greeting: String }
/// impl Default for Config {
///     fn default() -> Self { Config { greeting: "hello".into() } }
/// }
///
/// fn handle(_msg: &Message) -> Result<(), Error> {
///     let cfg: Config = config()?;
///     worker_plugin_sdk::info!("{}", cfg.greeting);
///     Ok(())
/// }
///
/// let run = TestMessage::new("").config(serde_json::json!({"greeting": "hi"})).run(handle);
/// assert!(run.logged("hi"));
/// assert!(TestMessage::new("").run(handle).logged("hello"));
/// ```
pub fn config<T: DeserializeOwned>() -> Result<T, ConfigError> {
    let raw = sys::config().unwrap_or_default();
    let text = std::str::from_utf8(&raw)
        .map_err(|e| ConfigError(e.to_string()))?
        .trim();
    let text = if text.is_empty() || text == "null" {
        "{}"
    } else {
        text
    };
    serde_json::from_str(text).map_err(|e| ConfigError(e.to_string()))
}
