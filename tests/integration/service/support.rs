//! Helpers of the service tests: their config, the real binary on it, publishing, draining and
//! counting where every message ended up.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use futures_util::StreamExt;
use lapin::options::BasicConsumeOptions;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection};
use worker_host::headers;

use crate::harness::{self, Host, Names};

pub const SCRIPT: &str = include_str!("../fixtures/script.wat");

/// worker.toml: one subscription on the script plugin (retries wait 30 s, so a retried
/// message stays countable in its retry queue), a collector queue `seen` behind the fanout
/// exchange `out`, and `[admin]` when asked.
pub fn toml(n: &Names, admin: Option<SocketAddr>, extra: &str) -> String {
    let admin = admin
        .map(|a| format!("[admin]\nlisten = \"{a}\"\n\n"))
        .unwrap_or_default();
    format!(
        "{broker}{admin}{exchanges}{out}\
         [[subscription]]\nqueue = \"{p}.q\"\nplugin = \"script.wasm\"\npublish = [\"{p}.out\"]\n\
         retry_delays = [\"30s\"]\n{extra}\n",
        broker = n.broker_toml(),
        exchanges = n.exchanges_toml(),
        out = n.out_toml("fanout"),
        p = n.p,
    )
}

/// Deletes Q, its parked and retry queues, `seen` and the exchanges.
pub async fn cleanup(n: &Names) {
    n.cleanup(&[n.q()]).await;
}

pub fn script() -> Vec<u8> {
    wat::parse_str(SCRIPT).expect("script.wat parses")
}

/// A config folder: worker.toml and plugins/script.wasm.
pub fn config_dir(toml: &str) -> tempfile::TempDir {
    let dir = harness::folder(&[("script.wasm", &script())]);
    harness::write_config(dir.path(), toml);
    dir
}

/// Declares what the config describes, so a whole stream can be queued before a host runs.
pub async fn declare(dir: &Path) {
    let (config, _) = worker_host::config::Config::load(&dir.join("worker.toml"))
        .unwrap_or_else(|e| panic!("test config is invalid:\n{e}"));
    let conn = harness::connect().await;
    worker_host::topology::Plan::from_config(&config)
        .declare(&conn)
        .await
        .expect("declare the topology");
    let _ = conn.close(200, "declared".into()).await;
}

/// Body of message `i`: the script's op byte, then the index.
pub fn body(op: u8, i: u32) -> Vec<u8> {
    let mut b = vec![op];
    b.extend_from_slice(format!("{i:07}").as_bytes());
    b
}

pub fn index_of(body: &[u8]) -> u32 {
    std::str::from_utf8(&body[1..])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a test body: {:?}", String::from_utf8_lossy(body)))
}

/// Publishes every body to Q (through master, key Q), pipelined: all sends, then all confirms.
pub async fn publish_all(conn: &Connection, n: &Names, bodies: impl IntoIterator<Item = Vec<u8>>) {
    let messages = bodies.into_iter().map(|body| (n.q(), body, n.out()));
    publish_to(conn, &n.master(), messages).await;
}

/// Publishes (key, body, exchange the plugin should publish to) through `exchange`, confirmed.
pub async fn publish_to(
    conn: &Connection,
    exchange: &str,
    messages: impl IntoIterator<Item = (String, Vec<u8>, String)>,
) {
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(Default::default())
        .await
        .expect("confirms");
    let messages = messages.into_iter().map(|(key, body, to)| {
        let mut h = FieldTable::default();
        h.insert("pub-exchange".into(), headers::text(&to));
        (key, body, BasicProperties::default().with_headers(h))
    });
    harness::publish_pipelined(&ch, exchange, messages).await;
    let _ = ch.close(200, "published".into()).await;
}

/// Messages ready in `queue`, on a fresh channel (a failed passive declare kills its channel).
pub async fn depth(conn: &Connection, queue: &str) -> u32 {
    harness::probe(conn, queue)
        .await
        .unwrap_or_else(|| panic!("queue {queue} missing"))
        .message_count()
}

/// Takes every message in `queue` (nobody else consumes it) and returns their indexes.
pub async fn drain(conn: &Connection, queue: &str) -> Vec<u32> {
    let expected = depth(conn, queue).await as usize;
    let ch = conn.create_channel().await.expect("channel");
    let mut consumer = ch
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("consume");
    let mut got = Vec::with_capacity(expected);
    while got.len() < expected {
        let next = tokio::time::timeout(Duration::from_secs(10), consumer.next())
            .await
            .unwrap_or_else(|_| panic!("{queue}: only {} of {expected} arrived", got.len()));
        let delivery = next.expect("consumer ended").expect("delivery");
        got.push(index_of(&delivery.data));
    }
    let _ = ch.close(200, "drained".into()).await;
    got
}

/// Where every published message ended up.
#[derive(Debug)]
pub struct Tally {
    pub published: usize,
    /// Distinct indexes answered: republished to `seen` (ok) or parked in `Q@failed`.
    pub handled: usize,
    /// Extra copies in `seen`: a message handled more than once.
    pub duplicates: usize,
    /// Distinct indexes still in Q or its retry queue and never handled.
    pub still_queued: usize,
    /// Handled, yet also still queued: published but not acked.
    pub handled_and_queued: usize,
    pub lost: usize,
}

/// Drains `seen`, `Q@failed`, Q and its retry queue (the host must be stopped) and counts.
pub async fn tally(conn: &Connection, n: &Names, published: u32) -> Tally {
    let seen = drain(conn, &n.seen()).await;
    let parked = drain(conn, &n.failed()).await;
    let mut queued = drain(conn, &n.q()).await;
    queued.extend(drain(conn, &n.retry("30s")).await);
    let mut handled: BTreeMap<u32, usize> = BTreeMap::new();
    for i in seen.iter().chain(&parked) {
        assert!(*i < published, "unknown index {i}");
        *handled.entry(*i).or_default() += 1;
    }
    let queued: std::collections::BTreeSet<u32> = queued.into_iter().collect();
    let still_queued = queued.iter().filter(|i| !handled.contains_key(i)).count();
    let handled_and_queued = queued.len() - still_queued;
    let lost = (0..published)
        .filter(|i| !handled.contains_key(i) && !queued.contains(i))
        .count();
    Tally {
        published: published as usize,
        handled: handled.len(),
        duplicates: handled.values().map(|c| c - 1).sum(),
        still_queued,
        handled_and_queued,
        lost,
    }
}

impl Tally {
    pub fn assert_nothing_lost(&self) {
        assert_eq!(self.lost, 0, "{self:?}");
        assert_eq!(self.published, self.handled + self.still_queued, "{self:?}");
    }
}

/// The real binary on `dir`/worker.toml, logging JSON to `dir`/host-`run`.log.
pub fn start(dir: &Path, run: u32) -> Host {
    Host::child(&dir.join("worker.toml"))
        .log_file(dir.join(format!("host-{run}.log")))
        .start()
}

/// Waits until `queue` holds at least `at_least` messages; returns how many.
pub async fn wait_depth(conn: &Connection, queue: &str, at_least: u32, timeout: Duration) -> u32 {
    harness::eventually(
        timeout,
        &format!("{at_least} messages in {queue}"),
        || async {
            let d = depth(conn, queue).await;
            (d >= at_least).then_some(d)
        },
    )
    .await
}

/// Waits until Q is empty and `seen` holds at least `total` (copies included): the host has
/// taken everything; what it still holds is finished by the drain on SIGTERM.
pub async fn wait_all_taken(conn: &Connection, n: &Names, total: u32, timeout: Duration) {
    harness::eventually(timeout, "every message taken", || async {
        let done = depth(conn, &n.q()).await == 0 && depth(conn, &n.seen()).await >= total;
        done.then_some(())
    })
    .await
}

pub async fn rabbitmqctl(args: &[&str]) -> String {
    let out = tokio::process::Command::new("rabbitmqctl")
        .args(args)
        .output()
        .await
        .expect("run rabbitmqctl");
    assert!(
        out.status.success(),
        "rabbitmqctl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Stops the RabbitMQ application (the node stays up; durable queues and persistent messages
/// survive) and makes sure it is started again, even when the test fails.
pub struct BrokerDown {
    pub up: bool,
}

impl BrokerDown {
    pub async fn stop() -> BrokerDown {
        rabbitmqctl(&["stop_app"]).await;
        BrokerDown { up: false }
    }

    pub async fn start(mut self) {
        rabbitmqctl(&["start_app"]).await;
        rabbitmqctl(&["await_startup"]).await;
        self.up = true;
    }
}

impl Drop for BrokerDown {
    fn drop(&mut self) {
        if !self.up {
            let _ = Command::new("rabbitmqctl").arg("start_app").status();
            let _ = Command::new("rabbitmqctl").arg("await_startup").status();
        }
    }
}
