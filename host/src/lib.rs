//! worker-host: RabbitMQ consumers as sandboxed WebAssembly plugins.

// The dry-run futures (a plugin call inside capture scopes inside the failed-queue walk) nest
// deeper than the default 128 when an optimized build computes their layout.
#![recursion_limit = "256"]
// `pub` means used outside the crate (main, tests, benches); the rest is `pub(crate)`.
#![warn(unreachable_pub)]

mod admin;
mod broker;
/// The host's own consume connection, public for the throughput bench.
pub use broker::wire;
pub mod capability;
pub mod cli;
pub mod commands;
pub mod config;
mod consumer;
pub mod delay;
pub mod descriptors;
pub mod failed;
pub mod failpoint;
pub mod headers;
#[cfg(test)]
mod layers;
mod metrics;
mod outbox;
pub mod outcome;
pub mod plugin;
mod poison;
mod reload;
pub mod runtime;
mod scaffold;
pub mod service;
mod stdout;
pub mod telemetry;
#[cfg(test)]
mod testing;
pub mod topology;
mod wit;

pub use service::run;

/// The process exit code for an error: 2 when the broker could not be reached, else 1.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    if err.chain().any(|e| e.is::<broker::Unreachable>()) {
        2
    } else {
        1
    }
}
