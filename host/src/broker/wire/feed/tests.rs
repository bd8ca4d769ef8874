//! The consume thread against the fake broker of `wire::tests` and, with the `server-tests`
//! feature, against the RabbitMQ of this machine.

use amq_protocol::frame::AMQPFrame;
use amq_protocol::protocol::{AMQPClass, BasicProperties, basic, channel, connection};

use super::super::consume::tests::start;
use super::super::tests::{TIMEOUT, fake};
use super::*;

/// Batches until `n` deliveries came.
async fn take(feed: &mut Feed, n: usize) -> Vec<Delivery> {
    let mut got = Vec::new();
    while got.len() < n {
        let batch = tokio::time::timeout(TIMEOUT, feed.next())
            .await
            .unwrap_or_else(|_| panic!("{} of {n} deliveries", got.len()))
            .expect("the feed goes on")
            .expect("deliveries");
        assert!(!batch.is_empty(), "an empty batch");
        got.extend(batch);
    }
    got
}

/// Frames other than heartbeats, as the fake broker hears them.
fn heard(f: &mut super::super::tests::Fake) -> AMQPFrame {
    loop {
        match f.heard() {
            AMQPFrame::Heartbeat => continue,
            frame => return frame,
        }
    }
}

/// The fake broker hears `method` on the consume channel next.
fn hears(f: &mut super::super::tests::Fake, method: &basic::AMQPMethod) {
    let frame = heard(f);
    assert!(
        matches!(&frame, AMQPFrame::Method(1, AMQPClass::Basic(m)) if m == method),
        "{frame:?}"
    );
}

/// The fake broker hears the connection close next, and answers it.
fn hears_the_close(f: &mut super::super::tests::Fake) {
    let close = heard(f);
    assert!(
        matches!(
            close,
            AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::Close(_)))
        ),
        "{close:?}"
    );
    f.method(AMQPClass::Connection(connection::AMQPMethod::CloseOk(
        connection::CloseOk {},
    )));
}

#[tokio::test]
async fn deliveries_come_in_batches_and_settles_go_out_in_order_then_a_stop_closes() {
    let (url, broker) = fake(|mut f| {
        f.login(0);
        f.serve_consume();
        for tag in 1..=3 {
            f.deliver(tag);
            f.header(0, BasicProperties::default());
        }
        let expected = [
            basic::AMQPMethod::Ack(basic::Ack {
                delivery_tag: 2,
                multiple: true,
            }),
            basic::AMQPMethod::Reject(basic::Reject {
                delivery_tag: 3,
                requeue: true,
            }),
        ];
        for method in expected {
            hears(&mut f, &method);
        }
        hears_the_close(&mut f);
    });
    let consume = tokio::task::spawn_blocking(move || start(&url))
        .await
        .expect("login");
    let mut feed = Feed::start(consume, "feed-test", None).expect("thread");
    let got = take(&mut feed, 3).await;
    assert_eq!(got.iter().map(|d| d.tag).collect::<Vec<_>>(), [1, 2, 3]);
    let settler = feed.settler();
    // From another task, as a handler settles.
    tokio::spawn(async move {
        settler.ack(2, true);
        settler.reject(3, true);
    })
    .await
    .expect("settling task");
    let settler = feed.settler();
    assert!(settler.is_open());
    tokio::time::timeout(TIMEOUT, feed.close())
        .await
        .expect("the thread ends");
    assert!(!settler.is_open());
    broker.join().expect("fake broker");
}

/// A cancel stops deliveries but not acks: a delivery already on its way still comes, and is
/// acked after the cancel-ok.
#[tokio::test]
async fn a_cancel_keeps_the_connection_for_acks() {
    let (url, broker) = fake(|mut f| {
        f.login(0);
        f.serve_consume();
        f.deliver(1);
        f.header(0, BasicProperties::default());
        let cancel = heard(&mut f);
        assert!(
            matches!(
                &cancel,
                AMQPFrame::Method(1, AMQPClass::Basic(basic::AMQPMethod::Cancel(c)))
                    if !c.nowait && !c.consumer_tag.as_str().is_empty()
            ),
            "{cancel:?}"
        );
        // Sent before the broker saw the cancel.
        f.deliver(2);
        f.header(0, BasicProperties::default());
        f.send(AMQPFrame::Method(
            1,
            AMQPClass::Basic(basic::AMQPMethod::CancelOk(basic::CancelOk {
                consumer_tag: "ctag".into(),
            })),
        ));
        let ack = basic::AMQPMethod::Ack(basic::Ack {
            delivery_tag: 2,
            multiple: true,
        });
        hears(&mut f, &ack);
        hears_the_close(&mut f);
    });
    let consume = tokio::task::spawn_blocking(move || start(&url))
        .await
        .expect("login");
    let mut feed = Feed::start(consume, "feed-cancel", None).expect("thread");
    assert_eq!(take(&mut feed, 1).await[0].tag, 1);
    let settler = feed.settler();
    settler.cancel();
    assert_eq!(take(&mut feed, 1).await[0].tag, 2);
    assert!(settler.is_open(), "the cancel-ok ends nothing");
    settler.ack(2, true);
    tokio::time::timeout(TIMEOUT, feed.close())
        .await
        .expect("the thread ends");
    broker.join().expect("fake broker");
}

#[tokio::test]
async fn the_broker_closing_the_channel_ends_the_feed_with_its_reason() {
    let (url, broker) = fake(|mut f| {
        f.login(0);
        f.serve_consume();
        f.send(AMQPFrame::Method(
            1,
            AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close {
                reply_code: 406,
                reply_text: "PRECONDITION_FAILED - unknown delivery tag 9".into(),
                class_id: 60,
                method_id: 80,
            })),
        ));
        let close_ok = heard(&mut f);
        assert!(
            matches!(
                close_ok,
                AMQPFrame::Method(1, AMQPClass::Channel(channel::AMQPMethod::CloseOk(_)))
            ),
            "{close_ok:?}"
        );
    });
    let consume = tokio::task::spawn_blocking(move || start(&url))
        .await
        .expect("login");
    let mut feed = Feed::start(consume, "feed-test", None).expect("thread");
    let end = tokio::time::timeout(TIMEOUT, feed.next())
        .await
        .expect("the feed ends");
    let Some(Err(WireError::ChannelClosed { code, text })) = end else {
        panic!("{end:?}")
    };
    assert_eq!(code, 406);
    assert!(text.contains("unknown delivery tag"), "{text}");
    assert!(feed.next().await.is_none(), "nothing after the end");
    assert!(!feed.settler().is_open());
    broker.join().expect("fake broker");
}

#[cfg(feature = "server-tests")]
mod rabbitmq {
    //! The RabbitMQ of this machine (start it with `rabbitmq-server -detached`).

    use lapin::options::{BasicPublishOptions, QueueDeleteOptions};

    use super::super::super::consume::tests::rabbitmq::{URL, declare, lapin_channel};
    use super::*;
    use crate::broker::wire::Wire;
    use crate::broker::wire::consume::Consume;
    use crate::testing::unique;

    /// 300 messages in, the first 200 acked with one `multiple` ack from a task, then a stop:
    /// the other 100 go back to the queue.
    #[tokio::test]
    async fn what_is_acked_leaves_the_queue_and_the_rest_comes_back_at_the_stop() {
        let (conn, ch) = lapin_channel().await;
        let queue = unique("wire-feed");
        declare(&ch, &queue, false).await;
        for i in 0..300u32 {
            ch.basic_publish(
                "".into(),
                queue.as_str().into(),
                BasicPublishOptions::default(),
                i.to_string().as_bytes(),
                lapin::BasicProperties::default(),
            )
            .await
            .expect("publish")
            .await
            .expect("published");
        }
        let q = queue.clone();
        let consume = tokio::task::spawn_blocking(move || {
            let wire = Wire::open(URL, "feed-test", TIMEOUT).expect("login");
            Consume::start(wire, &q, 1000, std::time::Instant::now() + TIMEOUT).expect("consume")
        })
        .await
        .expect("consumer thread");
        let mut feed = Feed::start(consume, "feed-test", None).expect("thread");
        let got = take(&mut feed, 300).await;
        let bodies: Vec<String> = got
            .iter()
            .map(|d| String::from_utf8_lossy(&d.body).into_owned())
            .collect();
        let expected: Vec<String> = (0..300).map(|i| i.to_string()).collect();
        assert_eq!(bodies, expected);
        let settler = feed.settler();
        let last = got[199].tag;
        tokio::spawn(async move { settler.ack(last, true) })
            .await
            .expect("settling task");
        tokio::time::timeout(TIMEOUT, feed.close())
            .await
            .expect("the thread ends");
        let deadline = std::time::Instant::now() + TIMEOUT;
        while declare(&ch, &queue, true).await != 100 {
            assert!(
                std::time::Instant::now() < deadline,
                "{} in the queue, not 100",
                declare(&ch, &queue, true).await
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let _ = ch
            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
            .await;
        let _ = conn.close(200, "bye".into()).await;
    }
}
