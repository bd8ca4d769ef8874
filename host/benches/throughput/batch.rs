//! (x) The consumer design proposed for target 1, measured against (a+): one thread owns the
//! AMQP socket (the host's own consume connection, `worker_host::wire`), takes every delivery a
//! read completes, runs each one's plugin call right there, and settles all that read brought
//! with one `multiple=true` ack. No I/O thread, no channel between parser and consumer, no task
//! per delivery, no ack task. (x0) is the same loop without the call: what the socket loop alone
//! costs.
//!
//! The connection is the host's (login, heartbeats, frames, assembly); the loop around it is a
//! bench's: no retry, no failed queue, no recovery.

use worker_host::plugin::{Answer, Input, Instances, Meta, Plugin, PublishPolicy, Runtime};
use worker_host::wire::Wire;
use worker_host::wire::consume::Consume;

use super::*;

/// The plugin each delivery is handed to, or none for (x0).
pub(super) type Call = Option<Arc<Plugin>>;

/// The ok WAT plugin of (b), loaded in this process as the service loads it. The plugin keeps
/// the engine (and its epoch ticker) alive; the runtime itself is not needed after the load.
pub(super) fn ok_plugin(cache: &Path) -> Arc<Plugin> {
    let runtime = Runtime::new(&setup::runtime_config(cache)).expect("plugin runtime");
    let wasm = wat::parse_str(OK_WAT).expect("ok WAT parses");
    runtime.load_bytes("ok.wasm", &wasm).expect("ok WAT loads")
}

/// The plugin's input for a delivery of `queue`, as (x) and (y) hand it to the ok WAT plugin:
/// first attempt, no config, no grants.
pub(super) fn input(
    queue: &str,
    routing_key: String,
    redelivered: bool,
    message_id: Option<String>,
    body: Vec<u8>,
) -> Arc<Input> {
    Arc::new(Input {
        body: body.into(),
        meta: Meta {
            routing_key,
            queue: queue.to_string(),
            attempt: 1,
            redelivered,
            message_id,
            ..Meta::default()
        },
        config_json: Arc::from("{}"),
        publish: Arc::new(PublishPolicy::default()),
        granted: Arc::default(),
    })
}

/// (x) / (x0): msgs/s from first delivery to last ack of a pre-filled queue, and the CPU per
/// message of this process and the broker in that window.
pub(super) async fn batch(n: u64, body: &[u8], call: Call) -> (f64, CpuUse) {
    let queue = unique("bench-batch");
    let conn = connect().await;
    let ch = conn.create_channel().await.expect("channel");
    declare(&ch, &queue).await;
    fill(&ch, &queue, n, body).await;
    let q = queue.clone();
    let out = tokio::task::spawn_blocking(move || consume(&q, n, call))
        .await
        .expect("batch consumer thread");
    let _ = ch
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await;
    let _ = conn.close(200, "bye".into()).await;
    out
}

/// The consumer loop: read, call, ack; until `n` deliveries are settled.
fn consume(queue: &str, n: u64, call: Call) -> (f64, CpuUse) {
    let wire = Wire::open(URL, "bench-batch", Duration::from_secs(10)).expect("login");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut c = Consume::start(wire, queue, PREFETCH, deadline).expect("basic.consume");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let limits = setup::limits(Instances::Fresh);
    let (mut started, mut mark) = (None, None);
    let (mut taken, mut ready) = (0u64, Vec::new());
    while taken < n {
        c.next(None, &mut ready).expect("deliveries");
        let Some(last) = ready.last().map(|d| d.tag) else {
            continue;
        };
        started.get_or_insert_with(Instant::now);
        mark.get_or_insert_with(|| CpuMark::now(std::process::id()));
        if let Some(plugin) = &call {
            rt.block_on(async {
                for d in ready.drain(..) {
                    let id = d.properties.message_id().as_ref().map(|m| m.to_string());
                    let input = input(queue, d.routing_key, d.redelivered, id, d.body);
                    let inv = plugin.handle(input, &limits).await;
                    assert!(matches!(inv.answer, Ok(Answer::Ok)), "{:?}", inv.answer);
                    taken += 1;
                }
            });
        } else {
            taken += ready.len() as u64;
            ready.clear();
        }
        c.ack(last, true).expect("ack");
    }
    let secs = started.map_or(f64::NAN, |s| s.elapsed().as_secs_f64());
    let used = mark.expect("at least one delivery").per_message(n);
    // Deliveries still in flight go back to the queue, which is deleted next.
    c.close("bye").expect("close");
    (n as f64 / secs, used)
}
