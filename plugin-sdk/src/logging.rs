//! Log lines, which the host writes to its own log tagged with the plugin and the message.

use crate::sys;

/// How important a log line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very detailed tracing (ABI level 0).
    Trace = 0,
    /// Debugging detail (1).
    Debug = 1,
    /// Normal progress (2).
    Info = 2,
    /// Something odd that was handled (3).
    Warn = 3,
    /// Something went wrong (4).
    Error = 4,
}

impl Level {
    /// The level for an ABI code; out-of-range codes clamp to the nearest level.
    pub fn from_code(code: i32) -> Level {
        match code {
            i32::MIN..=0 => Level::Trace,
            1 => Level::Debug,
            2 => Level::Info,
            3 => Level::Warn,
            _ => Level::Error,
        }
    }
}

/// Writes one log line. The macros [`info!`](crate::info) and friends format and call this.
///
/// ```
/// use worker_plugin_sdk::{Level, log};
/// log(Level::Info, "started");
/// ```
pub fn log(level: Level, message: &str) {
    sys::log(level as i32, message);
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
