//! The rules of outbound HTTP (SPEC section 9): which origins a request may go to, which
//! addresses a name may resolve to, and which headers the host adds. Nothing here sends.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use http::header::{HeaderName, HeaderValue};
use http::uri::{Scheme, Uri};
use tokio::time::Instant;
use wasmtime_wasi_http::Error;

use super::Stop;
use crate::config::{HttpGrant, Origin};

/// Where a request goes, read from its URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub tls: bool,
    /// Lowercased; an IPv6 literal without brackets.
    pub host: String,
    /// The scheme's default when the URI has none.
    pub port: u16,
}

impl Target {
    /// The target of `uri`; only absolute `http` and `https` URIs have one.
    pub(super) fn of(uri: &Uri) -> Result<Target, Error> {
        let tls = match uri.scheme() {
            Some(s) if *s == Scheme::HTTPS => true,
            Some(s) if *s == Scheme::HTTP => false,
            _ => return Err(Error::HttpRequestUriInvalid),
        };
        let host = uri.host().ok_or(Error::HttpRequestUriInvalid)?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(Error::HttpRequestUriInvalid);
        }
        Ok(Target {
            tls,
            host: host.to_ascii_lowercase(),
            port: uri.port_u16().unwrap_or(if tls { 443 } else { 80 }),
        })
    }

    pub(super) fn scheme(&self) -> &'static str {
        if self.tls { "https" } else { "http" }
    }

    /// The host when it is an IP literal.
    pub(super) fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    /// `host:port` as the `Host` header writes it.
    pub(super) fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Why the host refused a request: logged with the plugin and the URL, and counted as `denied`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("the subscription has no allowed_hosts")]
    NoGrant,
    #[error("{0} is not in allowed_hosts")]
    Origin(String),
    #[error(
        "{host} resolves to {addr}, a loopback, private or link-local address that allowed_hosts does not list itself"
    )]
    Address { host: String, addr: IpAddr },
}

impl Refusal {
    /// The error code the guest receives: `HTTP-request-denied` for every refusal, so each SDK
    /// reports it as `denied` (a network error would read as worth retrying); the log line says
    /// which rule refused it.
    pub(crate) fn code(&self) -> Error {
        Error::HttpRequestDenied
    }
}

/// One grant's rules, with its headers parsed once.
pub(crate) struct Policy {
    allowed: Vec<Origin>,
    headers: Vec<(Origin, Vec<(HeaderName, HeaderValue)>)>,
    /// `http_max_response`.
    pub max_response: u64,
}

impl Policy {
    pub(super) fn new(grant: &HttpGrant) -> Policy {
        let headers = grant
            .headers
            .iter()
            .map(|h| {
                let parsed = h.headers.iter().filter_map(|(name, value)| {
                    // Validation accepts only token names and values without line breaks or
                    // NUL, which both parse; anything else is left out rather than sent mangled.
                    let name = HeaderName::from_bytes(name.as_bytes()).ok()?;
                    let mut value = HeaderValue::from_str(value.expose()).ok()?;
                    value.set_sensitive(true);
                    Some((name, value))
                });
                (h.origin.clone(), parsed.collect())
            })
            .collect();
        Policy {
            allowed: grant.allowed.clone(),
            headers,
            max_response: grant.max_response,
        }
    }

    /// Whether scheme, host and port of `t` match an allowed origin.
    pub(super) fn allows(&self, t: &Target) -> bool {
        self.allowed
            .iter()
            .any(|o| o.matches(t.scheme(), &t.host, t.port))
    }

    /// The headers the host adds to a request to `t`, in config order.
    pub(super) fn headers_for<'a>(
        &'a self,
        t: &'a Target,
    ) -> impl Iterator<Item = &'a (HeaderName, HeaderValue)> + 'a {
        self.headers
            .iter()
            .filter(|(o, _)| o.matches(t.scheme(), &t.host, t.port))
            .flat_map(|(_, list)| list)
    }

    /// Whether a connection for `t` may go to `ip`: any public address, and an internal one
    /// only when an allowed origin names that very address with the request's scheme and port.
    pub(super) fn address_allowed(&self, t: &Target, ip: IpAddr) -> bool {
        if !is_internal(ip) {
            return true;
        }
        let ip = ip.to_canonical();
        self.allowed.iter().any(|o| {
            o.scheme.eq_ignore_ascii_case(t.scheme())
                && o.port.is_none_or(|p| p == t.port)
                && o.host
                    .parse::<IpAddr>()
                    .is_ok_and(|h| h.to_canonical() == ip)
        })
    }

    /// The addresses a request to `t` may connect to, after the origin check: the IP literal
    /// itself, or what the name resolves to less the internal addresses not allowed. The
    /// connection goes only to these, so a second DNS answer cannot change where it lands.
    pub(super) async fn check(
        &self,
        t: &Target,
        deadline: Instant,
    ) -> Result<Vec<SocketAddr>, Stop> {
        if !self.allows(t) {
            return Err(Refusal::Origin(format!("{}://{}", t.scheme(), t.authority())).into());
        }
        let resolved: Vec<SocketAddr> = match t.ip() {
            Some(ip) => vec![SocketAddr::new(ip, t.port)],
            None => {
                let lookup = tokio::net::lookup_host((t.host.as_str(), t.port));
                match tokio::time::timeout_at(deadline, lookup).await {
                    Err(_) => return Err(Error::DnsTimeout.into()),
                    Ok(Err(err)) => return Err(dns_error(&err).into()),
                    Ok(Ok(addrs)) => addrs.collect(),
                }
            }
        };
        let (ok, refused): (Vec<_>, Vec<_>) = resolved
            .into_iter()
            .partition(|a| self.address_allowed(t, a.ip()));
        match (ok.is_empty(), refused.first()) {
            (false, _) => Ok(ok),
            (true, Some(first)) => Err(Refusal::Address {
                host: t.host.clone(),
                addr: first.ip(),
            }
            .into()),
            (true, None) => Err(Error::DestinationNotFound.into()),
        }
    }
}

fn dns_error(err: &std::io::Error) -> Error {
    Error::DnsError {
        rcode: Some(err.to_string()),
        info_code: None,
    }
}

/// Loopback, private (RFC 1918, fc00::/7), link-local (169.254/16, fe80::/10), unspecified,
/// broadcast, CGNAT (100.64/10), "this network" (0/8: Linux connects 0.0.0.0 to the host
/// itself), multicast and reserved addresses, also in their IPv4-mapped, IPv4-compatible and
/// NAT64 (64:ff9b::/96) forms: addresses that reach the host or its private network.
pub(crate) fn is_internal(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4_internal(v4),
        IpAddr::V6(v6) => v6_internal(v6),
    }
}

fn v4_internal(a: Ipv4Addr) -> bool {
    let [o0, o1, _, _] = a.octets();
    a.is_loopback()
        || a.is_private()
        || a.is_link_local()
        || a.is_unspecified()
        || a.is_broadcast()
        || a.is_multicast()
        || o0 == 0
        || o0 >= 240
        || (o0 == 100 && (o1 & 0xc0) == 64)
}

fn v6_internal(a: Ipv6Addr) -> bool {
    let s = a.segments();
    let embedded = || Ipv4Addr::from_bits(a.to_bits() as u32);
    a.is_loopback()
        || a.is_unspecified()
        || a.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00
        || (s[0] & 0xffc0) == 0xfe80
        || (s[0] & 0xffc0) == 0xfec0
        || (s[..6] == [0; 6])
        || (s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] && v4_internal(embedded()))
        || (s[..3] == [0x64, 0xff9b, 1])
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::{Policy, Target, is_internal};
    use crate::config::{HttpGrant, Origin};

    fn grant(allowed: &[&str]) -> HttpGrant {
        let origin = |text: &str| {
            let (scheme, rest) = text.split_once("://").expect("scheme");
            let (host, port) = rest.rsplit_once(':').expect("port");
            Origin {
                scheme: scheme.into(),
                host: host.trim_start_matches('[').trim_end_matches(']').into(),
                port: (port != "*").then(|| port.parse().expect("port")),
            }
        };
        HttpGrant {
            allowed: allowed.iter().map(|o| origin(o)).collect(),
            ..HttpGrant::default()
        }
    }

    #[test]
    fn targets_are_read_from_absolute_uris() {
        let t = |u: &str| Target::of(&u.parse().expect("uri"));
        let v6 = t("https://[::1]/x").expect("v6");
        assert_eq!((v6.tls, v6.host.as_str(), v6.port), (true, "::1", 443));
        assert_eq!(v6.authority(), "[::1]:443");
        let name = t("http://API.Example.com:8080/").expect("name");
        assert_eq!((name.host.as_str(), name.port), ("api.example.com", 8080));
        assert!(t("/relative").is_err());
        assert!(t("ftp://example.com/").is_err());
    }

    #[test]
    fn internal_addresses_are_recognised_in_every_form() {
        let internal = [
            "127.0.0.1",
            "127.1.2.3",
            "10.0.0.1",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "100.64.0.1",
            "100.127.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "ff02::1",
        ];
        for a in internal {
            assert!(is_internal(a.parse().expect(a)), "{a} is internal");
        }
        let public = [
            "93.184.216.34",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ];
        for a in public {
            assert!(!is_internal(a.parse().expect(a)), "{a} is public");
        }
    }

    #[test]
    fn an_internal_address_passes_only_when_allowed_itself() {
        let policy = Policy::new(&grant(&[
            "http://127.0.0.1:8080",
            "http://[::1]:*",
            "http://x:80",
        ]));
        let target = |host: &str, port| Target {
            tls: false,
            host: host.into(),
            port,
        };
        let ip = |a: &str| a.parse::<IpAddr>().expect(a);
        let t = target("x", 8080);
        assert!(policy.address_allowed(&t, ip("127.0.0.1")));
        assert!(
            policy.address_allowed(&t, ip("::ffff:127.0.0.1")),
            "mapped form"
        );
        assert!(policy.address_allowed(&t, ip("::1")));
        assert!(policy.address_allowed(&t, ip("8.8.8.8")));
        assert!(
            !policy.address_allowed(&target("x", 8081), ip("127.0.0.1")),
            "other port"
        );
        assert!(!policy.address_allowed(&t, ip("10.0.0.1")));
        let tls = Target { tls: true, ..t };
        assert!(
            !policy.address_allowed(&tls, ip("127.0.0.1")),
            "other scheme"
        );
    }
}
