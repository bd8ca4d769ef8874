//! Per-message cost of a handler call (instantiate + call + drop), and the component plugins of
//! issue #14 (Rust, Python, JavaScript) against the ABI v1 SDK plugin, ending with one table.
//!
//! `cargo bench -p worker-host --bench plugin` (`-- --quick` for a short run). Components come
//! from `plugins/demo_*.wasm`; `WORKER_BENCH_COMPONENTS=rust,js` picks languages, `=` none.

#[path = "plugin/components.rs"]
mod components;
#[path = "plugin/latency.rs"]
mod latency;
#[path = "plugin/report.rs"]
mod report;
#[path = "plugin/rss.rs"]
mod rss;
#[path = "plugin/setup.rs"]
mod setup;

use criterion::Criterion;
use setup::{input, json_1k, limits, runtime_config};
use worker_host::plugin::{Answer, Instances, Runtime};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}.wat", env!("CARGO_MANIFEST_DIR"));
    wat::parse_file(path).expect("fixture parses")
}

/// One tokio worker: a call's cost without help from a second core.
fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio")
}

/// The path of the ABI v1 SDK plugin of throughput scenario (d), when built
/// (scripts/build-plugins.sh). WORKER_BENCH_SDK_PLUGIN points at another build of it (say,
/// another opt-level).
fn sdk_plugin_path() -> String {
    std::env::var("WORKER_BENCH_SDK_PLUGIN").unwrap_or_else(|_| {
        format!(
            "{}/../plugins/user_monitor.wasm",
            env!("CARGO_MANIFEST_DIR")
        )
    })
}

fn per_message(c: &mut Criterion, runtime: &Runtime) {
    let rt = tokio_runtime();
    let limits = limits(Instances::Fresh);

    let ok = runtime
        .load_bytes("ok.wasm", &fixture("ok"))
        .expect("ok loads");
    let body_1k = runtime
        .load_bytes("body_1k.wasm", &fixture("body_1k"))
        .expect("body_1k loads");
    let wasi = runtime
        .load_bytes("wasi.wasm", &fixture("wasi"))
        .expect("wasi loads");
    let sdk_path = sdk_plugin_path();
    let user_monitor = std::fs::read(&sdk_path).ok().map(|bytes| {
        runtime
            .load_bytes("user_monitor.wasm", &bytes)
            .expect("user_monitor loads")
    });
    let json = input(json_1k());
    let empty = input(Vec::new());
    let kib = input(vec![7u8; 1024]);

    let mut group = c.benchmark_group("handle");
    group.bench_function("ok", |b| {
        b.to_async(&rt).iter(|| async {
            let inv = ok.handle(empty.clone(), &limits).await;
            debug_assert_eq!(inv.answer, Ok(Answer::Ok));
            inv
        })
    });
    group.bench_function("read_1k_body", |b| {
        b.to_async(&rt).iter(|| async {
            let inv = body_1k.handle(kib.clone(), &limits).await;
            debug_assert_eq!(inv.answer, Ok(Answer::Ok));
            inv
        })
    });
    // A WASI module that writes a line to stdout and one to stderr: the WASI
    // context is built on first use, so only such modules pay for it.
    group.bench_function("wasi_stdout", |b| {
        b.to_async(&rt).iter(|| async {
            let inv = wasi.handle(empty.clone(), &limits).await;
            debug_assert_eq!(inv.answer, Ok(Answer::Ok));
            inv
        })
    });
    // Scenario (d) of the throughput bench in isolation: SDK start-up, config, serde_json
    // parse of a 1 KiB object, one formatted log line.
    if let Some(user_monitor) = &user_monitor {
        group.bench_function("sdk_user_monitor_1k_json", |b| {
            b.to_async(&rt).iter(|| async {
                let inv = user_monitor.handle(json.clone(), &limits).await;
                debug_assert_eq!(inv.answer, Ok(Answer::Ok));
                inv
            })
        });
    } else {
        eprintln!("{sdk_path} is missing (scripts/build-plugins.sh): skipping the SDK case");
    }
    group.finish();

    // The alternative design (sync calls on the blocking pool) pays at least
    // this hand-off per message on top of instantiate + call.
    c.bench_function("spawn_blocking_round_trip", |b| {
        b.to_async(&rt)
            .iter(|| async { tokio::task::spawn_blocking(|| 1u32).await.expect("join") })
    });
}

fn main() {
    // A child started by `rss` to measure one plugin in a process of its own.
    if rss::is_child() {
        rss::child();
        return;
    }
    let cache = tempfile::tempdir().expect("cache dir");
    let runtime = Runtime::new(&runtime_config(cache.path())).expect("runtime");
    // Fails before any measurement when a selected component file is missing.
    let langs = components::selected();
    let mut c = Criterion::default().configure_from_args();
    per_message(&mut c, &runtime);
    if !langs.is_empty() {
        let sdk_path = sdk_plugin_path();
        let v1 = components::load(&runtime, cache.path(), "v1 user_monitor", sdk_path.as_ref());
        let loaded: Vec<_> = langs
            .iter()
            .map(|lang| components::load(&runtime, cache.path(), lang.name, &lang.path()))
            .collect();
        components::bench(&mut c, &tokio_runtime(), &loaded);
        c.final_summary();
        let rows = report::measure(&tokio_runtime(), cache.path(), &v1, &loaded);
        report::print(&rows);
    } else {
        c.final_summary();
    }
}
