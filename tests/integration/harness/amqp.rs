//! The test broker as the tests see it: its URL, connections and channels, publishing with
//! confirms, taking and counting messages, waiting for consumers, and deleting what a test
//! declared.

use std::time::Duration;

use lapin::{Connection, ConnectionProperties};

use super::eventually;

/// The broker the tests use.
pub fn broker_url() -> String {
    std::env::var("WORKER_TEST_BROKER_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_string())
}

/// Connects to the test broker, or panics with the command that starts it.
pub async fn connect() -> Connection {
    let url = broker_url();
    match Connection::connect(&url, ConnectionProperties::default()).await {
        Ok(conn) => conn,
        Err(err) => panic!(
            "RabbitMQ is not reachable at {url}: {err}\n\
             start it with: rabbitmq-server -detached\n\
             (install it with: apt-get update && apt-get install -y rabbitmq-server)"
        ),
    }
}

/// A channel on a fresh connection, with confirms on.
pub async fn channel() -> (Connection, lapin::Channel) {
    let conn = connect().await;
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(lapin::options::ConfirmSelectOptions::default())
        .await
        .expect("confirm_select");
    (conn, ch)
}

/// Publishes a persistent message and waits for its confirm.
pub async fn publish(
    ch: &lapin::Channel,
    exchange: &str,
    key: &str,
    body: &[u8],
    props: lapin::BasicProperties,
) {
    let confirm = ch
        .basic_publish(
            exchange.into(),
            key.into(),
            lapin::options::BasicPublishOptions::default(),
            body,
            props.with_delivery_mode(2),
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    assert!(confirm.is_ack(), "broker refused the publish");
}

/// Publishes (routing key, body, properties) to `exchange` as persistent messages on `ch`,
/// which has confirms on, pipelined: all sends, then all confirms.
pub async fn publish_pipelined(
    ch: &lapin::Channel,
    exchange: &str,
    messages: impl IntoIterator<Item = (String, Vec<u8>, lapin::BasicProperties)>,
) {
    let mut confirms = Vec::new();
    for (key, body, props) in messages {
        let confirm = ch
            .basic_publish(
                exchange.into(),
                key.as_str().into(),
                lapin::options::BasicPublishOptions::default(),
                &body,
                props.with_delivery_mode(2),
            )
            .await
            .expect("publish");
        confirms.push(confirm);
    }
    for confirm in confirms {
        assert!(
            confirm.await.expect("confirm").is_ack(),
            "broker refused a publish"
        );
    }
}

/// Takes one message from `queue` (acked), if any.
pub async fn get(ch: &lapin::Channel, queue: &str) -> Option<lapin::message::BasicGetMessage> {
    ch.basic_get(
        queue.into(),
        lapin::options::BasicGetOptions { no_ack: true },
    )
    .await
    .expect("basic_get")
}

/// Messages ready in `queue` (declares it passively; panics if missing).
pub async fn depth(ch: &lapin::Channel, queue: &str) -> u32 {
    passive(ch, queue)
        .await
        .unwrap_or_else(|e| panic!("queue {queue} missing: {e}"))
        .message_count()
}

/// A passive declare of `queue`: what the broker says of it, or why not (it closes `ch`).
async fn passive(ch: &lapin::Channel, queue: &str) -> lapin::Result<lapin::Queue> {
    ch.queue_declare(
        queue.into(),
        lapin::options::QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        lapin::types::FieldTable::default(),
    )
    .await
}

/// Deletes queues and exchanges a test declared (ignores ones already gone).
pub async fn cleanup(queues: &[String], exchanges: &[String]) {
    let conn = connect().await;
    for q in queues {
        if let Ok(ch) = conn.create_channel().await {
            let _ = ch.queue_delete(q.as_str().into(), Default::default()).await;
        }
    }
    for e in exchanges {
        if let Ok(ch) = conn.create_channel().await {
            let _ = ch
                .exchange_delete(e.as_str().into(), Default::default())
                .await;
        }
    }
    let _ = conn.close(200, "bye".into()).await;
}

/// `queue` as the broker sees it (messages, consumers), or None when it does not exist.
/// Uses a fresh channel: a failed passive declare closes its channel (and lapin may then fail
/// the next channel open with that error once: also None, so a polling caller tries again).
pub async fn probe(conn: &Connection, queue: &str) -> Option<lapin::Queue> {
    let ch = conn.create_channel().await.ok()?;
    let q = passive(&ch, queue).await.ok();
    if q.is_some() {
        let _ = ch.close(200, "probe".into()).await;
    }
    q
}

/// Waits until `queue` exists and has a consumer (the service is up and bound), up to 60 s: a
/// service may compile a Python or JS component first, slowly on a loaded machine.
pub async fn wait_consuming(conn: &Connection, queue: &str) {
    eventually(
        Duration::from_secs(60),
        &format!("a consumer on {queue}"),
        || async { probe(conn, queue).await.filter(|q| q.consumer_count() > 0) },
    )
    .await;
}

/// A message's headers rendered as text, by name.
pub fn headers_of(
    msg: &lapin::message::BasicGetMessage,
) -> std::collections::BTreeMap<String, String> {
    worker_host::headers::render_headers(msg.delivery.properties.headers().as_ref())
        .into_iter()
        .collect()
}

/// Waits for a message in `queue` and takes it.
pub async fn wait_get(
    ch: &lapin::Channel,
    queue: &str,
    timeout: Duration,
) -> lapin::message::BasicGetMessage {
    eventually(timeout, &format!("a message in {queue}"), || async {
        get(ch, queue).await
    })
    .await
}

/// Publishes to `queue` (through `exchange`) a message the script plugin retries on every call
/// ("r0"), carrying `headers`, and returns the headers of its copy parked in `failed`.
pub async fn retried_until_parked(
    ch: &lapin::Channel,
    (exchange, queue, failed): (&str, &str, &str),
    headers: lapin::types::FieldTable,
    timeout: Duration,
) -> std::collections::BTreeMap<String, String> {
    let props = lapin::BasicProperties::default().with_headers(headers);
    publish(ch, exchange, queue, b"r0", props).await;
    headers_of(&wait_get(ch, failed, timeout).await)
}
