//! `[kv.NAME]`, `[sql.NAME]` and each subscription's grants: store names resolved, origins
//! parsed, `${VAR}` expanded from the environment (a missing variable is an error naming it).

use std::collections::BTreeMap;

use super::super::grants::{
    DEFAULT_HTTP_MAX_REQUESTS, DEFAULT_HTTP_MAX_RESPONSE, DEFAULT_KV_MAX_VALUE,
    DEFAULT_OUTBOX_RETENTION, DEFAULT_SQL_MAX_CONNECTIONS, Grants, HttpGrant, KvBackend,
    KvStoreConfig, Origin, OriginHeaders, Outbox, SqlDatabaseConfig, SqlKind,
};
use super::super::raw::{KvBackendKind, RawKv, RawSql};
use super::super::secret::Secret;
use super::*;

/// The largest value a store may be configured to accept: Redis's own limit.
const MAX_KV_VALUE: u64 = 512 << 20;
const MAX_SQL_CONNECTIONS: u32 = 1000;

impl Checker<'_> {
    pub(super) fn kv_stores(
        &mut self,
        raw: &BTreeMap<String, Spanned<RawKv>>,
        state_dir: &Path,
    ) -> Vec<KvStoreConfig> {
        let mut out = Vec::new();
        for (name, table) in raw {
            let span = Some(table.span());
            self.store_name("kv", name, &span);
            let kv = table.get_ref();
            let kind = kv
                .backend
                .as_ref()
                .map_or(KvBackendKind::Embedded, |b| *b.get_ref());
            let backend = match (kind, &kv.url) {
                (KvBackendKind::Embedded, Some(url)) => {
                    self.error(
                        Some(url.span()),
                        format!("[kv.{name}] is embedded (a file under [state] dir): it takes no url; set backend = \"redis\" to use a server"),
                    );
                    continue;
                }
                (KvBackendKind::Embedded, None) => KvBackend::Embedded {
                    path: state_dir.join("kv").join(format!("{name}.redb")),
                },
                (KvBackendKind::Redis, None) => {
                    self.error(
                        span,
                        format!("[kv.{name}] has backend = \"redis\" but no url, e.g. url = \"redis://127.0.0.1:6379/0\""),
                    );
                    continue;
                }
                (KvBackendKind::Redis, Some(url)) => {
                    let expanded = self.expand(url);
                    if !["redis://", "rediss://", "unix://", "redis+unix://"]
                        .iter()
                        .any(|p| expanded.starts_with(p))
                    {
                        self.error(
                            Some(url.span()),
                            format!(
                                "expected a redis://, rediss:// or unix:// URL for [kv.{name}]"
                            ),
                        );
                    }
                    KvBackend::Redis {
                        url: Secret::new(expanded),
                    }
                }
            };
            let max_value_size =
                kv.max_value_size
                    .as_ref()
                    .map_or(DEFAULT_KV_MAX_VALUE, |s| {
                        let size = s.get_ref().0;
                        if !(1..=MAX_KV_VALUE).contains(&size) {
                            self.error(
                        Some(s.span()),
                        format!("expected max_value_size between 1B and 512MiB, got {size} bytes"),
                    );
                        }
                        size
                    });
            out.push(KvStoreConfig {
                name: name.clone(),
                backend,
                max_value_size,
            });
        }
        out
    }

    pub(super) fn sql_databases(
        &mut self,
        raw: &BTreeMap<String, Spanned<RawSql>>,
        state_dir: &Path,
    ) -> Vec<SqlDatabaseConfig> {
        let mut out = Vec::new();
        for (name, table) in raw {
            let span = Some(table.span());
            self.store_name("sql", name, &span);
            let sql = table.get_ref();
            let Some(url) = &sql.url else {
                self.error(
                    span,
                    format!("[sql.{name}] needs a url: \"sqlite:{name}.db\" (a file under [state] dir), \"postgres://...\" or \"mysql://...\""),
                );
                continue;
            };
            let expanded = self.expand(url);
            let Some((kind, url_text)) = sql_url(&expanded, state_dir) else {
                self.error(
                    Some(url.span()),
                    format!("expected a sqlite:, postgres://, mysql:// or mariadb:// URL for [sql.{name}]"),
                );
                continue;
            };
            let max_connections = sql.max_connections.as_ref().map_or(DEFAULT_SQL_MAX_CONNECTIONS, |m| {
                let n = *m.get_ref();
                if !(1..=MAX_SQL_CONNECTIONS).contains(&n) {
                    self.error(
                        Some(m.span()),
                        format!("expected max_connections between 1 and {MAX_SQL_CONNECTIONS}, got {n}"),
                    );
                }
                n
            });
            out.push(SqlDatabaseConfig {
                name: name.clone(),
                kind,
                url: Secret::new(url_text),
                max_connections,
            });
        }
        out
    }

    /// Store and database names become file names and key prefixes.
    fn store_name(&mut self, section: &str, name: &str, span: &Option<Range<usize>>) {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !ok {
            self.error(
                span.clone(),
                format!("[{section}.{name}]: expected a name of letters, digits, '_' and '-' (at most 64)"),
            );
        }
    }

    /// A subscription's grants, each checked against the stores and databases defined.
    pub(super) fn grants(
        &mut self,
        sub: &RawSubscription,
        defaults: &RawSettings,
        kv: &[KvStoreConfig],
        sql: &[SqlDatabaseConfig],
    ) -> Grants {
        let kv = sub.kv.as_ref().map(|name| {
            self.known(name, "kv", kv.iter().map(|s| s.name.as_str()).collect());
            name.get_ref().clone()
        });
        let sql = sub.sql.as_ref().map(|name| {
            self.known(name, "sql", sql.iter().map(|s| s.name.as_str()).collect());
            name.get_ref().clone()
        });
        let outbox = self.outbox(sub, sql.is_some());
        Grants {
            http: self.http_grant(sub, defaults),
            kv,
            sql,
            outbox,
        }
    }

    /// `outbox = true` needs a database to record in; `outbox_retention` needs the outbox.
    fn outbox(&mut self, sub: &RawSubscription, has_sql: bool) -> Option<Outbox> {
        let on = sub.outbox.as_ref().filter(|o| *o.get_ref());
        if let Some(flag) = on
            && !has_sql
        {
            self.error(
                Some(flag.span()),
                "outbox = true needs sql = \"NAME\": the outbox is kept in the subscription's database",
            );
        }
        if on.is_none()
            && let Some(retention) = &sub.outbox_retention
        {
            self.error(
                Some(retention.span()),
                "outbox_retention is set but outbox is not: add outbox = true",
            );
        }
        on.map(|_| Outbox {
            retention: sub
                .outbox_retention
                .as_ref()
                .map_or(DEFAULT_OUTBOX_RETENTION, |r| r.get_ref().duration),
        })
    }

    fn known(&mut self, name: &Spanned<String>, section: &str, defined: Vec<&str>) {
        if defined.contains(&name.get_ref().as_str()) {
            return;
        }
        let have = if defined.is_empty() {
            format!("there is no [{section}.NAME] section")
        } else {
            format!("defined: {}", defined.join(", "))
        };
        self.error(
            Some(name.span()),
            format!("unknown {section} \"{}\" ({have})", name.get_ref()),
        );
    }

    fn http_grant(&mut self, sub: &RawSubscription, defaults: &RawSettings) -> HttpGrant {
        let mut allowed = Vec::new();
        for entry in sub.allowed_hosts.iter().flatten() {
            match parse_origin(entry.get_ref()) {
                Ok(origin) => allowed.push(origin),
                Err(why) => self.error(Some(entry.span()), why),
            }
        }
        let mut headers = Vec::new();
        for (origin_text, table) in sub.http_headers.iter().flatten() {
            let origin = match parse_origin(origin_text) {
                Ok(o) => o,
                Err(why) => {
                    self.error(
                        Some(table.span()),
                        format!("http_headers.\"{origin_text}\": {why}"),
                    );
                    continue;
                }
            };
            if !allowed.contains(&origin) {
                self.error(
                    Some(table.span()),
                    format!("http_headers.\"{origin_text}\" is not in allowed_hosts: headers go only to an allowed origin"),
                );
            }
            let mut list = Vec::new();
            for (name, value) in table.get_ref() {
                if name.is_empty() || !name.bytes().all(is_token_byte) {
                    self.error(
                        Some(value.span()),
                        format!("expected an HTTP header name, got {name:?}"),
                    );
                }
                let expanded = self.expand(value);
                if expanded.contains(['\r', '\n', '\0']) {
                    self.error(
                        Some(value.span()),
                        format!("header {name}: the value holds a line break or NUL"),
                    );
                }
                list.push((name.clone(), Secret::new(expanded)));
            }
            headers.push(OriginHeaders {
                origin,
                headers: list,
            });
        }
        let max_response = sub
            .http_max_response
            .as_ref()
            .or(defaults.http_max_response.as_ref())
            .map_or(DEFAULT_HTTP_MAX_RESPONSE, |s| s.get_ref().0);
        let max_requests = sub
            .http_max_requests
            .or(defaults.http_max_requests)
            .map_or(DEFAULT_HTTP_MAX_REQUESTS, |n| n.0);
        HttpGrant {
            allowed,
            headers,
            max_response,
            max_requests,
        }
    }

    /// `${VAR}` replaced from the environment; a missing or malformed reference is an error.
    pub(super) fn expand(&mut self, value: &Spanned<String>) -> String {
        match expand_vars(value.get_ref(), self.vars) {
            Ok(text) => text,
            Err(why) => {
                self.error(Some(value.span()), why);
                String::new()
            }
        }
    }
}

/// Replaces every `${NAME}` in `text` by `lookup(NAME)`.
pub(super) fn expand_vars(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err("unterminated ${ in value: write ${NAME}".to_string());
        };
        let name = &after[..end];
        let valid = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!(
                "expected ${{NAME}} with a variable name, got ${{{name}}}"
            ));
        }
        match lookup(name) {
            Some(value) => out.push_str(&value),
            None => return Err(format!("environment variable {name} is not set")),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `scheme://host[:port|:*]` with an optional trailing `/`.
pub(super) fn parse_origin(text: &str) -> Result<Origin, String> {
    let bad = |why: &str| {
        format!(
            "expected an origin like \"https://api.example.com\" or \"http://127.0.0.1:8080\" in allowed_hosts, got {text:?}: {why}"
        )
    };
    let (scheme, rest) = text.split_once("://").ok_or_else(|| bad("no scheme"))?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return Err(bad("the scheme must be http or https")),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains(['/', '?', '#', '@']) {
        return Err(bad("only scheme, host and port; no path, query or user"));
    }
    let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or_else(|| bad("unclosed ["))?;
        (host.to_string(), after.strip_prefix(':'))
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (rest.to_string(), None),
        }
    };
    if host.is_empty() || host.contains(':') && host.parse::<std::net::Ipv6Addr>().is_err() {
        return Err(bad("no host"));
    }
    let port = match port {
        None => Some(default_port),
        Some("*") => None,
        Some(p) => Some(
            p.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| bad("the port must be 1-65535 or *"))?,
        ),
    };
    Ok(Origin {
        scheme,
        host: host.to_ascii_lowercase(),
        port,
    })
}

/// The database kind and the URL sqlx is given: a relative SQLite path resolved against
/// `state_dir`, `mariadb://` spelled `mysql://`.
fn sql_url(url: &str, state_dir: &Path) -> Option<(SqlKind, String)> {
    if let Some(rest) = url.strip_prefix("sqlite:") {
        let rest = rest.strip_prefix("//").unwrap_or(rest);
        if rest == ":memory:" {
            return Some((SqlKind::Sqlite, "sqlite::memory:".to_string()));
        }
        let (file, query) = rest
            .split_once('?')
            .map_or((rest, None), |(f, q)| (f, Some(q)));
        if file.is_empty() {
            return None;
        }
        let path = state_dir.join(file);
        let mut text = format!("sqlite://{}", path.display());
        if let Some(q) = query {
            text.push('?');
            text.push_str(q);
        }
        return Some((SqlKind::Sqlite, text));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Some((SqlKind::Postgres, url.to_string()));
    }
    if url.starts_with("mysql://") {
        return Some((SqlKind::MySql, url.to_string()));
    }
    url.strip_prefix("mariadb://")
        .map(|rest| (SqlKind::MySql, format!("mysql://{rest}")))
}

/// RFC 9110 token characters: what a header name may hold.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
