//! Log colour: escape codes only on a terminal, never with `NO_COLOR` or `--log-format json`.
//! The binary runs `run` on a config with a warning (a subscription without bindings, logged at
//! WARN) and a plugin that is not wasm, so it logs and exits 1 without a broker.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::cli::text;

const ESC: &str = "\x1b[";

/// A folder with a worker.toml whose `run` logs a warning, then stops on its plugin.
fn config() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("plugins")).expect("plugins");
    std::fs::write(dir.path().join("plugins/bad.wasm"), b"not wasm").expect("plugin");
    let path = dir.path().join("worker.toml");
    std::fs::write(
        &path,
        "[broker]\nurl = \"amqp://127.0.0.1:1\"\n\n\
         [[subscription]]\nqueue = \"colour-lonely\"\nplugin = \"bad.wasm\"\n",
    )
    .expect("worker.toml");
    (dir, path)
}

fn host(config: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_worker-host"));
    cmd.args(["run", "-c"])
        .arg(config)
        .env_remove("NO_COLOR")
        .env_remove("WORKER_LOG_FORMAT")
        .env_remove("WORKER_BROKER_URL");
    cmd
}

/// The warning went through the log, so the run said something that could carry colour.
fn assert_logged(log: &str) {
    assert!(
        log.contains("has no bindings"),
        "the warning is logged: {log}"
    );
}

#[test]
fn logs_to_a_pipe_or_a_file_have_no_escape_codes() {
    let (_dir, config) = config();
    let piped = host(&config).output().expect("run");
    let (_, stderr) = text(&piped);
    assert_eq!(piped.status.code(), Some(1), "{stderr}");
    assert_logged(&stderr);
    assert!(!stderr.contains(ESC), "colour in a pipe: {stderr:?}");

    let file = tempfile::NamedTempFile::new().expect("log file");
    let status = host(&config)
        .stdout(Stdio::null())
        .stderr(file.reopen().expect("reopen"))
        .status()
        .expect("run");
    assert_eq!(status.code(), Some(1));
    let log = std::fs::read_to_string(file.path()).expect("log");
    assert_logged(&log);
    assert!(!log.contains(ESC), "colour in a file: {log:?}");
}

/// `worker-host run` on a terminal: util-linux's `script` gives it one and copies what it
/// writes to a pipe. Returns what the terminal showed.
fn on_a_terminal(config: &Path, env: &[(&str, &str)], args: &str) -> String {
    let command = format!(
        "{} {args} run -c {}",
        env!("CARGO_BIN_EXE_worker-host"),
        config.display()
    );
    let mut cmd = Command::new("script");
    cmd.args(["--quiet", "--return", "--command", &command, "/dev/null"])
        .env_remove("NO_COLOR")
        .env_remove("WORKER_LOG_FORMAT")
        .env_remove("WORKER_BROKER_URL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run script");
    let (shown, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}\n{stderr}");
    assert_logged(&shown);
    shown
}

#[test]
fn a_terminal_gets_colour_unless_no_color_or_json() {
    let (_dir, config) = config();
    let shown = on_a_terminal(&config, &[], "");
    assert!(shown.contains(ESC), "a terminal gets colour: {shown:?}");
    let shown = on_a_terminal(&config, &[("NO_COLOR", "1")], "");
    assert!(!shown.contains(ESC), "NO_COLOR=1: {shown:?}");
    // An empty NO_COLOR does not count (no-color.org).
    let shown = on_a_terminal(&config, &[("NO_COLOR", "")], "");
    assert!(shown.contains(ESC), "NO_COLOR empty: {shown:?}");
    let shown = on_a_terminal(&config, &[], "--log-format json");
    assert!(!shown.contains(ESC), "--log-format json: {shown:?}");
}
