//! Helpers of the component tests: the demo plugin of each language (a missing build fails with
//! the command that makes it, never skips), the one state folder every component test shares,
//! and `worker-host check` runs, which also fill that folder's compiled-component cache.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::cli::{text, worker_host};
use crate::harness;

/// The demo plugin of each language: (language, file built into plugins/, the command that
/// builds it). The tests of `components.rs` are generated from the same language names.
pub const LANGUAGES: &[(&str, &str, &str)] = &[
    ("rust", "demo_rust.wasm", "scripts/build-plugins.sh"),
    ("python", "demo_python.wasm", "scripts/build-python.sh"),
    ("js", "demo_js.wasm", "scripts/build-js.sh"),
];

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn language(lang: &str) -> (usize, &'static str, &'static str) {
    LANGUAGES
        .iter()
        .enumerate()
        .find(|(_, (l, _, _))| *l == lang)
        .map(|(i, (_, file, build))| (i, *file, *build))
        .unwrap_or_else(|| panic!("no language {lang:?} in LANGUAGES"))
}

/// The demo's file name, e.g. `demo_js.wasm`.
pub fn file_of(lang: &str) -> &'static str {
    language(lang).1
}

/// The built demo of `lang` in plugins/; a missing file fails the test with its build command.
pub fn demo_path(lang: &str) -> PathBuf {
    let (_, file, build) = language(lang);
    let path = root().join("plugins").join(file);
    if !path.is_file() {
        panic!(
            "the {lang} demo plugin {} is not built; build it with: {build}",
            path.display()
        );
    }
    path
}

/// The bytes of the demo of `lang`, once its compiled component is in the shared state folder
/// (a Python or JavaScript compile takes seconds: done once, by `worker-host check`).
pub fn demo(lang: &str) -> Vec<u8> {
    let run = warm(lang);
    assert_eq!(
        run.code,
        Some(0),
        "worker-host check of the {lang} demo failed:\n{}\n{}",
        run.stdout,
        run.stderr
    );
    let path = demo_path(lang);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The state folder of every component test: compiled components are cached there by content
/// hash, so each demo compiles once (and later test runs reuse it).
pub fn state_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_TARGET_TMPDIR"), "/components-state"))
}

/// `[state]` pointing at `dir`.
pub fn state_toml(dir: &Path) -> String {
    format!("[state]\ndir = \"{}\"\n\n", dir.display())
}

/// One `worker-host check`: exit code, output, how long it took.
#[derive(Debug, Clone)]
pub struct CheckRun {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

/// Runs `worker-host check` on `config`.
pub fn check(config: &Path) -> CheckRun {
    let started = Instant::now();
    let out = worker_host(&["check", "-c", config.to_str().expect("utf-8 path")], &[]);
    let took = started.elapsed();
    let (stdout, stderr) = text(&out);
    CheckRun {
        code: out.status.code(),
        stdout,
        stderr,
        took,
    }
}

/// A config folder whose subscriptions (queue name -> plugin file) run plugins from
/// `plugins_dir`, with `[state]` in `state`. No broker is needed to check it.
pub fn check_config(
    plugins_dir: &Path,
    state: &Path,
    subs: &BTreeMap<&str, &str>,
) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut toml = format!(
        "[broker]\nurl = \"{}\"\n\n[plugins]\ndir = \"{}\"\n\n{}",
        harness::broker_url(),
        plugins_dir.display(),
        state_toml(state)
    );
    for (queue, plugin) in subs {
        toml.push_str(&format!(
            "[[subscription]]\nqueue = \"{queue}\"\nplugin = \"{plugin}\"\nbindings = [\"{queue}\"]\n\n"
        ));
    }
    std::fs::write(dir.path().join("worker.toml"), toml).expect("write worker.toml");
    dir
}

/// `worker-host check` of the demo of `lang` against the shared state folder, run once per
/// test process (tests of the same language wait for it).
pub fn warm(lang: &str) -> &'static CheckRun {
    static RUNS: [OnceLock<CheckRun>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let (i, file, _) = language(lang);
    RUNS[i].get_or_init(|| {
        let path = demo_path(lang);
        let plugins = path.parent().expect("plugins folder");
        let config = check_config(plugins, &state_dir(), &BTreeMap::from([("demo", file)]));
        let run = check(&config.path().join("worker.toml"));
        println!(
            "worker-host check of the {lang} demo (shared state): {:?}",
            run.took
        );
        run
    })
}
