//! Resident memory of one plugin under 8 concurrent calls, each plugin in a process of its own
//! (this bench binary again, as a child), so one language's pages never count for another.
//!
//! The child starts the runtime, loads the plugin from the cache the parent filled (as a service
//! restart does: no compiler memory), then runs rounds of 8 calls released together on 8 tokio
//! workers, and reports `VmRSS` after each step and `VmHWM` at the end.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use worker_host::plugin::{Answer, Input, Instances, PublishPolicy, Runtime};

const CHILD: &str = "WORKER_BENCH_RSS_CHILD";
const CONCURRENCY: usize = 8;
/// A reused instance is kept per concurrent call, so reuse rounds go on until 8 exist (the most
/// memory `concurrency = 8` can hold), within this many rounds.
const MAX_ROUNDS: usize = 200;

/// What a child measured, in KiB.
#[derive(Debug, Clone, Copy)]
pub struct Rss {
    /// After `Runtime::new`, nothing loaded.
    pub runtime_kib: u64,
    /// After loading the plugin.
    pub loaded_kib: u64,
    /// After the rounds of 8 concurrent calls.
    pub warm_kib: u64,
    /// The peak over the child's life.
    pub peak_kib: u64,
    /// Instances created over the rounds (reuse: the warm ones kept).
    pub instances: Option<usize>,
}

pub fn is_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// Runs the child for `plugin` with instances of `mode` (`fresh`, `reuse`) and parses its
/// report.
pub fn measure(cache: &Path, plugin: &Path, mode: &str, rounds: usize) -> Rss {
    let exe = std::env::current_exe().expect("bench executable");
    let out = Command::new(exe)
        .env(CHILD, "1")
        .env("WORKER_BENCH_RSS_PLUGIN", plugin)
        .env("WORKER_BENCH_RSS_CACHE", cache)
        .env("WORKER_BENCH_RSS_MODE", mode)
        .env("WORKER_BENCH_RSS_ROUNDS", rounds.to_string())
        .output()
        .expect("run the RSS child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "RSS child for {} ({mode}) failed: {}\n{stdout}{}",
        plugin.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("rss-result "))
        .unwrap_or_else(|| panic!("RSS child printed no result: {stdout}"));
    let n: Vec<u64> = line
        .split_whitespace()
        .map(|x| x.parse().expect("number"))
        .collect();
    Rss {
        runtime_kib: n[0],
        loaded_kib: n[1],
        warm_kib: n[2],
        peak_kib: n[3],
        instances: (mode == "reuse").then_some(n[4] as usize),
    }
}

/// The child's side; prints `rss-result <runtime> <loaded> <warm> <peak> <instances>`.
pub fn child() {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} unset"));
    let plugin_path = var("WORKER_BENCH_RSS_PLUGIN");
    let cache = var("WORKER_BENCH_RSS_CACHE");
    let reuse = var("WORKER_BENCH_RSS_MODE") == "reuse";
    let rounds: usize = var("WORKER_BENCH_RSS_ROUNDS").parse().expect("rounds");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(CONCURRENCY)
        .enable_all()
        .build()
        .expect("tokio");

    let runtime = Runtime::new(&crate::runtime_config(cache.as_ref())).expect("runtime");
    let runtime_kib = status_kib("VmRSS:");
    let plugin = runtime
        .load_file(plugin_path.as_ref())
        .unwrap_or_else(|e| panic!("{plugin_path}: {e}"));
    let loaded_kib = status_kib("VmRSS:");

    let limits = crate::limits(if reuse {
        Instances::Reuse {
            max_messages: crate::components::REUSE_MAX_MESSAGES,
        }
    } else {
        Instances::Fresh
    });
    let input = echo_input();
    let instances = rt.block_on(async {
        let mut instances = 0;
        let mut round = 0;
        while round < rounds || (reuse && instances < CONCURRENCY && round < MAX_ROUNDS) {
            round += 1;
            let barrier = Arc::new(tokio::sync::Barrier::new(CONCURRENCY));
            let calls: Vec<_> = (0..CONCURRENCY)
                .map(|_| {
                    let (plugin, input, barrier) = (plugin.clone(), input.clone(), barrier.clone());
                    tokio::spawn(async move {
                        barrier.wait().await;
                        plugin.handle(input, &limits).await
                    })
                })
                .collect();
            for call in calls {
                let inv = call.await.expect("call task");
                assert_eq!(inv.answer, Ok(Answer::Ok), "{plugin_path}: {:?}", inv.cause());
                instances += inv.publishes.iter().filter(|p| first_call(&p.body)).count();
            }
        }
        instances
    });
    let warm_kib = status_kib("VmRSS:");
    let peak_kib = status_kib("VmHWM:");
    println!("rss-result {runtime_kib} {loaded_kib} {warm_kib} {peak_kib} {instances}");
}

/// The 1 KiB object plus the demos' `echo` command, whose published `count` is 1 on an
/// instance's first call: that counts the instances. The v1 module ignores the key.
fn echo_input() -> Arc<Input> {
    let mut body: serde_json::Value = serde_json::from_slice(&crate::json_1k()).expect("json");
    body["echo"] = serde_json::json!({"exchange": "bench", "routing_key": "rss"});
    let input = crate::input(serde_json::to_vec(&body).expect("json"));
    let mut input = Arc::unwrap_or_clone(input);
    input.publish = Arc::new(PublishPolicy {
        allowed_exchanges: vec!["bench".into()],
        ..PublishPolicy::default()
    });
    Arc::new(input)
}

fn first_call(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|v| v["count"] == 1)
}

/// A `kB` field of /proc/self/status.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
