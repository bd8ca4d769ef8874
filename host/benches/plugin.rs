//! Per-message cost of a handler call (instantiate + call + drop).
//!
//! `cargo bench -p worker-host --bench plugin`

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use worker_host::plugin::{
    Answer, Input, Instances, Limits, Meta, PublishPolicy, Runtime, RuntimeConfig,
};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}.wat", env!("CARGO_MANIFEST_DIR"));
    wat::parse_file(path).expect("fixture parses")
}

fn input(body: Vec<u8>) -> Arc<Input> {
    Arc::new(Input {
        body: body.into(),
        meta: Meta {
            routing_key: "bench".into(),
            queue: "bench".into(),
            attempt: 1,
            ..Meta::default()
        },
        config_json: Arc::from("{}"),
        publish: Arc::new(PublishPolicy::default()),
    })
}

/// The 1 KiB JSON object of throughput scenario (d).
fn json_1k() -> Vec<u8> {
    let mut s = String::from("{\"id\": 12345, \"name\": \"ada lovelace\", \"tags\": [");
    let mut i = 0;
    while s.len() < 1000 {
        s.push_str(&format!("\"tag-{i}\","));
        i += 1;
    }
    s.push_str("\"end\"]}");
    s.into_bytes()
}

fn per_message(c: &mut Criterion) {
    let runtime = Runtime::new(&RuntimeConfig {
        max_instances: 16,
        max_memory: 64 << 20,
        cache_dir: None,
        compiler_exe: None,
    })
    .expect("runtime");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio");
    let limits = Limits {
        timeout: Duration::from_secs(10),
        memory_limit: 64 << 20,
        instance: Instances::Fresh,
    };

    let ok = runtime
        .load_bytes("ok.wasm", &fixture("ok"))
        .expect("ok loads");
    let body_1k = runtime
        .load_bytes("body_1k.wasm", &fixture("body_1k"))
        .expect("body_1k loads");
    let wasi = runtime
        .load_bytes("wasi.wasm", &fixture("wasi"))
        .expect("wasi loads");
    // The SDK plugin of throughput scenario (d), when built (scripts/build-plugins.sh).
    // WORKER_BENCH_SDK_PLUGIN points at another build of it (say, another opt-level).
    let sdk_path = std::env::var("WORKER_BENCH_SDK_PLUGIN").unwrap_or_else(|_| {
        format!(
            "{}/../plugins/user_monitor.wasm",
            env!("CARGO_MANIFEST_DIR")
        )
    });
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

criterion_group!(benches, per_message);
criterion_main!(benches);
