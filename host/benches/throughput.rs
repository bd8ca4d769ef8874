//! End-to-end throughput against the local broker, every figure from the same run:
//! (a) the fastest bare lapin consumer (task per delivery on a multi-thread runtime, or a
//!     current-thread runtime: the faster counts), manual acks, doing nothing;
//! (a') the same, republishing each message with a confirm before the ack;
//! (b) worker-host (the release binary, a separate process) with a plugin that answers ok;
//!     (B) the same with `instance = "reuse"`; (o) the same consuming through a lapin channel
//!     of the service's connection (`WORKER_CONSUME=lapin`, the path before the batch
//!     consumer, and the one `amqps://` URLs take);
//! (c) worker-host with every message retried once, then ok;
//! (d) worker-host with an SDK plugin (user_monitor.wasm) parsing a 1 KiB JSON body;
//! (a+), for reference only (not the denominator): a bare consumer acking with `multiple=true`,
//!     the trick worker-host itself uses;
//! (t) (b) with `[tracing]` exporting every span to a collector, and (t-) with the collector
//!     gone: the cost of tracing, as a ratio to (b) of the same run (`traced.rs`);
//! (k) the time one capability call adds per message: kv get+set (embedded, Redis), one SQL
//!     insert (SQLite, PostgreSQL), the same insert with `outbox = true`, against the same
//!     component doing nothing (`caps.rs`);
//! (x) a prototype of the batch consumer proposed for target 1 (one thread parses frames, calls
//!     the ok WAT plugin in place, one ack per read), and (x0) its loop without the call
//!     (`batch.rs`);
//! (y) (x) built on lapin: its I/O thread hands each delivery to a sink (a hook in the vendored
//!     lapin) that calls the ok WAT plugin in place and acks once per read (`sink.rs`);
//! (z) the host's own consume connection feeding an async task a read at a time, which calls
//!     the ok WAT plugin and acks once per read (`feed.rs`);
//! (u) one handler call in-process (µs; fresh and reused instances), as in the plugin bench
//!     (`calls.rs`);
//! (r), (p), (j) components in Rust, Python and JavaScript parsing the 1 KiB JSON body (the
//!     handlers in host/benches/handlers), and (q) the Python peers Celery and Dramatiq on the
//!     same body; (m) the peak RSS of a host with 8 mixed subscriptions (`languages.rs`);
//! (s) the start-up of a host with 12 subscriptions, Python and JS included, warm cache
//!     (`startup.rs`).
//! Prints msgs/s, the ratio of each to (a), the host's peak RSS, and its RSS with 8 idle
//! subscriptions; then one table of the performance targets with this run's figures
//! (`targets.rs`).
//!
//! `cargo bench -p worker-host --bench throughput -- [--messages N] [--runs R] [--only aAbBoxyzcdiktgurpjqms]`
//! (`WORKER_BENCH_PERF`: see `start_perf`)
//! (cargo builds the worker-host binary it runs; scripts/bench.sh builds the plugins first).
//! Every message carries a unique message id (the outbox keys on it). Run with a quiet machine;
//! only the ratios within one run are meaningful.

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

#[path = "throughput/bare.rs"]
mod bare;
#[path = "throughput/batch.rs"]
mod batch;
#[path = "throughput/before.rs"]
mod before;
#[path = "throughput/calls.rs"]
mod calls;
#[path = "throughput/caps.rs"]
mod caps;
#[path = "throughput/cpu.rs"]
mod cpu;
#[path = "throughput/feed.rs"]
mod feed;
#[path = "throughput/languages.rs"]
mod languages;
#[path = "plugin/latency.rs"]
mod latency;
#[path = "throughput/process.rs"]
mod process;
#[path = "plugin/setup.rs"]
mod setup;
#[path = "throughput/sink.rs"]
mod sink;
#[path = "throughput/startup.rs"]
mod startup;
#[path = "throughput/targets.rs"]
mod targets;
#[path = "throughput/traced.rs"]
mod traced;
use bare::{Bare, bare};
use before::Side;
use cpu::{CpuMark, CpuUse};
use process::*;

const URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const PREFETCH: u16 = 100;
/// Messages per run, at most, of the scenarios that run a few thousand msgs/s or fewer (the
/// capability rows, fresh Python and JS, the Python peers, the mixed host), so that a large
/// `--messages` lengthens the fast scenarios' windows (tens of thousands of msgs/s: at 10,000
/// messages a run lasted a third of a second, and single runs of one row moved by half) without
/// making the slow ones last minutes.
const SLOW_MESSAGES: u64 = 20_000;
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
    /// Scenarios to run: letters of `aAbBxcdiktgurpjqms` (`A`: a' and the batched-ack bare consumer;
    /// `B`: (b) with reused instances; `x`: the batch consumer prototype, with and without calls;
    /// `i`: idle RSS; `k`: capability costs; `t`: tracing to a collector; `g`: tracing, collector
    /// gone; `u`: one call in-process; `r`, `p`, `j`: Rust, Python, JS components; `q`: Celery
    /// and Dramatiq; `m`: mixed host RSS; `s`: start-up with 12 subscriptions).
    only: String,
}

fn args() -> Args {
    let mut a = Args {
        messages: 20_000,
        runs: 3,
        only: "aAbBoxyzcdiktgurpjqms".into(),
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
    // Built by cargo for this bench, in whatever target dir it uses (CARGO_TARGET_DIR too).
    let host_bin = PathBuf::from(env!("CARGO_BIN_EXE_worker-host"));
    let before_bin = before::binary();
    let mut compared = before::Table::default();
    let user_monitor = root.join("plugins/user_monitor.wasm");
    let n = args.messages;
    let slow = n.min(SLOW_MESSAGES);
    println!(
        "messages per run: {n} ({} at most for k, fresh p and j, q and m), persistent, 256 B bodies (1 KiB JSON for d), prefetch {PREFETCH}, median of {} runs",
        slow, args.runs
    );

    let body = vec![b'x'; 256];
    let json = setup::json_1k();
    let on = |c: char| args.only.contains(c);
    let (mut a_mt, mut a_ct, mut a_rep, mut a_multi) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut b, mut b_reuse, mut c, mut d) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut b_lapin = Vec::new();
    // CPU per message, in the order of the msgs/s rows.
    let mut cpu: [Vec<CpuUse>; 13] = Default::default();
    let (mut x, mut x0, mut y, mut z) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut t, mut g) = (Vec::new(), Vec::new());
    let (collector, exported) = traced::collector().await;
    let gone = traced::gone();
    let state = std::env::temp_dir().join(unique("bench-state"));
    let langs = languages::Ctx {
        bin: &host_bin,
        root: &root,
        n,
        slow,
        json: &json,
        state: &state,
    };
    let mut lang = languages::Results::default();
    let mut peak_rss = 0u64;
    let mut starts = Vec::new();
    let ok_plugin = (on('x') || on('y') || on('z')).then(|| batch::ok_plugin(&state));
    for run in 0..args.runs {
        for (letter, out, kind, i) in [
            ('a', &mut a_mt, Bare::TaskPerDelivery, 0),
            ('a', &mut a_ct, Bare::CurrentThread, 1),
            ('A', &mut a_rep, Bare::Republish, 2),
            ('A', &mut a_multi, Bare::BatchedAcks, 3),
        ] {
            if on(letter) {
                let (rate, used) = bare(n, &body, kind).await;
                out.push(rate);
                cpu[i].push(used);
            }
        }
        for (letter, out, plugin, payload, i) in [
            ('b', &mut b, Plugin::Wat(OK_WAT), &body, 4),
            ('c', &mut c, Plugin::Wat(RETRY_ONCE_WAT), &body, 5),
            ('d', &mut d, Plugin::File(&user_monitor), &json, 6),
        ] {
            if !on(letter) {
                continue;
            }
            for side in Side::order(run) {
                let name = format!("({letter})");
                match (side, &before_bin) {
                    (Side::After, _) => {
                        let run = host(&host_bin, plugin, n, payload, letter).await;
                        out.push(run.rate);
                        cpu[i].push(run.cpu);
                        peak_rss = peak_rss.max(run.rss);
                        compared.push(&name, side, run.rate, Some(run.cpu));
                    }
                    (Side::Before, Some(bin)) => {
                        let run = host(bin, plugin, n, payload, letter).await;
                        compared.push(&name, side, run.rate, Some(run.cpu));
                    }
                    (Side::Before, None) => {}
                }
            }
        }
        if on('B') {
            let extra = Extra {
                subscription: "instance = \"reuse\"\n".into(),
                ..Extra::default()
            };
            let run = host_with(&host_bin, Plugin::Wat(OK_WAT), n, &body, 'B', &extra).await;
            b_reuse.push(run.rate);
            cpu[7].push(run.cpu);
        }
        if on('o') {
            let extra = Extra {
                env: vec![("WORKER_CONSUME", "lapin")],
                ..Extra::default()
            };
            let run = host_with(&host_bin, Plugin::Wat(OK_WAT), n, &body, 'o', &extra).await;
            b_lapin.push(run.rate);
            cpu[12].push(run.cpu);
        }
        if on('x') {
            for (out, call, i) in [(&mut x0, None, 8), (&mut x, ok_plugin.clone(), 9)] {
                let (rate, used) = batch::batch(n, &body, call).await;
                out.push(rate);
                cpu[i].push(used);
            }
        }
        if let (true, Some(plugin)) = (on('y'), &ok_plugin) {
            let (rate, used) = sink::sink(n, &body, plugin.clone()).await;
            y.push(rate);
            cpu[10].push(used);
        }
        if let (true, Some(plugin)) = (on('z'), &ok_plugin) {
            let (rate, used) = feed::feed(n, &body, plugin.clone()).await;
            z.push(rate);
            cpu[11].push(used);
        }
        for (letter, out, addr) in [('t', &mut t, &collector), ('g', &mut g, &gone)] {
            if on(letter) {
                let extra = traced::extra(addr);
                let plugin = Plugin::Wat(OK_WAT);
                out.push(
                    host_with(&host_bin, plugin, n, &body, letter, &extra)
                        .await
                        .rate,
                );
            }
        }
        languages::run(&langs, on, &mut lang).await;
        if on('s') {
            starts.push(startup::seconds(&langs).await);
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
    row(
        "(B)  worker-host, ok plugin (WAT), reused instance",
        med(&b_reuse),
    );
    row(
        "(o)  worker-host, ok plugin (WAT), consuming through lapin",
        med(&b_lapin),
    );
    row("(x0) prototype: batch consumer, no call", med(&x0));
    row(
        "(x)  prototype: batch consumer, ok WAT call in place",
        med(&x),
    );
    row(
        "(y)  prototype: lapin hands deliveries over in place, ok WAT",
        med(&y),
    );
    row(
        "(z)  the host's connection feeding a task per read, ok WAT",
        med(&z),
    );
    row("(c)  worker-host, retried once then ok", med(&c));
    row("(d)  worker-host, SDK plugin parsing 1 KiB JSON", med(&d));
    row(
        "(t)  worker-host, ok plugin, tracing to a collector",
        med(&t),
    );
    row(
        "(t-) worker-host, ok plugin, tracing, collector gone",
        med(&g),
    );
    languages::print(&lang, a);
    cpu::print(&[
        ("(a)  bare lapin, task per delivery, multi-thread", &cpu[0]),
        ("(a)  bare lapin, current-thread runtime", &cpu[1]),
        ("(a') bare lapin, republish + confirm, then ack", &cpu[2]),
        ("(a+) bare lapin, batched acks", &cpu[3]),
        ("(b)  worker-host, ok plugin (WAT)", &cpu[4]),
        (
            "(B)  worker-host, ok plugin (WAT), reused instance",
            &cpu[7],
        ),
        (
            "(o)  worker-host, ok plugin (WAT), consuming through lapin",
            &cpu[12],
        ),
        ("(x0) prototype: batch consumer, no call", &cpu[8]),
        (
            "(x)  prototype: batch consumer, ok WAT call in place",
            &cpu[9],
        ),
        (
            "(y)  prototype: lapin hands deliveries over in place, ok WAT",
            &cpu[10],
        ),
        (
            "(z)  the host's connection feeding a task per read, ok WAT",
            &cpu[11],
        ),
        ("(c)  worker-host, retried once then ok", &cpu[5]),
        ("(d)  worker-host, SDK plugin parsing 1 KiB JSON", &cpu[6]),
    ]);
    let calls = if on('u') {
        calls::measure(&root, &state.join("calls-cache"), OK_WAT)
    } else {
        Vec::new()
    };
    calls::print(&calls);
    let _ = std::fs::remove_dir_all(&state);
    let traced = !t.is_empty() || !g.is_empty();
    if !b.is_empty() && traced {
        println!(
            "(t) / (b) = {:.3}, (t-) / (b) = {:.3} (collector received {} KiB)",
            med(&t) / med(&b),
            med(&g) / med(&b),
            exported.load(Ordering::Relaxed) / 1024
        );
    }
    if !c.is_empty() && !a_rep.is_empty() {
        println!("(c) / (a') = {:.2}", med(&c) / med(&a_rep));
    }
    if peak_rss > 0 {
        println!(
            "worker-host peak RSS under load: {:.1} MiB",
            peak_rss as f64 / 1048576.0
        );
    }
    let mut idle_mib = f64::NAN;
    if on('i') {
        idle_mib = idle_rss(&host_bin, 8).await as f64 / 1048576.0;
        println!("worker-host RSS with 8 idle subscriptions: {idle_mib:.1} MiB");
    }
    if !starts.is_empty() {
        println!(
            "(s)  worker-host start-up, 12 subscriptions, warm cache: {:.2} s (median; {})",
            med(&starts),
            starts
                .iter()
                .map(|s| format!("{s:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let mut caps = caps::Ratios::NOT_RUN;
    if on('k') {
        let probe = root.join("plugins/cap_probe.wasm");
        let bins = caps::Bins {
            after: &host_bin,
            before: before_bin.as_deref(),
        };
        caps = caps::bench(bins, &probe, slow, args.runs, &mut compared).await;
    }
    if let Some(bin) = &before_bin {
        compared.print(bin);
    }
    let us = |label| calls::median_of(&calls, label);
    targets::print(&targets::Measured {
        a,
        a_plus: med(&a_multi),
        b: med(&b),
        b_lowest_run: lowest_ratio(&b, &a_multi),
        a_plus_cpu_us: cpu::consumer_median(&cpu[3]),
        b_cpu_us: cpu::consumer_median(&cpu[4]),
        b_reuse: med(&b_reuse),
        b_reuse_cpu_us: cpu::consumer_median(&cpu[7]),
        x: med(&x),
        x_cpu_us: cpu::consumer_median(&cpu[9]),
        rust: lang.median(languages::RUST),
        rust_reuse: lang.median(languages::RUST_REUSE),
        py_reuse: lang.median(languages::PY_REUSE),
        js_reuse: lang.median(languages::JS_REUSE),
        celery: lang.median(languages::CELERY),
        dramatiq: lang.median(languages::DRAMATIQ),
        rust_us: us("Rust serde_json, fresh"),
        py_us: us("Python json.loads, fresh"),
        js_us: us("JS JSON.parse, fresh"),
        mix_peak_mib: lang.mix_peak_mib("fresh"),
        startup_s: med(&starts),
        outbox_sqlite: caps.outbox_sqlite,
        sql_sqlite: caps.sql_sqlite,
        outbox_postgres: caps.outbox_postgres,
        idle_mib,
    });
}

/// The lowest of `num[i] / den[i]` over the runs (each run measures both): a goal met in every
/// run is met by this. NaN when either was not run.
fn lowest_ratio(num: &[f64], den: &[f64]) -> f64 {
    if num.is_empty() || num.len() != den.len() {
        return f64::NAN;
    }
    num.iter()
        .zip(den)
        .map(|(n, d)| n / d)
        .fold(f64::INFINITY, f64::min)
}

fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Fills `queue` (default exchange) with `n` persistent messages, confirms pipelined; each with
/// a message id unique in this process.
async fn fill(ch: &Channel, queue: &str, n: u64, body: &[u8]) {
    fill_with(ch, queue, n, body, true).await
}

/// [`fill`], with or without message ids (a message without one is not recorded by the outbox).
async fn fill_with(ch: &Channel, queue: &str, n: u64, body: &[u8], ids: bool) {
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    let props = BasicProperties::default().with_delivery_mode(2);
    let mut pending = Vec::with_capacity(1000);
    for _ in 0..n {
        let props = if ids {
            props.clone().with_message_id(unique("m").into())
        } else {
            props.clone()
        };
        let c = ch
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                body,
                props,
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
