//! Capabilities (SPEC section 9) through the service, against real servers: outbound HTTP to a
//! local test server, key-value state on the embedded store and Redis, SQL on SQLite,
//! PostgreSQL and MariaDB, and what a subscription without a grant gets. Every test drives
//! `plugins/cap_probe.wasm`, which runs the steps the message lists and reports each answer
//! (see `support`). A server that does not answer fails the test with the command that starts
//! it; a server that is down on purpose (a closed port) shows what plugins and `/readyz` see
//! then. `server_restart_*` tests restart a server and run alone (scripts/test.sh).

pub(crate) mod db;
mod dry_run;
mod group;
pub(crate) mod http;
mod isolation;
mod kv;
pub(crate) mod outbox;
mod pause;
mod restart;
mod secrets;
mod sql;
pub(crate) mod support;

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{self, free_addr, http_get};
use support::{Probe, Sub, outcomes, script};

/// A subscription without grants gets `denied` from kv, SQL and HTTP, and one granted a store
/// only gets that store; nothing traps.
#[tokio::test]
async fn each_capability_without_its_grant_is_denied() {
    let state = tempfile::tempdir().expect("state dir");
    let subs = [Sub::new("none", ""), Sub::new("kvonly", "kv = \"k\"")];
    let mut probe = Probe::start(
        "cap-denied",
        &subs,
        state.path(),
        "[kv.k]\nbackend = \"embedded\"\n",
    )
    .await;
    let steps = json!([
        {"kv": "get", "key": "a"},
        {"kv": "set", "key": "a", "value": "1"},
        {"kv": "increment", "key": "n"},
        {"sql": "query", "statement": "SELECT 1"},
        {"sql": "execute", "statement": "CREATE TABLE t (x INTEGER)"},
        {"http": "GET", "url": "http://127.0.0.1:9/"},
    ]);
    let none = probe.run("none", script("none", steps.clone())).await;
    assert_eq!(outcomes(&none), ["denied"; 6], "{none}");
    let kv_only = probe.run("kvonly", script("kvonly", steps)).await;
    assert_eq!(
        outcomes(&kv_only),
        ["ok", "ok", "ok", "denied", "denied", "denied"],
        "{kv_only}"
    );
    probe.stop().await;
}

/// Stores and databases whose server does not answer: the host still starts, calls answer
/// `unavailable` within the handler's timeout, and `/readyz` (503) and `worker_capability_up`
/// name each one, never with the password of its URL.
#[tokio::test]
async fn a_server_that_is_down_answers_unavailable_and_readyz_names_it() {
    // A port nothing listens on: bound, noted, let go.
    let closed = free_addr().port();
    let admin = free_addr();
    let password = harness::unique("pw");
    let tables = format!(
        "[admin]\nlisten = \"{admin}\"\n\n\
         [kv.gone]\nbackend = \"redis\"\nurl = \"redis://:{password}@127.0.0.1:{closed}/0\"\n\n\
         [sql.gone]\nurl = \"postgres://postgres:{password}@127.0.0.1:{closed}/test\"\n"
    );
    let state = tempfile::tempdir().expect("state dir");
    let subs = [Sub::new(
        "down",
        "kv = \"gone\"\nsql = \"gone\"\ntimeout = \"10s\"",
    )];
    let mut probe = Probe::start("cap-down", &subs, state.path(), &tables).await;
    let steps = json!([
        {"kv": "get", "key": "a"},
        {"kv": "increment", "key": "n"},
        {"sql": "query", "statement": "SELECT 1"},
    ]);
    let started = Instant::now();
    let report = probe.run("down", script("down", steps)).await;
    assert_eq!(outcomes(&report), ["unavailable"; 3], "{report}");
    // Within the handler's timeout (the report came); Redis refuses at once, the SQL pool
    // tries to connect for a while first.
    println!(
        "three calls to servers that are down: {:?}",
        started.elapsed()
    );
    let body = harness::eventually(Duration::from_secs(15), "/readyz 503", || async {
        let (status, body) = http_get(admin, "/readyz").await?;
        (status == 503 && body.contains("kv.gone") && body.contains("sql.gone")).then_some(body)
    })
    .await;
    let (_, metrics) = http_get(admin, "/metrics").await.expect("/metrics");
    assert!(!body.contains(&password), "a password in /readyz: {body}");
    assert!(!metrics.contains(&password), "a password in /metrics");
    for store in ["capability=\"kv\"", "capability=\"sql\""] {
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("worker_capability_up")
                    && l.contains(store)
                    && l.contains("store=\"gone\"")
                    && l.ends_with(" 0")),
            "no worker_capability_up 0 for {store}:\n{metrics}"
        );
    }
    probe.stop().await;
}
