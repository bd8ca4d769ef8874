//! `failed list`, `replay` and `discard` against the real broker: a service whose plugin fails
//! every message, or parked-style messages published straight into the failed queue.

mod discard;
mod edit;
mod progress;
mod select;
mod support;

use std::time::Duration;

use lapin::BasicProperties;
use lapin::types::{AMQPValue, ByteArray, FieldArray, FieldTable};
use worker_host::failed::{self, FailedError, Selection};
use worker_host::headers;

use crate::harness;
use support::*;

/// Own headers of every AMQP kind the list must show as JSON.
fn rich_props() -> BasicProperties {
    let mut table = FieldTable::default();
    table.insert("k".into(), AMQPValue::LongInt(1));
    let mut h = FieldTable::default();
    h.insert("tenant".into(), headers::text("acme"));
    h.insert("flag".into(), AMQPValue::Boolean(true));
    h.insert("n".into(), AMQPValue::LongLongInt(-7));
    h.insert(
        "bytes".into(),
        AMQPValue::ByteArray(ByteArray::from(vec![0xde, 0xad])),
    );
    h.insert("table".into(), AMQPValue::FieldTable(table));
    h.insert(
        "list".into(),
        AMQPValue::FieldArray(FieldArray::from(vec![
            headers::text("a"),
            AMQPValue::LongInt(2),
        ])),
    );
    BasicProperties::default()
        .with_headers(h)
        .with_correlation_id("corr-1".into())
        .with_content_type("application/json".into())
        .with_content_encoding("identity".into())
        .with_priority(3)
        .with_timestamp(1_700_000_000)
        .with_reply_to("replies".into())
        .with_expiration("86400000".into())
        .with_type("user.created".into())
        .with_user_id("guest".into())
        .with_app_id("tests".into())
}

#[tokio::test]
async fn list_prints_every_header_the_properties_and_a_stable_id() {
    let s = Setup::new();
    let service = s.start().await;
    let (conn, ch) = harness::channel().await;
    harness::publish(&ch, &s.master(), "evt.created", b"body 0", props(0)).await;
    // No message id: the id is a digest.
    let long = vec![b'x'; 300];
    harness::publish(&ch, &s.master(), "evt.updated", &long, rich_props()).await;
    harness::publish(&ch, &s.master(), "evt.created", b"body 2", props(2)).await;
    wait_depth(&ch, &s.failed(), 3).await;
    service.stop().await;

    let lines = list_lines(&s, None).await;
    assert_eq!(lines.len(), 3);
    let first = &lines[0];
    eprintln!("{first}\n{}", lines[1]);
    assert_eq!(first["id"], "m0");
    assert_eq!(first["reason"], "fail");
    assert_eq!(first["cause"], "handler answered fail");
    assert_eq!(first["routing_key"], s.q());
    assert_eq!(first["original_routing_key"], "evt.created");
    assert_eq!(first["size"], 6);
    assert_eq!(first["body_preview"], "body 0");
    assert_eq!(first["body_truncated"], false);
    assert_eq!(first["properties"]["message_id"], "m0");
    assert_eq!(first["properties"]["delivery_mode"], 2);
    let h = &first["headers"];
    assert_eq!(h["mine"], "v0");
    assert_eq!(h[headers::ORIG_ROUTING_KEY], "evt.created");
    assert_eq!(h[headers::ATTEMPTS], 1);
    assert_eq!(h[headers::FAILED_REASON], "fail");
    assert_eq!(h[headers::ERROR], "handler answered fail");
    assert_eq!(h[headers::PLUGIN], "failing.wasm");
    assert!(h[headers::PLUGIN_SHA256].is_string(), "{h}");
    assert!(h[headers::FAILED_AT].is_string(), "{h}");

    let rich = &lines[1];
    let id = rich["id"].as_str().expect("id");
    assert!(id.starts_with(failed::DIGEST_PREFIX), "{id}");
    assert_eq!(id.len(), "sha256:".len() + 16);
    assert_eq!(rich["original_routing_key"], "evt.updated");
    assert_eq!(rich["size"], 300);
    assert_eq!(rich["body_truncated"], true);
    assert_eq!(
        rich["body_preview"].as_str().map(str::len),
        Some(failed::PREVIEW_BYTES)
    );
    let h = &rich["headers"];
    assert_eq!(h["tenant"], "acme");
    assert_eq!(h["flag"], true);
    assert_eq!(h["n"], -7);
    assert_eq!(h["bytes"], "dead");
    assert_eq!(h["table"], serde_json::json!({"k": 1}));
    assert_eq!(h["list"], serde_json::json!(["a", 2]));
    assert_eq!(
        rich["properties"],
        serde_json::json!({
            "correlation_id": "corr-1",
            "content_type": "application/json",
            "content_encoding": "identity",
            "delivery_mode": 2,
            "priority": 3,
            "timestamp": 1_700_000_000u64,
            "reply_to": "replies",
            "expiration": "86400000",
            "type": "user.created",
            "user_id": "guest",
            "app_id": "tests",
        })
    );

    // Listing again: same ids in the same order, nothing taken; --limit takes the first ones.
    assert_eq!(ids(&list_lines(&s, None).await), ids(&lines));
    assert_eq!(ids(&list_lines(&s, Some(2)).await), ids(&lines[..2]));
    wait_depth(&ch, &s.failed(), 3).await;
    assert_eq!(drain_ids(&ch, &s.failed()).await, ["m0", "", "m2"]);

    let _ = conn.close(200, "bye".into()).await;
    s.cleanup().await;
}

#[tokio::test]
async fn replay_moves_messages_to_their_queue_alone_with_their_headers() {
    let s = Setup::new();
    let service = s.start().await;
    let (conn, ch) = harness::channel().await;
    for i in 0..3 {
        harness::publish(&ch, &s.master(), "evt.created", b"x", props(i)).await;
    }
    wait_depth(&ch, &s.failed(), 3).await;
    service.stop().await;
    assert_eq!(harness::depth(&ch, &s.other()).await, 3);

    let report = failed::replay(
        &s.config(),
        &s.q(),
        &Selection::First(2),
        failed::Watch::none(),
    )
    .await
    .expect("replay");
    assert_eq!(report.done, 2);
    assert!(report.missing.is_empty());
    wait_depth(&ch, &s.q(), 2).await;
    assert_eq!(harness::depth(&ch, &s.failed()).await, 1);
    // The other subscriber of evt.* got nothing more.
    assert_eq!(harness::depth(&ch, &s.other()).await, 3);

    for i in 0..2 {
        let msg = harness::get(&ch, &s.q()).await.expect("a replayed message");
        let props = &msg.delivery.properties;
        assert_eq!(
            props.message_id().as_ref().map(|m| m.as_str().to_string()),
            Some(format!("m{i}"))
        );
        assert_eq!(msg.delivery.routing_key.as_str(), s.q());
        assert_eq!(*props.delivery_mode(), Some(2));
        let h = harness::headers_of(&msg);
        assert_eq!(h[headers::ATTEMPTS], "0");
        assert_eq!(h[headers::ORIG_ROUTING_KEY], "evt.created");
        assert_eq!(h["mine"], format!("v{i}"));
        assert_eq!(h[headers::FAILED_REASON], "fail");
        assert!(matches!(
            props
                .headers()
                .as_ref()
                .and_then(|h| h.inner().get(headers::ATTEMPTS)),
            Some(AMQPValue::LongLongInt(0))
        ));
    }

    let _ = conn.close(200, "bye".into()).await;
    s.cleanup().await;
}

#[tokio::test]
async fn replay_ends_while_the_plugin_still_fails() {
    const N: usize = 40;
    let s = Setup::new();
    let service = s.start().await;
    let (conn, ch) = harness::channel().await;
    for i in 0..N {
        harness::publish(&ch, &s.master(), "evt.created", b"x", props(i)).await;
    }
    wait_depth(&ch, &s.failed(), N as u32).await;

    // The service keeps failing what is replayed, parking it again behind the originals.
    let report = tokio::time::timeout(
        Duration::from_secs(30),
        failed::replay(&s.config(), &s.q(), &Selection::All, failed::Watch::none()),
    )
    .await
    .expect("replay terminates")
    .expect("replay");
    assert_eq!(report.done, N as u64);
    wait_depth(&ch, &s.failed(), N as u32).await;
    let again = harness::get(&ch, &s.failed()).await.expect("parked again");
    let h = harness::headers_of(&again);
    assert_eq!(h[headers::ATTEMPTS], "1");
    assert_eq!(h[headers::ORIG_ROUTING_KEY], "evt.created");
    assert_eq!(harness::depth(&ch, &s.other()).await, N as u32);

    service.stop().await;
    let _ = conn.close(200, "bye".into()).await;
    s.cleanup().await;
}

#[tokio::test]
async fn an_unknown_queue_is_a_user_error() {
    let s = Setup::new();
    let config = s.config();

    let err = failed::list(&config, "nope", &Selection::All, &mut Vec::new())
        .await
        .expect_err("unknown queue");
    assert!(matches!(
        err.downcast_ref::<FailedError>(),
        Some(FailedError::UnknownQueue { .. })
    ));
    assert!(
        err.to_string().contains(&s.q()),
        "lists the known queues: {err}"
    );

    let err = failed::replay(&config, &s.failed(), &Selection::All, failed::Watch::none())
        .await
        .expect_err("the @failed name");
    assert!(err.to_string().contains("not its failed queue"), "{err}");
    let err = failed::discard(&config, "nope", &Selection::All, failed::Watch::none())
        .await
        .expect_err("unknown queue");
    assert!(matches!(
        err.downcast_ref::<FailedError>(),
        Some(FailedError::UnknownQueue { .. })
    ));

    // Never declared: the failed queue is missing on the broker.
    let err = failed::discard(&config, &s.q(), &Selection::All, failed::Watch::none())
        .await
        .expect_err("missing queue");
    assert!(matches!(
        err.downcast_ref::<FailedError>(),
        Some(FailedError::Missing { .. })
    ));
}
