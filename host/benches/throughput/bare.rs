//! The bare lapin consumers the host is measured against: (a), (a') and (a+), run in this
//! process on a pre-filled queue.

use super::*;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Bare {
    /// (a): a task per delivery on the multi-thread runtime, each acking its own delivery.
    TaskPerDelivery,
    /// (a): the same loop on a current-thread runtime.
    CurrentThread,
    /// (a'): a task per delivery that republishes with a confirm, then acks.
    Republish,
    /// For reference only: no tasks, one `multiple=true` ack whenever the stream has nothing
    /// ready (or every half prefetch).
    BatchedAcks,
}

/// (a), (a') and (a+): a bare consumer of a pre-filled queue; msgs/s from first delivery to last
/// ack, and the CPU per message of this process and the broker in that window.
pub(super) async fn bare(n: u64, body: &[u8], kind: Bare) -> (f64, CpuUse) {
    use futures_util::FutureExt as _;
    let republish = kind == Bare::Republish;
    let queue = unique("bench-bare");
    let conn = connect().await;
    let ch = conn.create_channel().await.expect("channel");
    declare(&ch, &queue).await;
    let sink = format!("{queue}.sink");
    if republish {
        declare(&ch, &sink).await;
    }
    fill(&ch, &queue, n, body).await;
    let q = queue.clone();
    let s = sink.clone();
    let consume = async move {
        let conn = connect().await;
        let ch = conn.create_channel().await.expect("channel");
        ch.basic_qos(PREFETCH, BasicQosOptions::default())
            .await
            .expect("qos");
        let publisher = conn.create_channel().await.expect("channel");
        publisher
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirms");
        let mut consumer = ch
            .basic_consume(
                q.as_str().into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("consume");
        let done = Arc::new(AtomicU64::new(0));
        let all = Arc::new(tokio::sync::Notify::new());
        let mut started = None;
        let mut mark = None;
        let mut taken = 0;
        if kind == Bare::BatchedAcks {
            let (mut last, mut unacked) = (0u64, 0u16);
            while taken < n {
                let next = match consumer.next().now_or_never() {
                    Some(next) => next,
                    None => {
                        if unacked > 0 {
                            ch.basic_ack(last, BasicAckOptions { multiple: true })
                                .await
                                .expect("ack");
                            unacked = 0;
                        }
                        consumer.next().await
                    }
                };
                let Some(Ok(delivery)) = next else { break };
                started.get_or_insert_with(Instant::now);
                mark.get_or_insert_with(|| CpuMark::now(std::process::id()));
                taken += 1;
                last = delivery.delivery_tag;
                unacked += 1;
                if unacked >= PREFETCH / 2 {
                    ch.basic_ack(last, BasicAckOptions { multiple: true })
                        .await
                        .expect("ack");
                    unacked = 0;
                }
            }
            if unacked > 0 {
                ch.basic_ack(last, BasicAckOptions { multiple: true })
                    .await
                    .expect("ack");
            }
            done.store(n, Ordering::Release);
            all.notify_one();
        }
        while taken < n {
            let Some(Ok(delivery)) = consumer.next().await else {
                break;
            };
            started.get_or_insert_with(Instant::now);
            mark.get_or_insert_with(|| CpuMark::now(std::process::id()));
            taken += 1;
            let (done, all, publisher, s) =
                (done.clone(), all.clone(), publisher.clone(), s.clone());
            tokio::spawn(async move {
                if republish {
                    publisher
                        .basic_publish(
                            "".into(),
                            s.as_str().into(),
                            BasicPublishOptions::default(),
                            &delivery.data,
                            delivery.properties.clone(),
                        )
                        .await
                        .expect("publish")
                        .await
                        .expect("confirm");
                }
                delivery.ack(BasicAckOptions::default()).await.expect("ack");
                if done.fetch_add(1, Ordering::AcqRel) + 1 == n {
                    all.notify_one();
                }
            });
        }
        all.notified().await;
        let secs = started
            .map(|s| s.elapsed().as_secs_f64())
            .unwrap_or(f64::NAN);
        // Before the close: the connection's I/O thread is part of the consumer's CPU.
        let used = mark.map(|m| m.per_message(n));
        let _ = conn.close(200, "bye".into()).await;
        (n as f64 / secs, used.expect("at least one delivery"))
    };
    let rate = if kind == Bare::CurrentThread {
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(consume)
        })
        .join()
        .expect("bench thread")
    } else {
        tokio::spawn(consume).await.expect("bench task")
    };
    let _ = ch
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await;
    let _ = ch
        .queue_delete(sink.as_str().into(), QueueDeleteOptions::default())
        .await;
    let _ = conn.close(200, "bye".into()).await;
    rate
}
