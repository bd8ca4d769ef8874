//! The second pass: turns a `RawConfig` into a `Config`, applying defaults and collecting every
//! cross-field problem (and warning) at once, each pointed at the line it is about.

mod grants;
mod subscription;
mod topology;

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Spanned;

use super::error::{ConfigError, Location, Problem, Warning};
use super::raw::{RawAdmin, RawConfig, RawQueue, RawSettings, RawSubscription, RawTracing};
use super::units::{DurationText, MAX_NAME_BYTES, Name};
use super::{
    Admin, BindingDecl, Broker, Config, DEFAULT_MAX_PLUGIN_SIZE, DEFAULT_PAUSE_FOR, DelayConfig,
    ExchangeDecl, Exchanges, HostName, Pause, Plugins, QueueDecl, QueueType, RetryDelay, Secret,
    Subscription, TracingConfig,
};

/// RabbitMQ refuses a TTL above ten years (in milliseconds).
pub(super) const MAX_TTL: Duration = Duration::from_millis(315_360_000_000);

const DEFAULT_PREFETCH: u16 = 16;
const DEFAULT_CONCURRENCY: u32 = 4;
const DEFAULT_MAX_RETRIES: u32 = 3;
const DEFAULT_RETRY_DELAY: &str = "30s";
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_MEMORY_LIMIT: u64 = 64 << 20;
const DEFAULT_MAX_MESSAGE_SIZE: u64 = 64 << 20;
/// RabbitMQ's own ceiling for a message body.
const MAX_MAX_MESSAGE_SIZE: u64 = 512 << 20;
const DEFAULT_TOPOLOGY_CHECK: Duration = Duration::from_secs(30);
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_INSTANCE_MAX_MESSAGES: u32 = 1000;
/// One wasm page; a plugin cannot run in less.
const MIN_MEMORY_LIMIT: u64 = 64 << 10;
/// The whole 32-bit address space of a wasm32 module.
const MAX_MEMORY_LIMIT: u64 = 4 << 30;
/// Bounds of `max_plugin_size`: zero would refuse every plugin; wasmtime compiles no module
/// near 4GiB.
const MIN_PLUGIN_SIZE: u64 = 1 << 10;
const MAX_PLUGIN_SIZE: u64 = 4 << 30;

pub(super) fn parse(
    text: &str,
    path: &Path,
    env_url: Option<&str>,
) -> Result<(Config, Vec<Warning>), ConfigError> {
    parse_with_vars(text, path, env_url, &|name| std::env::var(name).ok())
}

/// [`parse`], with `${VAR}` looked up in `vars` instead of the environment.
pub(in crate::config) fn parse_with_vars(
    text: &str,
    path: &Path,
    env_url: Option<&str>,
    vars: &dyn Fn(&str) -> Option<String>,
) -> Result<(Config, Vec<Warning>), ConfigError> {
    let raw: RawConfig = toml::from_str(text).map_err(|err| ConfigError::Invalid {
        path: path.to_path_buf(),
        problems: vec![Problem {
            location: err.span().map(|span| Location::from_span(text, span)),
            message: err.message().trim_end().to_string(),
        }],
    })?;
    let mut checker = Checker {
        text,
        path,
        vars,
        problems: Vec::new(),
        warnings: Vec::new(),
    };
    let config = checker.build(raw, env_url);
    // In file order, whichever check found them; problems without a place first.
    checker
        .problems
        .sort_by_key(|p| p.location.as_ref().map(|l| (l.line, l.column)));
    checker
        .warnings
        .sort_by_key(|w| w.location.as_ref().map(|l| (l.line, l.column)));
    if checker.problems.is_empty() {
        Ok((config, checker.warnings))
    } else {
        Err(ConfigError::Invalid {
            path: path.to_path_buf(),
            problems: checker.problems,
        })
    }
}

struct Checker<'a> {
    text: &'a str,
    path: &'a Path,
    /// Where `${VAR}` in urls and header values is looked up.
    vars: &'a dyn Fn(&str) -> Option<String>,
    problems: Vec<Problem>,
    warnings: Vec<Warning>,
}

/// Who claims a queue name, for the clash check.
struct Claim {
    what: String,
    span: Option<Range<usize>>,
    /// Written by the user (can be renamed), as opposed to derived from a subscription.
    explicit: bool,
}

impl Checker<'_> {
    fn error(&mut self, span: Option<Range<usize>>, message: impl Into<String>) {
        self.problems.push(Problem {
            location: span.map(|s| Location::from_span(self.text, s)),
            message: message.into(),
        });
    }

    fn warn(&mut self, span: Option<Range<usize>>, message: impl Into<String>) {
        self.warnings.push(Warning {
            path: self.path.to_path_buf(),
            location: span.map(|s| Location::from_span(self.text, s)),
            message: message.into(),
        });
    }

    /// `" at line N"`, or nothing without a span.
    fn at_line(&self, span: &Option<Range<usize>>) -> String {
        match span {
            Some(s) => format!(
                " at line {}",
                Location::from_span(self.text, s.clone()).line
            ),
            None => String::new(),
        }
    }

    /// Names RabbitMQ reserves for itself cannot be declared.
    fn check_declarable(&mut self, name: &Spanned<Name>, what: &str) {
        if name.get_ref().0.starts_with("amq.") {
            self.error(
                Some(name.span()),
                format!(
                    "{what} \"{}\" starts with \"amq.\", which RabbitMQ reserves for itself",
                    name.get_ref().0
                ),
            );
        }
    }

    fn build(&mut self, mut raw: RawConfig, env_url: Option<&str>) -> Config {
        let broker = self.broker(&raw, env_url);
        let exchanges = self.exchanges(&raw);
        let plugins = self.plugins(&raw);
        let admin = raw.admin.as_ref().map(|a| self.admin(a));
        let tracing = raw.tracing.as_ref().map(|t| self.tracing(t));

        let exchanges_extra = self.exchanges_extra(&raw, &exchanges);
        let declared = |name: &str| {
            name == exchanges.master
                || name == exchanges.retry
                || name == exchanges.failed
                || exchanges_extra
                    .iter()
                    .any(|e: &ExchangeDecl| e.name == name)
        };

        let state_dir = self.state_dir(&raw);
        let kv = self.kv_stores(&raw.kv, &state_dir);
        let sql = self.sql_databases(&raw.sql, &state_dir);
        let defaults = raw.defaults.take().unwrap_or_default();
        let mut subscriptions = Vec::new();
        for sub in &raw.subscriptions {
            let mut s = self.subscription(sub, &defaults, &exchanges, &plugins, &declared);
            s.grants = self.grants(sub, &defaults, &kv, &sql);
            subscriptions.push(s);
        }
        let mut queues_extra = Vec::new();
        for queue in &raw.queues_extra {
            queues_extra.push(self.queue(queue, &declared));
        }
        self.check_queue_names(&raw, &subscriptions);

        Config {
            path: self.path.to_path_buf(),
            broker,
            exchanges,
            plugins,
            admin,
            tracing,
            subscriptions,
            exchanges_extra,
            queues_extra,
            state_dir,
            kv,
            sql,
            delay: raw.delay.map(|d| DelayConfig { levels: d.levels.0 }),
        }
    }

    /// `[admin]`: a listener other hosts can reach must have a token, since the console there
    /// can replay and discard messages; `hosts` are host names, each with an optional port.
    fn admin(&mut self, raw: &RawAdmin) -> Admin {
        let listen = raw.listen.get_ref().0;
        let token = raw.token.as_ref().map(|t| (t.span(), self.expand(t)));
        match &token {
            Some((span, value)) if value.trim().is_empty() => {
                self.error(Some(span.clone()), "token: empty; set a long random value");
            }
            None if !listen.ip().is_loopback() => self.error(
                Some(raw.listen.span()),
                format!(
                    "listen: {listen} can be reached from other hosts, where the console can \
                     replay and discard messages: set [admin] token (\"${{VAR}}\" allowed), or \
                     listen on 127.0.0.1"
                ),
            ),
            _ => {}
        }
        let mut hosts = Vec::new();
        for entry in &raw.hosts {
            match HostName::parse(entry.get_ref()) {
                Ok(host) => hosts.push(host),
                Err(why) => self.error(
                    Some(entry.span()),
                    format!(
                        "hosts: expected a host name, optionally with a port, like \
                         \"worker.internal\" or \"worker.internal:9464\", got {:?}: {why}",
                        entry.get_ref()
                    ),
                ),
            }
        }
        Admin {
            listen,
            token: token.map(|(_, value)| Secret::new(value)),
            hosts,
        }
    }

    /// `[tracing]`: a plain `http://host[:port][/path]` collector URL, `${VAR}` expanded.
    fn tracing(&mut self, raw: &RawTracing) -> TracingConfig {
        let otlp = self.expand(&raw.otlp);
        let parsed = otlp.parse::<http::Uri>();
        let good = parsed.as_ref().is_ok_and(|uri| {
            uri.scheme_str() == Some("http") && uri.host().is_some() && uri.query().is_none()
        });
        if !good && !otlp.is_empty() {
            self.error(
                Some(raw.otlp.span()),
                format!(
                    "otlp: expected an OTLP/HTTP collector URL like \"http://127.0.0.1:4318\", got {:?} \
                     (https is not supported: export to a collector on this host or network)",
                    raw.otlp.get_ref()
                ),
            );
        }
        let service_name = raw
            .service_name
            .as_ref()
            .map_or_else(|| "worker-host".to_string(), |n| n.get_ref().clone());
        let sample_ratio = match &raw.sample_ratio {
            None => 1.0,
            Some(r) if (0.0..=1.0).contains(r.get_ref()) => *r.get_ref(),
            Some(r) => {
                self.error(
                    Some(r.span()),
                    format!("sample_ratio: expected 0 to 1, got {}", r.get_ref()),
                );
                1.0
            }
        };
        TracingConfig {
            otlp: otlp.trim_end_matches('/').to_string(),
            service_name,
            sample_ratio,
        }
    }

    fn broker(&mut self, raw: &RawConfig, env_url: Option<&str>) -> Broker {
        // DurationText refuses zero in the first pass.
        let duration = |d: Option<&Spanned<DurationText>>, default| {
            d.map_or(default, |d| d.get_ref().duration)
        };
        let topology_check = duration(
            raw.broker.as_ref().and_then(|b| b.topology_check.as_ref()),
            DEFAULT_TOPOLOGY_CHECK,
        );
        let shutdown_timeout = duration(
            raw.broker
                .as_ref()
                .and_then(|b| b.shutdown_timeout.as_ref()),
            DEFAULT_SHUTDOWN_TIMEOUT,
        );
        Broker {
            urls: self.broker_urls(raw, env_url),
            topology_check,
            shutdown_timeout,
        }
    }

    /// The broker URLs: `url` or `urls` from the file, checked even when the environment
    /// variable overrides them, so a file that is wrong says so before it is relied on.
    fn broker_urls(&mut self, raw: &RawConfig, env_url: Option<&str>) -> Vec<String> {
        let (url, urls) = match &raw.broker {
            Some(b) => (b.url.as_ref(), b.urls.as_ref()),
            None => (None, None),
        };
        if let (Some(_), Some(urls)) = (url, urls) {
            self.error(
                Some(urls.span()),
                "expected either [broker] url or [broker] urls, not both",
            );
        }
        if let Some(urls) = urls
            && urls.get_ref().is_empty()
        {
            self.error(
                Some(urls.span()),
                "expected at least one broker URL in [broker] urls",
            );
        }
        if let Some(env) = env_url {
            if let Err(err) = super::units::BrokerUrl::check(env) {
                self.error(None, format!("{}: {err}", super::BROKER_URL_ENV));
            }
            return vec![env.to_string()];
        }
        match (url, urls) {
            (Some(url), _) => vec![url.get_ref().0.clone()],
            (None, Some(urls)) => urls.get_ref().iter().map(|u| u.0.clone()).collect(),
            (None, None) => {
                self.error(
                    None,
                    format!(
                        "missing broker: expected [broker] url = \"amqp://...\" (or set {})",
                        super::BROKER_URL_ENV
                    ),
                );
                Vec::new()
            }
        }
    }

    fn exchanges(&mut self, raw: &RawConfig) -> Exchanges {
        let mut out = Exchanges::default();
        let Some(ex) = &raw.exchanges else {
            return out;
        };
        let mut seen: Vec<(&str, Range<usize>)> = Vec::new();
        for (key, value, slot) in [
            ("master", &ex.master, &mut out.master),
            ("retry", &ex.retry, &mut out.retry),
            ("failed", &ex.failed, &mut out.failed),
        ] {
            let Some(value) = value else { continue };
            *slot = value.get_ref().0.clone();
            self.check_declarable(value, &format!("exchanges.{key}"));
            seen.push((key, value.span()));
        }
        // Distinct roles need distinct exchanges, or retries would reach every subscriber.
        let names = [&out.master, &out.retry, &out.failed];
        let roles = ["master", "retry", "failed"];
        for i in 0..3 {
            for j in 0..i {
                if names[i] == names[j] {
                    let span = seen
                        .iter()
                        .find(|(k, _)| *k == roles[i])
                        .map(|(_, s)| s.clone());
                    self.error(
                        span,
                        format!(
                            "expected exchanges.{} to differ from exchanges.{} (both are \"{}\")",
                            roles[i], roles[j], names[i]
                        ),
                    );
                }
            }
        }
        out
    }

    /// The folder of worker.toml: relative paths in it resolve against it.
    fn base(&self) -> PathBuf {
        match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// `[state] dir`, default `state`; created when first needed, so not checked here.
    fn state_dir(&self, raw: &RawConfig) -> PathBuf {
        let dir = raw.state.as_ref().and_then(|s| s.dir.as_ref());
        self.base()
            .join(dir.map_or("state", |d| d.get_ref().as_str()))
    }

    fn plugins(&mut self, raw: &RawConfig) -> Plugins {
        let base = self.base();
        let dir_value = raw.plugins.as_ref().and_then(|p| p.dir.as_ref());
        let dir = base.join(dir_value.map_or("plugins", |d| d.get_ref().as_str()));
        if !dir.is_dir() {
            self.error(
                dir_value.map(|d| d.span()),
                format!(
                    "plugins.dir {} is not a folder (it is resolved against the folder of {})",
                    dir.display(),
                    self.path.display()
                ),
            );
        }
        let max_plugin_size = raw
            .plugins
            .as_ref()
            .and_then(|p| p.max_plugin_size.as_ref());
        if let Some(size) = max_plugin_size
            && !(MIN_PLUGIN_SIZE..=MAX_PLUGIN_SIZE).contains(&size.get_ref().0)
        {
            self.error(
                Some(size.span()),
                format!(
                    "expected max_plugin_size between 1KiB and 4GiB, got {} bytes",
                    size.get_ref().0
                ),
            );
        }
        Plugins {
            dir,
            max_plugin_size: max_plugin_size.map_or(DEFAULT_MAX_PLUGIN_SIZE, |s| s.get_ref().0),
        }
    }
}

fn to_retry_delay(d: &DurationText) -> RetryDelay {
    RetryDelay {
        text: d.text.clone(),
        duration: d.duration,
    }
}

/// TOML to JSON for `[subscription.config]`: datetimes become RFC 3339 strings, non-finite
/// floats become null (JSON has neither).
fn toml_to_json(value: toml::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match value {
        toml::Value::String(s) => J::String(s),
        toml::Value::Integer(i) => J::from(i),
        toml::Value::Float(f) => serde_json::Number::from_f64(f).map_or(J::Null, J::Number),
        toml::Value::Boolean(b) => J::Bool(b),
        toml::Value::Datetime(d) => J::String(d.to_string()),
        toml::Value::Array(a) => J::Array(a.into_iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => {
            J::Object(t.into_iter().map(|(k, v)| (k, toml_to_json(v))).collect())
        }
    }
}
