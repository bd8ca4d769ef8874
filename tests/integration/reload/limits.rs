//! Plugin files the host must refuse before reading them whole: larger than
//! `max_plugin_size`, or not WebAssembly at all.

use std::time::Duration;

use super::support::*;
use crate::harness::Names;

/// Peak resident memory of this process since the last reset, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status");
    kib * 1024
}

/// Resets the peak (Linux: writing 5 to clear_refs), so the next `peak_rss` covers only what
/// happens from now on.
fn reset_peak_rss() {
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak RSS");
}

#[tokio::test]
async fn a_huge_or_foreign_file_is_refused_unread_and_the_running_version_stays() {
    let (n, port, svc, plugin, _conn, ch) = start_hot("reload-huge").await;

    // A sparse 1GiB file (the default max_plugin_size is 256MiB) renamed over the plugin.
    // Reading it would take 1GiB; the peak is measured, since a buffer freed after a refusal
    // leaves the current RSS where it was. Other tests share this process: hence the margin.
    let refused = reloads(port, "failed").await;
    let huge = svc.dir().join("plugins/huge.tmp");
    std::fs::File::create(&huge)
        .and_then(|f| f.set_len(1 << 30))
        .expect("sparse file");
    reset_peak_rss();
    let before = peak_rss();
    std::fs::rename(&huge, &plugin).expect("rename over");
    let refused = wait_refused(port, refused, "a 1GiB file").await;
    let grown = peak_rss().saturating_sub(before);
    assert!(
        grown < 100 << 20,
        "peak RSS grew by {} MiB while refusing a 1GiB plugin",
        grown >> 20
    );
    assert_eq!(probe(&ch, &n, "after-huge").await, 0, "v0 keeps serving");

    // A small file that does not start like WebAssembly.
    write_via_rename(&plugin, b"#!/bin/sh\necho this is not a plugin\n");
    let _ = wait_refused(port, refused, "a shell script").await;
    assert_eq!(probe(&ch, &n, "after-script").await, 0, "v0 keeps serving");

    // A good version still gets in.
    write_via_rename(&plugin, &versioned(&n.out(), 1));
    probe_until(&ch, &n, 1, "good").await;

    svc.stop().await;
    n.cleanup(&[n.q()]).await;
}

#[tokio::test]
async fn a_plugin_over_the_limit_at_start_is_a_user_error_naming_file_size_and_limit() {
    let n = Names::new("start-huge");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("plugins")).expect("mkdir");
    std::fs::File::create(dir.path().join("plugins/hot.wasm"))
        .and_then(|f| f.set_len(1 << 30))
        .expect("sparse file");
    let path = dir.path().join("worker.toml");
    let toml = format!("{}{}", topology_toml(&n), sub_toml(&n, &n.q(), "key", ""));
    std::fs::write(&path, &toml).expect("write");
    let (config, _) = worker_host::config::Config::parse(&toml, &path).expect("valid config");
    let err = tokio::time::timeout(
        Duration::from_secs(30),
        worker_host::run(config, std::future::pending()),
    )
    .await
    .expect("run ends by itself")
    .expect_err("refused");
    let text = format!("{err:#}");
    assert!(
        text.contains(
            "hot.wasm: the file is 1GiB, larger than max_plugin_size (256MiB); it was not read"
        ),
        "{text}"
    );
    assert_eq!(worker_host::exit_code(&err), 1, "a user error");
}
