//! Where one consumer run's deliveries come from and where their acks go: a lapin channel on
//! the service's connection, or a consume connection of the host's own (`broker::wire`, one
//! thread that hands over the deliveries of each read as one batch). The rest of the consumer
//! sees only these two types, whichever it is.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures_util::{FutureExt as _, StreamExt as _};
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions,
};
use lapin::types::FieldTable;

use super::Link;
use crate::broker::wire::Wire;
use crate::broker::wire::WireError;
use crate::broker::wire::consume::Consume;
use crate::broker::wire::feed::{self, Feed};
use crate::broker::{self, Delivery};

/// How long the host's own consume connection gets to connect, log in and start consuming.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// What settles a run's deliveries.
pub(super) enum Channel {
    Lapin(lapin::Channel),
    Own(feed::Settler),
}

/// A run's deliveries.
pub(super) enum Deliveries {
    Lapin(lapin::Consumer),
    Own(Feed),
}

/// Why a run's deliveries ended.
pub(super) enum Ended {
    /// The channel or the connection failed: the broker's text, and whether it closed only
    /// the channel (a consumer timeout is such a close).
    Failed { text: String, channel_only: bool },
    /// The broker cancelled the consumer (its queue was deleted).
    Cancelled,
    /// The deliveries stopped without a reason (lapin's stream ended).
    Closed,
}

/// The channel could not be opened or the consume not started; `missing` when the queue is
/// not there (the keeper is asked to declare it again).
pub(super) struct OpenError {
    pub error: anyhow::Error,
    pub missing: bool,
}

impl Channel {
    /// Whether a delivery can still be acked.
    pub(super) fn connected(&self) -> bool {
        match self {
            Channel::Lapin(channel) => channel.status().connected(),
            Channel::Own(settler) => settler.is_open(),
        }
    }

    /// Acks `tag` (and with `multiple` every delivery before it).
    pub(super) async fn ack(&self, tag: u64, multiple: bool) -> Result<(), String> {
        match self {
            Channel::Lapin(channel) => channel
                .basic_ack(tag, BasicAckOptions { multiple })
                .await
                .map_err(|e| e.to_string()),
            Channel::Own(settler) => {
                settler.ack(tag, multiple);
                own_open(settler)
            }
        }
    }

    /// Gives `tag` back to its queue.
    pub(super) async fn requeue(&self, tag: u64) -> Result<(), String> {
        match self {
            Channel::Lapin(channel) => {
                let options = BasicNackOptions {
                    requeue: true,
                    ..BasicNackOptions::default()
                };
                channel
                    .basic_nack(tag, options)
                    .await
                    .map_err(|e| e.to_string())
            }
            Channel::Own(settler) => {
                settler.reject(tag, true);
                own_open(settler)
            }
        }
    }

    /// Asks for no more deliveries; acks still go out.
    pub(super) async fn cancel(&self, consumer_tag: &str) {
        match self {
            Channel::Lapin(channel) => {
                let options = BasicCancelOptions::default();
                let _ = channel.basic_cancel(consumer_tag.into(), options).await;
            }
            Channel::Own(settler) => settler.cancel(),
        }
    }

    /// Closes the channel (for the host's own connection, the connection: its thread ends once
    /// what was queued is sent).
    pub(super) async fn close(&self) {
        match self {
            Channel::Lapin(channel) => {
                let _ = channel.close(200, "bye".into()).await;
            }
            Channel::Own(settler) => settler.stop(),
        }
    }
}

fn own_open(settler: &feed::Settler) -> Result<(), String> {
    if settler.is_open() {
        Ok(())
    } else {
        Err("the consume connection is closed".into())
    }
}

impl Deliveries {
    /// The consumer tag, for logs and the cancel.
    pub(super) fn tag(&self, own: &str) -> String {
        match self {
            Deliveries::Lapin(consumer) => consumer.tag().to_string(),
            Deliveries::Own(_) => own.to_string(),
        }
    }

    /// Waits for deliveries, then moves every one ready now into `waiting`, up to `max` (a
    /// batch is never split). Cancel-safe: nothing is taken before the first one arrives.
    pub(super) async fn take(
        &mut self,
        waiting: &mut VecDeque<Delivery>,
        max: usize,
    ) -> Result<(), Ended> {
        match self {
            Deliveries::Lapin(consumer) => {
                let mut next = consumer.next().await;
                loop {
                    match next {
                        Some(Ok(delivery)) => waiting.push_back(delivery.into()),
                        Some(Err(err)) => return Err(lapin_ended(&err)),
                        None => return Err(Ended::Closed),
                    }
                    if waiting.len() >= max {
                        return Ok(());
                    }
                    match consumer.next().now_or_never() {
                        Some(more) => next = more,
                        None => return Ok(()),
                    }
                }
            }
            Deliveries::Own(feed) => {
                let mut next = feed.next().await;
                loop {
                    match next {
                        Some(Ok(batch)) => waiting.extend(batch),
                        Some(Err(err)) => return Err(own_ended(err)),
                        None => return Err(Ended::Closed),
                    }
                    if waiting.len() >= max {
                        return Ok(());
                    }
                    match feed.next().now_or_never() {
                        Some(more) => next = more,
                        None => return Ok(()),
                    }
                }
            }
        }
    }
}

fn lapin_ended(err: &lapin::Error) -> Ended {
    Ended::Failed {
        text: broker::describe(err),
        channel_only: broker::is_channel_error(err),
    }
}

fn own_ended(err: WireError) -> Ended {
    match err {
        WireError::Cancelled => Ended::Cancelled,
        WireError::ChannelClosed { code, text } => Ended::Failed {
            text: format!("{code} {text}"),
            channel_only: true,
        },
        other => Ended::Failed {
            text: other.to_string(),
            channel_only: false,
        },
    }
}

/// Opens a channel on the link's connection with `prefetch` and starts consuming `queue`.
pub(super) async fn open_lapin(
    link: &Link,
    queue: &str,
    prefetch: u16,
) -> Result<(Channel, Deliveries), OpenError> {
    let failed = |error: anyhow::Error| OpenError {
        error,
        missing: false,
    };
    let channel = link
        .conn
        .create_channel()
        .await
        .context("opening a consumer channel")
        .map_err(failed)?;
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await
        .context("setting prefetch")
        .map_err(failed)?;
    let consumed = channel
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await;
    match consumed {
        Ok(deliveries) => Ok((Channel::Lapin(channel), Deliveries::Lapin(deliveries))),
        Err(err) => Err(OpenError {
            missing: broker::is_not_found(&err),
            error: anyhow::Error::new(err).context(format!("consuming {queue}")),
        }),
    }
}

/// Opens a consume connection of the host's own to `url` and starts consuming `queue` on it,
/// its thread named after the queue, each read's deliveries offered to `inline` first.
/// Returns the consumer tag beside the pair.
pub(super) async fn open_own(
    url: &str,
    name: &str,
    queue: &str,
    prefetch: u16,
    inline: Option<Box<dyn feed::Inline>>,
) -> Result<(Channel, Deliveries, String), OpenError> {
    let (url, name, q) = (url.to_string(), name.to_string(), queue.to_string());
    // Connecting and logging in block: off the runtime's threads.
    let started = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + OPEN_TIMEOUT;
        let wire = Wire::open(&url, &name, OPEN_TIMEOUT)?;
        Consume::start(wire, &q, prefetch, deadline)
    })
    .await;
    let consume = match started {
        Ok(Ok(consume)) => consume,
        Ok(Err(err)) => {
            let missing = matches!(err, WireError::ChannelClosed { code: 404, .. });
            return Err(OpenError {
                error: anyhow::Error::new(err).context(format!("consuming {queue}")),
                missing,
            });
        }
        Err(join) => {
            return Err(OpenError {
                error: anyhow::anyhow!("opening the consume connection: {join}"),
                missing: false,
            });
        }
    };
    let tag = consume.consumer_tag().to_string();
    // Thread names are cut at 15 bytes by the kernel: the start of the queue's name; without
    // NUL, which std refuses in a thread name (a queue name may hold one).
    let thread: String = format!("wh-c {queue}")
        .chars()
        .filter(|c| *c != '\0')
        .take(15)
        .collect();
    let feed = Feed::start(consume, &thread, inline).map_err(|e| OpenError {
        error: anyhow::Error::new(e).context("starting the consume thread"),
        missing: false,
    })?;
    Ok((Channel::Own(feed.settler()), Deliveries::Own(feed), tag))
}
