//! The broker closing the host's connection while a batch of messages is in flight (prefetch
//! 50, 8 calls at once, on a SQL subscription with the outbox, so group commit has groups to
//! cut through): nothing is acked that was not settled, every message is handled, and none
//! has a second effect.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, State};
use serde_json::json;
use tokio::sync::watch;

use crate::capabilities::db::Kind;
use crate::capabilities::outbox::{
    Case, published_under_own_ids, reports_of_all, reports_while, with_id,
};
use crate::capabilities::support::Probe;
use crate::harness;
use crate::service::support::rabbitmqctl;

/// How long each message's call waits at the test server.
const PAUSE: Duration = Duration::from_millis(50);
const MESSAGES: usize = 200;
const CONCURRENCY: usize = 8;

/// The server each call asks for `/pause/<id>`: it records the id (the calls made), waits while
/// the gate is shut, then answers after [`PAUSE`].
#[derive(Clone)]
struct Pauses {
    calls: Arc<Mutex<Vec<String>>>,
    gate: Arc<watch::Sender<bool>>,
    /// Calls waiting at the shut gate now.
    held: Arc<AtomicUsize>,
}

impl Pauses {
    async fn serve() -> (Pauses, SocketAddr) {
        let pauses = Pauses {
            calls: Arc::default(),
            gate: Arc::new(watch::channel(true).0),
            held: Arc::default(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a test server");
        let addr = listener.local_addr().expect("local addr");
        let app = Router::new()
            .route("/pause/{id}", axum::routing::get(pause))
            .with_state(pauses.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (pauses, addr)
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().expect("calls").clone()
    }
}

async fn pause(State(p): State<Pauses>, Path(id): Path<String>) -> &'static str {
    p.calls.lock().expect("calls").push(id);
    let mut open = p.gate.subscribe();
    if !*open.borrow() {
        p.held.fetch_add(1, Ordering::SeqCst);
        let _ = open.wait_for(|open| *open).await;
        p.held.fetch_sub(1, Ordering::SeqCst);
    }
    tokio::time::sleep(PAUSE).await;
    "paused"
}

/// The pids of the broker connections whose client properties name `marker` (the host's
/// connections are named after its config file).
async fn connections_of(marker: &str) -> Vec<String> {
    let listed = rabbitmqctl(&["list_connections", "pid", "client_properties", "-q"]).await;
    let pids: Vec<String> = listed
        .lines()
        .filter(|l| l.contains(marker))
        .filter_map(|l| l.split('\t').next())
        .map(str::to_owned)
        .collect();
    assert!(
        !pids.is_empty(),
        "no connection named after {marker} in:\n{listed}"
    );
    pids
}

/// 200 messages; once 40 are reported, the gate shuts with 8 calls held at it (and up to 50
/// delivered, unacked), the broker closes the host's connections, and the gate opens. After
/// the host reconnects every message is reported under its outbox id, was called before it was
/// acked, and has its one row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_connection_in_the_middle_of_a_batch_acks_nothing_unsettled() {
    let (pauses, web) = Pauses::serve().await;
    let case = Case::new(Kind::Sqlite).await;
    let keys = format!(
        "allowed_hosts = [\"http://{web}\"]\nconcurrency = {CONCURRENCY}\nprefetch = 50\n\
         timeout = \"10s\"\nmax_retries = 3"
    );
    let mut probe = Probe::start(
        "batch-cut",
        &case.sub(&keys),
        case.state.path(),
        &case.tables(),
    )
    .await;
    let marker = probe.dir().to_string_lossy().into_owned();
    let pids = connections_of(&marker).await;
    let ids: Vec<String> = (0..MESSAGES).map(|i| format!("c-{i:03}")).collect();
    let burst = ids.iter().map(|id| {
        let mut script = case.script(id, "ok");
        let call = json!({"http": "GET", "url": format!("http://{web}/pause/{id}")});
        script["steps"]
            .as_array_mut()
            .expect("steps")
            .insert(0, call);
        script["on_error"] = json!("retry");
        (script, with_id(id))
    });
    let started = Instant::now();
    probe.send_all("ob", burst).await;

    let before = reports_while(&mut probe, "40 reports", |seen| seen.len() >= 40).await;
    pauses.gate.send_replace(false);
    harness::eventually(
        Duration::from_secs(10),
        "8 calls held at the gate",
        || async { (pauses.held.load(Ordering::SeqCst) == CONCURRENCY).then_some(()) },
    )
    .await;
    for pid in &pids {
        rabbitmqctl(&["close_connection", pid, "test: cut mid-batch"]).await;
    }
    pauses.gate.send_replace(true);
    println!(
        "cut {:?} after the burst, {} reports before",
        started.elapsed(),
        before.len()
    );

    let reported: BTreeSet<&String> = before.iter().map(|(id, _)| id).collect();
    let rest: Vec<String> = ids
        .iter()
        .filter(|id| !reported.contains(id))
        .cloned()
        .collect();
    let mut seen = before;
    seen.extend(reports_of_all(&mut probe, &rest).await);
    println!(
        "all {MESSAGES} reported {:?} after the burst",
        started.elapsed()
    );
    published_under_own_ids(&seen, &ids);
    let calls = pauses.calls();
    let called: BTreeSet<&String> = calls.iter().collect();
    let uncalled: Vec<_> = ids.iter().filter(|id| !called.contains(id)).collect();
    assert!(uncalled.is_empty(), "acked without a call: {uncalled:?}");
    println!("{} calls for {MESSAGES} messages", calls.len());
    assert_eq!(case.db.ids(&case.rows).await, ids, "every row once");

    let queue = format!("{}.ob", probe.n.p);
    let stopped = probe.shut_down().await;
    assert_eq!(
        stopped.depth(&queue).await,
        0,
        "{queue}: unacked after the drain"
    );
    assert_eq!(stopped.depth(&format!("{queue}@failed")).await, 0, "parked");
    stopped.cleanup().await;
    case.done().await;
}
