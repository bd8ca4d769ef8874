//! The ABI v1 boundary: safe wrappers over the host's `worker_v1` imports on wasm, and over the
//! thread-local test context natively, so everything above this module is target-independent.

#[cfg(target_family = "wasm")]
mod wasm;
#[cfg(target_family = "wasm")]
pub(crate) use wasm::{body, config, log, meta, publish, set_reason};

#[cfg(not(target_family = "wasm"))]
pub(crate) mod native;
#[cfg(not(target_family = "wasm"))]
pub(crate) use native::{body, config, log, meta, publish, set_reason};

#[cfg(all(test, not(target_family = "wasm")))]
mod tests;
