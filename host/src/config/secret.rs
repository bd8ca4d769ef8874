//! `Secret`, the one type a secret passes through: it never prints, and a URL holding one prints
//! only through [`redact_url`], which hides every part a driver may take as a password.

use std::fmt;

/// What stands for a hidden part.
const HIDDEN: &str = "***";

/// Query parameter names (lowercased) holding any of these are taken as secrets:
/// `password`, `pass`, `sslpassword`, `passwd`, `pwd`, `secret`, `token`, `api_key`,
/// `sslkey`, `credentials`, ... Hiding a harmless one (`sslkey` is a file name) is the safe
/// mistake.
const SECRET_PARAMS: [&str; 6] = ["pass", "pwd", "secret", "token", "key", "credential"];

/// A value that may hold a secret (expanded from `${VAR}`): Debug and Display never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value itself, for the one place that uses it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The URL with its passwords replaced by `***`, for logs, errors and `check`: see
    /// [`redact_url`].
    pub fn redacted_url(&self) -> String {
        redact_url(&self.0)
    }

    /// What a server's error about this URL may echo back: the user, the host, the database
    /// (path segments) and the password, percent-decoded. Text shown to anyone who can reach
    /// the admin listener (`/readyz`) is cleaned of these.
    pub fn url_words(&self) -> Vec<String> {
        let (head, _) = split_query(&self.0);
        let rest = &head[authority_start(head)..];
        let (userinfo, after) = match rest.rfind('@') {
            Some(at) => (&rest[..at], &rest[at + 1..]),
            None => ("", rest),
        };
        let (host, path) = after.split_once('/').unwrap_or((after, ""));
        let host = match host.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => host,
        };
        let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
        let host = host.trim_start_matches('[').trim_end_matches(']');
        [user, password, host]
            .into_iter()
            .chain(path.split('/'))
            .map(decode)
            .filter(|w| !w.is_empty())
            .collect()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// `url` (a store's, the broker's, or any text meant as one) with what a driver may take as a
/// password replaced by `***`; the rest as written, so `check` shows what the file says.
///
/// - User-info: everything between the scheme (`postgres://`, `sqlite:`, ...) and the *last*
///   `@` before the query, so a password holding a raw `/`, `:` or `@` is hidden whole (hiding
///   part of a path with an `@` in it is the safe mistake). `user:pass@` shows as `user:***@`;
///   a user-info without `:` (a token used as the user name) as `***@`.
/// - Query (after the first `?`, up to a `#`): the value of every `&`-separated parameter whose
///   name, percent-decoded and lowercased, contains `pass`, `pwd`, `secret`, `token`, `key` or
///   `credential` (`password=`, `pass=`, `sslpassword=`, `auth_token=`, ...).
///
/// The drivers (sqlx, redis, lapin) split URLs the same way (the WHATWG rules of the `url`
/// crate: user-info ends at the last `@` of the authority, the query at the first `?`), so what
/// they take as a password is always inside what is hidden. Never panics, whatever the text.
pub fn redact_url(url: &str) -> String {
    let (head, tail) = split_query(url);
    let start = authority_start(head);
    let mut out = String::with_capacity(url.len());
    out.push_str(&head[..start]);
    let rest = &head[start..];
    match rest.rfind('@') {
        Some(at) => {
            match rest[..at].split_once(':') {
                Some((user, _)) => {
                    out.push_str(user);
                    out.push(':');
                    out.push_str(HIDDEN);
                }
                None => out.push_str(HIDDEN),
            }
            out.push_str(&rest[at..]);
        }
        None => out.push_str(rest),
    }
    match tail.strip_prefix('?') {
        Some(query) => {
            let (query, fragment) = query.split_at(query.find('#').unwrap_or(query.len()));
            out.push('?');
            out.push_str(&redact_query(query));
            out.push_str(fragment);
        }
        None => out.push_str(tail),
    }
    out
}

/// The URL before its query or fragment, and the rest (starting with `?` or `#`, or empty).
fn split_query(url: &str) -> (&str, &str) {
    url.split_at(url.find(['?', '#']).unwrap_or(url.len()))
}

/// Where what follows the scheme begins: after `scheme:` and a `//` after it; 0 without a
/// scheme (RFC 3986: a letter, then letters, digits, `+`, `-`, `.`).
fn authority_start(head: &str) -> usize {
    let Some(colon) = head.find(':') else {
        return 0;
    };
    let scheme = &head[..colon];
    let valid = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !valid {
        return 0;
    }
    if head[colon + 1..].starts_with("//") {
        colon + 3
    } else {
        colon + 1
    }
}

fn redact_query(query: &str) -> String {
    let parts: Vec<String> = query
        .split('&')
        .map(|part| match part.split_once('=') {
            Some((name, _)) if is_secret_param(name) => format!("{name}={HIDDEN}"),
            _ => part.to_string(),
        })
        .collect();
    parts.join("&")
}

/// Whether a query parameter named `name` (as written) holds a secret; see [`SECRET_PARAMS`].
fn is_secret_param(name: &str) -> bool {
    // Form encoding: `+` is a space. The drivers' URL parser drops tabs and line breaks.
    let name: String = decode(&name.replace('+', " "))
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .flat_map(char::to_lowercase)
        .collect();
    SECRET_PARAMS.iter().any(|p| name.contains(p))
}

/// Percent-decoded; invalid UTF-8 replaced.
fn decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_print_without_their_passwords() {
        let cases = [
            // User-info.
            (
                "postgres://u:S3CRET@h:5432/db",
                "postgres://u:***@h:5432/db",
            ),
            ("postgresql://u@h/db", "postgresql://***@h/db"),
            ("mysql://root:S3CRET@db/test", "mysql://root:***@db/test"),
            ("mariadb://root:@db/test", "mariadb://root:***@db/test"),
            (
                "redis://:S3CRET@127.0.0.1:6379/0",
                "redis://:***@127.0.0.1:6379/0",
            ),
            (
                "rediss://u:S3CRET@h/0#insecure",
                "rediss://u:***@h/0#insecure",
            ),
            // A password with raw `/`, `@` or `:` in it is hidden whole.
            ("postgres://u:S3/CR@ET@h/db", "postgres://u:***@h/db"),
            ("postgres://u:a:b@h/db", "postgres://u:***@h/db"),
            // Query parameters, whatever the scheme.
            (
                "postgres://u@127.0.0.1:1/db?password=S3CRET",
                "postgres://***@127.0.0.1:1/db?password=***",
            ),
            (
                "postgres://h/db?sslmode=require&sslpassword=S3CRET&application_name=x",
                "postgres://h/db?sslmode=require&sslpassword=***&application_name=x",
            ),
            (
                "redis+unix:///run/redis.sock?db=1&pass=S3CRET&user=u",
                "redis+unix:///run/redis.sock?db=1&pass=***&user=u",
            ),
            ("unix:///s?pass=S3CRET", "unix:///s?pass=***"),
            (
                "redis://127.0.0.1:1/0?password=S3CRET",
                "redis://127.0.0.1:1/0?password=***",
            ),
            ("sqlite:orders.db?key=S3CRET", "sqlite:orders.db?key=***"),
            (
                "mysql://h/d?PWD=S3CRET&passwd=S3CRET",
                "mysql://h/d?PWD=***&passwd=***",
            ),
            (
                "amqp://h/%2f?auth_token=S3CRET",
                "amqp://h/%2f?auth_token=***",
            ),
            // Names as a driver decodes them.
            (
                "postgres://h/db?pass%77ord=S3CRET",
                "postgres://h/db?pass%77ord=***",
            ),
            (
                "postgres://h/db?Pass+word=S3CRET",
                "postgres://h/db?Pass+word=***",
            ),
            // Both at once, and a fragment after the query.
            (
                "rediss://u:S3CRET@h/0?token=S3CRET#insecure",
                "rediss://u:***@h/0?token=***#insecure",
            ),
            // Nothing to hide.
            (
                "sqlite:///var/lib/w/orders.db",
                "sqlite:///var/lib/w/orders.db",
            ),
            ("sqlite::memory:", "sqlite::memory:"),
            ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
            (
                "amqp://h:5672/%2f?heartbeat=10",
                "amqp://h:5672/%2f?heartbeat=10",
            ),
            (
                "postgres://h/db?sslmode=disable",
                "postgres://h/db?sslmode=disable",
            ),
            // Garbage: no scheme, no `//`, empty parts, non-ASCII.
            ("u:S3CRET@h", "u:***@h"),
            ("amqp:u:S3CRET@h", "amqp:u:***@h"),
            ("S3CRET@h", "***@h"),
            ("", ""),
            ("@", "***@"),
            ("?", "?"),
            ("?=&=", "?=&="),
            ("://:@?#", ":***@?#"),
            ("pöstgres://ü:S3CRET@h/d", "pöstgres:***@h/d"),
            ("postgres://h/db?password", "postgres://h/db?password"),
        ];
        for (url, expected) in cases {
            assert_eq!(redact_url(url), expected, "{url}");
            assert!(!redact_url(url).contains("S3CRET"), "{url}");
            assert_eq!(Secret::new(url).redacted_url(), expected);
        }
    }

    #[test]
    fn redaction_never_panics() {
        let pieces = [
            "", "a", ":", "//", "@", "?", "#", "&", "=", "%", "%zz", "é", "pass",
        ];
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    let text = format!("{a}{b}{c}");
                    let _ = redact_url(&text);
                    let _ = Secret::new(text).url_words();
                }
            }
        }
    }

    #[test]
    fn url_words_are_what_a_server_may_echo() {
        let words = |url: &str| Secret::new(url).url_words();
        assert_eq!(
            words("postgres://orders_user:S3CRET@db.internal:5432/orders?sslmode=require"),
            ["orders_user", "S3CRET", "db.internal", "orders"]
        );
        assert_eq!(
            words("mysql://root@127.0.0.1/my%20db"),
            ["root", "127.0.0.1", "my db"]
        );
        assert_eq!(words("redis://[::1]:6379/0"), ["::1", "0"]);
        assert!(words("sqlite::memory:").iter().all(|w| w != "sqlite"));
    }

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("S3CRET");
        assert_eq!(format!("{s} {s:?}"), "*** Secret(***)");
    }
}
