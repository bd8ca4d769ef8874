//! What the `publish` import returns: accepted, or why the host refused.

use core::fmt;

/// `publish` buffered the message.
pub const PUBLISH_ACCEPTED: i32 = 0;

/// Why the host refused a `publish`; each refusal also logs a warning line of the plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum PublishRefusal {
    /// The exchange is not in the subscription's `publish` list.
    ExchangeNotAllowed = -1,
    /// A negative delay, a delay without `[delay]` enabled, or one longer than its maximum.
    DelayRefused = -2,
    /// More messages than the per-call limit (default [`MAX_PUBLISHES`](crate::limits::MAX_PUBLISHES)).
    TooManyMessages = -3,
    /// More bytes than the per-call limit (default
    /// [`MAX_PUBLISH_BYTES`](crate::limits::MAX_PUBLISH_BYTES)).
    TooManyBytes = -4,
    /// Exchange or routing key not UTF-8, or longer than
    /// [`MAX_NAME_LEN`](crate::limits::MAX_NAME_LEN).
    Invalid = -5,
}

impl PublishRefusal {
    /// Every refusal, by code.
    pub const ALL: [PublishRefusal; 5] = [
        PublishRefusal::ExchangeNotAllowed,
        PublishRefusal::DelayRefused,
        PublishRefusal::TooManyMessages,
        PublishRefusal::TooManyBytes,
        PublishRefusal::Invalid,
    ];

    /// The code `publish` returns.
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// The refusal of a code; `None` for [`PUBLISH_ACCEPTED`] and codes ABI v1 does not define.
    pub const fn from_code(code: i32) -> Option<PublishRefusal> {
        match code {
            -1 => Some(PublishRefusal::ExchangeNotAllowed),
            -2 => Some(PublishRefusal::DelayRefused),
            -3 => Some(PublishRefusal::TooManyMessages),
            -4 => Some(PublishRefusal::TooManyBytes),
            -5 => Some(PublishRefusal::Invalid),
            _ => None,
        }
    }

    /// One line on what it means, as `docs/abi.md` states it.
    pub const fn description(self) -> &'static str {
        match self {
            PublishRefusal::ExchangeNotAllowed => {
                "the exchange is not in the subscription's `publish` list"
            }
            PublishRefusal::DelayRefused => {
                "delay refused: negative, delayed delivery not enabled (`[delay]`), or too long"
            }
            PublishRefusal::TooManyMessages => "too many messages for one call",
            PublishRefusal::TooManyBytes => {
                "too many bytes (routing keys plus bodies) for one call"
            }
            PublishRefusal::Invalid => {
                "exchange or routing key not UTF-8, or longer than 255 bytes"
            }
        }
    }
}

impl From<PublishRefusal> for i32 {
    fn from(r: PublishRefusal) -> i32 {
        r.code()
    }
}

impl fmt::Display for PublishRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.description())
    }
}
