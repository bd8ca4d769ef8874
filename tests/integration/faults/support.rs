//! Helpers of the broker-fault tests: names and config, publishing with a per-message target,
//! reading parked messages, metrics and RSS, and guards that restore broker-wide settings.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use lapin::Connection;

use crate::harness::{self, Names};
pub use crate::service::support::publish_to;
use crate::service::support::{SCRIPT, depth, rabbitmqctl};

/// Indexes of `retry_then_ok` bodies start here.
pub const RETRY_THEN_OK: u32 = 2_000_000;

/// A body the script plugin retries once, then answers ok; its index is
/// `RETRY_THEN_OK + i`.
pub fn retry_then_ok(i: u32) -> Vec<u8> {
    format!("r2{i:06}").into_bytes()
}

pub fn script() -> Vec<u8> {
    wat::parse_str(SCRIPT).expect("script.wat parses")
}

/// One test's private topology (the harness's [`Names`]: Q, Q2, `master`, `out`, `seen`,
/// `Q@failed`, retry queues of any delay) and a config with any broker URL.
pub struct Faults(Names);

impl std::ops::Deref for Faults {
    type Target = Names;
    fn deref(&self) -> &Names {
        &self.0
    }
}

impl Faults {
    pub fn new(test: &str) -> Faults {
        Faults(Names::new(test))
    }
    /// worker.toml with broker `url`; `extra` lines go into Q's subscription (a second
    /// `[[subscription]]` may follow them).
    pub fn toml(&self, url: &str, admin: Option<SocketAddr>, extra: &str) -> String {
        let admin = admin
            .map(|a| format!("[admin]\nlisten = \"{a}\"\n\n"))
            .unwrap_or_default();
        let publish = if extra.contains("publish =") {
            String::new()
        } else {
            format!("publish = [\"{}.out\"]\n", self.p)
        };
        format!(
            "[broker]\nurl = \"{url}\"\n\n{admin}{exchanges}{out}\
             [[subscription]]\nqueue = \"{p}.q\"\nplugin = \"script.wasm\"\n{publish}{extra}\n",
            exchanges = self.exchanges_toml(),
            out = self.out_toml("fanout"),
            p = self.p,
        )
    }

    /// A second subscription, Q2, publishing to `out`.
    pub fn second_subscription(&self) -> String {
        format!(
            "[[subscription]]\nqueue = \"{p}.q2\"\nplugin = \"script.wasm\"\npublish = [\"{p}.out\"]\n",
            p = self.p
        )
    }

    /// A config folder for the real binary: worker.toml and plugins/script.wasm.
    pub fn config_dir(&self, toml: &str) -> tempfile::TempDir {
        crate::service::support::config_dir(toml)
    }

    pub async fn cleanup(&self) {
        self.0.cleanup(&[self.q(), self.q2()]).await;
        harness::cleanup(&[], &[format!("{}.nowhere", self.p)]).await;
    }
}

/// Takes every message of a failed queue: (index, headers as text).
pub async fn drain_parked(conn: &Connection, queue: &str) -> Vec<(u32, BTreeMap<String, String>)> {
    let expected = depth(conn, queue).await;
    let ch = conn.create_channel().await.expect("channel");
    let mut out = Vec::new();
    for _ in 0..expected {
        let msg = harness::get(&ch, queue).await.expect("a parked message");
        out.push((index(&msg.delivery.data), harness::headers_of(&msg)));
    }
    let _ = ch.close(200, "drained".into()).await;
    out
}

/// The index in a test body: the digits after the op byte (a large body is padded after them).
pub fn index(body: &[u8]) -> u32 {
    let digits: String = body[1..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .map(|&b| char::from(b))
        .collect();
    digits.parse().unwrap_or_else(|_| {
        panic!(
            "not a test body: {:?}",
            String::from_utf8_lossy(&body[..body.len().min(16)])
        )
    })
}

/// Waits until `queue` exists and holds at least `at_least` messages.
pub async fn wait_count(conn: &Connection, queue: &str, at_least: u32, timeout: Duration) -> u32 {
    harness::eventually(
        timeout,
        &format!("{at_least} messages in {queue}"),
        || async {
            let d = harness::probe(conn, queue).await?.message_count();
            (d >= at_least).then_some(d)
        },
    )
    .await
}

/// The value of the Prometheus sample `name{...}` whose labels contain `labels` (0 if absent).
pub fn metric(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.split([' ', '{']).next() == Some(name) && (labels.is_empty() || l.contains(labels))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A field of /proc/<pid>/status in KiB (VmRSS, VmHWM).
pub fn rss_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// RabbitMQ's consumer timeout lowered for new channels; the old value comes back when dropped.
pub struct ConsumerTimeout {
    previous: String,
}

impl ConsumerTimeout {
    pub async fn set(timeout: Duration) -> ConsumerTimeout {
        let previous = rabbitmqctl(&["eval", "application:get_env(rabbit, consumer_timeout)."])
            .await
            .trim()
            .to_string();
        let set = format!(
            "application:set_env(rabbit, consumer_timeout, {}).",
            timeout.as_millis()
        );
        rabbitmqctl(&["eval", &set]).await;
        ConsumerTimeout { previous }
    }
}

impl Drop for ConsumerTimeout {
    fn drop(&mut self) {
        let restore = match self
            .previous
            .strip_prefix("{ok,")
            .and_then(|v| v.strip_suffix('}'))
        {
            Some(value) => format!("application:set_env(rabbit, consumer_timeout, {value})."),
            None => "application:unset_env(rabbit, consumer_timeout).".to_string(),
        };
        let _ = Command::new("rabbitmqctl")
            .args(["eval", &restore])
            .status();
    }
}

/// A memory alarm raised on the node (publishers are blocked), cleared when dropped.
pub struct MemoryAlarm {
    cleared: bool,
}

const ALARM: &str = "{resource_limit, memory, node()}";

impl MemoryAlarm {
    pub async fn raise() -> MemoryAlarm {
        rabbitmqctl(&["eval", &format!("rabbit_alarm:set_alarm({{{ALARM}, []}}).")]).await;
        MemoryAlarm { cleared: false }
    }

    pub async fn clear(mut self) {
        rabbitmqctl(&["eval", &format!("rabbit_alarm:clear_alarm({ALARM}).")]).await;
        self.cleared = true;
    }
}

impl Drop for MemoryAlarm {
    fn drop(&mut self) {
        if !self.cleared {
            let _ = Command::new("rabbitmqctl")
                .args(["eval", &format!("rabbit_alarm:clear_alarm({ALARM}).")])
                .status();
        }
    }
}

/// Waits up to a minute for a consumer on `queue` (a host starting as a child process, on a
/// machine busy with other tests).
pub async fn wait_consuming_long(conn: &Connection, queue: &str) {
    harness::eventually(
        Duration::from_secs(60),
        &format!("a consumer on {queue}"),
        || async {
            harness::probe(conn, queue)
                .await
                .filter(|q| q.consumer_count() > 0)
        },
    )
    .await;
}
