//! `[tracing] otlp` through the real binary: an OTLP/HTTP receiver in the test decodes the
//! exports with OpenTelemetry's own protobuf types and checks the span tree of an ok message
//! (plugin call, HTTP, key-value, SQL and a plugin publish under it), a retry that ends ok, a
//! fail and its replay, all in the trace of the `traceparent` the message was published with;
//! the HTTP server and the messages the host sends see that trace too. With the collector gone,
//! messages go on and the spans are dropped, counted.

pub(crate) mod support;

use std::time::Duration;

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, LongString};
use serde_json::json;

use self::support::{Collector, HttpServer, trace_of};
use crate::capabilities::support::{Probe, Sub};
use crate::harness::{self, free_addr, http_get};

/// A W3C `traceparent` for a fresh trace, sampled, as an upstream service would send it.
fn traceparent(trace: &str, parent: &str) -> String {
    format!("00-{trace}-{parent}-01")
}

fn with_traceparent(id: &str, value: &str) -> BasicProperties {
    let mut headers = FieldTable::default();
    headers.insert(
        "traceparent".into(),
        AMQPValue::LongString(LongString::from(value.as_bytes().to_vec())),
    );
    BasicProperties::default()
        .with_message_id(id.into())
        .with_headers(headers)
}

#[tokio::test]
async fn spans_follow_a_message_through_its_plugin_call_effects_retries_and_replay() {
    let collector = Collector::start().await;
    let web = HttpServer::start().await;
    let state = tempfile::tempdir().expect("state dir");
    let keys = format!(
        "allowed_hosts = [\"http://{}\"]\nkv = \"emb\"\nsql = \"db\"\nmax_retries = 1\n\
         retry_delays = [\"200ms\"]",
        web.addr
    );
    let tables = format!(
        "[kv.emb]\nbackend = \"embedded\"\n\n[sql.db]\nurl = \"sqlite:traces.db\"\n\n\
         [tracing]\notlp = \"http://{}\"\nservice_name = \"traces-test\"\n",
        collector.addr
    );
    let subs = [Sub::new("tr", &keys)];
    let mut probe = Probe::start_child("traces", &subs, state.path(), &tables, &[]).await;

    // ok: a plugin call with HTTP, key-value and SQL, then the report publish.
    let (t_ok, parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let steps = json!([
        {"http": "GET", "url": format!("http://{}/hello", web.addr)},
        {"kv": "set", "key": "k", "value": "v"},
        {"sql": "query", "statement": "SELECT 1"},
    ]);
    let script = json!({"id": "ok-1", "steps": steps});
    probe
        .send_with(
            "tr",
            &script,
            with_traceparent("ok-1", &traceparent(t_ok, parent)),
        )
        .await;
    let report = probe
        .next_report(Duration::from_secs(20))
        .await
        .expect("a report");
    let headers = harness::headers_of(&report);
    assert_eq!(
        trace_of(&headers),
        Some(t_ok.to_owned()),
        "the report's traceparent"
    );
    assert!(
        web.traceparents().iter().any(|t| t.contains(t_ok)),
        "the HTTP server saw no traceparent of {t_ok}: {:?}",
        web.traceparents()
    );

    // retry, then ok on the second attempt.
    let t_retry = "5bf92f3577b34da6a3ce929d0e0e4737";
    let script = json!({"id": "retry-1", "steps": [], "answer": "retry", "until_attempt": 2});
    let props = with_traceparent("retry-1", &traceparent(t_retry, parent));
    probe.send_with("tr", &script, props).await;
    let report = probe
        .next_report(Duration::from_secs(20))
        .await
        .expect("a report");
    assert_eq!(
        trace_of(&harness::headers_of(&report)),
        Some(t_retry.to_owned())
    );

    // fail: parked; replayed, it fails again and is parked again, still in its trace.
    let t_fail = "6bf92f3577b34da6a3ce929d0e0e4738";
    let script = json!({"id": "fail-1", "steps": [], "answer": "fail"});
    let props = with_traceparent("fail-1", &traceparent(t_fail, parent));
    probe.send_with("tr", &script, props).await;
    let queue = format!("{}.tr", probe.n.p);
    let failed = format!("{queue}@failed");
    harness::eventually(Duration::from_secs(20), "fail-1 parked", || async {
        (harness::depth(&probe.ch, &failed).await == 1).then_some(())
    })
    .await;

    let ok = collector
        .wait_tree(t_ok, |t| {
            t.count("delivery") == 1 && t.count("publish") == 1
        })
        .await;
    let delivery = ok.one("delivery");
    assert_eq!(
        delivery.parent, parent,
        "the delivery continues the upstream span"
    );
    assert_eq!(delivery.kind, "consumer");
    assert_eq!(delivery.attr("messaging.system"), "rabbitmq");
    assert_eq!(delivery.attr("messaging.destination.name"), queue);
    assert_eq!(delivery.attr("messaging.message.id"), "ok-1");
    assert_eq!(delivery.attr("worker.attempt"), "1");
    assert_eq!(delivery.attr("worker.outcome"), "ok");
    let plugin = ok.one("plugin");
    assert_eq!(plugin.parent, delivery.id);
    for (name, kind) in [("http", "client"), ("kv", "client"), ("sql", "client")] {
        let span = ok.one(name);
        assert_eq!(
            span.parent, plugin.id,
            "{name} is a child of the plugin call"
        );
        assert_eq!(span.kind, kind);
    }
    assert_eq!(ok.one("sql").attr("db.system.name"), "sqlite");
    assert_eq!(ok.one("kv").attr("db.operation.name"), "set");
    let publish = ok.one("publish");
    assert_eq!(publish.parent, delivery.id);
    assert_eq!(publish.kind, "producer");
    assert_eq!(publish.attr("messaging.destination.name"), probe.n.out());

    let retry = collector
        .wait_tree(t_retry, |t| t.count("delivery") == 2)
        .await;
    let attempts = retry.all("delivery");
    let first = attempts
        .iter()
        .find(|s| s.attr("worker.attempt") == "1")
        .expect("attempt 1");
    let second = attempts
        .iter()
        .find(|s| s.attr("worker.attempt") == "2")
        .expect("attempt 2");
    assert_eq!(first.attr("worker.outcome"), "retry");
    assert_eq!(second.attr("worker.outcome"), "ok");
    let hop = retry
        .span(&second.parent)
        .expect("attempt 2's parent is in the trace");
    assert_eq!(hop.role(), "publish", "attempt 2 follows the retry publish");
    assert_eq!(hop.parent, first.id, "the retry publish is attempt 1's");

    collector
        .wait_tree(t_fail, |t| {
            t.count("delivery") == 1 && t.count("publish") == 1
        })
        .await;
    let config = probe.config();
    let replayed = worker_host::failed::replay(
        &config,
        &queue,
        &worker_host::failed::Selection::All,
        worker_host::failed::Watch::none(),
    )
    .await
    .expect("replay");
    assert_eq!(replayed.done, 1);
    let fail = collector
        .wait_tree(t_fail, |t| t.count("delivery") == 2)
        .await;
    for delivery in fail.all("delivery") {
        assert_eq!(delivery.attr("worker.outcome"), "fail");
    }
    let parked = probe.parked("tr", "fail-1").await;
    assert_eq!(
        trace_of(&parked),
        Some(t_fail.to_owned()),
        "the parked copy's trace"
    );

    // Log lines of a delivery carry its trace id.
    let log = probe.log();
    assert!(
        log.lines()
            .any(|l| l.contains("parked in") && l.contains(t_fail)),
        "no log line of fail-1 names its trace id:\n{log}"
    );
    probe.stop().await;
}

#[tokio::test]
async fn a_message_without_traceparent_starts_a_trace_of_its_own() {
    let collector = Collector::start().await;
    let state = tempfile::tempdir().expect("state dir");
    let tables = format!("[tracing]\notlp = \"http://{}\"\n", collector.addr);
    let mut probe = Probe::start_child(
        "traces-root",
        &[Sub::new("rt", "")],
        state.path(),
        &tables,
        &[],
    )
    .await;
    probe
        .send("rt", &json!({"id": "root-1", "steps": []}))
        .await;
    let report = probe
        .next_report(Duration::from_secs(20))
        .await
        .expect("a report");
    let trace = trace_of(&harness::headers_of(&report)).expect("the report's traceparent");
    let tree = collector
        .wait_tree(&trace, |t| t.count("delivery") == 1)
        .await;
    assert_eq!(tree.one("delivery").parent, "", "a root span");
    assert_eq!(tree.one("delivery").resource("service.name"), "worker-host");
    probe.stop().await;
}

#[tokio::test]
async fn with_the_collector_gone_messages_go_on_and_spans_are_dropped_counted() {
    let admin = free_addr();
    // Nothing listens there: every export fails at once.
    let gone = free_addr();
    let state = tempfile::tempdir().expect("state dir");
    let tables = format!("[admin]\nlisten = \"{admin}\"\n\n[tracing]\notlp = \"http://{gone}\"\n");
    let mut probe = Probe::start_child(
        "traces-gone",
        &[Sub::new("gn", "")],
        state.path(),
        &tables,
        &[],
    )
    .await;
    for i in 0..200 {
        probe
            .send("gn", &json!({"id": format!("g-{i}"), "steps": []}))
            .await;
    }
    for i in 0..200 {
        probe.report(&format!("g-{i}")).await;
    }
    let dropped = harness::eventually(
        Duration::from_secs(20),
        "spans counted as dropped",
        || async {
            let (_, text) = http_get(admin, "/metrics").await?;
            let value = text
                .lines()
                .find(|l| l.starts_with("worker_trace_spans_dropped_total"))?
                .rsplit(' ')
                .next()?
                .parse::<f64>()
                .ok()?;
            (value >= 600.0).then_some(value)
        },
    )
    .await;
    assert!(dropped >= 600.0, "{dropped}");
    probe.stop().await;
}
