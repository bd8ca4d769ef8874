//! The component backend: the world's imports (`host`, `kv`, `sql`), through the bindings
//! wit-bindgen generated (HTTP is in `component_http`), so no hand-written `unsafe` is needed
//! here.

use crate::bindings::worker::plugin::{host, kv, sql};
use crate::kv::KvError;
use crate::sql::{Rows, SqlError, Value};
use crate::{Level, Outgoing, PublishError, wit};

pub(crate) fn log(level: Level, message: &str) {
    host::log(wit::level_to_wit(level), message);
}

/// The world's `reason` travels in the outcome; a panic aborts into a trap, whose message the
/// host records, so there is nothing to hand over early.
pub(crate) fn set_reason(_reason: &str) {}

pub(crate) fn config() -> Option<Vec<u8>> {
    Some(host::config().into_bytes())
}

pub(crate) fn publish(out: &Outgoing) -> Result<(), PublishError> {
    host::publish(&wit::outgoing_to_wit(out))
        .map_err(|e| wit::publish_error_from_wit(e, &out.exchange))
}

pub(crate) fn kv_get(key: &str) -> Result<Option<Vec<u8>>, KvError> {
    kv::get(key).map_err(wit::kv_error_from_wit)
}

pub(crate) fn kv_set(key: &str, value: &[u8], ttl_ms: Option<u64>) -> Result<(), KvError> {
    kv::set(key, value, ttl_ms).map_err(wit::kv_error_from_wit)
}

pub(crate) fn kv_delete(key: &str) -> Result<bool, KvError> {
    kv::delete(key).map_err(wit::kv_error_from_wit)
}

pub(crate) fn kv_increment(key: &str, delta: i64) -> Result<i64, KvError> {
    kv::increment(key, delta).map_err(wit::kv_error_from_wit)
}

pub(crate) fn kv_compare_and_swap(
    key: &str,
    expected: Option<&[u8]>,
    value: &[u8],
    ttl_ms: Option<u64>,
) -> Result<bool, KvError> {
    kv::compare_and_swap(key, expected, value, ttl_ms).map_err(wit::kv_error_from_wit)
}

pub(crate) fn sql_query(statement: &str, params: &[Value]) -> Result<Rows, SqlError> {
    let params: Vec<_> = params.iter().map(wit::value_to_wit).collect();
    sql::query(statement, &params)
        .map(wit::rows_from_wit)
        .map_err(wit::sql_error_from_wit)
}

pub(crate) fn sql_execute(statement: &str, params: &[Value]) -> Result<u64, SqlError> {
    let params: Vec<_> = params.iter().map(wit::value_to_wit).collect();
    sql::execute(statement, &params).map_err(wit::sql_error_from_wit)
}
