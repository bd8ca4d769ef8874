//! Consuming one queue on a [`Wire`], the batch consumer's step 2: the channel, qos and
//! basic.consume; whole deliveries assembled from their method, header and body frames (the
//! patched decoder gives an undecodable header default properties and a marker header, so a
//! poisoned message arrives as a delivery, as on lapin); acks and rejects; and the broker's
//! channel close or consumer cancel reported as the end of the consume.

use std::time::Instant;

use amq_protocol::frame::AMQPFrame;
use amq_protocol::protocol::{AMQPClass, BasicProperties, basic, channel};

use super::{Waker, Wire, WireError, Woke, unexpected};

/// The one channel a consume connection opens.
const CHANNEL: u16 = 1;

pub use crate::broker::Delivery;

/// A delivery whose header or body frames are still to come.
struct Partial {
    delivery: Delivery,
    /// The body size its header announced, once the header came.
    size: Option<u64>,
}

/// A consumer on its own connection.
pub struct Consume {
    wire: Wire,
    consumer_tag: String,
    partial: Option<Partial>,
}

impl Consume {
    /// Opens the channel, sets the prefetch and starts consuming `queue`, before `deadline`.
    pub fn start(
        mut wire: Wire,
        queue: &str,
        prefetch: u16,
        deadline: Instant,
    ) -> Result<Consume, WireError> {
        if queue.len() > 255 {
            return Err(WireError::TooLong("queue name"));
        }
        let open = AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {}));
        match call(&mut wire, open, "channel.open-ok", deadline)? {
            AMQPClass::Channel(channel::AMQPMethod::OpenOk(_)) => {}
            other => return Err(unexpected("channel.open-ok", other)),
        }
        let qos = AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos {
            prefetch_count: prefetch,
            global: false,
        }));
        match call(&mut wire, qos, "basic.qos-ok", deadline)? {
            AMQPClass::Basic(basic::AMQPMethod::QosOk(_)) => {}
            other => return Err(unexpected("basic.qos-ok", other)),
        }
        let consume = AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
            queue: queue.into(),
            consumer_tag: "".into(),
            no_local: false,
            no_ack: false,
            exclusive: false,
            nowait: false,
            arguments: Default::default(),
        }));
        let consumer_tag = match call(&mut wire, consume, "basic.consume-ok", deadline)? {
            AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(ok)) => ok.consumer_tag.to_string(),
            other => return Err(unexpected("basic.consume-ok", other)),
        };
        Ok(Consume {
            wire,
            consumer_tag,
            partial: None,
        })
    }

    pub fn consumer_tag(&self) -> &str {
        &self.consumer_tag
    }

    /// Wakes this consume's [`Consume::next`] from another thread.
    pub fn waker(&self) -> Waker {
        self.wire.waker()
    }

    /// Waits as [`Wire::wait`] does, then adds every delivery the frames read complete to
    /// `ready` (a delivery split across reads is completed by a later call).
    pub fn next(
        &mut self,
        until: Option<Instant>,
        ready: &mut Vec<Delivery>,
    ) -> Result<Woke, WireError> {
        let woke = self.wire.wait(until)?;
        // One at a time, not drained: answering a channel close writes on the wire.
        while let Some(frame) = self.wire.frames.pop_front() {
            self.take(frame, ready)?;
        }
        Ok(woke)
    }

    fn take(&mut self, frame: AMQPFrame, ready: &mut Vec<Delivery>) -> Result<(), WireError> {
        match frame {
            AMQPFrame::Method(CHANNEL, AMQPClass::Basic(basic::AMQPMethod::Deliver(d))) => {
                if self.partial.is_some() {
                    return Err(nonsense("a delivery began before the last one ended"));
                }
                self.partial = Some(Partial {
                    delivery: Delivery {
                        tag: d.delivery_tag,
                        exchange: d.exchange.to_string(),
                        routing_key: d.routing_key.to_string(),
                        redelivered: d.redelivered,
                        properties: BasicProperties::default(),
                        body: Vec::new(),
                    },
                    size: None,
                });
            }
            AMQPFrame::Header(CHANNEL, header) => {
                let partial = self.partial.as_mut().filter(|p| p.size.is_none());
                let partial = partial.ok_or_else(|| nonsense("a header without its delivery"))?;
                partial.delivery.properties = header.properties;
                partial.size = Some(header.body_size);
                // Reserved up to what one read can hold; a larger body grows as it comes.
                let reserve = usize::try_from(header.body_size).unwrap_or(usize::MAX);
                partial.delivery.body.reserve_exact(reserve.min(1 << 20));
            }
            AMQPFrame::Body(CHANNEL, data) => {
                let partial = self.partial.as_mut().filter(|p| p.size.is_some());
                let partial = partial.ok_or_else(|| nonsense("a body without its header"))?;
                partial.delivery.body.extend_from_slice(&data);
            }
            AMQPFrame::Method(CHANNEL, AMQPClass::Channel(channel::AMQPMethod::Close(c))) => {
                return Err(channel_closed(&mut self.wire, &c));
            }
            AMQPFrame::Method(CHANNEL, AMQPClass::Basic(basic::AMQPMethod::Cancel(_))) => {
                return Err(WireError::Cancelled);
            }
            // The answer to our own cancel: deliveries sent before it may still have come.
            AMQPFrame::Method(CHANNEL, AMQPClass::Basic(basic::AMQPMethod::CancelOk(_))) => {}
            other => {
                return Err(WireError::Unexpected {
                    expected: "a delivery",
                    got: other.to_string(),
                });
            }
        }
        self.complete(ready)
    }

    /// Moves the delivery being assembled to `ready` once its body is whole.
    fn complete(&mut self, ready: &mut Vec<Delivery>) -> Result<(), WireError> {
        let Some(size) = self.partial.as_ref().and_then(|p| p.size) else {
            return Ok(());
        };
        let have = self
            .partial
            .as_ref()
            .map_or(0, |p| p.delivery.body.len() as u64);
        if have > size {
            return Err(nonsense("a body longer than its header said"));
        }
        if have == size {
            ready.extend(self.partial.take().map(|p| p.delivery));
        }
        Ok(())
    }

    /// Acks `tag`, and with `multiple` every delivery before it.
    pub fn ack(&mut self, tag: u64, multiple: bool) -> Result<(), WireError> {
        let ack = basic::Ack {
            delivery_tag: tag,
            multiple,
        };
        self.wire
            .send_method(CHANNEL, AMQPClass::Basic(basic::AMQPMethod::Ack(ack)))
    }

    /// Gives `tag` back to its queue (`requeue`) or drops it (to the queue's dead-letter
    /// exchange, if it has one).
    pub fn reject(&mut self, tag: u64, requeue: bool) -> Result<(), WireError> {
        let reject = basic::Reject {
            delivery_tag: tag,
            requeue,
        };
        self.wire
            .send_method(CHANNEL, AMQPClass::Basic(basic::AMQPMethod::Reject(reject)))
    }

    /// Asks the broker to send no more deliveries; the channel stays open for acks. Deliveries
    /// already on their way still arrive.
    pub fn cancel(&mut self) -> Result<(), WireError> {
        let cancel = basic::Cancel {
            consumer_tag: self.consumer_tag.as_str().into(),
            nowait: false,
        };
        self.wire
            .send_method(CHANNEL, AMQPClass::Basic(basic::AMQPMethod::Cancel(cancel)))
    }

    /// Closes the connection; deliveries not acked go back to the queue.
    pub fn close(self, text: &str) -> Result<(), WireError> {
        self.wire.close(text)
    }
}

/// Sends `class` on the channel and waits for the broker's answer, a channel close included.
fn call(
    wire: &mut Wire,
    class: AMQPClass,
    expected: &'static str,
    deadline: Instant,
) -> Result<AMQPClass, WireError> {
    wire.send_method(CHANNEL, class)?;
    match wire.method(CHANNEL, expected, deadline)? {
        AMQPClass::Channel(channel::AMQPMethod::Close(c)) => Err(channel_closed(wire, &c)),
        answer => Ok(answer),
    }
}

/// Answers the broker's channel.close with close-ok (the broker holds the channel until then;
/// a failed write shows in the next wait) and says why it closed.
fn channel_closed(wire: &mut Wire, close: &channel::Close) -> WireError {
    let close_ok = AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {}));
    let _ = wire.send_method(CHANNEL, close_ok);
    WireError::ChannelClosed {
        code: close.reply_code,
        text: close.reply_text.to_string(),
    }
}

fn nonsense(what: &str) -> WireError {
    WireError::Frame(what.to_string())
}

#[cfg(test)]
pub(super) mod tests;
