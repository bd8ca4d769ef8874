//! What happens to a message after its handler ran: the decision (ack, retry or park) for its
//! answer and call number. The headers that record it are written by `crate::headers`.

pub use crate::headers::FailedReason;
use crate::plugin::{Answer, HandlerError};

/// What the host does with a handled message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Publish what the handler buffered, then ack.
    Ack,
    /// Send it round retry number `retry` (1-based), then ack. `after`: the delay the handler
    /// asked for (through the delay levels), instead of the subscription's `retry_delays`.
    Retry {
        retry: u32,
        cause: String,
        after: Option<std::time::Duration>,
    },
    /// Park it in `<queue>@failed`, then ack.
    Park { reason: FailedReason, cause: String },
}

/// Decides from the handler's answer and the call number (`attempt`, 1-based) what to do.
/// The call numbered `max_retries + 1` is the last: a retry there parks the message.
pub fn decide(
    answer: &Result<Answer, HandlerError>,
    reason: Option<&str>,
    attempt: u32,
    max_retries: u32,
) -> Decision {
    let cause = |default: &str| {
        reason
            .filter(|r| !r.is_empty())
            .unwrap_or(default)
            .to_string()
    };
    let retry_cause = match answer {
        Ok(Answer::Ok) => return Decision::Ack,
        Ok(Answer::Fail) => {
            return Decision::Park {
                reason: FailedReason::Fail,
                cause: cause("handler answered fail"),
            };
        }
        Ok(Answer::Retry) => cause("handler answered retry"),
        Err(err) => err.to_string(),
    };
    retry_or_park(retry_cause, attempt, max_retries)
}

/// A failure of call `attempt` that counts as a retry: retried, or parked once the retries are
/// used up.
pub fn retry_or_park(cause: String, attempt: u32, max_retries: u32) -> Decision {
    if attempt > max_retries {
        Decision::Park {
            reason: FailedReason::RetriesExhausted,
            cause,
        }
    } else {
        Decision::Retry {
            retry: attempt,
            cause,
            after: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decide_maps_answers() {
        assert_eq!(decide(&Ok(Answer::Ok), None, 1, 3), Decision::Ack);
        assert_eq!(
            decide(&Ok(Answer::Fail), Some("bad json"), 1, 3),
            Decision::Park {
                reason: FailedReason::Fail,
                cause: "bad json".into()
            }
        );
        assert_eq!(
            decide(&Ok(Answer::Retry), Some("later"), 2, 3),
            Decision::Retry {
                retry: 2,
                cause: "later".into(),
                after: None,
            }
        );
        assert!(matches!(
            decide(&Ok(Answer::Retry), None, 4, 3),
            Decision::Park {
                reason: FailedReason::RetriesExhausted,
                ..
            }
        ));
        assert!(matches!(
            decide(&Ok(Answer::Retry), None, 1, 0),
            Decision::Park { .. }
        ));
    }
}
