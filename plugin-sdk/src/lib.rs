//! Write worker-host plugins as plain Rust functions.
//!
//! A plugin is a function from a [`Message`] to an [`Outcome`] (or to `Result<(), Error>`, so
//! `?` works). [`handler!`] exports it under plugin ABI v1; the SDK does the pointer work, so a
//! plugin needs no `unsafe`. The same code builds natively, where [`testing`] calls the handler
//! with a made-up message and returns its answer, publishes and log lines for plain `cargo test`.
//!
//! ```
//! use serde::Deserialize;
//! use worker_plugin_sdk::{Error, Message, config, info, publish_json};
//!
//! #[derive(Deserialize, Default)]
//! #[serde(default)]
//! struct Config { exchange: Option<String> }
//!
//! #[derive(Deserialize)]
//! struct SignUp { id: u64, email: String }
//!
//! fn greet(msg: &Message) -> Result<(), Error> {
//!     let cfg: Config = config()?;               // refused config: retry
//!     let user: SignUp = msg.json()?;            // malformed JSON: fail
//!     info!("user {} signed up as {}", user.id, user.email);
//!     let exchange = cfg.exchange.as_deref().unwrap_or("master");
//!     publish_json(exchange, "mail.welcome", &serde_json::json!({ "to": user.email }))?;
//!     Ok(())
//! }
//!
//! worker_plugin_sdk::handler!(greet);
//!
//! // Natively, in a #[test]:
//! use worker_plugin_sdk::testing::TestMessage;
//! let run = TestMessage::json(&serde_json::json!({"id": 7, "email": "a@b.c"}))
//!     .routing_key("user.created")
//!     .run(greet);
//! assert!(run.outcome.is_ok());
//! assert_eq!(run.publishes[0].routing_key, "mail.welcome");
//! assert!(run.logged("user 7 signed up"));
//! ```
//!
//! Build for `wasm32-unknown-unknown` as a `cdylib` with `panic = "abort"`; a panic then records
//! its message as the reason and traps, which the host counts as a retry.

#![deny(missing_docs)]

mod config;
mod logging;
mod message;
mod outcome;
mod publish;
mod sys;
#[cfg(not(target_family = "wasm"))]
pub mod testing;

#[doc(hidden)]
pub mod rt;

pub use config::{ConfigError, config};
pub use logging::{Level, log};
pub use message::Message;
pub use outcome::{Error, IntoOutcome, Outcome, ResultExt};
pub use publish::{PublishError, publish, publish_delayed, publish_json};

/// Re-exported so plugins can use `serde_json::json!` and `Value` without their own dependency.
pub use serde_json;

/// The names and numbers of ABI v1, shared with the host: answer, log level and publish codes,
/// meta keys, limits.
pub use worker_abi as abi;

/// Exports a function as the plugin's handler under ABI v1.
///
/// The function takes `&Message` and returns an [`Outcome`], `()`, or `Result<(), E>` /
/// `Result<Outcome, E>` where `E: Into<Error>`. On wasm this defines the `worker_abi_v1` and
/// `worker_handle` exports; natively it only type-checks the handler, so test binaries of several
/// plugins never clash. Use it once per plugin crate.
///
/// ```
/// use worker_plugin_sdk::{Message, Outcome};
///
/// fn handle(msg: &Message) -> Outcome {
///     if msg.body().is_empty() { Outcome::fail("empty body") } else { Outcome::Ok }
/// }
///
/// worker_plugin_sdk::handler!(handle);
/// ```
#[macro_export]
macro_rules! handler {
    ($handler:path) => {
        #[cfg(target_family = "wasm")]
        const _: () = {
            /// ABI v1 marker: the host refuses modules without it. The export names are literals
            /// (Rust needs them so); `sys` tests check them against `abi::export`.
            #[unsafe(no_mangle)]
            pub extern "C" fn worker_abi_v1() {}

            /// Handles the current message: 0 ok, 1 retry, 2 fail.
            #[unsafe(no_mangle)]
            pub extern "C" fn worker_handle() -> i32 {
                $crate::rt::handle($handler)
            }
        };
        #[cfg(not(target_family = "wasm"))]
        const _: fn() -> i32 = || $crate::rt::handle($handler);
    };
}
