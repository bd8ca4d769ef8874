//! Hot reload through the service: plugin swaps under a stream of messages (each result
//! attributed to the version that handled it), bad and half-written files, editor-style saves,
//! and subscriptions following edits of worker.toml.

mod folders;
mod limits;
pub(crate) mod support;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lapin::BasicProperties;

use crate::harness::{self, Host, Names};
use support::*;

#[tokio::test]
async fn plugin_swapped_ten_times_under_a_stream_of_2000_messages() {
    const MESSAGES: usize = 2000;
    const SWAPS: usize = 10;
    let n = Names::new("reload-stream");
    let toml = format!(
        "{}{}",
        topology_toml(&n),
        sub_toml(
            &n,
            &n.q(),
            "key",
            "prefetch = 32\nconcurrency = 4\nmax_retries = 3"
        )
    );
    let svc = Host::in_process(&toml, &[("hot.wasm", &versioned(&n.out(), 0))]).await;
    let plugin = svc.dir().join("plugins/hot.wasm");
    let (conn, ch) = harness::channel().await;
    harness::wait_consuming(&conn, &n.q()).await;
    let collector = Collector::start(&conn, &n.seen()).await;

    // The stream: message i has body "i". It runs until MESSAGES are out and every swap was
    // seen, so each swap has traffic behind it. `floor[i]` is the newest version whose result
    // had arrived when i was published: i must be handled by that version or a later one.
    let published = Arc::new(AtomicUsize::new(0));
    let newest_seen = Arc::new(AtomicUsize::new(0));
    let swapping_done = Arc::new(AtomicBool::new(false));
    let publisher = {
        let (published, newest_seen, done) = (
            published.clone(),
            newest_seen.clone(),
            swapping_done.clone(),
        );
        let (key, master) = (n.key(), n.master());
        tokio::spawn(async move {
            let (_conn, ch) = harness::channel().await;
            let mut floor = Vec::new();
            let mut i = 0usize;
            while (i < MESSAGES || !done.load(Ordering::SeqCst)) && i < 20 * MESSAGES {
                floor.push(newest_seen.load(Ordering::SeqCst));
                harness::publish(
                    &ch,
                    &master,
                    &key,
                    i.to_string().as_bytes(),
                    BasicProperties::default(),
                )
                .await;
                i += 1;
                published.store(i, Ordering::SeqCst);
                if i.is_multiple_of(4) {
                    tokio::time::sleep(Duration::from_millis(4)).await;
                }
            }
            floor
        })
    };

    let mut latencies = Vec::new();
    for k in 1..=SWAPS {
        let segment = k * MESSAGES / (SWAPS + 1);
        harness::eventually(
            Duration::from_secs(60),
            &format!("{segment} published"),
            || async { (published.load(Ordering::SeqCst) >= segment).then_some(()) },
        )
        .await;
        let bytes = versioned(&n.out(), k);
        let written = Instant::now();
        if k % 2 == 1 {
            write_in_place(&plugin, &bytes);
        } else {
            write_via_rename(&plugin, &bytes);
        }
        let first = harness::eventually(
            Duration::from_secs(30),
            &format!("v{k} serving"),
            || async { collector.first_of(k) },
        )
        .await;
        let latency = first.saturating_duration_since(written);
        assert!(latency < Duration::from_secs(30), "v{k} took {latency:?}");
        newest_seen.store(k, Ordering::SeqCst);
        latencies.push(latency);
    }
    swapping_done.store(true, Ordering::SeqCst);
    let floor = publisher.await.expect("publisher");
    let total = floor.len();
    harness::eventually(
        Duration::from_secs(60),
        &format!("{total} results"),
        || async { (collector.len() >= total).then_some(()) },
    )
    .await;
    svc.stop().await;
    let results = collector.finish(&ch, &n.seen()).await;

    // Every message handled and acked exactly once, by a version at least as new as the one
    // already serving when it was published.
    let mut by_index: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for s in &results {
        let i: usize = s
            .body
            .parse()
            .unwrap_or_else(|_| panic!("unexpected body {:?}", s.body));
        by_index.entry(i).or_default().push(s.version);
    }
    let missing: Vec<usize> = (0..total).filter(|i| !by_index.contains_key(i)).collect();
    let twice: Vec<(&usize, &Vec<usize>)> = by_index.iter().filter(|(_, v)| v.len() > 1).collect();
    assert!(missing.is_empty(), "lost: {missing:?}");
    assert!(twice.is_empty(), "handled more than once: {twice:?}");
    assert_eq!(results.len(), total);
    for (i, versions) in &by_index {
        assert!(*i < total, "result for a message never published: {i}");
        assert!(
            versions[0] >= floor[*i],
            "message {i} handled by v{} after v{} was serving",
            versions[0],
            floor[*i]
        );
    }
    let mut per_version = BTreeMap::new();
    for s in &results {
        *per_version.entry(s.version).or_insert(0usize) += 1;
    }
    for k in 0..=SWAPS {
        assert!(
            per_version.get(&k).is_some_and(|c| *c > 0),
            "v{k} handled nothing: {per_version:?}"
        );
    }
    assert_eq!(harness::depth(&ch, &n.q()).await, 0, "everything acked");
    assert_eq!(
        harness::depth(&ch, &format!("{}@failed", n.q())).await,
        0,
        "nothing failed"
    );
    assert_eq!(
        harness::depth(&ch, &format!("{}@retry.200ms", n.q())).await,
        0,
        "nothing retried"
    );

    let (min, median, max) = stats(latencies.clone());
    println!(
        "reload under load: {total} messages, {SWAPS} swaps (odd: in place, even: temp+rename); \
         per version {per_version:?}"
    );
    println!(
        "reload latency (file written -> first result of the new version): \
         min {min:?}, median {median:?}, max {max:?}; all: {latencies:?}"
    );
    n.cleanup(&[n.q()]).await;
}

#[tokio::test]
async fn bad_files_keep_the_running_version_and_editor_saves_work() {
    let (n, port, svc, plugin, _conn, ch) = start_hot("reload-bad").await;

    let refused = reloads(port, "failed").await;
    write_in_place(&plugin, b"this is not wasm at all");
    let refused = wait_refused(port, refused, "garbage").await;
    assert_eq!(probe(&ch, &n, "after-garbage").await, 0, "garbage keeps v0");

    write_via_rename(&plugin, &missing_export());
    let refused = wait_refused(port, refused, "a module without worker_handle").await;
    assert_eq!(
        probe(&ch, &n, "after-missing-export").await,
        0,
        "missing export keeps v0"
    );

    // Half a file, quiet for longer than the debounce: compiled, refused; the rest completes it.
    let v1 = versioned(&n.out(), 1);
    let (head, tail) = v1.split_at(v1.len() / 2);
    write_in_place(&plugin, head);
    let refused = wait_refused(port, refused, "a half-written file").await;
    assert_eq!(
        probe(&ch, &n, "after-half").await,
        0,
        "half a file keeps v0"
    );
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&plugin)
        .expect("reopen");
    f.write_all(tail).expect("write the rest");
    drop(f);
    probe_until(&ch, &n, 1, "completed").await;

    std::fs::remove_file(&plugin).expect("delete");
    let _ = wait_refused(port, refused, "a deleted file").await;
    assert_eq!(
        probe(&ch, &n, "after-delete").await,
        1,
        "deleting keeps the last version"
    );

    // Editor saves: temp + rename (most editors), rename away + write new (vim's default
    // backup), truncate + write in place.
    write_via_rename(&plugin, &versioned(&n.out(), 2));
    probe_until(&ch, &n, 2, "temp-rename").await;
    std::fs::rename(&plugin, plugin.with_extension("wasm~")).expect("backup rename");
    std::fs::write(&plugin, versioned(&n.out(), 3)).expect("write new");
    probe_until(&ch, &n, 3, "backup-then-write").await;
    let v4 = versioned(&n.out(), 4);
    write_in_place(&plugin, &v4);
    probe_until(&ch, &n, 4, "in-place").await;

    // The version that ran is stamped on failed messages.
    harness::publish(
        &ch,
        &n.master(),
        &n.key(),
        b"fail me",
        BasicProperties::default(),
    )
    .await;
    let parked = harness::eventually(Duration::from_secs(10), "the parked message", || async {
        harness::get(&ch, &format!("{}@failed", n.q())).await
    })
    .await;
    let headers: BTreeMap<String, String> =
        worker_host::headers::render_headers(parked.delivery.properties.headers().as_ref())
            .into_iter()
            .collect();
    assert_eq!(headers["worker-plugin"], "hot.wasm");
    assert_eq!(headers["worker-plugin-sha256"], sha256_hex(&v4));
    assert!(reloads(port, "ok").await >= 4, "v1..v4 counted as reloads");

    svc.stop().await;
    n.cleanup(&[n.q()]).await;
}

#[tokio::test]
async fn subscriptions_follow_worker_toml_without_a_restart() {
    let n = Names::new("reload-config");
    let (qa, qb, qc) = (n.q(), format!("{}.b", n.p), format!("{}.c", n.p));
    let only_a = format!("{}{}", topology_toml(&n), sub_toml(&n, &qa, "key", ""));
    let svc = Host::in_process(&only_a, &[("hot.wasm", &versioned(&n.out(), 0))]).await;
    let dir = svc.dir().to_path_buf();
    let (conn, ch) = harness::channel().await;
    harness::wait_consuming(&conn, &qa).await;

    // Added: B starts consuming.
    let with_b = |extra: &str| format!("{only_a}{}", sub_toml(&n, &qb, "keyb", extra));
    save_config(&dir, &with_b("prefetch = 32\nconcurrency = 4"));
    harness::wait_consuming(&conn, &qb).await;

    // Changed while a stream is in flight: B restarts with new prefetch, concurrency and retry
    // delays (its new retry queue shows the change applied); every message is handled once.
    let key_b = format!("{}.keyb.x", n.p);
    let total = 300usize;
    for i in 0..total / 2 {
        harness::publish(
            &ch,
            &n.master(),
            &key_b,
            format!("b{i}").as_bytes(),
            BasicProperties::default(),
        )
        .await;
    }
    save_config(
        &dir,
        &with_b("prefetch = 4\nconcurrency = 2\nretry_delays = [\"300ms\"]"),
    );
    for i in total / 2..total {
        harness::publish(
            &ch,
            &n.master(),
            &key_b,
            format!("b{i}").as_bytes(),
            BasicProperties::default(),
        )
        .await;
    }
    harness::eventually(Duration::from_secs(10), "B's new retry queue", || async {
        queue_exists(&conn, &format!("{qb}@retry.300ms"))
            .await
            .then_some(())
    })
    .await;
    let mut bodies = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while bodies.len() < total {
        match harness::get(&ch, &n.seen()).await {
            Some(msg) => bodies.push(String::from_utf8_lossy(&msg.delivery.data).into_owned()),
            None if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            None => panic!("only {} of B's {total} results after 30s", bodies.len()),
        }
    }
    let raw = bodies.len();
    bodies.sort();
    bodies.dedup();
    assert_eq!(bodies.len(), total, "every message of B handled");
    assert_eq!(raw, total, "no message of B handled twice");

    // Removed: B's consumer goes away; A keeps consuming.
    save_config(&dir, &only_a);
    harness::eventually(Duration::from_secs(10), "B without consumers", || async {
        (consumers(&conn, &qb).await == 0).then_some(())
    })
    .await;
    assert_eq!(consumers(&conn, &qa).await, 1);
    assert_eq!(probe(&ch, &n, "a-after-remove").await, 0);

    // Broken: A keeps running. Absence of change cannot be polled for, so give the watcher
    // ten debounce periods to (wrongly) act on it.
    let broken = format!(
        "{only_a}{}",
        sub_toml(&n, &qc, "keyc", "prefetch = \"lots\"")
    );
    save_config(&dir, &broken);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !queue_exists(&conn, &qc).await,
        "the broken config was not applied"
    );
    assert_eq!(consumers(&conn, &qa).await, 1);
    assert_eq!(probe(&ch, &n, "a-after-broken").await, 0);

    // Fixed: applied.
    save_config(&dir, &format!("{only_a}{}", sub_toml(&n, &qc, "keyc", "")));
    harness::wait_consuming(&conn, &qc).await;
    assert_eq!(consumers(&conn, &qa).await, 1, "A untouched by the reloads");

    svc.stop().await;
    n.cleanup(&[qa, qb, qc]).await;
}
