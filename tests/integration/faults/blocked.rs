//! A broker that blocks publishing, played by a forwarder for this host alone (no alarm on the
//! whole broker): the host starts no handler call and writes no publish until the block lifts,
//! and a shutdown during a block repeats nothing (SPEC section 7).

use std::time::{Duration, Instant};

use serde_json::json;

use super::support::metric;
use crate::capabilities::http::{Hits, get, serve, url};
use crate::capabilities::support::{Probe, Sub, script};
use crate::forwarder::Forwarder;
use crate::harness::{self, free_addr, http_get};

/// How long a blocked host is watched for calls or publishes it must not make.
const WATCH: Duration = Duration::from_millis(1500);

/// Each message's call makes one request to the test server (so the server counts calls) and
/// publishes its report (the message's effect). While blocked: no call, no publish; unblocked:
/// the waiting messages go on. SIGTERM during a block exits within `shutdown_timeout`, and
/// after a restart each message is handled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_connection_gets_no_new_calls_or_publishes() {
    let hits = Hits::default();
    let web = serve(hits.clone()).await.port();
    let fwd = Forwarder::blocking().await;
    let admin = free_addr();
    let state = tempfile::tempdir().expect("state dir");
    let subs = [Sub::new(
        "b",
        &format!(
            "allowed_hosts = [\"http://127.0.0.1:{web}\"]\nconcurrency = 4\nprefetch = 16\n\
             timeout = \"10s\""
        ),
    )];
    let tables = format!("[admin]\nlisten = \"{admin}\"\n");
    let broker = fwd.url();
    let env = [("WORKER_BROKER_URL", broker.as_str())];
    let mut probe = Probe::start_child_edited("blocked", &subs, state.path(), &tables, &env, |t| {
        t.replace("[broker]\n", "[broker]\nshutdown_timeout = \"2s\"\n")
    })
    .await;
    let queue = format!("{}.b", probe.n.p);
    let message = |id: &str| script(id, json!([get(url(web, "/hello"))]));

    // Blocked: what arrives waits, no call starts, nothing is published.
    block(&fwd, admin).await;
    for id in ["m1", "m2", "m3"] {
        probe.send("b", &message(id)).await;
    }
    wait_taken(&probe.conn, &queue).await;
    tokio::time::sleep(WATCH).await;
    assert_eq!(hits.all().len(), 0, "calls started while blocked");
    assert_eq!(
        fwd.publishes_while_blocked(),
        0,
        "publishes written while blocked"
    );

    // Unblocked: they go on.
    fwd.unblock();
    for id in ["m1", "m2", "m3"] {
        probe.report(id).await;
    }
    assert_eq!(hits.all().len(), 3);

    // Blocked again, then SIGTERM: a bounded exit, nothing written; after a restart each of the
    // waiting messages is handled once.
    block(&fwd, admin).await;
    for id in ["m4", "m5", "m6"] {
        probe.send("b", &message(id)).await;
    }
    wait_taken(&probe.conn, &queue).await;
    tokio::time::sleep(WATCH).await;
    assert_eq!(hits.all().len(), 3, "calls started while blocked");
    let asked = Instant::now();
    let status = probe.terminate().await;
    let took = asked.elapsed();
    assert!(status.success(), "exit 0: {status:?}\n{}", probe.log());
    assert!(
        took < Duration::from_secs(8),
        "SIGTERM took {took:?} (shutdown_timeout 2s)"
    );
    assert_eq!(
        fwd.publishes_while_blocked(),
        0,
        "publishes written while blocked"
    );
    // What the forwarder held (nothing) reaches the broker now, as after a real alarm.
    fwd.unblock();
    probe.restart_child(&env).await;
    for id in ["m4", "m5", "m6"] {
        probe.report(id).await;
    }
    assert_eq!(hits.all().len(), 6, "each message's call once");
    assert!(
        probe.next_report(WATCH).await.is_none(),
        "a message published twice"
    );
    println!("FIGURES blocked connection: SIGTERM during the block exited in {took:?}");
    probe.stop().await;
}

/// A call running when the block begins ends during it with ok and nothing to publish: its ack
/// still goes out during the block (acks are not publishes), so a shutdown meanwhile does not
/// hand the message to the next host to run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_due_during_a_block_goes_out() {
    let hits = Hits::default();
    let web = serve(hits.clone()).await.port();
    let fwd = Forwarder::blocking().await;
    let admin = free_addr();
    let state = tempfile::tempdir().expect("state dir");
    let subs = [Sub::new(
        "q",
        &format!(
            "allowed_hosts = [\"http://127.0.0.1:{web}\"]\nconcurrency = 1\nprefetch = 4\n\
             timeout = \"10s\""
        ),
    )];
    let tables = format!("[admin]\nlisten = \"{admin}\"\n");
    let broker = fwd.url();
    let env = [("WORKER_BROKER_URL", broker.as_str())];
    // No `report`: an ok answer publishes nothing, so only its ack is left to write.
    let mut probe =
        Probe::start_child_edited("blockack", &subs, state.path(), &tables, &env, |t| {
            let t = t.replace("[broker]\n", "[broker]\nshutdown_timeout = \"2s\"\n");
            let report = t
                .lines()
                .find(|l| l.starts_with("report = "))
                .map(str::to_owned);
            match report {
                Some(line) => t.replace(&format!("{line}\n"), ""),
                None => t,
            }
        })
        .await;
    let queue = format!("{}.q", probe.n.p);
    let handled = |metrics: &str| {
        metric(
            metrics,
            "worker_messages_total",
            &format!("queue=\"{queue}\""),
        )
    };

    probe
        .send("q", &script("slow", json!([get(url(web, "/slow"))])))
        .await;
    harness::eventually(Duration::from_secs(20), "the slow call started", || async {
        (hits.to("/slow") == 1).then_some(())
    })
    .await;
    block(&fwd, admin).await;
    harness::eventually(Duration::from_secs(20), "the slow call handled", || async {
        let (_, metrics) = http_get(admin, "/metrics").await?;
        (handled(&metrics) == 1.0).then_some(())
    })
    .await;
    let status = probe.terminate().await;
    assert!(status.success(), "exit 0: {status:?}\n{}", probe.log());
    fwd.unblock();

    // A marker behind it, one call at a time: had the slow one come back, it would run first.
    probe.restart_child(&env).await;
    probe
        .send("q", &script("after", json!([get(url(web, "/hello"))])))
        .await;
    harness::eventually(Duration::from_secs(20), "the marker's call", || async {
        (hits.to("/hello") == 1).then_some(())
    })
    .await;
    assert_eq!(
        hits.to("/slow"),
        1,
        "the message acked during the block ran again"
    );
    probe.stop().await;
}

/// Blocks the forwarder's connections and waits until the host says so.
async fn block(fwd: &Forwarder, admin: std::net::SocketAddr) {
    fwd.block("low on memory (test)");
    let body = harness::eventually(Duration::from_secs(20), "/readyz 503 blocked", || async {
        let (status, body) = http_get(admin, "/readyz").await?;
        (status == 503 && body.contains("blocks publishing")).then_some(body)
    })
    .await;
    assert!(body.contains("low on memory (test)"), "{body}");
    let (_, metrics) = http_get(admin, "/metrics").await.expect("/metrics");
    assert_eq!(metric(&metrics, "worker_broker_blocked", ""), 1.0);
}

/// Waits until the host has taken every message of `queue` (delivered to it, not acked).
async fn wait_taken(conn: &lapin::Connection, queue: &str) {
    harness::eventually(
        Duration::from_secs(20),
        &format!("the messages of {queue} taken"),
        || async {
            let q = harness::probe(conn, queue).await?;
            (q.message_count() == 0).then_some(())
        },
    )
    .await;
}
