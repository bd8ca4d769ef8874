//! worker-host: RabbitMQ consumers as sandboxed WebAssembly plugins.

mod admin;
mod broker;
pub mod capability;
pub mod cli;
pub mod commands;
pub mod config;
mod consumer;
pub mod delay;
pub mod descriptors;
pub mod failed;
pub mod failpoint;
#[cfg(test)]
mod layers;
mod metrics;
pub mod outcome;
pub mod plugin;
mod poison;
mod reload;
mod scaffold;
pub mod service;
mod stdout;
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
