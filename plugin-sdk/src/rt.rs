//! The call path behind the `worker_handle` export: load the message, run the handler, answer.
//! Public only for [`handler!`](crate::handler); not part of the API.

use std::panic::PanicHookInfo;

use crate::{IntoOutcome, Message, Outcome, sys};

/// Runs one handler call the way the host sees it and returns the ABI answer code.
pub fn handle<R: IntoOutcome>(handler: impl FnOnce(&Message) -> R) -> i32 {
    #[cfg(target_family = "wasm")]
    std::panic::set_hook(Box::new(on_panic));
    let msg = Message::load();
    answer(handler(&msg).into_outcome())
}

/// Hands the reason to the host and returns the answer code.
fn answer(outcome: Outcome) -> i32 {
    if let Some(reason) = outcome.reason() {
        sys::set_reason(reason);
    }
    outcome.code()
}

/// Records a panic as the call's reason. With `panic = "abort"` the module traps right after,
/// which the host counts as a retry; the reason tells it why.
pub(crate) fn on_panic(info: &PanicHookInfo<'_>) {
    let reason = panic_reason(info);
    sys::log(crate::Level::Error.code(), &reason);
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
