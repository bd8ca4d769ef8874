//! The script's steps: one call (or a few, for `add`) to the `kv`, `sql` or HTTP capability,
//! or a look at the environment, and what it answered as JSON.
//!
//! | step | result (`ok`) |
//! |---|---|
//! | `{"kv": "get", "key": K}` | the value as text (lossy), or `null` |
//! | `{"kv": "set", "key": K, "value": V, "ttl_ms": N}` (`value_len`: N bytes of `x` instead of `value`) | `null` |
//! | `{"kv": "delete", "key": K}` | whether it existed |
//! | `{"kv": "increment", "key": K, "delta": D}` (default 1) | the new value |
//! | `{"kv": "cas", "key": K, "expected": V or null, "value": V, "ttl_ms": N}` | whether it wrote |
//! | `{"kv": "add", "key": K, "delta": D, "times": T}`: T times get, then compare-and-swap the decimal value plus D until it writes | `{"value": last, "tries": swaps tried}` |
//! | `{"sql": "execute", "statement": S, "params": [...]}` | rows affected |
//! | `{"sql": "query", "statement": S, "params": [...]}` | `{"columns": [...], "rows": [[...]]}` |
//! | `{"http": METHOD, "url": U, "headers": {...}, "body": B, "timeout_ms": N}` | `{"status", "headers", "body", "body_len", "sent_headers"}` |
//! | `{"env": NAME}` | the variable's value in the guest, or `null` |
//!
//! SQL values are JSON: `null`, booleans, integers, other numbers (floats), strings, and
//! `{"bytes": [0, 1]}`. A response's header names are lower case; `sent_headers` are the ones the
//! guest itself put on its request, all it can know of what went out.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use worker_plugin_sdk::http::{self, HttpError};
use worker_plugin_sdk::kv::{self, KvError};
use worker_plugin_sdk::serde_json::{self, Map, Value, json};
use worker_plugin_sdk::sql::{self, SqlError};

/// Most compare-and-swap attempts of one `add` step before it gives up.
const MAX_TRIES: u64 = 10_000;

/// One step of the script.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Step {
    /// A key-value call.
    Kv(KvStep),
    /// A statement.
    Sql(SqlStep),
    /// A request.
    Http(HttpStep),
    /// An environment variable, as the guest sees it.
    Env {
        /// The variable's name.
        env: String,
    },
}

/// `{"kv": OP, ...}`.
#[derive(Debug, Deserialize)]
pub struct KvStep {
    /// get, set, delete, increment, cas or add.
    pub kv: String,
    #[serde(default)]
    pub key: String,
    pub value: Option<String>,
    /// A value of this many bytes (`x`), instead of `value`.
    pub value_len: Option<usize>,
    pub ttl_ms: Option<u64>,
    #[serde(default = "one")]
    pub delta: i64,
    /// For cas: the value expected; absent or null: the key must be absent.
    pub expected: Option<String>,
    /// For add: how many increments.
    #[serde(default = "one")]
    pub times: i64,
}

fn one() -> i64 {
    1
}

/// `{"sql": "query" | "execute", ...}`.
#[derive(Debug, Deserialize)]
pub struct SqlStep {
    pub sql: String,
    pub statement: String,
    #[serde(default)]
    pub params: Vec<Value>,
}

/// `{"http": METHOD, ...}`.
#[derive(Debug, Deserialize)]
pub struct HttpStep {
    pub http: String,
    pub url: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub body: Option<String>,
    pub timeout_ms: Option<u64>,
}

/// Why a step failed: the world's error variant name and the SDK's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepError {
    pub name: String,
    pub text: String,
}

impl StepError {
    fn new(name: &str, text: impl ToString) -> StepError {
        StepError {
            name: name.to_owned(),
            text: text.to_string(),
        }
    }
}

/// What one step answered.
pub type StepResult = Result<Value, StepError>;

/// Runs one step given as JSON; one that is not a step answers `bad-step`.
pub fn run(step: &Value) -> StepResult {
    match serde_json::from_value::<Step>(step.clone()) {
        Ok(Step::Kv(s)) => run_kv(&s),
        Ok(Step::Sql(s)) => run_sql(&s),
        Ok(Step::Http(s)) => run_http(&s),
        Ok(Step::Env { env }) => Ok(std::env::var(env).map_or(Value::Null, Value::String)),
        Err(_) => Err(StepError::new(
            "bad-step",
            format_args!("not a kv, sql, http or env step: {step}"),
        )),
    }
}

/// `{"ok": value}` or `{"error": name, "text": text}`.
pub fn result_json(result: &StepResult) -> Value {
    let mut map = Map::new();
    match result {
        Ok(value) => {
            map.insert("ok".to_owned(), value.clone());
        }
        Err(e) => {
            map.insert("error".to_owned(), Value::String(e.name.clone()));
            map.insert("text".to_owned(), Value::String(e.text.clone()));
        }
    }
    Value::Object(map)
}

fn kv_error(e: KvError) -> StepError {
    let name = match e {
        KvError::Denied => "denied",
        KvError::Unavailable(_) => "unavailable",
        KvError::TooLarge => "too-large",
        KvError::InvalidKey => "invalid-key",
    };
    StepError::new(name, e)
}

fn run_kv(s: &KvStep) -> StepResult {
    let value = match s.value_len {
        Some(n) => "x".repeat(n),
        None => s.value.clone().unwrap_or_default(),
    };
    let ttl = s.ttl_ms.map(Duration::from_millis);
    let key = s.key.as_str();
    match s.kv.as_str() {
        "get" => {
            kv::get(key).map(|v| v.map_or(Value::Null, |b| String::from_utf8_lossy(&b).into()))
        }
        "set" => match ttl {
            Some(ttl) => kv::set_with_ttl(key, value, ttl),
            None => kv::set(key, value),
        }
        .map(|()| Value::Null),
        "delete" => kv::delete(key).map(Value::Bool),
        "increment" => kv::increment(key, s.delta).map(Value::from),
        "cas" => kv::compare_and_swap(key, s.expected.as_deref().map(str::as_bytes), value, ttl)
            .map(Value::Bool),
        "add" => return add(key, s.delta, s.times),
        other => {
            return Err(StepError::new(
                "bad-step",
                format_args!("no kv operation {other:?}"),
            ));
        }
    }
    .map_err(kv_error)
}

/// `times` increments of the decimal value at `key` by get and compare-and-swap, each retried
/// until its swap wins: the lost-update check of concurrent handlers.
fn add(key: &str, delta: i64, times: i64) -> StepResult {
    let mut tries = 0u64;
    let mut last = 0i64;
    for _ in 0..times {
        loop {
            if tries >= MAX_TRIES {
                return Err(StepError::new(
                    "gave-up",
                    format_args!("{tries} compare-and-swap attempts on {key:?}"),
                ));
            }
            tries += 1;
            let current = kv::get(key).map_err(kv_error)?;
            let n = match &current {
                None => 0,
                Some(bytes) => String::from_utf8_lossy(bytes).parse::<i64>().map_err(|e| {
                    StepError::new("bad-step", format_args!("{key:?} is not an integer: {e}"))
                })?,
            };
            let next = n + delta;
            let swapped = kv::compare_and_swap(key, current.as_deref(), next.to_string(), None)
                .map_err(kv_error)?;
            if swapped {
                last = next;
                break;
            }
        }
    }
    Ok(json!({"value": last, "tries": tries}))
}

fn sql_error(e: SqlError) -> StepError {
    let name = match e {
        SqlError::Denied => "denied",
        SqlError::Unavailable(_) => "unavailable",
        SqlError::Constraint(_) => "constraint",
        SqlError::Invalid(_) => "invalid",
        SqlError::Other(_) => "other",
    };
    StepError::new(name, e)
}

fn run_sql(s: &SqlStep) -> StepResult {
    let params = s.params.iter().map(param).collect::<Result<Vec<_>, _>>()?;
    match s.sql.as_str() {
        "execute" => sql::execute(&s.statement, &params).map(Value::from),
        "query" => sql::query(&s.statement, &params).map(|answer| {
            let rows: Vec<Vec<Value>> = answer
                .rows
                .iter()
                .map(|row| row.iter().map(value_json).collect())
                .collect();
            json!({"columns": answer.columns, "rows": rows})
        }),
        other => {
            return Err(StepError::new(
                "bad-step",
                format_args!("no sql call {other:?}"),
            ));
        }
    }
    .map_err(sql_error)
}

/// A parameter from its JSON form.
fn param(v: &Value) -> Result<sql::Value, StepError> {
    Ok(match v {
        Value::Null => sql::Value::Null,
        Value::Bool(b) => sql::Value::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => sql::Value::Int(i),
            None => sql::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => sql::Value::Text(s.clone()),
        Value::Object(o) => match o.get("bytes").and_then(Value::as_array) {
            Some(bytes) => sql::Value::Bytes(
                bytes
                    .iter()
                    .map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()).unwrap_or(0))
                    .collect(),
            ),
            None => return Err(StepError::new("bad-step", format_args!("bad param {v}"))),
        },
        Value::Array(_) => return Err(StepError::new("bad-step", format_args!("bad param {v}"))),
    })
}

/// A column value as JSON (a float that is not finite becomes null).
fn value_json(v: &sql::Value) -> Value {
    match v {
        sql::Value::Null => Value::Null,
        sql::Value::Boolean(b) => Value::Bool(*b),
        sql::Value::Int(i) => Value::from(*i),
        sql::Value::Float(x) => serde_json::Number::from_f64(*x).map_or(Value::Null, Value::Number),
        sql::Value::Text(s) => Value::String(s.clone()),
        sql::Value::Bytes(b) => json!({"bytes": b}),
    }
}

fn http_error(e: HttpError) -> StepError {
    let name = match e {
        HttpError::Denied => "denied",
        HttpError::Invalid(_) => "invalid",
        HttpError::Timeout => "timeout",
        HttpError::TooLarge => "too-large",
        HttpError::Unavailable(_) => "unavailable",
    };
    StepError::new(name, e)
}

fn run_http(s: &HttpStep) -> StepResult {
    let mut request = http::Request::new(&s.http, &s.url);
    for (name, value) in &s.headers {
        request = request.header(name, value);
    }
    if let Some(body) = &s.body {
        request = request.body(body.as_bytes());
    }
    if let Some(ms) = s.timeout_ms {
        request = request.timeout(Duration::from_millis(ms));
    }
    let sent: BTreeMap<String, String> = request
        .headers
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
        .collect();
    let answer = request.send().map_err(http_error)?;
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in &answer.headers {
        headers
            .entry(name.to_ascii_lowercase())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(value);
            })
            .or_insert_with(|| value.clone());
    }
    Ok(json!({
        "status": answer.status,
        "headers": headers,
        "body": answer.text(),
        "body_len": answer.body.len(),
        "sent_headers": sent,
    }))
}
