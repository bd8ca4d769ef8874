//! Delayed delivery (SPEC section 5) against the real broker: ordering without head-of-line
//! blocking, precision over a spread of delays, parking for a missing exchange, the maximum,
//! and (run alone, it restarts the broker) durability across a broker restart.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ExchangeKind};
use tokio_util::sync::CancellationToken;
use worker_host::delay::{DelayError, DelayPublishError, Delayer};
use worker_host::topology::Destination;

use crate::harness;

/// A delay topology under a unique prefix, with a mover that reconnects until stopped.
struct Topology {
    delayer: Delayer,
    cancel: CancellationToken,
    mover: tokio::task::JoinHandle<()>,
}

impl Topology {
    async fn start(levels: u8) -> Topology {
        let delayer = Delayer::new(levels)
            .expect("valid levels")
            .with_prefix(harness::unique("wd"));
        let conn = harness::connect().await;
        delayer
            .declare(&conn)
            .await
            .expect("declare the delay topology");
        let _ = conn.close(200, "declared".into()).await;
        let cancel = CancellationToken::new();
        let mover = tokio::spawn(mover_forever(delayer.clone(), cancel.clone()));
        Topology {
            delayer,
            cancel,
            mover,
        }
    }

    async fn stop(self) {
        self.cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.mover).await;
        let plan = self.delayer.plan();
        let queues: Vec<String> = plan.queues.iter().map(|q| q.name.clone()).collect();
        let exchanges: Vec<String> = plan.exchanges.iter().map(|e| e.name.clone()).collect();
        harness::cleanup(&queues, &exchanges).await;
    }
}

/// Runs the mover, reconnecting (as the service does) until `cancel` fires.
async fn mover_forever(delayer: Delayer, cancel: CancellationToken) {
    while !cancel.is_cancelled() {
        let url = harness::broker_url();
        let conn = match Connection::connect(&url, lapin::ConnectionProperties::default()).await {
            Ok(conn) => std::sync::Arc::new(conn),
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let blocked = worker_host::delay::Blocked::never();
        if let Err(err) = delayer.run_mover(&conn, &blocked, cancel.clone()).await {
            eprintln!("mover ended: {err:#}; reconnecting");
        }
        let _ = conn.close(200, "bye".into()).await;
    }
}

/// A topic exchange and a queue bound to it with `pattern`, both unique.
async fn target(ch: &Channel, pattern: &str) -> (String, String) {
    let exchange = harness::unique("wd-target-ex");
    let queue = harness::unique("wd-target-q");
    ch.exchange_declare(
        exchange.as_str().into(),
        ExchangeKind::Topic,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("declare target exchange");
    ch.queue_declare(
        queue.as_str().into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("declare target queue");
    ch.queue_bind(
        queue.as_str().into(),
        exchange.as_str().into(),
        pattern.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("bind target queue");
    (exchange, queue)
}

fn props(message_id: &str) -> BasicProperties {
    let mut headers = FieldTable::default();
    headers.insert("mine".into(), worker_host::headers::text("kept"));
    BasicProperties::default()
        .with_message_id(message_id.into())
        .with_content_type("text/plain".into())
        .with_headers(headers)
}

fn header_names(props: &BasicProperties) -> Vec<String> {
    props
        .headers()
        .as_ref()
        .map(|h| h.inner().keys().map(|k| k.as_str().to_string()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_short_delay_overtakes_a_long_one_and_arrives_as_published() {
    let topo = Topology::start(5).await;
    let (conn, ch) = harness::channel().await;
    let (exchange, queue) = target(&ch, "order.#").await;
    let mut arrivals = ch
        .basic_consume(
            queue.as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume target");

    let d = &topo.delayer;
    let t_long = Instant::now();
    d.publish(
        &ch,
        &exchange,
        "order.late",
        b"late",
        props("late"),
        Duration::from_secs(10),
    )
    .await
    .expect("publish 10s");
    let t_short = Instant::now();
    d.publish(
        &ch,
        &exchange,
        "order.early",
        b"early",
        props("early"),
        Duration::from_secs(1),
    )
    .await
    .expect("publish 1s");

    let mut seen = Vec::new();
    for _ in 0..2 {
        let delivery = tokio::time::timeout(Duration::from_secs(20), arrivals.next())
            .await
            .expect("a delayed message within 20s")
            .expect("consumer open")
            .expect("delivery");
        let id = delivery
            .properties
            .message_id()
            .as_ref()
            .map(|s| s.as_str().to_string());
        let id = id.unwrap_or_default();
        let after = if id == "early" {
            t_short.elapsed()
        } else {
            t_long.elapsed()
        };
        // What the consumer sees is what was published: exchange, key, properties, headers.
        assert_eq!(delivery.exchange.as_str(), exchange);
        assert_eq!(delivery.routing_key.as_str(), format!("order.{id}"));
        assert_eq!(header_names(&delivery.properties), vec!["mine".to_string()]);
        assert_eq!(
            delivery
                .properties
                .content_type()
                .as_ref()
                .map(|s| s.as_str()),
            Some("text/plain")
        );
        assert_eq!(delivery.data, id.as_bytes());
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
        seen.push((id, after));
    }
    eprintln!("arrivals: {seen:?}");
    assert_eq!(
        seen[0].0, "early",
        "the 1 s message must arrive first: {seen:?}"
    );
    assert!(
        seen[0].1 >= Duration::from_secs(1) && seen[0].1 < Duration::from_secs(6),
        "{seen:?}"
    );
    assert_eq!(seen[1].0, "late");
    assert!(
        seen[1].1 >= Duration::from_secs(10) && seen[1].1 < Duration::from_secs(15),
        "{seen:?}"
    );

    let _ = conn.close(200, "bye".into()).await;
    harness::cleanup(&[queue], &[exchange]).await;
    topo.stop().await;
}

/// 50 messages with delays spread over 1 s to 20 s (millisecond resolution): none early, all
/// within +5 s. Prints the distribution of the error.
#[tokio::test]
async fn precision_over_a_spread_of_delays() {
    const MESSAGES: usize = 50;
    let topo = Topology::start(5).await;
    let (conn, ch) = harness::channel().await;
    let (exchange, queue) = target(&ch, "#").await;
    let mut arrivals = ch
        .basic_consume(
            queue.as_str().into(),
            "".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("consume target");

    let mut due = std::collections::HashMap::new();
    for i in 0..MESSAGES {
        let delay = Duration::from_millis(rand::random_range(1_000..=20_000));
        let id = format!("m{i}");
        due.insert(id.clone(), Instant::now() + delay);
        topo.delayer
            .publish(&ch, &exchange, "spread", b"x", props(&id), delay)
            .await
            .expect("publish");
    }
    let mut errors_ms = Vec::new();
    while errors_ms.len() < MESSAGES {
        let delivery = tokio::time::timeout(Duration::from_secs(30), arrivals.next())
            .await
            .expect("every message within 30s")
            .expect("consumer open")
            .expect("delivery");
        let now = Instant::now();
        let id = delivery
            .properties
            .message_id()
            .as_ref()
            .map(|s| s.as_str().to_string());
        let due = due[&id.unwrap_or_default()];
        let error_ms = if now >= due {
            now.duration_since(due).as_millis() as i64
        } else {
            -(due.duration_since(now).as_millis() as i64)
        };
        errors_ms.push(error_ms);
    }
    errors_ms.sort_unstable();
    let pct = |p: usize| errors_ms[(errors_ms.len() - 1) * p / 100];
    let mean = errors_ms.iter().sum::<i64>() as f64 / errors_ms.len() as f64;
    eprintln!(
        "delay error over {MESSAGES} messages (1-20 s): min {} ms, p50 {} ms, p90 {} ms, p99 {} ms, max {} ms, mean {mean:.0} ms",
        errors_ms[0],
        pct(50),
        pct(90),
        pct(99),
        errors_ms[errors_ms.len() - 1]
    );
    eprintln!("all errors (ms): {errors_ms:?}");
    assert!(errors_ms[0] >= 0, "a message arrived early: {errors_ms:?}");
    assert!(
        *errors_ms.last().expect("50 errors") <= 5000,
        "a message was over 5 s late: {errors_ms:?}"
    );

    let _ = conn.close(200, "bye".into()).await;
    harness::cleanup(&[queue], &[exchange]).await;
    topo.stop().await;
}

#[tokio::test]
async fn a_message_for_a_missing_exchange_is_parked_and_the_mover_goes_on() {
    let topo = Topology::start(2).await;
    let (conn, ch) = harness::channel().await;
    let (exchange, queue) = target(&ch, "#").await;
    let missing = harness::unique("wd-missing");
    let d = &topo.delayer;
    d.publish(
        &ch,
        &missing,
        "k",
        b"lost?",
        props("orphan"),
        Duration::from_millis(500),
    )
    .await
    .expect("publish to a missing exchange");
    d.publish(
        &ch,
        &exchange,
        "k",
        b"fine",
        props("fine"),
        Duration::from_secs(1),
    )
    .await
    .expect("publish");

    let parked = harness::eventually(
        Duration::from_secs(10),
        "the orphan parked in the dead queue",
        || {
            let (ch, dead) = (ch.clone(), d.dead());
            async move { harness::get(&ch, &dead).await }
        },
    )
    .await;
    assert_eq!(parked.delivery.data, b"lost?");
    let rendered: std::collections::BTreeMap<_, _> =
        worker_host::headers::render_headers(parked.delivery.properties.headers().as_ref())
            .into_iter()
            .collect();
    assert!(rendered["x-delay-error"].contains(&missing), "{rendered:?}");
    assert_eq!(rendered["x-delay-exchange"], missing);
    assert_eq!(rendered["mine"], "kept");

    let fine = harness::eventually(
        Duration::from_secs(10),
        "the next message delivered",
        || {
            let (ch, queue) = (ch.clone(), queue.clone());
            async move { harness::get(&ch, &queue).await }
        },
    )
    .await;
    assert_eq!(fine.delivery.data, b"fine");

    let _ = conn.close(200, "bye".into()).await;
    harness::cleanup(&[queue], &[exchange]).await;
    topo.stop().await;
}

#[tokio::test]
async fn delays_beyond_the_maximum_are_refused() {
    let d = Delayer::new(2).expect("valid levels");
    let (conn, ch) = harness::channel().await;
    let err = d
        .publish(
            &ch,
            "anything",
            "k",
            b"x",
            BasicProperties::default(),
            Duration::from_secs(5),
        )
        .await
        .expect_err("5 s is beyond 2 levels");
    let err: DelayError = match err {
        DelayPublishError::Delay(err) => err,
        other => panic!("a DelayError, not {other}"),
    };
    assert_eq!(
        err.to_string(),
        "a delay of 5s is beyond the maximum of 3s 875ms that [delay] levels = 2 allows"
    );
    // Nothing was declared or published: the channel is still usable.
    assert!(ch.status().connected());
    let _ = conn.close(200, "bye".into()).await;
}

#[tokio::test]
async fn the_topology_binds_levels_exchange_to_exchange() {
    let topo = Topology::start(1).await;
    let plan = topo.delayer.plan();
    // Declaring twice is idempotent.
    let conn = harness::connect().await;
    topo.delayer.declare(&conn).await.expect("declare again");
    let ch = conn.create_channel().await.expect("channel");
    for q in &plan.queues {
        harness::depth(&ch, &q.name).await;
    }
    assert!(
        plan.bindings.iter().any(
            |b| matches!(&b.destination, Destination::Exchange(e) if *e == topo.delayer.ready())
        )
    );
    let _ = conn.close(200, "bye".into()).await;
    topo.stop().await;
}

/// Restarts the shared broker (`rabbitmqctl stop_app && rabbitmqctl start_app`), so it runs
/// only when asked: `cargo test --test integration delay::survives -- --ignored`.
/// Restarts the shared broker: scripts/test.sh runs `broker_restart_` tests alone, after the rest.
#[tokio::test]
async fn broker_restart_a_waiting_message_survives() {
    let topo = Topology::start(5).await;
    let (conn, ch) = harness::channel().await;
    let (exchange, queue) = target(&ch, "#").await;
    let delay = Duration::from_secs(20);
    let due = Instant::now() + delay;
    topo.delayer
        .publish(
            &ch,
            &exchange,
            "restart",
            b"durable",
            props("durable"),
            delay,
        )
        .await
        .expect("publish");
    let _ = conn.close(200, "bye".into()).await;

    let restart = tokio::task::spawn_blocking(|| {
        for args in [["stop_app"], ["start_app"]] {
            let status = std::process::Command::new("rabbitmqctl")
                .args(args)
                .status()
                .expect("run rabbitmqctl");
            assert!(status.success(), "rabbitmqctl {args:?} failed");
        }
    });
    restart.await.expect("restart task");
    eprintln!(
        "broker restarted {:?} before the due time",
        due.saturating_duration_since(Instant::now())
    );

    // The broker is back (start_app returned); the mover reconnects by itself.
    let (conn, ch) = harness::channel().await;
    let got = harness::eventually(
        Duration::from_secs(60),
        "the delayed message after the restart",
        || {
            let (ch, queue) = (ch.clone(), queue.clone());
            async move { harness::get(&ch, &queue).await }
        },
    )
    .await;
    let now = Instant::now();
    assert_eq!(got.delivery.data, b"durable");
    assert!(now >= due, "arrived {:?} early", due - now);
    eprintln!("arrived {:?} after its due time", now - due);

    let _ = conn.close(200, "bye".into()).await;
    harness::cleanup(&[queue], &[exchange]).await;
    topo.stop().await;
}
