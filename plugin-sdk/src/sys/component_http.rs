//! HTTP out of a component: one request through WASI's `wasi:http/outgoing-handler` (`wasip2`
//! crate), each step blocking, since a handler call is synchronous. The host sends it only to
//! the subscription's `allowed_hosts`.

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, FutureIncomingResponse, IncomingBody, IncomingResponse, Method,
    OutgoingBody, OutgoingRequest, RequestOptions, Scheme,
};
use wasip2::io::streams::StreamError;

use crate::http::{self, HttpError};

/// Sends the request: headers, then the body, then the whole answer.
pub(crate) fn http_send(request: &http::Request) -> Result<http::Response, HttpError> {
    let outgoing = outgoing_request(request)?;
    let body = outgoing.body().map_err(|()| refused("body"))?;
    let pending =
        outgoing_handler::handle(outgoing, request.timeout.map(options)).map_err(http_error)?;
    send_body(&body, &request.body)?;
    OutgoingBody::finish(body, None).map_err(http_error)?;
    let response = answer(&pending)?;
    let status = response.status();
    let headers = response
        .headers()
        .entries()
        .into_iter()
        .map(|(n, v)| (n, String::from_utf8_lossy(&v).into_owned()))
        .collect();
    let body = read_body(&response)?;
    Ok(http::Response {
        status,
        headers,
        body,
    })
}

/// The request's method, target and headers.
fn outgoing_request(request: &http::Request) -> Result<OutgoingRequest, HttpError> {
    let target = http::split_url(&request.url)?;
    let fields = Fields::from_list(&wire_headers(request))
        .map_err(|e| HttpError::Invalid(format!("headers: {e:?}")))?;
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
    let scheme = if target.https {
        Scheme::Https
    } else {
        Scheme::Http
    };
    outgoing
        .set_method(&method)
        .map_err(|()| refused("method"))?;
    outgoing
        .set_scheme(Some(&scheme))
        .map_err(|()| refused("scheme"))?;
    outgoing
        .set_authority(Some(target.authority))
        .map_err(|()| refused("authority"))?;
    outgoing
        .set_path_with_query(Some(&target.path_with_query))
        .map_err(|()| refused("path"))?;
    Ok(outgoing)
}

/// The request's headers as wasi:http takes them, with a `content-length` when a body goes out
/// and none was set: without one wasi:http sends the body chunked, which some servers refuse
/// (411) or misread.
fn wire_headers(request: &http::Request) -> Vec<(String, Vec<u8>)> {
    let mut headers: Vec<_> = request
        .headers
        .iter()
        .map(|(n, v)| (n.clone(), v.clone().into_bytes()))
        .collect();
    let has_length = headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-length"));
    let sends_body =
        !request.body.is_empty() || matches!(request.method.as_str(), "POST" | "PUT" | "PATCH");
    if sends_body && !has_length {
        let length = request.body.len().to_string().into_bytes();
        headers.push(("content-length".to_owned(), length));
    }
    headers
}

/// The request's timeout as wasi:http's three (connect, first byte, between bytes).
fn options(timeout: std::time::Duration) -> RequestOptions {
    let ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
    let options = RequestOptions::new();
    // Refusals keep the host's defaults.
    let _ = options.set_connect_timeout(Some(ns));
    let _ = options.set_first_byte_timeout(Some(ns));
    let _ = options.set_between_bytes_timeout(Some(ns));
    options
}

/// Writes the body; the stream is dropped before the body is finished, as wasi:http requires.
fn send_body(body: &OutgoingBody, bytes: &[u8]) -> Result<(), HttpError> {
    let stream = body.write().map_err(|()| refused("body stream"))?;
    // blocking-write-and-flush takes at most 4096 bytes a call.
    for chunk in bytes.chunks(4096) {
        stream
            .blocking_write_and_flush(chunk)
            .map_err(|e| stream_error(e, "sending the body"))?;
    }
    Ok(())
}

/// Waits for the answer's head.
fn answer(pending: &FutureIncomingResponse) -> Result<IncomingResponse, HttpError> {
    pending.subscribe().block();
    match pending.get() {
        Some(Ok(Ok(response))) => Ok(response),
        Some(Ok(Err(e))) => Err(http_error(e)),
        Some(Err(())) | None => Err(HttpError::Unavailable("no answer".to_owned())),
    }
}

/// Reads the answer's whole body.
fn read_body(response: &IncomingResponse) -> Result<Vec<u8>, HttpError> {
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
                Err(e) => return Err(stream_error(e, "reading the answer")),
            }
        }
    }
    drop(IncomingBody::finish(incoming));
    Ok(body)
}

fn refused(what: &str) -> HttpError {
    HttpError::Invalid(format!("{what} refused by the host"))
}

/// A failed stream as the HTTP error it carries (an answer over `http_max_response` is
/// `HTTP-response-body-size`: too large), else unavailable.
fn stream_error(e: StreamError, doing: &str) -> HttpError {
    match e {
        StreamError::LastOperationFailed(io) => {
            let text = io.to_debug_string();
            match wasip2::http::types::http_error_code(&io) {
                Some(code) => http_error(code),
                None => http::error_from_text(&text)
                    .unwrap_or_else(|| HttpError::Unavailable(format!("{doing}: {text}"))),
            }
        }
        StreamError::Closed => HttpError::Unavailable(format!("{doing}: the stream closed")),
    }
}

/// The WASI error as the SDK's: denial, timeouts and sizes by name, the rest as unavailable. The
/// host refuses a destination outside allowed_hosts with `HTTP-request-denied`, and a name that
/// resolves to a loopback, private or link-local address not itself allowed with
/// `destination-IP-prohibited`: both are the grant's refusal, not an outage.
fn http_error(e: ErrorCode) -> HttpError {
    use ErrorCode as E;
    match e {
        E::HttpRequestDenied | E::DestinationIpProhibited => HttpError::Denied,
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
