//! `failed discard` through the binary: exactly the selected messages go, one JSON audit line
//! each; unknown ids are reported and exit 1.

use worker_host::failed::{self, Selection};

use super::support::*;
use crate::harness;

/// Runs `worker-host --log-format json failed discard -c <setup> --queue <q> ARGS...`.
fn discard(s: &Setup, args: &[&str]) -> (Option<i32>, String, Vec<serde_json::Value>) {
    let (code, stdout, stderr) = run_failed(s, "discard", args);
    let logs = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not JSON: {l}")))
        .collect();
    (code, stdout, logs)
}

fn audits(logs: &[serde_json::Value]) -> Vec<&serde_json::Value> {
    logs.iter()
        .filter(|l| l["target"] == failed::AUDIT_TARGET)
        .map(|l| &l["fields"])
        .collect()
}

#[tokio::test]
async fn discard_by_id_removes_exactly_those_with_one_audit_line_each() {
    let s = Setup::new();
    s.declare().await;
    let (conn, ch) = harness::channel().await;
    for i in 0..5 {
        s.park(&ch, parked(i, "fail", &format!("cause {i}")), b"x")
            .await;
    }

    let (code, stdout, logs) = discard(&s, &["--id", "m1", "nope", "--id", "m3"]);
    assert_eq!(code, Some(1), "an unknown id exits 1: {stdout} {logs:?}");
    assert!(
        stdout.contains(&format!("discarded 2 messages from {}", s.failed())),
        "{stdout}"
    );
    let audits = audits(&logs);
    assert_eq!(audits.len(), 2, "{logs:?}");
    for (audit, i) in audits.iter().zip([1, 3]) {
        assert_eq!(audit["message"], "discarded");
        assert_eq!(audit["id"], format!("m{i}"));
        assert_eq!(audit["queue"], s.q());
        assert_eq!(audit["reason"], "fail");
        assert_eq!(audit["cause"], format!("cause {i}"));
        let time = audit["time"].as_str().expect("time");
        humantime::parse_rfc3339(time).unwrap_or_else(|e| panic!("{time}: {e}"));
    }
    let error = logs.last().expect("an error line");
    assert_eq!(error["level"], "ERROR");
    assert!(
        error["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("\"nope\"") && !m.contains("m1")),
        "{error}"
    );
    assert_eq!(drain_ids(&ch, &s.failed()).await, ["m0", "m2", "m4"]);

    let _ = conn.close(200, "bye".into()).await;
    s.cleanup().await;
}

#[tokio::test]
async fn discard_all_empties_the_failed_queue() {
    let s = Setup::new();
    s.declare().await;
    let (conn, ch) = harness::channel().await;
    for i in 0..300 {
        s.park(&ch, parked(i, "retries-exhausted", "later"), b"x")
            .await;
    }

    let (code, stdout, logs) = discard(&s, &["--all"]);
    assert_eq!(code, Some(0), "{stdout} {logs:?}");
    assert!(stdout.contains("discarded 300 messages"), "{stdout}");
    let audits = audits(&logs);
    assert_eq!(audits.len(), 300);
    assert_eq!(audits[299]["id"], "m299");
    assert_eq!(harness::depth(&ch, &s.failed()).await, 0);

    // Nothing left: the library says 0, the binary succeeds.
    let report = failed::discard(&s.config(), &s.q(), &Selection::All, failed::Watch::none())
        .await
        .expect("discard");
    assert_eq!(report.done, 0);

    let _ = conn.close(200, "bye".into()).await;
    s.cleanup().await;
}
