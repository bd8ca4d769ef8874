//! `failed list` and `failed replay` against the real broker, with the service running a
//! plugin that fails every message.

use std::collections::BTreeMap;
use std::time::Duration;

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable};
use worker_host::config::Config;
use worker_host::failed::{self, FailedError};
use worker_host::outcome;

use crate::common::{self, Service};

/// Answers fail to every message.
const FAILING: &str = r#"(module (memory (export "memory") 1) (func (export "worker_abi_v1")) (func (export "worker_handle") (result i32) i32.const 2))"#;

/// A failing subscription `<p>.q` on `evt.*` and a plain queue `<p>.other` bound to the same
/// key on the same master exchange, so replays that leak to other subscribers show up there.
struct Setup {
    p: String,
}

impl Setup {
    fn new() -> Setup {
        Setup {
            p: common::unique("wf"),
        }
    }
    fn q(&self) -> String {
        format!("{}.q", self.p)
    }
    fn failed(&self) -> String {
        format!("{}.q@failed", self.p)
    }
    fn other(&self) -> String {
        format!("{}.other", self.p)
    }
    fn master(&self) -> String {
        format!("{}.master", self.p)
    }
    fn toml(&self) -> String {
        format!(
            "[exchanges]\nmaster = \"{p}.master\"\nretry = \"{p}.retry\"\nfailed = \"{p}.failed\"\n\n\
             [[subscription]]\nqueue = \"{p}.q\"\nplugin = \"failing.wasm\"\nbindings = [\"evt.*\"]\n\
             max_retries = 0\n\n\
             [[queue]]\nname = \"{p}.other\"\nbindings = [{{ exchange = \"{p}.master\", key = \"evt.*\" }}]\n",
            p = self.p
        )
    }
    /// Starts the service and waits until it consumes (so its whole topology is declared).
    async fn start(&self) -> Service {
        let wasm = wat::parse_str(FAILING).expect("the failing plugin parses");
        let service = Service::start(&self.toml(), &[("failing.wasm", &wasm)]).await;
        let conn = common::connect().await;
        let q = self.q();
        common::eventually(
            Duration::from_secs(20),
            "the service consuming its queue",
            || {
                let (conn, q) = (&conn, q.clone());
                async move {
                    let probe = conn.create_channel().await.ok()?;
                    let passive = lapin::options::QueueDeclareOptions {
                        passive: true,
                        ..Default::default()
                    };
                    let queue = probe
                        .queue_declare(q.as_str().into(), passive, FieldTable::default())
                        .await
                        .ok()?;
                    let _ = probe.close(200, "probed".into()).await;
                    (queue.consumer_count() > 0).then_some(())
                }
            },
        )
        .await;
        let _ = conn.close(200, "bye".into()).await;
        service
    }
    fn config(&self, service: &Service) -> Config {
        let path = service.dir.path().join("worker.toml");
        let text = std::fs::read_to_string(&path).expect("worker.toml");
        Config::parse(&text, &path).expect("valid config").0
    }
    async fn cleanup(&self) {
        let queues = vec![
            self.q(),
            self.failed(),
            self.other(),
            format!("{}@retry.30s", self.q()),
        ];
        let exchanges = ["master", "retry", "failed"]
            .iter()
            .map(|e| format!("{}.{e}", self.p))
            .collect::<Vec<_>>();
        common::cleanup(&queues, &exchanges).await;
    }
}

fn props(i: usize) -> BasicProperties {
    let mut h = FieldTable::default();
    h.insert("mine".into(), outcome::text(&format!("v{i}")));
    BasicProperties::default()
        .with_message_id(format!("m{i}").as_str().into())
        .with_headers(h)
}

async fn wait_depth(ch: &lapin::Channel, queue: &str, n: u32) {
    common::eventually(
        Duration::from_secs(20),
        &format!("{n} messages in {queue}"),
        || {
            let (ch, queue) = (ch.clone(), queue.to_string());
            async move { (common::depth(&ch, &queue).await == n).then_some(()) }
        },
    )
    .await;
}

fn headers(props: &BasicProperties) -> BTreeMap<String, String> {
    outcome::render_headers(props.headers().as_ref())
        .into_iter()
        .collect()
}

#[tokio::test]
async fn list_prints_parked_messages_without_removing_them() {
    let s = Setup::new();
    let service = s.start().await;
    let config = s.config(&service);
    let (conn, ch) = common::channel().await;
    for i in 0..3 {
        common::publish(
            &ch,
            &s.master(),
            "evt.created",
            format!("body {i}").as_bytes(),
            props(i),
        )
        .await;
    }
    wait_depth(&ch, &s.failed(), 3).await;
    service.stop().await;

    let mut out = Vec::new();
    let listed = failed::list(&config, &s.q(), Some(2), &mut out)
        .await
        .expect("list");
    assert_eq!(listed, 2);
    let lines: Vec<serde_json::Value> = String::from_utf8(out)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(lines.len(), 2);
    let first = &lines[0];
    eprintln!("{first}");
    assert_eq!(first["message_id"], "m0");
    assert_eq!(first["routing_key"], s.q());
    assert_eq!(first["original_routing_key"], "evt.created");
    assert_eq!(first["size"], 6);
    assert_eq!(first["body_preview"], "body 0");
    assert_eq!(first["headers"]["worker-attempts"], 1);
    assert_eq!(first["headers"]["worker-failed-reason"], "fail");
    assert_eq!(first["headers"]["worker-plugin"], "failing.wasm");
    assert!(
        first["headers"].get("mine").is_none(),
        "only worker-* headers: {first}"
    );

    // Nothing was taken for good: all three are back, first one still first.
    wait_depth(&ch, &s.failed(), 3).await;
    let head = common::get(&ch, &s.failed()).await.expect("a message");
    assert_eq!(
        head.delivery
            .properties
            .message_id()
            .as_ref()
            .map(|m| m.as_str()),
        Some("m0")
    );

    let _ = conn.close(200, "bye".into()).await;
    s.cleanup().await;
}

#[tokio::test]
async fn replay_moves_messages_to_their_queue_alone_with_their_headers() {
    let s = Setup::new();
    let service = s.start().await;
    let config = s.config(&service);
    let (conn, ch) = common::channel().await;
    for i in 0..3 {
        common::publish(&ch, &s.master(), "evt.created", b"x", props(i)).await;
    }
    wait_depth(&ch, &s.failed(), 3).await;
    service.stop().await;
    assert_eq!(common::depth(&ch, &s.other()).await, 3);

    let moved = failed::replay(&config, &s.q(), Some(2))
        .await
        .expect("replay");
    assert_eq!(moved, 2);
    wait_depth(&ch, &s.q(), 2).await;
    assert_eq!(common::depth(&ch, &s.failed()).await, 1);
    // The other subscriber of evt.* got nothing more.
    assert_eq!(common::depth(&ch, &s.other()).await, 3);

    for i in 0..2 {
        let msg = common::get(&ch, &s.q()).await.expect("a replayed message");
        let props = &msg.delivery.properties;
        assert_eq!(
            props.message_id().as_ref().map(|m| m.as_str().to_string()),
            Some(format!("m{i}"))
        );
        assert_eq!(msg.delivery.routing_key.as_str(), s.q());
        assert_eq!(*props.delivery_mode(), Some(2));
        let h = headers(props);
        assert_eq!(h[outcome::ATTEMPTS], "0");
        assert_eq!(h[outcome::ORIG_ROUTING_KEY], "evt.created");
        assert_eq!(h["mine"], format!("v{i}"));
        assert_eq!(h[outcome::FAILED_REASON], "fail");
        assert!(matches!(
            props
                .headers()
                .as_ref()
                .and_then(|h| h.inner().get(outcome::ATTEMPTS)),
            Some(AMQPValue::LongLongInt(0))
        ));
    }

    let _ = conn.close(200, "bye".into()).await;
    s.cleanup().await;
}

#[tokio::test]
async fn replay_ends_while_the_plugin_still_fails() {
    const N: usize = 40;
    let s = Setup::new();
    let service = s.start().await;
    let config = s.config(&service);
    let (conn, ch) = common::channel().await;
    for i in 0..N {
        common::publish(&ch, &s.master(), "evt.created", b"x", props(i)).await;
    }
    wait_depth(&ch, &s.failed(), N as u32).await;

    // The service keeps failing what is replayed, parking it again behind the originals.
    let moved = tokio::time::timeout(
        Duration::from_secs(30),
        failed::replay(&config, &s.q(), None),
    )
    .await
    .expect("replay terminates")
    .expect("replay");
    assert_eq!(moved, N as u64);
    wait_depth(&ch, &s.failed(), N as u32).await;
    let again = common::get(&ch, &s.failed()).await.expect("parked again");
    let h = headers(&again.delivery.properties);
    assert_eq!(h[outcome::ATTEMPTS], "1");
    assert_eq!(h[outcome::ORIG_ROUTING_KEY], "evt.created");
    assert_eq!(common::depth(&ch, &s.other()).await, N as u32);

    service.stop().await;
    let _ = conn.close(200, "bye".into()).await;
    s.cleanup().await;
}

#[tokio::test]
async fn an_unknown_queue_is_a_user_error() {
    let s = Setup::new();
    let service = s.start().await;
    let config = s.config(&service);
    service.stop().await;

    let err = failed::list(&config, "nope", None, &mut Vec::new())
        .await
        .expect_err("unknown queue");
    assert!(matches!(
        err.downcast_ref::<FailedError>(),
        Some(FailedError::UnknownQueue { .. })
    ));
    assert!(
        err.to_string().contains(&s.q()),
        "lists the known queues: {err}"
    );

    let err = failed::replay(&config, &s.failed(), None)
        .await
        .expect_err("the @failed name");
    assert!(err.to_string().contains("not its failed queue"), "{err}");
    s.cleanup().await;
}
