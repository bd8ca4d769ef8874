//! Running as a service (issue 7): kill -9 mid-stream, broker restarts, bad plugins, SIGTERM
//! under load, a second signal, a dropped connection and the admin endpoints.
//!
//! Every fault test accounts for each message it published, by the unique index in its body:
//! the plugin republishes every body it answers ok to a collector queue, so at the end
//! `published == handled + still queued` and `lost == 0` are checked index by index, and the
//! figures are printed (`cargo test --test integration service:: -- --nocapture` shows them).
//! Tests named `broker_restart_*` stop and start RabbitMQ: they must run alone
//! (scripts/test.sh runs them after the rest, one at a time).

pub(crate) mod support;

use std::time::{Duration, Instant};

use crate::harness::{self, Host, Names, free_addr, http_get, wait_status, watch_status};

use support::*;

const N: u32 = 5000;
/// The subscription settings of the load tests.
const LOAD: &str = "prefetch = 16\nconcurrency = 4\nmax_retries = 0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_stream_handles_every_message_at_least_once() {
    let n = Names::new("kill9");
    let dir = config_dir(&toml(&n, None, LOAD));
    declare(dir.path()).await;
    let conn = harness::connect().await;
    publish_all(&conn, &n, (0..N).map(|i| body(b'o', i))).await;

    let mut host = start(dir.path(), 1);
    let before = wait_depth(&conn, &n.seen(), N / 5, Duration::from_secs(120)).await;
    host.kill();
    let at_kill = depth(&conn, &n.seen()).await;
    assert!(
        at_kill < N,
        "the kill came after the stream ended ({at_kill} handled)"
    );

    let mut host = start(dir.path(), 2);
    wait_all_taken(&conn, &n, N, Duration::from_secs(180)).await;
    host.signal("TERM");
    assert!(host.exit_within(Duration::from_secs(30)).await.success());

    let t = tally(&conn, &n, N).await;
    println!(
        "FIGURES kill -9 after ~{before}..{at_kill} of {N} handled: {t:?} (prefetch 16, concurrency 4)"
    );
    t.assert_nothing_lost();
    assert_eq!(
        t.still_queued, 0,
        "every message handled at least once: {t:?}"
    );
    // Only messages handled but not yet acked when the process died come back: at most the
    // prefetch window.
    assert!(t.duplicates <= 16, "{t:?}");
    cleanup(&n).await;
}

/// Starts the binary on `toml` (`n`'s config) and waits until message 0, an endless loop, is in
/// flight.
async fn start_with_a_loop_in_flight(
    n: &Names,
    toml: &str,
) -> (tempfile::TempDir, lapin::Connection, Host) {
    let dir = config_dir(toml);
    declare(dir.path()).await;
    let conn = harness::connect().await;
    let host = start(dir.path(), 1);
    harness::wait_consuming(&conn, &n.q()).await;
    publish_all(&conn, n, [body(b'l', 0)]).await;
    harness::eventually(Duration::from_secs(20), "the loop in flight", || async {
        (depth(&conn, &n.q()).await == 0).then_some(())
    })
    .await;
    (dir, conn, host)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_drains_acks_once_and_exits_0() {
    // Message 0 loops until its timeout: it is in flight when SIGTERM comes, so the drain must
    // wait for it, then park it (confirmed) and ack it. shutdown_timeout (default 30 s) is
    // raised above SLOW so the drain can wait that long.
    const SLOW: Duration = Duration::from_secs(45);
    let n = Names::new("sigterm");
    let extra = format!("{LOAD}\ntimeout = \"{}s\"", SLOW.as_secs());
    let shutdown = format!(
        "[broker]\nshutdown_timeout = \"{}s\"\n",
        SLOW.as_secs() + 15
    );
    let toml = toml(&n, None, &extra).replacen("[broker]\n", &shutdown, 1);
    let (_dir, conn, mut host) = start_with_a_loop_in_flight(&n, &toml).await;
    let looping = Instant::now();
    publish_all(&conn, &n, (1..N).map(|i| body(b'o', i))).await;
    wait_depth(&conn, &n.seen(), N / 5, Duration::from_secs(120)).await;
    let signalled = Instant::now();
    host.signal("TERM");
    assert!(
        looping.elapsed() < SLOW,
        "too slow for this test: the loop ended before SIGTERM"
    );
    // The drain waits for the rest of the loop (under SLOW), then parks it; past
    // shutdown_timeout (SLOW + 15 s) it would exit 0 without parking.
    let status = host.exit_within(SLOW + Duration::from_secs(30)).await;
    let took = signalled.elapsed();
    assert_eq!(status.code(), Some(0), "exit status {status:?}");
    let parked = depth(&conn, &n.failed()).await;
    assert_eq!(
        parked, 1,
        "the call in flight was finished, parked and acked"
    );

    let t = tally(&conn, &n, N).await;
    println!(
        "FIGURES SIGTERM under load (a {SLOW:?} call in flight): exit 0 after {took:?}; {t:?}"
    );
    t.assert_nothing_lost();
    assert_eq!(t.duplicates, 0, "a drain must not cause duplicates: {t:?}");
    assert_eq!(t.handled_and_queued, 0, "published but not acked: {t:?}");
    let log = host.log();
    for bad in [
        "unknown delivery tag",
        "ack failed",
        "PRECONDITION_FAILED",
        "not acked",
    ] {
        assert!(!log.contains(bad), "{bad:?} in the log:\n{log}");
    }
    assert!(log.contains("drained"), "the drain is logged:\n{log}");
    for line in log.lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("--log-format json wrote a non-JSON line ({e}): {line}"));
        assert!(
            v.get("level").is_some() && v.get("fields").is_some(),
            "{line}"
        );
    }
    cleanup(&n).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_exits_at_once_and_loses_nothing() {
    let n = Names::new("twosig");
    // An endless loop: the drain would wait for its 60 s timeout.
    let toml = toml(&n, None, "timeout = \"60s\"\nmax_retries = 0");
    let (_dir, conn, mut host) = start_with_a_loop_in_flight(&n, &toml).await;
    host.signal("TERM");
    host.wait_log("signal received", Duration::from_secs(10))
        .await;
    let second = Instant::now();
    host.signal("INT");
    let status = host.exit_within(Duration::from_secs(10)).await;
    println!(
        "FIGURES second signal: exit {:?} after {:?}",
        status.code(),
        second.elapsed()
    );
    assert_eq!(status.code(), Some(130));
    // The unfinished message goes back to its queue.
    wait_depth(&conn, &n.q(), 1, Duration::from_secs(10)).await;
    let t = tally(&conn, &n, 1).await;
    assert_eq!((t.lost, t.still_queued), (0, 1), "{t:?}");
    cleanup(&n).await;
}

/// Every 10th message traps, bombs memory or loops; the rest must keep flowing. Runs a clean
/// stream and one poisoned stream per kind, and reports the throughput of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_messages_do_not_stop_the_others() {
    const M: u32 = 2000;
    let extra = "prefetch = 16\nconcurrency = 4\nmax_retries = 0\ntimeout = \"1s\"\nmemory_limit = \"2MiB\"";
    let mut rates = Vec::new();
    for (kind, bad_op) in [
        ("clean", None),
        ("trap", Some(b't')),
        ("memory-bomb", Some(b'm')),
        ("loop", Some(b'l')),
    ] {
        let n = Names::new(kind);
        let dir = config_dir(&toml(&n, None, extra));
        declare(dir.path()).await;
        let conn = harness::connect().await;
        let op = |i: u32| match bad_op {
            Some(bad) if i % 10 == 9 => bad,
            _ => b'o',
        };
        publish_all(&conn, &n, (0..M).map(|i| body(op(i), i))).await;
        let bad = (0..M).filter(|i| op(*i) != b'o').count() as u32;

        let mut host = start(dir.path(), 1);
        let done = |at_least: u32| {
            let conn = &conn;
            let n = &n;
            async move {
                let d = depth(conn, &n.seen()).await + depth(conn, &n.failed()).await;
                (d >= at_least).then_some((d, Instant::now()))
            }
        };
        let (first, t0) =
            harness::eventually(Duration::from_secs(60), "the first answer", || done(1)).await;
        // The loop stream alone takes 50 s or more: 200 loops of 1 s, 4 at a time.
        let (_, t1) =
            harness::eventually(Duration::from_secs(300), "every answer", || done(M)).await;
        host.signal("TERM");
        assert!(host.exit_within(Duration::from_secs(30)).await.success());
        let secs = (t1 - t0).as_secs_f64();
        let rate = f64::from(M - first) / secs;
        let good_rate = f64::from(M - bad) / secs;

        let t = tally(&conn, &n, M).await;
        let parked = t.handled - (M - bad) as usize;
        println!(
            "FIGURES bad messages, {kind}: {M} messages, {bad} bad, in {secs:.2} s: {rate:.0} msg/s, \
             {good_rate:.0} good msg/s; parked {parked}; {t:?}"
        );
        t.assert_nothing_lost();
        assert_eq!(t.duplicates, 0, "{t:?}");
        assert_eq!(t.still_queued, 0, "{t:?}");
        assert_eq!(parked as u32, bad, "every bad message parked: {t:?}");
        let log = host.log();
        assert!(!log.contains("panicked"), "the host panicked:\n{log}");
        rates.push(format!("{kind} {good_rate:.0}"));
        cleanup(&n).await;
    }
    println!(
        "FIGURES good messages per second (timeout 1s, memory_limit 2MiB, concurrency 4): {}",
        rates.join(", ")
    );
}

#[tokio::test]
async fn admin_endpoints_report_health_readiness_and_metrics() {
    // Before any connection: alive, not ready.
    let n = Names::new("admin");
    let addr = free_addr();
    let unreachable = toml(&n, Some(addr), "")
        .replace(&harness::broker_url(), "amqp://guest:guest@127.0.0.1:1/%2f");
    let svc = Host::in_process(&unreachable, &[("script.wasm", &script())]).await;
    wait_status(addr, "/healthz", 200, Duration::from_secs(20)).await;
    let (status, _) = http_get(addr, "/readyz").await.expect("readyz answers");
    assert_eq!(status, 503, "not ready before the broker answers");
    let (_, metrics) = http_get(addr, "/metrics").await.expect("metrics answer");
    assert!(metrics.contains("worker_broker_connected 0"), "{metrics}");
    svc.stop().await;

    // Connected and consuming: ready; every family shows up once messages flow.
    let addr = free_addr();
    let svc = Host::in_process(
        &toml(&n, Some(addr), "max_retries = 1"),
        &[("script.wasm", &script())],
    )
    .await;
    wait_status(addr, "/readyz", 200, Duration::from_secs(20)).await;
    let conn = harness::connect().await;
    publish_all(&conn, &n, [body(b'o', 0), body(b'f', 1), body(b'r', 2)]).await;
    wait_depth(&conn, &n.retry("30s"), 1, Duration::from_secs(20)).await;
    wait_depth(&conn, &n.failed(), 1, Duration::from_secs(20)).await;
    wait_depth(&conn, &n.seen(), 1, Duration::from_secs(20)).await;
    let q = n.q();
    let families = [
        format!("worker_messages_total{{queue=\"{q}\",outcome=\"ok\"}} 1"),
        format!("worker_messages_total{{queue=\"{q}\",outcome=\"fail\"}} 1"),
        format!("worker_messages_total{{queue=\"{q}\",outcome=\"retry\"}} 1"),
        format!("worker_retries_total{{queue=\"{q}\"}} 1"),
        format!("worker_failed_total{{queue=\"{q}\"}} 1"),
        format!("worker_handler_duration_seconds_count{{queue=\"{q}\"}} 3"),
        "worker_handler_duration_seconds_bucket{le=".to_string(),
        format!("worker_in_flight{{queue=\"{q}\"}} 0"),
        "# TYPE worker_plugin_reloads counter".to_string(),
        "# TYPE worker_handler_duration_seconds histogram".to_string(),
        "worker_plugin_reloads_total{result=\"ok\"}".to_string(),
        "worker_broker_connected 1".to_string(),
        "worker_plugin_info{plugin=\"script.wasm\",sha256=\"".to_string(),
    ];
    // A result is counted just after its publishes are confirmed, so the `seen` queue can fill
    // a moment before the counter moves: read until every family is there, or the deadline.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let metrics = loop {
        let (status, metrics) = http_get(addr, "/metrics").await.expect("metrics answer");
        assert_eq!(status, 200);
        if families.iter().all(|f| metrics.contains(f)) || std::time::Instant::now() > deadline {
            break metrics;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for family in families {
        assert!(
            metrics.contains(&family),
            "{family:?} missing from:\n{metrics}"
        );
    }
    svc.stop().await;
    cleanup(&n).await;
}

/// `[broker] urls` lists cluster nodes: one that does not answer is passed over for the next.
#[tokio::test]
async fn several_broker_urls_are_tried_in_turn() {
    let n = Names::new("urls");
    let url = harness::broker_url();
    let toml = toml(&n, None, "").replace(
        &format!("url = \"{url}\""),
        &format!("urls = [\"amqp://guest:guest@127.0.0.1:1/%2f\", \"{url}\"]"),
    );
    assert!(toml.contains("urls = ["), "{toml}");
    let svc = Host::in_process(&toml, &[("script.wasm", &script())]).await;
    let conn = harness::connect().await;
    harness::wait_consuming(&conn, &n.q()).await;
    publish_all(&conn, &n, [body(b'o', 0)]).await;
    wait_depth(&conn, &n.seen(), 1, Duration::from_secs(20)).await;
    svc.stop().await;
    let t = tally(&conn, &n, 1).await;
    t.assert_nothing_lost();
    assert_eq!(t.still_queued, 0, "{t:?}");
    cleanup(&n).await;
}

/// The broker drops the host's connection (as on a node failover) while a slow call is in
/// flight: the host is not ready at once (not only when the call ends), reconnects, consumes
/// again, and the interrupted message comes back. Closes only this host's connection, so it
/// runs alongside other tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_is_noticed_and_consuming_resumes() {
    // Long enough that rabbitmqctl closes the connection mid-call: each rabbitmqctl boots an
    // Erlang VM, which has taken over 12 s on a busy 2-core machine.
    const SLOW: Duration = Duration::from_secs(60);
    let n = Names::new("dropped");
    let addr = free_addr();
    let extra = format!(
        "concurrency = 2\nmax_retries = 0\ntimeout = \"{}s\"",
        SLOW.as_secs()
    );
    let svc = Host::in_process(&toml(&n, Some(addr), &extra), &[("script.wasm", &script())]).await;
    let conn = harness::connect().await;
    wait_status(addr, "/readyz", 200, Duration::from_secs(20)).await;
    publish_all(&conn, &n, [body(b'o', 0)]).await;
    wait_depth(&conn, &n.seen(), 1, Duration::from_secs(20)).await;

    // The host's connection is named after its config file, which is unique to this test.
    let marker = svc.dir().to_string_lossy().into_owned();
    let listed = rabbitmqctl(&["list_connections", "pid", "client_properties", "-q"]).await;
    let pid = listed
        .lines()
        .find(|l| l.contains(&marker))
        .and_then(|l| l.split('\t').next())
        .unwrap_or_else(|| panic!("no connection named after {marker} in:\n{listed}"))
        .to_string();
    // An endless loop, cut by the timeout: in flight when the connection goes.
    publish_all(&conn, &n, [body(b'l', 1)]).await;
    harness::eventually(Duration::from_secs(20), "the loop in flight", || async {
        (depth(&conn, &n.q()).await == 0).then_some(())
    })
    .await;
    let looping = Instant::now();
    // Watched from before the close: the host is back within a few hundred milliseconds,
    // which can pass before rabbitmqctl (an Erlang VM of its own) has even exited.
    let not_ready = watch_status(addr, "/readyz", 503);
    let asked = Instant::now();
    rabbitmqctl(&["close_connection", &pid, "test: dropped on purpose"]).await;
    assert!(
        looping.elapsed() < SLOW / 2,
        "closing took too long for this test"
    );
    let abort = not_ready.abort_handle();
    let seen = tokio::time::timeout(SLOW / 2, not_ready).await;
    abort.abort();
    let noticed = seen
        .expect("/readyz never answered 503 after the connection was closed")
        .expect("the /readyz watcher")
        - asked;
    wait_status(addr, "/readyz", 200, Duration::from_secs(20)).await;
    let resumed = asked.elapsed();
    assert!(
        looping.elapsed() < SLOW,
        "ready again only after the in-flight call ended ({resumed:?} after the close)"
    );
    harness::eventually(
        Duration::from_secs(30),
        "a new connection from the host",
        || async {
            let listed = rabbitmqctl(&["list_connections", "pid", "client_properties", "-q"]).await;
            let back = listed
                .lines()
                .any(|l| l.contains(&marker) && !l.starts_with(&pid));
            back.then_some(())
        },
    )
    .await;
    publish_all(&conn, &n, [body(b'o', 2)]).await;
    wait_depth(&conn, &n.seen(), 2, Duration::from_secs(20)).await;
    // The loop's first result died with its channel; redelivered, it times out again and is
    // parked (max_retries = 0).
    wait_depth(&conn, &n.failed(), 1, SLOW * 3).await;
    println!(
        "FIGURES dropped connection with a {SLOW:?} call in flight: not ready after {noticed:?}, \
         ready again after {resumed:?}"
    );
    svc.stop().await;
    let t = tally(&conn, &n, 3).await;
    t.assert_nothing_lost();
    assert_eq!(t.still_queued, 0, "{t:?}");
    assert_eq!(t.duplicates, 0, "{t:?}");
    cleanup(&n).await;
}

/// RabbitMQ stops in the middle of a stream and comes back: the host notices (not ready),
/// reconnects by itself, redeclares, resumes; nothing is lost. Stops the broker: run alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_restart_mid_stream_loses_nothing() {
    let n = Names::new("restart");
    let addr = free_addr();
    let dir = config_dir(&toml(&n, Some(addr), LOAD));
    declare(dir.path()).await;
    let conn = harness::connect().await;
    let half = N / 2;
    publish_all(&conn, &n, (0..half).map(|i| body(b'o', i))).await;

    let mut host = start(dir.path(), 1);
    wait_status(addr, "/readyz", 200, Duration::from_secs(60)).await;
    let before = wait_depth(&conn, &n.seen(), half / 5, Duration::from_secs(120)).await;
    drop(conn);

    let broker = BrokerDown::stop().await;
    let stopped = Instant::now();
    wait_status(addr, "/readyz", 503, Duration::from_secs(30)).await;
    let noticed = stopped.elapsed();
    let (_, metrics) = http_get(addr, "/metrics").await.expect("metrics answer");
    assert!(metrics.contains("worker_broker_connected 0"), "{metrics}");
    broker.start().await;
    let up = Instant::now();
    let down_for = stopped.elapsed();
    wait_status(addr, "/readyz", 200, Duration::from_secs(60)).await;
    let recovered = up.elapsed();

    // The second half of the stream arrives after the restart.
    let conn = harness::connect().await;
    publish_all(&conn, &n, (half..N).map(|i| body(b'o', i))).await;
    wait_all_taken(&conn, &n, N, Duration::from_secs(180)).await;
    host.signal("TERM");
    assert!(host.exit_within(Duration::from_secs(30)).await.success());

    let t = tally(&conn, &n, N).await;
    println!(
        "FIGURES broker restart after {before} of {half} handled: noticed in {noticed:?}, \
         broker down {down_for:?} (stop_app .. start_app done), ready again {recovered:?} after the \
         broker was up; {t:?}"
    );
    t.assert_nothing_lost();
    assert_eq!(t.still_queued, 0, "{t:?}");
    cleanup(&n).await;
}

/// A message stuck in a slow call at the head of the prefetch window does not hold back the
/// acks of the messages after it (acks are batched, but never past an unsettled tag).
#[tokio::test]
async fn a_slow_message_does_not_hold_back_the_acks_of_the_others() {
    let n = Names::new("slowhead");
    let dir = config_dir(&toml(
        &n,
        None,
        "prefetch = 50\nconcurrency = 4\ntimeout = \"60s\"\nmax_retries = 0",
    ));
    declare(dir.path()).await;
    let conn = harness::connect().await;
    let fast = 30;
    publish_all(
        &conn,
        &n,
        std::iter::once(body(b'l', 0)).chain((1..=fast).map(|i| body(b'o', i))),
    )
    .await;

    let mut host = start(dir.path(), 1);
    wait_depth(&conn, &n.seen(), fast, Duration::from_secs(60)).await;
    // While the slow call still runs, the broker must see only it unacknowledged.
    let q = n.q();
    let unacked = harness::eventually(
        Duration::from_secs(30),
        "only the slow message unacked",
        || async {
            let out = rabbitmqctl(&[
                "list_queues",
                "-q",
                "--no-table-headers",
                "name",
                "messages_unacknowledged",
            ])
            .await;
            let count = out
                .lines()
                .find_map(|l| l.strip_prefix(q.as_str())?.trim().parse::<u32>().ok());
            count.filter(|c| *c == 1)
        },
    )
    .await;
    assert_eq!(unacked, 1);
    host.kill();
    // Only the slow message comes back.
    let back = harness::eventually(
        Duration::from_secs(10),
        "the slow message requeued",
        || async {
            let d = depth(&conn, &n.q()).await;
            (d > 0).then_some(d)
        },
    )
    .await;
    assert_eq!(
        back, 1,
        "the fast messages were acked while the slow one ran"
    );
    cleanup(&n).await;
}
