//! Arbitrary-delay delivery (SPEC section 5): binary levels of fixed-TTL queues.
//!
//! A delay is rounded up to a whole number of [`GRANULARITY`] units and written in binary, most
//! significant bit first, one word per bit: that is the routing key inside the delay topology.
//! Bit `i` has a durable topic exchange and a durable queue, both named after the queue's TTL
//! (`worker.delay.1s`, `worker.delay.250ms`, ...). The exchange of bit `i` routes keys whose bit
//! `i` is 1 into its queue and keys whose bit `i` is 0 on to the exchange of bit `i - 1`; the
//! queue expires its messages after its TTL and dead-letters them to that same next exchange.
//! After bit 0 comes the `ready` exchange and queue, which the mover ([`Delayer::mover_loop`])
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
use crate::broker::{PERSISTENT, PublishError, publish_confirmed};
use crate::config::Config;
pub use crate::topology::delay_levels::{
    DEFAULT_PREFIX, DelayError, DelayLevels, FRACTION_BITS, GRANULARITY, MAX_LEVELS,
};

/// Header: the exchange a delayed message is for.
pub const EXCHANGE_HEADER: &str = "x-delay-exchange";
/// Header: the routing key a delayed message is for.
pub const ROUTING_KEY_HEADER: &str = "x-delay-routing-key";
/// Header: when the message is due, in milliseconds since the Unix epoch (for logs and metrics).
pub const DUE_HEADER: &str = "x-delay-due-ms";
/// Header on parked messages: why the mover could not deliver it.
pub const ERROR_HEADER: &str = "x-delay-error";

/// Why [`Delayer::publish`] did not publish; callers that republish a delivery need the
/// [`PublishError`] of the broker to blame the right thing ([`DelayPublishError::into_publish`]).
#[derive(Debug, thiserror::Error)]
pub enum DelayPublishError {
    /// The delay is beyond what the levels can express.
    #[error(transparent)]
    Delay(#[from] DelayError),
    /// A delay that rounds to nothing, published straight to its exchange, did not go through.
    #[error(transparent)]
    Publish(#[from] PublishError),
    /// The entry into the delay levels did not take the message.
    #[error(
        "the delay topology ({entry}, ...) is missing or incomplete: start the service or run \
         `worker-host topology --apply`"
    )]
    Topology {
        entry: String,
        #[source]
        source: PublishError,
    },
}

impl DelayPublishError {
    /// The broker's error of the publish; a delay the levels refuse is a broken publish to
    /// `exchange`.
    pub fn into_publish(self, exchange: &str) -> PublishError {
        match self {
            DelayPublishError::Publish(err) | DelayPublishError::Topology { source: err, .. } => {
                err
            }
            DelayPublishError::Delay(err) => PublishError::Broken {
                exchange: exchange.to_string(),
                text: err.to_string(),
            },
        }
    }
}

/// The delay topology of one config and how to use it: declaring it, publishing into it, and
/// the mover that takes due messages out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delayer {
    levels: DelayLevels,
}

impl Delayer {
    /// A topology with `levels` whole-second levels (plus [`FRACTION_BITS`] sub-second ones).
    pub fn new(levels: u8) -> Result<Delayer, DelayError> {
        DelayLevels::new(levels).map(Delayer::from)
    }

    /// The topology `config` asks for, or None without `[delay]`.
    pub fn from_config(config: &Config) -> Result<Option<Delayer>, DelayError> {
        Ok(DelayLevels::from_config(config)?.map(Delayer::from))
    }

    /// Like [`Delayer::from_config`], but a missing `[delay]` is an error.
    pub fn required(config: &Config) -> Result<Delayer, DelayError> {
        DelayLevels::required(config).map(Delayer::from)
    }

    /// Uses another name prefix (tests use a unique one so they never share queues).
    pub fn with_prefix(self, prefix: impl Into<String>) -> Delayer {
        Delayer::from(self.levels.with_prefix(prefix))
    }

    /// The longest delay the levels can express.
    pub fn max_delay(&self) -> Duration {
        self.levels.max_delay()
    }

    /// Declares [`DelayLevels::plan`] (idempotent; an inequivalent existing queue is named
    /// with both values).
    pub async fn declare(&self, conn: &Connection) -> anyhow::Result<()> {
        self.levels
            .plan()
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
    ) -> Result<(), DelayPublishError> {
        let steps = self.levels.steps(delay)?;
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
        let entry = self.levels.entry_exchange();
        // Mandatory: a topology that is missing a binding is an error, not a silent drop.
        publish_confirmed(
            channel,
            &entry,
            &self.levels.routing_key(steps),
            body,
            props.with_headers(headers),
            true,
        )
        .await
        .map_err(|source| DelayPublishError::Topology { entry, source })
    }
}

/// A delayer is its levels (names, routing keys, plan) plus how to use them.
impl std::ops::Deref for Delayer {
    type Target = DelayLevels;

    fn deref(&self) -> &DelayLevels {
        &self.levels
    }
}

impl From<DelayLevels> for Delayer {
    fn from(levels: DelayLevels) -> Delayer {
        Delayer { levels }
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
