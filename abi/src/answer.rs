//! The handler's answer: what `worker_handle` returns.

use core::fmt;

/// What a handler answers for one message. Any other return value counts as a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Answer {
    /// Done: publish what was buffered, then ack.
    Ok = 0,
    /// Try again later.
    Retry = 1,
    /// Give up: park the message in `<queue>@failed`.
    Fail = 2,
}

impl Answer {
    /// Every answer, by code.
    pub const ALL: [Answer; 3] = [Answer::Ok, Answer::Retry, Answer::Fail];

    /// The code `worker_handle` returns.
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// The answer for a code; `None` for a code ABI v1 does not define.
    pub const fn from_code(code: i32) -> Option<Answer> {
        match code {
            0 => Some(Answer::Ok),
            1 => Some(Answer::Retry),
            2 => Some(Answer::Fail),
            _ => None,
        }
    }

    /// Every answer as `0 ok, 1 retry, 2 fail`, for messages about a bad answer.
    pub fn list() -> impl fmt::Display {
        List
    }

    /// Its one-word name: `ok`, `retry`, `fail`.
    pub const fn name(self) -> &'static str {
        match self {
            Answer::Ok => "ok",
            Answer::Retry => "retry",
            Answer::Fail => "fail",
        }
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Every answer as `0 ok, 1 retry, 2 fail` (see [`Answer::list`]).
struct List;

impl fmt::Display for List {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, a) in Answer::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{} {}", a.code(), a.name())?;
        }
        Ok(())
    }
}
