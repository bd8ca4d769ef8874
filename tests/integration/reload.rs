//! Hot reload through the service: plugin swaps under a stream of messages (each result
//! attributed to the version that handled it), bad and half-written files, editor-style saves,
//! and subscriptions following edits of worker.toml.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lapin::BasicProperties;
use lapin::options::{BasicAckOptions, BasicConsumeOptions};
use lapin::types::FieldTable;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{self, Service};

/// One test's private topology, named from a unique prefix.
struct Names {
    p: String,
}

impl Names {
    fn new(test: &str) -> Names {
        Names {
            p: common::unique(test),
        }
    }
    fn q(&self) -> String {
        format!("{}.q", self.p)
    }
    fn master(&self) -> String {
        format!("{}.master", self.p)
    }
    fn out(&self) -> String {
        format!("{}.out", self.p)
    }
    fn seen(&self) -> String {
        format!("{}.seen", self.p)
    }
    fn key(&self) -> String {
        format!("{}.key.x", self.p)
    }
    /// Exchanges, the out exchange (topic) and the `seen` queue collecting every result.
    fn topology_toml(&self) -> String {
        format!(
            "[broker]\nurl = \"{url}\"\n\n\
             [exchanges]\nmaster = \"{p}.master\"\nretry = \"{p}.retry\"\nfailed = \"{p}.failed\"\n\n\
             [[exchange]]\nname = \"{p}.out\"\ntype = \"topic\"\n\n\
             [[queue]]\nname = \"{p}.seen\"\nbindings = [{{ exchange = \"{p}.out\", key = \"#\" }}]\n\n",
            url = common::broker_url(),
            p = self.p
        )
    }
    /// A subscription on `queue` running `hot.wasm`, bound to `<p>.<binding>.*`; retries wait
    /// 200ms unless `extra` says otherwise.
    fn sub_toml(&self, queue: &str, binding: &str, extra: &str) -> String {
        let delays = if extra.contains("retry_delays") {
            ""
        } else {
            "retry_delays = [\"200ms\"]\n"
        };
        format!(
            "[[subscription]]\nqueue = \"{queue}\"\nplugin = \"hot.wasm\"\nbindings = [\"{p}.{binding}.*\"]\n\
             publish = [\"{p}.out\"]\n{delays}{extra}\n\n",
            p = self.p
        )
    }
    fn queues_of(&self, queue: &str) -> Vec<String> {
        vec![
            queue.to_string(),
            format!("{queue}@failed"),
            format!("{queue}@retry.200ms"),
            format!("{queue}@retry.300ms"),
        ]
    }
    async fn cleanup(&self, queues: &[String]) {
        let mut all = vec![self.seen()];
        for q in queues {
            all.extend(self.queues_of(q));
        }
        let exchanges = ["master", "retry", "failed", "out"]
            .iter()
            .map(|e| format!("{}.{e}", self.p))
            .collect::<Vec<_>>();
        common::cleanup(&all, &exchanges).await;
    }
}

/// Version `v` of the test plugin: publishes the body to `out` with routing key `v<v>` and
/// answers ok; a body starting with `f` answers fail instead (to see the version stamped on
/// parked messages). Versions differ only in a data segment, like real rebuilds do.
fn versioned(out: &str, v: usize) -> Vec<u8> {
    let key = format!("v{v}");
    let wat = format!(
        r#"(module
  (import "worker_v1" "body_read" (func $body_read (param i32 i32) (result i32)))
  (import "worker_v1" "set_reason" (func $set_reason (param i32 i32)))
  (import "worker_v1" "publish" (func $publish (param i32 i32 i32 i32 i32 i32 i64) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{out}")
  (data (i32.const 256) "{key}")
  (data (i32.const 512) "publish refused")
  (data (i32.const 544) "failed on purpose")
  (func (export "worker_abi_v1"))
  (func (export "worker_handle") (result i32)
    (local $len i32)
    (local.set $len (call $body_read (i32.const 1024) (i32.const 4096)))
    (if (i32.eq (i32.load8_u (i32.const 1024)) (i32.const 102))
      (then (call $set_reason (i32.const 544) (i32.const 17)) (return (i32.const 2))))
    (if (i32.ne (call $publish (i32.const 0) (i32.const {ol}) (i32.const 256) (i32.const {kl})
                               (i32.const 1024) (local.get $len) (i64.const 0))
                (i32.const 0))
      (then (call $set_reason (i32.const 512) (i32.const 15)) (return (i32.const 2))))
    (i32.const 0)))"#,
        ol = out.len(),
        kl = key.len()
    );
    wat::parse_str(wat).expect("versioned plugin parses")
}

/// A valid module that lacks `worker_handle`.
fn missing_export() -> Vec<u8> {
    wat::parse_str(r#"(module (memory (export "memory") 1) (func (export "worker_abi_v1")))"#)
        .expect("parses")
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Replaces the file's contents in place (truncate + write, same inode), like `cp` or an editor
/// with `backupcopy=yes`.
fn write_in_place(path: &Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .create(true)
        .open(path)
        .expect("open plugin");
    f.write_all(bytes).expect("write plugin");
    f.sync_all().expect("sync");
}

/// Writes a temp file next to `path` and renames it over `path`, like most editors and
/// deploy tools.
fn write_via_rename(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("wasm.tmp");
    std::fs::write(&tmp, bytes).expect("write temp");
    std::fs::rename(&tmp, path).expect("rename over");
}

/// One result the plugin published: its version key, its body, when it arrived.
#[derive(Debug, Clone)]
struct Seen {
    version: usize,
    body: String,
    at: Instant,
}

/// Consumes the `seen` queue as results arrive, recording each after its ack went out (so a
/// message requeued by closing the channel is recorded once, by `finish`).
struct Collector {
    ch: lapin::Channel,
    records: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Collector {
    async fn start(conn: &lapin::Connection, queue: &str) -> Collector {
        let ch = conn.create_channel().await.expect("collector channel");
        let mut deliveries = ch
            .basic_consume(
                queue.into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("consume seen");
        let records = Arc::new(Mutex::new(Vec::new()));
        let sink = records.clone();
        let task = tokio::spawn(async move {
            while let Some(Ok(d)) = deliveries.next().await {
                let at = Instant::now();
                if d.acker.ack(BasicAckOptions::default()).await.is_err() {
                    break;
                }
                sink.lock().unwrap().push(Seen {
                    version: parse_version(d.routing_key.as_str()),
                    body: String::from_utf8_lossy(&d.data).into_owned(),
                    at,
                });
            }
        });
        Collector { ch, records, task }
    }

    fn len(&self) -> usize {
        self.records.lock().unwrap().len()
    }

    /// When the first result of `version` arrived.
    fn first_of(&self, version: usize) -> Option<Instant> {
        self.records
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.version == version)
            .map(|s| s.at)
            .min()
    }

    /// Stops consuming and returns every result, including what is left in the queue.
    async fn finish(self, ch: &lapin::Channel, queue: &str) -> Vec<Seen> {
        let _ = self.ch.close(200, "done".into()).await;
        let _ = self.task.await;
        let mut all = self.records.lock().unwrap().clone();
        while let Some(msg) = common::get(ch, queue).await {
            all.push(Seen {
                version: parse_version(msg.delivery.routing_key.as_str()),
                body: String::from_utf8_lossy(&msg.delivery.data).into_owned(),
                at: Instant::now(),
            });
        }
        all
    }
}

fn parse_version(key: &str) -> usize {
    key.strip_prefix('v')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected result key {key:?}"))
}

/// Publishes `body` and waits for its result in `seen`; returns the version that handled it.
async fn probe(ch: &lapin::Channel, n: &Names, body: &str) -> usize {
    common::publish(
        ch,
        &n.master(),
        &n.key(),
        body.as_bytes(),
        BasicProperties::default(),
    )
    .await;
    let msg = common::eventually(
        Duration::from_secs(10),
        &format!("the result of {body}"),
        || async { common::get(ch, &n.seen()).await },
    )
    .await;
    assert_eq!(
        String::from_utf8_lossy(&msg.delivery.data),
        body,
        "results come back in order"
    );
    parse_version(msg.delivery.routing_key.as_str())
}

/// Probes until `version` answers; the last probes may still meet the old version.
async fn probe_until(ch: &lapin::Channel, n: &Names, version: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut i = 0;
    loop {
        i += 1;
        if probe(ch, n, &format!("{what}-{i}")).await == version {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "v{version} not serving 10s after {what}"
        );
    }
}

/// A free TCP port for the admin endpoint.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// `worker_plugin_reloads{result=...}` from the admin endpoint.
async fn reloads(port: u16, result: &str) -> u64 {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("admin endpoint");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .expect("request");
    let mut text = String::new();
    stream.read_to_string(&mut text).await.expect("response");
    let label = format!("result=\"{result}\"");
    text.lines()
        .find(|l| l.starts_with("worker_plugin_reloads") && l.contains(&label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .unwrap_or(0)
}

/// Waits until the service has refused one more reload than `before`.
async fn wait_refused(port: u16, before: u64, what: &str) -> u64 {
    common::eventually(
        Duration::from_secs(10),
        &format!("{what} refused"),
        || async {
            let now = reloads(port, "failed").await;
            (now > before).then_some(now)
        },
    )
    .await
}

fn stats(mut xs: Vec<Duration>) -> (Duration, Duration, Duration) {
    xs.sort();
    (xs[0], xs[xs.len() / 2], xs[xs.len() - 1])
}

#[tokio::test]
async fn plugin_swapped_ten_times_under_a_stream_of_2000_messages() {
    const MESSAGES: usize = 2000;
    const SWAPS: usize = 10;
    let n = Names::new("reload-stream");
    let toml = format!(
        "{}{}",
        n.topology_toml(),
        n.sub_toml(
            &n.q(),
            "key",
            "prefetch = 32\nconcurrency = 4\nmax_retries = 3"
        )
    );
    let svc = Service::start(&toml, &[("hot.wasm", &versioned(&n.out(), 0))]).await;
    let plugin = svc.dir.path().join("plugins/hot.wasm");
    let (conn, ch) = common::channel().await;
    common::wait_consuming(&conn, &n.q()).await;
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
            let (_conn, ch) = common::channel().await;
            let mut floor = Vec::new();
            let mut i = 0usize;
            while (i < MESSAGES || !done.load(Ordering::SeqCst)) && i < 20 * MESSAGES {
                floor.push(newest_seen.load(Ordering::SeqCst));
                common::publish(
                    &ch,
                    &master,
                    &key,
                    i.to_string().as_bytes(),
                    BasicProperties::default(),
                )
                .await;
                i += 1;
                published.store(i, Ordering::SeqCst);
                if i % 4 == 0 {
                    tokio::time::sleep(Duration::from_millis(4)).await;
                }
            }
            floor
        })
    };

    let mut latencies = Vec::new();
    for k in 1..=SWAPS {
        let segment = k * MESSAGES / (SWAPS + 1);
        common::eventually(
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
        let first = common::eventually(
            Duration::from_secs(10),
            &format!("v{k} serving"),
            || async { collector.first_of(k) },
        )
        .await;
        let latency = first.saturating_duration_since(written);
        assert!(latency < Duration::from_secs(5), "v{k} took {latency:?}");
        newest_seen.store(k, Ordering::SeqCst);
        latencies.push(latency);
    }
    swapping_done.store(true, Ordering::SeqCst);
    let floor = publisher.await.expect("publisher");
    let total = floor.len();
    common::eventually(
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
    assert_eq!(common::depth(&ch, &n.q()).await, 0, "everything acked");
    assert_eq!(
        common::depth(&ch, &format!("{}@failed", n.q())).await,
        0,
        "nothing failed"
    );
    assert_eq!(
        common::depth(&ch, &format!("{}@retry.200ms", n.q())).await,
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
    let n = Names::new("reload-bad");
    let port = free_port();
    let toml = format!(
        "{}[admin]\nlisten = \"127.0.0.1:{port}\"\n\n{}",
        n.topology_toml(),
        n.sub_toml(&n.q(), "key", "max_retries = 0")
    );
    let svc = Service::start(&toml, &[("hot.wasm", &versioned(&n.out(), 0))]).await;
    let plugin = svc.dir.path().join("plugins/hot.wasm");
    let (conn, ch) = common::channel().await;
    common::wait_consuming(&conn, &n.q()).await;
    assert_eq!(probe(&ch, &n, "start").await, 0);

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
    common::publish(
        &ch,
        &n.master(),
        &n.key(),
        b"fail me",
        BasicProperties::default(),
    )
    .await;
    let parked = common::eventually(Duration::from_secs(10), "the parked message", || async {
        common::get(&ch, &format!("{}@failed", n.q())).await
    })
    .await;
    let headers: BTreeMap<String, String> =
        worker_host::outcome::render_headers(parked.delivery.properties.headers().as_ref())
            .into_iter()
            .collect();
    assert_eq!(headers["worker-plugin"], "hot.wasm");
    assert_eq!(headers["worker-plugin-sha256"], sha256_hex(&v4));
    assert!(reloads(port, "ok").await >= 4, "v1..v4 counted as reloads");

    svc.stop().await;
    n.cleanup(&[n.q()]).await;
}

/// Consumers on `queue` now.
async fn consumers(conn: &lapin::Connection, queue: &str) -> u32 {
    let probe = conn.create_channel().await.expect("channel");
    let q = probe
        .queue_declare(
            queue.into(),
            lapin::options::QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("queue {queue} missing: {e}"));
    let _ = probe.close(200, "probe".into()).await;
    q.consumer_count()
}

async fn queue_exists(conn: &lapin::Connection, queue: &str) -> bool {
    let probe = conn.create_channel().await.expect("channel");
    let found = probe
        .queue_declare(
            queue.into(),
            lapin::options::QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .is_ok();
    let _ = probe.close(200, "probe".into()).await;
    found
}

/// Saves worker.toml the way editors do: a temp file renamed over it.
fn save_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("worker.toml");
    let tmp = dir.join(".worker.toml.swp");
    std::fs::write(&tmp, text).expect("write temp config");
    std::fs::rename(&tmp, &path).expect("rename config");
    path
}

#[tokio::test]
async fn subscriptions_follow_worker_toml_without_a_restart() {
    let n = Names::new("reload-config");
    let (qa, qb, qc) = (n.q(), format!("{}.b", n.p), format!("{}.c", n.p));
    let only_a = format!("{}{}", n.topology_toml(), n.sub_toml(&qa, "key", ""));
    let svc = Service::start(&only_a, &[("hot.wasm", &versioned(&n.out(), 0))]).await;
    let dir = svc.dir.path().to_path_buf();
    let (conn, ch) = common::channel().await;
    common::wait_consuming(&conn, &qa).await;

    // Added: B starts consuming.
    let with_b = |extra: &str| format!("{only_a}{}", n.sub_toml(&qb, "keyb", extra));
    save_config(&dir, &with_b("prefetch = 32\nconcurrency = 4"));
    common::wait_consuming(&conn, &qb).await;

    // Changed while a stream is in flight: B restarts with new prefetch, concurrency and retry
    // delays (its new retry queue shows the change applied); every message is handled once.
    let key_b = format!("{}.keyb.x", n.p);
    let total = 300usize;
    for i in 0..total / 2 {
        common::publish(
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
        common::publish(
            &ch,
            &n.master(),
            &key_b,
            format!("b{i}").as_bytes(),
            BasicProperties::default(),
        )
        .await;
    }
    common::eventually(Duration::from_secs(10), "B's new retry queue", || async {
        queue_exists(&conn, &format!("{qb}@retry.300ms"))
            .await
            .then_some(())
    })
    .await;
    let mut bodies = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while bodies.len() < total {
        match common::get(&ch, &n.seen()).await {
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
    common::eventually(Duration::from_secs(10), "B without consumers", || async {
        (consumers(&conn, &qb).await == 0).then_some(())
    })
    .await;
    assert_eq!(consumers(&conn, &qa).await, 1);
    assert_eq!(probe(&ch, &n, "a-after-remove").await, 0);

    // Broken: A keeps running. Absence of change cannot be polled for, so give the watcher
    // ten debounce periods to (wrongly) act on it.
    let broken = format!("{only_a}{}", n.sub_toml(&qc, "keyc", "prefetch = \"lots\""));
    save_config(&dir, &broken);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !queue_exists(&conn, &qc).await,
        "the broken config was not applied"
    );
    assert_eq!(consumers(&conn, &qa).await, 1);
    assert_eq!(probe(&ch, &n, "a-after-broken").await, 0);

    // Fixed: applied.
    save_config(&dir, &format!("{only_a}{}", n.sub_toml(&qc, "keyc", "")));
    common::wait_consuming(&conn, &qc).await;
    assert_eq!(consumers(&conn, &qa).await, 1, "A untouched by the reloads");

    svc.stop().await;
    n.cleanup(&[qa, qb, qc]).await;
}
