//! Resident memory of one plugin under 8 concurrent calls, each plugin in a process of its own
//! (this bench binary again, as a child), so one language's pages never count for another.
//!
//! The child starts the runtime, loads the plugin from the cache the parent filled (as a service
//! restart does: no compiler memory), then runs rounds of 8 calls released together on 8
//! threads, and reports `VmRSS` after each step and `VmHWM` at the end.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Barrier};

use worker_host::plugin::{Answer, Input, Instances, PublishPolicy, Runtime};

const CHILD: &str = "WORKER_BENCH_RSS_CHILD";
const CONCURRENCY: usize = 8;

/// What a child measured, in KiB.
#[derive(Debug, Clone, Copy)]
pub struct Rss {
    /// After `Runtime::new`, nothing loaded.
    pub runtime_kib: u64,
    /// After loading the plugin.
    pub loaded_kib: u64,
    /// After the rounds of 8 concurrent calls.
    pub warm_kib: u64,
    /// Of `warm_kib`, anonymous pages: what the process itself owns. The rest is mapped files
    /// (the executable, the compiled artifacts mapped from the cache), shared with the page
    /// cache and reclaimable, and shared memory.
    pub warm_anon_kib: u64,
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
        warm_anon_kib: n[4],
        instances: (mode == "reuse").then_some(n[5] as usize),
    }
}

/// The child's side; prints `rss-result <runtime> <loaded> <warm> <peak> <warm anon> <instances>`.
pub fn child() {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} unset"));
    let plugin_path = var("WORKER_BENCH_RSS_PLUGIN");
    let cache = var("WORKER_BENCH_RSS_CACHE");
    let reuse = var("WORKER_BENCH_RSS_MODE") == "reuse";
    let rounds: usize = var("WORKER_BENCH_RSS_ROUNDS").parse().expect("rounds");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");

    let runtime = Runtime::new(&crate::setup::runtime_config(cache.as_ref())).expect("runtime");
    let runtime_kib = status_kib("VmRSS:");
    let plugin = runtime
        .load_file(plugin_path.as_ref())
        .unwrap_or_else(|e| panic!("{plugin_path}: {e}"));
    let loaded_kib = status_kib("VmRSS:");

    let limits = crate::setup::limits(if reuse {
        Instances::Reuse {
            max_messages: crate::components::REUSE_MAX_MESSAGES,
        }
    } else {
        Instances::Fresh
    });
    // Call i names queue i: warm instances are kept per queue, so reuse holds exactly 8 of them,
    // as a subscription with `concurrency = 8` does at most. A short call rarely overlaps 7
    // others on 2 cores, so one queue would keep fewer and show less memory than 8 can take.
    let inputs: Vec<_> = (0..CONCURRENCY).map(echo_input).collect();
    let barrier = Barrier::new(CONCURRENCY);
    let mut instances = 0;
    for _ in 0..rounds {
        // One OS thread per call, released together: the calls overlap as far as the cores let
        // them, independent of how tokio would have spread tasks over its workers.
        instances += std::thread::scope(|scope| {
            let calls: Vec<_> = inputs
                .iter()
                .map(|input| {
                    let (plugin, barrier, rt) = (&plugin, &barrier, rt.handle());
                    scope.spawn(move || {
                        barrier.wait();
                        rt.block_on(plugin.handle(input.clone(), &limits))
                    })
                })
                .collect();
            calls
                .into_iter()
                .map(|call| {
                    let inv = call.join().expect("call thread");
                    assert_eq!(
                        inv.answer,
                        Ok(Answer::Ok),
                        "{plugin_path}: {:?}",
                        inv.cause()
                    );
                    inv.publishes.iter().filter(|p| first_call(&p.body)).count()
                })
                .sum::<usize>()
        });
    }
    let warm_kib = status_kib("VmRSS:");
    let peak_kib = status_kib("VmHWM:");
    let warm_anon_kib = status_kib("RssAnon:");
    println!(
        "rss-result {runtime_kib} {loaded_kib} {warm_kib} {peak_kib} {warm_anon_kib} {instances}"
    );
}

/// The 1 KiB object plus the demos' `echo` command, whose published `count` is 1 on an
/// instance's first call: that counts the instances. The v1 module ignores the key.
fn echo_input(call: usize) -> Arc<Input> {
    let mut body: serde_json::Value =
        serde_json::from_slice(&crate::setup::json_1k()).expect("json");
    body["echo"] = serde_json::json!({"exchange": "bench", "routing_key": "rss"});
    let input = crate::setup::input(serde_json::to_vec(&body).expect("json"));
    let mut input = Arc::unwrap_or_clone(input);
    input.meta.queue = format!("bench-{call}");
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
