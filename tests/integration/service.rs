//! Running as a service (issue 7): kill -9 mid-stream, broker restarts, bad plugins, SIGTERM
//! under load, a second signal, a dropped connection and the admin endpoints.
//!
//! Every fault test accounts for each message it published, by the unique index in its body:
//! the plugin republishes every body it answers ok to a collector queue, so at the end
//! `published == handled + still queued` and `lost == 0` are checked index by index, and the
//! figures are printed (`cargo test --test integration service:: -- --nocapture` shows them).
//! Tests named `broker_restart_*` stop and start RabbitMQ: they must run alone
//! (`--skip broker_restart_`, then `broker_restart_ --test-threads=1`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicPublishOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use worker_host::outcome;

use crate::common::{self, Service};

const SCRIPT: &str = include_str!("fixtures/script.wat");
const BIN: &str = env!("CARGO_BIN_EXE_worker-host");

/// One test's private topology, derived from a unique prefix.
struct Names {
    p: String,
}

impl Names {
    fn new(test: &str) -> Names {
        Names {
            p: common::unique(test),
        }
    }
    fn q(&self) -> String {
        format!("{}.q", self.p)
    }
    fn master(&self) -> String {
        format!("{}.master", self.p)
    }
    fn out(&self) -> String {
        format!("{}.out", self.p)
    }
    fn seen(&self) -> String {
        format!("{}.seen", self.p)
    }
    fn failed(&self) -> String {
        format!("{}.q@failed", self.p)
    }
    fn retry(&self) -> String {
        format!("{}.q@retry.30s", self.p)
    }

    /// worker.toml: one subscription on the script plugin (retries wait 30 s, so a retried
    /// message stays countable in its retry queue), a collector queue `seen` behind the fanout
    /// exchange `out`, and `[admin]` when asked.
    fn toml(&self, admin: Option<SocketAddr>, extra: &str) -> String {
        let admin = admin
            .map(|a| format!("[admin]\nlisten = \"{a}\"\n\n"))
            .unwrap_or_default();
        format!(
            "[broker]\nurl = \"{url}\"\n\n{admin}\
             [exchanges]\nmaster = \"{p}.master\"\nretry = \"{p}.retry\"\nfailed = \"{p}.failed\"\n\n\
             [[exchange]]\nname = \"{p}.out\"\ntype = \"fanout\"\n\n\
             [[queue]]\nname = \"{p}.seen\"\nbindings = [{{ exchange = \"{p}.out\", key = \"\" }}]\n\n\
             [[subscription]]\nqueue = \"{p}.q\"\nplugin = \"script.wasm\"\npublish = [\"{p}.out\"]\n\
             retry_delays = [\"30s\"]\n{extra}\n",
            url = common::broker_url(),
            p = self.p,
        )
    }

    async fn cleanup(&self) {
        let queues = [self.q(), self.failed(), self.retry(), self.seen()];
        let exchanges = ["master", "retry", "failed", "out"].map(|e| format!("{}.{e}", self.p));
        common::cleanup(&queues, &exchanges).await;
    }
}

fn script() -> Vec<u8> {
    wat::parse_str(SCRIPT).expect("script.wat parses")
}

/// A config folder: worker.toml and plugins/script.wasm.
fn config_dir(toml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(dir.path().join("plugins")).expect("plugins dir");
    std::fs::write(dir.path().join("plugins/script.wasm"), script()).expect("write plugin");
    std::fs::write(dir.path().join("worker.toml"), toml).expect("write worker.toml");
    dir
}

/// Declares what the config describes, so a whole stream can be queued before a host runs.
async fn declare(dir: &Path) {
    let (config, _) = worker_host::config::Config::load(&dir.join("worker.toml"))
        .unwrap_or_else(|e| panic!("test config is invalid:\n{e}"));
    let conn = common::connect().await;
    worker_host::topology::Plan::from_config(&config)
        .declare(&conn)
        .await
        .expect("declare the topology");
    let _ = conn.close(200, "declared".into()).await;
}

/// Body of message `i`: the script's op byte, then the index.
fn body(op: u8, i: u32) -> Vec<u8> {
    let mut b = vec![op];
    b.extend_from_slice(format!("{i:07}").as_bytes());
    b
}

fn index_of(body: &[u8]) -> u32 {
    std::str::from_utf8(&body[1..])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a test body: {:?}", String::from_utf8_lossy(body)))
}

/// Publishes every body to Q (through master, key Q), pipelined: all sends, then all confirms.
async fn publish_all(conn: &Connection, n: &Names, bodies: impl IntoIterator<Item = Vec<u8>>) {
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(Default::default())
        .await
        .expect("confirms");
    let mut h = FieldTable::default();
    h.insert("pub-exchange".into(), outcome::text(&n.out()));
    let props = BasicProperties::default()
        .with_headers(h)
        .with_delivery_mode(2);
    let mut confirms = Vec::new();
    for body in bodies {
        let confirm = ch
            .basic_publish(
                n.master().as_str().into(),
                n.q().as_str().into(),
                BasicPublishOptions::default(),
                &body,
                props.clone(),
            )
            .await
            .expect("publish");
        confirms.push(confirm);
    }
    for confirm in confirms {
        assert!(
            confirm.await.expect("confirm").is_ack(),
            "broker refused a publish"
        );
    }
    let _ = ch.close(200, "published".into()).await;
}

/// Messages ready in `queue`, on a fresh channel (a failed passive declare kills its channel).
async fn depth(conn: &Connection, queue: &str) -> u32 {
    let ch = conn.create_channel().await.expect("channel");
    let d = common::depth(&ch, queue).await;
    let _ = ch.close(200, "depth".into()).await;
    d
}

/// Takes every message in `queue` (nobody else consumes it) and returns their indexes.
async fn drain(conn: &Connection, queue: &str) -> Vec<u32> {
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
struct Tally {
    published: usize,
    /// Distinct indexes answered: republished to `seen` (ok) or parked in `Q@failed`.
    handled: usize,
    /// Extra copies in `seen`: a message handled more than once.
    duplicates: usize,
    /// Distinct indexes still in Q or its retry queue and never handled.
    still_queued: usize,
    /// Handled, yet also still queued: published but not acked.
    handled_and_queued: usize,
    lost: usize,
}

/// Drains `seen`, `Q@failed`, Q and its retry queue (the host must be stopped) and counts.
async fn tally(conn: &Connection, n: &Names, published: u32) -> Tally {
    let seen = drain(conn, &n.seen()).await;
    let parked = drain(conn, &n.failed()).await;
    let mut queued = drain(conn, &n.q()).await;
    queued.extend(drain(conn, &n.retry()).await);
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
    fn assert_nothing_lost(&self) {
        assert_eq!(self.lost, 0, "{self:?}");
        assert_eq!(self.published, self.handled + self.still_queued, "{self:?}");
    }
}

/// The real binary, logging JSON to a file; killed (SIGKILL) if still running when dropped.
struct Host {
    child: Child,
    log: PathBuf,
}

impl Host {
    fn start(dir: &Path, run: u32) -> Host {
        let log = dir.join(format!("host-{run}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(BIN)
            .args(["--log-format", "json", "run", "-c"])
            .arg(dir.join("worker.toml"))
            .env_remove("WORKER_BROKER_URL")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start worker-host");
        Host { child, log }
    }

    /// Sends a signal by name (TERM, INT, ...) with kill(1).
    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} failed");
    }

    fn kill9(&mut self) {
        self.child.kill().expect("kill -9");
        self.child.wait().expect("reap");
    }

    async fn exit_within(&mut self, timeout: Duration) -> ExitStatus {
        let child = &mut self.child;
        common::eventually(timeout, "worker-host to exit", || {
            let done = child.try_wait().expect("try_wait");
            async move { done }
        })
        .await
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn wait_log(&self, needle: &str, timeout: Duration) {
        common::eventually(timeout, &format!("{needle:?} in the host log"), || {
            let found = self.log().contains(needle);
            async move { found.then_some(()) }
        })
        .await
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() || std::env::var_os("WORKER_TEST_HOST_LOGS").is_some() {
            eprintln!(
                "---- worker-host log {} ----\n{}",
                self.log.display(),
                self.log()
            );
        }
    }
}

/// Waits until `queue` holds at least `at_least` messages; returns how many.
async fn wait_depth(conn: &Connection, queue: &str, at_least: u32, timeout: Duration) -> u32 {
    common::eventually(
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
async fn wait_all_taken(conn: &Connection, n: &Names, total: u32, timeout: Duration) {
    common::eventually(timeout, "every message taken", || async {
        let done = depth(conn, &n.q()).await == 0 && depth(conn, &n.seen()).await >= total;
        done.then_some(())
    })
    .await
}

/// A free local port: bind port 0, note it, let it go.
fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("local addr")
}

/// GET over a plain TCP stream: (status, body), or None when nothing answers.
async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let (_, body) = text.split_once("\r\n\r\n")?;
    Some((status, body.to_string()))
}

async fn wait_status(addr: SocketAddr, path: &str, status: u16, timeout: Duration) {
    common::eventually(
        timeout,
        &format!("GET {path} answering {status}"),
        || async { (http_get(addr, path).await?.0 == status).then_some(()) },
    )
    .await
}

async fn rabbitmqctl(args: &[&str]) -> String {
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
struct BrokerDown {
    up: bool,
}

impl BrokerDown {
    async fn stop() -> BrokerDown {
        rabbitmqctl(&["stop_app"]).await;
        BrokerDown { up: false }
    }

    async fn start(mut self) {
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

const N: u32 = 5000;
/// The subscription settings of the load tests.
const LOAD: &str = "prefetch = 16\nconcurrency = 4\nmax_retries = 0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_stream_handles_every_message_at_least_once() {
    let n = Names::new("kill9");
    let dir = config_dir(&n.toml(None, LOAD));
    declare(dir.path()).await;
    let conn = common::connect().await;
    publish_all(&conn, &n, (0..N).map(|i| body(b'o', i))).await;

    let mut host = Host::start(dir.path(), 1);
    let before = wait_depth(&conn, &n.seen(), N / 5, Duration::from_secs(120)).await;
    host.kill9();
    let at_kill = depth(&conn, &n.seen()).await;
    assert!(
        at_kill < N,
        "the kill came after the stream ended ({at_kill} handled)"
    );

    let mut host = Host::start(dir.path(), 2);
    wait_all_taken(&conn, &n, N, Duration::from_secs(180)).await;
    host.signal("TERM");
    assert!(host.exit_within(Duration::from_secs(30)).await.success());

    let t = tally(&conn, &n, N).await;
    println!(
        "FIGURES kill -9 after ~{before}..{at_kill} of {N} handled: {t:?} (prefetch 16, concurrency 4)"
    );
    t.assert_nothing_lost();
    assert_eq!(
        t.still_queued, 0,
        "every message handled at least once: {t:?}"
    );
    // Only messages handled but not yet acked when the process died come back: at most the
    // prefetch window.
    assert!(t.duplicates <= 16, "{t:?}");
    n.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_drains_acks_once_and_exits_0() {
    // Message 0 loops until its timeout: it is in flight when SIGTERM comes, so the drain must
    // wait for it, then park it (confirmed) and ack it.
    const SLOW: Duration = Duration::from_secs(10);
    let n = Names::new("sigterm");
    let extra = format!("{LOAD}\ntimeout = \"{}s\"", SLOW.as_secs());
    let dir = config_dir(&n.toml(None, &extra));
    declare(dir.path()).await;
    let conn = common::connect().await;

    let mut host = Host::start(dir.path(), 1);
    common::wait_consuming(&conn, &n.q()).await;
    publish_all(&conn, &n, [body(b'l', 0)]).await;
    common::eventually(Duration::from_secs(20), "the loop in flight", || async {
        (depth(&conn, &n.q()).await == 0).then_some(())
    })
    .await;
    let looping = Instant::now();
    publish_all(&conn, &n, (1..N).map(|i| body(b'o', i))).await;
    wait_depth(&conn, &n.seen(), N / 5, Duration::from_secs(120)).await;
    let signalled = Instant::now();
    host.signal("TERM");
    assert!(
        looping.elapsed() < SLOW,
        "too slow for this test: the loop ended before SIGTERM"
    );
    let status = host.exit_within(Duration::from_secs(30)).await;
    let took = signalled.elapsed();
    assert_eq!(status.code(), Some(0), "exit status {status:?}");
    let parked = depth(&conn, &n.failed()).await;
    assert_eq!(
        parked, 1,
        "the call in flight was finished, parked and acked"
    );

    let t = tally(&conn, &n, N).await;
    println!(
        "FIGURES SIGTERM under load (a {SLOW:?} call in flight): exit 0 after {took:?}; {t:?}"
    );
    t.assert_nothing_lost();
    assert_eq!(t.duplicates, 0, "a drain must not cause duplicates: {t:?}");
    assert_eq!(t.handled_and_queued, 0, "published but not acked: {t:?}");
    let log = host.log();
    for bad in [
        "unknown delivery tag",
        "ack failed",
        "PRECONDITION_FAILED",
        "not acked",
    ] {
        assert!(!log.contains(bad), "{bad:?} in the log:\n{log}");
    }
    assert!(log.contains("drained"), "the drain is logged:\n{log}");
    for line in log.lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("--log-format json wrote a non-JSON line ({e}): {line}"));
        assert!(
            v.get("level").is_some() && v.get("fields").is_some(),
            "{line}"
        );
    }
    n.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_exits_at_once_and_loses_nothing() {
    let n = Names::new("twosig");
    let dir = config_dir(&n.toml(None, "timeout = \"60s\"\nmax_retries = 0"));
    declare(dir.path()).await;
    let conn = common::connect().await;
    let mut host = Host::start(dir.path(), 1);
    common::wait_consuming(&conn, &n.q()).await;
    // An endless loop: the drain would wait for its 60 s timeout.
    publish_all(&conn, &n, [body(b'l', 0)]).await;
    common::eventually(Duration::from_secs(20), "the loop in flight", || async {
        (depth(&conn, &n.q()).await == 0).then_some(())
    })
    .await;
    host.signal("TERM");
    host.wait_log("signal received", Duration::from_secs(10))
        .await;
    let second = Instant::now();
    host.signal("INT");
    let status = host.exit_within(Duration::from_secs(10)).await;
    println!(
        "FIGURES second signal: exit {:?} after {:?}",
        status.code(),
        second.elapsed()
    );
    assert_eq!(status.code(), Some(130));
    // The unfinished message goes back to its queue.
    wait_depth(&conn, &n.q(), 1, Duration::from_secs(10)).await;
    let t = tally(&conn, &n, 1).await;
    assert_eq!((t.lost, t.still_queued), (0, 1), "{t:?}");
    n.cleanup().await;
}

/// Every 10th message traps, bombs memory or loops; the rest must keep flowing. Runs a clean
/// stream and one poisoned stream per kind, and reports the throughput of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_messages_do_not_stop_the_others() {
    const M: u32 = 2000;
    let extra = "prefetch = 16\nconcurrency = 4\nmax_retries = 0\ntimeout = \"250ms\"\nmemory_limit = \"2MiB\"";
    let mut rates = Vec::new();
    for (kind, bad_op) in [
        ("clean", None),
        ("trap", Some(b't')),
        ("memory-bomb", Some(b'm')),
        ("loop", Some(b'l')),
    ] {
        let n = Names::new(kind);
        let dir = config_dir(&n.toml(None, extra));
        declare(dir.path()).await;
        let conn = common::connect().await;
        let op = |i: u32| match bad_op {
            Some(bad) if i % 10 == 9 => bad,
            _ => b'o',
        };
        publish_all(&conn, &n, (0..M).map(|i| body(op(i), i))).await;
        let bad = (0..M).filter(|i| op(*i) != b'o').count() as u32;

        let mut host = Host::start(dir.path(), 1);
        let done = |at_least: u32| {
            let conn = &conn;
            let n = &n;
            async move {
                let d = depth(conn, &n.seen()).await + depth(conn, &n.failed()).await;
                (d >= at_least).then_some((d, Instant::now()))
            }
        };
        let (first, t0) =
            common::eventually(Duration::from_secs(60), "the first answer", || done(1)).await;
        let (_, t1) =
            common::eventually(Duration::from_secs(180), "every answer", || done(M)).await;
        host.signal("TERM");
        assert!(host.exit_within(Duration::from_secs(30)).await.success());
        let secs = (t1 - t0).as_secs_f64();
        let rate = f64::from(M - first) / secs;
        let good_rate = f64::from(M - bad) / secs;

        let t = tally(&conn, &n, M).await;
        let parked = t.handled - (M - bad) as usize;
        println!(
            "FIGURES bad messages, {kind}: {M} messages, {bad} bad, in {secs:.2} s: {rate:.0} msg/s, \
             {good_rate:.0} good msg/s; parked {parked}; {t:?}"
        );
        t.assert_nothing_lost();
        assert_eq!(t.duplicates, 0, "{t:?}");
        assert_eq!(t.still_queued, 0, "{t:?}");
        assert_eq!(parked as u32, bad, "every bad message parked: {t:?}");
        let log = host.log();
        assert!(!log.contains("panicked"), "the host panicked:\n{log}");
        rates.push(format!("{kind} {good_rate:.0}"));
        n.cleanup().await;
    }
    println!(
        "FIGURES good messages per second (timeout 250ms, memory_limit 2MiB, concurrency 4): {}",
        rates.join(", ")
    );
}

#[tokio::test]
async fn admin_endpoints_report_health_readiness_and_metrics() {
    // Before any connection: alive, not ready.
    let n = Names::new("admin");
    let addr = free_addr();
    let unreachable = n
        .toml(Some(addr), "")
        .replace(&common::broker_url(), "amqp://guest:guest@127.0.0.1:1/%2f");
    let svc = Service::start(&unreachable, &[("script.wasm", &script())]).await;
    wait_status(addr, "/healthz", 200, Duration::from_secs(20)).await;
    let (status, _) = http_get(addr, "/readyz").await.expect("readyz answers");
    assert_eq!(status, 503, "not ready before the broker answers");
    let (_, metrics) = http_get(addr, "/metrics").await.expect("metrics answer");
    assert!(metrics.contains("worker_broker_connected 0"), "{metrics}");
    svc.stop().await;

    // Connected and consuming: ready; every family shows up once messages flow.
    let addr = free_addr();
    let svc = Service::start(
        &n.toml(Some(addr), "max_retries = 1"),
        &[("script.wasm", &script())],
    )
    .await;
    wait_status(addr, "/readyz", 200, Duration::from_secs(20)).await;
    let conn = common::connect().await;
    publish_all(&conn, &n, [body(b'o', 0), body(b'f', 1), body(b'r', 2)]).await;
    wait_depth(&conn, &n.retry(), 1, Duration::from_secs(20)).await;
    wait_depth(&conn, &n.failed(), 1, Duration::from_secs(20)).await;
    wait_depth(&conn, &n.seen(), 1, Duration::from_secs(20)).await;
    let (status, metrics) = http_get(addr, "/metrics").await.expect("metrics answer");
    assert_eq!(status, 200);
    let q = n.q();
    for family in [
        format!("worker_messages_total{{queue=\"{q}\",outcome=\"ok\"}} 1"),
        format!("worker_messages_total{{queue=\"{q}\",outcome=\"fail\"}} 1"),
        format!("worker_messages_total{{queue=\"{q}\",outcome=\"retry\"}} 1"),
        format!("worker_retries_total{{queue=\"{q}\"}} 1"),
        format!("worker_failed_total{{queue=\"{q}\"}} 1"),
        format!("worker_handler_duration_seconds_count{{queue=\"{q}\"}} 3"),
        "worker_handler_duration_seconds_bucket{le=".to_string(),
        format!("worker_in_flight{{queue=\"{q}\"}} 0"),
        "# TYPE worker_plugin_reloads counter".to_string(),
        "# TYPE worker_handler_duration_seconds histogram".to_string(),
        "worker_plugin_reloads_total{result=\"ok\"}".to_string(),
        "worker_broker_connected 1".to_string(),
        "worker_plugin_info{plugin=\"script.wasm\",sha256=\"".to_string(),
    ] {
        assert!(
            metrics.contains(&family),
            "{family:?} missing from:\n{metrics}"
        );
    }
    svc.stop().await;
    n.cleanup().await;
}

/// `[broker] urls` lists cluster nodes: one that does not answer is skipped for the next.
#[tokio::test]
async fn several_broker_urls_are_tried_in_turn() {
    let n = Names::new("urls");
    let url = common::broker_url();
    let toml = n.toml(None, "").replace(
        &format!("url = \"{url}\""),
        &format!("urls = [\"amqp://guest:guest@127.0.0.1:1/%2f\", \"{url}\"]"),
    );
    assert!(toml.contains("urls = ["), "{toml}");
    let svc = Service::start(&toml, &[("script.wasm", &script())]).await;
    let conn = common::connect().await;
    common::wait_consuming(&conn, &n.q()).await;
    publish_all(&conn, &n, [body(b'o', 0)]).await;
    wait_depth(&conn, &n.seen(), 1, Duration::from_secs(20)).await;
    svc.stop().await;
    let t = tally(&conn, &n, 1).await;
    t.assert_nothing_lost();
    assert_eq!(t.still_queued, 0, "{t:?}");
    n.cleanup().await;
}

/// The broker drops the host's connection (as on a node failover) while a slow call is in
/// flight: the host is not ready at once (not only when the call ends), reconnects, consumes
/// again, and the interrupted message comes back. Closes only this host's connection, so it
/// runs alongside other tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_is_noticed_and_consuming_resumes() {
    const SLOW: Duration = Duration::from_secs(10);
    let n = Names::new("dropped");
    let addr = free_addr();
    let extra = format!(
        "concurrency = 2\nmax_retries = 0\ntimeout = \"{}s\"",
        SLOW.as_secs()
    );
    let svc = Service::start(&n.toml(Some(addr), &extra), &[("script.wasm", &script())]).await;
    let conn = common::connect().await;
    wait_status(addr, "/readyz", 200, Duration::from_secs(20)).await;
    publish_all(&conn, &n, [body(b'o', 0)]).await;
    wait_depth(&conn, &n.seen(), 1, Duration::from_secs(20)).await;

    // The host's connection is named after its config file, which is unique to this test.
    let marker = svc.dir.path().to_string_lossy().into_owned();
    let listed = rabbitmqctl(&["list_connections", "pid", "client_properties", "-q"]).await;
    let pid = listed
        .lines()
        .find(|l| l.contains(&marker))
        .and_then(|l| l.split('\t').next())
        .unwrap_or_else(|| panic!("no connection named after {marker} in:\n{listed}"))
        .to_string();
    // An endless loop, cut by the timeout: in flight when the connection goes.
    publish_all(&conn, &n, [body(b'l', 1)]).await;
    common::eventually(Duration::from_secs(20), "the loop in flight", || async {
        (depth(&conn, &n.q()).await == 0).then_some(())
    })
    .await;
    let looping = Instant::now();
    rabbitmqctl(&["close_connection", &pid, "test: dropped on purpose"]).await;
    let closed = Instant::now();
    assert!(
        looping.elapsed() < SLOW / 2,
        "closing took too long for this test"
    );
    wait_status(addr, "/readyz", 503, SLOW / 2).await;
    let noticed = closed.elapsed();
    wait_status(addr, "/readyz", 200, Duration::from_secs(20)).await;
    let resumed = closed.elapsed();
    assert!(
        looping.elapsed() < SLOW,
        "ready again only after the in-flight call ended ({resumed:?} after the close)"
    );
    common::eventually(
        Duration::from_secs(30),
        "a new connection from the host",
        || async {
            let listed = rabbitmqctl(&["list_connections", "pid", "client_properties", "-q"]).await;
            let back = listed
                .lines()
                .any(|l| l.contains(&marker) && !l.starts_with(&pid));
            back.then_some(())
        },
    )
    .await;
    publish_all(&conn, &n, [body(b'o', 2)]).await;
    wait_depth(&conn, &n.seen(), 2, Duration::from_secs(20)).await;
    // The loop's first result died with its channel; redelivered, it times out again and is
    // parked (max_retries = 0).
    wait_depth(&conn, &n.failed(), 1, SLOW * 3).await;
    println!(
        "FIGURES dropped connection with a {SLOW:?} call in flight: not ready after {noticed:?}, \
         ready again after {resumed:?}"
    );
    svc.stop().await;
    let t = tally(&conn, &n, 3).await;
    t.assert_nothing_lost();
    assert_eq!(t.still_queued, 0, "{t:?}");
    assert_eq!(t.duplicates, 0, "{t:?}");
    n.cleanup().await;
}

/// RabbitMQ stops in the middle of a stream and comes back: the host notices (not ready),
/// reconnects by itself, redeclares, resumes; nothing is lost. Stops the broker: run alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_restart_mid_stream_loses_nothing() {
    let n = Names::new("restart");
    let addr = free_addr();
    let dir = config_dir(&n.toml(Some(addr), LOAD));
    declare(dir.path()).await;
    let conn = common::connect().await;
    let half = N / 2;
    publish_all(&conn, &n, (0..half).map(|i| body(b'o', i))).await;

    let mut host = Host::start(dir.path(), 1);
    wait_status(addr, "/readyz", 200, Duration::from_secs(60)).await;
    let before = wait_depth(&conn, &n.seen(), half / 5, Duration::from_secs(120)).await;
    drop(conn);

    let broker = BrokerDown::stop().await;
    let stopped = Instant::now();
    wait_status(addr, "/readyz", 503, Duration::from_secs(30)).await;
    let noticed = stopped.elapsed();
    let (_, metrics) = http_get(addr, "/metrics").await.expect("metrics answer");
    assert!(metrics.contains("worker_broker_connected 0"), "{metrics}");
    broker.start().await;
    let up = Instant::now();
    let down_for = stopped.elapsed();
    wait_status(addr, "/readyz", 200, Duration::from_secs(60)).await;
    let recovered = up.elapsed();

    // The second half of the stream arrives after the restart.
    let conn = common::connect().await;
    publish_all(&conn, &n, (half..N).map(|i| body(b'o', i))).await;
    wait_all_taken(&conn, &n, N, Duration::from_secs(180)).await;
    host.signal("TERM");
    assert!(host.exit_within(Duration::from_secs(30)).await.success());

    let t = tally(&conn, &n, N).await;
    println!(
        "FIGURES broker restart after {before} of {half} handled: noticed in {noticed:?}, \
         broker down {down_for:?} (stop_app .. start_app done), ready again {recovered:?} after the \
         broker was up; {t:?}"
    );
    t.assert_nothing_lost();
    assert_eq!(t.still_queued, 0, "{t:?}");
    n.cleanup().await;
}
