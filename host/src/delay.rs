//! Arbitrary-delay delivery (SPEC section 5): binary levels of fixed-TTL queues.
//!
//! A delay is rounded up to a whole number of [`GRANULARITY`] units and written in binary, most
//! significant bit first, one word per bit: that is the routing key inside the delay topology.
//! Bit `i` has a durable topic exchange and a durable queue, both named after the queue's TTL
//! (`worker.delay.1s`, `worker.delay.250ms`, ...). The exchange of bit `i` routes keys whose bit
//! `i` is 1 into its queue and keys whose bit `i` is 0 on to the exchange of bit `i - 1`; the
//! queue expires its messages after its TTL and dead-letters them to that same next exchange.
//! After bit 0 comes the `ready` exchange and queue, which the mover ([`Delayer::run_mover`])
//! consumes, republishing each message to the exchange and routing key it was published for
//! (kept in headers, so keys never grow and consumers see the original key). Each queue holds a
//! single TTL, so a long delay never holds back a short one. See docs/delay.md.

mod mover;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use lapin::types::AMQPValue;
use lapin::{BasicProperties, Channel, Connection};

/// What the mover waits on while the broker blocks publishing.
pub use crate::broker::Blocked;
use crate::broker::{PERSISTENT, publish_confirmed};

pub use crate::topology::delay_levels::{
    DEFAULT_PREFIX, DUE_HEADER, DelayError, Delayer, ERROR_HEADER, EXCHANGE_HEADER, FRACTION_BITS,
    GRANULARITY, MAX_LEVELS, ROUTING_KEY_HEADER,
};

impl Delayer {
    /// Declares [`Delayer::plan`] (idempotent; an inequivalent existing queue is named with
    /// both values).
    pub async fn declare(&self, conn: &Connection) -> anyhow::Result<()> {
        self.plan()
            .declare(conn)
            .await
            .context("declaring the delay topology")
    }

    /// Publishes `body` into the delay topology, confirmed, to reach `exchange` with
    /// `routing_key` after `delay` (rounded up to [`GRANULARITY`]). A zero delay publishes
    /// straight to `exchange`. The properties and headers travel with it unchanged; the message
    /// is made persistent. The topology must be declared ([`Delayer::declare`]).
    #[allow(clippy::too_many_arguments)]
    pub async fn publish(
        &self,
        channel: &Channel,
        exchange: &str,
        routing_key: &str,
        body: &[u8],
        props: BasicProperties,
        delay: Duration,
    ) -> anyhow::Result<()> {
        let steps = self.steps(delay)?;
        let props = props.with_delivery_mode(PERSISTENT);
        if steps == 0 {
            return Ok(
                publish_confirmed(channel, exchange, routing_key, body, props, false).await?,
            );
        }
        let mut headers = props.headers().clone().unwrap_or_default();
        headers.insert(EXCHANGE_HEADER.into(), crate::headers::text(exchange));
        headers.insert(ROUTING_KEY_HEADER.into(), crate::headers::text(routing_key));
        let due = SystemTime::now() + delay;
        let due_ms = due
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        headers.insert(DUE_HEADER.into(), AMQPValue::LongLongInt(due_ms));
        let entry = self.entry_exchange();
        // Mandatory: a topology that is missing a binding is an error, not a silent drop.
        publish_confirmed(
            channel,
            &entry,
            &self.routing_key(steps),
            body,
            props.with_headers(headers),
            true,
        )
        .await
        .with_context(|| {
            format!(
                "the delay topology ({entry}, ...) is missing or incomplete: start the service \
                 or run `worker-host topology --apply`"
            )
        })
    }
}

/// Milliseconds since the Unix epoch, now.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
