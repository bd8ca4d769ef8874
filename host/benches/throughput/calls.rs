//! (u) What one handler call costs in-process, for the table of targets: the handlers the targets
//! name (host/benches/handlers: parse the 1 KiB JSON body, answer ok) in Rust, Python and
//! JavaScript, and the ok WAT plugin of (b), each in a fresh instance and a reused one. The same
//! timed loop as the plugin bench (`plugin/latency.rs`): single calls on one tokio worker, median
//! and p99 in µs. Components are compiled into a cache of this run, as the service does.

use std::path::Path;

use worker_host::plugin::{Instances, Runtime};

use super::{latency, setup};

/// One case: its label and its median and p99, in µs.
pub(super) struct Call {
    pub(super) label: String,
    pub(super) median_us: f64,
    pub(super) p99_us: f64,
}

/// The cases, in print order: (label, plugin file under the repository root; None for the WAT).
const CASES: [(&str, Option<&str>); 4] = [
    ("ok WAT", None),
    ("Rust serde_json", Some(setup::JSON_RUST)),
    ("Python json.loads", Some(setup::JSON_PYTHON)),
    ("JS JSON.parse", Some(setup::JSON_JS)),
];

/// Measures every case, fresh and reused, on a thread of its own (the bench's runtime is busy).
pub(super) fn measure(root: &Path, cache: &Path, ok_wat: &str) -> Vec<Call> {
    let (root, cache, ok_wat) = (root.to_path_buf(), cache.to_path_buf(), ok_wat.to_string());
    std::thread::spawn(move || measure_here(&root, &cache, &ok_wat))
        .join()
        .expect("the call bench thread")
}

fn measure_here(root: &Path, cache: &Path, ok_wat: &str) -> Vec<Call> {
    let runtime = Runtime::new(&setup::runtime_config(cache)).expect("plugin runtime");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio");
    let json = setup::input(setup::json_1k());
    let mut out = Vec::new();
    for (label, file) in CASES {
        let plugin = match file {
            None => runtime
                .load_bytes("ok.wasm", &wat::parse_str(ok_wat).expect("ok WAT parses"))
                .expect("ok WAT loads"),
            Some(file) => {
                let path = root.join(file);
                runtime.load_file(&path).unwrap_or_else(|e| {
                    panic!("{}: {e} (scripts/bench.sh builds it)", path.display())
                })
            }
        };
        for (mode, instance) in [
            ("fresh", Instances::Fresh),
            ("reuse", Instances::Reuse { max_messages: 1000 }),
        ] {
            let limits = setup::limits(instance);
            let l = latency::measure(&rt, &plugin, &json, &limits, latency::calls());
            out.push(Call {
                label: format!("{label}, {mode}"),
                median_us: l.median_us,
                p99_us: l.p99_us,
            });
        }
    }
    out
}

/// The median of the case with this label (`"Rust serde_json, fresh"`), NaN if not measured.
pub(super) fn median_of(calls: &[Call], label: &str) -> f64 {
    calls
        .iter()
        .find(|c| c.label == label)
        .map_or(f64::NAN, |c| c.median_us)
}

/// One line per case.
pub(super) fn print(calls: &[Call]) {
    if calls.is_empty() {
        return;
    }
    println!();
    println!(
        "{:<62} {:>10} {:>8}",
        "(u)  one call in-process, 1 KiB JSON, 1 tokio worker", "median µs", "p99 µs"
    );
    for c in calls {
        println!(
            "     {:<57} {:>10.1} {:>8.1}",
            c.label, c.median_us, c.p99_us
        );
    }
}
