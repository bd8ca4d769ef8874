//! (z) The host's own consume connection as the consumer would use it for calls that are not
//! run in place: the feed's thread (`worker_host::wire::feed`) hands the deliveries of each
//! read to an async task, one wake-up per read; the task calls the ok WAT plugin for each and
//! acks the batch with one `multiple=true` ack through the feed. Beside (x), which calls in
//! place on the socket's thread, it shows what handing deliveries over to async code costs.

use worker_host::plugin::{Answer, Instances, Plugin};
use worker_host::wire::Wire;
use worker_host::wire::consume::Consume;
use worker_host::wire::feed::Feed;

use super::batch::input;
use super::*;

/// msgs/s from first delivery to last ack of a pre-filled queue, and the CPU per message of
/// this process and the broker in that window.
pub(super) async fn feed(n: u64, body: &[u8], plugin: Arc<Plugin>) -> (f64, CpuUse) {
    let queue = unique("bench-feed");
    let conn = connect().await;
    let ch = conn.create_channel().await.expect("channel");
    declare(&ch, &queue).await;
    fill(&ch, &queue, n, body).await;
    let q = queue.clone();
    let consume = tokio::task::spawn_blocking(move || {
        let wire = Wire::open(URL, "bench-feed", Duration::from_secs(10)).expect("login");
        let deadline = Instant::now() + Duration::from_secs(10);
        Consume::start(wire, &q, PREFETCH, deadline).expect("basic.consume")
    })
    .await
    .expect("login thread");
    let mut feed = Feed::start(consume, "bench-feed", None).expect("consume thread");
    let settler = feed.settler();
    let limits = setup::limits(Instances::Fresh);
    let (mut started, mut mark, mut taken) = (None, None, 0u64);
    while taken < n {
        let batch = feed
            .next()
            .await
            .expect("the feed goes on")
            .expect("deliveries");
        let Some(last) = batch.last().map(|d| d.tag) else {
            continue;
        };
        started.get_or_insert_with(Instant::now);
        mark.get_or_insert_with(|| CpuMark::now(std::process::id()));
        for d in batch {
            let id = d.properties.message_id().as_ref().map(|m| m.to_string());
            let input = input(&queue, d.routing_key, d.redelivered, id, d.body);
            let inv = plugin.handle(input, &limits).await;
            assert!(matches!(inv.answer, Ok(Answer::Ok)), "{:?}", inv.answer);
            taken += 1;
        }
        settler.ack(last, true);
    }
    let secs = started.map_or(f64::NAN, |s| s.elapsed().as_secs_f64());
    let used = mark.expect("at least one delivery").per_message(n);
    feed.close().await;
    let _ = ch
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await;
    let _ = conn.close(200, "bye".into()).await;
    (n as f64 / secs, used)
}
