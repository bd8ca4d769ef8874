//! The probe's behaviour, natively through the SDK harness and its kv, SQL and HTTP fakes.

use std::time::Duration;

use worker_plugin_sdk::Outcome;
use worker_plugin_sdk::http::{HttpError, Response};
use worker_plugin_sdk::kv::KvError;
use worker_plugin_sdk::serde_json::{self, Value, json};
use worker_plugin_sdk::sql::{self, Rows, SqlError};
use worker_plugin_sdk::testing::{TestMessage, TestRun};

use super::handle;

fn message(body: Value) -> TestMessage {
    TestMessage::json(&body).config(json!({"report": "reports"}))
}

/// The report an ok answer published.
fn report(run: &TestRun) -> Value {
    assert_eq!(run.outcome, Outcome::Ok, "{:?}", run.logs);
    assert_eq!(run.publishes.len(), 1, "one report");
    assert_eq!(run.publishes[0].exchange, "reports");
    run.publishes[0].json().expect("the report is JSON")
}

fn results(run: &TestRun) -> Vec<Value> {
    report(run)["results"].as_array().expect("results").clone()
}

/// The report a retry or fail answer carries as its reason.
fn reason(outcome: &Outcome) -> Value {
    let text = outcome.reason().expect("a reason");
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn ok_publishes_the_report_under_its_id_with_the_headers() {
    let run = message(json!({"id": "m-7", "steps": []}))
        .header("worker-error", "sql: unavailable: down")
        .attempt(3)
        .run(handle);
    let r = report(&run);
    assert_eq!(run.publishes[0].routing_key, "m-7");
    assert_eq!(r["id"], "m-7");
    assert_eq!(r["attempt"], 3);
    assert_eq!(r["results"], json!([]));
    assert_eq!(r["headers"]["worker-error"], "sql: unavailable: down");
    assert!(run.logged("cap-probe Ok"));
}

#[test]
fn the_id_defaults_to_the_routing_key_and_no_report_exchange_publishes_nothing() {
    let run = message(json!({})).routing_key("a.b").run(handle);
    assert_eq!(run.publishes[0].routing_key, "a.b");
    let run = TestMessage::json(&json!({})).run(handle);
    assert_eq!(run.outcome, Outcome::Ok);
    assert!(run.publishes.is_empty());
}

#[test]
fn a_body_that_is_not_a_script_fails() {
    for body in ["", "[1]", "{oops", r#"{"answer": "maybe"}"#] {
        let run = TestMessage::new(body).run(handle);
        assert!(run.outcome.is_fail(), "{body:?}: {:?}", run.outcome);
    }
}

#[test]
fn every_kv_operation_reports_its_answer() {
    let steps = json!([
        {"kv": "set", "key": "a", "value": "1"},
        {"kv": "get", "key": "a"},
        {"kv": "get", "key": "missing"},
        {"kv": "increment", "key": "n", "delta": 5},
        {"kv": "increment", "key": "n", "delta": -2},
        {"kv": "delete", "key": "a"},
        {"kv": "delete", "key": "a"},
        {"kv": "cas", "key": "c", "value": "x"},
        {"kv": "cas", "key": "c", "expected": "wrong", "value": "y"},
        {"kv": "cas", "key": "c", "expected": "x", "value": "y", "ttl_ms": 250},
        {"kv": "set", "key": "t", "value_len": 3, "ttl_ms": 100},
        {"kv": "add", "key": "counter", "delta": 2, "times": 3},
    ]);
    let run = message(json!({"steps": steps}))
        .kv("counter", "10")
        .run(handle);
    let oks: Vec<Value> = results(&run).iter().map(|r| r["ok"].clone()).collect();
    assert_eq!(
        oks,
        [
            Value::Null,
            json!("1"),
            Value::Null,
            json!(5),
            json!(3),
            json!(true),
            json!(false),
            json!(true),
            json!(false),
            json!(true),
            Value::Null,
            json!({"value": 16, "tries": 3}),
        ]
    );
    assert_eq!(run.kv["c"], b"y");
    assert_eq!(run.kv["t"], b"xxx");
    assert_eq!(run.kv["counter"], b"16");
    assert_eq!(run.kv_ttl["t"], Duration::from_millis(100));
    assert_eq!(run.kv_ttl["c"], Duration::from_millis(250));
}

#[test]
fn kv_errors_report_the_worlds_variant_names() {
    for (error, name) in [
        (KvError::Denied, "denied"),
        (KvError::Unavailable("redis down".into()), "unavailable"),
        (KvError::TooLarge, "too-large"),
        (KvError::InvalidKey, "invalid-key"),
    ] {
        let run = message(json!({"steps": [{"kv": "get", "key": "k"}, {"kv": "add", "key": "k"}]}))
            .kv_error(error.clone())
            .run(handle);
        for r in results(&run) {
            assert_eq!(r["error"], name, "{r}");
            assert_eq!(r["text"], error.to_string());
        }
    }
}

#[test]
fn sql_steps_pass_params_and_map_rows() {
    let rows = Rows::new(["id", "n", "f", "b", "blob", "none"]).row([
        sql::Value::Text("a".into()),
        sql::Value::Int(7),
        sql::Value::Float(1.5),
        sql::Value::Boolean(true),
        sql::Value::Bytes(vec![0, 255]),
        sql::Value::Null,
    ]);
    let steps = json!([
        {"sql": "execute", "statement": "INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)",
         "params": ["a", 7, 1.5, true, {"bytes": [0, 255]}, null]},
        {"sql": "query", "statement": "SELECT * FROM t"},
        {"sql": "execute", "statement": "x", "params": [[1]]},
    ]);
    let run = message(json!({"steps": steps}))
        .sql_affected(1)
        .sql_rows(rows)
        .run(handle);
    let r = results(&run);
    assert_eq!(r[0]["ok"], 1);
    assert_eq!(
        r[1]["ok"],
        json!({"columns": ["id", "n", "f", "b", "blob", "none"],
               "rows": [["a", 7, 1.5, true, {"bytes": [0, 255]}, null]]})
    );
    assert_eq!(r[2]["error"], "bad-step");
    assert_eq!(run.sql.len(), 2, "a bad param never reaches the database");
    assert_eq!(
        run.sql[0].params,
        [
            sql::Value::Text("a".into()),
            sql::Value::Int(7),
            sql::Value::Float(1.5),
            sql::Value::Boolean(true),
            sql::Value::Bytes(vec![0, 255]),
            sql::Value::Null,
        ]
    );
}

#[test]
fn sql_errors_report_the_worlds_variant_names() {
    for (error, name) in [
        (SqlError::Denied, "denied"),
        (SqlError::Unavailable("down".into()), "unavailable"),
        (SqlError::Constraint("duplicate".into()), "constraint"),
        (SqlError::Invalid("syntax".into()), "invalid"),
        (SqlError::Other("disk".into()), "other"),
    ] {
        let run = message(json!({"steps": [{"sql": "execute", "statement": "x"}]}))
            .sql_error(error)
            .run(handle);
        assert_eq!(results(&run)[0]["error"], name);
    }
}

#[test]
fn http_steps_send_what_the_script_says_and_report_the_answer() {
    let step = json!({"http": "post", "url": "http://127.0.0.1:9/x?y=1",
        "headers": {"X-Mine": "1"}, "body": "hello", "timeout_ms": 300});
    let answer = Response::new(302)
        .header("Location", "/elsewhere")
        .header("Set-Cookie", "a")
        .header("set-cookie", "b")
        .with_body("moved");
    let run = message(json!({"steps": [step]}))
        .http_response(answer)
        .run(handle);
    assert_eq!(
        results(&run)[0]["ok"],
        json!({"status": 302, "headers": {"location": "/elsewhere", "set-cookie": "a, b"},
               "body": "moved", "body_len": 5, "sent_headers": {"x-mine": "1"}})
    );
    let sent = &run.http[0];
    assert_eq!(
        (sent.method.as_str(), sent.url.as_str()),
        ("POST", "http://127.0.0.1:9/x?y=1")
    );
    assert_eq!(sent.headers, [("X-Mine".to_owned(), "1".to_owned())]);
    assert_eq!(sent.body, b"hello");
    assert_eq!(sent.timeout, Some(Duration::from_millis(300)));
}

#[test]
fn http_errors_report_their_names() {
    for (error, name) in [
        (HttpError::Denied, "denied"),
        (HttpError::TooLarge, "too-large"),
        (HttpError::Timeout, "timeout"),
        (HttpError::Invalid("url".into()), "invalid"),
        (HttpError::Unavailable("refused".into()), "unavailable"),
    ] {
        let run = message(json!({"steps": [{"http": "GET", "url": "http://a.example/"}]}))
            .http_error(error)
            .run(handle);
        assert_eq!(results(&run)[0]["error"], name);
    }
}

#[test]
fn the_guest_has_no_such_variable() {
    let run = message(json!({"steps": [{"env": "CAP_PROBE_SURELY_UNSET_4711"}]})).run(handle);
    assert_eq!(results(&run)[0], json!({"ok": null}));
}

#[test]
fn a_bad_step_is_reported_and_the_others_still_run() {
    let steps = json!([{"nope": 1}, {"kv": "frobnicate", "key": "k"}, {"kv": "set", "key": "k", "value": "v"}]);
    let run = message(json!({"steps": steps})).run(handle);
    let r = results(&run);
    assert_eq!(
        (r[0]["error"].as_str(), r[1]["error"].as_str()),
        (Some("bad-step"), Some("bad-step"))
    );
    assert_eq!(r[2], json!({"ok": null}));
    assert_eq!(run.kv["k"], b"v");
}

#[test]
fn retry_and_fail_carry_the_report_as_their_reason() {
    let steps = json!([{"kv": "set", "key": "k", "value": "v"}]);
    for (answer, retry) in [("retry", true), ("fail", false)] {
        let run = message(json!({"id": "r", "steps": steps, "answer": answer})).run(handle);
        assert_eq!(run.outcome.is_retry(), retry);
        assert_eq!(run.outcome.is_fail(), !retry);
        assert!(run.publishes.is_empty());
        assert_eq!(
            reason(&run.outcome),
            json!({"id": "r", "attempt": 1, "results": [{"ok": null}]})
        );
    }
}

#[test]
fn on_error_replaces_the_answer_only_when_a_step_failed() {
    let script = json!({"steps": [{"sql": "execute", "statement": "x"}], "on_error": "retry"});
    let run = message(script.clone())
        .sql_error(SqlError::Unavailable("connection refused".into()))
        .run(handle);
    let why = reason(&run.outcome);
    assert!(run.outcome.is_retry());
    assert_eq!(why["results"][0]["error"], "unavailable");
    assert_eq!(message(script).run(handle).outcome, Outcome::Ok);
}

#[test]
fn until_attempt_answers_ok_from_that_attempt_on() {
    let script = json!({"id": "u", "answer": "retry", "on_error": "fail", "until_attempt": 2});
    assert!(message(script.clone()).run(handle).outcome.is_retry());
    let run = message(script).attempt(2).run(handle);
    assert_eq!(report(&run)["attempt"], 2);
}

#[test]
fn trap_panics_after_the_steps() {
    let script = json!({"steps": [{"kv": "set", "key": "k", "value": "v"}], "answer": "trap"});
    let run = message(script).run(handle);
    assert!(
        run.outcome.is_retry(),
        "a panic is a trap: {:?}",
        run.outcome
    );
    assert!(run.publishes.is_empty());
    assert_eq!(run.kv["k"], b"v", "the steps ran first");
}
