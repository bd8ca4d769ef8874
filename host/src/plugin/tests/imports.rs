//! Every import of worker_v1, with its bounds.

use super::*;

#[tokio::test]
async fn body_of_zero_bytes() {
    let inv = run("body", input("")).await;
    assert_eq!(inv.answer, Ok(Answer::Ok), "{:?}", inv.logs);
    assert_eq!(inv.publishes.len(), 1);
    assert!(inv.publishes[0].body.is_empty());
}

#[tokio::test]
async fn body_of_one_mib() {
    let body: Vec<u8> = (0..MIB as usize).map(|i| (i % 251) as u8).collect();
    let inv = run("body", input(body.clone())).await;
    assert_eq!(inv.answer, Ok(Answer::Ok), "{:?}", inv.answer);
    assert_eq!(inv.publishes.len(), 1);
    assert_eq!(inv.publishes[0].exchange, "out");
    assert_eq!(inv.publishes[0].routing_key, "echo");
    assert!(inv.publishes[0].body == body, "body read back differs");
}

async fn meta(key: &str) -> Option<String> {
    let inv = run("meta", input(key.to_string())).await;
    assert_eq!(inv.answer, Ok(Answer::Ok), "{key}: {:?}", inv.answer);
    let p = &inv.publishes[0];
    match p.routing_key.as_str() {
        "value" => Some(String::from_utf8(p.body.clone()).expect("utf-8")),
        "absent" => None,
        other => panic!("unexpected key {other}"),
    }
}

#[tokio::test]
async fn meta_get_serves_every_key() {
    let expected = [
        ("routing-key", Some("Q")),
        ("original-routing-key", Some("user.created")),
        ("exchange", Some("master")),
        ("queue", Some("ucenter@user")),
        ("message-id", Some("m-1")),
        ("correlation-id", Some("c-9")),
        ("content-type", Some("application/json")),
        ("timestamp", Some("1700000000")),
        ("attempt", Some("2")),
        ("redelivered", Some("true")),
        ("header:x-tenant", Some("acme")),
        ("header:x-count", Some("42")),
        ("header:x-missing", None),
        ("no-such-key", None),
    ];
    for (key, want) in expected {
        assert_eq!(meta(key).await.as_deref(), want, "key {key}");
    }
}

#[tokio::test]
async fn meta_get_absent_optional_properties() {
    let mut inp = input("message-id");
    inp.meta.message_id = None;
    let inv = run("meta", inp).await;
    assert_eq!(inv.publishes[0].routing_key, "absent");
}

#[tokio::test]
async fn config_get_serves_the_subscription_config() {
    let inv = run("config", input("")).await;
    assert_eq!(inv.answer, Ok(Answer::Ok), "{:?}", inv.answer);
    assert_eq!(inv.publishes[0].body, br#"{"greeting":"hello"}"#);
}

#[tokio::test]
async fn log_lines_and_reason() {
    let inv = run("log", input("")).await;
    assert_eq!(inv.answer, Ok(Answer::Fail));
    let got: Vec<(LogLevel, &str)> = inv
        .logs
        .iter()
        .map(|l| (l.level, l.message.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (LogLevel::Trace, "trace"),
            (LogLevel::Debug, "debug"),
            (LogLevel::Info, "info"),
            (LogLevel::Warn, "warn"),
            (LogLevel::Error, "error"),
            (LogLevel::Error, "loud"),
        ]
    );
    assert!(inv.logs.iter().all(|l| l.source == LogSource::Log));
    // One line, for the worker-error header.
    assert_eq!(inv.reason.as_deref(), Some("bad input second line"));
    assert_eq!(inv.cause().as_deref(), Some("bad input second line"));
}

#[tokio::test]
async fn publish_accepted_refused_and_over_the_bounds() {
    let mut inp = input("");
    inp.publish = Arc::new(PublishPolicy {
        allowed_exchanges: vec!["out".into()],
        max_delay: Some(Duration::from_secs(10)),
        max_messages: 3,
        max_total_bytes: 100,
    });
    let inv = run("publish", inp).await;
    assert_eq!(inv.answer, Ok(Answer::Ok));
    // a ok, b exchange refused, c delayed ok, d negative delay, e too many
    // bytes, f ok, g too many messages.
    assert_eq!(inv.reason.as_deref(), Some("0102403"));
    let keys: Vec<&str> = inv
        .publishes
        .iter()
        .map(|p| p.routing_key.as_str())
        .collect();
    assert_eq!(keys, ["k1", "k2", "k5"]);
    assert_eq!(inv.publishes[0].body, b"hello");
    assert_eq!(inv.publishes[1].delay, Some(Duration::from_millis(1000)));
    assert_eq!(inv.publishes[0].delay, None);
    let refusals = inv
        .logs
        .iter()
        .filter(|l| l.source == LogSource::Host)
        .count();
    assert_eq!(refusals, 4, "{:?}", inv.logs);
}

#[tokio::test]
async fn publish_with_delay_refused_when_delays_are_off() {
    let mut inp = input("");
    inp.publish = Arc::new(PublishPolicy {
        allowed_exchanges: vec!["out".into()],
        max_delay: None,
        max_messages: 3,
        max_total_bytes: 100,
    });
    let inv = run("publish", inp).await;
    // c is now refused, so f and g both fit.
    assert_eq!(inv.reason.as_deref(), Some("0122400"));
}

#[tokio::test]
async fn publishes_are_dropped_unless_ok() {
    let mut inp = input("");
    inp.publish = Arc::new(PublishPolicy::default());
    // No exchange allowed: the body fixture's publish is refused, so it traps.
    let inv = run("body", inp).await;
    assert!(matches!(inv.answer, Err(HandlerError::Trap { .. })));
    assert!(inv.publishes.is_empty());
}
