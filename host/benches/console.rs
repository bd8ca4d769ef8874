//! How fast the console's pages paint with a large backlog: 100,000 messages parked across
//! 5 queues (20,000 each, seven causes whose numbers vary), a host with `[admin] token`, and
//! Debian's Chromium (through chromedriver) opening each page cold, `--runs` times:
//! - first contentful paint (the browser's own `paint` entry: the page's frame is drawn);
//! - data shown: when the page has drawn what it fetched (the overview's rows, the group list).
//!
//! `cargo bench -p worker-host --bench console -- [--runs R] [--per-queue N]`
//! (needs RabbitMQ on 127.0.0.1:5672 and `scripts/packages.sh browser`).

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use serde_json::{Value, json};

const URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const TOKEN: &str = "console-bench-token";
const QUEUES: usize = 5;
const OK_WAT: &str = r#"(module (memory (export "memory") 1)
  (func (export "worker_abi_v1")) (func (export "worker_handle") (result i32) i32.const 0))"#;
/// Causes as plugins write them; `{n}` varies per message, so each is one group.
const CAUSES: [&str; 7] = [
    r#"sql error: constraint: duplicate key value violates unique constraint "orders_pkey" (id={n})"#,
    "timeout after 5000 ms",
    "http error: GET https://api.example.com/users/{n} answered 503",
    "kv error: unavailable: connection refused (os error 111)",
    "order {n} has no customer",
    "trap: unreachable in handle at offset 0x{n}",
    "retries exhausted after 5 attempts: upstream 0x{n} busy",
];

struct Args {
    runs: usize,
    per_queue: u64,
}

fn args() -> Args {
    let mut a = Args {
        runs: 5,
        per_queue: 20_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--runs" => a.runs = it.next().and_then(|v| v.parse().ok()).unwrap_or(a.runs),
            "--per-queue" => {
                a.per_queue = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(a.per_queue)
            }
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

/// Kills what it holds when dropped: the host, chromedriver.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr")
}

async fn bench(args: Args) {
    let prefix = format!("paint-{}", std::process::id());
    let queues: Vec<String> = (0..QUEUES).map(|i| format!("{prefix}.q{i}")).collect();
    let dir = tempfile::tempdir().expect("temp dir");
    let admin = free_addr();
    let host = start_host(dir.path(), &prefix, &queues, admin);
    wait_ready(admin).await;
    let conn = Connection::connect(URL, ConnectionProperties::default())
        .await
        .unwrap_or_else(|e| {
            panic!("RabbitMQ at {URL}: {e}; start it with rabbitmq-server -detached")
        });
    let ch = conn.create_channel().await.expect("channel");
    let started = Instant::now();
    for queue in &queues {
        park(
            &ch,
            &format!("{queue}@failed"),
            &prefix,
            queue,
            args.per_queue,
        )
        .await;
    }
    println!(
        "parked {} messages across {QUEUES} queues in {:.1} s",
        args.per_queue * QUEUES as u64,
        started.elapsed().as_secs_f64()
    );
    let driver_addr = free_addr();
    let _driver = Killed(
        Command::new("chromedriver")
            .arg(format!("--port={}", driver_addr.port()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (scripts/packages.sh browser installs it)"),
    );
    let pages = [
        (
            "overview (/overview)",
            "/overview",
            "return document.querySelectorAll('tr[data-queue]').length >= 5",
        ),
        (
            "failure groups (/failed#groups)",
            "/failed#groups",
            "return document.querySelectorAll('.fgroup').length > 0",
        ),
    ];
    println!();
    println!(
        "{:<34} {:>22} {:>22}",
        "page, cold, median of runs", "first paint (ms)", "data shown (ms)"
    );
    for (name, path, shown) in pages {
        let (mut paint, mut data) = (Vec::new(), Vec::new());
        for _ in 0..args.runs {
            let (p, d) = measure(driver_addr, admin, path, shown).await;
            paint.push(p);
            data.push(d);
        }
        println!("{name:<34} {:>22} {:>22}", summary(paint), summary(data));
    }
    drop(host);
    for queue in &queues {
        for q in [queue.clone(), format!("{queue}@failed")] {
            let _ = ch
                .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
    }
}

/// "median (min–max)".
fn summary(mut v: Vec<f64>) -> String {
    v.sort_by(|a, b| a.total_cmp(b));
    let (lo, hi) = (v[0], v[v.len() - 1]);
    format!("{:.0} ({lo:.0}–{hi:.0})", v[v.len() / 2])
}

/// Opens `path` in a fresh browser with the token already stored; its first contentful paint
/// and the time (from navigation start) at which `shown` first held.
async fn measure(driver: SocketAddr, admin: SocketAddr, path: &str, shown: &str) -> (f64, f64) {
    let page = browser(driver).await;
    // The token lives in the tab's sessionStorage: set it on a page of the origin first.
    page.goto(&format!("http://{admin}/healthz"))
        .await
        .expect("open");
    page.execute(
        "sessionStorage.setItem('worker-host-console-token', arguments[0])",
        vec![json!(TOKEN)],
    )
    .await
    .expect("store the token");
    page.goto(&format!("http://{admin}{path}"))
        .await
        .expect("open the page");
    let probe = format!("return (function() {{ {shown} }})() ? performance.now() : null");
    let deadline = Instant::now() + Duration::from_secs(120);
    let data = loop {
        if let Value::Number(at) = page.execute(&probe, vec![]).await.expect("poll") {
            break at.as_f64().unwrap_or(f64::NAN);
        }
        assert!(Instant::now() < deadline, "{path}: nothing shown in 120 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let paint = page
        .execute(
            "const p = performance.getEntriesByName('first-contentful-paint')[0]; \
             return p ? p.startTime : null",
            vec![],
        )
        .await
        .expect("paint entry")
        .as_f64()
        .unwrap_or(f64::NAN);
    page.close().await.expect("close");
    (paint, data)
}

async fn browser(driver: SocketAddr) -> Client {
    let mut caps = serde_json::Map::new();
    let args = [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1280,1000",
    ];
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"binary": "/usr/bin/chromium", "args": args}),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        match ClientBuilder::new(connector)
            .capabilities(caps.clone())
            .connect(&format!("http://{driver}"))
            .await
        {
            Ok(client) => return client,
            Err(e) if Instant::now() >= deadline => panic!("no Chromium session: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// A host with one ok subscription per queue, the admin listener on `admin` with a token.
fn start_host(dir: &Path, prefix: &str, queues: &[String], admin: SocketAddr) -> Killed {
    std::fs::create_dir_all(dir.join("plugins")).expect("dir");
    std::fs::write(
        dir.join("plugins/ok.wasm"),
        wat::parse_str(OK_WAT).expect("wat"),
    )
    .expect("plugin");
    let mut toml = format!(
        "[broker]\nurl = \"{URL}\"\n[admin]\nlisten = \"{admin}\"\ntoken = \"{TOKEN}\"\n\
         [state]\ndir = \"{}\"\n\
         [exchanges]\nmaster = \"{prefix}.master\"\nretry = \"{prefix}.retry\"\nfailed = \"{prefix}.failed\"\n",
        dir.join("state").display()
    );
    for queue in queues {
        toml.push_str(&format!(
            "[[subscription]]\nqueue = \"{queue}\"\nplugin = \"ok.wasm\"\nbindings = []\n"
        ));
    }
    std::fs::write(dir.join("worker.toml"), toml).expect("toml");
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_worker-host"));
    Killed(
        Command::new(bin)
            .args(["run", "-c"])
            .arg(dir.join("worker.toml"))
            .env("RUST_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start worker-host"),
    )
}

async fn wait_ready(admin: SocketAddr) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(mut s) = tokio::net::TcpStream::connect(admin).await {
            let _ = s
                .write_all(b"GET /readyz HTTP/1.0\r\nHost: x\r\n\r\n")
                .await;
            let mut out = String::new();
            let _ = s.read_to_string(&mut out).await;
            if out.starts_with("HTTP/1.1 200") || out.starts_with("HTTP/1.0 200") {
                return;
            }
        }
        assert!(Instant::now() < deadline, "worker-host not ready in 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Parks `n` messages in `failed` as the host would, confirms pipelined.
async fn park(ch: &Channel, failed: &str, prefix: &str, queue: &str, n: u64) {
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    let text = |s: &str| AMQPValue::LongString(s.as_bytes().to_vec().into());
    let mut pending = Vec::with_capacity(1000);
    for i in 0..n {
        let cause =
            CAUSES[i as usize % CAUSES.len()].replace("{n}", &(i * 7919 % 100_003).to_string());
        let mut headers = FieldTable::default();
        headers.insert("worker-error".into(), text(&cause));
        headers.insert("worker-failed-reason".into(), text("fail"));
        headers.insert("worker-plugin".into(), text("ok.wasm"));
        headers.insert("worker-plugin-sha256".into(), text("ab12cd34"));
        headers.insert("worker-failed-at".into(), text("2026-11-28T08:00:00Z"));
        headers.insert("x-orig-routing-key".into(), text(queue));
        let props = BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(format!("{prefix}-{queue}-{i}").into())
            .with_headers(headers);
        let body = json!({"order": i, "note": "parked for the paint bench"}).to_string();
        let confirm = ch
            .basic_publish(
                "".into(),
                failed.into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                props,
            )
            .await
            .expect("publish");
        pending.push(confirm);
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
