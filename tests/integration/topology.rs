//! Declaring topology from worker.toml on a real broker: idempotence, the seed delay-queue
//! pattern from config alone, inequivalent arguments, quorum queues.

use std::path::Path;
use std::time::{Duration, Instant};

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ExchangeDeleteOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection};
use worker_host::config::Config;
use worker_host::topology::{Plan, TopologyError};

use crate::harness::{connect, eventually, unique};

/// Parses `toml` as if it were tests/configs/good/worker.toml (whose plugins folder holds
/// `echo.wasm` and `user_monitor.wasm`).
fn plan(toml: &str) -> Plan {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/configs/good/worker.toml");
    let (config, _) = Config::parse(toml, &path).unwrap_or_else(|e| panic!("{e}"));
    Plan::from_config(&config)
}

/// A config whose three host exchanges are unique to this test, so cleanup may delete them.
fn header(prefix: &str) -> String {
    format!(
        "[broker]\nurl = \"amqp://127.0.0.1\"\n\n[exchanges]\nmaster = \"{m}\"\nretry = \"{m}.retry\"\n\
         failed = \"{m}.failed\"\n",
        m = unique(prefix)
    )
}

/// Deletes every queue and exchange the plans name.
async fn cleanup(conn: &Connection, plans: &[&Plan]) {
    let channel = conn.create_channel().await.expect("channel for cleanup");
    for plan in plans {
        for q in &plan.queues {
            let _ = channel
                .queue_delete(q.name.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
        for e in &plan.exchanges {
            let _ = channel
                .exchange_delete(e.name.as_str().into(), ExchangeDeleteOptions::default())
                .await;
        }
    }
}

/// Whether `queue` exists (passive declare on a throwaway channel: a 404 closes it).
async fn queue_exists(conn: &Connection, queue: &str) -> bool {
    let channel = conn.create_channel().await.expect("channel");
    let options = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    channel
        .queue_declare(queue.into(), options, FieldTable::default())
        .await
        .is_ok()
}

#[tokio::test]
async fn declaring_twice_is_idempotent() {
    let conn = connect().await;
    let queue = unique("topo-idem");
    let plan = plan(&format!(
        "{}\n[[subscription]]\nqueue = \"{queue}\"\nplugin = \"echo.wasm\"\nbindings = [\"a.*\"]\n\
         retry_delays = [\"1s\", \"1m\"]\n",
        header("topo-idem-ex")
    ));
    plan.declare(&conn).await.expect("first declare");
    plan.declare(&conn).await.expect("second declare");
    for name in [
        queue.clone(),
        format!("{queue}@failed"),
        format!("{queue}@retry.1s"),
        format!("{queue}@retry.1m"),
    ] {
        assert!(queue_exists(&conn, &name).await, "{name} was not declared");
    }
    cleanup(&conn, &[&plan]).await;
}

#[tokio::test]
async fn seed_delay_queue_releases_into_release_queue_after_ttl() {
    let conn = connect().await;
    let exchange = unique("topo-order-event");
    let delay_queue = unique("topo-order.delay");
    let release_queue = unique("topo-order.release");
    let plan = plan(&format!(
        r#"{header}
[[exchange]]
name = "{exchange}"
type = "topic"

[[queue]]
name = "{delay_queue}"
message_ttl = "300ms"
dead_letter_exchange = "{exchange}"
dead_letter_routing_key = "order.release.order"
bindings = [{{ exchange = "{exchange}", key = "order.create.order" }}]

[[queue]]
name = "{release_queue}"
bindings = [{{ exchange = "{exchange}", key = "order.release.order" }}]
"#,
        header = header("topo-order-ex"),
    ));
    plan.declare(&conn).await.expect("declare");

    let channel = conn.create_channel().await.expect("channel");
    let sent = Instant::now();
    channel
        .basic_publish(
            exchange.as_str().into(),
            "order.create.order".into(),
            BasicPublishOptions::default(),
            b"order 42",
            BasicProperties::default(),
        )
        .await
        .expect("publish")
        .await
        .expect("publish confirm");

    let message = eventually(
        Duration::from_secs(10),
        "the order in the release queue",
        || {
            let channel = channel.clone();
            let release_queue = release_queue.clone();
            async move {
                channel
                    .basic_get(
                        release_queue.as_str().into(),
                        BasicGetOptions { no_ack: true },
                    )
                    .await
                    .expect("basic.get")
            }
        },
    )
    .await;
    let waited = sent.elapsed();
    assert_eq!(message.delivery.data, b"order 42");
    assert_eq!(message.delivery.routing_key.as_str(), "order.release.order");
    // Released by the queue TTL, not routed straight through.
    assert!(
        waited >= Duration::from_millis(250),
        "released after only {waited:?}"
    );

    cleanup(&conn, &[&plan]).await;
}

#[tokio::test]
async fn inequivalent_argument_names_queue_argument_and_both_values() {
    let conn = connect().await;
    let queue = unique("topo-ineq");
    let after = unique("topo-ineq-after");
    let header = header("topo-ineq-ex");
    let existing = plan(&format!(
        "{header}\n[[queue]]\nname = \"{queue}\"\nmessage_ttl = \"2s\"\n"
    ));
    existing
        .declare(&conn)
        .await
        .expect("declare the existing queue");

    let changed = plan(&format!(
        "{header}\n[[queue]]\nname = \"{queue}\"\nmessage_ttl = \"1s\"\n\n[[queue]]\nname = \"{after}\"\n"
    ));
    let err = changed.declare(&conn).await.expect_err("ttl differs");
    assert!(err.is_user_error());
    let shown = err.to_string();
    assert_eq!(
        shown,
        format!(
            "queue \"{queue}\" already exists with x-message-ttl = 2000, but worker.toml declares \
             1000; delete the queue or change worker.toml"
        )
    );
    let TopologyError::Inequivalent(conflicts) = &err else {
        panic!("expected Inequivalent, got {err:?}");
    };
    assert_eq!(conflicts[0].argument, "x-message-ttl");
    // The 406 closed its channel; declaring went on with a fresh one.
    assert!(
        queue_exists(&conn, &after).await,
        "{after} was not declared after the conflict"
    );

    cleanup(&conn, &[&changed]).await;
}

#[tokio::test]
async fn quorum_subscription_declares_quorum_queues() {
    let conn = connect().await;
    let queue = unique("topo-quorum");
    let header = header("topo-quorum-ex");
    let sub = format!(
        "{header}\n[[subscription]]\nqueue = \"{queue}\"\nplugin = \"echo.wasm\"\nbindings = [\"q.*\"]\n\
         retry_delays = [\"5s\"]\n"
    );
    let quorum = plan(&format!("{sub}queue_type = \"quorum\"\n"));
    quorum.declare(&conn).await.expect("declare quorum");
    quorum.declare(&conn).await.expect("declare quorum again");

    // Declaring the same names as classic shows what the broker holds: every one is quorum.
    let classic = plan(&sub);
    let err = classic
        .declare(&conn)
        .await
        .expect_err("queue types differ");
    let TopologyError::Inequivalent(conflicts) = &err else {
        panic!("expected Inequivalent, got {err:?}");
    };
    let mut names: Vec<_> = conflicts.iter().map(|c| c.name.clone()).collect();
    names.sort();
    let mut expected = vec![
        queue.clone(),
        format!("{queue}@failed"),
        format!("{queue}@retry.5s"),
    ];
    expected.sort();
    assert_eq!(names, expected, "{err}");
    // The broker names the first argument that differs: the type, or one only quorum
    // subscriptions declare (Q parks what it drops; retry queues dead-letter at least once).
    for c in conflicts {
        let quorum_only = [
            "x-queue-type",
            "x-dead-letter-exchange",
            "x-dead-letter-strategy",
            "x-overflow",
        ];
        assert!(quorum_only.contains(&c.argument.as_str()), "{err}");
        assert!(c.current.is_some(), "{err}");
    }
    let failed = conflicts.iter().find(|c| c.name.ends_with("@failed"));
    let failed = failed.expect("the failed queue's conflict");
    assert_eq!(failed.argument, "x-queue-type", "{err}");
    assert_eq!(failed.current.as_deref(), Some("quorum"), "{err}");
    assert_eq!(failed.declared.as_deref(), Some("classic"), "{err}");

    cleanup(&conn, &[&quorum]).await;
}

#[tokio::test]
async fn seed_style_queues_without_queue_type_are_accepted() {
    let conn = connect().await;
    let queue = unique("topo-seed");
    let plan = plan(&format!(
        "{}\n[[subscription]]\nqueue = \"{queue}\"\nplugin = \"echo.wasm\"\nbindings = [\"user.*\"]\n",
        header("topo-seed-ex")
    ));
    // Seed 000 declares its queues durable with no x-queue-type; the host says "classic".
    let channel = conn.create_channel().await.expect("channel");
    for name in [queue.clone(), format!("{queue}@failed")] {
        let options = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        channel
            .queue_declare(name.as_str().into(), options, FieldTable::default())
            .await
            .expect("seed-style declare");
    }
    plan.declare(&conn)
        .await
        .expect("classic is what an absent x-queue-type means");
    cleanup(&conn, &[&plan]).await;
}
