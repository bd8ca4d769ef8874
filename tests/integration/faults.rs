//! Broker-side faults stay as small as they are (SPEC section 7): a plugin publishing to a
//! missing exchange, deleted queues and exchanges, the broker's consumer timeout, a resource
//! alarm during shutdown, an oversized message. Each counts the host's connections through a
//! forwarder and every message by the index in its body.
//!
//! Tests named `broker_global_*` change settings of the whole broker (an alarm, the consumer
//! timeout) and restore them in every outcome: they must run alone (scripts/test.sh runs every
//! `broker_*` test after the rest, one at a time).

mod batch;
mod blocked;
pub(crate) mod support;

use std::time::{Duration, Instant};

use crate::harness::{self, Host, free_addr, http_get, wait_status};
use crate::service::support::{body, depth, drain, start};
use support::*;

/// A plugin publish to an exchange that does not exist: one channel closes, never the
/// connection; the message is retried with the broker's reason and ends parked; every other
/// message, and a second subscription, go on; nothing is published twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_to_a_missing_exchange_closes_one_channel_not_the_connection() {
    let n = Faults::new("missing-ex");
    let fwd = crate::forwarder::Forwarder::to_broker().await;
    let admin = free_addr();
    let missing = format!("{}.nowhere", n.p);
    let toml = n.toml(
        &fwd.url(),
        Some(admin),
        &format!(
            "publish = [\"{out}\", \"{missing}\"]\nmax_retries = 2\nretry_delays = [\"200ms\"]\n\
             prefetch = 20\nconcurrency = 4\n\n{second}",
            out = n.out(),
            second = n.second_subscription(),
        ),
    );
    let service = Host::in_process(&toml, &[("script.wasm", &script())]).await;
    let conn = harness::connect().await;
    harness::wait_consuming(&conn, &n.q()).await;
    harness::wait_consuming(&conn, &n.q2()).await;

    let bad = |i: u32| i % 10 == 3;
    let messages = (0..200).map(|i| {
        let to = if bad(i) { missing.clone() } else { n.out() };
        (n.q(), body(b'o', i), to)
    });
    let second = (1000..1050).map(|i| (n.q2(), body(b'o', i), n.out()));
    publish_to(&conn, &n.master(), messages.chain(second)).await;

    wait_count(&conn, &n.seen(), 230, Duration::from_secs(60)).await;
    wait_count(&conn, &n.failed(), 20, Duration::from_secs(60)).await;
    let ready = http_get(admin, "/readyz").await;
    service.stop().await;

    let seen = drain(&conn, &n.seen()).await;
    let mut expected: Vec<u32> = (0..200).filter(|i| !bad(*i)).chain(1000..1050).collect();
    let mut got = seen.clone();
    got.sort_unstable();
    expected.sort_unstable();
    assert_eq!(got, expected, "every good message published exactly once");
    let parked = drain_parked(&conn, &n.failed()).await;
    assert_eq!(parked.len(), 20, "every bad message parked once");
    for (i, headers) in &parked {
        assert!(bad(*i), "message {i} should not be parked");
        let error = &headers["worker-error"];
        assert!(
            error.contains(&format!("publish to \"{missing}\" refused"))
                && error.contains("NOT_FOUND"),
            "worker-error names the broker's reason: {error}"
        );
        assert_eq!(headers["worker-failed-reason"], "retries-exhausted");
        assert_eq!(headers["worker-attempts"], "3");
    }
    assert_eq!(fwd.connections(), 1, "one connection for the whole test");
    assert_eq!(
        ready.map(|r| r.0),
        Some(200),
        "ready while channels come and go"
    );
    println!(
        "FIGURES missing exchange: {} good handled once, 20 parked, {} connection(s)",
        seen.len(),
        fwd.connections()
    );
    n.cleanup().await;
}

/// Deleted retry and failed queues are declared again when a republish to them comes back
/// unroutable; the message reaches them, and "parked" is only said of what was parked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_retry_and_failed_queues_are_declared_again() {
    let n = Faults::new("deleted-q");
    let fwd = crate::forwarder::Forwarder::to_broker().await;
    let admin = free_addr();
    let toml = n.toml(
        &fwd.url(),
        Some(admin),
        "max_retries = 1\nretry_delays = [\"1s\"]",
    );
    let service = Host::in_process(&toml, &[("script.wasm", &script())]).await;
    let conn = harness::connect().await;
    harness::wait_consuming(&conn, &n.q()).await;
    let ch = conn.create_channel().await.expect("channel");
    for q in [n.retry("1s"), n.failed()] {
        ch.queue_delete(q.as_str().into(), Default::default())
            .await
            .expect("delete");
    }
    // Retry forever: each message goes round the retry queue once, then is parked.
    let messages = (0..5).map(|i| (n.q(), body(b'r', i), n.out()));
    publish_to(&conn, &n.master(), messages).await;

    wait_count(&conn, &n.failed(), 5, Duration::from_secs(30)).await;
    let metrics = http_get(admin, "/metrics").await.expect("metrics").1;
    service.stop().await;
    let parked = drain_parked(&conn, &n.failed()).await;
    assert_eq!(parked.len(), 5);
    for (_, headers) in &parked {
        assert_eq!(
            headers["worker-attempts"], "2",
            "went round the retry queue once"
        );
    }
    assert_eq!(
        metric(&metrics, "worker_messages_total", "outcome=\"requeued\""),
        0.0
    );
    assert!(metric(&metrics, "worker_topology_repairs_total", "") >= 1.0);
    assert_eq!(fwd.connections(), 1, "one connection for the whole test");
    n.cleanup().await;
}

/// The master exchange deleted while messages wait in a retry queue: the periodic check
/// declares it again before they are due, so none is dead-lettered into nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_exchange_is_declared_again_before_retries_come_due() {
    let n = Faults::new("deleted-ex");
    let fwd = crate::forwarder::Forwarder::to_broker().await;
    let admin = free_addr();
    let toml = n
        .toml(&fwd.url(), Some(admin), "retry_delays = [\"4s\"]")
        .replace("[broker]\n", "[broker]\ntopology_check = \"500ms\"\n");
    let service = Host::in_process(&toml, &[("script.wasm", &script())]).await;
    let conn = harness::connect().await;
    harness::wait_consuming(&conn, &n.q()).await;
    // Retry once, then ok (published to `seen`).
    let messages = (0..10).map(|i| (n.q(), retry_then_ok(i), n.out()));
    publish_to(&conn, &n.master(), messages).await;
    wait_count(&conn, &n.retry("4s"), 10, Duration::from_secs(10)).await;
    let deleted = Instant::now();
    let ch = conn.create_channel().await.expect("channel");
    ch.exchange_delete(n.master().as_str().into(), Default::default())
        .await
        .expect("delete master");
    wait_status(admin, "/readyz", 200, Duration::from_secs(10)).await;

    wait_count(&conn, &n.seen(), 10, Duration::from_secs(20)).await;
    let metrics = http_get(admin, "/metrics").await.expect("metrics").1;
    service.stop().await;
    let mut seen: Vec<u32> = drain(&conn, &n.seen())
        .await
        .iter()
        .map(|i| i - RETRY_THEN_OK)
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..10).collect::<Vec<_>>(), "none lost, none doubled");
    assert!(metric(&metrics, "worker_topology_repairs_total", "") >= 1.0);
    println!(
        "FIGURES deleted exchange: 10/10 delivered {:?} after the delete",
        deleted.elapsed()
    );
    assert_eq!(fwd.connections(), 1);
    n.cleanup().await;
}

/// A message larger than `max_message_size` is parked untouched: the plugin never sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_is_parked_without_running_the_plugin() {
    let n = Faults::new("oversized");
    let url = harness::broker_url();
    let toml = n.toml(&url, None, "max_message_size = \"64KiB\"");
    let service = Host::in_process(&toml, &[("script.wasm", &script())]).await;
    let conn = harness::connect().await;
    harness::wait_consuming(&conn, &n.q()).await;
    let mut big = body(b'o', 1);
    big.resize(100 << 10, b'x');
    let messages = [(n.q(), big, n.out()), (n.q(), body(b'o', 2), n.out())];
    publish_to(&conn, &n.master(), messages).await;
    wait_count(&conn, &n.failed(), 1, Duration::from_secs(20)).await;
    wait_count(&conn, &n.seen(), 1, Duration::from_secs(20)).await;
    service.stop().await;
    let parked = drain_parked(&conn, &n.failed()).await;
    assert_eq!(parked.len(), 1);
    let (i, headers) = &parked[0];
    assert_eq!(*i, 1);
    assert!(
        headers["worker-error"].contains("larger than max_message_size"),
        "{headers:?}"
    );
    assert_eq!(
        drain(&conn, &n.seen()).await,
        vec![2],
        "the plugin never ran on it"
    );
    n.cleanup().await;
}

/// Retrying a large message keeps at most two live copies of its body in the host: its own and
/// the client's frames while they are sent (peak RSS sampled from /proc while it goes round).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrying_a_large_message_keeps_one_copy_of_its_body() {
    const SIZE: usize = 96 << 20;
    let n = Faults::new("large");
    let toml = n.toml(
        &harness::broker_url(),
        None,
        "max_message_size = \"128MiB\"\nmax_retries = 1\nretry_delays = [\"1s\"]\nconcurrency = 1",
    );
    let dir = n.config_dir(&toml);
    crate::service::support::declare(dir.path()).await;
    let mut host = start(dir.path(), 1);
    let conn = harness::connect().await;
    wait_consuming_long(&conn, &n.q()).await;
    let pid = host.pid();
    let base = rss_kib(pid, "VmRSS");
    let mut big = body(b'r', 1);
    big.resize(SIZE, b'x');
    publish_to(&conn, &n.master(), [(n.q(), big, n.out())]).await;
    wait_count(&conn, &n.failed(), 1, Duration::from_secs(120)).await;
    let peak = rss_kib(pid, "VmHWM");
    host.signal("TERM");
    host.exit_within(Duration::from_secs(30)).await;
    let grew_mib = (peak.saturating_sub(base)) as f64 / 1024.0;
    let copies = grew_mib / (SIZE >> 20) as f64;
    println!(
        "FIGURES large message: {} MiB body retried once and parked; RSS {} -> peak {} MiB (+{grew_mib:.0} MiB = {copies:.2} body copies)",
        SIZE >> 20,
        base / 1024,
        peak / 1024
    );
    // Live: ours and, while it is sent, the client's frames. Freed frame buffers the allocator
    // keeps for a while can add a third copy on a busy machine (2.0 alone, up to 2.7 with the
    // whole suite running, 3.03 once during a cold CI build).
    assert!(copies < 3.5, "{copies:.2} copies of the body at the peak");
    let _ = depth(&conn, &n.failed()).await;
    n.cleanup().await;
}

/// The broker's consumer timeout closes the channel of a call that runs longer: that call is
/// stopped and publishes and acks nothing, its redelivery counts as the failed call, and the
/// message ends parked once, instead of multiplying. RabbitMQ 3.10 checks the timeout about
/// once a minute, so the looping call's own timeout is longer than that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_global_consumer_timeout_does_not_multiply_a_message() {
    let n = Faults::new("ctimeout");
    let fwd = crate::forwarder::Forwarder::to_broker().await;
    let _timeout = ConsumerTimeout::set(Duration::from_secs(1)).await;
    let toml = n.toml(
        &fwd.url(),
        None,
        "timeout = \"150s\"\nmax_retries = 0\nconcurrency = 2",
    );
    let service = Host::in_process(&toml, &[("script.wasm", &script())]).await;
    let conn = harness::connect().await;
    harness::wait_consuming(&conn, &n.q()).await;
    // 'l' loops until stopped; the good ones answer at once.
    let messages = [(n.q(), body(b'l', 0), n.out())]
        .into_iter()
        .chain((1..6).map(|i| (n.q(), body(b'o', i), n.out())));
    let started = Instant::now();
    publish_to(&conn, &n.master(), messages).await;

    wait_count(&conn, &n.failed(), 1, Duration::from_secs(140)).await;
    let took = started.elapsed();
    wait_count(&conn, &n.seen(), 5, Duration::from_secs(30)).await;
    service.stop().await;
    let parked = drain_parked(&conn, &n.failed()).await;
    assert_eq!(parked.len(), 1, "parked once");
    let (i, headers) = &parked[0];
    assert_eq!(*i, 0);
    assert!(
        headers["worker-error"].contains("consumer timeout"),
        "{headers:?}"
    );
    let mut seen = drain(&conn, &n.seen()).await;
    seen.sort_unstable();
    assert_eq!(seen, vec![1, 2, 3, 4, 5], "the others once each");
    assert_eq!(depth(&conn, &n.q()).await, 0);
    assert_eq!(fwd.connections(), 1, "channel-sized: one connection");
    println!("FIGURES consumer timeout: parked once after {took:?}, 1 connection");
    n.cleanup().await;
}

/// While the broker blocks publishing the host is not ready (and says why); SIGTERM then still
/// ends within `shutdown_timeout`, leaving what it could not settle for redelivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_global_blocked_publishing_is_not_ready_and_shutdown_is_bounded() {
    const N: u32 = 400;
    let n = Faults::new("blocked");
    let admin = free_addr();
    // Each message loops until its 100 ms timeout and is parked: the host publishes all along.
    let toml = n
        .toml(
            &harness::broker_url(),
            Some(admin),
            "concurrency = 4\ntimeout = \"100ms\"\nmax_retries = 0",
        )
        .replace("[broker]\n", "[broker]\nshutdown_timeout = \"2s\"\n");
    let dir = n.config_dir(&toml);
    crate::service::support::declare(dir.path()).await;
    let conn = harness::connect().await;
    publish_to(
        &conn,
        &n.master(),
        (0..N).map(|i| (n.q(), body(b'l', i), n.out())),
    )
    .await;
    let mut host = start(dir.path(), 1);
    wait_count(&conn, &n.failed(), 20, Duration::from_secs(60)).await;

    let alarm = MemoryAlarm::raise().await;
    let reason = harness::eventually(
        Duration::from_secs(20),
        "readyz 503 while blocked",
        || async {
            let (status, body) = http_get(admin, "/readyz").await?;
            (status == 503).then_some(body)
        },
    )
    .await;
    assert!(
        reason.contains("blocks publishing"),
        "readyz says why: {reason}"
    );
    let metrics = http_get(admin, "/metrics").await.expect("metrics").1;
    assert_eq!(metric(&metrics, "worker_broker_blocked", ""), 1.0);

    let asked = Instant::now();
    host.signal("TERM");
    let status = host.exit_within(Duration::from_secs(15)).await;
    let took = asked.elapsed();
    alarm.clear().await;
    assert!(
        status.success(),
        "exit 0 after shutdown_timeout: {status:?}"
    );
    assert!(
        took < Duration::from_secs(8),
        "shutdown took {took:?} (timeout 2 s)"
    );
    println!(
        "FIGURES blocked: not ready ({}); SIGTERM exited in {took:?}",
        reason.trim()
    );

    // Nothing lost: every index is parked or back in Q (a park confirmed after the exit may
    // also be back in Q: at least once).
    let mut all: Vec<u32> = drain_parked(&conn, &n.failed())
        .await
        .into_iter()
        .map(|p| p.0)
        .collect();
    all.extend(drain(&conn, &n.q()).await);
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), N as usize, "nothing lost");
    n.cleanup().await;
}

/// SIGTERM is honoured within 5 s whatever the host is waiting for: a broker that accepts TCP
/// but never answers (connecting), one that stops answering once the connection is open
/// (declaring), and one that refuses connections (reconnecting with backoff).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_connecting_declaring_or_reconnecting_exits_within_5s() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let silent_url = format!(
        "amqp://guest:guest@{}/%2f",
        silent.local_addr().expect("addr")
    );
    let stalling = crate::forwarder::Forwarder::stalling_after_open().await;
    let refused_url = format!("amqp://guest:guest@{}/%2f", free_addr());
    let cases = [
        ("connecting", silent_url, "connecting"),
        ("declaring", stalling.url(), "connected to RabbitMQ"),
        ("reconnecting", refused_url, "retrying in"),
    ];
    for (what, url, log_line) in cases {
        let n = Faults::new(what);
        let dir = n.config_dir(&n.toml(&url, None, ""));
        let mut host = start(dir.path(), 1);
        // Accept the TCP connection of the silent broker so the host waits in the handshake.
        let _held = if what == "connecting" {
            let accepted = tokio::time::timeout(Duration::from_secs(20), silent.accept()).await;
            Some(accepted.expect("the host connects").expect("accept"))
        } else {
            host.wait_log(log_line, Duration::from_secs(20)).await;
            None
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let asked = Instant::now();
        host.signal("TERM");
        let status = host.exit_within(Duration::from_secs(10)).await;
        let took = asked.elapsed();
        println!(
            "FIGURES SIGTERM while {what}: exit {:?} after {took:?}",
            status.code()
        );
        assert!(status.success(), "{what}: exit 0, got {status:?}");
        assert!(took < Duration::from_secs(5), "{what}: took {took:?}");
    }
}
