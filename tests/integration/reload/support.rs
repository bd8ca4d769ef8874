//! Helpers of the hot-reload tests: versioned test plugins, file writes the way editors and
//! deploy tools do them, a collector of results, probes and the reload counters.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lapin::BasicProperties;
use lapin::options::{BasicAckOptions, BasicConsumeOptions};
use lapin::types::FieldTable;
use sha2::{Digest, Sha256};

use crate::harness::{self, Host, Names, free_port};

/// Exchanges, the out exchange (topic) and the `seen` queue collecting every result.
pub(crate) fn topology_toml(n: &Names) -> String {
    format!(
        "{}{}{}",
        n.broker_toml(),
        n.exchanges_toml(),
        n.out_toml("topic")
    )
}

/// A subscription on `queue` running `hot.wasm`, bound to `<p>.<binding>.*`; retries wait
/// 200ms unless `extra` says otherwise.
pub(crate) fn sub_toml(n: &Names, queue: &str, binding: &str, extra: &str) -> String {
    sub_toml_with(n, "hot.wasm", queue, binding, extra)
}

/// [`sub_toml`] running `plugin`.
pub(crate) fn sub_toml_with(
    n: &Names,
    plugin: &str,
    queue: &str,
    binding: &str,
    extra: &str,
) -> String {
    let delays = if extra.contains("retry_delays") {
        ""
    } else {
        "retry_delays = [\"200ms\"]\n"
    };
    format!(
        "[[subscription]]\nqueue = \"{queue}\"\nplugin = \"{plugin}\"\nbindings = [\"{p}.{binding}.*\"]\n\
         publish = [\"{p}.out\"]\n{delays}{extra}\n\n",
        p = n.p
    )
}

/// Version `v` of the test plugin: publishes the body to `out` with routing key `v<v>` and
/// answers ok; a body starting with `f` answers fail instead (to see the version stamped on
/// parked messages). Versions differ only in a data segment, like real rebuilds do.
pub(crate) fn versioned(out: &str, v: usize) -> Vec<u8> {
    let key = format!("v{v}");
    let wat = format!(
        r#"(module
  (import "worker_v1" "body_read" (func $body_read (param i32 i32) (result i32)))
  (import "worker_v1" "set_reason" (func $set_reason (param i32 i32)))
  (import "worker_v1" "publish" (func $publish (param i32 i32 i32 i32 i32 i32 i64) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{out}")
  (data (i32.const 256) "{key}")
  (data (i32.const 512) "publish refused")
  (data (i32.const 544) "failed on purpose")
  (func (export "worker_abi_v1"))
  (func (export "worker_handle") (result i32)
    (local $len i32)
    (local.set $len (call $body_read (i32.const 1024) (i32.const 4096)))
    (if (i32.eq (i32.load8_u (i32.const 1024)) (i32.const 102))
      (then (call $set_reason (i32.const 544) (i32.const 17)) (return (i32.const 2))))
    (if (i32.ne (call $publish (i32.const 0) (i32.const {ol}) (i32.const 256) (i32.const {kl})
                               (i32.const 1024) (local.get $len) (i64.const 0))
                (i32.const 0))
      (then (call $set_reason (i32.const 512) (i32.const 15)) (return (i32.const 2))))
    (i32.const 0)))"#,
        ol = out.len(),
        kl = key.len()
    );
    wat::parse_str(wat).expect("versioned plugin parses")
}

/// A valid module that lacks `worker_handle`.
pub(crate) fn missing_export() -> Vec<u8> {
    wat::parse_str(r#"(module (memory (export "memory") 1) (func (export "worker_abi_v1")))"#)
        .expect("parses")
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Replaces the file's contents in place (truncate + write, same inode), like `cp` or an editor
/// with `backupcopy=yes`.
pub(crate) fn write_in_place(path: &Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .create(true)
        .open(path)
        .expect("open plugin");
    f.write_all(bytes).expect("write plugin");
    f.sync_all().expect("sync");
}

/// Writes a temp file next to `path` and renames it over `path`, like most editors and
/// deploy tools.
pub(crate) fn write_via_rename(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("wasm.tmp");
    std::fs::write(&tmp, bytes).expect("write temp");
    std::fs::rename(&tmp, path).expect("rename over");
}

/// One result the plugin published: its version key, its body, when it arrived.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) version: usize,
    pub(crate) body: String,
    pub(crate) at: Instant,
}

/// Consumes the `seen` queue as results arrive, recording each after its ack went out (so a
/// message requeued by closing the channel is recorded once, by `finish`).
pub(crate) struct Collector {
    ch: lapin::Channel,
    records: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Collector {
    pub(crate) async fn start(conn: &lapin::Connection, queue: &str) -> Collector {
        let ch = conn.create_channel().await.expect("collector channel");
        let mut deliveries = ch
            .basic_consume(
                queue.into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("consume seen");
        let records = Arc::new(Mutex::new(Vec::new()));
        let sink = records.clone();
        let task = tokio::spawn(async move {
            while let Some(Ok(d)) = deliveries.next().await {
                let at = Instant::now();
                if d.acker.ack(BasicAckOptions::default()).await.is_err() {
                    break;
                }
                sink.lock().unwrap().push(Seen {
                    version: parse_version(d.routing_key.as_str()),
                    body: String::from_utf8_lossy(&d.data).into_owned(),
                    at,
                });
            }
        });
        Collector { ch, records, task }
    }

    pub(crate) fn len(&self) -> usize {
        self.records.lock().unwrap().len()
    }

    /// When the first result of `version` arrived.
    pub(crate) fn first_of(&self, version: usize) -> Option<Instant> {
        self.records
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.version == version)
            .map(|s| s.at)
            .min()
    }

    /// Stops consuming and returns every result, including what is left in the queue.
    pub(crate) async fn finish(self, ch: &lapin::Channel, queue: &str) -> Vec<Seen> {
        let _ = self.ch.close(200, "done".into()).await;
        let _ = self.task.await;
        let mut all = self.records.lock().unwrap().clone();
        while let Some(msg) = harness::get(ch, queue).await {
            all.push(Seen {
                version: parse_version(msg.delivery.routing_key.as_str()),
                body: String::from_utf8_lossy(&msg.delivery.data).into_owned(),
                at: Instant::now(),
            });
        }
        all
    }
}

pub(crate) fn parse_version(key: &str) -> usize {
    key.strip_prefix('v')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected result key {key:?}"))
}

/// Publishes `body` and waits for its result in `seen`; returns the version that handled it.
pub(crate) async fn probe(ch: &lapin::Channel, n: &Names, body: &str) -> usize {
    let (version, result) = result_of(ch, n, body).await;
    assert_eq!(result, body, "results come back in order");
    version
}

/// Publishes `body` and waits (up to 10 s) for its result in `seen`: the version that handled it
/// (from the result's routing key) and the result's body.
pub(crate) async fn result_of(ch: &lapin::Channel, n: &Names, body: &str) -> (usize, String) {
    result_within(ch, n, body, Duration::from_secs(10)).await
}

/// `result_of`, waiting up to `wait` for the result.
pub(crate) async fn result_within(
    ch: &lapin::Channel,
    n: &Names,
    body: &str,
    wait: Duration,
) -> (usize, String) {
    harness::publish(
        ch,
        &n.master(),
        &n.key(),
        body.as_bytes(),
        BasicProperties::default(),
    )
    .await;
    let msg = harness::eventually(wait, &format!("the result of {body}"), || async {
        harness::get(ch, &n.seen()).await
    })
    .await;
    (
        parse_version(msg.delivery.routing_key.as_str()),
        String::from_utf8_lossy(&msg.delivery.data).into_owned(),
    )
}

/// Probes until `version` answers; the last probes may still meet the old version.
pub(crate) async fn probe_until(ch: &lapin::Channel, n: &Names, version: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut i = 0;
    loop {
        i += 1;
        if probe(ch, n, &format!("{what}-{i}")).await == version {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "v{version} not serving 10s after {what}"
        );
    }
}

/// `worker_plugin_reloads{result=...}` from the admin endpoint.
pub(crate) async fn reloads(port: u16, result: &str) -> u64 {
    let admin = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let (_, text) = harness::http_get(admin, "/metrics")
        .await
        .expect("the admin endpoint answers");
    let label = format!("result=\"{result}\"");
    text.lines()
        .find(|l| l.starts_with("worker_plugin_reloads") && l.contains(&label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .unwrap_or(0)
}

/// Waits until the service has refused one more reload than `before`.
pub(crate) async fn wait_refused(port: u16, before: u64, what: &str) -> u64 {
    harness::eventually(
        Duration::from_secs(10),
        &format!("{what} refused"),
        || async {
            let now = reloads(port, "failed").await;
            (now > before).then_some(now)
        },
    )
    .await
}

pub(crate) fn stats(mut xs: Vec<Duration>) -> (Duration, Duration, Duration) {
    xs.sort();
    (xs[0], xs[xs.len() / 2], xs[xs.len() - 1])
}

/// Consumers on `queue` now.
pub(crate) async fn consumers(conn: &lapin::Connection, queue: &str) -> u32 {
    harness::probe(conn, queue)
        .await
        .unwrap_or_else(|| panic!("queue {queue} missing"))
        .consumer_count()
}

pub(crate) async fn queue_exists(conn: &lapin::Connection, queue: &str) -> bool {
    harness::probe(conn, queue).await.is_some()
}

/// Saves worker.toml the way editors do: a temp file renamed over it.
pub(crate) fn save_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("worker.toml");
    let tmp = dir.join(".worker.toml.swp");
    std::fs::write(&tmp, text).expect("write temp config");
    std::fs::rename(&tmp, &path).expect("rename config");
    path
}

/// What `start_hot` returns: the names, the admin port, the service, the plugin file, and a
/// connection with a channel for probing.
pub type Hot = (Names, u16, Host, PathBuf, lapin::Connection, lapin::Channel);

/// A service whose one subscription runs `hot.wasm` (version 0), with the admin endpoint on a
/// free port, consuming and answering: the start of the hot-reload tests.
pub async fn start_hot(test: &str) -> Hot {
    start_hot_with(test, "").await
}

/// [`start_hot`] with `tables` (say `[state]`) appended to worker.toml.
pub async fn start_hot_with(test: &str, tables: &str) -> Hot {
    let n = Names::new(test);
    let port = free_port();
    let toml = format!(
        "{}[admin]\nlisten = \"127.0.0.1:{port}\"\n\n{}{tables}",
        topology_toml(&n),
        sub_toml(&n, &n.q(), "key", "max_retries = 0")
    );
    let svc = Host::in_process(&toml, &[("hot.wasm", &versioned(&n.out(), 0))]).await;
    let plugin = svc.dir().join("plugins/hot.wasm");
    let (conn, ch) = harness::channel().await;
    harness::wait_consuming(&conn, &n.q()).await;
    assert_eq!(probe(&ch, &n, "start").await, 0);
    (n, port, svc, plugin, conn, ch)
}
