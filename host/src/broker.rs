//! Connections to RabbitMQ: several URLs tried in turn, capped exponential backoff with jitter;
//! confirm-mode channels that reopen after a channel error; the one confirmed publish.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use tokio::sync::watch;
use tracing::{Instrument, info, warn};

use crate::config::Secret;
use crate::telemetry;

mod delivery;
mod probe;
// The batch consumer's connection: tested on its own and used by the throughput bench (x);
// the consumer switches to it in a later step.
pub mod wire;
pub use delivery::Delivery;
pub(crate) use probe::{exchange_exists, queue_state};

/// No broker URL answered; commands exit with code 2 for this.
#[derive(Debug, thiserror::Error)]
#[error("cannot reach RabbitMQ at {urls}: {last}")]
pub(crate) struct Unreachable {
    /// The URLs tried, with passwords hidden.
    pub urls: String,
    /// The last error seen.
    pub last: String,
}

/// Capped exponential backoff with full jitter.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    attempt: u32,
    base: Duration,
    cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            attempt: 0,
            base: Duration::from_millis(200),
            cap: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// The next wait: random in [base/2, min(cap, base * 2^attempt)].
    pub(crate) fn next_delay(&mut self) -> Duration {
        let exp = self.base.saturating_mul(1u32 << self.attempt.min(16));
        let top = exp.min(self.cap);
        self.attempt = self.attempt.saturating_add(1);
        let low = self.base / 2;
        if top <= low {
            return top;
        }
        low + (top - low).mul_f64(rand::random::<f64>())
    }

    /// Called once a connection works again.
    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// A lapin error as one line: the broker's own text for protocol errors (lapin's Display and
/// its source repeat it), else lapin's.
pub(crate) fn describe(err: &lapin::Error) -> String {
    match err.kind() {
        lapin::ErrorKind::ProtocolError(amqp) => amqp.get_message().as_str().to_string(),
        _ => err.to_string(),
    }
}

/// AMQP delivery mode 2: every message the host publishes survives a broker restart.
pub(crate) const PERSISTENT: u8 = 2;

/// True for an error that closed a channel but not the connection (RabbitMQ's soft errors:
/// NOT_FOUND, ACCESS_REFUSED, PRECONDITION_FAILED, RESOURCE_LOCKED, ...).
pub(crate) fn is_channel_error(err: &lapin::Error) -> bool {
    err.is_amqp_soft_error()
}

/// RabbitMQ's 404 NOT_FOUND (a missing queue or exchange).
pub(crate) fn is_not_found(err: &lapin::Error) -> bool {
    use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
    matches!(
        err.kind(),
        lapin::ErrorKind::ProtocolError(e)
            if matches!(e.kind(), AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND))
    )
}

/// Why a confirmed publish did not go through.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PublishError {
    /// Mandatory and returned: no queue is bound for the key (for our own exchanges: a queue
    /// of the topology is missing).
    #[error("exchange {exchange:?} has no queue bound for key {routing_key:?}")]
    Unroutable {
        exchange: String,
        routing_key: String,
    },
    /// The broker nacked it (an internal error, or a queue in reject-publish overflow).
    #[error("the broker refused the publish to {exchange:?}")]
    Nacked { exchange: String },
    /// The channel was closed by a channel-level error: this publish's own (a missing exchange)
    /// or another one's on the same channel; the connection is fine.
    #[error("publish to {exchange:?} refused: {text}")]
    ChannelClosed {
        exchange: String,
        text: String,
        /// The broker's 404: the exchange (or, for our own routes, a queue) is missing.
        not_found: bool,
    },
    /// The connection is gone (or the channel closed for a reason of its own).
    #[error("publishing to {exchange:?}: {text}")]
    Broken { exchange: String, text: String },
}

impl PublishError {
    /// The broker's 404: the exchange (or, for our own routes, a queue) is missing.
    pub fn is_not_found(&self) -> bool {
        match self {
            PublishError::ChannelClosed { not_found, .. } => *not_found,
            _ => false,
        }
    }

    /// A short name of the kind of failure (the `error.type` of a publish span).
    pub fn kind(&self) -> &'static str {
        match self {
            PublishError::Unroutable { .. } => "unroutable",
            PublishError::Nacked { .. } => "nacked",
            PublishError::ChannelClosed { .. } => "channel_closed",
            PublishError::Broken { .. } => "connection",
        }
    }

    fn from_lapin(exchange: &str, err: &lapin::Error) -> PublishError {
        let exchange = exchange.to_string();
        let text = describe(err);
        if is_channel_error(err) {
            PublishError::ChannelClosed {
                exchange,
                text,
                not_found: is_not_found(err),
            }
        } else {
            PublishError::Broken { exchange, text }
        }
    }
}

/// Publishes and waits for the broker's confirm (the channel must be in confirm mode). With
/// `mandatory`, an unroutable message is an error, not a silent drop.
pub(crate) async fn publish_confirmed(
    channel: &Channel,
    exchange: &str,
    routing_key: &str,
    body: &[u8],
    properties: BasicProperties,
    mandatory: bool,
) -> Result<(), PublishError> {
    let (span, properties) = telemetry::publish_span(exchange, routing_key, properties);
    let result = publish(channel, exchange, routing_key, body, properties, mandatory)
        .instrument(span.clone())
        .await;
    if let Err(err) = &result {
        telemetry::failed(&span, err.kind());
    }
    result
}

async fn publish(
    channel: &Channel,
    exchange: &str,
    routing_key: &str,
    body: &[u8],
    properties: BasicProperties,
    mandatory: bool,
) -> Result<(), PublishError> {
    let options = BasicPublishOptions {
        mandatory,
        ..BasicPublishOptions::default()
    };
    let confirm = channel
        .basic_publish(
            exchange.into(),
            routing_key.into(),
            options,
            body,
            properties,
        )
        .await
        .map_err(|e| PublishError::from_lapin(exchange, &e))?
        .await
        .map_err(|e| PublishError::from_lapin(exchange, &e))?;
    match confirm {
        Confirmation::Ack(None) | Confirmation::NotRequested => Ok(()),
        Confirmation::Ack(Some(_)) => Err(PublishError::Unroutable {
            exchange: exchange.to_string(),
            routing_key: routing_key.to_string(),
        }),
        Confirmation::Nack(_) => Err(PublishError::Nacked {
            exchange: exchange.to_string(),
        }),
    }
}

/// Opens a channel in confirm mode.
pub(crate) async fn confirm_channel(conn: &Connection) -> Result<Channel, lapin::Error> {
    let channel = conn.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    Ok(channel)
}

/// Whether the broker blocks publishing on one connection (`connection.blocked`, a resource
/// alarm), as the service hears it. While it does, nothing may be published on the connection
/// (SPEC section 7): a publish written now reaches the queues whenever the alarm clears, even
/// after this process has exited, so a message whose call is then run again would have its
/// effects twice.
#[derive(Debug, Clone)]
pub struct Blocked(watch::Receiver<bool>);

impl Blocked {
    /// The signal, starting as `blocked`, and its sender (true: blocked), which the
    /// connection's events drive.
    pub fn channel(blocked: bool) -> (watch::Sender<bool>, Blocked) {
        let (tx, rx) = watch::channel(blocked);
        (tx, Blocked(rx))
    }

    /// A connection whose blocks nobody hears (tools, tests): never waits.
    pub fn never() -> Blocked {
        Blocked::channel(false).1
    }

    pub fn is_blocked(&self) -> bool {
        *self.0.borrow()
    }

    /// Returns once publishing is not blocked. Never returns when the sender went away while
    /// blocked: the connection is being given up, and whatever waits here goes with it.
    pub async fn lifted(&self) {
        let mut rx = self.0.clone();
        if rx.wait_for(|blocked| !blocked).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// A confirm-mode channel shared by one connection's publishers. A channel error (a publish to
/// a missing exchange) closes only the channel; the next caller gets a fresh one.
///
/// A publish to a missing exchange would close the channel under every message sharing it, and
/// the broker may already have routed their publishes whose confirms had not arrived, so they
/// could not simply be sent again. Exchanges named by plugins are therefore checked once with a
/// passive declare on a throwaway channel ([`Publisher::check_exchange`]), and a missing one
/// refuses that message alone.
///
/// While the broker blocks publishing ([`Blocked`]) it hands out no channel: every publish of
/// the service gets its channel here right before writing, so none is written then.
pub(crate) struct Publisher {
    conn: Arc<Connection>,
    blocked: Blocked,
    current: Mutex<Option<Channel>>,
    /// Serializes reopening, so one closed channel is replaced once.
    reopen: tokio::sync::Mutex<()>,
    /// Exchanges seen to exist on this connection.
    known: Mutex<HashSet<String>>,
}

impl Publisher {
    /// A publisher on `conn`, holding back while `blocked`; the channel opens on first use.
    pub(crate) fn new(conn: Arc<Connection>, blocked: Blocked) -> Publisher {
        Publisher {
            conn,
            blocked,
            current: Mutex::new(None),
            reopen: tokio::sync::Mutex::new(()),
            known: Mutex::new(HashSet::new()),
        }
    }

    /// Ok if `exchange` exists (asked once, then remembered); `ChannelClosed` with the broker's
    /// reason if it does not.
    pub(crate) async fn check_exchange(&self, exchange: &str) -> Result<(), PublishError> {
        if exchange.is_empty() || self.known().contains(exchange) {
            return Ok(());
        }
        match exchange_exists(&self.conn, exchange).await {
            Ok(true) => {
                self.known().insert(exchange.to_string());
                Ok(())
            }
            Ok(false) => Err(PublishError::ChannelClosed {
                exchange: exchange.to_string(),
                text: format!("NOT_FOUND - no exchange '{exchange}'"),
                not_found: true,
            }),
            // Opening the probe can fail with another channel's error: not this message's fault.
            Err(err) => Err(PublishError::Broken {
                exchange: exchange.to_string(),
                text: describe(&err),
            }),
        }
    }

    /// Forgets which exchanges exist (one was deleted under a publish).
    pub(crate) fn forget_exchanges(&self) {
        self.known().clear();
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        // A set of names stays consistent even if a holder panicked.
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection it publishes on.
    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }

    /// Whether the broker blocks publishing now.
    pub(crate) fn is_blocked(&self) -> bool {
        self.blocked.is_blocked()
    }

    /// Returns once the broker does not block publishing (see [`Blocked::lifted`]).
    pub(crate) async fn unblocked(&self) {
        self.blocked.lifted().await;
    }

    /// The open channel, reopened if the broker closed it; once the broker does not block
    /// publishing.
    pub(crate) async fn channel(&self) -> Result<Channel, lapin::Error> {
        self.unblocked().await;
        if let Some(channel) = self.open_channel() {
            return Ok(channel);
        }
        let _reopening = self.reopen.lock().await;
        if let Some(channel) = self.open_channel() {
            return Ok(channel);
        }
        let channel = confirm_channel(&self.conn).await?;
        *self.lock() = Some(channel.clone());
        Ok(channel)
    }

    fn open_channel(&self) -> Option<Channel> {
        self.lock()
            .as_ref()
            .filter(|c| c.status().connected())
            .cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Channel>> {
        // A panic while holding this lock cannot leave the Option half-written.
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The open channel, as a publish error when none can be opened (for callers that go on
    /// with [`publish_confirmed`]).
    pub(crate) async fn confirm_channel(&self) -> Result<Channel, PublishError> {
        self.channel().await.map_err(|e| PublishError::Broken {
            exchange: String::new(),
            text: format!("cannot open a publisher channel: {}", describe(&e)),
        })
    }

    /// Closes the shared channel, if open.
    pub(crate) async fn close(&self) {
        let channel = self.lock().take();
        if let Some(channel) = channel {
            let _ = channel.close(200, "bye".into()).await;
        }
    }
}

/// Hides the passwords of an AMQP URL for logs and errors (see [`crate::config::redact_url`]).
pub(crate) fn redact(url: &str) -> String {
    crate::config::redact_url(url)
}

/// How long one URL gets to finish connecting before the next is tried: a node that accepts
/// TCP but never completes the handshake must not hold up failover to the others.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Tries each URL once, in turn. Processes start at different URLs (by process id), so many
/// hosts given one cluster's list spread their connections over its nodes.
pub(crate) async fn connect_once(urls: &[String], name: &str) -> Result<Connection, Unreachable> {
    connect_any(urls, name).await.map(|(conn, _)| conn)
}

/// [`connect_once`], also saying which URL answered.
async fn connect_any(urls: &[String], name: &str) -> Result<(Connection, Secret), Unreachable> {
    let mut last = String::from("no broker URL configured");
    let first = std::process::id() as usize % urls.len().max(1);
    for url in urls.iter().cycle().skip(first).take(urls.len()) {
        let props = ConnectionProperties::default().with_connection_name(name.into());
        let attempt = tokio::time::timeout(CONNECT_TIMEOUT, Connection::connect(url, props));
        let err = match attempt.await {
            Ok(Ok(conn)) => {
                info!(url = %redact(url), "connected to RabbitMQ");
                return Ok((conn, Secret::new(url.as_str())));
            }
            Ok(Err(err)) => err.to_string(),
            Err(_) => format!("no connection within {}s", CONNECT_TIMEOUT.as_secs()),
        };
        warn!(url = %redact(url), "cannot connect: {err}");
        last = err;
    }
    Err(Unreachable {
        urls: urls
            .iter()
            .map(|u| redact(u))
            .collect::<Vec<_>>()
            .join(", "),
        last,
    })
}

/// Tries the URLs in turn until one answers, waiting with backoff between rounds; says which
/// answered. Only cancellation (dropping the future) stops it.
pub(crate) async fn connect_forever(
    urls: &[String],
    name: &str,
    backoff: &mut Backoff,
) -> (Connection, Secret) {
    loop {
        match connect_any(urls, name).await {
            Ok(connected) => return connected,
            Err(err) => {
                let wait = backoff.next_delay();
                warn!(
                    "{err}; retrying in {}",
                    humantime::format_duration(round_ms(wait))
                );
                tokio::time::sleep(wait).await;
            }
        }
    }
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_password() {
        assert_eq!(
            redact("amqp://guest:secret@host:5672/%2f"),
            "amqp://guest:***@host:5672/%2f"
        );
        assert_eq!(redact("amqp://host"), "amqp://host");
        assert_eq!(
            redact("amqp://u@host/%2f?password=secret"),
            "amqp://***@host/%2f?password=***"
        );
    }

    #[test]
    fn backoff_is_capped_and_grows() {
        let mut b = Backoff::default();
        let first = b.next_delay();
        assert!(first <= Duration::from_millis(200));
        for _ in 0..40 {
            assert!(b.next_delay() <= Duration::from_secs(30));
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(200));
    }
}
