//! The embedded backend: one redb file per store (crash-safe, no server). Every operation is
//! one redb transaction run on the blocking pool; writes are serialized by redb and durable
//! when they return.
//!
//! A value is stored with its expiry time in front (milliseconds since the Unix epoch, 0 for
//! none), so that TTLs survive a restart. An expired key reads as absent; it is removed by the
//! first write that finds it, and every write also sweeps up to [`SWEEP_BATCH`] expired keys
//! through an index ordered by expiry time, so expired data does not pile up.

use std::path::Path;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use redb::{Database, ReadableDatabase, ReadableTable, Table, TableDefinition};

use super::{not_a_counter, overflow};
use crate::wit::worker::plugin::kv::KvError;

/// Key -> expiry (8 bytes, big-endian) followed by the value.
const VALUES: TableDefinition<&str, &[u8]> = TableDefinition::new("values");
/// Expiry (8 bytes, big-endian) followed by the key -> nothing: the keys that expire, soonest
/// first.
const EXPIRY: TableDefinition<&[u8], ()> = TableDefinition::new("expiry");
/// How many expired keys one write removes besides its own.
const SWEEP_BATCH: usize = 64;

pub(super) struct Embedded {
    db: Arc<Database>,
}

/// The tables of one write transaction.
struct Tables<'t> {
    values: Table<'t, &'static str, &'static [u8]>,
    expiry: Table<'t, &'static [u8], ()>,
    now: u64,
}

/// A live entry: when it expires (0: never) and its value.
struct Entry {
    expires: u64,
    value: Vec<u8>,
}

impl Embedded {
    /// Creates the file and its directory if missing, and the tables, so that reads find them.
    pub(super) async fn open(path: &Path) -> anyhow::Result<Embedded> {
        let path = path.to_path_buf();
        let db = tokio::task::spawn_blocking(move || -> anyhow::Result<Database> {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
            }
            let db = Database::create(&path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            let txn = db.begin_write()?;
            txn.open_table(VALUES)?;
            txn.open_table(EXPIRY)?;
            txn.commit()?;
            Ok(db)
        })
        .await??;
        Ok(Embedded { db: Arc::new(db) })
    }

    pub(super) async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        let db = self.db.clone();
        let key = key.to_string();
        blocking(move || {
            let txn = db.begin_read().map_err(failed)?;
            let values = txn.open_table(VALUES).map_err(failed)?;
            let stored = values.get(key.as_str()).map_err(failed)?;
            Ok(stored
                .and_then(|v| live(v.value(), now_ms()))
                .map(|e| e.value))
        })
        .await
    }

    pub(super) async fn set(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
        deadline: Instant,
    ) -> Result<(), KvError> {
        let key = key.to_string();
        self.write(deadline, move |t| {
            let expires = t.expiry_of(ttl_ms);
            t.put(&key, &value, expires)
        })
        .await
    }

    pub(super) async fn delete(&self, key: &str, deadline: Instant) -> Result<bool, KvError> {
        let key = key.to_string();
        self.write(deadline, move |t| Ok(t.remove(&key)?.is_some()))
            .await
    }

    pub(super) async fn increment(
        &self,
        key: &str,
        delta: i64,
        deadline: Instant,
    ) -> Result<i64, KvError> {
        let key = key.to_string();
        self.write(deadline, move |t| {
            let (count, expires) = match t.load(&key)? {
                None => (0, 0),
                Some(e) => (parse_count(&e.value)?, e.expires),
            };
            let count = count.checked_add(delta).ok_or_else(overflow)?;
            t.put(&key, count.to_string().as_bytes(), expires)?;
            Ok(count)
        })
        .await
    }

    pub(super) async fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<Vec<u8>>,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
        deadline: Instant,
    ) -> Result<bool, KvError> {
        let key = key.to_string();
        self.write(deadline, move |t| {
            let current = t.load(&key)?.map(|e| e.value);
            if current != expected {
                return Ok(false);
            }
            let expires = t.expiry_of(ttl_ms);
            t.put(&key, &value, expires)?;
            Ok(true)
        })
        .await
    }

    /// Runs `op` in one write transaction, sweeps expired keys and commits; an error of `op`
    /// undoes everything. Waiting for the write lock past `deadline` gives up before writing,
    /// so a call that answered "timed out" changes nothing.
    async fn write<T: Send + 'static>(
        &self,
        deadline: Instant,
        op: impl FnOnce(&mut Tables<'_>) -> Result<T, KvError> + Send + 'static,
    ) -> Result<T, KvError> {
        let db = self.db.clone();
        blocking(move || {
            let txn = db.begin_write().map_err(failed)?;
            if Instant::now() >= deadline {
                abort(txn);
                return Err(KvError::Unavailable(
                    "timed out waiting for the store's write lock".into(),
                ));
            }
            let result = {
                let mut tables = Tables {
                    values: txn.open_table(VALUES).map_err(failed)?,
                    expiry: txn.open_table(EXPIRY).map_err(failed)?,
                    now: now_ms(),
                };
                op(&mut tables).and_then(|out| tables.sweep().map(|()| out))
            };
            match result {
                Ok(out) => txn.commit().map(|()| out).map_err(failed),
                Err(e) => {
                    abort(txn);
                    Err(e)
                }
            }
        })
        .await
    }

    /// How many keys the file holds, expired or not, and how many of them expire (tests of
    /// the sweep).
    #[cfg(test)]
    pub(super) fn stored(&self) -> (u64, u64) {
        use redb::ReadableTableMetadata as _;
        let count = || -> Result<(u64, u64), redb::Error> {
            let txn = self.db.begin_read()?;
            Ok((
                txn.open_table(VALUES)?.len()?,
                txn.open_table(EXPIRY)?.len()?,
            ))
        };
        count().unwrap_or((u64::MAX, u64::MAX))
    }
}

impl Tables<'_> {
    /// The expiry time of a value written now with `ttl_ms` (0: never).
    fn expiry_of(&self, ttl_ms: Option<u64>) -> u64 {
        ttl_ms.map_or(0, |ttl| self.now.saturating_add(ttl))
    }

    /// The live entry under `key`; an expired one is removed.
    fn load(&mut self, key: &str) -> Result<Option<Entry>, KvError> {
        let found = match self.values.get(key).map_err(failed)? {
            None => return Ok(None),
            Some(stored) => live(stored.value(), self.now),
        };
        if found.is_none() {
            self.remove(key)?;
        }
        Ok(found)
    }

    /// Stores `value` under `key`, replacing the entry and its place in the expiry index.
    fn put(&mut self, key: &str, value: &[u8], expires: u64) -> Result<(), KvError> {
        let mut stored = Vec::with_capacity(8 + value.len());
        stored.extend_from_slice(&expires.to_be_bytes());
        stored.extend_from_slice(value);
        let old = self.values.insert(key, stored.as_slice()).map_err(failed)?;
        let old_expires = old.map(|v| split(v.value()).0).unwrap_or(0);
        if old_expires != 0 {
            self.expiry
                .remove(index_key(old_expires, key).as_slice())
                .map_err(failed)?;
        }
        if expires != 0 {
            self.expiry
                .insert(index_key(expires, key).as_slice(), ())
                .map_err(failed)?;
        }
        Ok(())
    }

    /// Removes `key`; the entry it had, if it was live.
    fn remove(&mut self, key: &str) -> Result<Option<Entry>, KvError> {
        let old = self.values.remove(key).map_err(failed)?;
        let Some(old) = old else {
            return Ok(None);
        };
        let (expires, _) = split(old.value());
        let found = live(old.value(), self.now);
        drop(old);
        if expires != 0 {
            self.expiry
                .remove(index_key(expires, key).as_slice())
                .map_err(failed)?;
        }
        Ok(found)
    }

    /// Removes up to [`SWEEP_BATCH`] keys whose time has come.
    fn sweep(&mut self) -> Result<(), KvError> {
        // Index keys are the expiry then the key, so `..now + 1` is every key whose time is at
        // or before now: the keys `live` already calls gone.
        let now = self.now.saturating_add(1).to_be_bytes();
        let mut due = Vec::new();
        for entry in self
            .expiry
            .range::<&[u8]>(..now.as_slice())
            .map_err(failed)?
        {
            let (index, _) = entry.map_err(failed)?;
            due.push(index.value().to_vec());
            if due.len() == SWEEP_BATCH {
                break;
            }
        }
        for index in due {
            self.expiry.remove(index.as_slice()).map_err(failed)?;
            // Always valid UTF-8: built from a `&str` by `index_key`.
            if let Ok(key) = std::str::from_utf8(&index[8..]) {
                self.values.remove(key).map_err(failed)?;
            }
        }
        Ok(())
    }
}

/// Runs redb work on the blocking pool; a panic in it (a corrupt file) answers `unavailable`
/// instead of reaching the host. The caller bounds the wait.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, KvError> + Send + 'static,
) -> Result<T, KvError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(e) => Err(KvError::Unavailable(format!(
            "the store's file failed: {e}"
        ))),
    }
}

fn abort(txn: redb::WriteTransaction) {
    if let Err(e) = txn.abort() {
        tracing::warn!("[kv] aborting a write transaction failed: {e}");
    }
}

/// A redb error: the file cannot be read or written (disk full, I/O error, corruption).
fn failed(e: impl Into<redb::Error>) -> KvError {
    KvError::Unavailable(format!("the store's file failed: {}", e.into()))
}

/// Splits a stored value into its expiry time and the value. A stored value shorter than the
/// header (never written by this module) reads as an empty value that never expires.
fn split(stored: &[u8]) -> (u64, &[u8]) {
    match stored.split_first_chunk::<8>() {
        Some((expires, value)) => (u64::from_be_bytes(*expires), value),
        None => (0, &[]),
    }
}

/// The entry a stored value holds, unless it expired by `now`.
fn live(stored: &[u8], now: u64) -> Option<Entry> {
    let (expires, value) = split(stored);
    (expires == 0 || expires > now).then(|| Entry {
        expires,
        value: value.to_vec(),
    })
}

/// The key of `key` in the expiry index: ordered by expiry time, then key.
fn index_key(expires: u64, key: &str) -> Vec<u8> {
    let mut index = Vec::with_capacity(8 + key.len());
    index.extend_from_slice(&expires.to_be_bytes());
    index.extend_from_slice(key.as_bytes());
    index
}

/// A count stored as decimal text, as `increment` writes it and Redis reads it.
fn parse_count(value: &[u8]) -> Result<i64, KvError> {
    let text = std::str::from_utf8(value).map_err(|_| not_a_counter())?;
    // Redis takes neither a `+` nor spaces; `parse` would take the `+`.
    if text.starts_with('+') {
        return Err(not_a_counter());
    }
    text.parse().map_err(|_| not_a_counter())
}

/// Milliseconds since the Unix epoch: expiry times outlive the process.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
