//! Conversions between the types wit-bindgen generates from the world and the SDK's own. Used by
//! the component backend, and natively by the test harness, which calls the same export path.

// Natively only the export path's conversions have a caller outside the tests.
#![cfg_attr(worker_backend = "native", allow(dead_code))]

use std::time::Duration;

use crate::bindings::worker::plugin::{host, kv as wit_kv, sql as wit_sql, types};
use crate::kv::KvError;
use crate::sql::{Rows, SqlError, Value};
use crate::{Level, Outcome, Outgoing, PublishError};

/// The handler's answer as the world's `outcome`.
pub(crate) fn outcome_to_wit(outcome: Outcome) -> types::Outcome {
    match outcome {
        Outcome::Ok => types::Outcome::Ok,
        Outcome::Retry(reason) => types::Outcome::Retry(types::RetryRequest {
            reason,
            after_ms: None,
        }),
        Outcome::RetryAfter(reason, after) => types::Outcome::Retry(types::RetryRequest {
            reason,
            after_ms: Some(millis_up(after)),
        }),
        Outcome::Fail(reason) => types::Outcome::Fail(reason),
    }
}

/// What the host reads back, as the SDK's [`Outcome`] (for the test harness).
#[cfg(worker_backend = "native")]
pub(crate) fn outcome_from_wit(outcome: types::Outcome) -> Outcome {
    match outcome {
        types::Outcome::Ok => Outcome::Ok,
        types::Outcome::Retry(types::RetryRequest {
            reason,
            after_ms: None,
        }) => Outcome::Retry(reason),
        types::Outcome::Retry(types::RetryRequest {
            reason,
            after_ms: Some(ms),
        }) => Outcome::RetryAfter(reason, Duration::from_millis(ms)),
        types::Outcome::Fail(reason) => Outcome::Fail(reason),
    }
}

/// Whole milliseconds, a nonzero duration below one rounding up to one.
fn millis_up(d: Duration) -> u64 {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 && !d.is_zero() { 1 } else { ms }
}

pub(crate) fn level_to_wit(level: Level) -> host::Level {
    match level {
        Level::Trace => host::Level::Trace,
        Level::Debug => host::Level::Debug,
        Level::Info => host::Level::Info,
        Level::Warn => host::Level::Warn,
        Level::Error => host::Level::Error,
    }
}

pub(crate) fn outgoing_to_wit(out: &Outgoing) -> types::Outgoing {
    types::Outgoing {
        exchange: out.exchange.clone(),
        routing_key: out.routing_key.clone(),
        body: out.body.clone(),
        content_type: out.content_type.clone(),
        headers: out
            .headers
            .iter()
            .map(|(name, value)| types::Header {
                name: name.clone(),
                value: value.clone(),
            })
            .collect(),
        delay_ms: out.delay_ms(),
    }
}

pub(crate) fn publish_error_from_wit(e: types::PublishError, exchange: &str) -> PublishError {
    match e {
        types::PublishError::NotAllowed => PublishError::ExchangeNotAllowed(exchange.to_owned()),
        types::PublishError::DelayRefused => PublishError::DelayRefused,
        types::PublishError::TooMany => PublishError::TooManyMessages,
        types::PublishError::TooLarge => PublishError::TooManyBytes,
        types::PublishError::Invalid => PublishError::Invalid,
    }
}

pub(crate) fn kv_error_from_wit(e: wit_kv::KvError) -> KvError {
    match e {
        wit_kv::KvError::Denied => KvError::Denied,
        wit_kv::KvError::Unavailable(why) => KvError::Unavailable(why),
        wit_kv::KvError::TooLarge => KvError::TooLarge,
        wit_kv::KvError::InvalidKey => KvError::InvalidKey,
    }
}

pub(crate) fn value_to_wit(v: &Value) -> wit_sql::Value {
    match v {
        Value::Null => wit_sql::Value::Null,
        Value::Boolean(b) => wit_sql::Value::Boolean(*b),
        Value::Int(n) => wit_sql::Value::Int(*n),
        Value::Float(x) => wit_sql::Value::Float(*x),
        Value::Text(s) => wit_sql::Value::Text(s.clone()),
        Value::Bytes(b) => wit_sql::Value::Bytes(b.clone()),
    }
}

pub(crate) fn value_from_wit(v: wit_sql::Value) -> Value {
    match v {
        wit_sql::Value::Null => Value::Null,
        wit_sql::Value::Boolean(b) => Value::Boolean(b),
        wit_sql::Value::Int(n) => Value::Int(n),
        wit_sql::Value::Float(x) => Value::Float(x),
        wit_sql::Value::Text(s) => Value::Text(s),
        wit_sql::Value::Bytes(b) => Value::Bytes(b),
    }
}

pub(crate) fn rows_from_wit(r: wit_sql::Rows) -> Rows {
    Rows {
        columns: r.columns,
        rows: r
            .rows
            .into_iter()
            .map(|row| row.into_iter().map(value_from_wit).collect())
            .collect(),
    }
}

pub(crate) fn sql_error_from_wit(e: wit_sql::SqlError) -> SqlError {
    match e {
        wit_sql::SqlError::Denied => SqlError::Denied,
        wit_sql::SqlError::Unavailable(why) => SqlError::Unavailable(why),
        wit_sql::SqlError::Constraint(why) => SqlError::Constraint(why),
        wit_sql::SqlError::Invalid(why) => SqlError::Invalid(why),
        wit_sql::SqlError::Other(why) => SqlError::Other(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_round_trip_with_their_delay() {
        let cases = [
            Outcome::Ok,
            Outcome::retry("later"),
            Outcome::retry_after("rate limited", Duration::from_millis(1500)),
            Outcome::fail("no"),
        ];
        for outcome in cases {
            assert_eq!(outcome_from_wit(outcome_to_wit(outcome.clone())), outcome);
        }
        let sub_ms = outcome_to_wit(Outcome::retry_after("r", Duration::from_micros(10)));
        assert!(matches!(
            sub_ms,
            types::Outcome::Retry(types::RetryRequest {
                after_ms: Some(1),
                ..
            })
        ));
    }

    #[test]
    fn outgoing_carries_every_property() {
        let out = Outgoing::new("ex", "k", "b")
            .content_type("text/plain")
            .header("h", 1)
            .delay(Duration::from_micros(1));
        let wit = outgoing_to_wit(&out);
        assert_eq!(
            (wit.exchange.as_str(), wit.routing_key.as_str()),
            ("ex", "k")
        );
        assert_eq!(wit.body, b"b");
        assert_eq!(wit.content_type.as_deref(), Some("text/plain"));
        assert_eq!(
            (wit.headers[0].name.as_str(), wit.headers[0].value.as_str()),
            ("h", "1")
        );
        assert_eq!(wit.delay_ms, 1);
    }

    #[test]
    fn errors_map_to_the_sdk_variants() {
        let publish = [
            (types::PublishError::NotAllowed, "not-allowed"),
            (types::PublishError::DelayRefused, "delay-refused"),
            (types::PublishError::TooMany, "too-many"),
            (types::PublishError::TooLarge, "too-large"),
            (types::PublishError::Invalid, "invalid"),
        ];
        for (wit, name) in publish {
            assert_eq!(wit.name(), name);
            assert_eq!(publish_error_from_wit(wit, "ex").name(), name);
        }
        assert_eq!(
            kv_error_from_wit(wit_kv::KvError::Unavailable("down".into())),
            KvError::Unavailable("down".into())
        );
        assert_eq!(
            kv_error_from_wit(wit_kv::KvError::InvalidKey),
            KvError::InvalidKey
        );
        assert_eq!(
            sql_error_from_wit(wit_sql::SqlError::Constraint("dup".into())),
            SqlError::Constraint("dup".into())
        );
    }

    #[test]
    fn sql_values_round_trip() {
        let values = [
            Value::Null,
            Value::Boolean(true),
            Value::Int(-3),
            Value::Float(0.5),
            Value::Text("t".into()),
            Value::Bytes(vec![0, 255]),
        ];
        let rows = wit_sql::Rows {
            columns: vec!["c".into()],
            rows: values.iter().map(|v| vec![value_to_wit(v)]).collect(),
        };
        let back = rows_from_wit(rows);
        assert_eq!(back.columns, ["c"]);
        let got: Vec<_> = back.rows.into_iter().flatten().collect();
        assert_eq!(got, values);
    }

    #[test]
    fn levels_keep_their_order() {
        for level in Level::ALL {
            assert_eq!(
                i32::from(level_to_wit(level) as u8),
                level.code(),
                "{level}"
            );
        }
    }
}
