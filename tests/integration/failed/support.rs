//! The setup the `failed` tests share: a subscription `<p>.q` whose plugin fails every message,
//! a plain queue `<p>.other` on the same key, and parked-style messages published straight into
//! `<p>.q@failed`.

use std::time::Duration;

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable};
use worker_host::config::Config;
use worker_host::headers;

use crate::harness::{self, Host};

/// Answers fail to every message.
pub const FAILING: &str = r#"(module (memory (export "memory") 1) (func (export "worker_abi_v1")) (func (export "worker_handle") (result i32) i32.const 2))"#;

/// A failing subscription `<p>.q` on `evt.*` and a plain queue `<p>.other` bound to the same
/// key on the same master exchange, so replays that leak to other subscribers show up there.
pub struct Setup {
    pub p: String,
    /// Extra subscription lines (e.g. the queue type).
    extra: &'static str,
    /// Holds worker.toml and the plugin (for the binary and for an in-process host).
    pub dir: tempfile::TempDir,
}

impl Setup {
    pub fn new() -> Setup {
        Setup::with("")
    }
    /// The same with quorum queues.
    pub fn quorum() -> Setup {
        Setup::with("queue_type = \"quorum\"\n")
    }
    fn with(extra: &'static str) -> Setup {
        let p = harness::unique("wf");
        let wasm = wat::parse_str(FAILING).expect("the failing plugin parses");
        let dir = harness::folder(&[("failing.wasm", &wasm)]);
        let setup = Setup { p, extra, dir };
        harness::write_config(setup.dir.path(), &setup.toml());
        setup
    }
    pub fn q(&self) -> String {
        format!("{}.q", self.p)
    }
    pub fn failed(&self) -> String {
        format!("{}.q@failed", self.p)
    }
    pub fn other(&self) -> String {
        format!("{}.other", self.p)
    }
    pub fn master(&self) -> String {
        format!("{}.master", self.p)
    }
    pub fn toml(&self) -> String {
        format!(
            "[broker]\nurl = \"{url}\"\n\n\
             [exchanges]\nmaster = \"{p}.master\"\nretry = \"{p}.retry\"\nfailed = \"{p}.failed\"\n\n\
             [[subscription]]\nqueue = \"{p}.q\"\nplugin = \"failing.wasm\"\nbindings = [\"evt.*\"]\n\
             max_retries = 0\n{extra}\n\
             [[queue]]\nname = \"{p}.other\"\nbindings = [{{ exchange = \"{p}.master\", key = \"evt.*\" }}]\n",
            url = harness::broker_url(),
            p = self.p,
            extra = self.extra
        )
    }
    pub fn config_path(&self) -> std::path::PathBuf {
        self.dir.path().join("worker.toml")
    }
    pub fn config(&self) -> Config {
        Config::load(&self.config_path())
            .unwrap_or_else(|e| panic!("test config is invalid:\n{e}"))
            .0
    }
    /// Declares the topology without running the plugin.
    pub async fn declare(&self) {
        let conn = harness::connect().await;
        worker_host::topology::Plan::from_config(&self.config())
            .declare(&conn)
            .await
            .expect("declare the topology");
        let _ = conn.close(200, "declared".into()).await;
    }
    /// Starts the service and waits until it consumes (so its whole topology is declared).
    pub async fn start(&self) -> Host {
        let wasm = wat::parse_str(FAILING).expect("the failing plugin parses");
        let service = Host::in_process(&self.toml(), &[("failing.wasm", &wasm)]).await;
        let conn = harness::connect().await;
        harness::wait_consuming(&conn, &self.q()).await;
        let _ = conn.close(200, "bye".into()).await;
        service
    }
    pub async fn cleanup(&self) {
        let queues = vec![
            self.q(),
            self.failed(),
            self.other(),
            format!("{}@retry.30s", self.q()),
        ];
        let exchanges = ["master", "retry", "failed"]
            .iter()
            .map(|e| format!("{}.{e}", self.p))
            .collect::<Vec<_>>();
        harness::cleanup(&queues, &exchanges).await;
    }
    /// Publishes a message into `<p>.q@failed` as the host parks one (default exchange).
    pub async fn park(&self, ch: &lapin::Channel, props: BasicProperties, body: &[u8]) {
        harness::publish(ch, "", &self.failed(), body, props).await;
    }
}

/// Message `m<i>` with its own header `mine = v<i>`.
pub fn props(i: usize) -> BasicProperties {
    let mut h = FieldTable::default();
    h.insert("mine".into(), headers::text(&format!("v{i}")));
    BasicProperties::default()
        .with_message_id(format!("m{i}").as_str().into())
        .with_headers(h)
}

/// Message `m<i>` as the host parks it: its own header plus the host's, with this cause.
pub fn parked(i: usize, reason: &str, cause: &str) -> BasicProperties {
    let mut h = FieldTable::default();
    h.insert("mine".into(), headers::text(&format!("v{i}")));
    h.insert(
        headers::ORIG_ROUTING_KEY.into(),
        headers::text("evt.created"),
    );
    h.insert(headers::ATTEMPTS.into(), AMQPValue::LongLongInt(3));
    h.insert(headers::ERROR.into(), headers::text(cause));
    h.insert(headers::FAILED_REASON.into(), headers::text(reason));
    h.insert(headers::PLUGIN.into(), headers::text("failing.wasm"));
    h.insert(
        headers::FAILED_AT.into(),
        headers::text("2026-01-02T03:04:05Z"),
    );
    BasicProperties::default()
        .with_message_id(format!("m{i}").as_str().into())
        .with_headers(h)
}

pub async fn wait_depth(ch: &lapin::Channel, queue: &str, n: u32) {
    harness::eventually(
        Duration::from_secs(20),
        &format!("{n} messages in {queue}"),
        || {
            let (ch, queue) = (ch.clone(), queue.to_string());
            async move { (harness::depth(&ch, &queue).await == n).then_some(()) }
        },
    )
    .await;
}

/// Takes every message of `queue` and returns their message ids, in order.
pub async fn drain_ids(ch: &lapin::Channel, queue: &str) -> Vec<String> {
    let mut ids = Vec::new();
    while let Some(msg) = harness::get(ch, queue).await {
        let props = &msg.delivery.properties;
        ids.push(
            props
                .message_id()
                .as_ref()
                .map_or_else(String::new, |m| m.to_string()),
        );
    }
    ids
}

/// The JSON lines of `failed list`.
pub async fn list_lines(setup: &Setup, limit: Option<u64>) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let selection = worker_host::failed::Selection::limit(limit);
    worker_host::failed::list(&setup.config(), &setup.q(), &selection, &mut out)
        .await
        .expect("list");
    String::from_utf8(out)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

pub fn ids(lines: &[serde_json::Value]) -> Vec<String> {
    lines
        .iter()
        .map(|l| l["id"].as_str().expect("an id").to_string())
        .collect()
}

/// Runs `worker-host --log-format json failed ACTION -c <setup> --queue <q> ARGS...`: its exit
/// code, stdout and stderr (the JSON log lines), after checking that nothing panicked.
pub fn run_failed(s: &Setup, action: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let config = s.config_path();
    let q = s.q();
    let mut all = vec![
        "--log-format",
        "json",
        "failed",
        action,
        "-c",
        config.to_str().expect("utf-8 path"),
        "--queue",
        &q,
    ];
    all.extend_from_slice(args);
    let out = crate::cli::worker_host(&all, &[]);
    let (stdout, stderr) = crate::cli::text(&out);
    crate::cli::assert_no_panic(&stderr);
    (out.status.code(), stdout, stderr)
}
