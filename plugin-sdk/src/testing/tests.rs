//! The test harness itself, exercised through the public SDK calls.

use super::*;
use crate::{Error, PublishError, ResultExt, publish, publish_delayed};
use worker_abi::{PublishRefusal, limits};

#[test]
fn metadata_reaches_the_handler() {
    let run = TestMessage::new("body")
        .routing_key("svc@q")
        .original_routing_key("user.created")
        .exchange("master")
        .queue("svc@q")
        .attempt(3)
        .redelivered(true)
        .message_id("m-1")
        .correlation_id("c-1")
        .content_type("text/plain")
        .timestamp(1_700_000_000)
        .header("x-n", 5)
        .run(|msg: &Message| {
            assert_eq!(msg.body(), b"body");
            assert_eq!(msg.routing_key(), "svc@q");
            assert_eq!(msg.original_routing_key(), "user.created");
            assert_eq!(msg.exchange(), "master");
            assert_eq!(msg.queue(), "svc@q");
            assert_eq!(msg.attempt(), 3);
            assert!(msg.redelivered());
            assert_eq!(msg.message_id(), Some("m-1"));
            assert_eq!(msg.correlation_id(), Some("c-1"));
            assert_eq!(msg.content_type(), Some("text/plain"));
            assert_eq!(msg.timestamp(), Some(1_700_000_000));
            assert_eq!(msg.header("x-n").as_deref(), Some("5"));
            assert_eq!(msg.header("missing"), None);
        });
    assert_eq!(run.outcome, Outcome::Ok);
}

#[test]
fn original_routing_key_defaults_to_routing_key() {
    let run = TestMessage::new("").routing_key("a.b").run(|m: &Message| {
        assert_eq!(m.original_routing_key(), "a.b");
    });
    assert!(run.outcome.is_ok());
}

#[test]
fn reasons_travel_with_retry_and_fail() {
    let retry = TestMessage::new("").run(|_: &Message| Outcome::retry("later"));
    assert_eq!(retry.outcome, Outcome::retry("later"));
    let fail =
        TestMessage::new("").run(|_: &Message| -> Result<(), Error> { Err(Error::fail("no")) });
    assert_eq!(fail.outcome, Outcome::fail("no"));
    let parsed = TestMessage::new("x").run(|_: &Message| -> Result<(), Error> {
        "x".parse::<i32>().or_retry()?;
        Ok(())
    });
    assert!(parsed.outcome.is_retry());
}

#[test]
fn malformed_json_fails() {
    let run = TestMessage::new("{nope").run(|m: &Message| m.json::<serde_json::Value>().map(drop));
    assert!(run.outcome.is_fail(), "{:?}", run.outcome);
    assert!(run.outcome.reason().unwrap().starts_with("malformed JSON"));
}

#[test]
fn panic_becomes_retry_with_message() {
    let run = TestMessage::new("").run(|_: &Message| -> Outcome { panic!("boom {}", 42) });
    let reason = run.outcome.reason().unwrap().to_owned();
    assert!(run.outcome.is_retry());
    assert!(
        reason.contains("boom 42") && reason.starts_with("panicked at "),
        "{reason}"
    );
    assert_eq!(run.logs.last().map(|l| l.level), Some(Level::Error));
}

#[test]
fn publishes_are_recorded_with_delay() {
    let run = TestMessage::new("").run(|_: &Message| -> Result<(), Error> {
        publish("master", "a", "1")?;
        publish_delayed("master", "b", "2", Duration::from_micros(10))?;
        publish_delayed("master", "c", "3", Duration::ZERO)?;
        Ok(())
    });
    let delays: Vec<_> = run.publishes.iter().map(|p| p.delay).collect();
    assert_eq!(delays, [None, Some(Duration::from_millis(1)), None]);
    assert_eq!(run.publishes[1].body_text(), "2");
}

#[test]
fn refused_publish_is_an_error_and_retries() {
    let run = TestMessage::new("")
        .allow_publish(["master"])
        .run(|_: &Message| {
            assert_eq!(
                publish("other", "k", ""),
                Err(PublishError::ExchangeNotAllowed("other".into()))
            );
            publish("other", "k", "")
        });
    assert!(run.outcome.is_retry());
    assert!(run.publishes.is_empty());
    // Every refusal of ABI v1, by code, and a code from a newer host.
    let expected = [
        (-1, PublishError::ExchangeNotAllowed("master".into())),
        (-2, PublishError::DelayRefused),
        (-3, PublishError::TooManyMessages),
        (-4, PublishError::TooManyBytes),
        (-5, PublishError::Invalid),
        (-9, PublishError::Other(-9)),
    ];
    for (code, want) in expected {
        TestMessage::new("")
            .refuse_publish(code)
            .run(|_: &Message| {
                let got = publish("master", "k", "");
                assert_eq!(got, Err(want.clone()));
                assert_eq!(want.code(), Some(code));
            });
    }
    for refusal in PublishRefusal::ALL {
        let run = TestMessage::new("")
            .refuse_publish(refusal)
            .run(|_: &Message| publish("master", "k", ""));
        let reason = run.outcome.reason().unwrap_or_default().to_owned();
        assert!(reason.contains(refusal.description()), "{reason}");
    }
}

#[test]
fn publishes_are_checked_like_the_host_does() {
    let long = "k".repeat(limits::MAX_NAME_LEN + 1);
    TestMessage::new("").run(|_: &Message| {
        assert_eq!(publish("master", &long, ""), Err(PublishError::Invalid));
        let big = vec![0u8; limits::MAX_PUBLISH_BYTES];
        assert_eq!(publish("master", "k", big), Err(PublishError::TooManyBytes));
        for _ in 0..limits::MAX_PUBLISHES {
            assert_eq!(publish("master", "k", "x"), Ok(()));
        }
        assert_eq!(
            publish("master", "k", "x"),
            Err(PublishError::TooManyMessages)
        );
    });
    TestMessage::new("").refuse_delays().run(|_: &Message| {
        let later = Duration::from_secs(1);
        assert_eq!(
            publish_delayed("master", "k", "", later),
            Err(PublishError::DelayRefused)
        );
        assert_eq!(publish_delayed("master", "k", "", Duration::ZERO), Ok(()));
    });
}

#[test]
fn config_defaults_to_empty_table() {
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct Cfg {
        n: u32,
    }
    let run = TestMessage::new("").run(|_: &Message| -> Result<(), Error> {
        assert_eq!(crate::config::<Cfg>()?.n, 0);
        Ok(())
    });
    assert!(run.outcome.is_ok());
    let bad = TestMessage::new("")
        .config(serde_json::json!({"n": "x"}))
        .run(|_: &Message| crate::config::<Cfg>().map(drop));
    assert!(bad.outcome.is_retry());
    assert!(
        bad.outcome
            .reason()
            .unwrap()
            .starts_with("bad plugin config")
    );
}

#[test]
fn logs_keep_levels() {
    let run = TestMessage::new("").run(|_: &Message| {
        crate::trace!("t");
        crate::debug!("d");
        crate::info!("i {}", 1);
        crate::warn!("w");
        crate::error!("e");
    });
    let levels: Vec<_> = run.logs.iter().map(|l| l.level).collect();
    assert_eq!(
        levels,
        [
            Level::Trace,
            Level::Debug,
            Level::Info,
            Level::Warn,
            Level::Error
        ]
    );
    assert!(run.logged("i 1"));
}
