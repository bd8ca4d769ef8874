//! The component cases: the demo plugin in Rust, Python and JavaScript, and the handlers the
//! performance targets name (host/benches/handlers: parse the JSON body, answer ok) in Rust, Python
//! and JavaScript, loaded as the service loads them (compiled in a `worker-host` child process,
//! cached by content hash), and their criterion benchmarks, a fresh instance and a reused one per
//! message.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use worker_host::plugin::{Answer, Instances, Plugin, Runtime};

/// Messages one warm instance serves before it is replaced: SPEC §8's default.
pub const REUSE_MAX_MESSAGES: u32 = 1000;

/// One component case: its plugin file (relative to the repository) and how to build it.
pub struct Lang {
    pub name: &'static str,
    file: &'static str,
    build: &'static str,
}

const LANGS: [Lang; 6] = [
    Lang {
        name: "rust",
        file: "plugins/demo_rust.wasm",
        build: "scripts/build-plugins.sh",
    },
    Lang {
        name: "python",
        file: "plugins/demo_python.wasm",
        build: "scripts/build-python.sh",
    },
    Lang {
        name: "js",
        file: "plugins/demo_js.wasm",
        build: "scripts/build-js.sh",
    },
    Lang {
        name: "rust-json",
        file: crate::setup::JSON_RUST,
        build: "scripts/bench.sh",
    },
    Lang {
        name: "python-json",
        file: crate::setup::JSON_PYTHON,
        build: "scripts/bench.sh",
    },
    Lang {
        name: "js-json",
        file: crate::setup::JSON_JS,
        build: "scripts/bench.sh",
    },
];

impl Lang {
    pub fn path(&self) -> PathBuf {
        let host = Path::new(env!("CARGO_MANIFEST_DIR"));
        host.parent().unwrap_or(host).join(self.file)
    }
}

/// The languages of `WORKER_BENCH_COMPONENTS` (comma-separated; all when unset, none when
/// empty). Panics, naming the build command, when a selected demo has not been built: a
/// benchmark that silently leaves a language out would report a table that looks complete.
pub fn selected() -> Vec<&'static Lang> {
    let wanted = std::env::var("WORKER_BENCH_COMPONENTS").ok();
    let langs: Vec<&Lang> = match wanted.as_deref() {
        None => LANGS.iter().collect(),
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .map(|name| {
                LANGS.iter().find(|l| l.name == name).unwrap_or_else(|| {
                    panic!(
                        "WORKER_BENCH_COMPONENTS: unknown case {name:?} (rust, python, js, rust-json, python-json, js-json)"
                    )
                })
            })
            .collect(),
    };
    for lang in &langs {
        let path = lang.path();
        assert!(
            path.is_file(),
            "{} is missing: build it with `{}` (or leave {} out: WORKER_BENCH_COMPONENTS=<languages>)",
            path.display(),
            lang.build,
            lang.name,
        );
    }
    langs
}

/// A plugin file as loaded for the benchmark, with what loading it cost.
pub struct Loaded {
    /// `v1 user_monitor`, `rust`, `python`, `js`.
    pub label: String,
    pub path: PathBuf,
    pub plugin: Arc<Plugin>,
    pub file_bytes: u64,
    /// The compiled artifact in the cache (components only; modules compile in place).
    pub artifact_bytes: Option<u64>,
    /// First load: compile (a child process for components) and instantiate-ready.
    pub compile: Duration,
    /// Second load, from the cache (components only).
    pub cached_load: Option<Duration>,
}

/// Loads `path` twice for a component (compiled, then from the cache), once for a module.
pub fn load(runtime: &Runtime, cache: &Path, label: &str, path: &Path) -> Loaded {
    let file_bytes = std::fs::metadata(path)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (the ABI v1 reference: scripts/build-plugins.sh)",
                path.display()
            )
        })
        .len();
    let started = Instant::now();
    let plugin = runtime
        .load_file(path)
        .unwrap_or_else(|e| panic!("{} does not load: {e}", path.display()));
    let compile = started.elapsed();
    let (artifact_bytes, cached_load) = if plugin.is_component() {
        let started = Instant::now();
        let again = runtime
            .load_file(path)
            .unwrap_or_else(|e| panic!("{} does not load from the cache: {e}", path.display()));
        let cached = started.elapsed();
        drop(again);
        (artifact_size(cache, plugin.sha256()), Some(cached))
    } else {
        (None, None)
    };
    Loaded {
        label: label.to_string(),
        path: path.to_path_buf(),
        plugin,
        file_bytes,
        artifact_bytes,
        compile,
        cached_load,
    }
}

/// Size of the cache entry of the file with this SHA-256 (`<sha256>-<engine>.cwasm`).
fn artifact_size(cache: &Path, sha256: &str) -> Option<u64> {
    std::fs::read_dir(cache)
        .ok()?
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with(sha256))
        .and_then(|e| e.metadata().ok())
        .map(|m| m.len())
}

/// How a case runs its instances.
pub fn modes() -> [(&'static str, Instances); 2] {
    [
        ("fresh", Instances::Fresh),
        (
            "reuse",
            Instances::Reuse {
                max_messages: REUSE_MAX_MESSAGES,
            },
        ),
    ]
}

/// Criterion: each component handles the 1 KiB JSON object, in a fresh instance and in a reused
/// one. The ABI v1 reference is `handle/sdk_user_monitor_1k_json`.
pub fn bench(c: &mut Criterion, rt: &tokio::runtime::Runtime, loaded: &[Loaded]) {
    let json = crate::setup::input(crate::setup::json_1k());
    let mut group = c.benchmark_group("component_1k_json");
    for case in loaded {
        for (mode, instance) in modes() {
            let limits = crate::setup::limits(instance);
            group.bench_function(format!("{}_{mode}", case.label), |b| {
                b.to_async(rt).iter(|| async {
                    let inv = case.plugin.handle(json.clone(), &limits).await;
                    debug_assert_eq!(inv.answer, Ok(Answer::Ok));
                    inv
                })
            });
        }
    }
    group.finish();
}
