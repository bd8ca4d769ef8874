//! Key-value state through the service, on the embedded store and on Redis: every operation
//! with the answers the WIT promises, size and key limits, TTL expiry, stores kept apart, no
//! lost update when 8 handlers increment one key with compare-and-swap at once, and embedded
//! state that outlives the host.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::support::{self, Probe, REDIS, Sub, outcomes, results, script};

/// The stores of these tests: `emb` (embedded) and `red`, `red2` (one Redis, two namespaces),
/// each capped at 1 KiB per value.
fn stores() -> String {
    let cap = "max_value_size = \"1KiB\"\n";
    let redis = "backend = \"redis\"\nurl = \"redis://127.0.0.1:6379/0\"\n";
    format!(
        "[kv.emb]\nbackend = \"embedded\"\n{cap}\n[kv.red]\n{redis}{cap}\n[kv.red2]\n{redis}{cap}\n"
    )
}

fn kv(op: &str, key: &str) -> Value {
    json!({"kv": op, "key": key})
}

/// The `ok` values of a report, with the name of any error in its place.
fn answers(report: &Value) -> Vec<Value> {
    results(report)
        .into_iter()
        .map(|r| match r.get("error") {
            Some(e) => json!({"error": e}),
            None => r["ok"].clone(),
        })
        .collect()
}

/// Every operation once, on keys made by `k`, and what each should answer: `null`, a value,
/// or `{"error": name}` (values capped at 1 KiB; keys are 1 to 1024 bytes).
fn every_operation(k: impl Fn(&str) -> String) -> (Value, Vec<Value>) {
    let too_large = json!({"error": "too-large"});
    let invalid_key = json!({"error": "invalid-key"});
    let pairs = [
        (
            json!({"kv": "set", "key": k("a"), "value": "1"}),
            Value::Null,
        ),
        (kv("get", &k("a")), json!("1")),
        (kv("get", &k("missing")), Value::Null),
        (
            json!({"kv": "increment", "key": k("n"), "delta": 5}),
            json!(5),
        ),
        (
            json!({"kv": "increment", "key": k("n"), "delta": -7}),
            json!(-2),
        ),
        (kv("get", &k("n")), json!("-2")),
        (kv("delete", &k("a")), json!(true)),
        (kv("delete", &k("a")), json!(false)),
        (kv("get", &k("a")), Value::Null),
        (
            json!({"kv": "cas", "key": k("c"), "value": "x"}),
            json!(true),
        ),
        (
            json!({"kv": "cas", "key": k("c"), "value": "y"}),
            json!(false),
        ),
        (
            json!({"kv": "cas", "key": k("c"), "expected": "wrong", "value": "y"}),
            json!(false),
        ),
        (
            json!({"kv": "cas", "key": k("c"), "expected": "x", "value": "y"}),
            json!(true),
        ),
        (kv("get", &k("c")), json!("y")),
        (
            json!({"kv": "set", "key": k("full"), "value_len": 1024}),
            Value::Null,
        ),
        (
            json!({"kv": "set", "key": k("over"), "value_len": 1025}),
            too_large.clone(),
        ),
        (
            json!({"kv": "cas", "key": k("over"), "value_len": 1025}),
            too_large,
        ),
        (kv("get", &k("over")), Value::Null),
        (
            json!({"kv": "set", "key": "", "value": "v"}),
            invalid_key.clone(),
        ),
        (
            json!({"kv": "set", "key": "k".repeat(1025), "value": "v"}),
            invalid_key,
        ),
        (
            json!({"kv": "set", "key": k("ttl"), "value": "soon gone", "ttl_ms": 3000}),
            Value::Null,
        ),
        (
            json!({"kv": "cas", "key": k("ttl-cas"), "value": "soon gone", "ttl_ms": 3000}),
            json!(true),
        ),
        (kv("get", &k("ttl")), json!("soon gone")),
    ];
    let (steps, expected): (Vec<Value>, Vec<Value>) = pairs.into_iter().unzip();
    (json!(steps), expected)
}

/// Gets `keys` from `store` until every one is gone (their TTL ran out), for up to 20 s.
async fn wait_expired(probe: &mut Probe, store: &str, keys: &[String]) {
    let gets = json!(keys.iter().map(|key| kv("get", key)).collect::<Vec<_>>());
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in 0.. {
        let r = probe
            .run(store, script(&format!("ttl-{store}-{i}"), gets.clone()))
            .await;
        if answers(&r).iter().all(Value::is_null) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{store}: a 3 s TTL still there after 20 s: {r}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn every_operation_on_both_backends_with_limits_ttl_and_namespaces() {
    support::require(&REDIS);
    let state = tempfile::tempdir().expect("state dir");
    let subs = ["emb", "red", "red2"].map(|s| Sub::new(s, &format!("kv = \"{s}\"")));
    let mut probe = Probe::start("cap-kv", &subs, state.path(), &stores()).await;
    // Keys unique to this run: Redis outlives it.
    let p = probe.n.p.clone();
    let k = |name: &str| format!("{p}:{name}");
    for store in ["emb", "red"] {
        let (steps, expected) = every_operation(k);
        let report = probe
            .run(store, script(&format!("ops-{store}"), steps))
            .await;
        assert_eq!(answers(&report), expected, "{store}: {report}");
        wait_expired(&mut probe, store, &[k("ttl"), k("ttl-cas")]).await;
    }
    // Stores are apart: one Redis, two names; and the embedded store is its own.
    let set = json!([{"kv": "set", "key": k("shared"), "value": "red's"}]);
    assert_eq!(
        outcomes(&probe.run("red", script("ns-set", set)).await),
        ["ok"]
    );
    for store in ["red2", "emb"] {
        let get = json!([kv("get", &k("shared"))]);
        let r = probe.run(store, script(&format!("ns-{store}"), get)).await;
        assert_eq!(answers(&r), [Value::Null], "{store} sees red's key: {r}");
    }
    // Redis outlives the test: leave nothing behind.
    let keys = ["n", "c", "full", "shared"].map(|name| kv("delete", &k(name)));
    probe.run("red", script("clean", json!(keys))).await;
    probe.stop().await;
}

#[tokio::test]
async fn compare_and_swap_loses_no_update_under_8_concurrent_handlers() {
    support::require(&REDIS);
    const MESSAGES: usize = 16;
    const TIMES: i64 = 10;
    let state = tempfile::tempdir().expect("state dir");
    let subs = ["emb", "red"].map(|s| Sub::new(s, &format!("kv = \"{s}\"\nconcurrency = 8")));
    let mut probe = Probe::start("cap-kv-cas", &subs, state.path(), &stores()).await;
    let key = format!("{}:counter", probe.n.p);
    for store in ["emb", "red"] {
        let add = json!([{"kv": "add", "key": key, "times": TIMES}]);
        for i in 0..MESSAGES {
            probe
                .send(store, &script(&format!("{store}-{i}"), add.clone()))
                .await;
        }
        let mut tries = 0;
        for i in 0..MESSAGES {
            let r = probe.report(&format!("{store}-{i}")).await;
            assert_eq!(outcomes(&r), ["ok"], "{r}");
            tries += r["results"][0]["ok"]["tries"].as_i64().expect("tries");
        }
        let total = (MESSAGES as i64) * TIMES;
        println!("{store}: {total} increments took {tries} compare-and-swaps");
        let get = json!([kv("get", &key), kv("delete", &key)]);
        let r = probe
            .run(store, script(&format!("{store}-total"), get))
            .await;
        assert_eq!(
            answers(&r),
            [json!(total.to_string()), json!(true)],
            "{store}: {r}"
        );
    }
    probe.stop().await;
}

#[tokio::test]
async fn embedded_state_survives_a_host_restart() {
    let state = tempfile::tempdir().expect("state dir");
    let subs = [Sub::new("emb", "kv = \"emb\"")];
    let tables = "[kv.emb]\nbackend = \"embedded\"\n";
    let mut first = Probe::start("cap-kv-keep", &subs, state.path(), tables).await;
    let steps = json!([{"kv": "set", "key": "kept", "value": "across restarts"},
        {"kv": "increment", "key": "runs", "delta": 1}]);
    let r = first.run("emb", script("before", steps)).await;
    assert_eq!(answers(&r), [Value::Null, json!(1)], "{r}");
    first.stop().await;

    let mut second = Probe::start("cap-kv-keep", &subs, state.path(), tables).await;
    let steps = json!([kv("get", "kept"), {"kv": "increment", "key": "runs", "delta": 1}]);
    let r = second.run("emb", script("after", steps)).await;
    assert_eq!(answers(&r), [json!("across restarts"), json!(2)], "{r}");
    second.stop().await;
}
