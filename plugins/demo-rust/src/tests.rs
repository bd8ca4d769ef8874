//! The demo's behaviour, natively through the SDK harness (the component's own call path).

use std::time::Duration;

use worker_plugin_sdk::Outcome;
use worker_plugin_sdk::serde_json::{Value, json};
use worker_plugin_sdk::testing::TestMessage;

use super::{capabilities, handle};

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

fn echo_of(run: &worker_plugin_sdk::testing::TestRun) -> Value {
    run.publishes[0].json().unwrap()
}

const ECHO: &str = r#"{"echo": {"exchange": "x", "routing_key": "k"}}"#;

#[test]
fn kv_counts_messages_per_original_routing_key() {
    let run = TestMessage::new(ECHO)
        .routing_key("demo@q")
        .original_routing_key("a")
        .kv("seen:a", "2")
        .run(handle);
    assert_eq!(echo_of(&run)["seen"], 3);
    assert_eq!(run.kv["seen:a"], b"3");
}

#[test]
fn sql_writes_one_audit_row_per_message() {
    use worker_plugin_sdk::sql::{Rows, Value as Sql};
    use worker_plugin_sdk::testing::SqlKind;

    let run = TestMessage::new(ECHO)
        .original_routing_key("k")
        .message_id("m-1")
        .sql_rows(Rows::new(["COUNT(*)"]).row([5_i64]))
        .run(handle);
    assert_eq!(echo_of(&run)["audited"], 5);
    let calls: Vec<_> = run
        .sql
        .iter()
        .map(|c| (c.kind, c.statement.as_str(), c.params.clone()))
        .collect();
    let row = vec![
        Sql::from("k"),
        Sql::from("m-1"),
        Sql::from(1_u32),
        Sql::Int(ECHO.len() as i64),
    ];
    assert_eq!(
        calls,
        [
            (SqlKind::Execute, capabilities::AUDIT_TABLE, vec![]),
            (SqlKind::Execute, capabilities::AUDIT_ROW, row),
            (SqlKind::Query, capabilities::AUDIT_COUNT, vec![]),
        ]
    );
}

#[test]
fn without_grants_it_answers_ok_and_says_so_at_debug() {
    use worker_plugin_sdk::{Level, kv::KvError, sql::SqlError};

    let run = TestMessage::new(ECHO)
        .kv_error(KvError::Denied)
        .sql_error(SqlError::Denied)
        .run(handle);
    assert_eq!(run.outcome, Outcome::Ok);
    let report = echo_of(&run);
    assert_eq!(
        (&report["seen"], &report["audited"]),
        (&Value::Null, &Value::Null)
    );
    assert!(run.logs.iter().all(|l| l.level == Level::Debug));
    assert!(run.logged("kv not granted") && run.logged("sql not granted"));
}

#[test]
fn a_store_or_database_down_is_a_retry_a_broken_table_fails() {
    use worker_plugin_sdk::{kv::KvError, sql::SqlError};

    let down = TestMessage::new("{}")
        .kv_error(KvError::Unavailable("connection refused".into()))
        .run(handle);
    assert_eq!(
        down.outcome,
        Outcome::retry("kv unavailable: connection refused")
    );
    let down = TestMessage::new("{}")
        .sql_error(SqlError::Unavailable("db restarting".into()))
        .run(handle);
    assert_eq!(
        down.outcome,
        Outcome::retry("sql unavailable: db restarting")
    );
    let broken = TestMessage::new("{}")
        .sql_error(SqlError::Invalid("no column attempt".into()))
        .run(handle);
    assert_eq!(
        broken.outcome,
        Outcome::fail("audit: invalid: no column attempt")
    );
    let raced = TestMessage::new("{}")
        .sql_error(SqlError::Constraint("pg_type".into()))
        .run(handle);
    assert_eq!(raced.outcome, Outcome::retry("audit: constraint: pg_type"));
}

#[test]
fn http_answers_and_errors_go_into_the_echo() {
    use worker_plugin_sdk::http::{HttpError, Response};

    let body = json!({"echo": {"exchange": "x", "routing_key": "k"},
        "http": {"url": "http://api.test/ok", "method": "post", "body": "b", "headers": {"x": "1"}}});
    let run = TestMessage::json(&body)
        .http_response(Response::new(201).with_body("made"))
        .run(handle);
    assert_eq!(run.outcome, Outcome::Ok);
    assert_eq!(
        echo_of(&run)["http"],
        json!({"status": 201, "body": "made"})
    );
    assert!(run.logged("http post http://api.test/ok: 201"));
    let sent = &run.http[0];
    assert_eq!(
        (sent.method.as_str(), sent.body.as_slice()),
        ("POST", &b"b"[..])
    );
    assert_eq!(sent.headers, [("x".to_owned(), "1".to_owned())]);

    let denied = TestMessage::json(&body)
        .http_error(HttpError::Denied)
        .run(handle);
    assert_eq!(denied.outcome, Outcome::Ok);
    assert_eq!(
        echo_of(&denied)["http"],
        json!({"error": "HTTP-request-denied"})
    );
}
