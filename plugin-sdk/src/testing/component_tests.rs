//! The component call path of the harness against the ABI v1 one, and the key-value and SQL fakes.

use super::*;
use crate::kv::{self, KvError};
use crate::sql::{self, Rows, SqlError, Value};
use crate::{Error, Outgoing, publish_json};

/// A handler that reports what it saw of the message in its log.
fn describe(msg: &Message) -> Outcome {
    crate::info!(
        "headers={:?} meta-attempt={:?} meta-header={:?}",
        msg.headers(),
        msg.meta(meta::ATTEMPT),
        msg.meta("header:tenant")
    );
    Outcome::Ok
}

#[test]
fn both_paths_hand_the_handler_the_same_message() {
    let message = || {
        TestMessage::new("body")
            .routing_key("svc@q")
            .original_routing_key("user.created")
            .attempt(3)
            .redelivered(true)
            .message_id("m-1")
            .timestamp(7)
            .header("tenant", "acme")
    };
    let seen = |msg: &Message| {
        assert_eq!(msg.body(), b"body");
        assert_eq!(
            (msg.routing_key(), msg.original_routing_key()),
            ("svc@q", "user.created")
        );
        assert_eq!((msg.attempt(), msg.redelivered()), (3, true));
        assert_eq!((msg.message_id(), msg.timestamp()), (Some("m-1"), Some(7)));
        assert_eq!(msg.header("tenant").as_deref(), Some("acme"));
        assert_eq!(msg.meta(meta::QUEUE).as_deref(), Some("test@queue"));
        assert_eq!(msg.meta(meta::REDELIVERED).as_deref(), Some(meta::TRUE));
    };
    assert!(message().run(seen).outcome.is_ok());
    assert!(message().run_v1(seen).outcome.is_ok());
}

#[test]
fn only_a_component_sees_every_header() {
    let component = TestMessage::new("")
        .header("tenant", "acme")
        .attempt(2)
        .run(describe);
    assert!(
        component.logged(
            r#"headers=Some([("tenant", "acme")]) meta-attempt=Some("2") meta-header=Some("acme")"#
        ),
        "{:?}",
        component.logs
    );
    let v1 = TestMessage::new("")
        .header("tenant", "acme")
        .attempt(2)
        .run_v1(describe);
    assert!(
        v1.logged(r#"headers=None meta-attempt=Some("2") meta-header=Some("acme")"#),
        "{:?}",
        v1.logs
    );
}

#[test]
fn retry_after_keeps_its_delay_only_in_a_component() {
    let later = |_: &Message| Outcome::retry_after("busy", Duration::from_millis(2500));
    let component = TestMessage::new("").run(later);
    assert_eq!(
        component.outcome,
        Outcome::retry_after("busy", Duration::from_millis(2500))
    );
    let v1 = TestMessage::new("").run_v1(later);
    assert_eq!(v1.outcome, Outcome::retry("busy"));
    assert_eq!(v1.logs[0].level, Level::Warn);
    assert!(v1.logged("needs a component plugin"));
    // Through `?` too.
    let err = TestMessage::new("").run(|_: &Message| -> Result<(), Error> {
        Err(Error::retry_after("later", Duration::from_secs(1)))
    });
    assert_eq!(err.outcome.retry_delay(), Some(Duration::from_secs(1)));
}

#[test]
fn only_a_component_publishes_headers_and_content_type() {
    let handler = |_: &Message| -> Result<(), Error> {
        publish_json("master", "a", &serde_json::json!({}))?;
        Outgoing::new("master", "b", "x")
            .header("h", "v")
            .publish()?;
        Ok(())
    };
    let component = TestMessage::new("").run(handler);
    assert_eq!(
        component.publishes[0].content_type.as_deref(),
        Some("application/json")
    );
    assert_eq!(
        component.publishes[1].headers,
        [("h".to_owned(), "v".to_owned())]
    );
    let v1 = TestMessage::new("").run_v1(handler);
    assert_eq!(v1.publishes[0].content_type, None);
    assert!(v1.publishes[1].headers.is_empty());
}

#[test]
fn a_panic_in_a_component_is_a_retry_with_its_message() {
    let run = TestMessage::new("").run(|_: &Message| -> Outcome { panic!("boom {}", 7) });
    assert!(run.outcome.is_retry());
    assert!(run.outcome.reason().unwrap().contains("boom 7"));
    assert_eq!(run.logs.last().map(|l| l.level), Some(Level::Error));
}

#[test]
fn the_kv_fake_is_a_store() {
    let run =
        TestMessage::new("")
            .kv("a", "1")
            .kv("gone", "x")
            .run(|_: &Message| -> Result<(), Error> {
                assert_eq!(kv::get("a")?, Some(b"1".to_vec()));
                assert_eq!(kv::get("missing")?, None);
                assert_eq!(kv::increment("a", 41)?, 42);
                assert_eq!(kv::increment("fresh", -2)?, -2);
                assert!(kv::delete("gone")?);
                assert!(!kv::delete("gone")?);
                kv::set_with_ttl("session", "s", Duration::from_micros(1))?;
                assert!(kv::compare_and_swap("lock", None, "me", None)?);
                assert!(!kv::compare_and_swap("lock", None, "you", None)?);
                assert_eq!(kv::get(""), Err(KvError::InvalidKey));
                kv::set("text", "not a number")?;
                assert!(matches!(
                    kv::increment("text", 1),
                    Err(KvError::Unavailable(_))
                ));
                Ok(())
            });
    assert!(run.outcome.is_ok(), "{:?}", run.outcome);
    let keys: Vec<_> = run.kv.keys().map(String::as_str).collect();
    assert_eq!(keys, ["a", "fresh", "lock", "session", "text"]);
    assert_eq!(run.kv["a"], b"42");
    assert_eq!(run.kv["lock"], b"me");
    assert_eq!(run.kv_ttl["session"], Duration::from_millis(1));
    assert!(!run.kv_ttl.contains_key("a"));
}

#[test]
fn kv_errors_retry_or_fail_as_they_should() {
    let get = |_: &Message| -> Result<(), Error> { kv::get("k").map(drop).map_err(Into::into) };
    let denied = TestMessage::new("").kv_error(KvError::Denied).run(get);
    assert!(denied.outcome.is_retry());
    assert!(denied.outcome.reason().unwrap().contains("no kv grant"));
    let down = TestMessage::new("")
        .kv_error(KvError::Unavailable("redis down".into()))
        .run(get);
    assert_eq!(down.outcome, Outcome::retry("kv: unavailable: redis down"));
    assert!(
        TestMessage::new("")
            .kv_error(KvError::TooLarge)
            .run(get)
            .outcome
            .is_fail()
    );
    let json = TestMessage::new("")
        .kv("k", "{not json")
        .run(|_: &Message| kv::get_json::<serde_json::Value>("k").map(drop));
    assert!(json.outcome.is_fail());
}

#[test]
fn the_sql_fake_records_statements_and_answers_from_its_script() {
    let run = TestMessage::new("")
        .sql_rows(Rows::new(["id", "name"]).row([Value::Int(1), "ann".into()]))
        .sql_affected(3)
        .run(|_: &Message| -> Result<(), Error> {
            let rows = sql::query("SELECT id, name FROM users WHERE id = ?", &[1.into()])?;
            assert_eq!(rows.len(), 1);
            let row = rows.first().unwrap();
            assert_eq!(row.get("name").and_then(Value::as_str), Some("ann"));
            assert_eq!(row.at(0), Some(&Value::Int(1)));
            assert_eq!(
                sql::execute("UPDATE users SET seen = ?", &[true.into()])?,
                3
            );
            // Beyond the script: no rows, 0 affected.
            assert!(sql::query("SELECT 1", &[])?.is_empty());
            assert_eq!(sql::execute("DELETE FROM x", &[None::<i64>.into()])?, 0);
            Ok(())
        });
    assert!(run.outcome.is_ok(), "{:?}", run.outcome);
    let kinds: Vec<_> = run.sql.iter().map(|c| c.kind).collect();
    assert_eq!(
        kinds,
        [
            SqlKind::Query,
            SqlKind::Execute,
            SqlKind::Query,
            SqlKind::Execute
        ]
    );
    assert_eq!(run.sql[1].params, [Value::Boolean(true)]);
    assert_eq!(run.sql[3].params, [Value::Null]);
}

#[test]
fn sql_errors_retry_or_fail_as_they_should() {
    let exec = |_: &Message| -> Result<(), Error> {
        sql::execute("INSERT INTO t VALUES (1)", &[])?;
        Ok(())
    };
    let cases = [
        (SqlError::Denied, true),
        (SqlError::Unavailable("down".into()), true),
        (SqlError::Other("deadlock".into()), true),
        (SqlError::Constraint("dup".into()), false),
        (SqlError::Invalid("syntax".into()), false),
    ];
    for (error, retries) in cases {
        let run = TestMessage::new("").sql_error(error.clone()).run(exec);
        assert_eq!(run.outcome.is_retry(), retries, "{error:?}");
        assert_eq!(run.outcome.reason(), Some(error.to_string().as_str()));
        assert_eq!(run.sql.len(), 1);
    }
}

#[test]
fn outside_a_run_kv_and_sql_are_unavailable() {
    assert!(matches!(kv::get("k"), Err(KvError::Unavailable(_))));
    assert!(matches!(
        sql::query("SELECT 1", &[]),
        Err(SqlError::Unavailable(_))
    ));
}

#[test]
fn the_http_fake_records_requests_and_answers_from_its_script() {
    use crate::http::{self, HttpError, Request, Response};
    let run = TestMessage::new("")
        .http_response(
            Response::new(200)
                .header("Content-Type", "application/json")
                .with_body(r#"{"stock": 3}"#),
        )
        .run(|_: &Message| -> Result<(), Error> {
            let answer = Request::get("https://stock.example/items/7")
                .header("accept", "application/json")
                .timeout(Duration::from_secs(2))
                .send()?;
            assert!(answer.is_success());
            assert_eq!(
                answer.header_value("content-type"),
                Some("application/json")
            );
            let stock: serde_json::Value = answer.json()?;
            assert_eq!(stock["stock"], 3);
            // Beyond the script, and a URL the backend would refuse.
            assert!(matches!(
                http::get("http://x/"),
                Err(HttpError::Unavailable(_))
            ));
            assert!(matches!(http::get("ftp://x/"), Err(HttpError::Invalid(_))));
            let posted = Request::new("put", "http://x/")
                .json(&serde_json::json!({"a": 1}))?
                .send();
            assert!(posted.is_err());
            Ok(())
        });
    assert!(run.outcome.is_ok(), "{:?}", run.outcome);
    let sent: Vec<_> = run
        .http
        .iter()
        .map(|r| (r.method.as_str(), r.url.as_str()))
        .collect();
    assert_eq!(
        sent,
        [
            ("GET", "https://stock.example/items/7"),
            ("GET", "http://x/"),
            ("PUT", "http://x/")
        ]
    );
    assert_eq!(run.http[0].timeout, Some(Duration::from_secs(2)));
    assert_eq!(run.http[2].body, br#"{"a":1}"#);
}

#[test]
fn http_errors_retry_or_fail_as_they_should() {
    use crate::http::{self, HttpError};
    let get = |_: &Message| -> Result<(), Error> {
        http::get("https://api.example/")?;
        Ok(())
    };
    let cases = [
        (HttpError::Denied, true),
        (HttpError::Timeout, true),
        (HttpError::Unavailable("refused".into()), true),
        (HttpError::Invalid("uri".into()), false),
        (HttpError::TooLarge, false),
    ];
    for (error, retries) in cases {
        let run = TestMessage::new("").http_error(error.clone()).run(get);
        assert_eq!(run.outcome.is_retry(), retries, "{error:?}");
        assert_eq!(run.http.len(), 1);
    }
}
