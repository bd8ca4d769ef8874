//! A host name with an optional port, as a `Host` header carries it and `[admin] hosts` lists
//! it: `worker.internal`, `worker.internal:9464`, `10.0.0.5:9464`, `[fd00::1]:9464`.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

/// The longest DNS name.
const MAX_NAME: usize = 253;
/// The longest label of a DNS name.
const MAX_LABEL: usize = 63;

/// A host and, when written, its port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostName {
    /// Lowercase; an IPv6 address in brackets, in its shortest form.
    pub name: String,
    pub port: Option<u16>,
}

impl HostName {
    /// `name[:port]`, or why not: a name is dot-separated labels of letters, digits, `-` and
    /// `_`; an IPv6 address goes in brackets; no scheme, path, user or wildcard.
    pub fn parse(text: &str) -> Result<HostName, &'static str> {
        if text.is_empty() {
            return Err("empty");
        }
        if text.contains("://") || text.contains(['/', '?', '#', '@']) {
            return Err("a name only: no scheme, path or user");
        }
        let (name, port) = match text.strip_prefix('[') {
            Some(v6) => {
                let (addr, after) = v6.split_once(']').ok_or("unclosed [")?;
                let addr: Ipv6Addr = addr.parse().map_err(|_| "not an IPv6 address in [ ]")?;
                let port = match after {
                    "" => None,
                    _ => Some(after.strip_prefix(':').ok_or("a port goes after a :")?),
                };
                (format!("[{addr}]"), port)
            }
            None => match text.split_once(':') {
                Some((_, p)) if p.contains(':') => {
                    return Err("an IPv6 address goes in brackets, like \"[fd00::1]:9464\"");
                }
                Some((name, port)) => (checked_name(name)?, Some(port)),
                None => (checked_name(text)?, None),
            },
        };
        let port = port.map(checked_port).transpose()?;
        Ok(HostName { name, port })
    }

    /// An IP address and port, as a `Host` header names them.
    pub fn of_ip(ip: IpAddr, port: u16) -> HostName {
        let name = match ip {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        };
        HostName {
            name,
            port: Some(port),
        }
    }
}

/// Digits only (`u16::from_str` would take "+80"), 1 to 65535.
fn checked_port(port: &str) -> Result<u16, &'static str> {
    Some(port)
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|p| p.parse::<u16>().ok())
        .filter(|p| *p > 0)
        .ok_or("the port must be 1-65535")
}

/// A DNS name or an IPv4 address, lowercased.
fn checked_name(name: &str) -> Result<String, &'static str> {
    if name.is_empty() {
        return Err("no name before the port");
    }
    if name.len() > MAX_NAME {
        return Err("a name has at most 253 characters");
    }
    let good_label = |l: &str| {
        (1..=MAX_LABEL).contains(&l.len())
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if !name.split('.').all(good_label) {
        return Err("a name is dot-separated labels of letters, digits, '-' and '_'");
    }
    Ok(name.to_ascii_lowercase())
}

impl fmt::Display for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str, port: Option<u16>) -> HostName {
        HostName {
            name: name.into(),
            port,
        }
    }

    #[test]
    fn names_addresses_and_ports() {
        let parse = HostName::parse;
        assert_eq!(parse("Worker.Internal"), Ok(host("worker.internal", None)));
        assert_eq!(parse("worker:9464"), Ok(host("worker", Some(9464))));
        assert_eq!(parse("10.0.0.5:80"), Ok(host("10.0.0.5", Some(80))));
        assert_eq!(parse("[0:0::1]:9464"), Ok(host("[::1]", Some(9464))));
        assert_eq!(parse("[fd00::1]"), Ok(host("[fd00::1]", None)));
        assert_eq!(parse("my_svc.ns.svc"), Ok(host("my_svc.ns.svc", None)));
        assert_eq!(
            parse("[::1]:9464").map(|h| h.to_string()),
            Ok("[::1]:9464".into())
        );
    }

    #[test]
    fn anything_else_is_refused_with_a_reason() {
        for (text, why) in [
            ("", "empty"),
            ("http://worker", "no scheme"),
            ("worker/path", "no scheme"),
            ("user@worker", "no scheme"),
            ("*.example.com", "labels"),
            ("worker..internal", "labels"),
            ("wor ker", "labels"),
            (":9464", "no name"),
            ("worker:", "port"),
            ("worker:0", "port"),
            ("worker:65536", "port"),
            ("worker:+80", "port"),
            ("fd00::1", "brackets"),
            ("[fd00::1", "unclosed"),
            ("[nope]:1", "IPv6"),
            ("[::1]9464", "after a :"),
        ] {
            let err = HostName::parse(text).expect_err(text);
            assert!(err.contains(why), "{text:?}: {err}");
        }
    }
}
