//! The progress of `failed replay` and `discard` when stderr is no terminal: log lines
//! (`worker_host::progress`), one as the walk begins and one where it ends, with the figures;
//! stdout keeps its one line.

use super::support::*;
use crate::harness;

/// The progress lines among the JSON log lines of stderr, as their fields.
fn progress(stderr: &str) -> Vec<serde_json::Value> {
    stderr
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"))
        })
        .filter(|l| l["target"] == "worker_host::progress")
        .map(|l| l["fields"].clone())
        .collect()
}

#[tokio::test]
async fn replay_and_discard_log_progress_lines_when_stderr_is_no_terminal() {
    let s = Setup::new();
    s.declare().await;
    let (conn, ch) = harness::channel().await;
    let messages = (0..1500).map(|i| (s.failed(), b"x".to_vec(), parked(i, "fail", "later")));
    harness::publish_pipelined(&ch, "", messages).await;

    let (code, stdout, stderr) = run_failed(&s, "replay", &["--limit", "1200"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("moved 1200 messages"), "{stdout}");
    assert!(
        !stderr.contains('\u{1b}'),
        "no control codes off a terminal: {stderr}"
    );
    let lines = progress(&stderr);
    assert!(lines.len() >= 2, "{stderr}");
    let (first, last) = (&lines[0], &lines[lines.len() - 1]);
    assert_eq!(first["queue"], s.failed());
    assert_eq!(
        (&first["examined"], &first["total"]),
        (&0.into(), &1200.into())
    );
    assert_eq!(
        first["message"],
        format!("replay {}: 1200 messages to look at", s.failed())
    );
    assert_eq!(
        (&last["examined"], &last["done"]),
        (&1200.into(), &1200.into())
    );
    assert!(
        last["message"]
            .as_str()
            .is_some_and(|m| m.contains("1200 of 1200 looked at, 1200 moved")),
        "{last}"
    );

    let (code, stdout, stderr) = run_failed(&s, "discard", &["--all"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("discarded 300 messages"), "{stdout}");
    let lines = progress(&stderr);
    let last = lines
        .last()
        .unwrap_or_else(|| panic!("no progress in {stderr}"));
    assert_eq!(
        (&last["examined"], &last["done"], &last["total"]),
        (&300.into(), &300.into(), &300.into())
    );
    assert!(
        last["message"]
            .as_str()
            .is_some_and(|m| m.contains("300 removed")),
        "{last}"
    );
    assert_eq!(harness::depth(&ch, &s.failed()).await, 0);
    let _ = conn.close(200, "bye".into()).await;
    s.cleanup().await;
}
