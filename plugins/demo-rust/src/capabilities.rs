//! What the demo does with the capabilities its subscription grants, on every message: a count
//! per original routing key in the key-value store (`kv = "NAME"`), an audit row in the database
//! (`sql = "NAME"`), and the HTTP request the body asks for. Without a grant a call answers
//! `denied`: logged at debug and skipped, so the demo runs with no grant at all. A store or
//! database that is down answers retry, and so does a constraint error on the audit (two first
//! messages creating the table at once, in PostgreSQL).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use worker_plugin_sdk::http::{self, HttpError};
use worker_plugin_sdk::kv::{self, KvError};
use worker_plugin_sdk::sql::{self, SqlError, Value};
use worker_plugin_sdk::{Message, Outcome, debug, info};

/// The audit table, made by the plugin itself: the same DDL suits SQLite, MySQL and PostgreSQL.
pub const AUDIT_TABLE: &str = "CREATE TABLE IF NOT EXISTS demo_audit (
    routing_key VARCHAR(255) NOT NULL,
    message_id VARCHAR(255),
    attempt INTEGER NOT NULL,
    body_len INTEGER NOT NULL,
    handled_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP
)";
/// One row per message (`$1` placeholders: SQLite and PostgreSQL; MySQL takes `?`).
pub const AUDIT_ROW: &str =
    "INSERT INTO demo_audit (routing_key, message_id, attempt, body_len) VALUES ($1, $2, $3, $4)";
/// The rows in the table, this message's included.
pub const AUDIT_COUNT: &str = "SELECT COUNT(*) FROM demo_audit";

/// This message's number among those of its original routing key; `None` without a kv grant.
pub fn count_seen(msg: &Message) -> Result<Option<i64>, Outcome> {
    match kv::increment(&format!("seen:{}", msg.original_routing_key()), 1) {
        Ok(n) => Ok(Some(n)),
        Err(KvError::Denied) => {
            debug!("kv not granted: messages are not counted");
            Ok(None)
        }
        Err(KvError::Unavailable(why)) => Err(Outcome::retry(format!("kv unavailable: {why}"))),
        Err(e) => Err(Outcome::fail(format!("kv: {e}"))),
    }
}

/// Writes this message's audit row; the rows in the table then. `None` without a sql grant.
pub fn audit(msg: &Message) -> Result<Option<i64>, Outcome> {
    let body_len = i64::try_from(msg.body().len()).unwrap_or(i64::MAX);
    let row: [Value; 4] = [
        msg.original_routing_key().into(),
        msg.message_id().into(),
        msg.attempt().into(),
        body_len.into(),
    ];
    let written = sql::execute(AUDIT_TABLE, &[])
        .and_then(|_| sql::execute(AUDIT_ROW, &row))
        .and_then(|_| sql::query(AUDIT_COUNT, &[]));
    match written {
        Ok(rows) => Ok(Some(
            rows.first()
                .and_then(|r| r.at(0).and_then(Value::as_i64))
                .unwrap_or(0),
        )),
        Err(SqlError::Denied) => {
            debug!("sql not granted: no audit row");
            Ok(None)
        }
        Err(SqlError::Unavailable(why)) => Err(Outcome::retry(format!("sql unavailable: {why}"))),
        // The table made by another message meanwhile (PostgreSQL): try again.
        Err(e @ SqlError::Constraint(_)) => {
            Err(Outcome::retry(format!("audit: {}", sql_error_text(&e))))
        }
        Err(e) => Err(Outcome::fail(format!("audit: {}", sql_error_text(&e)))),
    }
}

/// `kind: detail`, as the other languages' demos word a failed statement.
fn sql_error_text(e: &SqlError) -> String {
    match e {
        SqlError::Denied => "denied".to_owned(),
        SqlError::Unavailable(d) => format!("unavailable: {d}"),
        SqlError::Constraint(d) => format!("constraint: {d}"),
        SqlError::Invalid(d) => format!("invalid: {d}"),
        SqlError::Other(d) => format!("other: {d}"),
    }
}

/// The request a body's `http` key describes.
#[derive(Debug, Deserialize)]
pub struct HttpCall {
    /// Absolute URL.
    pub url: String,
    /// Method, default GET.
    #[serde(default)]
    pub method: Option<String>,
    /// Body text.
    #[serde(default)]
    pub body: Option<String>,
    /// Headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// What came of a request: its answer or its error.
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum HttpReport {
    /// An answer, whatever its status.
    Answer {
        /// Status code.
        status: u16,
        /// Body text (lossy).
        body: String,
    },
    /// No answer.
    Error {
        /// Why, as the SDK's [`HttpError`] says it.
        error: String,
    },
}

/// Sends the request; its answer or its error, also logged.
pub fn fetch(call: &HttpCall) -> HttpReport {
    let method = call.method.as_deref().unwrap_or("GET");
    let mut request = http::Request::new(method, &call.url);
    for (name, value) in &call.headers {
        request = request.header(name, value);
    }
    if let Some(body) = &call.body {
        request = request.body(body.as_bytes());
    }
    let report = match request.send() {
        Ok(answer) => HttpReport::Answer {
            status: answer.status,
            body: answer.text(),
        },
        Err(e) => HttpReport::Error {
            error: error_name(&e),
        },
    };
    let said = match &report {
        HttpReport::Answer { status, .. } => status.to_string(),
        HttpReport::Error { error } => error.clone(),
    };
    info!("http {method} {}: {said}", call.url);
    report
}

/// The error as text; a refused destination reads as wasi:http names it.
fn error_name(e: &HttpError) -> String {
    match e {
        HttpError::Denied => "HTTP-request-denied".to_owned(),
        other => other.to_string(),
    }
}
