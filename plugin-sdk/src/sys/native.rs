//! The native backend: the host's calls (of ABI v1 and of the component world) act on a
//! per-thread context that [`crate::testing`] fills in before calling a handler and reads back
//! afterwards; key-value and SQL are in-memory fakes. Outside such a run the message is empty,
//! logs go to stderr, publishes are dropped and key-value and SQL answer `unavailable`.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use worker_abi::{PUBLISH_ACCEPTED, PublishRefusal, limits};

use crate::http::{self, HttpError, Request, Response};
use crate::kv::KvError;
use crate::sql::{Rows, SqlError, Value};
use crate::{Level, Outgoing, PublishError};

/// One SQL call a handler made.
#[derive(Debug, Clone, PartialEq)]
pub struct SqlCall {
    /// `query` or `execute`.
    pub kind: SqlKind,
    /// The statement text.
    pub statement: String,
    /// Its parameters.
    pub params: Vec<Value>,
}

/// Which SQL call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlKind {
    /// [`sql::query`](crate::sql::query): rows back.
    Query,
    /// [`sql::execute`](crate::sql::execute): a row count back.
    Execute,
}

/// What the host would hold for one handler call.
#[derive(Debug, Default)]
pub(crate) struct Context {
    pub(crate) body: Vec<u8>,
    pub(crate) meta: BTreeMap<String, String>,
    pub(crate) config: Option<Vec<u8>>,
    /// `None` allows every exchange.
    pub(crate) allowed_exchanges: Option<Vec<String>>,
    /// `false` refuses delayed publishes, as a host without `[delay]` does.
    pub(crate) delays: bool,
    /// Answer every publish with this code instead of accepting it.
    pub(crate) publish_refusal: Option<i32>,
    /// The handler runs as an ABI v1 module: publishes lose their content type and headers.
    pub(crate) abi_v1: bool,
    pub(crate) logs: Vec<(Level, String)>,
    pub(crate) reason: Option<String>,
    pub(crate) publishes: Vec<Outgoing>,
    /// The key-value store: value and TTL of each key.
    pub(crate) kv: BTreeMap<String, (Vec<u8>, Option<Duration>)>,
    /// Every key-value call answers this error.
    pub(crate) kv_error: Option<KvError>,
    /// Every SQL call answers this error.
    pub(crate) sql_error: Option<SqlError>,
    /// Scripted answers of `query`, in call order; then empty rows.
    pub(crate) sql_rows: VecDeque<Rows>,
    /// Scripted answers of `execute`, in call order; then 0.
    pub(crate) sql_affected: VecDeque<u64>,
    /// Every SQL statement, in call order.
    pub(crate) sql_calls: Vec<SqlCall>,
    /// Every HTTP call answers this error.
    pub(crate) http_error: Option<HttpError>,
    /// Scripted answers of HTTP requests, in call order.
    pub(crate) http_responses: VecDeque<Response>,
    /// Every HTTP request, in call order.
    pub(crate) http_calls: Vec<Request>,
}

thread_local! {
    static CONTEXT: RefCell<Option<Context>> = const { RefCell::new(None) };
}

/// Makes `ctx` the current thread's host.
pub(crate) fn enter(ctx: Context) {
    CONTEXT.with(|c| *c.borrow_mut() = Some(ctx));
}

/// Ends the current run and hands back what the handler did.
pub(crate) fn leave() -> Option<Context> {
    CONTEXT.with(|c| c.borrow_mut().take())
}

/// Whether a test run is in progress on this thread.
pub(crate) fn active() -> bool {
    CONTEXT.with(|c| c.borrow().is_some())
}

fn with<R>(f: impl FnOnce(&mut Context) -> R) -> Option<R> {
    // `try_`: the panic hook may call in while a frame further up holds the borrow.
    CONTEXT.with(|c| c.try_borrow_mut().ok()?.as_mut().map(f))
}

pub(crate) fn body() -> Vec<u8> {
    with(|c| c.body.clone()).unwrap_or_default()
}

pub(crate) fn meta(key: &str) -> Option<String> {
    with(|c| c.meta.get(key).cloned()).flatten()
}

pub(crate) fn config() -> Option<Vec<u8>> {
    with(|c| c.config.clone()).flatten()
}

pub(crate) fn log(level: Level, message: &str) {
    if with(|c| c.logs.push((level, message.to_owned()))).is_none() {
        eprintln!("[plugin {level}] {message}");
    }
}

pub(crate) fn set_reason(reason: &str) {
    with(|c| c.reason = Some(reason.to_owned()));
}

/// The reason the handler set so far.
pub(crate) fn reason() -> Option<String> {
    with(|c| c.reason.clone()).flatten()
}

pub(crate) fn publish(out: &Outgoing) -> Result<(), PublishError> {
    let code = with(|c| {
        if let Some(code) = c.publish_refusal {
            return code;
        }
        let delay_ms = i64::try_from(out.delay_ms()).unwrap_or(i64::MAX);
        if let Some(refusal) = c.refusal(&out.exchange, &out.routing_key, &out.body, delay_ms) {
            return refusal.code();
        }
        let mut out = out.clone();
        if c.abi_v1 {
            out.content_type = None;
            out.headers.clear();
        }
        c.publishes.push(out);
        PUBLISH_ACCEPTED
    })
    .unwrap_or(PUBLISH_ACCEPTED);
    PublishError::from_code(code, &out.exchange).map_or(Ok(()), Err)
}

/// Runs a key-value call on the fake store, or answers its scripted error.
fn kv<R>(
    f: impl FnOnce(&mut BTreeMap<String, (Vec<u8>, Option<Duration>)>) -> Result<R, KvError>,
) -> Result<R, KvError> {
    with(|c| match &c.kv_error {
        Some(e) => Err(e.clone()),
        None => f(&mut c.kv),
    })
    .unwrap_or_else(|| Err(KvError::Unavailable("no test run".to_owned())))
}

/// The fake store takes any key but the empty one.
fn checked(key: &str) -> Result<String, KvError> {
    if key.is_empty() {
        Err(KvError::InvalidKey)
    } else {
        Ok(key.to_owned())
    }
}

pub(crate) fn kv_get(key: &str) -> Result<Option<Vec<u8>>, KvError> {
    kv(|store| Ok(store.get(&checked(key)?).map(|(v, _)| v.clone())))
}

pub(crate) fn kv_set(key: &str, value: &[u8], ttl_ms: Option<u64>) -> Result<(), KvError> {
    kv(|store| {
        store.insert(
            checked(key)?,
            (value.to_vec(), ttl_ms.map(Duration::from_millis)),
        );
        Ok(())
    })
}

pub(crate) fn kv_delete(key: &str) -> Result<bool, KvError> {
    kv(|store| Ok(store.remove(&checked(key)?).is_some()))
}

/// Like a real store, a value that is not an integer in text cannot be incremented.
pub(crate) fn kv_increment(key: &str, delta: i64) -> Result<i64, KvError> {
    kv(|store| {
        let key = checked(key)?;
        let (current, ttl) = match store.get(&key) {
            None => (0, None),
            Some((v, ttl)) => {
                let n = std::str::from_utf8(v)
                    .ok()
                    .and_then(|t| t.trim().parse::<i64>().ok())
                    .ok_or_else(|| {
                        KvError::Unavailable(format!("value of {key:?} is not an integer"))
                    })?;
                (n, *ttl)
            }
        };
        let next = current
            .checked_add(delta)
            .ok_or_else(|| KvError::Unavailable(format!("value of {key:?} would overflow")))?;
        store.insert(key, (next.to_string().into_bytes(), ttl));
        Ok(next)
    })
}

pub(crate) fn kv_compare_and_swap(
    key: &str,
    expected: Option<&[u8]>,
    value: &[u8],
    ttl_ms: Option<u64>,
) -> Result<bool, KvError> {
    kv(|store| {
        let key = checked(key)?;
        if store.get(&key).map(|(v, _)| v.as_slice()) != expected {
            return Ok(false);
        }
        store.insert(key, (value.to_vec(), ttl_ms.map(Duration::from_millis)));
        Ok(true)
    })
}

/// Records a SQL call, then answers its scripted error or `answer`'s.
fn sql<R>(
    kind: SqlKind,
    statement: &str,
    params: &[Value],
    answer: impl FnOnce(&mut Context) -> R,
) -> Result<R, SqlError> {
    with(|c| {
        c.sql_calls.push(SqlCall {
            kind,
            statement: statement.to_owned(),
            params: params.to_vec(),
        });
        match &c.sql_error {
            Some(e) => Err(e.clone()),
            None => Ok(answer(c)),
        }
    })
    .unwrap_or_else(|| Err(SqlError::Unavailable("no test run".to_owned())))
}

pub(crate) fn sql_query(statement: &str, params: &[Value]) -> Result<Rows, SqlError> {
    sql(SqlKind::Query, statement, params, |c| {
        c.sql_rows.pop_front().unwrap_or_default()
    })
}

pub(crate) fn sql_execute(statement: &str, params: &[Value]) -> Result<u64, SqlError> {
    sql(SqlKind::Execute, statement, params, |c| {
        c.sql_affected.pop_front().unwrap_or(0)
    })
}

/// Records the request, then answers its scripted error or the next scripted response; past the
/// script, `unavailable`. The URL is checked as the component backend checks it.
pub(crate) fn http_send(request: &Request) -> Result<Response, HttpError> {
    http::split_url(&request.url)?;
    with(|c| {
        c.http_calls.push(request.clone());
        if let Some(e) = &c.http_error {
            return Err(e.clone());
        }
        c.http_responses.pop_front().ok_or_else(|| {
            HttpError::Unavailable(format!(
                "no scripted answer for {} {} (TestMessage::http_response)",
                request.method, request.url
            ))
        })
    })
    .unwrap_or_else(|| Err(HttpError::Unavailable("no test run".to_owned())))
}

impl Context {
    /// What the host would refuse, in the host's order, with its default per-call limits.
    fn refusal(
        &self,
        exchange: &str,
        routing_key: &str,
        body: &[u8],
        delay_ms: i64,
    ) -> Option<PublishRefusal> {
        if exchange.len() > limits::MAX_NAME_LEN || routing_key.len() > limits::MAX_NAME_LEN {
            return Some(PublishRefusal::Invalid);
        }
        if let Some(allowed) = &self.allowed_exchanges
            && !allowed.iter().any(|a| a == exchange)
        {
            return Some(PublishRefusal::ExchangeNotAllowed);
        }
        if delay_ms < 0 || (delay_ms > 0 && !self.delays) {
            return Some(PublishRefusal::DelayRefused);
        }
        if self.publishes.len() >= limits::MAX_PUBLISHES {
            return Some(PublishRefusal::TooManyMessages);
        }
        let buffered: usize = self
            .publishes
            .iter()
            .map(|p| p.routing_key.len() + p.body.len())
            .sum();
        if buffered + routing_key.len() + body.len() > limits::MAX_PUBLISH_BYTES {
            return Some(PublishRefusal::TooManyBytes);
        }
        None
    }
}
