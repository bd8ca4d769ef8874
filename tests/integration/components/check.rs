//! `worker-host check` (the real binary) on component plugins: the ABI it reports, one line per
//! refused file, and a restart that loads a compiled component from the state folder.

use std::collections::BTreeMap;
use std::time::Duration;

use super::support::{self, LANGUAGES};
use crate::cli::assert_no_panic;
use crate::reload::support::sha256_hex;

#[test]
fn check_reports_each_demo_as_a_v2_component() {
    for (lang, file, _) in LANGUAGES {
        let run = support::warm(lang);
        assert_eq!(run.code, Some(0), "{lang}:\n{}\n{}", run.stdout, run.stderr);
        let line = run
            .stdout
            .lines()
            .find(|l| l.contains(&format!("plugin {file} ok")))
            .unwrap_or_else(|| panic!("{lang}: no line for {file} in:\n{}", run.stdout));
        assert!(line.contains("v2 component"), "{lang}: {line}");
        // How long the compile took, or that an earlier run's artifact was read.
        assert!(
            line.contains(" compiled in ") || line.contains("from the compile cache in"),
            "{lang}: {line}"
        );
    }
}

/// A component exporting `handle` of another type (the world of some other host).
fn other_world() -> Vec<u8> {
    wat::parse_str(
        r#"(component
  (core module $m (func (export "f")))
  (core instance $i (instantiate $m))
  (func (export "handle") (canon lift (core func $i "f"))))"#,
    )
    .expect("component parses")
}

/// A component that imports an interface the host does not offer.
fn unknown_import() -> Vec<u8> {
    wat::parse_str(
        r#"(component (import "acme:billing/ledger@1.0.0" (instance (export "charge" (func)))))"#,
    )
    .expect("component parses")
}

#[test]
fn check_refuses_another_world_an_unknown_import_and_a_non_wasm_file_in_one_line_each() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).expect("plugins dir");
    std::fs::write(plugins.join("other_world.wasm"), other_world()).expect("write");
    std::fs::write(
        plugins.join("empty_world.wasm"),
        wat::parse_str("(component)").expect("wat"),
    )
    .expect("write");
    std::fs::write(plugins.join("unknown_import.wasm"), unknown_import()).expect("write");
    std::fs::write(plugins.join("notes.wasm"), b"# not a plugin\n").expect("write");
    let subs = BTreeMap::from([
        ("a", "other_world.wasm"),
        ("b", "empty_world.wasm"),
        ("c", "unknown_import.wasm"),
        ("d", "notes.wasm"),
    ]);
    let config = support::check_config(&plugins, &dir.path().join("state"), &subs);
    let run = support::check(&config.path().join("worker.toml"));
    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    assert_no_panic(&run.stderr);
    println!("{}", run.stderr);
    let expected = [
        ("other_world.wasm", "worker:plugin/handler@2.0.0"),
        ("empty_world.wasm", "worker:plugin/handler@2.0.0"),
        ("unknown_import.wasm", "acme:billing/ledger@1.0.0"),
        ("notes.wasm", "not a WebAssembly module"),
    ];
    for (file, reason) in expected {
        let lines: Vec<&str> = run.stderr.lines().filter(|l| l.contains(file)).collect();
        assert_eq!(lines.len(), 1, "one line for {file}:\n{}", run.stderr);
        assert!(
            lines[0].contains(reason),
            "{file}: {reason:?} missing: {}",
            lines[0]
        );
    }
}

/// The second check of the JS demo against the shared state folder (the first, `warm`, compiled
/// it there unless an earlier run had) loads the cached artifact instead of compiling again.
#[test]
fn a_restart_loads_the_compiled_component_from_the_state_folder() {
    let first = support::warm("js");
    assert_eq!(first.code, Some(0), "{}\n{}", first.stdout, first.stderr);
    let path = support::demo_path("js");
    let sha256 = sha256_hex(&std::fs::read(&path).expect("read the JS demo"));
    let cached = std::fs::read_dir(support::state_dir().join("compiled"))
        .expect("the compiled folder exists after a check")
        .filter_map(Result::ok)
        .any(|e| e.file_name().to_string_lossy().starts_with(&sha256));
    assert!(cached, "an artifact named by the file's sha256 {sha256}");

    let plugins = path.parent().expect("plugins folder");
    let subs = BTreeMap::from([("restart", support::file_of("js"))]);
    let config = support::check_config(plugins, &support::state_dir(), &subs);
    let second = support::check(&config.path().join("worker.toml"));
    assert_eq!(second.code, Some(0), "{}\n{}", second.stdout, second.stderr);
    assert!(
        second.stdout.contains("from the compile cache in"),
        "{}",
        second.stdout
    );
    println!(
        "worker-host check of the JS demo: first {:?} (compiled unless cached by an earlier run), \
         second (cached) {:?}",
        first.took, second.took
    );
    // A cold compile of the JS demo takes ~30 s in a debug build on 2 cores.
    assert!(
        second.took < Duration::from_secs(10),
        "a cached component loads fast: took {:?} (first {:?})",
        second.took,
        first.took
    );
}
