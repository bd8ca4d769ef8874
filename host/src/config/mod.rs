//! worker.toml: what the user may write (SPEC section 2), parsed in two passes — serde with
//! validating newtypes (syntax and single values, with toml's line and column), then one pass
//! over the whole file that reports every cross-field problem at once.

mod error;
mod grants;
mod host_name;
#[cfg(test)]
mod keys;
mod raw;
mod secret;
mod units;
mod validate;

#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

pub use error::{ConfigError, Location, Problem, Warning};
pub use grants::{
    DEFAULT_HTTP_MAX_REQUESTS, DEFAULT_HTTP_MAX_RESPONSE, DEFAULT_KV_MAX_VALUE,
    DEFAULT_OUTBOX_RETENTION, DEFAULT_SQL_MAX_CONNECTIONS, Grants, HttpGrant, KvBackend,
    KvStoreConfig, Origin, OriginHeaders, Outbox, SqlDatabaseConfig, SqlKind,
};
pub use host_name::HostName;
pub use secret::{Secret, redact_url};
pub use units::MAX_NAME_BYTES;

/// The environment variable that replaces `[broker] url` / `urls`.
pub const BROKER_URL_ENV: &str = "WORKER_BROKER_URL";

/// A validated worker.toml.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it was read from (as given, not canonicalized).
    pub path: PathBuf,
    pub broker: Broker,
    pub exchanges: Exchanges,
    pub plugins: Plugins,
    pub admin: Option<Admin>,
    /// `[tracing]`: where spans are exported; none when off.
    pub tracing: Option<TracingConfig>,
    pub subscriptions: Vec<Subscription>,
    /// `[[exchange]]` tables.
    pub exchanges_extra: Vec<ExchangeDecl>,
    /// `[[queue]]` tables.
    pub queues_extra: Vec<QueueDecl>,
    pub delay: Option<DelayConfig>,
    /// `[state] dir`, resolved against the folder of worker.toml: compiled plugins, embedded
    /// stores.
    pub state_dir: PathBuf,
    /// `[kv.NAME]` stores, by name.
    pub kv: Vec<KvStoreConfig>,
    /// `[sql.NAME]` databases, by name.
    pub sql: Vec<SqlDatabaseConfig>,
}

impl Config {
    /// Where compiled components are cached.
    pub fn compiled_dir(&self) -> PathBuf {
        self.state_dir.join("compiled")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    /// Cluster nodes, tried in turn; after the `WORKER_BROKER_URL` override; never empty.
    pub urls: Vec<String>,
    /// How often the declared queues and exchanges are checked, and redeclared when missing.
    pub topology_check: Duration,
    /// The longest a SIGTERM drain may take.
    pub shutdown_timeout: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchanges {
    pub master: String,
    pub retry: String,
    pub failed: String,
}

impl Default for Exchanges {
    fn default() -> Self {
        Exchanges {
            master: "master".into(),
            retry: "master.retry".into(),
            failed: "master.failed".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plugins {
    /// Resolved against the folder of worker.toml.
    pub dir: PathBuf,
    /// Larger plugin files are refused before they are read.
    pub max_plugin_size: u64,
}

/// `[plugins] max_plugin_size` when unset: far above any real plugin, far below what would hurt.
pub const DEFAULT_MAX_PLUGIN_SIZE: u64 = 256 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admin {
    pub listen: SocketAddr,
    /// `[admin] token`: what every request under `/api/` must carry as
    /// `Authorization: Bearer <token>`; required when `listen` is not a loopback address.
    pub token: Option<Secret>,
    /// `[admin] hosts`: `Host` names the console answers to besides the listen address and
    /// loopback; without a port, any port.
    pub hosts: Vec<HostName>,
}

/// `[tracing]`: the OpenTelemetry collector spans go to over OTLP/HTTP.
#[derive(Debug, Clone, PartialEq)]
pub struct TracingConfig {
    /// `http://host:port`, with `${VAR}` expanded; no trailing slash.
    pub otlp: String,
    /// The `service.name` of every span; `worker-host` unless set.
    pub service_name: String,
    /// The share of new traces recorded (0 to 1); a message that carries a trace context
    /// follows its sampling decision.
    pub sample_ratio: f64,
}

impl TracingConfig {
    /// Where trace exports are posted: `/v1/traces` under `otlp`, unless it names that path.
    pub fn traces_url(&self) -> String {
        if self.otlp.ends_with("/v1/traces") {
            self.otlp.clone()
        } else {
            format!("{}/v1/traces", self.otlp)
        }
    }
}

/// One consumed queue and the plugin that handles its messages, with defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Subscription {
    pub queue: String,
    /// The file name as written, e.g. `user_monitor.wasm`.
    pub plugin: String,
    /// `plugins.dir` joined with `plugin`.
    pub plugin_path: PathBuf,
    /// Where `bindings` apply; `exchanges.master` unless set.
    pub exchange: String,
    pub bindings: Vec<String>,
    pub prefetch: u16,
    pub concurrency: u32,
    pub max_retries: u32,
    /// Never empty.
    pub retry_delays: Vec<RetryDelay>,
    pub timeout: Duration,
    /// Bytes of linear memory one plugin instance may grow to.
    pub memory_limit: u64,
    /// Larger messages are parked untouched, never given to the plugin.
    pub max_message_size: u64,
    pub queue_type: QueueType,
    /// Exchanges the plugin may publish to.
    pub publish: Vec<String>,
    /// `[subscription.config]` as JSON; `{}` when absent.
    pub config: serde_json::Value,
    /// A fresh instance per message, or one reused for a run of messages (components).
    pub instance: InstanceMode,
    /// Messages one reused instance serves before it is replaced.
    pub instance_max_messages: u32,
    /// `pause_after` / `pause_for`: stop taking deliveries after that many answers in a row
    /// that are not ok; none when off.
    pub pause: Option<Pause>,
    /// Outbound HTTP, key-value store and SQL database (components only).
    pub grants: Grants,
}

/// When a subscription pauses, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pause {
    /// Answers in a row that are not ok.
    pub after: u32,
    /// How long it takes no deliveries before it tries one message.
    pub pause_for: Duration,
}

/// `pause_for` when unset.
pub const DEFAULT_PAUSE_FOR: Duration = Duration::from_secs(30);

/// One retry delay; the text is kept because it names the retry queue.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RetryDelay {
    /// As written in worker.toml, e.g. `"30s"`.
    pub text: String,
    pub duration: Duration,
}

impl Subscription {
    /// Where failed messages wait for a person: `Q@failed`.
    pub fn failed_queue(&self) -> String {
        failed_queue_name(&self.queue)
    }

    /// The queue that holds a retry for `delay`: `Q@retry.<delay as written>`.
    pub fn retry_queue_name(&self, delay: &RetryDelay) -> String {
        retry_queue_name(&self.queue, &delay.text)
    }

    /// Retry `n` (1-based) waits `retry_delays[min(n, len) - 1]`; `n = 0` is treated as 1.
    pub fn delay_for_retry(&self, n: u32) -> &RetryDelay {
        let len = self.retry_delays.len();
        let index = (n.max(1) as usize).min(len).saturating_sub(1);
        &self.retry_delays[index]
    }

    /// The distinct retry delays (by text), in the order written: one retry queue each.
    pub fn distinct_retry_delays(&self) -> Vec<&RetryDelay> {
        let mut seen = std::collections::HashSet::new();
        self.retry_delays
            .iter()
            .filter(|d| seen.insert(d.text.as_str()))
            .collect()
    }
}

/// `Q@failed`.
pub fn failed_queue_name(queue: &str) -> String {
    format!("{queue}@failed")
}

/// `Q@retry.<delay text>`.
pub fn retry_queue_name(queue: &str, delay_text: &str) -> String {
    format!("{queue}@retry.{delay_text}")
}

/// `instance`: how a component's instances serve messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InstanceMode {
    #[default]
    Fresh,
    Reuse,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueType {
    #[default]
    Classic,
    Quorum,
}

impl QueueType {
    /// The value of the `x-queue-type` argument.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueType::Classic => "classic",
            QueueType::Quorum => "quorum",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExchangeType {
    Direct,
    Topic,
    Fanout,
    Headers,
}

impl ExchangeType {
    pub fn as_str(self) -> &'static str {
        match self {
            ExchangeType::Direct => "direct",
            ExchangeType::Topic => "topic",
            ExchangeType::Fanout => "fanout",
            ExchangeType::Headers => "headers",
        }
    }
}

/// An `[[exchange]]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeDecl {
    pub name: String,
    pub kind: ExchangeType,
    pub durable: bool,
}

/// A `[[queue]]` table: plain topology the subscriptions do not cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueDecl {
    pub name: String,
    pub durable: bool,
    pub message_ttl: Option<Duration>,
    /// `""` is the default exchange (dead-letter straight to the queue named by the key).
    pub dead_letter_exchange: Option<String>,
    pub dead_letter_routing_key: Option<String>,
    pub max_length: Option<u64>,
    pub queue_type: QueueType,
    pub bindings: Vec<BindingDecl>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingDecl {
    pub exchange: String,
    pub key: String,
}

/// `[delay]`: arbitrary-delay delivery over `levels` binary TTL levels (SPEC section 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelayConfig {
    pub levels: u8,
}

impl Config {
    /// Reads `path` and applies `WORKER_BROKER_URL` when it is set and not empty.
    pub fn load(path: &Path) -> Result<(Config, Vec<Warning>), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        let env_url = std::env::var(BROKER_URL_ENV).ok().filter(|u| !u.is_empty());
        validate::parse(&text, path, env_url.as_deref())
    }

    /// Parses `text` as if read from `path` (plugins.dir and plugin files resolve against its
    /// folder); ignores the environment.
    pub fn parse(text: &str, path: &Path) -> Result<(Config, Vec<Warning>), ConfigError> {
        validate::parse(text, path, None)
    }

    /// The subscription consuming `queue`.
    pub fn subscription(&self, queue: &str) -> Option<&Subscription> {
        self.subscriptions.iter().find(|s| s.queue == queue)
    }
}
