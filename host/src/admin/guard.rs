//! The rules that keep web pages out of the console (SPEC section 11). Any page the operator
//! visits can send requests to the listener, and DNS rebinding can make one look same-origin.
//! So the page and the API answer only to this listener's own `Host` names; every `/api/`
//! request must come from this listener's own origin (or from no browser at all) and carry the
//! token when one is set; a request that changes something must declare a JSON (or `.wasm`)
//! body, which no page can send to another origin without the browser asking first, and this
//! listener never says yes. `/metrics` and the probes are not guarded: Prometheus and the
//! kubelet name the pod's address or a service as `Host`, and they show no message.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error_answer;
use crate::config::{Admin, HostName, Secret};

/// A JSON body: what replay, discard and dry-run take.
pub(super) const JSON: &[&str] = &["application/json"];
/// A JSON selection or an uploaded plugin: what dry-run takes.
pub(super) const JSON_OR_WASM: &[&str] = &["application/json", "application/wasm"];

/// The `Sec-Fetch-Site` values answered: the listener's own page, and what the user typed or
/// bookmarked. `same-site` is refused too: every port of the same host is the same site, so
/// any other local web server's page would be.
const FETCH_SITES: &[&str] = &["same-origin", "none"];

/// What the rules need to know about this listener.
pub(super) struct Guard {
    listen: SocketAddr,
    /// `[admin] hosts`.
    hosts: Vec<HostName>,
    token: Option<Secret>,
}

/// Why a request is refused: answered as `{"error": ...}` with its status.
struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut response = error_answer(self.0, &self.1);
        if self.0 == StatusCode::UNAUTHORIZED {
            let bearer = HeaderValue::from_static("Bearer");
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, bearer);
        }
        response
    }
}

impl Guard {
    pub(super) fn new(listen: SocketAddr, admin: Option<&Admin>) -> Arc<Guard> {
        Arc::new(Guard {
            listen,
            hosts: admin.map(|a| a.hosts.clone()).unwrap_or_default(),
            token: admin.and_then(|a| a.token.clone()),
        })
    }

    /// The request's `Host`, when it names this listener: the listen address, `localhost`,
    /// `127.0.0.1` or `[::1]` with the listener's port, or an `[admin] hosts` name (any port
    /// unless the entry names one).
    fn host(&self, headers: &HeaderMap) -> Result<HostName, Refusal> {
        let forbidden = |why: String| Refusal(StatusCode::FORBIDDEN, why);
        let text = headers
            .get(header::HOST)
            .ok_or_else(|| {
                forbidden(
                    "no Host header: the console answers only requests that name this listener"
                        .into(),
                )
            })?
            .to_str()
            .unwrap_or("");
        let host = HostName::parse(text)
            .map_err(|why| forbidden(format!("Host {text:?} refused: {why}")))?;
        let port = self.listen.port();
        let own = [
            HostName::of_ip(self.listen.ip(), port).name,
            "localhost".into(),
            "127.0.0.1".into(),
            "[::1]".into(),
        ];
        // A Host without a port names the scheme's default; the listener speaks plain HTTP.
        let own_port = host.port.unwrap_or(80) == port;
        let listed =
            |h: &HostName| h.name == host.name && h.port.is_none_or(|p| host.port == Some(p));
        if own_port && own.contains(&host.name) || self.hosts.iter().any(listed) {
            return Ok(host);
        }
        Err(forbidden(format!(
            "Host {host} refused: this listener answers to its address ({}), to localhost, \
             127.0.0.1 and [::1] on port {port}, and to the names in [admin] hosts; any other \
             name may be a web page's, pointed at this address (DNS rebinding)",
            self.listen
        )))
    }

    /// The request comes from this listener's own page, or from no page: an `Origin`, when
    /// sent, is `http://` or `https://` and the request's `Host`; `Sec-Fetch-Site`, when sent,
    /// says `same-origin` or `none`.
    fn same_origin(&self, headers: &HeaderMap, host: &HostName) -> Result<(), Refusal> {
        let refuse = |why: String| {
            Refusal(
                StatusCode::FORBIDDEN,
                format!("cross-site request refused: {why}"),
            )
        };
        if let Some(site) = headers.get("sec-fetch-site") {
            let site = site.to_str().unwrap_or("?");
            if !FETCH_SITES.iter().any(|s| site.eq_ignore_ascii_case(s)) {
                return Err(refuse(format!(
                    "Sec-Fetch-Site: {site} (only this listener's own page may use the API)"
                )));
            }
        }
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let text = origin.to_str().unwrap_or("?");
        if same_origin(text, host) {
            return Ok(());
        }
        Err(refuse(format!(
            "Origin {text} is not this listener's (http://{host})"
        )))
    }

    /// `Authorization: Bearer <token>` when `[admin] token` is set.
    fn token(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match given {
            Some(given) if same(given.as_bytes(), token.expose().as_bytes()) => Ok(()),
            _ => Err(Refusal(
                StatusCode::UNAUTHORIZED,
                "the console API needs the token: send Authorization: Bearer <[admin] token>"
                    .into(),
            )),
        }
    }
}

/// Whether `origin` is `http://` or `https://` and `host`, ports compared with the scheme's
/// default filled in (a proxy that ends TLS passes `Host: name`, the browser sends
/// `Origin: https://name`).
fn same_origin(origin: &str, host: &HostName) -> bool {
    let parsed = [("http://", 80), ("https://", 443)]
        .into_iter()
        .find_map(|(scheme, port)| {
            let rest = origin.get(..scheme.len())?;
            rest.eq_ignore_ascii_case(scheme)
                .then(|| {
                    HostName::parse(&origin[scheme.len()..])
                        .ok()
                        .map(|h| (h, port))
                })
                .flatten()
        });
    parsed.is_some_and(|(o, default)| {
        o.name == host.name && o.port.unwrap_or(default) == host.port.unwrap_or(default)
    })
}

/// Compares in time that depends on the lengths only, not on where the bytes differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The page's layer: its `Host` must be this listener's.
pub(super) async fn page(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
    match guard.host(request.headers()) {
        Ok(_) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    }
}

/// The API's layer: this listener's `Host`, its own origin, then the token.
pub(super) async fn api(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let checked = guard
        .host(headers)
        .and_then(|host| guard.same_origin(headers, &host))
        .and_then(|()| guard.token(headers));
    match checked {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    }
}

/// A changing route's layer: the body's `Content-Type` must be one of `allowed` (parameters
/// such as `charset` aside). A form or `text/plain` body, which any page may send anywhere, is
/// refused before it is read.
pub(super) async fn content_type(
    State(allowed): State<&'static [&'static str]>,
    request: Request,
    next: Next,
) -> Response {
    if allowed.iter().any(|kind| is_kind(request.headers(), kind)) {
        return next.run(request).await;
    }
    let given = request
        .headers()
        .get(header::CONTENT_TYPE)
        .map_or("none".into(), |v| {
            String::from_utf8_lossy(v.as_bytes()).into_owned()
        });
    let wanted = allowed.join(" or ");
    Refusal(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        format!(
            "Content-Type {given} refused: a request that changes something must send \
             Content-Type: {wanted} (a web page can send a form or text/plain anywhere)"
        ),
    )
    .into_response()
}

/// Whether the request's `Content-Type` is the media type `kind`.
pub(super) fn is_kind(headers: &HeaderMap, kind: &str) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(hosts: &[&str]) -> Guard {
        Guard {
            listen: "127.0.0.1:9464".parse().expect("address"),
            hosts: hosts
                .iter()
                .map(|h| HostName::parse(h).expect("host"))
                .collect(),
            token: None,
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    fn host_ok(guard: &Guard, host: &'static str) -> bool {
        guard.host(&headers(&[("host", host)])).is_ok()
    }

    #[test]
    fn the_listener_answers_to_its_own_names_and_the_listed_ones() {
        let g = guard(&["worker.internal", "proxy.example:8443"]);
        for good in [
            "127.0.0.1:9464",
            "localhost:9464",
            "LOCALHOST:9464",
            "[::1]:9464",
            "worker.internal",
            "worker.internal:9464",
            "proxy.example:8443",
        ] {
            assert!(host_ok(&g, good), "{good}");
        }
        for bad in [
            "evil.example:9464",
            "localhost:8080",
            "localhost",
            "proxy.example",
            "proxy.example:443",
            "127.0.0.1.evil.example:9464",
            "",
        ] {
            assert!(!host_ok(&g, bad), "{bad}");
        }
        assert!(g.host(&HeaderMap::new()).is_err(), "no Host");
    }

    #[test]
    fn an_origin_is_the_hosts_own() {
        let host = |h| HostName::parse(h).expect("host");
        assert!(same_origin(
            "http://127.0.0.1:9464",
            &host("127.0.0.1:9464")
        ));
        assert!(same_origin(
            "HTTP://Localhost:9464",
            &host("localhost:9464")
        ));
        assert!(same_origin(
            "https://worker.internal",
            &host("worker.internal")
        ));
        assert!(same_origin(
            "https://worker.internal",
            &host("worker.internal:443")
        ));
        assert!(!same_origin("http://evil.example", &host("127.0.0.1:9464")));
        assert!(!same_origin(
            "http://localhost:3000",
            &host("localhost:9464")
        ));
        assert!(!same_origin("null", &host("localhost:9464")));
        assert!(!same_origin(
            "ftp://localhost:9464",
            &host("localhost:9464")
        ));
        assert!(!same_origin(
            "http://localhost:9464/x",
            &host("localhost:9464")
        ));
    }

    #[test]
    fn cross_site_fetches_are_refused_and_plain_clients_are_not() {
        let g = guard(&[]);
        let host = HostName::parse("127.0.0.1:9464").expect("host");
        let check = |pairs| g.same_origin(&headers(pairs), &host).is_ok();
        assert!(check(&[]), "curl sends neither");
        assert!(check(&[
            ("sec-fetch-site", "same-origin"),
            ("origin", "http://127.0.0.1:9464")
        ]));
        assert!(!check(&[("sec-fetch-site", "cross-site")]));
        assert!(!check(&[("sec-fetch-site", "same-site")]));
        assert!(!check(&[("origin", "http://evil.example")]));
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secret", b"secreT"));
        assert!(!same(b"secret", b"secret2"));
        assert!(!same(b"", b"x"));
    }

    #[test]
    fn media_types_ignore_parameters_and_case() {
        let json = |v| is_kind(&headers(&[("content-type", v)]), "application/json");
        assert!(json("application/json"));
        assert!(json("Application/JSON; charset=utf-8"));
        assert!(!json("text/plain"));
        assert!(!json("application/jsonx"));
    }
}
