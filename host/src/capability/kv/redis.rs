//! The Redis backend: a connection manager that connects on first use and again after the
//! connection is lost, so a server that is down only makes calls answer `unavailable`. Keys
//! are `kv:{store}:{key}`; compare-and-swap is a Lua script (EVALSHA), the rest single
//! commands, so every operation is atomic. The URL is a secret: errors show it redacted, and
//! what `/readyz` hears (ping, call failures) names no URL.

use std::time::Duration;

use anyhow::Context as _;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError, Script, ServerErrorKind};

use super::{not_a_counter, overflow};
use crate::config::Secret;
use crate::wit::worker::plugin::kv::KvError;

/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a command waits for its answer before the connection is taken as lost and
/// replaced: far above any answer Redis gives to these commands, well below a stuck server's.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `/readyz` waits for PING.
const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// KEYS[1]; ARGV: "absent" or "equal", the expected value, the new value, the TTL in ms or "".
/// A missing key is `false` in Lua, so it never equals an expected value.
const CAS: &str = r#"
local current = redis.call('GET', KEYS[1])
if ARGV[1] == 'absent' then
  if current then return 0 end
elseif current ~= ARGV[2] then
  return 0
end
if ARGV[4] == '' then
  redis.call('SET', KEYS[1], ARGV[3])
else
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
end
return 1
"#;

pub(super) struct Redis {
    manager: ConnectionManager,
    /// `kv:{store}:`
    prefix: String,
    cas: Script,
}

impl Redis {
    /// Checks the URL and prepares the manager; it connects on the first call.
    pub(super) fn open(store: &str, url: &Secret) -> anyhow::Result<Redis> {
        let redacted = url.redacted_url();
        let client = redis::Client::open(url.expose())
            .with_context(|| format!("invalid Redis URL {redacted}"))?;
        // A failed attempt is not retried within a call (the call's deadline is the handler's);
        // the next call tries again.
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(0)
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        let manager = ConnectionManager::new_lazy_with_config(client, config)
            .with_context(|| format!("cannot set up a connection to {redacted}"))?;
        Ok(Redis {
            manager,
            prefix: format!("kv:{store}:"),
            cas: Script::new(CAS),
        })
    }

    /// Whether the server answers PING within [`PING_TIMEOUT`].
    pub(super) async fn ping(&self) -> Result<(), String> {
        let mut conn = self.manager.clone();
        let cmd = redis::cmd("PING");
        let ping = cmd.query_async::<String>(&mut conn);
        match tokio::time::timeout(PING_TIMEOUT, ping).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer to PING within {PING_TIMEOUT:?}")),
        }
    }

    pub(super) async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        let mut conn = self.manager.clone();
        redis::cmd("GET")
            .arg(self.key(key))
            .query_async(&mut conn)
            .await
            .map_err(failure)
    }

    pub(super) async fn set(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
    ) -> Result<(), KvError> {
        let mut conn = self.manager.clone();
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.key(key)).arg(value);
        if let Some(ttl) = ttl_ms {
            cmd.arg("PX").arg(ttl);
        }
        cmd.query_async(&mut conn).await.map_err(failure)
    }

    pub(super) async fn delete(&self, key: &str) -> Result<bool, KvError> {
        let mut conn = self.manager.clone();
        let removed: u64 = redis::cmd("DEL")
            .arg(self.key(key))
            .query_async(&mut conn)
            .await
            .map_err(failure)?;
        Ok(removed > 0)
    }

    pub(super) async fn increment(&self, key: &str, delta: i64) -> Result<i64, KvError> {
        let mut conn = self.manager.clone();
        redis::cmd("INCRBY")
            .arg(self.key(key))
            .arg(delta)
            .query_async(&mut conn)
            .await
            .map_err(failure)
    }

    pub(super) async fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<Vec<u8>>,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
    ) -> Result<bool, KvError> {
        let mut conn = self.manager.clone();
        let (mode, expected) = match expected {
            None => ("absent", Vec::new()),
            Some(v) => ("equal", v),
        };
        let ttl = ttl_ms.map(|t| t.to_string()).unwrap_or_default();
        let wrote: i64 = self
            .cas
            .key(self.key(key))
            .arg(mode)
            .arg(expected)
            .arg(value)
            .arg(ttl)
            .invoke_async(&mut conn)
            .await
            .map_err(failure)?;
        Ok(wrote == 1)
    }

    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }
}

/// What the guest is told. Redis's errors name no URL; a reply error about the value is the
/// guest's, anything else means the server cannot be used now.
fn failure(e: RedisError) -> KvError {
    if e.kind() == ErrorKind::Server(ServerErrorKind::ResponseError) {
        let detail = e.detail().unwrap_or_default();
        if detail.contains("not an integer") {
            return not_a_counter();
        }
        if detail.contains("overflow") {
            return overflow();
        }
    }
    KvError::Unavailable(format!("redis: {e}"))
}
