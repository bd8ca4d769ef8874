//! End-to-end throughput against the local broker, every figure from the same run:
//! (a) the fastest bare lapin consumer (task per delivery on a multi-thread runtime, or a
//!     current-thread runtime: the faster counts), manual acks, doing nothing;
//! (a') the same, republishing each message with a confirm before the ack;
//! (b) worker-host (the release binary, a separate process) with a plugin that answers ok;
//! (c) worker-host with every message retried once, then ok;
//! (d) worker-host with an SDK plugin (user_monitor.wasm) parsing a 1 KiB JSON body;
//! (a+), for reference only (not the denominator): a bare consumer acking with `multiple=true`,
//!     the trick worker-host itself uses;
//! (k) the time one capability call adds per message: kv get+set (embedded, Redis), one SQL
//!     insert (SQLite, PostgreSQL), against the same component doing nothing (`caps.rs`).
//! Prints msgs/s, the ratio of each to (a), the host's peak RSS, and its RSS with 8 idle
//! subscriptions.
//!
//! `cargo bench -p worker-host --bench throughput -- [--messages N] [--runs R] [--only aAbcdik]`
//! (`WORKER_BENCH_PERF`: see `start_perf`)
//! (scripts/bench.sh builds the binary and plugins first). Run with a quiet machine; only the
//! ratios within one run are meaningful.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

#[path = "throughput/caps.rs"]
mod caps;

const URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const PREFETCH: u16 = 100;
const OK_WAT: &str = r#"(module (memory (export "memory") 1)
  (func (export "worker_abi_v1")) (func (export "worker_handle") (result i32) i32.const 0))"#;
/// Retry on the first call, ok on the second (reads meta "attempt").
const RETRY_ONCE_WAT: &str = r#"(module
  (import "worker_v1" "meta_get" (func $meta_get (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "attempt")
  (func (export "worker_abi_v1"))
  (func (export "worker_handle") (result i32)
    (drop (call $meta_get (i32.const 0) (i32.const 7) (i32.const 64) (i32.const 8)))
    (if (result i32) (i32.eq (i32.load8_u (i32.const 64)) (i32.const 49))
      (then (i32.const 1)) (else (i32.const 0)))))"#;

struct Args {
    messages: u64,
    runs: usize,
    /// Scenarios to run: letters of `aAbcdik` (`A`: a' and the batched-ack bare consumer; `i`: idle
    /// RSS; `k`: capability costs).
    only: String,
}

fn args() -> Args {
    let mut a = Args {
        messages: 20_000,
        runs: 3,
        only: "aAbcdik".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--messages" => {
                a.messages = it.next().and_then(|v| v.parse().ok()).unwrap_or(a.messages)
            }
            "--runs" => a.runs = it.next().and_then(|v| v.parse().ok()).unwrap_or(a.runs),
            "--only" => a.only = it.next().unwrap_or(a.only),
            _ => {} // cargo bench passes --bench
        }
    }
    a
}

fn main() {
    let args = args();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(bench(args));
}

async fn connect() -> Connection {
    Connection::connect(URL, ConnectionProperties::default())
        .await
        .unwrap_or_else(|e| {
            panic!("RabbitMQ not reachable at {URL}: {e}\nstart it with: rabbitmq-server -detached")
        })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

async fn bench(args: Args) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let host_bin = root.join("target/release/worker-host");
    assert!(
        host_bin.exists(),
        "{} is missing: cargo build --release -p worker-host (scripts/bench.sh does it)",
        host_bin.display()
    );
    let user_monitor = root.join("plugins/user_monitor.wasm");
    let n = args.messages;
    println!(
        "messages per run: {n}, persistent, 256 B bodies (1 KiB JSON for d), prefetch {PREFETCH}, median of {} runs",
        args.runs
    );

    let body = vec![b'x'; 256];
    let json = json_body();
    let on = |c: char| args.only.contains(c);
    let (mut a_mt, mut a_ct, mut a_rep, mut a_multi) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut b, mut c, mut d) = (Vec::new(), Vec::new(), Vec::new());
    let mut peak_rss = 0u64;
    for run in 0..args.runs {
        if on('a') {
            a_mt.push(bare(n, &body, Bare::TaskPerDelivery).await);
            a_ct.push(bare(n, &body, Bare::CurrentThread).await);
        }
        if on('A') {
            a_rep.push(bare(n, &body, Bare::Republish).await);
            a_multi.push(bare(n, &body, Bare::BatchedAcks).await);
        }
        for (letter, out, plugin, payload) in [
            ('b', &mut b, Plugin::Wat(OK_WAT), &body),
            ('c', &mut c, Plugin::Wat(RETRY_ONCE_WAT), &body),
            ('d', &mut d, Plugin::File(&user_monitor), &json),
        ] {
            if on(letter) {
                let (rate, rss) = host(&host_bin, plugin, n, payload, letter).await;
                out.push(rate);
                peak_rss = peak_rss.max(rss);
            }
        }
        eprintln!("run {} done", run + 1);
    }
    let med = |v: &Vec<f64>| {
        if v.is_empty() {
            f64::NAN
        } else {
            median(v.clone())
        }
    };
    let a = med(&a_mt).max(med(&a_ct));
    println!();
    println!("{:<62} {:>10} {:>8}", "scenario", "msgs/s", "vs (a)");
    let row = |name: &str, v: f64| {
        if !v.is_nan() {
            println!("{name:<62} {v:>10.0} {:>8.2}", v / a)
        }
    };
    row(
        "(a)  bare lapin, task per delivery, multi-thread",
        med(&a_mt),
    );
    row("(a)  bare lapin, current-thread runtime", med(&a_ct));
    row(
        "(a') bare lapin, republish + confirm, then ack",
        med(&a_rep),
    );
    row(
        "(a+) bare lapin, batched acks (multiple=true), for reference",
        med(&a_multi),
    );
    row("(b)  worker-host, ok plugin (WAT)", med(&b));
    row("(c)  worker-host, retried once then ok", med(&c));
    row("(d)  worker-host, SDK plugin parsing 1 KiB JSON", med(&d));
    if !c.is_empty() && !a_rep.is_empty() {
        println!("(c) / (a') = {:.2}", med(&c) / med(&a_rep));
    }
    if peak_rss > 0 {
        println!(
            "worker-host peak RSS under load: {:.1} MiB",
            peak_rss as f64 / 1048576.0
        );
    }
    if on('i') {
        let idle = idle_rss(&host_bin, 8).await;
        println!(
            "worker-host RSS with 8 idle subscriptions: {:.1} MiB",
            idle as f64 / 1048576.0
        );
    }
    if on('k') {
        let probe = root.join("plugins/cap_probe.wasm");
        caps::bench(&host_bin, &probe, n.min(5_000), args.runs).await;
    }
}

fn json_body() -> Vec<u8> {
    let mut s = String::from("{\"id\": 12345, \"name\": \"ada lovelace\", \"tags\": [");
    let mut i = 0;
    while s.len() < 1000 {
        s.push_str(&format!("\"tag-{i}\","));
        i += 1;
    }
    s.push_str("\"end\"]}");
    s.into_bytes()
}

fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Fills `queue` (default exchange) with `n` persistent messages, confirms pipelined.
async fn fill(ch: &Channel, queue: &str, n: u64, body: &[u8]) {
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    let props = BasicProperties::default().with_delivery_mode(2);
    let mut pending = Vec::with_capacity(1000);
    for _ in 0..n {
        let c = ch
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                body,
                props.clone(),
            )
            .await
            .expect("publish");
        pending.push(c);
        if pending.len() == 1000 {
            for c in pending.drain(..) {
                c.await.expect("confirm");
            }
        }
    }
    for c in pending {
        c.await.expect("confirm");
    }
}

async fn declare(ch: &Channel, queue: &str) {
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("declare");
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Bare {
    /// (a): a task per delivery on the multi-thread runtime, each acking its own delivery.
    TaskPerDelivery,
    /// (a): the same loop on a current-thread runtime.
    CurrentThread,
    /// (a'): a task per delivery that republishes with a confirm, then acks.
    Republish,
    /// For reference only: no tasks, one `multiple=true` ack whenever the stream has nothing
    /// ready (or every half prefetch).
    BatchedAcks,
}

/// (a), (a') and (a+): a bare consumer of a pre-filled queue; msgs/s from first delivery to last ack.
async fn bare(n: u64, body: &[u8], kind: Bare) -> f64 {
    use futures_util::FutureExt as _;
    let republish = kind == Bare::Republish;
    let queue = unique("bench-bare");
    let conn = connect().await;
    let ch = conn.create_channel().await.expect("channel");
    declare(&ch, &queue).await;
    let sink = format!("{queue}.sink");
    if republish {
        declare(&ch, &sink).await;
    }
    fill(&ch, &queue, n, body).await;
    let q = queue.clone();
    let s = sink.clone();
    let consume = async move {
        let conn = connect().await;
        let ch = conn.create_channel().await.expect("channel");
        ch.basic_qos(PREFETCH, BasicQosOptions::default())
            .await
            .expect("qos");
        let publisher = conn.create_channel().await.expect("channel");
        publisher
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirms");
        let mut consumer = ch
            .basic_consume(
                q.as_str().into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("consume");
        let done = Arc::new(AtomicU64::new(0));
        let all = Arc::new(tokio::sync::Notify::new());
        let mut started = None;
        let mut taken = 0;
        if kind == Bare::BatchedAcks {
            let (mut last, mut unacked) = (0u64, 0u16);
            while taken < n {
                let next = match consumer.next().now_or_never() {
                    Some(next) => next,
                    None => {
                        if unacked > 0 {
                            ch.basic_ack(last, BasicAckOptions { multiple: true })
                                .await
                                .expect("ack");
                            unacked = 0;
                        }
                        consumer.next().await
                    }
                };
                let Some(Ok(delivery)) = next else { break };
                started.get_or_insert_with(Instant::now);
                taken += 1;
                last = delivery.delivery_tag;
                unacked += 1;
                if unacked >= PREFETCH / 2 {
                    ch.basic_ack(last, BasicAckOptions { multiple: true })
                        .await
                        .expect("ack");
                    unacked = 0;
                }
            }
            if unacked > 0 {
                ch.basic_ack(last, BasicAckOptions { multiple: true })
                    .await
                    .expect("ack");
            }
            done.store(n, Ordering::Release);
            all.notify_one();
        }
        while taken < n {
            let Some(Ok(delivery)) = consumer.next().await else {
                break;
            };
            started.get_or_insert_with(Instant::now);
            taken += 1;
            let (done, all, publisher, s) =
                (done.clone(), all.clone(), publisher.clone(), s.clone());
            tokio::spawn(async move {
                if republish {
                    publisher
                        .basic_publish(
                            "".into(),
                            s.as_str().into(),
                            BasicPublishOptions::default(),
                            &delivery.data,
                            delivery.properties.clone(),
                        )
                        .await
                        .expect("publish")
                        .await
                        .expect("confirm");
                }
                delivery.ack(BasicAckOptions::default()).await.expect("ack");
                if done.fetch_add(1, Ordering::AcqRel) + 1 == n {
                    all.notify_one();
                }
            });
        }
        all.notified().await;
        let secs = started
            .map(|s| s.elapsed().as_secs_f64())
            .unwrap_or(f64::NAN);
        let _ = conn.close(200, "bye".into()).await;
        n as f64 / secs
    };
    let rate = if kind == Bare::CurrentThread {
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(consume)
        })
        .join()
        .expect("bench thread")
    } else {
        tokio::spawn(consume).await.expect("bench task")
    };
    let _ = ch
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await;
    let _ = ch
        .queue_delete(sink.as_str().into(), QueueDeleteOptions::default())
        .await;
    let _ = conn.close(200, "bye".into()).await;
    rate
}

enum Plugin<'a> {
    Wat(&'a str),
    File(&'a Path),
}

struct Host {
    child: Child,
    dir: PathBuf,
    admin: String,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// worker.toml lines a scenario adds: top-level tables, and lines of each subscription.
#[derive(Default)]
struct Extra {
    sections: String,
    subscription: String,
}

fn start_host(bin: &Path, plugin: &Plugin<'_>, queues: &[String], prefix: &str) -> Host {
    start_host_with(bin, plugin, queues, prefix, &Extra::default())
}

fn start_host_with(
    bin: &Path,
    plugin: &Plugin<'_>,
    queues: &[String],
    prefix: &str,
    extra: &Extra,
) -> Host {
    let dir = std::env::temp_dir().join(unique("bench-host"));
    std::fs::create_dir_all(dir.join("plugins")).expect("dir");
    let bytes = match plugin {
        Plugin::Wat(text) => wat::parse_str(text).expect("wat"),
        Plugin::File(path) => std::fs::read(path)
            .unwrap_or_else(|e| panic!("{}: {e} (scripts/build-plugins.sh)", path.display())),
    };
    std::fs::write(dir.join("plugins/p.wasm"), bytes).expect("plugin");
    let port = free_port();
    let mut toml = format!(
        "[broker]\nurl = \"{URL}\"\n[admin]\nlisten = \"127.0.0.1:{port}\"\n\
         [exchanges]\nmaster = \"{prefix}.master\"\nretry = \"{prefix}.retry\"\nfailed = \"{prefix}.failed\"\n\
         [defaults]\nprefetch = {PREFETCH}\nconcurrency = 8\nretry_delays = [\"1ms\"]\n{}",
        extra.sections
    );
    for q in queues {
        toml.push_str(&format!(
            "[[subscription]]\nqueue = \"{q}\"\nplugin = \"p.wasm\"\nbindings = []\n{}",
            extra.subscription
        ));
    }
    std::fs::write(dir.join("worker.toml"), toml).expect("toml");
    let child = Command::new(bin)
        .args(["run", "-c"])
        .arg(dir.join("worker.toml"))
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("start worker-host");
    Host {
        child,
        dir,
        admin: format!("127.0.0.1:{port}"),
    }
}

async fn http_get(addr: &str, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    Some(out)
}

/// Sum of `worker_messages_total` samples with outcome="ok".
async fn handled_ok(addr: &str) -> Option<u64> {
    let text = http_get(addr, "/metrics").await?;
    Some(
        text.lines()
            .filter(|l| l.starts_with("worker_messages_total{") && l.contains("outcome=\"ok\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64,
    )
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

async fn wait_ready(addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(r) = http_get(addr, "/readyz").await
            && (r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200"))
        {
            return;
        }
        assert!(Instant::now() < deadline, "worker-host not ready after 30s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `perf record` attached to the measured host when `WORKER_BENCH_PERF` names an output prefix
/// (`<prefix>-<scenario>.data`); extra options in `WORKER_BENCH_PERF_ARGS`
/// (default `-F 999 -g`). Stopped with SIGINT so it writes a complete file.
fn start_perf(pid: u32, scenario: char) -> Option<Child> {
    let prefix = std::env::var("WORKER_BENCH_PERF").ok()?;
    let extra = std::env::var("WORKER_BENCH_PERF_ARGS").unwrap_or_else(|_| "-F 999 -g".into());
    let child = Command::new("perf")
        .arg("record")
        .args(extra.split_whitespace())
        .args([
            "-p",
            &pid.to_string(),
            "-o",
            &format!("{prefix}-{scenario}.data"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("perf record");
    std::thread::sleep(Duration::from_millis(300)); // let it attach before the count starts
    Some(child)
}

fn stop_perf(perf: Option<Child>) {
    if let Some(mut perf) = perf {
        let _ = Command::new("kill")
            .args(["-INT", &perf.id().to_string()])
            .status();
        let _ = perf.wait();
    }
}

/// (b)–(d): the host consumes a pre-filled queue; msgs/s (ok answers) from the first ok seen to
/// the last, and the host's peak RSS (bytes).
async fn host(bin: &Path, plugin: Plugin<'_>, n: u64, body: &[u8], scenario: char) -> (f64, u64) {
    let prefix = unique("bench-host");
    let queue = format!("{prefix}.q");
    let conn = connect().await;
    let ch = conn.create_channel().await.expect("channel");
    // Let the host declare the topology first, then stop consuming by filling before it starts:
    // run it once to declare, stop it, fill, start again.
    {
        let host = start_host(bin, &plugin, std::slice::from_ref(&queue), &prefix);
        wait_ready(&host.admin).await;
    }
    fill(&ch, &queue, n, body).await;
    let host = start_host(bin, &plugin, std::slice::from_ref(&queue), &prefix);
    let perf = start_perf(host.child.id(), scenario);
    let rate = consume_rate(&host.admin, n).await;
    let rss = rss_kib(host.child.id(), "VmHWM:") * 1024;
    stop_perf(perf);
    drop(host);
    remove_topology(&ch, &queue, &prefix).await;
    let _ = conn.close(200, "bye".into()).await;
    (rate, rss)
}

/// Waits until the host has answered ok `n` times; msgs/s from the first ok seen to the last.
async fn consume_rate(admin: &str, n: u64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut first: Option<(Instant, u64)> = None;
    loop {
        let done = handled_ok(admin).await.unwrap_or(0);
        if done > 0 && first.is_none() {
            first = Some((Instant::now(), done));
        }
        if done >= n {
            let (t0, c0) = first.expect("set above");
            let secs = t0.elapsed().as_secs_f64();
            return if secs > 0.0 {
                (n - c0) as f64 / secs
            } else {
                f64::NAN
            };
        }
        assert!(
            Instant::now() < deadline,
            "worker-host handled {done}/{n} in 600s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Deletes a scenario's queues and exchanges.
async fn remove_topology(ch: &Channel, queue: &str, prefix: &str) {
    for q in [
        queue.to_string(),
        format!("{queue}@failed"),
        format!("{queue}@retry.1ms"),
    ] {
        let _ = ch
            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
    for e in ["master", "retry", "failed"] {
        let _ = ch
            .exchange_delete(format!("{prefix}.{e}").as_str().into(), Default::default())
            .await;
    }
}

/// RSS (bytes) of a host with `subs` idle subscriptions, once ready.
async fn idle_rss(bin: &Path, subs: usize) -> u64 {
    let prefix = unique("bench-idle");
    let queues: Vec<String> = (0..subs).map(|i| format!("{prefix}.q{i}")).collect();
    let host = start_host(bin, &Plugin::Wat(OK_WAT), &queues, &prefix);
    wait_ready(&host.admin).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss = rss_kib(host.child.id(), "VmRSS:") * 1024;
    drop(host);
    let conn = connect().await;
    let ch = conn.create_channel().await.expect("channel");
    for q in &queues {
        for name in [q.clone(), format!("{q}@failed"), format!("{q}@retry.1ms")] {
            let _ = ch
                .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
    }
    for e in ["master", "retry", "failed"] {
        let _ = ch
            .exchange_delete(format!("{prefix}.{e}").as_str().into(), Default::default())
            .await;
    }
    let _ = conn.close(200, "bye".into()).await;
    rss
}
