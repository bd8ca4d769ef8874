//! What a subscription may reach beyond the broker (SPEC section 9): outbound HTTP origins, a
//! key-value store, an SQL database; and the `[kv.NAME]` and `[sql.NAME]` sections that define
//! the stores and databases. Secrets are held as `Secret`, which never prints.

use std::fmt;
use std::path::PathBuf;

use super::secret::Secret;

/// The capabilities one subscription is granted. The default grants nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Grants {
    pub http: HttpGrant,
    /// A `[kv.NAME]` store.
    pub kv: Option<String>,
    /// A `[sql.NAME]` database.
    pub sql: Option<String>,
    /// `outbox = true`: handled messages and their publishes recorded in `sql`.
    pub outbox: Option<Outbox>,
}

/// The outbox of a subscription (it needs `sql`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outbox {
    /// `outbox_retention`: how long a handled message is remembered.
    pub retention: std::time::Duration,
}

/// `outbox_retention` when unset: a redelivery later than this is handled again.
pub const DEFAULT_OUTBOX_RETENTION: std::time::Duration =
    std::time::Duration::from_secs(7 * 24 * 3600);

/// Outbound HTTP: the origins a request may go to and what the host adds to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpGrant {
    /// `allowed_hosts`; empty refuses every request.
    pub allowed: Vec<Origin>,
    /// `[subscription.http_headers."origin"]`: added by the host, never shown to the guest.
    pub headers: Vec<OriginHeaders>,
    /// `http_max_response`: the most body bytes a response may have.
    pub max_response: u64,
    /// `http_max_requests`: the most requests one message may make.
    pub max_requests: u32,
}

/// `http_max_response` when unset.
pub const DEFAULT_HTTP_MAX_RESPONSE: u64 = 8 << 20;
/// `http_max_requests` when unset.
pub const DEFAULT_HTTP_MAX_REQUESTS: u32 = 100;

impl Default for HttpGrant {
    fn default() -> Self {
        HttpGrant {
            allowed: Vec::new(),
            headers: Vec::new(),
            max_response: DEFAULT_HTTP_MAX_RESPONSE,
            max_requests: DEFAULT_HTTP_MAX_REQUESTS,
        }
    }
}

/// `scheme://host[:port]` of `allowed_hosts`: the host lowercased, the port the scheme's default
/// when not written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    /// `http` or `https`.
    pub scheme: String,
    /// A DNS name or an IP literal (IPv6 without brackets).
    pub host: String,
    /// `None`: `*`, any port.
    pub port: Option<u16>,
}

impl Origin {
    /// Whether a request to `scheme://host:port` goes to this origin.
    pub fn matches(&self, scheme: &str, host: &str, port: u16) -> bool {
        self.scheme.eq_ignore_ascii_case(scheme)
            && self
                .host
                .eq_ignore_ascii_case(host.trim_start_matches('[').trim_end_matches(']'))
            && self.port.is_none_or(|p| p == port)
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match self.port {
            Some(p) => write!(f, "{}://{host}:{p}", self.scheme),
            None => write!(f, "{}://{host}:*", self.scheme),
        }
    }
}

/// Headers the host adds to every request to one origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginHeaders {
    pub origin: Origin,
    pub headers: Vec<(String, Secret)>,
}

/// A `[kv.NAME]` store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvStoreConfig {
    pub name: String,
    pub backend: KvBackend,
    /// The largest value one `set` may store.
    pub max_value_size: u64,
}

/// `max_value_size` of a store when unset.
pub const DEFAULT_KV_MAX_VALUE: u64 = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvBackend {
    /// A file under `[state] dir` (`kv/NAME.redb`).
    Embedded { path: PathBuf },
    /// A Redis server; keys are prefixed with the store's name.
    Redis { url: Secret },
}

/// A `[sql.NAME]` database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlDatabaseConfig {
    pub name: String,
    pub kind: SqlKind,
    /// With `${VAR}` expanded; a SQLite path resolved against `[state] dir`.
    pub url: Secret,
    pub max_connections: u32,
}

/// `max_connections` of a database when unset.
pub const DEFAULT_SQL_MAX_CONNECTIONS: u32 = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlKind {
    Sqlite,
    Postgres,
    MySql,
}

impl SqlKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SqlKind::Sqlite => "sqlite",
            SqlKind::Postgres => "postgres",
            SqlKind::MySql => "mysql",
        }
    }
}
