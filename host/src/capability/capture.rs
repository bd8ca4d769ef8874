//! Dry runs (`failed dry-run`): what a handler's HTTP requests, key-value writes and SQL
//! statements would have done, recorded instead of done. A message runs under a [`Capture`]
//! when its grants carry one; each capability then records its effects here and performs none
//! (SQL runs in a transaction that is always rolled back).

use std::sync::Mutex;

use serde_json::{Value, json};

/// The effects of one dry-run call, in the order they were made.
#[derive(Debug, Default)]
pub struct Capture {
    effects: Mutex<Vec<Value>>,
}

impl Capture {
    /// Records one effect (a JSON object naming its kind: `http`, `kv`, `sql`).
    pub(crate) fn record(&self, effect: Value) {
        self.lock().push(effect);
    }

    /// The effects recorded so far, leaving none.
    pub fn take(&self) -> Vec<Value> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Value>> {
        // A panic while pushing cannot leave the list half-written.
        self.effects.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Bytes as JSON: the text when they are UTF-8, else `{"hex": ...}`.
pub fn bytes_json(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(text) => Value::from(text),
        Err(_) => json!({ "hex": hex::encode(bytes) }),
    }
}
