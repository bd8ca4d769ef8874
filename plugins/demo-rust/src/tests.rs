//! The demo's behaviour, natively through the SDK harness (the component's own call path).

use std::time::Duration;

use worker_plugin_sdk::Outcome;
use worker_plugin_sdk::serde_json::{Value, json};
use worker_plugin_sdk::testing::TestMessage;

use super::handle;

fn run(body: Value) -> worker_plugin_sdk::testing::TestRun {
    TestMessage::json(&body).run(handle)
}

#[test]
fn a_body_that_is_not_an_object_fails() {
    for body in ["", "[1]", "3", "{oops", "\"text\""] {
        let run = TestMessage::new(body).run(handle);
        assert_eq!(run.outcome, Outcome::fail("not a JSON object"), "{body:?}");
    }
}

#[test]
fn the_default_outcome_is_ok() {
    let run = run(json!({}));
    assert_eq!(run.outcome, Outcome::Ok);
    assert!(run.publishes.is_empty() && run.logs.is_empty());
}

#[test]
fn outcomes_reasons_and_retry_delay() {
    assert_eq!(run(json!({"outcome": "ok"})).outcome, Outcome::Ok);
    assert_eq!(
        run(json!({"outcome": "retry"})).outcome,
        Outcome::retry("requested")
    );
    assert_eq!(
        run(json!({"outcome": "retry", "reason": "db down", "after_ms": 5000})).outcome,
        Outcome::retry_after("db down", Duration::from_secs(5))
    );
    assert_eq!(
        run(json!({"outcome": "fail", "reason": "bad", "after_ms": 5})).outcome,
        Outcome::fail("bad")
    );
    assert!(run(json!({"outcome": "maybe"})).outcome.is_fail());
}

#[test]
fn log_goes_to_the_host_log() {
    let run = run(json!({"log": "hello host", "print": "to stdout"}));
    assert_eq!(run.outcome, Outcome::Ok);
    assert_eq!(run.logs.len(), 1);
    assert_eq!(run.logs[0].level, worker_plugin_sdk::Level::Info);
    assert_eq!(run.logs[0].message, "hello host");
}

#[test]
fn echo_reports_the_delivery() {
    let body = json!({"echo": {"exchange": "master", "routing_key": "echo.back"}});
    let len = worker_plugin_sdk::serde_json::to_vec(&body).unwrap().len();
    let run = TestMessage::json(&body)
        .routing_key("demo@q")
        .original_routing_key("demo.key")
        .attempt(2)
        .message_id("m-1")
        .header("tenant", "acme")
        .header("n", 5)
        .config(json!({"greeting": "hi", "n": 1}))
        .run(handle);
    assert_eq!(run.outcome, Outcome::Ok);
    let sent = &run.publishes[0];
    assert_eq!(
        (sent.exchange.as_str(), sent.routing_key.as_str()),
        ("master", "echo.back")
    );
    assert_eq!(sent.content_type.as_deref(), Some("application/json"));
    let report: Value = sent.json().unwrap();
    assert_eq!(report["config"], json!({"greeting": "hi", "n": 1}));
    assert!(report["count"].as_u64().unwrap() >= 1);
    assert_eq!(report["attempt"], 2);
    assert_eq!(report["routing_key"], "demo@q");
    assert_eq!(report["original_routing_key"], "demo.key");
    assert_eq!(report["message_id"], "m-1");
    assert_eq!(report["headers"], json!({"tenant": "acme", "n": "5"}));
    assert_eq!(report["body_len"], len);
}

#[test]
fn echo_without_config_or_message_id() {
    let run = run(json!({"echo": {"exchange": "x", "routing_key": "k"}}));
    let report: Value = run.publishes[0].json().unwrap();
    assert_eq!(report["config"], json!({}));
    assert_eq!(report["message_id"], Value::Null);
    assert_eq!(report["headers"], json!({}));
}

#[test]
fn count_goes_up_once_per_call_in_one_instance() {
    let echo = json!({"echo": {"exchange": "x", "routing_key": "k"}});
    let count = |run: worker_plugin_sdk::testing::TestRun| {
        run.publishes[0].json::<Value>().unwrap()["count"]
            .as_u64()
            .unwrap()
    };
    let first = count(run(echo.clone()));
    assert_eq!(count(run(echo)), first + 1);
}

#[test]
fn publishes_each_with_its_delay() {
    let run = run(json!({"publish": [
        {"exchange": "master", "routing_key": "a", "body": "one"},
        {"exchange": "master", "routing_key": "b", "body": "two", "delay_ms": 1500},
    ]}));
    assert_eq!(run.outcome, Outcome::Ok);
    let sent: Vec<_> = run
        .publishes
        .iter()
        .map(|p| (p.routing_key.as_str(), p.body_text(), p.delay))
        .collect();
    assert_eq!(
        sent,
        [
            ("a", "one".to_owned(), None),
            ("b", "two".to_owned(), Some(Duration::from_millis(1500)))
        ]
    );
    assert_eq!(run.publishes[0].content_type, None);
}

#[test]
fn a_refused_publish_fails_with_the_world_s_error_name() {
    let body = json!({"publish": [{"exchange": "elsewhere", "routing_key": "k", "body": ""}]});
    let run = TestMessage::json(&body)
        .allow_publish(["master"])
        .run(handle);
    assert_eq!(run.outcome, Outcome::fail("publish refused: not-allowed"));
    let delayed = json!({"publish": [{"exchange": "master", "routing_key": "k", "delay_ms": 10}]});
    let run = TestMessage::json(&delayed).refuse_delays().run(handle);
    assert_eq!(run.outcome, Outcome::fail("publish refused: delay-refused"));
}

#[test]
fn grow_allocates_and_returns() {
    let run = run(json!({"grow_mb": 2, "outcome": "ok"}));
    assert_eq!(run.outcome, Outcome::Ok);
}

#[test]
fn trap_crashes_before_anything_later() {
    let run = run(
        json!({"log": "first", "trap": true, "publish": [{"exchange": "x", "routing_key": "k"}]}),
    );
    assert!(run.outcome.is_retry(), "{:?}", run.outcome);
    assert!(run.outcome.reason().unwrap().contains("trap requested"));
    assert!(run.logged("first"));
    assert!(run.publishes.is_empty());
}
