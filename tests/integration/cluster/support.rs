//! The local three-node cluster of scripts/cluster.sh as the cluster tests see it: its URLs, a
//! channel on whichever node answers, the node leading a queue, killing and reviving nodes,
//! and worker-host processes running the capability probe against it.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lapin::options::{ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};

use crate::capabilities::support::child_host;
use crate::faults::support::metric;
use crate::harness::{self, Host, free_addr, http_get};

/// The AMQP port of node N (1-3).
fn port(node: usize) -> u16 {
    5672 + node as u16
}

/// The cluster's URLs, node 1 first.
pub fn urls() -> Vec<String> {
    (1..=3)
        .map(|n| format!("amqp://guest:guest@127.0.0.1:{}/%2f", port(n)))
        .collect()
}

fn answers(node: usize) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port(node)));
    TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
}

/// Fails the test unless every node answers, naming the command that starts the cluster.
pub fn require() {
    for node in 1..=3 {
        assert!(
            answers(node),
            "cluster node {node} does not answer on 127.0.0.1:{}\nstart the cluster with: \
             scripts/cluster.sh start (scripts/test.sh starts and stops it around these tests)",
            port(node)
        );
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/cluster.sh")
}

/// Runs `scripts/cluster.sh args`; fails the test when it fails.
fn cluster_sh(args: &[&str]) -> String {
    let out = Command::new(script())
        .args(args)
        .output()
        .expect("run scripts/cluster.sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "scripts/cluster.sh {args:?}: {text}");
    text
}

/// SIGKILLs node N (a crash: no goodbye to peers or clients).
pub fn kill(node: usize) {
    cluster_sh(&["kill", &node.to_string()]);
}

/// Starts node N again and waits until it has booted and rejoined.
pub fn revive(node: usize) {
    cluster_sh(&["revive", &node.to_string()]);
}

/// `rabbitmqctl args` on a running node; fails the test when it fails.
pub fn rabbitmqctl(args: &[&str]) {
    let node = (1..=3).find(|n| answers(*n)).expect("a running node");
    let out = Command::new("rabbitmqctl")
        .args(["-q", "-n", &format!("wh-c{node}@localhost")])
        .args(args)
        .output()
        .expect("run rabbitmqctl");
    assert!(
        out.status.success(),
        "rabbitmqctl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The node (1-3) leading quorum queue `queue`, asked of a node that is running.
pub fn leader(queue: &str) -> usize {
    for node in (1..=3).filter(|n| answers(*n)) {
        let out = Command::new("rabbitmqctl")
            .args(["-q", "-n", &format!("wh-c{node}@localhost")])
            .args(["list_queues", "--no-table-headers", "name", "leader"])
            .output()
            .expect("run rabbitmqctl");
        let text = String::from_utf8_lossy(&out.stdout);
        let found = text.lines().find_map(|l| {
            let (name, leader) = l.split_once('\t')?;
            (name == queue).then(|| leader.trim().to_owned())
        });
        if let Some(leader) = found {
            let n = leader.trim_start_matches("wh-c").chars().next();
            if let Some(n) = n.and_then(|c| c.to_digit(10)) {
                return n as usize;
            }
        }
    }
    panic!("no running node knows the leader of {queue}");
}

/// A channel with confirms on the first node that answers.
pub async fn channel() -> (Connection, lapin::Channel) {
    for url in urls() {
        if let Ok(conn) = Connection::connect(&url, ConnectionProperties::default()).await {
            let ch = conn.create_channel().await.expect("channel");
            ch.confirm_select(ConfirmSelectOptions::default())
                .await
                .expect("confirm_select");
            return (conn, ch);
        }
    }
    panic!("no cluster node answers; start the cluster with: scripts/cluster.sh start");
}

/// Ready messages and consumers of `queue`, or None while it is missing or unreachable.
pub async fn queue_state(conn: &Connection, queue: &str) -> Option<(u32, u32)> {
    let ch = conn.create_channel().await.ok()?;
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    let q = ch
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await
        .ok()?;
    let _ = ch.close(200, "probe".into()).await;
    Some((q.message_count(), q.consumer_count()))
}

/// Publishes `bodies` (persistent, each with its message id) to `exchange`, 500 confirms in
/// flight at a time.
pub async fn publish_all(
    ch: &lapin::Channel,
    exchange: &str,
    key: &str,
    bodies: &[(String, String)],
) {
    for chunk in bodies.chunks(500) {
        let messages = chunk.iter().map(|(id, body)| {
            let props = BasicProperties::default().with_message_id(id.as_str().into());
            (key.to_owned(), body.clone().into_bytes(), props)
        });
        harness::publish_pipelined(ch, exchange, messages).await;
    }
}

/// Starts the binary with `subscription` (TOML of one `[[subscription]]` on the probe, and
/// whatever tables it needs after it) on the cluster's URLs, with exchanges `<p>.*` and an
/// admin endpoint.
pub fn start(p: &str, subscription: &str) -> Host {
    let admin = free_addr();
    let urls = urls()
        .iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let toml = |dir: &Path| {
        format!(
            "[broker]\nurls = [{urls}]\n\n\
             [exchanges]\nmaster = \"{p}.master\"\nretry = \"{p}.retry\"\nfailed = \"{p}.failed\"\n\n\
             [admin]\nlisten = \"{admin}\"\n\n[state]\ndir = \"{state}\"\n\n{subscription}\n",
            state = dir.display()
        )
    };
    let mut host = child_host(toml, &[]);
    host.admin = Some(admin);
    host
}

/// The sum of metric `name` with `labels` of `host`, or None when its admin endpoint is gone.
pub async fn metric_of(host: &Host, name: &str, labels: &str) -> Option<f64> {
    let (_, text) = http_get(host.admin(), "/metrics").await?;
    Some(metric(&text, name, labels))
}
