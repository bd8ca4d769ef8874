//! Poison deliveries (SPEC §3): messages RabbitMQ accepts but the client cannot decode are
//! parked, and a malformed `x-death` cannot wedge a retry queue. The host keeps its one
//! connection and handles everything around them.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use lapin::types::{AMQPValue, FieldArray, FieldTable};
use worker_host::headers;

use crate::faults::support::{Faults, script};
use crate::forwarder::Forwarder;
use crate::harness::{self, Host, headers_of, wait_get};
use crate::raw_amqp::{self, RawProps, RawPublisher, Target};

/// Normal messages published around each poison message.
const NORMAL: u32 = 200;
/// Not UTF-8 either, and kept byte for byte.
const POISON_BODY: &[u8] = b"o poison \xff\x00\xfe body";

/// The fault tests' config with broker `url`, retries after 200 ms.
fn toml(n: &Faults, url: &str, extra: &str) -> String {
    n.toml(url, None, &format!("retry_delays = [\"200ms\"]\n{extra}"))
}

/// Publishes `poison` (a raw property list) among `NORMAL` good messages, and checks that the
/// host parks it with `problem`, handles all the others exactly once, and never reconnects.
async fn parks_and_goes_on(test: &str, poison: Vec<u8>, problem: &str) {
    parks_and_goes_on_via(Forwarder::to_broker().await, test, poison, problem).await;
}

/// `parks_and_goes_on` with the host connected through `forwarder`.
async fn parks_and_goes_on_via(forwarder: Forwarder, test: &str, poison: Vec<u8>, problem: &str) {
    let n = Faults::new(test);
    let svc = Host::in_process(
        &toml(&n, &forwarder.url(), ""),
        &[("script.wasm", &script())],
    )
    .await;
    let (conn, ch) = harness::channel().await;
    harness::wait_consuming(&conn, &n.q()).await;

    // Good messages ask the plugin to publish their body to `out` ('o' = ok).
    let good = RawProps {
        headers: Some(raw_amqp::table(&[(
            b"pub-exchange",
            raw_amqp::long_str(n.out().as_bytes()),
        )])),
        delivery_mode: Some(2),
        ..RawProps::default()
    }
    .encode();
    let mut raw = RawPublisher::connect(&Target::broker()).await;
    for i in 0..NORMAL {
        if i == NORMAL / 2 {
            raw.publish(&n.master(), &n.q(), &poison, POISON_BODY).await;
        }
        let body = format!("o{i:04}");
        raw.publish(&n.master(), &n.q(), &good, body.as_bytes())
            .await;
    }
    raw.close().await;

    let parked = wait_get(&ch, &n.failed(), Duration::from_secs(30)).await;
    assert_eq!(parked.delivery.data, POISON_BODY, "body intact");
    let h = headers_of(&parked);
    assert_eq!(
        h["worker-error"],
        format!("undecodable delivery: {problem}")
    );
    assert_eq!(h["worker-failed-reason"], "fail");
    assert_eq!(h["worker-attempts"], "0", "the plugin never ran");
    assert_eq!(h["worker-plugin"], "script.wasm");
    assert_eq!(h["worker-plugin-sha256"].len(), 64);
    assert!(h["worker-failed-at"].contains('T'));
    assert_eq!(h["x-orig-routing-key"], n.q());
    assert!(
        !h.contains_key(lapin::protocol::UNDECODABLE_PROPERTIES_HEADER),
        "the decoder's marker is not republished: {h:?}"
    );
    assert_eq!(parked.delivery.properties.delivery_mode(), &Some(2));

    // Every good message reaches `seen` once (polled with a deadline).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut handled = BTreeSet::new();
    while handled.len() < NORMAL as usize {
        match harness::get(&ch, &n.seen()).await {
            Some(msg) => {
                let body = String::from_utf8(msg.delivery.data).expect("a test body");
                assert!(handled.insert(body.clone()), "{body} handled twice");
            }
            None => {
                let count = handled.len();
                assert!(
                    Instant::now() < deadline,
                    "{count} of {NORMAL} handled in 60 s"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    assert_eq!(forwarder.connections(), 1, "the host never reconnected");
    svc.stop().await;
    assert_eq!(harness::depth(&ch, &n.q()).await, 0, "everything acked");
    assert_eq!(harness::depth(&ch, &n.failed()).await, 0, "one parked only");
    assert!(
        harness::get(&ch, &n.seen()).await.is_none(),
        "nothing twice"
    );
    n.cleanup().await;
}

/// Headers `{ "k": value }` with a raw field value.
fn headers_with(key: &[u8], value: Vec<u8>) -> Vec<u8> {
    RawProps {
        headers: Some(raw_amqp::table(&[(key, value)])),
        delivery_mode: Some(2),
        ..RawProps::default()
    }
    .encode()
}

#[tokio::test]
async fn headers_nested_1500_deep_are_parked() {
    let poison = headers_with(b"deep", raw_amqp::nested_arrays(1500));
    parks_and_goes_on("deep", poison, "field tables nested deeper than 64 levels").await;
}

#[tokio::test]
async fn a_header_name_not_utf8_is_parked() {
    let poison = headers_with(b"bad-\xc3\x28-name", raw_amqp::long_str(b"v"));
    parks_and_goes_on("badkey", poison, "invalid UTF-8 in a short string").await;
}

#[tokio::test]
async fn a_message_id_not_utf8_is_parked() {
    let poison = RawProps {
        message_id: Some(b"id-\xff\xfe".to_vec()),
        delivery_mode: Some(2),
        ..RawProps::default()
    }
    .encode();
    parks_and_goes_on("badid", poison, "invalid UTF-8 in a short string").await;
}

#[tokio::test]
async fn a_content_type_not_utf8_is_parked() {
    let poison = RawProps {
        content_type: Some(b"text/\xe2\x82".to_vec()),
        delivery_mode: Some(2),
        ..RawProps::default()
    }
    .encode();
    parks_and_goes_on("badtype", poison, "invalid UTF-8 in a short string").await;
}

/// RabbitMQ refuses a header of unknown type at publish (INTERNAL_ERROR), so this one is made
/// on the way: the message carries `poison-field: void`, and a forwarder between broker and
/// host turns that value's type byte `V` into `Z`, a type no AMQP 0-9-1 peer knows (as a newer
/// broker or a pass-through proxy could deliver it).
#[tokio::test]
async fn an_unknown_field_type_is_parked() {
    const KEY: &[u8] = b"poison-field";
    let rewrite = |kind: u8, payload: &mut [u8]| {
        let mut entry = vec![KEY.len() as u8];
        entry.extend_from_slice(KEY);
        entry.push(b'V');
        if kind != 2 || payload.len() < entry.len() {
            return; // Content headers only.
        }
        if let Some(at) = payload.windows(entry.len()).position(|w| w == entry) {
            payload[at + entry.len() - 1] = b'Z';
        }
    };
    let forwarder = Forwarder::rewriting(std::sync::Arc::new(rewrite)).await;
    let poison = headers_with(KEY, vec![b'V']);
    parks_and_goes_on_via(forwarder, "badfield", poison, "unknown field type 'Z'").await;
}

/// An `x-death` that is an array of strings, not tables, on a message the plugin always
/// retries: the host never sends `x-death` back, so the retry queue's dead-lettering works and
/// the message ends parked once its retries are used up.
#[tokio::test]
async fn a_malformed_x_death_cannot_wedge_the_retry_queue() {
    let n = Faults::new("xdeathbad");
    let svc = Host::in_process(
        &toml(&n, &harness::broker_url(), "max_retries = 3"),
        &[("script.wasm", &script())],
    )
    .await;
    let (conn, ch) = harness::channel().await;
    harness::wait_consuming(&conn, &n.q()).await;
    let mut h = FieldTable::default();
    h.insert(
        "x-death".into(),
        AMQPValue::FieldArray(FieldArray::from(vec![headers::text("not a table")])),
    );
    h.insert("x-first-death-queue".into(), headers::text("elsewhere"));
    h.insert("x-last-death-reason".into(), headers::text("expired"));
    h.insert("mine".into(), headers::text("kept"));
    let queues = (n.master(), n.q(), n.failed());
    let route = (queues.0.as_str(), queues.1.as_str(), queues.2.as_str());
    let h = harness::retried_until_parked(&ch, route, h, Duration::from_secs(30)).await;
    assert_eq!(h["worker-failed-reason"], "retries-exhausted");
    assert_eq!(h["worker-attempts"], "4");
    assert_eq!(h["mine"], "kept");
    let broker_owned: Vec<_> = h.keys().filter(|k| headers::broker_owned(k)).collect();
    assert!(broker_owned.is_empty(), "republished {broker_owned:?}");
    svc.stop().await;
    assert_eq!(
        harness::depth(&ch, &n.retry("200ms")).await,
        0,
        "nothing stuck"
    );
    assert_eq!(harness::depth(&ch, &n.q()).await, 0);
    n.cleanup().await;
}
