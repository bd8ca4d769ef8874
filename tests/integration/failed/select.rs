//! `failed replay --id / --reason`: exactly the selected messages move, the others stay parked
//! in their order; replay drops the broker's dead-letter headers.

use lapin::types::{AMQPValue, FieldArray, FieldTable};
use worker_host::failed::{self, Selection};
use worker_host::headers;

use super::support::*;
use crate::harness;

#[tokio::test]
async fn replay_by_id_moves_exactly_those_and_reports_unknown_ids() {
    let s = Setup::new();
    s.declare().await;
    let (conn, ch) = harness::channel().await;
    for i in 0..5 {
        s.park(&ch, parked(i, "fail", "bad json"), b"x").await;
    }
    // No message id: selected by its digest, as `failed list` shows it.
    let anonymous = parked(5, "fail", "bad json").with_message_id("".into());
    s.park(&ch, anonymous, b"anonymous").await;
    let listed = ids(&list_lines(&s, None).await);
    let digest = listed[5].clone();
    assert!(digest.starts_with("sha256:"), "{listed:?}");

    let selection = Selection::ids(["m3", "m1", "nope", digest.as_str()]);
    let report = failed::replay(&s.config(), &s.q(), &selection, failed::Watch::none())
        .await
        .expect("replay");
    assert_eq!(report.done, 3);
    assert_eq!(report.missing, ["nope"]);
    assert_eq!(drain_ids(&ch, &s.q()).await, ["m1", "m3", ""]);
    assert_eq!(drain_ids(&ch, &s.failed()).await, ["m0", "m2", "m4"]);

    let _ = conn.close(200, "bye".into()).await;
    s.cleanup().await;
}

#[tokio::test]
async fn replay_by_reason_moves_exactly_the_matching_ones() {
    let s = Setup::new();
    s.declare().await;
    let (conn, ch) = harness::channel().await;
    let causes = [
        ("fail", "bad json at line 1"),
        (
            "retries-exhausted",
            "timeout: handler still running after 8s",
        ),
        ("fail", "Timeout (other case)"),
        ("retries-exhausted", "db down"),
        ("fail", "timeout: handler still running after 8s"),
    ];
    for (i, (reason, cause)) in causes.iter().enumerate() {
        s.park(&ch, parked(i, reason, cause), b"x").await;
    }

    let by_cause = Selection::Reason("timeout".into());
    let report = failed::replay(&s.config(), &s.q(), &by_cause, failed::Watch::none())
        .await
        .expect("replay");
    assert_eq!(report.done, 2);
    assert!(report.missing.is_empty());
    assert_eq!(drain_ids(&ch, &s.q()).await, ["m1", "m4"]);

    // The exact parked reason selects too.
    let by_reason = Selection::Reason("retries-exhausted".into());
    let report = failed::replay(&s.config(), &s.q(), &by_reason, failed::Watch::none())
        .await
        .expect("replay");
    assert_eq!(report.done, 1);
    assert_eq!(drain_ids(&ch, &s.q()).await, ["m3"]);
    assert_eq!(drain_ids(&ch, &s.failed()).await, ["m0", "m2"]);

    let _ = conn.close(200, "bye".into()).await;
    s.cleanup().await;
}

#[tokio::test]
async fn replay_drops_the_broker_dead_letter_headers() {
    let s = Setup::new();
    s.declare().await;
    let (conn, ch) = harness::channel().await;
    let mut death = FieldTable::default();
    death.insert(
        "queue".into(),
        headers::text(&format!("{}@retry.1s", s.q())),
    );
    death.insert("reason".into(), headers::text("expired"));
    death.insert("count".into(), AMQPValue::LongLongInt(2));
    let props = parked(0, "retries-exhausted", "later");
    let mut h = props.headers().clone().expect("headers");
    h.insert(
        "x-death".into(),
        AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(death)])),
    );
    h.insert("x-first-death-queue".into(), headers::text("q@retry.1s"));
    h.insert("x-first-death-reason".into(), headers::text("expired"));
    h.insert("x-last-death-exchange".into(), headers::text("retry"));
    s.park(&ch, props.with_headers(h), b"dead").await;

    let report = failed::replay(&s.config(), &s.q(), &Selection::All, failed::Watch::none())
        .await
        .expect("replay");
    assert_eq!(report.done, 1);
    let msg = harness::wait_get(&ch, &s.q(), std::time::Duration::from_secs(10)).await;
    assert_eq!(msg.delivery.data, b"dead");
    let h = harness::headers_of(&msg);
    assert!(
        !h.keys().any(|k| k.starts_with("x-death")
            || k.starts_with("x-first-death-")
            || k.starts_with("x-last-death-")),
        "broker-owned headers kept: {h:?}"
    );
    assert_eq!(h[headers::ATTEMPTS], "0");
    assert_eq!(h[headers::ORIG_ROUTING_KEY], "evt.created");
    assert_eq!(h[headers::ERROR], "later");
    assert_eq!(h["mine"], "v0");

    let _ = conn.close(200, "bye".into()).await;
    s.cleanup().await;
}

/// Quorum queues add `x-delivery-count` (and from RabbitMQ 4.0 `x-acquired-count`) on every
/// redelivery and keep returned messages apart:
/// ids stay stable and the messages left parked keep their order all the same.
#[tokio::test]
async fn a_quorum_failed_queue_keeps_ids_and_order() {
    let s = Setup::quorum();
    s.declare().await;
    let (conn, ch) = harness::channel().await;
    for i in 0..4 {
        let props = parked(i, "fail", "bad json").with_message_id("".into());
        s.park(&ch, props, format!("body {i}").as_bytes()).await;
    }
    let first = ids(&list_lines(&s, None).await);
    let second = list_lines(&s, None).await;
    assert_eq!(ids(&second), first);
    assert!(
        second[0]["headers"].get("x-delivery-count").is_some(),
        "the broker counts redeliveries: {}",
        second[0]
    );
    assert!(
        first.iter().all(|id| id.starts_with("sha256:")),
        "{first:?}"
    );

    let selection = Selection::ids([first[1].as_str(), first[2].as_str()]);
    let report = failed::replay(&s.config(), &s.q(), &selection, failed::Watch::none())
        .await
        .expect("replay");
    assert_eq!(report.done, 2);
    assert!(report.missing.is_empty());
    let left = list_lines(&s, None).await;
    assert_eq!(ids(&left), [first[0].clone(), first[3].clone()]);
    assert_eq!(left[1]["body_preview"], "body 3");

    let _ = conn.close(200, "bye".into()).await;
    s.cleanup().await;
}
