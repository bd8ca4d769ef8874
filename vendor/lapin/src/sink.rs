//! Deliveries handed to the consumer's own code on the I/O thread, in place of its stream.
//! (worker-host patch: see vendor/README.md.)

use crate::message::DeliveryResult;
use std::{cell::RefCell, sync::Arc};

/// Takes a consumer's deliveries on the connection's I/O thread, as each one is complete,
/// instead of the consumer's stream: no channel, no task woken, no thread between the frame
/// parser and the code that handles the delivery. Whatever it does holds up the connection's
/// reading, writing and heartbeats, so it must return quickly.
pub trait DeliverySink: Send + Sync {
    /// A complete delivery, an error, or `Ok(None)` when the consumer was cancelled.
    fn deliver(&self, delivery: DeliveryResult);
    /// Every frame of one read from the socket has been handled: the time to settle what the
    /// read brought. Called once per read for each sink that got something in it.
    fn read_done(&self) {}
}

thread_local! {
    /// Sinks that got a delivery during the frames being handled on this thread.
    static TOUCHED: RefCell<Vec<Arc<dyn DeliverySink>>> = const { RefCell::new(Vec::new()) };
}

/// Gives `delivery` to `sink`, and remembers it for [`reads_done`].
pub(crate) fn hand(sink: &Arc<dyn DeliverySink>, delivery: DeliveryResult) {
    sink.deliver(delivery);
    TOUCHED.with(|touched| {
        let mut touched = touched.borrow_mut();
        let ptr = Arc::as_ptr(sink).cast::<()>();
        if !touched.iter().any(|s| Arc::as_ptr(s).cast::<()>() == ptr) {
            touched.push(sink.clone());
        }
    });
}

/// Tells every sink handed something on this thread since the last call that the read is done.
pub(crate) fn reads_done() {
    let touched = TOUCHED.with(|touched| std::mem::take(&mut *touched.borrow_mut()));
    for sink in touched {
        sink.read_done();
    }
}
