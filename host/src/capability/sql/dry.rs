//! `sql` in a dry run: each statement runs in the message's transaction, which is always rolled
//! back, and is recorded with its parameters and what it answered.

use serde_json::{Value, json};

use super::backend::Output;
use super::error::Failure;
use crate::capability::capture::bytes_json;
use crate::wit::worker::plugin::sql;

/// The record of one statement on database `store`.
pub(super) fn effect(
    store: &str,
    statement: &str,
    params: &[sql::Value],
    result: &Result<Output, Failure>,
) -> Value {
    let params: Vec<Value> = params.iter().map(value_json).collect();
    let mut effect = json!({"sql": store, "statement": statement, "params": params});
    let answer = match result {
        Ok(Output::Rows(rows)) => ("rows", json!(rows.rows.len())),
        Ok(Output::Affected(n)) => ("affected", json!(n)),
        Err(failure) => ("error", json!(failure.kind())),
    };
    if let Some(map) = effect.as_object_mut() {
        map.insert(answer.0.to_string(), answer.1);
    }
    effect
}

fn value_json(value: &sql::Value) -> Value {
    match value {
        sql::Value::Null => Value::Null,
        sql::Value::Boolean(b) => json!(b),
        sql::Value::Int(i) => json!(i),
        sql::Value::Float(f) => json!(f),
        sql::Value::Text(s) => json!(s),
        sql::Value::Bytes(b) => bytes_json(b),
    }
}
