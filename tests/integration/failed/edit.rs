//! `failed edit` through the binary: the edited copy goes to the queue under `<id>.edit1`, with
//! a header naming the original; the original leaves the failed queue, and one audit line says
//! what changed. A JSON body must stay JSON: the message then stays parked.

use worker_host::failed;

use super::support::*;
use crate::harness;

/// Runs `worker-host --log-format json failed edit -c <setup> --queue <q> ARGS...`.
fn edit(s: &Setup, args: &[&str]) -> (Option<i32>, String, Vec<serde_json::Value>) {
    let (code, stdout, stderr) = run_failed(s, "edit", args);
    let logs = stderr
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (code, stdout, logs)
}

#[tokio::test]
async fn edit_replays_a_copy_under_a_new_id_and_removes_the_original_with_an_audit_line() {
    let s = Setup::new();
    s.declare().await;
    let (_conn, ch) = harness::channel().await;
    s.park(&ch, parked(1, "fail", "bad total"), br#"{"total": -1}"#)
        .await;
    s.park(&ch, parked(2, "fail", "other"), b"x").await;
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{not json").expect("write");
    let good = dir.path().join("good.json");
    std::fs::write(&good, r#"{"total": 10}"#).expect("write");

    let bad_arg = bad.to_str().expect("utf-8");
    let (code, stdout, logs) = edit(&s, &["--id", "m1", "--body", bad_arg]);
    assert_eq!(code, Some(1), "refused: {stdout} {logs:?}");
    assert_eq!(harness::depth(&ch, &s.failed()).await, 2, "nothing moved");

    let good_arg = good.to_str().expect("utf-8");
    let args = [
        "--id",
        "m1",
        "--body",
        good_arg,
        "--header",
        "fixed-by=ops",
        "--remove-header",
        "mine",
    ];
    let (code, stdout, logs) = edit(&s, &args);
    assert_eq!(code, Some(0), "{stdout} {logs:?}");
    assert!(stdout.contains("as m1.edit1"), "{stdout}");
    let audits: Vec<_> = logs
        .iter()
        .filter(|l| l["target"] == failed::AUDIT_TARGET)
        .map(|l| &l["fields"])
        .collect();
    assert_eq!(audits.len(), 1, "{logs:?}");
    assert_eq!(audits[0]["message"], "edited and replayed");
    assert_eq!(audits[0]["id"], "m1");
    assert_eq!(audits[0]["copy"], "m1.edit1");
    assert_eq!(
        audits[0]["diff"],
        "body 13 -> 13 bytes; headers +fixed-by -mine"
    );

    wait_depth(&ch, &s.q(), 1).await;
    let copy = harness::get(&ch, &s.q()).await.expect("the copy");
    let props = &copy.delivery.properties;
    assert_eq!(
        props.message_id().as_ref().map(|m| m.as_str()),
        Some("m1.edit1")
    );
    let headers = worker_host::headers::render_headers(props.headers().as_ref());
    assert!(
        headers.contains(&(failed::EDITED_FROM.into(), "m1".into())),
        "{headers:?}"
    );
    assert!(
        headers.contains(&("fixed-by".into(), "ops".into())),
        "{headers:?}"
    );
    assert_eq!(copy.delivery.data, br#"{"total": 10}"#);
    assert_eq!(
        drain_ids(&ch, &s.failed()).await,
        ["m2"],
        "the original is gone"
    );
    s.cleanup().await;
}
