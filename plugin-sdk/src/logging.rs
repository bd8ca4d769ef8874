//! Log lines, which the host writes to its own log tagged with the plugin and the message.

use crate::sys;

/// How important a log line is: [`abi::LogLevel`](crate::abi::LogLevel), under its SDK name.
pub use worker_abi::LogLevel as Level;

/// Writes one log line. The macros [`info!`](crate::info) and friends format and call this.
///
/// ```
/// use worker_plugin_sdk::{Level, log};
/// log(Level::Info, "started");
/// ```
pub fn log(level: Level, message: &str) {
    sys::log(level, message);
}

/// Logs at [`Level::Trace`] with `format!` syntax.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)+) => { $crate::log($crate::Level::Trace, &::std::format!($($arg)+)) };
}

/// Logs at [`Level::Debug`] with `format!` syntax.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => { $crate::log($crate::Level::Debug, &::std::format!($($arg)+)) };
}

/// Logs at [`Level::Info`] with `format!` syntax.
///
/// ```
/// let user = 42;
/// worker_plugin_sdk::info!("user {user} signed up");
/// ```
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log($crate::Level::Info, &::std::format!($($arg)+)) };
}

/// Logs at [`Level::Warn`] with `format!` syntax.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log($crate::Level::Warn, &::std::format!($($arg)+)) };
}

/// Logs at [`Level::Error`] with `format!` syntax.
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => { $crate::log($crate::Level::Error, &::std::format!($($arg)+)) };
}
