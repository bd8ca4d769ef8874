//! Plan building and 406 parsing; declaring against a broker is in tests/integration/topology.rs.

use std::path::Path;

use super::declare::parse_inequivalent;
use super::*;

fn plan(toml: &str) -> Plan {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/configs/good/worker.toml");
    let (config, _) = Config::parse(toml, &path).unwrap_or_else(|e| panic!("{e}"));
    Plan::from_config(&config)
}

const SUB: &str = r#"
[broker]
url = "amqp://127.0.0.1"

[[subscription]]
queue = "ucenter@user"
plugin = "echo.wasm"
bindings = ["user.*"]
retry_delays = ["1s", "10s", "1s"]
"#;

fn q(name: &str) -> Destination {
    Destination::Queue(name.into())
}

fn binding(source: &str, dest: &str, key: &str) -> BindingSpec {
    BindingSpec {
        source: source.into(),
        destination: q(dest),
        routing_key: key.into(),
    }
}

#[test]
fn subscription_topology() {
    let plan = plan(SUB);
    assert_eq!(plan.source, "worker.toml");
    let names: Vec<_> = plan.exchanges.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["master", "master.retry", "master.failed"]);
    assert!(
        plan.exchanges
            .iter()
            .all(|e| e.durable && e.kind == ExchangeType::Topic)
    );

    let names: Vec<_> = plan.queues.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "ucenter@user",
            "ucenter@user@failed",
            "ucenter@user@retry.1s",
            "ucenter@user@retry.10s"
        ]
    );
    assert!(plan.queues.iter().all(|q| q.durable));
    let main = plan.queue("ucenter@user").expect("main queue");
    assert_eq!(
        main.arguments,
        vec![("x-queue-type".into(), Arg::Str("classic".into()))]
    );
    let retry = plan.queue("ucenter@user@retry.10s").expect("retry queue");
    assert_eq!(retry.argument("x-message-ttl"), Some(&Arg::Int(10_000)));
    assert_eq!(
        retry.argument("x-dead-letter-exchange"),
        Some(&Arg::Str("master".into()))
    );
    assert_eq!(
        retry.argument("x-dead-letter-routing-key"),
        Some(&Arg::Str("ucenter@user".into()))
    );

    assert_eq!(
        plan.bindings,
        vec![
            binding("master", "ucenter@user", "user.*"),
            binding("master", "ucenter@user", "ucenter@user"),
            binding("master.failed", "ucenter@user@failed", "ucenter@user"),
            binding(
                "master.retry",
                "ucenter@user@retry.1s",
                "ucenter@user@retry.1s"
            ),
            binding(
                "master.retry",
                "ucenter@user@retry.10s",
                "ucenter@user@retry.10s"
            ),
        ]
    );
}

#[test]
fn quorum_subscription_makes_every_queue_quorum() {
    let plan = plan(&format!("{SUB}queue_type = \"quorum\"\n"));
    for q in &plan.queues {
        assert_eq!(
            q.argument("x-queue-type"),
            Some(&Arg::Str("quorum".into())),
            "{}",
            q.name
        );
    }
}

#[test]
fn quorum_retry_queues_dead_letter_at_least_once_and_q_parks_what_the_broker_drops() {
    let quorum = plan(&format!("{SUB}queue_type = \"quorum\"\n"));
    for q in quorum.queues.iter().filter(|q| q.name.contains("@retry.")) {
        let strategy = q.argument("x-dead-letter-strategy");
        assert_eq!(
            strategy,
            Some(&Arg::Str("at-least-once".into())),
            "{}",
            q.name
        );
        let overflow = q.argument("x-overflow");
        assert_eq!(
            overflow,
            Some(&Arg::Str("reject-publish".into())),
            "{}",
            q.name
        );
    }
    let q = quorum.queue("ucenter@user").expect("Q");
    assert_eq!(
        q.argument("x-dead-letter-exchange"),
        Some(&Arg::Str("master.failed".into()))
    );
    assert_eq!(
        q.argument("x-dead-letter-routing-key"),
        Some(&Arg::Str("ucenter@user".into()))
    );
    let classic = plan(SUB);
    let q = classic.queue("ucenter@user").expect("Q");
    assert_eq!(
        q.argument("x-dead-letter-exchange"),
        None,
        "classic queues unchanged"
    );
}

#[test]
fn seed_order_topology_from_config() {
    let plan = plan(
        r#"
[broker]
url = "amqp://127.0.0.1"

[[exchange]]
name = "order-event-exchange"
type = "topic"

[[queue]]
name = "order.delay.queue"
message_ttl = "30m"
dead_letter_exchange = "order-event-exchange"
dead_letter_routing_key = "order.release.order"
max_length = 100000
bindings = [{ exchange = "order-event-exchange", key = "order.create.order" }]

[[queue]]
name = "order.release.order.queue"
bindings = [{ exchange = "order-event-exchange", key = "order.release.order" }]
"#,
    );
    assert_eq!(plan.exchanges.len(), 4);
    let delay = plan.queue("order.delay.queue").expect("delay queue");
    assert_eq!(
        delay.arguments,
        vec![
            ("x-message-ttl".into(), Arg::Int(1_800_000)),
            (
                "x-dead-letter-exchange".into(),
                Arg::Str("order-event-exchange".into())
            ),
            (
                "x-dead-letter-routing-key".into(),
                Arg::Str("order.release.order".into())
            ),
            ("x-max-length".into(), Arg::Int(100_000)),
            ("x-queue-type".into(), Arg::Str("classic".into())),
        ]
    );
    assert!(plan.bindings.contains(&binding(
        "order-event-exchange",
        "order.release.order.queue",
        "order.release.order"
    )));
}

#[test]
fn display_lists_everything() {
    let shown = plan(SUB).to_string();
    assert!(
        shown.contains("exchanges (3):\n  topic    durable   master\n"),
        "{shown}"
    );
    assert!(
        shown.contains(
            "  durable   ucenter@user@retry.1s x-message-ttl=1000 x-dead-letter-exchange=\"master\" \
             x-dead-letter-routing-key=\"ucenter@user\" x-queue-type=\"classic\"\n"
        ),
        "{shown}"
    );
    assert!(
        shown.contains("  master --[user.*]--> queue ucenter@user\n"),
        "{shown}"
    );
}

#[test]
fn merge_skips_duplicates() {
    let mut a = plan(SUB);
    let before = a.clone();
    a.merge(before.clone());
    assert_eq!(a, before);
    let mut extra = Plan::default();
    extra.bind_exchange("delay.1", "delay.0", "*.0.#");
    a.merge(extra);
    assert_eq!(a.bindings.len(), before.bindings.len() + 1);
}

#[test]
fn reads_rabbitmq_inequivalent_arg_texts() {
    let text = "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': \
                received the value '1000' of type 'signedint' but current is the value '2000' of \
                type 'signedint'";
    assert_eq!(
        parse_inequivalent(text),
        Some((
            "x-message-ttl".into(),
            Some("1000".into()),
            Some("2000".into())
        ))
    );
    let text = "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'q' in vhost '/': \
                received the value 'quorum' of type 'longstr' but current is none";
    assert_eq!(
        parse_inequivalent(text),
        Some(("x-queue-type".into(), Some("quorum".into()), None))
    );
    let text = "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'q' in vhost '/': \
                received 'true' but current is 'false'";
    assert_eq!(
        parse_inequivalent(text),
        Some(("durable".into(), Some("true".into()), Some("false".into())))
    );
    assert_eq!(
        parse_inequivalent("PRECONDITION_FAILED - something else"),
        None
    );
}

#[test]
fn inequivalent_display() {
    let err = Inequivalent {
        kind: ObjectKind::Queue,
        name: "q".into(),
        argument: "x-message-ttl".into(),
        current: Some("2000".into()),
        declared: Some("1000".into()),
        source: "worker.toml".into(),
        broker_text: String::new(),
    };
    assert_eq!(
        err.to_string(),
        "queue \"q\" already exists with x-message-ttl = 2000, but worker.toml declares 1000; \
         delete the queue or change worker.toml"
    );
    let err = Inequivalent {
        current: None,
        ..err
    };
    assert_eq!(
        err.to_string(),
        "queue \"q\" already exists without x-message-ttl, but worker.toml declares 1000; \
         delete the queue or change worker.toml"
    );
}
