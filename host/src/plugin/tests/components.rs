//! Component plugins (ABI v2) against the example `plugins/demo_rust.wasm`, whose behaviour is
//! driven by the message body (see plugins/README.md); no broker.

use super::*;

/// The demo component: `WORKER_TEST_COMPONENT` names another build of the same behaviour
/// (the Python or JavaScript demo).
fn demo() -> Arc<Plugin> {
    static DEMO: OnceLock<Arc<Plugin>> = OnceLock::new();
    DEMO.get_or_init(|| {
        let path = std::env::var_os("WORKER_TEST_COMPONENT").map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/demo_rust.wasm"),
            PathBuf::from,
        );
        runtime()
            .load_file(&path)
            .unwrap_or_else(|e| panic!("{e} (build it: scripts/build-plugins.sh)"))
    })
    .clone()
}

async fn call(body: serde_json::Value, limits: &Limits) -> Invocation {
    demo()
        .handle(Arc::new(input(body.to_string())), limits)
        .await
}

fn echo() -> serde_json::Value {
    serde_json::json!({"exchange": "out", "routing_key": "echoed"})
}

fn echoed(inv: &Invocation) -> serde_json::Value {
    assert_eq!(inv.publishes.len(), 1, "{inv:?}");
    serde_json::from_slice(&inv.publishes[0].body).expect("echo body is JSON")
}

#[tokio::test]
async fn ok_sees_the_delivery_and_config_and_publishes() {
    let inv = call(serde_json::json!({"echo": echo(), "log": "hi"}), &limits()).await;
    assert_eq!(inv.answer, Ok(Answer::Ok), "{inv:?}");
    let body = echoed(&inv);
    assert_eq!(body["config"], serde_json::json!({"greeting": "hello"}));
    assert_eq!(body["count"], 1);
    assert_eq!(body["attempt"], 2);
    assert_eq!(body["routing_key"], "Q");
    assert_eq!(body["original_routing_key"], "user.created");
    assert_eq!(body["message_id"], "m-1");
    assert_eq!(body["headers"]["x-tenant"], "acme");
    let publish = &inv.publishes[0];
    assert_eq!(
        (publish.exchange.as_str(), publish.routing_key.as_str()),
        ("out", "echoed")
    );
    assert_eq!(publish.content_type.as_deref(), Some("application/json"));
    assert!(
        inv.logs
            .iter()
            .any(|l| l.message == "hi" && l.source == LogSource::Log),
        "{:?}",
        inv.logs
    );
}

#[tokio::test]
async fn retry_carries_reason_and_delay() {
    let body = serde_json::json!({"outcome": "retry", "reason": "busy", "after_ms": 1500});
    let inv = call(body, &limits()).await;
    assert_eq!(inv.answer, Ok(Answer::Retry));
    assert_eq!(inv.reason.as_deref(), Some("busy"));
    assert_eq!(inv.retry_after, Some(Duration::from_millis(1500)));
}

#[tokio::test]
async fn fail_carries_reason_and_drops_publishes() {
    let body = serde_json::json!({"outcome": "fail", "reason": "bad order", "echo": echo()});
    let inv = call(body, &limits()).await;
    assert_eq!(inv.answer, Ok(Answer::Fail));
    assert_eq!(inv.reason.as_deref(), Some("bad order"));
    assert!(inv.publishes.is_empty(), "publishes only on ok");
}

#[tokio::test]
async fn body_that_is_not_json_fails() {
    let inv = demo().handle(Arc::new(input("not json")), &limits()).await;
    assert_eq!(inv.answer, Ok(Answer::Fail));
    assert_eq!(inv.reason.as_deref(), Some("not a JSON object"));
}

#[tokio::test]
async fn refused_publish_is_an_error_value_not_a_trap() {
    let body = serde_json::json!({"publish": [{"exchange": "elsewhere", "routing_key": "k", "body": "x"}]});
    let inv = call(body, &limits()).await;
    assert_eq!(inv.answer, Ok(Answer::Fail));
    assert_eq!(inv.reason.as_deref(), Some("publish refused: not-allowed"));
    assert!(
        inv.logs
            .iter()
            .any(|l| l.source == LogSource::Host && l.message.contains("not-allowed")),
        "{:?}",
        inv.logs
    );
}

#[tokio::test]
async fn stdout_becomes_log_lines() {
    let inv = call(serde_json::json!({"print": "to stdout"}), &limits()).await;
    assert_eq!(inv.answer, Ok(Answer::Ok));
    assert!(
        inv.logs
            .iter()
            .any(|l| l.source == LogSource::Stdout && l.message == "to stdout"),
        "{:?}",
        inv.logs
    );
}

#[tokio::test]
async fn trap_is_contained() {
    let inv = call(serde_json::json!({"trap": true}), &limits()).await;
    assert!(
        matches!(inv.answer, Err(HandlerError::Trap { .. })),
        "{inv:?}"
    );
}

#[tokio::test]
async fn endless_loop_times_out() {
    let limits = Limits {
        timeout: Duration::from_millis(300),
        ..limits()
    };
    let inv = call(serde_json::json!({"loop": true}), &limits).await;
    assert_eq!(inv.answer, Err(HandlerError::Timeout(limits.timeout)));
}

#[tokio::test]
async fn growing_past_the_memory_limit_is_contained() {
    let inv = call(serde_json::json!({"grow_mb": 40}), &limits()).await;
    assert!(
        matches!(
            inv.answer,
            Err(HandlerError::MemoryLimit { .. }) | Err(HandlerError::Trap { .. })
        ),
        "{inv:?}"
    );
    // The next message runs normally.
    let inv = call(serde_json::json!({}), &limits()).await;
    assert_eq!(inv.answer, Ok(Answer::Ok));
}

#[tokio::test]
async fn fresh_instances_share_nothing() {
    for _ in 0..3 {
        let inv = call(serde_json::json!({"echo": echo()}), &limits()).await;
        assert_eq!(echoed(&inv)["count"], 1);
    }
}

#[tokio::test]
async fn reused_instance_keeps_globals_until_its_limit_or_a_trap() {
    let reuse = Limits {
        instance: Instances::Reuse { max_messages: 3 },
        ..limits()
    };
    // Its own queue, so other tests' warm instances are never picked up.
    let queue_input = |body: serde_json::Value| {
        let mut i = input(body.to_string());
        i.meta.queue = "reuse@test".into();
        Arc::new(i)
    };
    let mut counts = Vec::new();
    for _ in 0..4 {
        let inv = demo()
            .handle(queue_input(serde_json::json!({"echo": echo()})), &reuse)
            .await;
        counts.push(echoed(&inv)["count"].as_u64().expect("count"));
    }
    assert_eq!(counts, [1, 2, 3, 1], "replaced after 3 messages");
    let inv = demo()
        .handle(queue_input(serde_json::json!({"trap": true})), &reuse)
        .await;
    assert!(inv.answer.is_err());
    let inv = demo()
        .handle(queue_input(serde_json::json!({"echo": echo()})), &reuse)
        .await;
    assert_eq!(echoed(&inv)["count"], 1, "a trap drops the warm instance");
}
