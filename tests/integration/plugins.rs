//! The example plugins, built from source by scripts/build-plugins.sh, run through the host.

use std::time::Duration;

use lapin::BasicProperties;
use lapin::types::FieldTable;
use worker_host::headers;

use crate::harness::{self, Host, Names, headers_of, wait_get};

/// A built example plugin from plugins/ (scripts/test.sh builds them before the tests).
fn plugin(file: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../plugins")
        .join(file);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; build the plugins with scripts/build-plugins.sh",
            path.display()
        )
    })
}

/// Runs the service with one example plugin and waits until it consumes `queue`.
async fn start(
    toml: &str,
    plugin_file: &str,
    queue: &str,
) -> (Host, lapin::Connection, lapin::Channel) {
    let svc = Host::in_process(toml, &[(plugin_file, &plugin(plugin_file))]).await;
    let (conn, ch) = harness::channel().await;
    harness::wait_consuming(&conn, queue).await;
    (svc, conn, ch)
}

/// One test's own master/retry/failed exchanges and an `out` topic exchange with a `seen` queue.
fn topology(n: &Names) -> String {
    format!("{}{}", n.exchanges_toml(), n.out_toml("topic"))
}

/// Deletes what a test declared: `queues` (subscription queues with their failed and retry
/// queues), the `seen` queue, the four exchanges of [`topology`], and `exchanges`.
async fn cleanup(n: &Names, queues: &[String], exchanges: &[String]) {
    n.cleanup(queues).await;
    harness::cleanup(&[], exchanges).await;
}

#[tokio::test]
async fn user_monitor_acks_events_and_parks_malformed_json() {
    let n = Names::new("umon");
    let p = &n.p;
    let q = format!("{p}@user");
    let toml = format!(
        "{}[[subscription]]\nqueue = \"{q}\"\nplugin = \"user_monitor.wasm\"\nbindings = [\"user.*\"]\n\
         [subscription.config]\ngreeting = \"hi\"\n",
        topology(&n)
    );
    let (svc, _conn, ch) = start(&toml, "user_monitor.wasm", &q).await;
    let master = format!("{p}.master");
    harness::publish(
        &ch,
        &master,
        "user.created",
        br#"{"id": 7, "name": "ada"}"#,
        BasicProperties::default(),
    )
    .await;
    harness::publish(
        &ch,
        &master,
        "user.deleted",
        b"{not json",
        BasicProperties::default(),
    )
    .await;
    let parked = wait_get(&ch, &format!("{q}@failed"), Duration::from_secs(10)).await;
    assert_eq!(parked.delivery.data, b"{not json");
    let h = headers_of(&parked);
    assert_eq!(h["worker-failed-reason"], "fail");
    assert_eq!(h["x-orig-routing-key"], "user.deleted");
    assert_eq!(h["worker-plugin"], "user_monitor.wasm");
    svc.stop().await;
    assert_eq!(harness::depth(&ch, &q).await, 0, "the good event was acked");
    assert!(
        harness::get(&ch, &format!("{q}@failed")).await.is_none(),
        "only the bad one parked"
    );
    cleanup(&n, &[q], &[]).await;
}

#[tokio::test]
async fn flaky_retries_then_publishes_on_ok() {
    let n = Names::new("flaky");
    let p = &n.p;
    let q = format!("{p}@flaky");
    let toml = format!(
        "{}[[subscription]]\nqueue = \"{q}\"\nplugin = \"flaky.wasm\"\nbindings = [\"demo.#\"]\n\
         max_retries = 5\nretry_delays = [\"200ms\"]\npublish = [\"{p}.out\"]\n",
        topology(&n)
    );
    let (svc, _conn, ch) = start(&toml, "flaky.wasm", &q).await;
    let body = format!(
        r#"{{"outcome": "retry", "until_attempt": 3, "reason": "not yet",
            "publish": [{{"exchange": "{p}.out", "routing_key": "done", "body": {{"n": 1}}}}]}}"#
    );
    harness::publish(
        &ch,
        &format!("{p}.master"),
        "demo.x",
        body.as_bytes(),
        BasicProperties::default(),
    )
    .await;
    let got = wait_get(&ch, &format!("{p}.seen"), Duration::from_secs(15)).await;
    assert_eq!(got.delivery.routing_key.as_str(), "done");
    assert_eq!(got.delivery.data, br#"{"n":1}"#);
    svc.stop().await;
    assert!(
        harness::get(&ch, &format!("{p}.seen")).await.is_none(),
        "published once: only the ok call publishes"
    );
    assert!(harness::get(&ch, &format!("{q}@failed")).await.is_none());
    cleanup(&n, &[q], &[]).await;
}

#[tokio::test]
async fn c_plugin_without_the_sdk_republishes() {
    let n = Names::new("cecho");
    let p = &n.p;
    let q = format!("{p}@echo");
    let toml = format!(
        "{}[[subscription]]\nqueue = \"{q}\"\nplugin = \"c_echo.wasm\"\nbindings = [\"echo.#\"]\npublish = [\"{p}.out\"]\n",
        topology(&n)
    );
    let (svc, _conn, ch) = start(&toml, "c_echo.wasm", &q).await;
    let mut h = FieldTable::default();
    h.insert("echo-to".into(), headers::text("echoed"));
    h.insert("echo-exchange".into(), headers::text(&format!("{p}.out")));
    harness::publish(
        &ch,
        &format!("{p}.master"),
        "echo.1",
        b"ping",
        BasicProperties::default().with_headers(h),
    )
    .await;
    harness::publish(
        &ch,
        &format!("{p}.master"),
        "echo.2",
        b"",
        BasicProperties::default(),
    )
    .await;
    let got = wait_get(&ch, &format!("{p}.seen"), Duration::from_secs(10)).await;
    assert_eq!(got.delivery.data, b"ping");
    assert_eq!(got.delivery.routing_key.as_str(), "echoed");
    let parked = wait_get(&ch, &format!("{q}@failed"), Duration::from_secs(10)).await;
    assert_eq!(headers_of(&parked)["worker-failed-reason"], "fail");
    svc.stop().await;
    cleanup(&n, &[q], &[]).await;
}

/// Seed 003 by config and plugins alone: an order is created, waits in the delay queue (a TTL
/// of one second here, 30 minutes in worker.toml), is dead-lettered to the close check, which
/// closes it and publishes the stock release.
#[tokio::test]
async fn seed_order_flow_closes_unpaid_orders_and_releases_stock() {
    let n = Names::new("order");
    let p = &n.p;
    let ex = format!("{p}.order-event-exchange");
    let q = format!("{p}.order@release");
    let stock = format!("{p}.stock.release.stock.queue");
    let delay = format!("{p}.order.delay.queue");
    let toml = format!(
        "{}[[exchange]]\nname = \"{ex}\"\ntype = \"topic\"\n\n\
         [[queue]]\nname = \"{delay}\"\nmessage_ttl = \"1s\"\ndead_letter_exchange = \"{ex}\"\n\
         dead_letter_routing_key = \"order.release.order\"\n\
         bindings = [{{ exchange = \"{ex}\", key = \"order.create.order\" }}]\n\n\
         [[queue]]\nname = \"{stock}\"\nbindings = [{{ exchange = \"{ex}\", key = \"order.release.other\" }}]\n\n\
         [[subscription]]\nqueue = \"{q}\"\nplugin = \"order_close.wasm\"\nexchange = \"{ex}\"\n\
         bindings = [\"order.release.order\"]\npublish = [\"{ex}\"]\n\
         [subscription.config]\nexchange = \"{ex}\"\n",
        topology(&n)
    );
    let (svc, _conn, ch) = start(&toml, "order_close.wasm", &q).await;
    let started = std::time::Instant::now();
    harness::publish(
        &ch,
        &ex,
        "order.create.order",
        br#"{"order_id": 42, "status": "unpaid", "sku": "A-1"}"#,
        BasicProperties::default(),
    )
    .await;
    harness::publish(
        &ch,
        &ex,
        "order.create.order",
        br#"{"order_id": 43, "status": "paid"}"#,
        BasicProperties::default(),
    )
    .await;
    let release = wait_get(&ch, &stock, Duration::from_secs(15)).await;
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited for the close check"
    );
    let body: serde_json::Value =
        serde_json::from_slice(&release.delivery.data).expect("json release");
    assert_eq!(body["order_id"], 42, "{body}");
    svc.stop().await;
    assert!(
        harness::get(&ch, &stock).await.is_none(),
        "the paid order keeps its stock"
    );
    cleanup(&n, &[q, stock, delay], &[ex]).await;
}

/// A plugin's `publish` with `delay_ms` goes through the delay levels and arrives with its own
/// exchange and routing key after the delay.
#[tokio::test]
async fn plugin_publish_with_a_delay_arrives_after_it() {
    let n = Names::new("pdelay");
    let p = &n.p;
    let q = format!("{p}@flaky");
    let toml = format!(
        "{}[delay]\nlevels = 28\n\n[[subscription]]\nqueue = \"{q}\"\nplugin = \"flaky.wasm\"\n\
         bindings = [\"demo.#\"]\npublish = [\"{p}.out\"]\n",
        topology(&n)
    );
    let (svc, _conn, ch) = start(&toml, "flaky.wasm", &q).await;
    let body = format!(
        r#"{{"outcome": "ok", "publish": [{{"exchange": "{p}.out", "routing_key": "later",
            "body": "hello", "delay_ms": 1500}}]}}"#
    );
    let started = std::time::Instant::now();
    harness::publish(
        &ch,
        &format!("{p}.master"),
        "demo.x",
        body.as_bytes(),
        BasicProperties::default(),
    )
    .await;
    let got = wait_get(&ch, &format!("{p}.seen"), Duration::from_secs(15)).await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1500),
        "not early: {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(11500),
        "within 10 s of its delay: {waited:?}"
    );
    assert_eq!(got.delivery.routing_key.as_str(), "later");
    assert_eq!(got.delivery.exchange.as_str(), format!("{p}.out"));
    svc.stop().await;
    cleanup(&n, &[q], &[]).await;
}
