//! The component backend: the world's imports (`host`, `kv`, `sql`), through the bindings
//! wit-bindgen generated, and WASI's HTTP client (`wasip2` crate), so no hand-written `unsafe`
//! is needed here.

use crate::bindings::worker::plugin::{host, kv, sql};
use crate::http::{self, HttpError};
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

/// One request through `wasi:http/outgoing-handler`: headers, then the body, then the whole
/// answer, each step blocking (a handler call is synchronous).
pub(crate) fn http_send(request: &http::Request) -> Result<http::Response, HttpError> {
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{
        Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme,
    };
    use wasip2::io::streams::StreamError;

    let target = http::split_url(&request.url)?;
    let invalid = |what: &str| HttpError::Invalid(format!("{what} refused by the host"));
    let headers: Vec<_> = request
        .headers
        .iter()
        .map(|(n, v)| (n.clone(), v.clone().into_bytes()))
        .collect();
    let fields =
        Fields::from_list(&headers).map_err(|e| HttpError::Invalid(format!("headers: {e:?}")))?;
    let outgoing = OutgoingRequest::new(fields);
    let method = match request.method.as_str() {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "OPTIONS" => Method::Options,
        "PATCH" => Method::Patch,
        other => Method::Other(other.to_owned()),
    };
    outgoing
        .set_method(&method)
        .map_err(|()| invalid("method"))?;
    let scheme = if target.https {
        Scheme::Https
    } else {
        Scheme::Http
    };
    outgoing
        .set_scheme(Some(&scheme))
        .map_err(|()| invalid("scheme"))?;
    outgoing
        .set_authority(Some(target.authority))
        .map_err(|()| invalid("authority"))?;
    outgoing
        .set_path_with_query(Some(&target.path_with_query))
        .map_err(|()| invalid("path"))?;
    let options = request.timeout.map(|t| {
        let ns = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
        let options = RequestOptions::new();
        // Refusals keep the host's defaults.
        let _ = options.set_connect_timeout(Some(ns));
        let _ = options.set_first_byte_timeout(Some(ns));
        let _ = options.set_between_bytes_timeout(Some(ns));
        options
    });
    let body = outgoing.body().map_err(|()| invalid("body"))?;
    let pending = outgoing_handler::handle(outgoing, options).map_err(http_error)?;
    {
        let stream = body.write().map_err(|()| invalid("body stream"))?;
        // blocking-write-and-flush takes at most 4096 bytes a call.
        for chunk in request.body.chunks(4096) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(|e| HttpError::Unavailable(format!("sending the body: {e:?}")))?;
        }
    }
    OutgoingBody::finish(body, None).map_err(http_error)?;
    pending.subscribe().block();
    let response = match pending.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(e))) => return Err(http_error(e)),
        Some(Err(())) | None => return Err(HttpError::Unavailable("no answer".to_owned())),
    };
    let headers = response
        .headers()
        .entries()
        .into_iter()
        .map(|(n, v)| (n, String::from_utf8_lossy(&v).into_owned()))
        .collect();
    let status = response.status();
    let incoming = response
        .consume()
        .map_err(|()| HttpError::Unavailable("answer body".to_owned()))?;
    let mut body = Vec::new();
    {
        let stream = incoming
            .stream()
            .map_err(|()| HttpError::Unavailable("answer body stream".to_owned()))?;
        loop {
            match stream.blocking_read(64 * 1024) {
                Ok(chunk) => body.extend_from_slice(&chunk),
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(e)) => {
                    return Err(HttpError::Unavailable(format!(
                        "reading the answer: {}",
                        e.to_debug_string()
                    )));
                }
            }
        }
    }
    drop(IncomingBody::finish(incoming));
    Ok(http::Response {
        status,
        headers,
        body,
    })
}

/// The WASI error as the SDK's: denial, timeouts and sizes by name, the rest as unavailable.
fn http_error(e: wasip2::http::types::ErrorCode) -> HttpError {
    use wasip2::http::types::ErrorCode as E;
    match e {
        E::HttpRequestDenied => HttpError::Denied,
        E::DnsTimeout
        | E::ConnectionTimeout
        | E::ConnectionReadTimeout
        | E::ConnectionWriteTimeout
        | E::HttpResponseTimeout => HttpError::Timeout,
        E::HttpRequestBodySize(_)
        | E::HttpRequestHeaderSectionSize(_)
        | E::HttpRequestHeaderSize(_)
        | E::HttpRequestUriTooLong
        | E::HttpResponseBodySize(_)
        | E::HttpResponseHeaderSectionSize(_)
        | E::HttpResponseHeaderSize(_) => HttpError::TooLarge,
        E::HttpRequestMethodInvalid | E::HttpRequestUriInvalid => {
            HttpError::Invalid(format!("{e:?}"))
        }
        other => HttpError::Unavailable(format!("{other:?}")),
    }
}
