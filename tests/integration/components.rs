//! Component plugins (ABI v2) through the service against RabbitMQ: the demo plugin of each
//! language (Rust, Python, JavaScript; plugins/README.md) answering ok with publishes, retry,
//! retry after a delay, fail, trap, timeout and memory limit, fresh and reused instances, and hot
//! reload between a v1 module and a component. Every test points `[state] dir` at one shared
//! folder, so each demo compiles once (see `support::warm`).

mod check;
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lapin::BasicProperties;
use lapin::types::FieldTable;
use serde_json::{Value, json};

use crate::harness::{self, Host, Names, headers_of, wait_get};
use crate::reload::support::{
    reloads, result_within, start_hot_with, sub_toml_with, topology_toml, versioned, wait_refused,
    write_in_place, write_via_rename,
};

/// One test per language and scenario, named `components::<language>::<scenario>`; the
/// languages are those of `support::LANGUAGES`.
macro_rules! per_language {
    ($($lang:ident),+) => {$(
        mod $lang {
            #[tokio::test]
            async fn outcomes_limits_and_instances() {
                super::outcomes_limits_and_instances(stringify!($lang)).await
            }
            #[tokio::test]
            async fn hot_reload_between_module_and_component() {
                super::hot_reload_between_module_and_component(stringify!($lang)).await
            }
        }
    )+};
}

per_language!(rust, python, js);

#[test]
fn every_language_has_its_tests() {
    let generated = ["rust", "python", "js"];
    let table: Vec<&str> = support::LANGUAGES.iter().map(|(l, _, _)| *l).collect();
    assert_eq!(
        table, generated,
        "per_language! and LANGUAGES list the same languages"
    );
}

/// A JSON body, as the demo reads it.
fn body(v: Value) -> Vec<u8> {
    v.to_string().into_bytes()
}

/// Publishes `body` through master with routing key `key`.
async fn send(ch: &lapin::Channel, n: &Names, key: &str, body: &[u8], props: BasicProperties) {
    harness::publish(ch, &n.master(), key, body, props).await;
}

/// Publishes an `echo` request to `key` and returns what the demo echoed (routing key `echoed`).
async fn echo(ch: &lapin::Channel, n: &Names, key: &str) -> Value {
    let request = json!({"echo": {"exchange": n.out(), "routing_key": "echoed"}});
    send(ch, n, key, &body(request), BasicProperties::default()).await;
    let got = wait_get(ch, &n.seen(), Duration::from_secs(30)).await;
    assert_eq!(got.delivery.routing_key.as_str(), "echoed");
    serde_json::from_slice(&got.delivery.data).expect("the echo is JSON")
}

/// A parked message: when it was seen in the failed queue, and its headers.
struct Parked {
    at: Instant,
    headers: BTreeMap<String, String>,
}

/// Waits until `count` messages sit in `queue` (taking them as they come) and returns them by
/// body.
async fn parked(ch: &lapin::Channel, queue: &str, count: usize) -> BTreeMap<String, Parked> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = BTreeMap::new();
    while got.len() < count {
        match harness::get(ch, queue).await {
            Some(msg) => {
                let body = String::from_utf8_lossy(&msg.delivery.data).into_owned();
                let headers = headers_of(&msg);
                got.insert(
                    body,
                    Parked {
                        at: Instant::now(),
                        headers,
                    },
                );
            }
            None if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            None => panic!(
                "{queue}: {} of {count} parked messages after 30s",
                got.len()
            ),
        }
    }
    got
}

/// The delay a retry asks for (`after_ms`), and how much later than that it may come back: the
/// delay levels round up to 125 ms, each level is a TTL-queue hop, and the second attempt is
/// handled (and parked) on a machine that runs other tests beside this one.
const AFTER_MS: u64 = 3000;
const AFTER_SLACK: Duration = Duration::from_secs(15);

/// One service running the demo of `lang` on three subscriptions: `q` (fresh instances, one
/// retry, a config table), `reuse` (`instance = "reuse"`, 4 messages per instance) and `faults`
/// (no retries, a 5 s timeout); `[delay]` is on, so a retry's `after_ms` goes through the delay
/// levels.
async fn outcomes_limits_and_instances(lang: &str) {
    let file = support::file_of(lang);
    let demo = support::demo(lang);
    let n = Names::new(&format!("comp-{lang}"));
    let (reuse, faults) = (format!("{}.reuse", n.p), format!("{}.faults", n.p));
    let toml = format!(
        "{}{}{}{}[delay]\n\n{}",
        topology_toml(&n),
        sub_toml_with(
            &n,
            file,
            &n.q(),
            "fresh",
            "max_retries = 1\n[subscription.config]\ngreeting = \"hello\"\nn = 3\n"
        ),
        sub_toml_with(
            &n,
            file,
            &reuse,
            "reuse",
            "max_retries = 0\nconcurrency = 1\ninstance = \"reuse\"\ninstance_max_messages = 4"
        ),
        sub_toml_with(
            &n,
            file,
            &faults,
            "faults",
            "max_retries = 0\ntimeout = \"5s\""
        ),
        support::state_toml(&support::state_dir()),
    );
    let started = Instant::now();
    let svc = Host::in_process(&toml, &[(file, &demo)]).await;
    let (conn, ch) = harness::channel().await;
    for q in [n.q(), reuse.clone(), faults.clone()] {
        harness::wait_consuming(&conn, &q).await;
    }
    println!("{lang}: service consuming after {:?}", started.elapsed());
    let fresh_key = |k: &str| format!("{}.fresh.{k}", n.p);

    // Slow ones first, watched from the side (their park time is taken as they arrive): a retry
    // after 3 s (retry_delays says 200 ms), a plain retry, a fail with an echo (never
    // published), and a body that is no JSON object.
    let q_failed = format!("{}@failed", n.q());
    let watcher = tokio::spawn(async move {
        let (_conn, ch) = harness::channel().await;
        parked(&ch, &q_failed, 4).await
    });
    let later = body(json!({"outcome": "retry", "reason": "later", "after_ms": AFTER_MS}));
    let busy = body(json!({"outcome": "retry", "reason": "busy"}));
    let fail = body(json!({"outcome": "fail", "reason": "bad order",
        "echo": {"exchange": n.out(), "routing_key": "never"}}));
    let array = b"[1, 2]".to_vec();
    let sent = Instant::now();
    for (key, b) in [
        ("later", &later),
        ("busy", &busy),
        ("fail", &fail),
        ("array", &array),
    ] {
        send(&ch, &n, &fresh_key(key), b, BasicProperties::default()).await;
    }

    // ok with a publish: the echo shows the delivery, the config and a fresh instance.
    let mut headers = FieldTable::default();
    headers.insert("x-tenant".into(), worker_host::headers::text("acme"));
    let request = body(
        json!({"log": format!("hello from {lang}"), "print": "to stdout",
        "echo": {"exchange": n.out(), "routing_key": "echoed"}}),
    );
    let props = BasicProperties::default()
        .with_message_id("m-1".into())
        .with_headers(headers);
    send(&ch, &n, &fresh_key("created"), &request, props).await;
    let got = wait_get(&ch, &n.seen(), Duration::from_secs(30)).await;
    assert_eq!(got.delivery.routing_key.as_str(), "echoed");
    assert_eq!(
        got.delivery
            .properties
            .content_type()
            .as_ref()
            .map(|c| c.as_str()),
        Some("application/json")
    );
    let echoed: Value = serde_json::from_slice(&got.delivery.data).expect("the echo is JSON");
    assert_eq!(
        echoed["config"],
        json!({"greeting": "hello", "n": 3}),
        "{echoed}"
    );
    assert_eq!(echoed["count"], 1, "{echoed}");
    assert_eq!(echoed["attempt"], 1, "{echoed}");
    assert_eq!(echoed["routing_key"], fresh_key("created"), "{echoed}");
    assert_eq!(
        echoed["original_routing_key"],
        fresh_key("created"),
        "{echoed}"
    );
    assert_eq!(echoed["message_id"], "m-1", "{echoed}");
    assert_eq!(echoed["headers"]["x-tenant"], "acme", "{echoed}");
    assert_eq!(echoed["body_len"], request.len(), "{echoed}");

    // Fresh instances: the module-global counter never gets past 1.
    for _ in 0..3 {
        let echoed = echo(&ch, &n, &fresh_key("again")).await;
        assert_eq!(echoed["count"], 1, "a fresh instance per message: {echoed}");
        assert_eq!(echoed["message_id"], Value::Null, "{echoed}");
    }

    // Reused instances: the counter grows, restarts after a trap and after 4 messages.
    let reuse_key = format!("{}.reuse.x", n.p);
    let mut counts = Vec::new();
    for step in 0..8 {
        if step == 2 {
            send(
                &ch,
                &n,
                &reuse_key,
                &body(json!({"trap": true})),
                BasicProperties::default(),
            )
            .await;
            let trapped = wait_get(&ch, &format!("{reuse}@failed"), Duration::from_secs(30)).await;
            assert!(
                headers_of(&trapped)["worker-error"].starts_with("trap"),
                "{:?}",
                headers_of(&trapped)
            );
            continue;
        }
        counts.push(
            echo(&ch, &n, &reuse_key).await["count"]
                .as_u64()
                .expect("count"),
        );
    }
    assert_eq!(
        counts,
        [1, 2, 1, 2, 3, 4, 1],
        "one instance serves 4 messages in a row; a trap drops it"
    );

    // Faults are contained as retries (none allowed here, so parked at once) with their cause.
    let fault_key = format!("{}.faults.x", n.p);
    let trap = body(json!({"trap": true}));
    let spin = body(json!({"loop": true}));
    let grow = body(json!({"grow_mb": 100}));
    for b in [&trap, &spin, &grow] {
        send(&ch, &n, &fault_key, b, BasicProperties::default()).await;
    }
    let faulted = parked(&ch, &format!("{faults}@failed"), 3).await;
    let cause = |b: &[u8]| {
        let p = &faulted[&String::from_utf8_lossy(b).into_owned()];
        assert_eq!(
            p.headers["worker-failed-reason"], "retries-exhausted",
            "{:?}",
            p.headers
        );
        assert_eq!(p.headers["worker-attempts"], "1", "{:?}", p.headers);
        p.headers["worker-error"].clone()
    };
    let (trap_cause, spin_cause, grow_cause) = (cause(&trap), cause(&spin), cause(&grow));
    println!("{lang}: trap -> {trap_cause:?}; loop -> {spin_cause:?}; grow -> {grow_cause:?}");
    assert!(trap_cause.starts_with("trap"), "{trap_cause}");
    assert!(spin_cause.starts_with("timeout"), "{spin_cause}");
    assert!(grow_cause.starts_with("memory limit"), "{grow_cause}");

    // What the first messages became.
    let q_parked = watcher.await.expect("the watcher of Q@failed");
    let of = |b: &[u8]| &q_parked[&String::from_utf8_lossy(b).into_owned()];
    let (busy_p, later_p) = (of(&busy), of(&later));
    for (p, reason) in [(busy_p, "busy"), (later_p, "later")] {
        assert_eq!(
            p.headers["worker-failed-reason"], "retries-exhausted",
            "{:?}",
            p.headers
        );
        assert_eq!(
            p.headers["worker-attempts"], "2",
            "came back once: {:?}",
            p.headers
        );
        assert_eq!(p.headers["worker-error"], reason, "{:?}", p.headers);
        assert_eq!(
            p.headers["x-orig-routing-key"],
            fresh_key(reason),
            "{:?}",
            p.headers
        );
    }
    let waited = busy_p.at.duration_since(sent);
    assert!(
        waited >= Duration::from_millis(200),
        "retry_delays respected: {waited:?}"
    );
    let waited = later_p.at.duration_since(sent);
    println!("{lang}: retry after {AFTER_MS} ms came back and was parked after {waited:?}");
    let asked = Duration::from_millis(AFTER_MS);
    assert!(
        waited >= asked && waited < asked + AFTER_SLACK,
        "after_ms {AFTER_MS}: back after {waited:?}, expected at least that and less than {:?} more",
        AFTER_SLACK
    );
    let fail_p = of(&fail);
    assert_eq!(
        fail_p.headers["worker-failed-reason"], "fail",
        "{:?}",
        fail_p.headers
    );
    assert_eq!(
        fail_p.headers["worker-error"], "bad order",
        "{:?}",
        fail_p.headers
    );
    assert_eq!(
        fail_p.headers["worker-attempts"], "1",
        "{:?}",
        fail_p.headers
    );
    assert_eq!(
        fail_p.headers["worker-plugin"], file,
        "{:?}",
        fail_p.headers
    );
    assert_eq!(of(&array).headers["worker-error"], "not a JSON object");

    svc.stop().await;
    assert!(
        harness::get(&ch, &n.seen()).await.is_none(),
        "nothing published on fail or retry"
    );
    for q in [n.q(), reuse.clone(), faults.clone()] {
        assert_eq!(harness::depth(&ch, &q).await, 0, "{q}: everything acked");
    }
    println!(
        "{lang}: outcomes, limits and instances in {:?}",
        started.elapsed()
    );
    n.cleanup(&[n.q(), reuse, faults]).await;
}

/// The result version a component answers with (v1 modules: `versioned`, 0, 1, ...).
const COMPONENT: usize = 100;

/// Which version handled a probe: a v1 module publishes the whole body with key `v<n>`, the
/// demo component publishes `tag` with key `v100`. Waits up to 60 s: a loaded machine may take
/// long to load a Python or JS component.
async fn handled_by(ch: &lapin::Channel, n: &Names, tag: &str) -> usize {
    let request = json!({"publish": [{"exchange": n.out(), "routing_key": format!("v{COMPONENT}"),
        "body": tag}]})
    .to_string();
    let (version, result) = result_within(ch, n, &request, Duration::from_secs(60)).await;
    let expected = if version == COMPONENT { tag } else { &request };
    assert_eq!(result, expected, "v{version} answered");
    version
}

/// Probes until `version` answers (the first probes may still meet the old one).
async fn until_version(ch: &lapin::Channel, n: &Names, version: usize, what: &str) -> Duration {
    let started = Instant::now();
    for i in 0.. {
        if handled_by(ch, n, &format!("{what}-{i}")).await == version {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "v{version} not serving 120s after {what}"
        );
    }
    unreachable!()
}

/// `hot.wasm` starts as a v1 module, becomes the demo component, survives a garbage file and a
/// component of another world, and becomes a v1 module again.
async fn hot_reload_between_module_and_component(lang: &str) {
    let demo = support::demo(lang);
    let state = support::state_toml(&support::state_dir());
    let (n, port, svc, plugin, _conn, ch) =
        start_hot_with(&format!("comp-reload-{lang}"), &state).await;

    write_via_rename(&plugin, &demo);
    let took = until_version(&ch, &n, COMPONENT, "component").await;
    println!("{lang}: module -> component serving after {took:?}");

    let refused = reloads(port, "failed").await;
    write_in_place(&plugin, b"this is not wasm at all");
    let refused = wait_refused(port, refused, "garbage").await;
    assert_eq!(handled_by(&ch, &n, "after-garbage").await, COMPONENT);
    let other = wat::parse_str("(component)").expect("an empty component");
    write_via_rename(&plugin, &other);
    wait_refused(port, refused, "a component of another world").await;
    assert_eq!(handled_by(&ch, &n, "after-other-world").await, COMPONENT);

    write_via_rename(&plugin, &versioned(&n.out(), 1));
    let took = until_version(&ch, &n, 1, "module").await;
    println!("{lang}: component -> module serving after {took:?}");
    assert!(
        reloads(port, "ok").await >= 2,
        "both swaps counted as reloads"
    );

    svc.stop().await;
    n.cleanup(&[n.q()]).await;
}
