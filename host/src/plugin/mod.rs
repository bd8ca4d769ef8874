//! The plugin runtime: one wasmtime engine per process, compiled plugin versions (core modules
//! of ABI v1, `docs/abi.md`, and components of ABI v2, `wit/`), and one sandboxed handler call
//! per message.

mod abi;
mod cache;
mod component;
mod engine;
mod error;
mod file;
mod module;
mod pending;
mod settings;
mod state;
mod version;
mod wasi;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

pub use cache::{COMPILE_COMMAND, compile_for_parent};
pub use engine::Runtime;
pub use error::{HandlerError, LoadError, TrapKind};
pub(crate) use pending::Pending;
pub use settings::{CompilePriority, RuntimeConfig};
pub use version::{Loaded, Plugin};

/// Per-call limits, from the subscription.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Wall-clock limit of one call (instantiation included).
    pub timeout: Duration,
    /// Largest linear memory of the instance, in bytes.
    pub memory_limit: u64,
    /// Fresh instance per message, or a warm one reused (components only).
    pub instance: Instances,
}

/// How a component's instances serve messages (`instance`, `instance_max_messages`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Instances {
    /// A new instance for every message: nothing carries over.
    #[default]
    Fresh,
    /// One instance serves up to `max_messages` messages in a row; dropped after a trap,
    /// timeout or limit hit, and on reload.
    Reuse { max_messages: u32 },
}

/// Everything a handler call can see of one delivery.
#[derive(Debug, Clone)]
pub struct Input {
    pub body: bytes::Bytes,
    pub meta: Meta,
    /// The subscription's `[subscription.config]` as JSON (`{}` when absent).
    pub config_json: Arc<str>,
    pub publish: Arc<PublishPolicy>,
    /// The subscription's capabilities (components only).
    pub granted: Arc<crate::capability::Granted>,
}

/// Delivery metadata served by `meta_get`.
#[derive(Debug, Clone, Default)]
pub struct Meta {
    pub routing_key: String,
    pub original_routing_key: String,
    pub exchange: String,
    pub queue: String,
    pub message_id: Option<String>,
    pub correlation_id: Option<String>,
    pub content_type: Option<String>,
    /// Seconds since the Unix epoch (the AMQP `timestamp` property).
    pub timestamp: Option<u64>,
    /// 1 on the first call.
    pub attempt: u32,
    pub redelivered: bool,
    /// AMQP headers rendered as text (numbers and booleans as text).
    pub headers: Vec<(String, String)>,
}

impl Meta {
    /// What a handler sees of a delivery from `queue`: its routing, properties and headers,
    /// and its attempt (1 + the calls its headers record). The consumer and dry runs build it
    /// alike.
    pub fn of(
        queue: &str,
        exchange: &str,
        routing_key: &str,
        redelivered: bool,
        properties: &lapin::BasicProperties,
    ) -> Meta {
        let headers = properties.headers().as_ref();
        let text = |s: &Option<lapin::types::ShortString>| s.as_ref().map(|s| s.to_string());
        Meta {
            routing_key: routing_key.to_string(),
            original_routing_key: crate::headers::original_routing_key(headers, routing_key),
            exchange: exchange.to_string(),
            queue: queue.to_string(),
            message_id: text(properties.message_id()),
            correlation_id: text(properties.correlation_id()),
            content_type: text(properties.content_type()),
            timestamp: *properties.timestamp(),
            attempt: crate::headers::calls_made(headers, queue).saturating_add(1),
            redelivered,
            headers: crate::headers::render_headers(headers),
        }
    }
}

/// What a plugin may publish while handling one message.
#[derive(Debug, Clone)]
pub struct PublishPolicy {
    /// Exchanges the plugin may publish to (`publish = [...]`).
    pub allowed_exchanges: Vec<String>,
    /// Longest delay accepted; `None` refuses every delayed publish.
    pub max_delay: Option<Duration>,
    /// Most messages buffered per call.
    pub max_messages: usize,
    /// Most bytes (routing keys plus bodies) buffered per call.
    pub max_total_bytes: usize,
}

impl Default for PublishPolicy {
    fn default() -> Self {
        PublishPolicy {
            allowed_exchanges: Vec::new(),
            max_delay: None,
            max_messages: worker_abi::limits::MAX_PUBLISHES,
            max_total_bytes: worker_abi::limits::MAX_PUBLISH_BYTES,
        }
    }
}

/// The outcome of one handler call.
#[derive(Debug)]
pub struct Invocation {
    pub answer: Result<Answer, HandlerError>,
    /// From `set_reason` (v1) or the outcome's text (v2): one line, bounded.
    pub reason: Option<String>,
    /// A retry's requested delay (v2 `retry-request.after-ms`).
    pub retry_after: Option<Duration>,
    /// Buffered by `publish`; the caller sends them only when the answer is ok.
    pub publishes: Vec<Publish>,
    /// From `log` and WASI stdout/stderr, bounded.
    pub logs: Vec<LogLine>,
    pub elapsed: Duration,
    /// The call's capability effects (a SQL transaction), open until the caller finishes them:
    /// [`Plugin::handle`] does at once; the consumer first adds its outbox record.
    pub(crate) effects: crate::capability::Effects,
}

impl Invocation {
    /// Whether the handler answered ok (so far: a failed commit turns it into an error).
    pub fn is_ok(&self) -> bool {
        matches!(self.answer, Ok(Answer::Ok))
    }

    /// The commit of an ok call's effects failed: nothing it did counts, and it answers the
    /// commit's error, as any handler error does.
    pub(crate) fn commit_failed(&mut self, why: String) {
        self.answer = Err(HandlerError::Commit(why));
        self.reason = None;
        self.retry_after = None;
        self.publishes.clear();
    }

    /// The cause to record with a retry or fail: the handler error, else the
    /// plugin's reason.
    pub fn cause(&self) -> Option<String> {
        match &self.answer {
            Err(e) => Some(e.to_string()),
            Ok(_) => self.reason.clone(),
        }
    }

    /// Sends the plugin's log lines to `tracing`, tagged with plugin, version
    /// and queue, each at its own level.
    pub fn emit_logs(&self, plugin: &Plugin, queue: &str) {
        for line in &self.logs {
            let (p, v, s, m) = (
                plugin.name(),
                plugin.short_sha(),
                line.source.as_str(),
                line.message.as_str(),
            );
            match line.level {
                LogLevel::Trace => {
                    tracing::trace!(target: GUEST_TARGET, plugin = p, version = v, queue, source = s, "{m}")
                }
                LogLevel::Debug => {
                    tracing::debug!(target: GUEST_TARGET, plugin = p, version = v, queue, source = s, "{m}")
                }
                LogLevel::Info => {
                    tracing::info!(target: GUEST_TARGET, plugin = p, version = v, queue, source = s, "{m}")
                }
                LogLevel::Warn => {
                    tracing::warn!(target: GUEST_TARGET, plugin = p, version = v, queue, source = s, "{m}")
                }
                LogLevel::Error => {
                    tracing::error!(target: GUEST_TARGET, plugin = p, version = v, queue, source = s, "{m}")
                }
            }
        }
    }
}

/// `tracing` target of plugin log lines (filter with `worker_host::plugin::guest=debug`).
pub const GUEST_TARGET: &str = "worker_host::plugin::guest";

/// The handler's answer (`worker_handle` returned 0, 1 or 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Ok,
    Retry,
    Fail,
}

impl Answer {
    pub fn from_code(code: i32) -> Result<Answer, HandlerError> {
        match worker_abi::Answer::from_code(code) {
            Some(worker_abi::Answer::Ok) => Ok(Answer::Ok),
            Some(worker_abi::Answer::Retry) => Ok(Answer::Retry),
            Some(worker_abi::Answer::Fail) => Ok(Answer::Fail),
            None => Err(HandlerError::BadAnswer(code)),
        }
    }
}

/// A message the plugin asked to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    pub exchange: String,
    pub routing_key: String,
    pub body: Vec<u8>,
    pub delay: Option<Duration>,
    /// v2 only; v1 publishes carry none.
    pub content_type: Option<String>,
    pub headers: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub level: LogLevel,
    pub message: String,
    pub source: LogSource,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl LogLevel {
    /// ABI level numbers: 0 trace .. 4 error; out-of-range values are clamped.
    pub fn from_abi(level: i32) -> LogLevel {
        match worker_abi::LogLevel::from_code(level) {
            worker_abi::LogLevel::Trace => LogLevel::Trace,
            worker_abi::LogLevel::Debug => LogLevel::Debug,
            worker_abi::LogLevel::Info => LogLevel::Info,
            worker_abi::LogLevel::Warn => LogLevel::Warn,
            worker_abi::LogLevel::Error => LogLevel::Error,
        }
    }
}

/// Where a log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogSource {
    /// The `log` import.
    Log,
    /// WASI stdout.
    Stdout,
    /// WASI stderr.
    Stderr,
    /// The host itself, about the plugin (refused publishes, truncation).
    Host,
}

impl LogSource {
    pub fn as_str(self) -> &'static str {
        match self {
            LogSource::Log => "log",
            LogSource::Stdout => "stdout",
            LogSource::Stderr => "stderr",
            LogSource::Host => "host",
        }
    }
}
