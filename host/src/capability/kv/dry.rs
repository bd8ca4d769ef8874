//! `kv` in a dry run: reads see the store through the writes the call made; every write is
//! recorded and kept in the call's own overlay, never sent to the store.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use super::{Store, check_key, not_a_counter, overflow};
use crate::capability::capture::{Capture, bytes_json};
use crate::wit::worker::plugin::kv::KvError;

/// One dry-run call's view of the store.
pub(super) struct Dry {
    capture: Arc<Capture>,
    /// Keys written by this call: `Some(value)`, or `None` once deleted.
    overlay: HashMap<String, Option<Vec<u8>>>,
}

impl Dry {
    pub(super) fn new(capture: Arc<Capture>) -> Dry {
        Dry {
            capture,
            overlay: HashMap::new(),
        }
    }

    pub(super) async fn get(
        &self,
        store: &Store,
        key: &str,
        deadline: Instant,
    ) -> Result<Option<Vec<u8>>, KvError> {
        check_key(key)?;
        match self.overlay.get(key) {
            Some(value) => Ok(value.clone()),
            None => store.get(key, deadline).await,
        }
    }

    pub(super) fn set(
        &mut self,
        store: &Store,
        key: &str,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
    ) -> Result<(), KvError> {
        check_key(key)?;
        store.check_value(&value)?;
        self.write(
            store,
            "set",
            key,
            json!({"value": bytes_json(&value), "ttl_ms": ttl_ms}),
        );
        self.overlay.insert(key.to_string(), Some(value));
        Ok(())
    }

    pub(super) async fn delete(
        &mut self,
        store: &Store,
        key: &str,
        deadline: Instant,
    ) -> Result<bool, KvError> {
        let existed = self.get(store, key, deadline).await?.is_some();
        self.write(store, "delete", key, json!({}));
        self.overlay.insert(key.to_string(), None);
        Ok(existed)
    }

    pub(super) async fn increment(
        &mut self,
        store: &Store,
        key: &str,
        delta: i64,
        deadline: Instant,
    ) -> Result<i64, KvError> {
        let current = match self.get(store, key, deadline).await? {
            None => 0,
            Some(bytes) => std::str::from_utf8(&bytes)
                .ok()
                .and_then(|t| t.parse::<i64>().ok())
                .ok_or_else(not_a_counter)?,
        };
        let next = current.checked_add(delta).ok_or_else(overflow)?;
        self.write(
            store,
            "increment",
            key,
            json!({"delta": delta, "value": next}),
        );
        self.overlay
            .insert(key.to_string(), Some(next.to_string().into_bytes()));
        Ok(next)
    }

    pub(super) async fn compare_and_swap(
        &mut self,
        store: &Store,
        key: &str,
        (expected, value): (Option<Vec<u8>>, Vec<u8>),
        ttl_ms: Option<u64>,
        deadline: Instant,
    ) -> Result<bool, KvError> {
        store.check_value(&value)?;
        if self.get(store, key, deadline).await? != expected {
            return Ok(false);
        }
        let effect = json!({"value": bytes_json(&value), "ttl_ms": ttl_ms});
        self.write(store, "compare-and-swap", key, effect);
        self.overlay.insert(key.to_string(), Some(value));
        Ok(true)
    }

    /// Records a write of `op` on `key`, with the fields of `more`.
    fn write(&self, store: &Store, op: &str, key: &str, more: Value) {
        let mut effect = json!({"kv": op, "store": store.recorder.store(), "key": key});
        if let (Some(effect), Value::Object(more)) = (effect.as_object_mut(), more) {
            effect.extend(more);
        }
        self.capture.record(effect);
    }
}
