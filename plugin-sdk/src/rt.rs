//! The call paths behind the exports: the ABI v1 `worker_handle` (load the message through
//! imports, run the handler, answer a code) and the component world's `handle` (take the
//! delivery, run the handler, return the outcome). Natively the test harness runs either.
//! Public only for [`handler!`](crate::handler); not part of the API.

use std::panic::PanicHookInfo;

use crate::{IntoOutcome, Level, Message, sys};

/// Runs one handler call the way an ABI v1 host sees it and returns the ABI answer code.
#[cfg(not(worker_backend = "component"))]
pub fn handle<R: IntoOutcome>(handler: impl FnOnce(&Message) -> R) -> i32 {
    #[cfg(target_family = "wasm")]
    std::panic::set_hook(Box::new(on_panic));
    let msg = Message::load();
    answer(handler(&msg).into_outcome())
}

/// Hands the reason to the host and returns the answer code. ABI v1 has no retry delay.
#[cfg(not(worker_backend = "component"))]
fn answer(outcome: crate::Outcome) -> i32 {
    if let Some(after) = outcome.retry_delay() {
        sys::log(
            Level::Warn,
            &format!(
                "retry after {after:?} needs a component plugin; under ABI v1 the subscription's retry_delays apply"
            ),
        );
    }
    if let Some(reason) = outcome.reason() {
        sys::set_reason(reason);
    }
    outcome.code()
}

/// Runs one handler call the way a component host sees it: the world's `handle`.
#[cfg(not(worker_backend = "v1"))]
pub fn handle_delivery<R: IntoOutcome>(
    handler: impl FnOnce(&Message) -> R,
    delivery: crate::bindings::Delivery,
) -> crate::bindings::Outcome {
    #[cfg(target_family = "wasm")]
    std::panic::set_hook(Box::new(on_panic));
    let msg = Message::from_delivery(delivery);
    crate::wit::outcome_to_wit(handler(&msg).into_outcome())
}

/// Logs a panic and records it as the call's reason. With `panic = "abort"` the module traps
/// right after, which the host counts as a retry; the log line tells why.
pub(crate) fn on_panic(info: &PanicHookInfo<'_>) {
    let reason = panic_reason(info);
    sys::log(Level::Error, &reason);
    sys::set_reason(&reason);
}

fn panic_reason(info: &PanicHookInfo<'_>) -> String {
    let payload = info.payload();
    let text = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(non-text panic payload)");
    match info.location() {
        Some(at) => format!(
            "panicked at {}:{}:{}: {text}",
            at.file(),
            at.line(),
            at.column()
        ),
        None => format!("panicked: {text}"),
    }
}
