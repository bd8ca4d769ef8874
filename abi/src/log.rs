//! Log levels of the `log` import.

use core::fmt;

/// How important a log line is. Codes below 0 count as trace, above 4 as error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(i32)]
pub enum LogLevel {
    /// Very detailed tracing.
    Trace = 0,
    /// Debugging detail.
    Debug = 1,
    /// Normal progress.
    Info = 2,
    /// Something odd that was handled.
    Warn = 3,
    /// Something went wrong.
    Error = 4,
}

impl LogLevel {
    /// Every level, by code.
    pub const ALL: [LogLevel; 5] = [
        LogLevel::Trace,
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Warn,
        LogLevel::Error,
    ];

    /// The code passed to `log`.
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// The level of a code; out-of-range codes clamp to the nearest level.
    pub const fn from_code(code: i32) -> LogLevel {
        match code {
            i32::MIN..=0 => LogLevel::Trace,
            1 => LogLevel::Debug,
            2 => LogLevel::Info,
            3 => LogLevel::Warn,
            _ => LogLevel::Error,
        }
    }

    /// Its lowercase name: `trace` .. `error`.
    pub const fn name(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }

    /// Every level as `0 trace, 1 debug, 2 info, 3 warn, 4 error`.
    pub fn list() -> impl fmt::Display {
        List
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

struct List;

impl fmt::Display for List {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, l) in LogLevel::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{} {}", l.code(), l.name())?;
        }
        Ok(())
    }
}
