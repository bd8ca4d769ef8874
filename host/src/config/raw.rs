//! worker.toml exactly as written: serde structs that refuse unknown keys and keep the spans the
//! second pass (validate.rs) needs to point at a line.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::units::{
    BrokerUrl, ByteSize, Concurrency, DelayLevels, DurationText, HttpMaxRequests,
    InstanceMaxMessages, MaxLength, MaxRetries, Name, PauseAfter, Prefetch, RoutingKey,
};
use super::{ExchangeType, InstanceMode, QueueType};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub broker: Option<RawBroker>,
    pub exchanges: Option<RawExchanges>,
    pub plugins: Option<RawPlugins>,
    pub admin: Option<RawAdmin>,
    pub tracing: Option<RawTracing>,
    pub defaults: Option<RawSettings>,
    #[serde(default, rename = "subscription")]
    pub subscriptions: Vec<RawSubscription>,
    #[serde(default, rename = "exchange")]
    pub exchanges_extra: Vec<RawExchange>,
    #[serde(default, rename = "queue")]
    pub queues_extra: Vec<RawQueue>,
    pub delay: Option<RawDelay>,
    pub state: Option<RawState>,
    /// `[kv.NAME]` stores.
    #[serde(default)]
    pub kv: BTreeMap<String, Spanned<RawKv>>,
    /// `[sql.NAME]` databases.
    #[serde(default)]
    pub sql: BTreeMap<String, Spanned<RawSql>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKv {
    pub backend: Option<Spanned<KvBackendKind>>,
    pub url: Option<Spanned<String>>,
    pub max_value_size: Option<Spanned<ByteSize>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum KvBackendKind {
    Embedded,
    Redis,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSql {
    pub url: Option<Spanned<String>>,
    pub max_connections: Option<Spanned<u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawState {
    pub dir: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBroker {
    pub url: Option<Spanned<BrokerUrl>>,
    pub urls: Option<Spanned<Vec<BrokerUrl>>>,
    pub topology_check: Option<Spanned<DurationText>>,
    pub shutdown_timeout: Option<Spanned<DurationText>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExchanges {
    pub master: Option<Spanned<Name>>,
    pub retry: Option<Spanned<Name>>,
    pub failed: Option<Spanned<Name>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPlugins {
    pub dir: Option<Spanned<String>>,
    pub max_plugin_size: Option<Spanned<ByteSize>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmin {
    pub listen: Spanned<SocketAddrText>,
    pub token: Option<Spanned<String>>,
    /// Checked in the second pass, so every bad entry is reported with its own line.
    #[serde(default)]
    pub hosts: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTracing {
    pub otlp: Spanned<String>,
    pub service_name: Option<Spanned<String>>,
    pub sample_ratio: Option<Spanned<f64>>,
}

/// `std::net::SocketAddr` with an error message that shows the expected form.
#[derive(Debug)]
pub(super) struct SocketAddrText(pub std::net::SocketAddr);

impl<'de> Deserialize<'de> for SocketAddrText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map(SocketAddrText).map_err(|_| {
            serde::de::Error::custom(format!(
                "expected an IP address and port like \"127.0.0.1:9464\", got {text:?}"
            ))
        })
    }
}

/// Declares a table struct with the per-subscription settings plus its own fields. serde's
/// `flatten` would share them, but it disables `deny_unknown_fields`.
macro_rules! with_settings {
    ($(#[$meta:meta])* pub struct $name:ident { $($own:tt)* }) => {
        $(#[$meta])*
        pub(super) struct $name {
            $($own)*
            pub exchange: Option<Spanned<Name>>,
            pub prefetch: Option<Prefetch>,
            pub concurrency: Option<Concurrency>,
            pub max_retries: Option<MaxRetries>,
            pub retry_delays: Option<Spanned<Vec<DurationText>>>,
            pub timeout: Option<DurationText>,
            pub memory_limit: Option<Spanned<ByteSize>>,
            pub max_message_size: Option<Spanned<ByteSize>>,
            pub queue_type: Option<QueueType>,
            pub publish: Option<Vec<Spanned<Name>>>,
            pub instance: Option<InstanceMode>,
            pub instance_max_messages: Option<InstanceMaxMessages>,
            pub pause_after: Option<PauseAfter>,
            pub pause_for: Option<Spanned<DurationText>>,
            pub http_max_response: Option<Spanned<ByteSize>>,
            pub http_max_requests: Option<HttpMaxRequests>,
        }
    };
}

with_settings! {
    /// The per-subscription settings `[defaults]` may set.
    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct RawSettings {}
}

with_settings! {
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct RawSubscription {
        pub queue: Spanned<Name>,
        pub plugin: Spanned<String>,
        #[serde(default)]
        pub bindings: Vec<RoutingKey>,
        pub config: Option<toml::Table>,
        pub allowed_hosts: Option<Vec<Spanned<String>>>,
        pub http_headers: Option<BTreeMap<String, Spanned<RawHeaders>>>,
        pub kv: Option<Spanned<String>>,
        pub sql: Option<Spanned<String>>,
        pub outbox: Option<Spanned<bool>>,
        pub outbox_retention: Option<Spanned<DurationText>>,
    }
}

/// `[subscription.http_headers."origin"]`: header name -> value.
pub(super) type RawHeaders = BTreeMap<String, Spanned<String>>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExchange {
    pub name: Spanned<Name>,
    #[serde(rename = "type")]
    pub kind: ExchangeType,
    #[serde(default = "yes")]
    pub durable: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawQueue {
    pub name: Spanned<Name>,
    #[serde(default = "yes")]
    pub durable: bool,
    pub message_ttl: Option<Spanned<DurationText>>,
    pub dead_letter_exchange: Option<Spanned<String>>,
    pub dead_letter_routing_key: Option<Spanned<RoutingKey>>,
    pub max_length: Option<MaxLength>,
    pub queue_type: Option<Spanned<QueueType>>,
    #[serde(default)]
    pub bindings: Vec<RawBinding>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBinding {
    pub exchange: Spanned<String>,
    #[serde(default = "empty_key")]
    pub key: RoutingKey,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDelay {
    #[serde(default = "default_levels")]
    pub levels: DelayLevels,
}

/// 28 levels: delays up to about 8.5 years.
fn default_levels() -> DelayLevels {
    DelayLevels(28)
}

fn yes() -> bool {
    true
}

fn empty_key() -> RoutingKey {
    RoutingKey(String::new())
}
