//! Outgoing HTTP requests, through WASI's `wasi:http/outgoing-handler` (the host lets only the
//! subscription's granted destinations through). Components only (ABI v1 has no HTTP); the body
//! of a response is read whole.
//!
//! ```
//! use worker_plugin_sdk::{Error, Message, http, testing::TestMessage};
//!
//! fn handle(msg: &Message) -> Result<(), Error> {
//!     let answer = http::Request::post("https://hooks.example/orders", msg.body())
//!         .header("content-type", "application/json")
//!         .send()?;
//!     if !answer.is_success() {
//!         return Err(Error::retry(format_args!("hook answered {}", answer.status)));
//!     }
//!     Ok(())
//! }
//!
//! let run = TestMessage::new("{}").http_response(http::Response::new(503)).run(handle);
//! assert_eq!(run.outcome, worker_plugin_sdk::Outcome::retry("hook answered 503"));
//! assert_eq!(run.http[0].url, "https://hooks.example/orders");
//! assert_eq!(run.http[0].method, "POST");
//! ```

use std::fmt;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{Error, sys};

/// A request to send.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Request {
    /// The method, upper case (`GET`, `POST`, ...).
    pub method: String,
    /// The absolute URL: `http://` or `https://`, host, optional port, path and query.
    pub url: String,
    /// The headers, in order.
    pub headers: Vec<(String, String)>,
    /// The body (empty for none).
    pub body: Vec<u8>,
    /// How long to wait for the connection, for the first byte of the answer and between its
    /// bytes; `None`: the host's defaults.
    pub timeout: Option<Duration>,
}

impl Request {
    /// A request with this method, no headers and no body.
    pub fn new(method: impl Into<String>, url: impl Into<String>) -> Self {
        Request {
            method: method.into().to_ascii_uppercase(),
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: None,
        }
    }

    /// A GET.
    pub fn get(url: impl Into<String>) -> Self {
        Request::new("GET", url)
    }

    /// A POST with this body.
    pub fn post(url: impl Into<String>, body: impl Into<Vec<u8>>) -> Self {
        Request::new("POST", url).body(body)
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl ToString) -> Self {
        self.headers.push((name.into(), value.to_string()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets the body to `value` as JSON, with `content-type: application/json`.
    pub fn json<T: Serialize + ?Sized>(self, value: &T) -> Result<Self, HttpError> {
        let body = serde_json::to_vec(value).map_err(|e| HttpError::Invalid(e.to_string()))?;
        Ok(self.header("content-type", "application/json").body(body))
    }

    /// Sets the timeouts (see [`Request::timeout`](Request#structfield.timeout)).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sends it and reads the whole answer.
    pub fn send(self) -> Result<Response, HttpError> {
        sys::http_send(&self)
    }
}

/// Sends a GET and reads the whole answer.
pub fn get(url: &str) -> Result<Response, HttpError> {
    Request::get(url).send()
}

/// An answer: any status, 4xx and 5xx included (they are not errors here).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers, in order (values as text, lossy for bytes that are not UTF-8).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// An answer with this status, no headers and no body (to script a test's answer).
    pub fn new(status: u16) -> Self {
        Response {
            status,
            ..Response::default()
        }
    }

    /// Adds a header.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl ToString) -> Self {
        self.headers.push((name.into(), value.to_string()));
        self
    }

    /// Sets the body.
    #[must_use]
    pub fn with_body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The first header of this name (case-insensitive).
    pub fn header_value(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body parsed as JSON; a body that does not parse fails the message when used with `?`.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.body)
            .map_err(|e| Error::fail(format_args!("http: answer is not the JSON expected: {e}")))
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The subscription may not reach this destination (no HTTP grant for it, or a name that
    /// resolves to a loopback, private or link-local address that is not itself allowed).
    Denied,
    /// The request cannot be sent as it is (URL, method, header), with why.
    Invalid(String),
    /// No answer in time.
    Timeout,
    /// The request or the answer is larger than allowed.
    TooLarge,
    /// The destination could not be reached or broke off (DNS, connection, TLS, protocol), with
    /// why.
    Unavailable(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Denied => f.write_str("http: denied (no HTTP grant for this destination)"),
            HttpError::Invalid(why) => write!(f, "http: invalid request: {why}"),
            HttpError::Timeout => f.write_str("http: timed out"),
            HttpError::TooLarge => f.write_str("http: too large"),
            HttpError::Unavailable(why) => write!(f, "http: unavailable: {why}"),
        }
    }
}

impl std::error::Error for HttpError {}

/// A missing grant, a timeout or an unreachable destination can clear up, so those retry; a
/// request that cannot be sent, or is too large, stays so, so those fail.
impl From<HttpError> for Error {
    fn from(e: HttpError) -> Self {
        match e {
            HttpError::Denied | HttpError::Timeout | HttpError::Unavailable(_) => Error::retry(e),
            HttpError::Invalid(_) | HttpError::TooLarge => Error::fail(e),
        }
    }
}

/// The error a body stream's text names. wasmtime-wasi-http 48 keeps its own error type in the
/// stream's io error, which `http-error-code` does not recognise (it looks for the WIT
/// error-code), so a body cut at `http_max_response` or a read timeout comes with only its text,
/// as wasmtime writes it.
#[cfg_attr(not(worker_backend = "component"), allow(dead_code))] // used by sys::component_http
pub(crate) fn error_from_text(text: &str) -> Option<HttpError> {
    let says = |words: &str| text.contains(words);
    if says("body size exceeds limit") {
        Some(HttpError::TooLarge)
    } else if says("connection read timeout") || says("connection write timeout") {
        Some(HttpError::Timeout)
    } else {
        None
    }
}

/// A URL split as `wasi:http` takes it: scheme, authority, path with query.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Target<'a> {
    pub(crate) https: bool,
    pub(crate) authority: &'a str,
    pub(crate) path_with_query: String,
}

/// Splits an absolute `http://` or `https://` URL; the fragment is not sent.
pub(crate) fn split_url(url: &str) -> Result<Target<'_>, HttpError> {
    let invalid = |why: &str| HttpError::Invalid(format!("{why}: {url:?}"));
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| invalid("not an absolute URL"))?;
    let https = match scheme.to_ascii_lowercase().as_str() {
        "http" => false,
        "https" => true,
        _ => return Err(invalid("not http or https")),
    };
    let rest = rest.split('#').next().unwrap_or_default();
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.is_empty() || authority.contains('@') {
        return Err(invalid("no host, or credentials in the URL"));
    }
    let path_with_query = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("/{path}")
    };
    Ok(Target {
        https,
        authority,
        path_with_query,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_errors_known_by_wasmtime_s_text() {
        let of = error_from_text;
        assert_eq!(
            of("HTTP response body size exceeds limit: 5120 bytes"),
            Some(HttpError::TooLarge)
        );
        assert_eq!(of("connection read timeout"), Some(HttpError::Timeout));
        assert_eq!(of("hyper error: connection closed"), None);
        assert_eq!(
            of("reading: HTTP request body size exceeds limit"),
            Some(HttpError::TooLarge)
        );
    }

    #[test]
    fn urls_split_into_scheme_authority_and_path() {
        let t = split_url("https://api.example:8443/v1/orders?id=7#top").unwrap();
        assert_eq!(
            t,
            Target {
                https: true,
                authority: "api.example:8443",
                path_with_query: "/v1/orders?id=7".to_owned()
            }
        );
        let t = split_url("HTTP://host?x=1").unwrap();
        assert_eq!((t.https, t.authority), (false, "host"));
        assert_eq!(t.path_with_query, "/?x=1");
        assert_eq!(split_url("http://host").unwrap().path_with_query, "/");
        for bad in ["host/x", "ftp://host/", "http:///x", "http://user:pw@host/"] {
            assert!(
                matches!(split_url(bad), Err(HttpError::Invalid(_))),
                "{bad}"
            );
        }
    }
}
