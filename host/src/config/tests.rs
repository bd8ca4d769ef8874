//! Config tests. Bad cases live in tests/configs/bad as `NAME.toml` + `NAME.expected` (each
//! non-empty line of the .expected file must appear in the error), good ones in tests/configs/good
//! (a `NAME.expected` there lists warnings that must appear).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;

fn fixtures(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/configs")
        .join(kind)
}

/// `(toml path, expected lines)` for every `*.toml` in the folder, sorted by name.
fn cases(kind: &str) -> Vec<(PathBuf, Option<Vec<String>>)> {
    let dir = fixtures(kind);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("readable folder entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| {
            let expected = std::fs::read_to_string(p.with_extension("expected"))
                .ok()
                .map(|t| {
                    t.lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty())
                        .map(String::from)
                        .collect()
                });
            (p, expected)
        })
        .collect();
    out.sort();
    out
}

fn parse_file(path: &Path) -> Result<(Config, Vec<Warning>), ConfigError> {
    let text = std::fs::read_to_string(path).expect("fixture is readable");
    Config::parse(&text, path)
}

#[test]
fn every_bad_config_is_refused_with_its_expected_text() {
    let cases = cases("bad");
    assert!(cases.len() > 20, "bad fixtures missing");
    let mut failures = Vec::new();
    for (path, expected) in &cases {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let Some(expected) = expected else {
            failures.push(format!("{name}: no .expected file"));
            continue;
        };
        match parse_file(path) {
            Ok(_) => failures.push(format!("{name}: accepted, expected an error")),
            Err(err) => {
                let shown = err.to_string();
                for line in expected {
                    if !shown.contains(line.as_str()) {
                        failures.push(format!(
                            "{name}: error does not contain\n    {line}\n  it is:\n{shown}"
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

#[test]
fn every_good_config_is_accepted_with_its_expected_warnings() {
    let mut failures = Vec::new();
    for (path, expected) in cases("good") {
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        match parse_file(&path) {
            Err(err) => failures.push(format!("{name}: refused:\n{err}")),
            Ok((_, warnings)) => {
                let shown: Vec<String> = warnings.iter().map(|w| w.to_string()).collect();
                let expected = expected.unwrap_or_default();
                for line in &expected {
                    if !shown.iter().any(|w| w.contains(line.as_str())) {
                        failures.push(format!("{name}: no warning {line:?} in {shown:#?}"));
                    }
                }
                if shown.len() != expected.len() {
                    failures.push(format!(
                        "{name}: expected {} warnings, got {shown:#?}",
                        expected.len()
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

fn parse_good(text: &str) -> (Config, Vec<Warning>) {
    let path = fixtures("good").join("inline.toml");
    Config::parse(text, &path).unwrap_or_else(|e| panic!("refused:\n{e}"))
}

const MINIMAL: &str = r#"
[broker]
url = "amqp://127.0.0.1"

[[subscription]]
queue = "q"
plugin = "echo.wasm"
bindings = ["k"]
"#;

#[test]
fn defaults() {
    let (config, warnings) = parse_good(MINIMAL);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(config.broker.urls, vec!["amqp://127.0.0.1".to_string()]);
    assert_eq!(config.exchanges, Exchanges::default());
    assert_eq!(config.exchanges.master, "master");
    assert_eq!(config.exchanges.retry, "master.retry");
    assert_eq!(config.exchanges.failed, "master.failed");
    assert_eq!(config.plugins.dir, fixtures("good").join("plugins"));
    assert_eq!(config.plugins.max_plugin_size, 256 << 20);
    assert!(config.admin.is_none());
    assert!(config.delay.is_none());
    assert!(config.exchanges_extra.is_empty() && config.queues_extra.is_empty());
    let sub = &config.subscriptions[0];
    assert_eq!(sub.plugin_path, fixtures("good").join("plugins/echo.wasm"));
    assert_eq!(sub.exchange, "master");
    assert_eq!(sub.prefetch, 16);
    assert_eq!(sub.concurrency, 4);
    assert_eq!(sub.max_retries, 3);
    assert_eq!(
        sub.retry_delays,
        vec![RetryDelay {
            text: "30s".into(),
            duration: Duration::from_secs(30)
        }]
    );
    assert_eq!(sub.timeout, Duration::from_secs(10));
    assert_eq!(sub.memory_limit, 64 << 20);
    assert_eq!(sub.queue_type, QueueType::Classic);
    assert!(sub.publish.is_empty());
    assert_eq!(sub.config, serde_json::json!({}));
}

#[test]
fn queue_defaults() {
    let (config, _) = parse_good(
        "[broker]\nurl = \"amqp://h\"\n[[queue]]\nname = \"q\"\n[[exchange]]\nname = \"e\"\ntype = \"direct\"\n",
    );
    let q = &config.queues_extra[0];
    assert!(q.durable);
    assert_eq!(q.queue_type, QueueType::Classic);
    assert!(q.message_ttl.is_none() && q.max_length.is_none() && q.bindings.is_empty());
    assert!(config.exchanges_extra[0].durable);
}

#[test]
fn full_config_sets_every_key() {
    let (config, warnings) = parse_file(&fixtures("good").join("full.toml")).expect("full.toml");
    assert!(warnings.is_empty(), "{warnings:#?}");
    assert_eq!(config.broker.urls.len(), 2);
    assert_eq!(config.broker.topology_check, Duration::from_secs(10));
    assert_eq!(config.broker.shutdown_timeout, Duration::from_secs(45));
    assert_eq!(config.exchanges.master, "main");
    assert_eq!(config.exchanges.failed, "main.failed");
    assert_eq!(config.plugins.max_plugin_size, 64 << 20);
    assert_eq!(config.admin.as_ref().map(|a| a.listen.port()), Some(9464));
    let hosts: Vec<String> = config
        .admin
        .iter()
        .flat_map(|a| a.hosts.iter().map(HostName::to_string))
        .collect();
    assert_eq!(
        hosts,
        ["worker.internal", "10.0.0.5:9464", "[fd00::1]:9464"]
    );
    assert_eq!(config.delay, Some(DelayConfig { levels: 28 }));

    let user = config.subscription("ucenter@user").expect("ucenter@user");
    assert_eq!(user.bindings, vec!["user.*", "account.#"]);
    assert_eq!(
        (user.prefetch, user.concurrency, user.max_retries),
        (32, 8, 3)
    );
    let delays: Vec<_> = user.retry_delays.iter().map(|d| d.text.as_str()).collect();
    assert_eq!(delays, ["1s", "10s", "1m"]);
    assert_eq!(user.retry_delays[2].duration, Duration::from_secs(60));
    assert_eq!(user.timeout, Duration::from_millis(250));
    assert_eq!(user.memory_limit, 512 << 10);
    assert_eq!(user.queue_type, QueueType::Classic);
    assert_eq!(user.publish, vec!["main", "order-event-exchange"]);
    assert_eq!(
        user.config,
        serde_json::json!({
            "greeting": "hello",
            "limits": { "max": 3, "ratio": 0.5 },
            "tags": ["a", "b"],
            "since": "2024-01-02T03:04:05Z",
        })
    );

    assert_eq!(user.max_message_size, 8 << 20, "from [defaults]");

    // The second subscription takes everything from [defaults].
    let audit = config.subscription("audit@everything").expect("audit");
    assert_eq!(audit.exchange, "main");
    assert_eq!(
        (audit.prefetch, audit.concurrency, audit.max_retries),
        (8, 2, 5)
    );
    let delays: Vec<_> = audit.retry_delays.iter().map(|d| d.text.as_str()).collect();
    assert_eq!(delays, ["2s", "20s"]);
    assert_eq!(audit.timeout, Duration::from_secs(3));
    assert_eq!(audit.memory_limit, 32 << 20);
    assert_eq!(audit.queue_type, QueueType::Quorum);
    assert_eq!(audit.publish, vec!["main"]);

    assert_eq!(config.exchanges_extra.len(), 2);
    assert_eq!(config.exchanges_extra[1].kind, ExchangeType::Fanout);
    assert!(!config.exchanges_extra[1].durable);
    let delay_q = &config.queues_extra[0];
    assert_eq!(delay_q.message_ttl, Some(Duration::from_secs(1800)));
    assert_eq!(
        delay_q.dead_letter_exchange.as_deref(),
        Some("order-event-exchange")
    );
    assert_eq!(
        delay_q.dead_letter_routing_key.as_deref(),
        Some("order.release.order")
    );
    assert_eq!(delay_q.max_length, Some(100_000));
    let release = &config.queues_extra[1];
    assert_eq!(release.queue_type, QueueType::Quorum);
    assert_eq!(
        release.bindings[1],
        BindingDecl {
            exchange: "broadcast".into(),
            key: String::new()
        }
    );
}

#[test]
fn broker_url_from_environment_wins() {
    let path = fixtures("good").join("inline.toml");
    let (config, _) = validate::parse(MINIMAL, &path, Some("amqp://other:5672/%2f")).expect("ok");
    assert_eq!(
        config.broker.urls,
        vec!["amqp://other:5672/%2f".to_string()]
    );

    // The environment alone is enough.
    let no_broker = MINIMAL.replace("[broker]\nurl = \"amqp://127.0.0.1\"\n", "");
    let (config, _) = validate::parse(&no_broker, &path, Some("amqp://env")).expect("ok");
    assert_eq!(config.broker.urls, vec!["amqp://env".to_string()]);

    let err = validate::parse(MINIMAL, &path, Some("nonsense")).expect_err("bad env url");
    assert!(
        err.to_string()
            .contains("WORKER_BROKER_URL: expected a broker URL"),
        "{err}"
    );
    // The parser quotes a URL it cannot read back: never with its password.
    let err = validate::parse(MINIMAL, &path, Some("amqp:guest:S3CRET@host")).expect_err("bad");
    let shown = err.to_string();
    assert!(shown.contains("'amqp:guest:***@host'"), "{shown}");
    assert!(!shown.contains("S3CRET"), "{shown}");
}

#[test]
fn errors_name_file_line_and_column_with_a_caret() {
    let text = MINIMAL.replace("bindings = [\"k\"]", "bindings = [\"k\"]\nprefetch = 0");
    let err = Config::parse(&text, Path::new("conf/worker.toml")).expect_err("prefetch 0");
    let shown = err.to_string();
    assert!(
        shown.starts_with("conf/worker.toml:9:12: expected prefetch between 1 and 65535, got 0"),
        "{shown}"
    );
    assert!(
        shown.contains("\n9 | prefetch = 0\n  |            ^"),
        "{shown}"
    );
}

#[test]
fn retry_helpers() {
    let (config, _) = parse_good(&MINIMAL.replace(
        "bindings = [\"k\"]",
        "bindings = [\"k\"]\nretry_delays = [\"1s\", \"10s\", \"1s\"]",
    ));
    let sub = &config.subscriptions[0];
    assert_eq!(sub.failed_queue(), "q@failed");
    assert_eq!(sub.retry_queue_name(&sub.retry_delays[1]), "q@retry.10s");
    assert_eq!(sub.delay_for_retry(1).text, "1s");
    assert_eq!(sub.delay_for_retry(2).text, "10s");
    assert_eq!(sub.delay_for_retry(3).text, "1s");
    assert_eq!(sub.delay_for_retry(99).text, "1s");
    assert_eq!(sub.delay_for_retry(0).text, "1s");
    let distinct: Vec<_> = sub
        .distinct_retry_delays()
        .iter()
        .map(|d| d.text.clone())
        .collect();
    assert_eq!(distinct, ["1s", "10s"]);
}

#[test]
fn warnings_name_file_line_and_column() {
    let (_, warnings) = parse_good(&MINIMAL.replace("bindings = [\"k\"]", ""));
    assert_eq!(warnings.len(), 1);
    let shown = warnings[0].to_string();
    assert!(
        shown.contains("inline.toml:6:9: warning: subscription \"q\" has no bindings"),
        "{shown}"
    );
}

#[test]
fn unreadable_file_names_the_path() {
    let path = fixtures("good").join("no-such-file.toml");
    let err = Config::load(&path).expect_err("missing file");
    assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");
    assert!(err.to_string().starts_with("cannot read "), "{err}");
    assert!(err.to_string().contains("no-such-file.toml"), "{err}");
    // The chain, as main prints it, says the reason once.
    let chain = format!("{:#}", anyhow::Error::new(err));
    assert_eq!(chain.matches("(os error 2)").count(), 1, "{chain}");
}

#[test]
fn capability_grants_and_stores() {
    let home = std::env::var("HOME").expect("HOME is set in tests");
    let text = r#"
[broker]
url = "amqp://127.0.0.1"

[kv.cache]
[kv.shared]
backend = "redis"
url = "redis://:pw@127.0.0.1:6379/0"
max_value_size = "4KiB"

[sql.orders]
url = "sqlite:orders.db"
[sql.remote]
url = "mariadb://root:${HOME}@db/test"
max_connections = 2

[[subscription]]
queue = "q"
plugin = "echo.wasm"
allowed_hosts = ["https://API.example.com", "http://127.0.0.1:*"]
http_max_response = "1MiB"
http_max_requests = 20
kv = "cache"
sql = "orders"
[subscription.http_headers."https://api.example.com"]
Authorization = "Bearer ${HOME}"
"#;
    let (config, _) = parse_good(text);
    let state = fixtures("good").join("state");
    assert_eq!(config.kv.len(), 2);
    assert_eq!(
        config.kv[0].backend,
        KvBackend::Embedded {
            path: state.join("kv/cache.redb")
        }
    );
    assert_eq!(config.kv[1].max_value_size, 4096);
    assert_eq!(config.sql[0].kind, SqlKind::Sqlite);
    assert_eq!(
        config.sql[0].url.expose(),
        format!("sqlite://{}", state.join("orders.db").display())
    );
    assert_eq!(config.sql[1].kind, SqlKind::MySql);
    assert_eq!(
        config.sql[1].url.expose(),
        format!("mysql://root:{home}@db/test")
    );
    assert_eq!(config.sql[1].url.redacted_url(), "mysql://root:***@db/test");
    assert_eq!(config.sql[1].max_connections, 2);

    let g = &config.subscriptions[0].grants;
    assert_eq!(g.kv.as_deref(), Some("cache"));
    assert_eq!(g.sql.as_deref(), Some("orders"));
    assert_eq!(g.http.max_response, 1 << 20);
    assert_eq!(g.http.max_requests, 20);
    assert!(g.http.allowed[0].matches("https", "api.example.com", 443));
    assert!(!g.http.allowed[0].matches("https", "api.example.com", 8443));
    assert!(!g.http.allowed[0].matches("http", "api.example.com", 443));
    assert!(g.http.allowed[1].matches("http", "127.0.0.1", 9));
    let (name, value) = &g.http.headers[0].headers[0];
    assert_eq!(name, "Authorization");
    assert_eq!(value.expose(), format!("Bearer {home}"));
    // Secrets never print.
    let shown = format!("{config:?}");
    assert!(!shown.contains(&home), "a secret leaked into Debug output");
}
