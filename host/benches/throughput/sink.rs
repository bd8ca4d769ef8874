//! (y) The batch consumer of (x), built on lapin instead of a socket of its own: lapin's I/O
//! thread hands each complete delivery to a `DeliverySink` (a hook in the vendored lapin), the
//! sink runs the ok WAT call right there, and settles what one read brought with one
//! `multiple=true` ack when lapin says the read is done. Against (x) it measures what is left of
//! lapin's cost once its hand-over to the consumer's task is gone.

use std::sync::{Mutex, OnceLock};

use lapin::DeliverySink;
use lapin::message::DeliveryResult;
use worker_host::plugin::{Answer, Instances, Plugin};

use super::*;

/// The calls' own runtime: lapin's I/O thread is not one of the bench's tokio threads. One for
/// the whole bench, since a runtime cannot be dropped where the last sink may go.
fn calls_runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    })
}

/// What the sink counts, and where it reports the end.
struct Tally {
    taken: u64,
    /// The highest delivery tag taken and not acked yet.
    last: Option<u64>,
    /// The highest tag acked: deliveries that came before the sink are handed to it on another
    /// thread, so tags can arrive out of order, and acking a tag twice closes the channel.
    acked: u64,
    started: Option<Instant>,
    mark: Option<CpuMark>,
    done: Option<tokio::sync::oneshot::Sender<(f64, CpuUse)>>,
}

struct Sink {
    n: u64,
    queue: String,
    plugin: Arc<Plugin>,
    channel: Channel,
    limits: worker_host::plugin::Limits,
    tally: Mutex<Tally>,
}

impl DeliverySink for Sink {
    fn deliver(&self, delivery: DeliveryResult) {
        let d = match delivery {
            Ok(Some(d)) => d,
            Ok(None) => return,
            Err(err) => {
                // The row ends without a figure rather than the bench waiting forever.
                eprintln!("(y): the consumer failed: {err}");
                let mut tally = self.tally.lock().expect("tally");
                if let Some(tx) = tally.done.take() {
                    let _ = tx.send(not_measured());
                }
                return;
            }
        };
        let mut tally = self.tally.lock().expect("tally");
        tally.started.get_or_insert_with(Instant::now);
        tally
            .mark
            .get_or_insert_with(|| CpuMark::now(std::process::id()));
        let input = batch::input(
            &self.queue,
            d.routing_key.to_string(),
            d.redelivered,
            d.properties.message_id().as_ref().map(|m| m.to_string()),
            d.data,
        );
        let inv = calls_runtime().block_on(self.plugin.handle(input, &self.limits));
        assert!(matches!(inv.answer, Ok(Answer::Ok)), "{:?}", inv.answer);
        tally.taken += 1;
        tally.last = Some(tally.last.map_or(d.delivery_tag, |l| l.max(d.delivery_tag)));
    }

    fn read_done(&self) {
        use futures_util::FutureExt as _;
        // The tally is not held while acking: lapin's channel locks come before it on the I/O
        // thread (`deliver` runs under them).
        let (ack, done) = {
            let mut guard = self.tally.lock().expect("tally");
            let tally = &mut *guard;
            let ack = tally.last.take().filter(|&last| last > tally.acked);
            if let Some(last) = ack {
                tally.acked = last;
            }
            let done = match (tally.started, tally.mark.as_ref()) {
                (Some(started), Some(mark)) if tally.taken >= self.n => {
                    tally.done.take().map(|tx| {
                        let secs = started.elapsed().as_secs_f64();
                        (tx, (self.n as f64 / secs, mark.per_message(self.n)))
                    })
                }
                _ => None,
            };
            (ack, done)
        };
        // The frame is queued when the future is first polled; lapin writes it when this read's
        // frames are handled, on this same thread.
        if let Some(last) = ack {
            let _ = self
                .channel
                .basic_ack(last, BasicAckOptions { multiple: true })
                .now_or_never();
        }
        if let Some((tx, out)) = done {
            let _ = tx.send(out);
        }
    }
}

fn not_measured() -> (f64, CpuUse) {
    let nan = CpuUse {
        consumer_us: f64::NAN,
        broker_us: f64::NAN,
    };
    (f64::NAN, nan)
}

/// (y): msgs/s from first delivery to last ack of a pre-filled queue, and the CPU per message
/// of this process and the broker in that window.
pub(super) async fn sink(n: u64, body: &[u8], plugin: Arc<Plugin>) -> (f64, CpuUse) {
    let queue = unique("bench-sink");
    let conn = connect().await;
    let ch = conn.create_channel().await.expect("channel");
    declare(&ch, &queue).await;
    fill(&ch, &queue, n, body).await;
    let consumer_conn = connect().await;
    let cch = consumer_conn.create_channel().await.expect("channel");
    cch.basic_qos(PREFETCH, BasicQosOptions::default())
        .await
        .expect("qos");
    let (tx, rx) = tokio::sync::oneshot::channel();
    let sink = Arc::new(Sink {
        n,
        queue: queue.clone(),
        plugin,
        channel: cch.clone(),
        limits: setup::limits(Instances::Fresh),
        tally: Mutex::new(Tally {
            taken: 0,
            last: None,
            acked: 0,
            started: None,
            mark: None,
            done: Some(tx),
        }),
    });
    let consumer = cch
        .basic_consume(
            queue.as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    // Deliveries that came before the sink are handed to it here, on a thread allowed to
    // block (its calls run on their own runtime).
    let handed = sink.clone();
    let _consumer = tokio::task::spawn_blocking(move || {
        consumer.set_sink(handed);
        consumer
    })
    .await
    .expect("set the sink");
    // Bounded: one run of 2026-12-06 took 8 deliveries and then lost its consumer's
    // connection, which this prototype did not report; the row then goes without that run.
    let out = match tokio::time::timeout(Duration::from_secs(60), rx).await {
        Ok(Ok(out)) => out,
        _ => {
            let taken = sink.tally.lock().expect("tally").taken;
            eprintln!("(y): not finished within 60 s ({taken} of {n} taken); no figure this run");
            not_measured()
        }
    };
    let _ = consumer_conn.close(200, "bye".into()).await;
    let _ = ch
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await;
    let _ = conn.close(200, "bye".into()).await;
    out
}
