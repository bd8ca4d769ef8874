//! The seed flow through the service: ok, fail, retry, exhaustion, publishes, failures.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lapin::BasicProperties;
use lapin::types::FieldTable;
use worker_host::headers;

use crate::harness::{self, Host, Names, headers_of, wait_get};

const SCRIPT: &str = include_str!("fixtures/script.wat");

/// A subscription on the script plugin, bound to `<p>.key.*`, with the given extra settings.
fn toml(n: &Names, extra: &str) -> String {
    format!(
        "{}{}[[subscription]]\nqueue = \"{}\"\nplugin = \"script.wasm\"\nbindings = [\"{}.key.*\"]\n\
         publish = [\"{}\"]\n{extra}\n",
        n.exchanges_toml(),
        n.out_toml("fanout"),
        n.q(),
        n.p,
        n.out()
    )
}

/// Deletes Q, its parked and retry queues, `seen`, `extra_queues` and the exchanges.
async fn cleanup(n: &Names, extra_queues: &[String]) {
    let mut queues = vec![n.q()];
    queues.extend_from_slice(extra_queues);
    n.cleanup(&queues).await;
}

fn script() -> Vec<u8> {
    wat::parse_str(SCRIPT).expect("script.wat parses")
}

fn props_publishing_to(exchange: &str) -> BasicProperties {
    let mut h = FieldTable::default();
    h.insert("pub-exchange".into(), headers::text(exchange));
    BasicProperties::default()
        .with_headers(h)
        .with_message_id("m-1".into())
        .with_correlation_id("c-1".into())
        .with_content_type("text/plain".into())
}

#[tokio::test]
async fn ok_acks_and_publishes_what_the_plugin_asked() {
    let n = Names::new("ok");
    let (svc, _conn, ch) = start(&n, "").await;
    let key = format!("{}.key.created", n.p);
    harness::publish(
        &ch,
        &n.master(),
        &key,
        b"o hello",
        props_publishing_to(&n.out()),
    )
    .await;
    let got = wait_get(&ch, &n.seen(), Duration::from_secs(10)).await;
    assert_eq!(got.delivery.data, b"o hello");
    assert_eq!(got.delivery.properties.delivery_mode(), &Some(2));
    svc.stop().await;
    assert_eq!(harness::depth(&ch, &n.q()).await, 0, "acked, not requeued");
    assert_eq!(harness::depth(&ch, &n.failed()).await, 0);
    cleanup(&n, &[]).await;
}

/// Starts the service and waits until it consumes its queue.
async fn start(n: &Names, extra: &str) -> (Host, lapin::Connection, lapin::Channel) {
    let svc = Host::in_process(&toml(n, extra), &[("script.wasm", &script())]).await;
    let (conn, ch) = harness::channel().await;
    harness::wait_consuming(&conn, &n.q()).await;
    (svc, conn, ch)
}

#[tokio::test]
async fn fail_parks_with_headers_and_properties() {
    let n = Names::new("fail");
    let (svc, _conn, ch) = start(&n, "").await;
    let key = format!("{}.key.created", n.p);
    harness::publish(&ch, &n.master(), &key, b"f", props_publishing_to(&n.out())).await;
    let got = wait_get(&ch, &n.failed(), Duration::from_secs(10)).await;
    let h = headers_of(&got);
    assert_eq!(h["worker-failed-reason"], "fail");
    assert_eq!(h["worker-error"], "script says no");
    assert_eq!(h["worker-attempts"], "1");
    assert_eq!(h["x-orig-routing-key"], key);
    assert_eq!(h["worker-plugin"], "script.wasm");
    assert_eq!(h["worker-plugin-sha256"].len(), 64);
    assert!(h["worker-failed-at"].contains('T'));
    assert_eq!(h["pub-exchange"], n.out(), "own headers kept");
    let props = &got.delivery.properties;
    assert_eq!(props.message_id().as_ref().map(|s| s.as_str()), Some("m-1"));
    assert_eq!(
        props.correlation_id().as_ref().map(|s| s.as_str()),
        Some("c-1")
    );
    assert_eq!(
        props.content_type().as_ref().map(|s| s.as_str()),
        Some("text/plain")
    );
    assert_eq!(props.delivery_mode(), &Some(2));
    assert!(
        harness::get(&ch, &n.seen()).await.is_none(),
        "nothing published on fail"
    );
    svc.stop().await;
    cleanup(&n, &[]).await;
}

#[tokio::test]
async fn retries_exhausted_after_the_configured_delays() {
    let n = Names::new("exhaust");
    let (svc, _conn, ch) =
        start(&n, "max_retries = 2\nretry_delays = [\"200ms\", \"400ms\"]").await;
    let started = Instant::now();
    harness::publish(
        &ch,
        &n.master(),
        &format!("{}.key.x", n.p),
        b"r0",
        props_publishing_to(&n.out()),
    )
    .await;
    let got = wait_get(&ch, &n.failed(), Duration::from_secs(15)).await;
    let waited = started.elapsed();
    let h = headers_of(&got);
    assert_eq!(h["worker-failed-reason"], "retries-exhausted");
    assert_eq!(h["worker-attempts"], "3");
    assert_eq!(h["worker-error"], "script says no");
    assert!(
        waited >= Duration::from_millis(600),
        "delays 200ms + 400ms respected, took {waited:?}"
    );
    assert!(
        harness::get(&ch, &n.seen()).await.is_none(),
        "nothing published on retry"
    );
    svc.stop().await;
    cleanup(&n, &[]).await;
}

#[tokio::test]
async fn retry_then_ok_publishes_once() {
    let n = Names::new("retryok");
    let (svc, _conn, ch) = start(&n, "max_retries = 5\nretry_delays = [\"200ms\"]").await;
    harness::publish(
        &ch,
        &n.master(),
        &format!("{}.key.x", n.p),
        b"r3",
        props_publishing_to(&n.out()),
    )
    .await;
    let got = wait_get(&ch, &n.seen(), Duration::from_secs(15)).await;
    assert_eq!(got.delivery.data, b"r3");
    svc.stop().await;
    assert!(
        harness::get(&ch, &n.seen()).await.is_none(),
        "published once, on the ok only"
    );
    assert_eq!(harness::depth(&ch, &n.failed()).await, 0);
    cleanup(&n, &[]).await;
}

#[tokio::test]
async fn a_retry_reaches_only_the_original_queue() {
    let n = Names::new("only");
    // A second subscription bound to the same key, whose plugin publishes every message it sees.
    let other = format!("{}.other", n.p);
    let extra = format!(
        "max_retries = 3\nretry_delays = [\"200ms\"]\n\n[[subscription]]\nqueue = \"{other}\"\n\
         plugin = \"script.wasm\"\nbindings = [\"{p}.key.*\"]\npublish = [\"{out}\"]\n\
         retry_delays = [\"200ms\"]\n",
        p = n.p,
        out = n.out()
    );
    let (svc, _conn, ch) = start(&n, &extra).await;
    // Both queues get the message; each retries once (through its own retry queue), then
    // publishes. A retry that leaked to the other queue would publish a third time.
    harness::publish(
        &ch,
        &n.master(),
        &format!("{}.key.x", n.p),
        b"r2",
        props_publishing_to(&n.out()),
    )
    .await;
    wait_get(&ch, &n.seen(), Duration::from_secs(15)).await;
    wait_get(&ch, &n.seen(), Duration::from_secs(15)).await;
    svc.stop().await;
    assert!(
        harness::get(&ch, &n.seen()).await.is_none(),
        "the retry did not reach the other queue"
    );
    cleanup(
        &n,
        &[
            other.clone(),
            format!("{other}@failed"),
            format!("{other}@retry.200ms"),
        ],
    )
    .await;
}

#[tokio::test]
async fn trap_timeout_and_memory_limit_count_as_retry_with_cause() {
    let n = Names::new("faults");
    let (svc, _conn, ch) = start(
        &n,
        "max_retries = 0\ntimeout = \"2s\"\nmemory_limit = \"2MiB\"",
    )
    .await;
    let key = format!("{}.key.x", n.p);
    let mut causes = BTreeMap::new();
    for body in [&b"t"[..], b"l", b"m", b"x"] {
        harness::publish(&ch, &n.master(), &key, body, BasicProperties::default()).await;
        let got = wait_get(&ch, &n.failed(), Duration::from_secs(15)).await;
        let h = headers_of(&got);
        assert_eq!(
            h["worker-failed-reason"], "retries-exhausted",
            "{body:?} counts as retry"
        );
        causes.insert(
            String::from_utf8_lossy(body).into_owned(),
            h["worker-error"].to_lowercase(),
        );
    }
    assert!(causes["t"].contains("unreachable"), "{causes:?}");
    assert!(
        causes["l"].contains("timeout") || causes["l"].contains("timed out"),
        "{causes:?}"
    );
    assert!(causes["m"].contains("memory"), "{causes:?}");
    assert!(
        causes["x"].contains('7'),
        "unknown answer code named: {causes:?}"
    );
    svc.stop().await;
    cleanup(&n, &[]).await;
}

#[tokio::test]
async fn publish_to_an_exchange_not_allowed_is_refused() {
    let n = Names::new("allow");
    let (svc, _conn, ch) = start(&n, "").await;
    // The plugin may publish to `out` only; ask it to publish to master.
    harness::publish(
        &ch,
        &n.master(),
        &format!("{}.key.x", n.p),
        b"o",
        props_publishing_to(&n.master()),
    )
    .await;
    let got = wait_get(&ch, &n.failed(), Duration::from_secs(10)).await;
    assert_eq!(headers_of(&got)["worker-error"], "publish refused");
    svc.stop().await;
    cleanup(&n, &[]).await;
}

#[tokio::test]
async fn quorum_subscription_works() {
    let n = Names::new("quorum");
    let (svc, _conn, ch) = start(
        &n,
        "queue_type = \"quorum\"\nmax_retries = 1\nretry_delays = [\"200ms\"]",
    )
    .await;
    let key = format!("{}.key.x", n.p);
    harness::publish(&ch, &n.master(), &key, b"r2", props_publishing_to(&n.out())).await;
    harness::publish(&ch, &n.master(), &key, b"f", BasicProperties::default()).await;
    wait_get(&ch, &n.seen(), Duration::from_secs(15)).await;
    wait_get(&ch, &n.failed(), Duration::from_secs(15)).await;
    svc.stop().await;
    // Declaring it as classic now must fail: it really is a quorum queue.
    let probe = _conn.create_channel().await.unwrap();
    let err = probe
        .queue_declare(
            n.q().as_str().into(),
            lapin::options::QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect_err("inequivalent arguments");
    // The broker names the first that differs: the type or the dead-lettering only quorum
    // subscriptions declare.
    assert!(err.to_string().contains("inequivalent arg"), "{err}");
    cleanup(&n, &[]).await;
}

/// A seed-style publisher counts retries in `x-death` only: its count is taken as calls made.
#[tokio::test]
async fn x_death_of_a_seed_retry_queue_counts_as_calls_made() {
    let n = Names::new("xdeath");
    let (svc, _conn, ch) = start(&n, "max_retries = 2\nretry_delays = [\"200ms\"]").await;
    let mut death = FieldTable::default();
    death.insert("queue".into(), headers::text(&format!("{}@retry", n.q())));
    death.insert("count".into(), lapin::types::AMQPValue::LongLongInt(2));
    death.insert("reason".into(), headers::text("expired"));
    let mut h = FieldTable::default();
    h.insert(
        "x-death".into(),
        lapin::types::AMQPValue::FieldArray(
            vec![lapin::types::AMQPValue::FieldTable(death)].into(),
        ),
    );
    // Two calls already made, so this is call 3 = max_retries + 1: a retry parks it.
    let queues = (n.master(), n.q(), n.failed());
    let route = (queues.0.as_str(), queues.1.as_str(), queues.2.as_str());
    let h = harness::retried_until_parked(&ch, route, h, Duration::from_secs(10)).await;
    assert_eq!(h["worker-failed-reason"], "retries-exhausted");
    assert_eq!(h["worker-attempts"], "3");
    svc.stop().await;
    cleanup(&n, &[]).await;
}
