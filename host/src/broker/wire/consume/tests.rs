//! Consuming on the host's own connection: against the fake broker of `wire::tests` (frames
//! split across reads, a broker talking nonsense, its channel close and consumer cancel) and,
//! with the `server-tests` feature, against the RabbitMQ of this machine.

use std::time::Instant;

use amq_protocol::frame::{AMQPContentHeader, AMQPFrame};
use amq_protocol::protocol::{
    AMQPClass, BasicProperties, UNDECODABLE_PROPERTIES_HEADER, basic, channel,
};
use amq_protocol::types::AMQPValue;

use super::super::tests::{Fake, TIMEOUT, fake};
use super::{Consume, Delivery};
use crate::broker::wire::{Wire, WireError};

impl Fake {
    /// Answers channel.open, basic.qos and basic.consume as RabbitMQ does.
    pub(in crate::broker::wire) fn serve_consume(&mut self) {
        for _ in 0..3 {
            let answer = match self.next() {
                Some(AMQPFrame::Method(1, AMQPClass::Channel(channel::AMQPMethod::Open(_)))) => {
                    AMQPClass::Channel(channel::AMQPMethod::OpenOk(channel::OpenOk {}))
                }
                Some(AMQPFrame::Method(1, AMQPClass::Basic(basic::AMQPMethod::Qos(q)))) => {
                    assert_eq!(q.prefetch_count, 50);
                    AMQPClass::Basic(basic::AMQPMethod::QosOk(basic::QosOk {}))
                }
                Some(AMQPFrame::Method(1, AMQPClass::Basic(basic::AMQPMethod::Consume(c)))) => {
                    assert_eq!(c.queue.as_str(), "q");
                    AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(basic::ConsumeOk {
                        consumer_tag: "ctag-1".into(),
                    }))
                }
                other => panic!("unexpected from the client: {other:?}"),
            };
            self.send(AMQPFrame::Method(1, answer));
        }
    }

    pub(in crate::broker::wire) fn deliver(&mut self, tag: u64) {
        self.send(AMQPFrame::Method(
            1,
            AMQPClass::Basic(basic::AMQPMethod::Deliver(basic::Deliver {
                consumer_tag: "ctag-1".into(),
                delivery_tag: tag,
                redelivered: tag == 2,
                exchange: "ex".into(),
                routing_key: format!("key.{tag}").as_str().into(),
            })),
        ));
    }

    pub(in crate::broker::wire) fn header(&mut self, size: u64, properties: BasicProperties) {
        self.send(AMQPFrame::Header(
            1,
            AMQPContentHeader {
                class_id: 60,
                body_size: size,
                properties,
            },
        ));
    }

    /// Waits for the client's next frame (how a test knows the client read what came before).
    pub(in crate::broker::wire) fn heard(&mut self) -> AMQPFrame {
        self.next().expect("a frame from the client")
    }
}

pub(in crate::broker::wire) fn start(url: &str) -> Consume {
    let wire = Wire::open(url, "t", TIMEOUT).expect("login");
    Consume::start(wire, "q", 50, Instant::now() + TIMEOUT).expect("consume")
}

/// Deliveries until `n` are ready.
fn take(consume: &mut Consume, n: usize) -> Vec<Delivery> {
    let until = Instant::now() + TIMEOUT;
    let mut ready = Vec::new();
    while ready.len() < n {
        consume.next(Some(until), &mut ready).expect("deliveries");
        assert!(Instant::now() < until, "{} of {n} deliveries", ready.len());
    }
    ready
}

#[test]
fn deliveries_are_assembled_across_frames_and_reads() {
    let (url, broker) = fake(|mut f| {
        f.login(0);
        f.serve_consume();
        // One with an empty body (no body frame), one in two body frames sent apart.
        f.deliver(1);
        f.header(0, BasicProperties::default().with_message_id("m-1".into()));
        f.deliver(2);
        f.header(10, BasicProperties::default());
        f.send(AMQPFrame::Body(1, b"0123".to_vec()));
        assert!(matches!(f.heard(), AMQPFrame::Heartbeat));
        f.send(AMQPFrame::Body(1, b"456789".to_vec()));
        let ack = f.heard();
        assert!(
            matches!(
                ack,
                AMQPFrame::Method(
                    1,
                    AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
                        delivery_tag: 2,
                        multiple: true
                    }))
                )
            ),
            "{ack:?}"
        );
    });
    let mut consume = start(&url);
    assert_eq!(consume.consumer_tag(), "ctag-1");
    let first = take(&mut consume, 1);
    assert_eq!(first[0].tag, 1);
    assert_eq!(
        first[0]
            .properties
            .message_id()
            .as_ref()
            .map(|m| m.as_str()),
        Some("m-1")
    );
    assert!(first[0].body.is_empty());
    // The second's first body frame came with the first delivery or after it: either way it
    // is not whole until the client has been heard from.
    consume
        .wire
        .send(&[AMQPFrame::Heartbeat])
        .expect("heard by the fake");
    let second = take(&mut consume, 1);
    let d = &second[0];
    assert_eq!((d.tag, d.redelivered), (2, true));
    assert_eq!(
        (d.exchange.as_str(), d.routing_key.as_str()),
        ("ex", "key.2")
    );
    assert_eq!(d.body, b"0123456789");
    consume.ack(2, true).expect("ack");
    broker.join().expect("fake broker");
}

/// A header whose properties cannot be decoded (a header name that is not UTF-8) still makes
/// a delivery, with the marker header the consumer's poison check reads, and the connection
/// goes on.
#[test]
fn an_undecodable_header_still_makes_a_delivery() {
    use std::io::Write as _;
    let (url, broker) = fake(|mut f| {
        f.login(0);
        f.serve_consume();
        f.deliver(1);
        // class 60, weight 0, body size 2, flags: headers; a table of one entry whose name is
        // the byte 0xFF, an empty long string.
        let mut payload = vec![0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0x20, 0];
        let table = [1u8, 0xFF, b'S', 0, 0, 0, 0];
        payload.extend((table.len() as u32).to_be_bytes());
        payload.extend(table);
        let mut frame = vec![2u8, 0, 1];
        frame.extend((payload.len() as u32).to_be_bytes());
        frame.extend(payload);
        frame.push(0xCE);
        f.stream.write_all(&frame).expect("raw header frame");
        f.send(AMQPFrame::Body(1, b"hi".to_vec()));
        f.deliver(3);
        f.header(1, BasicProperties::default());
        f.send(AMQPFrame::Body(1, b"!".to_vec()));
        while f.next().is_some() {}
    });
    let mut consume = start(&url);
    let got = take(&mut consume, 2);
    let marker = |d: &Delivery| {
        let headers = d.properties.headers().clone().unwrap_or_default();
        match headers.inner().get(UNDECODABLE_PROPERTIES_HEADER) {
            Some(AMQPValue::LongString(why)) => Some(why.to_string()),
            Some(other) => panic!("the marker is a long string, not {other:?}"),
            None => None,
        }
    };
    let problem = marker(&got[0]).expect("marked undecodable");
    assert!(problem.contains("UTF-8"), "{problem}");
    assert_eq!(got[0].body, b"hi");
    assert_eq!((got[1].tag, got[1].body.as_slice()), (3, &b"!"[..]));
    assert!(marker(&got[1]).is_none());
    drop(consume);
    broker.join().expect("fake broker");
}

#[test]
fn a_body_without_its_header_is_the_broker_talking_nonsense() {
    let (url, broker) = fake(|mut f| {
        f.login(0);
        f.serve_consume();
        f.send(AMQPFrame::Body(1, b"stray".to_vec()));
        while f.next().is_some() {}
    });
    let mut consume = start(&url);
    let err = consume
        .next(Some(Instant::now() + TIMEOUT), &mut Vec::new())
        .expect_err("nonsense");
    assert!(matches!(err, WireError::Frame(_)), "{err}");
    drop(consume);
    broker.join().expect("fake broker");
}

#[test]
fn the_broker_closing_the_channel_or_cancelling_ends_the_consume() {
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
        let answer = f.heard();
        assert!(
            matches!(
                answer,
                AMQPFrame::Method(1, AMQPClass::Channel(channel::AMQPMethod::CloseOk(_)))
            ),
            "{answer:?}"
        );
    });
    let mut consume = start(&url);
    let err = consume
        .next(Some(Instant::now() + TIMEOUT), &mut Vec::new())
        .expect_err("closed");
    let WireError::ChannelClosed { code, text } = &err else {
        panic!("{err}")
    };
    assert_eq!(*code, 406);
    assert!(text.contains("unknown delivery tag"), "{text}");
    broker.join().expect("fake broker");

    let (url, broker) = fake(|mut f| {
        f.login(0);
        f.serve_consume();
        f.send(AMQPFrame::Method(
            1,
            AMQPClass::Basic(basic::AMQPMethod::Cancel(basic::Cancel {
                consumer_tag: "ctag-1".into(),
                nowait: true,
            })),
        ));
        while f.next().is_some() {}
    });
    let mut consume = start(&url);
    let err = consume
        .next(Some(Instant::now() + TIMEOUT), &mut Vec::new())
        .expect_err("cancelled");
    assert!(matches!(err, WireError::Cancelled), "{err}");
    drop(consume);
    broker.join().expect("fake broker");
}

#[cfg(feature = "server-tests")]
pub(in crate::broker::wire) mod rabbitmq {
    //! The RabbitMQ of this machine (start it with `rabbitmq-server -detached`); queues are
    //! declared and checked through lapin.

    use lapin::options::{BasicPublishOptions, QueueDeclareOptions, QueueDeleteOptions};
    use lapin::types::{AMQPValue, FieldTable};
    use lapin::{Connection, ConnectionProperties};

    use super::*;
    use crate::testing::unique;

    pub(in crate::broker::wire) const URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

    pub(in crate::broker::wire) async fn lapin_channel() -> (Connection, lapin::Channel) {
        let conn = Connection::connect(URL, ConnectionProperties::default())
            .await
            .expect("RabbitMQ not reachable; start it with: rabbitmq-server -detached");
        let ch = conn.create_channel().await.expect("channel");
        (conn, ch)
    }

    /// Declares `queue` (or checks it, `passive`); how many messages it holds.
    pub(in crate::broker::wire) async fn declare(
        ch: &lapin::Channel,
        queue: &str,
        passive: bool,
    ) -> u32 {
        let options = QueueDeclareOptions {
            passive,
            ..Default::default()
        };
        ch.queue_declare(queue.into(), options, FieldTable::default())
            .await
            .expect("queue.declare")
            .message_count()
    }

    /// An empty body, headers and a message id, a body spanning several frames; acked with one
    /// `multiple` ack, one rejected: the queue is empty after.
    #[tokio::test]
    async fn consumes_acks_and_rejects_a_real_queue() {
        let (conn, ch) = lapin_channel().await;
        let queue = unique("wire-consume");
        declare(&ch, &queue, false).await;
        let big = vec![b'x'; 300 * 1024];
        let mut headers = FieldTable::default();
        headers.insert("h".into(), AMQPValue::LongString("v".into()));
        let props = [
            lapin::BasicProperties::default().with_message_id("empty".into()),
            lapin::BasicProperties::default().with_headers(headers),
            lapin::BasicProperties::default(),
            lapin::BasicProperties::default(),
        ];
        let bodies: [&[u8]; 4] = [b"", b"small", &big, b"rejected"];
        for (body, p) in bodies.iter().zip(props) {
            ch.basic_publish(
                "".into(),
                queue.as_str().into(),
                BasicPublishOptions::default(),
                body,
                p,
            )
            .await
            .expect("publish")
            .await
            .expect("published");
        }
        let q = queue.clone();
        let got = tokio::task::spawn_blocking(move || {
            let wire = Wire::open(URL, "wire-test", TIMEOUT).expect("login");
            let mut consume =
                Consume::start(wire, &q, 50, Instant::now() + TIMEOUT).expect("consume");
            let got = take(&mut consume, 4);
            consume.ack(got[2].tag, true).expect("ack");
            consume.reject(got[3].tag, false).expect("reject");
            consume.close("done").expect("close");
            got
        })
        .await
        .expect("consumer thread");
        assert_eq!(
            got[0].properties.message_id().as_ref().map(|m| m.as_str()),
            Some("empty")
        );
        assert!(got[0].body.is_empty());
        let h = got[1].properties.headers().as_ref().expect("headers");
        assert!(h.inner().contains_key("h"), "{h:?}");
        assert_eq!(got[1].body, b"small");
        assert_eq!(got[2].body.len(), big.len());
        assert_eq!(got[2].routing_key, queue);
        assert_eq!(declare(&ch, &queue, true).await, 0, "acked and rejected");
        let _ = ch
            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
            .await;
        let _ = conn.close(200, "bye".into()).await;
    }

    #[test]
    fn consuming_a_missing_queue_is_the_broker_s_404() {
        let wire = Wire::open(URL, "wire-test", TIMEOUT).expect("login");
        let queue = unique("wire-missing");
        let err = Consume::start(wire, &queue, 50, Instant::now() + TIMEOUT)
            .err()
            .expect("no such queue");
        let WireError::ChannelClosed { code, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(*code, 404, "{err}");
    }

    /// Deleting the queue cancels the consumer.
    #[tokio::test]
    async fn a_deleted_queue_cancels_the_consume() {
        let (conn, ch) = lapin_channel().await;
        let queue = unique("wire-cancel");
        declare(&ch, &queue, false).await;
        let q = queue.clone();
        let consumer = tokio::task::spawn_blocking(move || {
            let wire = Wire::open(URL, "wire-test", TIMEOUT).expect("login");
            let mut consume =
                Consume::start(wire, &q, 50, Instant::now() + TIMEOUT).expect("consume");
            consume.next(Some(Instant::now() + TIMEOUT), &mut Vec::new())
        });
        // Deleted once the consumer is there: RabbitMQ counts it.
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let state = ch
                .queue_declare(
                    queue.as_str().into(),
                    QueueDeclareOptions {
                        passive: true,
                        ..Default::default()
                    },
                    FieldTable::default(),
                )
                .await
                .expect("queue.declare");
            if state.consumer_count() > 0 {
                break;
            }
            assert!(Instant::now() < deadline, "the consumer never started");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
            .await
            .expect("queue.delete");
        let end = consumer.await.expect("consumer thread");
        assert!(matches!(end, Err(WireError::Cancelled)), "{end:?}");
        let _ = conn.close(200, "bye".into()).await;
    }
}
