//! One subscription's consumer: prefetch-limited deliveries, `concurrency` handler calls in
//! flight, and for each message a confirmed republish (retry, failed, plugin publishes) before
//! the ack. Acks, confirms and handler calls of different messages overlap; acks go out in
//! batches (see `acks`).

mod acks;
mod undecodable;

use std::sync::Arc;
use std::time::{Duration, Instant};

use self::acks::Acks;
use anyhow::Context as _;
use arc_swap::ArcSwap;
use futures_util::StreamExt;
use futures_util::future::try_join_all;
use lapin::message::Delivery;
use lapin::options::{
    BasicCancelOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Confirmation, Connection};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, warn};

use crate::config::{Exchanges, Subscription};
use crate::delay::Delayer;
use crate::metrics::{Metrics, QueueMetrics};
use crate::outcome::{self, Decision, Stamp};
use crate::plugin::{Input, Limits, Meta, Plugin, Publish, PublishPolicy};
use crate::poison;

/// Persistent delivery mode.
const PERSISTENT: u8 = 2;

/// Everything a subscription's consumer needs; lives across reconnects and reloads.
pub struct Subscriber {
    /// The subscription as configured.
    pub sub: Arc<Subscription>,
    /// Names of the master, retry and failed exchanges.
    pub exchanges: Arc<Exchanges>,
    /// The plugin version new calls use; swapped by hot reload.
    pub plugin: Arc<ArcSwap<Plugin>>,
    config_json: Arc<str>,
    policy: Arc<PublishPolicy>,
    limits: Limits,
    delayer: Option<Delayer>,
    metrics: QueueMetrics,
}

impl Subscriber {
    /// Prepares a subscription to run `plugin`.
    pub fn new(
        sub: Arc<Subscription>,
        exchanges: Arc<Exchanges>,
        plugin: Arc<ArcSwap<Plugin>>,
        delayer: Option<Delayer>,
        metrics: Arc<Metrics>,
    ) -> Subscriber {
        let config_json: Arc<str> = sub.config.to_string().into();
        let policy = Arc::new(PublishPolicy {
            allowed_exchanges: sub.publish.clone(),
            max_delay: delayer.as_ref().map(Delayer::max_delay),
            ..PublishPolicy::default()
        });
        let limits = Limits {
            timeout: sub.timeout,
            memory_limit: sub.memory_limit,
        };
        let metrics = metrics.for_queue(&sub.queue);
        Subscriber {
            sub,
            exchanges,
            plugin,
            config_json,
            policy,
            limits,
            delayer,
            metrics,
        }
    }

    /// Consumes until `cancel` fires or the channel fails. Returns once every message it took
    /// has been settled (acked, or left unacked for the broker to redeliver).
    pub async fn consume(
        self: Arc<Self>,
        conn: &Connection,
        cancel: CancellationToken,
    ) -> anyhow::Result<()> {
        let queue = self.sub.queue.as_str();
        let channel = conn
            .create_channel()
            .await
            .context("opening a consumer channel")?;
        channel
            .basic_qos(self.sub.prefetch, BasicQosOptions::default())
            .await
            .context("setting prefetch")?;
        let publisher = Arc::new(
            conn.create_channel()
                .await
                .context("opening a publisher channel")?,
        );
        publisher
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .context("enabling publisher confirms")?;
        let mut deliveries = channel
            .basic_consume(
                queue.into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("consuming {queue}"))?;
        let tag = deliveries.tag();
        debug!(queue, consumer_tag = %tag, "consuming");

        let calls = Arc::new(Semaphore::new(self.sub.concurrency as usize));
        let tasks = TaskTracker::new();
        // Half the prefetch window at most waits for a lower tag to settle (prefetch 0 is
        // unlimited).
        let hold_limit = match self.sub.prefetch {
            0 => 64,
            p => usize::from(p / 2),
        };
        let (acks, ack_task) = Acks::start(channel.clone(), hold_limit);
        // Fired when the publisher channel dies (for example a publish to a missing exchange):
        // this consumer then ends and the service starts it again on fresh channels.
        let broken = CancellationToken::new();
        let result = loop {
            // Take a handler slot first, so a delivery is only pulled when it can run.
            let permit = tokio::select! {
                _ = cancel.cancelled() => break Ok(()),
                _ = broken.cancelled() => break Err(anyhow::anyhow!("the publisher channel of {queue} closed")),
                permit = calls.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break Ok(()), // The semaphore is never closed.
                },
            };
            let delivery = tokio::select! {
                _ = cancel.cancelled() => break Ok(()),
                next = deliveries.next() => next,
            };
            match delivery {
                Some(Ok(delivery)) => {
                    let this = self.clone();
                    let publisher = publisher.clone();
                    let broken = broken.clone();
                    let acks = acks.clone();
                    acks.received(delivery.delivery_tag);
                    tasks.spawn(async move {
                        this.handle(delivery, &publisher, &acks, permit).await;
                        if !publisher.status().connected() {
                            broken.cancel();
                        }
                    });
                }
                Some(Err(err)) => {
                    break Err(anyhow::Error::new(err).context(format!("consuming {queue}")));
                }
                None => {
                    break Err(anyhow::anyhow!(
                        "the broker cancelled the consumer of {queue}"
                    ));
                }
            }
        };
        // Stop new deliveries; what was prefetched but not started goes back when the channel
        // closes. In-flight calls finish (bounded by their timeout) and settle.
        if result.is_ok() {
            let _ = channel
                .basic_cancel(tag.clone(), BasicCancelOptions::default())
                .await;
        }
        tasks.close();
        tasks.wait().await;
        // Every handler has settled: the last acks go out before the channel closes.
        acks.close();
        let _ = ack_task.await;
        let _ = channel.close(200, "bye".into()).await;
        let _ = publisher.close(200, "bye".into()).await;
        result
    }

    /// Runs one delivery through the plugin and settles it. Never fails: problems are logged and
    /// the message is left for the broker to redeliver.
    async fn handle(
        &self,
        delivery: Delivery,
        publisher: &Channel,
        acks: &Acks,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) {
        if let Some(problem) = poison::undecodable(&delivery.properties) {
            drop(permit);
            return self
                .park_undecodable(delivery, &problem, publisher, acks)
                .await;
        }
        let started = Instant::now();
        let Delivery {
            delivery_tag,
            exchange,
            routing_key,
            redelivered,
            properties,
            data,
            // Unused: acks go through `acks`, on the consumer channel.
            ..
        } = delivery;
        let sub = &*self.sub;
        let queue = sub.queue.as_str();
        let headers = properties.headers().as_ref();
        let attempt = outcome::calls_made(headers, queue).saturating_add(1);
        let meta = Meta {
            routing_key: routing_key.as_str().to_string(),
            original_routing_key: outcome::original_routing_key(headers, routing_key.as_str()),
            exchange: exchange.as_str().to_string(),
            queue: queue.to_string(),
            message_id: properties
                .message_id()
                .as_ref()
                .map(|s| s.as_str().to_string()),
            correlation_id: properties
                .correlation_id()
                .as_ref()
                .map(|s| s.as_str().to_string()),
            content_type: properties
                .content_type()
                .as_ref()
                .map(|s| s.as_str().to_string()),
            timestamp: *properties.timestamp(),
            attempt,
            redelivered,
            headers: outcome::render_headers(headers),
        };
        let input = Arc::new(Input {
            body: data.into(),
            meta,
            config_json: self.config_json.clone(),
            publish: self.policy.clone(),
        });

        let plugin = self.plugin.load_full();
        let in_flight = self.metrics.call_started();
        let invocation = plugin.handle(input.clone(), &self.limits).await;
        drop(in_flight);
        drop(permit);
        invocation.emit_logs(&plugin, queue);

        let decision = outcome::decide(
            &invocation.answer,
            invocation.reason.as_deref(),
            attempt,
            sub.max_retries,
        );
        let message_id = input.meta.message_id.as_deref().unwrap_or("");
        // Where a retried or parked message goes, and what is recorded on it.
        let target = match &decision {
            Decision::Ack => None,
            Decision::Retry { retry, cause } => {
                let delay = sub.delay_for_retry(*retry);
                warn!(queue, message_id, attempt, plugin = %plugin.short_sha(), delay = %delay.text, cause = %cause, "retry");
                let key = sub.retry_queue_name(delay);
                Some((self.exchanges.retry.as_str(), key, cause.as_str(), None))
            }
            Decision::Park { reason, cause } => {
                warn!(queue, message_id, attempt, plugin = %plugin.short_sha(), reason = reason.as_str(), cause = %cause, "parked in {}", sub.failed_queue());
                let key = queue.to_string();
                Some((
                    self.exchanges.failed.as_str(),
                    key,
                    cause.as_str(),
                    Some(*reason),
                ))
            }
        };
        let settled = match target {
            None => {
                self.send_publishes(publisher, &input, invocation.publishes)
                    .await
            }
            Some((exchange, key, cause, failed)) => {
                let stamp = Stamp {
                    routing_key: routing_key.as_str(),
                    attempts: attempt,
                    cause,
                    plugin: plugin.name(),
                    plugin_sha256: plugin.sha256(),
                    failed,
                };
                let props = republished(&properties, &stamp);
                publish_confirmed(publisher, exchange, &key, &input.body, props, true).await
            }
        };

        match settled {
            Ok(()) => {
                // Acked soon, possibly with others (see `acks`); never before this point.
                acks.settled(delivery_tag);
                self.metrics
                    .handled(decision_name(&decision), invocation.elapsed);
                debug!(
                    queue,
                    message_id,
                    attempt,
                    outcome = decision_name(&decision),
                    elapsed_us = started.elapsed().as_micros() as u64,
                    "handled"
                );
            }
            Err(err) => {
                self.metrics.requeued();
                error!(
                    queue,
                    message_id, attempt, "not acked, the broker will redeliver: {err:#}"
                );
                // Back off a little so a broken route does not spin; requeue for another try.
                // With the channel gone there is nothing to nack: the broker requeues it, and
                // waiting would only hold up the reconnect.
                if publisher.status().connected() {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                if let Err(err) = acks.nack_requeue(delivery_tag).await {
                    debug!(
                        queue,
                        message_id, delivery_tag, "nack failed (the channel is gone): {err}"
                    );
                }
            }
        }
    }

    /// Publishes what the plugin buffered, all at once, and waits for every confirm.
    async fn send_publishes(
        &self,
        publisher: &Channel,
        input: &Input,
        publishes: Vec<Publish>,
    ) -> anyhow::Result<()> {
        if publishes.is_empty() {
            return Ok(());
        }
        let sends = publishes.iter().map(|p| {
            let mut props = BasicProperties::default().with_delivery_mode(PERSISTENT);
            if let Some(id) = input
                .meta
                .correlation_id
                .as_deref()
                .or(input.meta.message_id.as_deref())
            {
                props = props.with_correlation_id(id.into());
            }
            let delayer = self.delayer.as_ref();
            async move {
                if let Some(delay) = p.delay {
                    // The import refuses delays unless [delay] is configured.
                    let Some(delayer) = delayer else {
                        anyhow::bail!("delayed publish without [delay]");
                    };
                    return delayer
                        .publish(
                            publisher,
                            &p.exchange,
                            &p.routing_key,
                            &p.body,
                            props,
                            delay,
                        )
                        .await;
                }
                publish_confirmed(
                    publisher,
                    &p.exchange,
                    &p.routing_key,
                    &p.body,
                    props,
                    false,
                )
                .await
            }
        });
        try_join_all(sends).await.map(|_| ())
    }
}

/// The original properties with the host's headers, persistent.
fn republished(properties: &BasicProperties, stamp: &Stamp<'_>) -> BasicProperties {
    let headers = outcome::stamp_headers(properties.headers().as_ref(), stamp);
    properties
        .clone()
        .with_headers(headers)
        .with_delivery_mode(PERSISTENT)
}

/// Publishes and waits for the broker's confirm. With `mandatory`, an unroutable message is an
/// error (its queue is missing), not a silent drop.
pub async fn publish_confirmed(
    channel: &Channel,
    exchange: &str,
    routing_key: &str,
    body: &[u8],
    properties: BasicProperties,
    mandatory: bool,
) -> anyhow::Result<()> {
    let confirm = channel
        .basic_publish(
            exchange.into(),
            routing_key.into(),
            BasicPublishOptions {
                mandatory,
                ..BasicPublishOptions::default()
            },
            body,
            properties,
        )
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "publishing to {exchange:?} with key {routing_key:?}: {}",
                crate::broker::describe(&e)
            )
        })?
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "publishing to {exchange:?}: {}",
                crate::broker::describe(&e)
            )
        })?;
    match confirm {
        Confirmation::Ack(None) | Confirmation::NotRequested => Ok(()),
        Confirmation::Ack(Some(_)) => {
            anyhow::bail!("exchange {exchange:?} has no queue bound for key {routing_key:?}")
        }
        Confirmation::Nack(_) => anyhow::bail!("the broker refused the publish to {exchange:?}"),
    }
}

fn decision_name(decision: &Decision) -> &'static str {
    match decision {
        Decision::Ack => "ok",
        Decision::Retry { .. } => "retry",
        Decision::Park { reason, .. } => reason.as_str(),
    }
}
