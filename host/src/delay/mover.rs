//! The mover: consumes the ready queue and republishes each due message to the exchange and
//! routing key it was published for, confirmed before the ack.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures_util::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions,
};
use lapin::types::{AMQPValue, FieldArray, FieldTable};
use lapin::{Acker, BasicProperties, Connection};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn};

use super::{
    DUE_HEADER, DelayLevels, Delayer, ERROR_HEADER, EXCHANGE_HEADER, ROUTING_KEY_HEADER, now_ms,
};
use crate::broker::{self, Blocked, PERSISTENT, Publisher};
use crate::headers::{self, DEATH_SUMMARY, text_of};

/// Due messages taken at once: their republishes overlap.
const PREFETCH: u16 = 64;

impl Delayer {
    /// [`Delayer::run_mover`] for the life of `conn`: restarted a second after it fails while the
    /// connection is up; returns when `cancel` fires or the connection is gone (the service
    /// reconnects and calls it again).
    pub async fn mover_loop(
        &self,
        conn: &Arc<Connection>,
        blocked: &Blocked,
        cancel: CancellationToken,
    ) {
        loop {
            match self.run_mover(conn, blocked, cancel.clone()).await {
                Ok(()) => return,
                Err(err) if !conn.status().connected() => {
                    warn!("delay mover stopped with the connection: {err:#}");
                    return;
                }
                Err(err) => error!("delay mover stopped: {err:#}; restarting in 1s"),
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    /// Delivers due messages until `cancel` fires (Ok) or the connection fails (Err): see
    /// [`Mover::run`].
    pub async fn run_mover(
        &self,
        conn: &Arc<Connection>,
        blocked: &Blocked,
        cancel: CancellationToken,
    ) -> anyhow::Result<()> {
        Mover { levels: self }.run(conn, blocked, cancel).await
    }
}

/// The mover of one delay topology: consumes its ready queue, parks what it cannot deliver in
/// its dead queue.
struct Mover<'a> {
    levels: &'a DelayLevels,
}

impl Mover<'_> {
    /// Delivers due messages until `cancel` fires (Ok) or the connection fails (Err). Each is
    /// republished, persistent and confirmed, to its original exchange with its original
    /// routing key, properties and headers (minus the delay bookkeeping), then acked. One whose
    /// exchange is gone is parked in the dead queue with `x-delay-error`; one that cannot be
    /// published for another reason is left for the broker to redeliver. Nothing is published
    /// while `blocked`. Returns once every message it took is settled.
    async fn run(
        &self,
        conn: &Arc<Connection>,
        blocked: &Blocked,
        cancel: CancellationToken,
    ) -> anyhow::Result<()> {
        let ready = self.levels.ready();
        let (channel, deliveries) = consume_ready(conn, &ready).await?;
        let publisher = Publisher::new(conn.clone(), blocked.clone());
        let tag = deliveries.tag();
        debug!(queue = %ready, "delay mover consuming");
        let result = match self.move_all(deliveries, &publisher, &cancel).await {
            Err(err) => Err(anyhow::anyhow!("consuming {ready}: {err}")),
            Ok(()) if cancel.is_cancelled() => Ok(()),
            Ok(()) => Err(anyhow::anyhow!(
                "the broker cancelled the consumer of {ready}"
            )),
        };
        if result.is_ok() {
            let _ = channel
                .basic_cancel(tag, BasicCancelOptions::default())
                .await;
        }
        let _ = channel.close(200, "bye".into()).await;
        publisher.close().await;
        result
    }

    /// Moves deliveries until `cancel` fires or they end. Up to PREFETCH messages are moved at
    /// once; when `cancel` fires no new delivery is taken and the ones in flight finish. Err
    /// carries the error that ended the deliveries.
    async fn move_all(
        &self,
        deliveries: lapin::Consumer,
        publisher: &Publisher,
        cancel: &CancellationToken,
    ) -> Result<(), lapin::Error> {
        let failure = std::sync::Mutex::new(None::<lapin::Error>);
        deliveries
            .take_until(cancel.cancelled())
            .take_while(|next| {
                if let Err(err) = next {
                    // A poisoned lock only loses the error text.
                    if let Ok(mut failure) = failure.lock() {
                        *failure = Some(err.clone());
                    }
                }
                std::future::ready(next.is_ok())
            })
            .filter_map(|next| std::future::ready(next.ok()))
            .for_each_concurrent(usize::from(PREFETCH), |delivery| {
                self.move_one(delivery, publisher)
            })
            .await;
        match failure.into_inner().ok().flatten() {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    /// Delivers one due message and settles it. Never fails: problems are logged.
    async fn move_one(&self, delivery: Delivery, publisher: &Publisher) {
        let Delivery {
            properties,
            data,
            acker,
            ..
        } = delivery;
        let message_id = properties
            .message_id()
            .as_ref()
            .map(|s| s.as_str().to_string())
            .unwrap_or_default();
        let moved = self
            .forward(publisher, &properties, &data, &message_id)
            .await;
        settle(&acker, moved, &message_id).await;
    }

    /// Republishes a due message to the exchange and routing key it was published for; one
    /// that does not say where it was going is parked.
    async fn forward(
        &self,
        publisher: &Publisher,
        properties: &BasicProperties,
        data: &[u8],
        message_id: &str,
    ) -> anyhow::Result<()> {
        let headers = properties.headers().as_ref();
        let target =
            header_text(headers, EXCHANGE_HEADER).zip(header_text(headers, ROUTING_KEY_HEADER));
        let Some((exchange, key)) = &target else {
            let why = format!("no {EXCHANGE_HEADER} / {ROUTING_KEY_HEADER} header");
            return self.park(publisher, properties, data, &why).await;
        };
        let late_ms = late_ms(headers);
        let props = restored(properties, &self.levels.prefix);
        self.deliver(publisher, exchange, key, data, props, properties)
            .await?;
        debug!(
            exchange,
            routing_key = key,
            message_id,
            late_ms,
            "delayed message delivered"
        );
        Ok(())
    }

    /// Publishes to the target with the restored `props`; when the target exchange turns out
    /// to be missing, parks the message as `received` (delay headers kept for diagnosis).
    async fn deliver(
        &self,
        publisher: &Publisher,
        exchange: &str,
        key: &str,
        body: &[u8],
        props: BasicProperties,
        received: &BasicProperties,
    ) -> anyhow::Result<()> {
        // Not mandatory: at its due time a delayed message behaves like a plain publish.
        let channel = publisher.confirm_channel().await?;
        let err = match broker::publish_confirmed(&channel, exchange, key, body, props, false).await
        {
            Ok(()) => return Ok(()),
            Err(err) => err,
        };
        let exists = broker::exchange_exists(publisher.conn(), exchange)
            .await
            .with_context(|| format!("checking exchange {exchange}"))?;
        if exchange.is_empty() || exists {
            return Err(err.into());
        }
        warn!(
            exchange,
            routing_key = key,
            "delayed message for a missing exchange; parked in {}",
            self.levels.dead()
        );
        let why = format!("exchange {exchange:?} does not exist");
        self.park(publisher, received, body, &why).await
    }

    /// Puts a message the mover cannot deliver into the dead queue, with its headers and why.
    async fn park(
        &self,
        publisher: &Publisher,
        props: &BasicProperties,
        body: &[u8],
        why: &str,
    ) -> anyhow::Result<()> {
        let mut headers = props.headers().clone().unwrap_or_default();
        headers.insert(ERROR_HEADER.into(), headers::text(why));
        let props = props
            .clone()
            .with_headers(headers)
            .with_delivery_mode(PERSISTENT);
        let dead = self.levels.dead();
        let channel = publisher.confirm_channel().await?;
        broker::publish_confirmed(&channel, "", &dead, body, props, true)
            .await
            .with_context(|| format!("parking a delayed message in {dead}"))
    }
}

/// Opens the mover's channel with its prefetch and consumes the ready queue.
async fn consume_ready(
    conn: &Connection,
    ready: &str,
) -> anyhow::Result<(lapin::Channel, lapin::Consumer)> {
    let channel = conn
        .create_channel()
        .await
        .context("opening the mover's channel")?;
    channel
        .basic_qos(PREFETCH, BasicQosOptions::default())
        .await
        .context("setting the mover's prefetch")?;
    let deliveries = channel
        .basic_consume(
            ready.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .with_context(|| format!("consuming {ready}"))?;
    Ok((channel, deliveries))
}

/// Acks a moved message; one that was not moved is nacked back to the broker to redeliver.
async fn settle(acker: &Acker, moved: anyhow::Result<()>, message_id: &str) {
    match moved {
        Ok(()) => {
            if let Err(err) = acker.ack(BasicAckOptions::default()).await {
                // The channel is gone: the broker redelivers, which may duplicate the publish.
                error!(message_id, "delay mover: ack failed: {err}");
            }
        }
        Err(err) => {
            error!(
                message_id,
                "delay mover: not delivered, the broker will redeliver: {err:#}"
            );
            // Back off a little so a broken route does not spin.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let _ = acker
                .nack(BasicNackOptions {
                    requeue: true,
                    ..BasicNackOptions::default()
                })
                .await;
        }
    }
}

/// How late a due message is moved, in milliseconds, from its due-time header.
fn late_ms(headers: Option<&FieldTable>) -> Option<i64> {
    headers
        .and_then(|h| h.inner().get(DUE_HEADER))
        .and_then(|v| match v {
            AMQPValue::LongLongInt(due) => Some(now_ms() - due),
            _ => None,
        })
}

/// The properties a delayed message was published with: the delay headers removed, and the
/// broker's dead-letter records of the delay queues (`x-death` entries, first/last-death
/// summaries) dropped, so the consumer sees the message as published. Persistent.
pub(crate) fn restored(properties: &BasicProperties, prefix: &str) -> BasicProperties {
    let Some(original) = properties.headers().as_ref() else {
        return properties.clone().with_delivery_mode(PERSISTENT);
    };
    let is_delay_queue = |v: &AMQPValue| {
        text_of(v).is_some_and(|q| {
            q.strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with('.'))
        })
    };
    let mut headers = FieldTable::default();
    let mut only_delay_deaths = false;
    for (name, value) in original.inner() {
        match name.as_str() {
            EXCHANGE_HEADER | ROUTING_KEY_HEADER | DUE_HEADER => {}
            "x-death" => {
                let kept: Vec<AMQPValue> = match value {
                    AMQPValue::FieldArray(deaths) => deaths
                        .as_slice()
                        .iter()
                        .filter(|d| match d {
                            AMQPValue::FieldTable(t) => {
                                !t.inner().get("queue").is_some_and(is_delay_queue)
                            }
                            _ => true,
                        })
                        .cloned()
                        .collect(),
                    _ => vec![value.clone()],
                };
                only_delay_deaths = kept.is_empty();
                if !kept.is_empty() {
                    headers.insert(name.clone(), AMQPValue::FieldArray(FieldArray::from(kept)));
                }
            }
            _ => {
                headers.insert(name.clone(), value.clone());
            }
        }
    }
    // When every death record was a delay hop, the summaries describe delay hops too.
    if only_delay_deaths {
        let inner: std::collections::BTreeMap<_, _> = headers
            .inner()
            .iter()
            .filter(|(name, _)| !DEATH_SUMMARY.contains(&name.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        headers = FieldTable::from(inner);
    }
    properties
        .clone()
        .with_headers(headers)
        .with_delivery_mode(PERSISTENT)
}

fn header_text(headers: Option<&FieldTable>, name: &str) -> Option<String> {
    headers?
        .inner()
        .get(name)
        .and_then(text_of)
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn death(queue: &str) -> AMQPValue {
        let mut t = FieldTable::default();
        t.insert("queue".into(), headers::text(queue));
        t.insert("reason".into(), headers::text("expired"));
        AMQPValue::FieldTable(t)
    }

    #[test]
    fn restores_what_was_published() {
        let mut h = FieldTable::default();
        h.insert("mine".into(), headers::text("kept"));
        h.insert(EXCHANGE_HEADER.into(), headers::text("e"));
        h.insert(ROUTING_KEY_HEADER.into(), headers::text("k"));
        h.insert(DUE_HEADER.into(), AMQPValue::LongLongInt(1));
        h.insert(
            "x-death".into(),
            AMQPValue::FieldArray(FieldArray::from(vec![
                death("worker.delay.1s"),
                death("worker.delay.4s"),
            ])),
        );
        h.insert(
            "x-first-death-queue".into(),
            headers::text("worker.delay.4s"),
        );
        h.insert("x-first-death-reason".into(), headers::text("expired"));
        let props = BasicProperties::default()
            .with_message_id("m1".into())
            .with_headers(h);
        let out = restored(&props, "worker.delay");
        let names: Vec<String> = out
            .headers()
            .as_ref()
            .map(|h| h.inner().keys().map(|k| k.as_str().to_string()).collect())
            .unwrap_or_default();
        assert_eq!(names, vec!["mine".to_string()]);
        assert_eq!(out.message_id().as_ref().map(|s| s.as_str()), Some("m1"));
        assert_eq!(*out.delivery_mode(), Some(2));
    }

    #[test]
    fn keeps_foreign_death_records() {
        let mut h = FieldTable::default();
        h.insert(
            "x-death".into(),
            AMQPValue::FieldArray(FieldArray::from(vec![
                death("worker.delay.1s"),
                death("q@retry.30s"),
            ])),
        );
        h.insert("x-first-death-queue".into(), headers::text("q@retry.30s"));
        let out = restored(&BasicProperties::default().with_headers(h), "worker.delay");
        let h = out.headers().clone().unwrap_or_default();
        let Some(AMQPValue::FieldArray(deaths)) = h.inner().get("x-death") else {
            panic!("x-death dropped");
        };
        assert_eq!(deaths.as_slice().len(), 1);
        assert!(h.inner().contains_key("x-first-death-queue"));
    }
}
