//! `failed replay`: the selected parked messages back to their queue alone, attempts reset.

use anyhow::Context as _;
use futures_util::future::join_all;
use lapin::options::BasicAckOptions;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection};

use super::Report;
use super::progress::{Reported, Watch};
use super::select::{Picked, Selection, Walk};
use crate::broker;
use crate::broker::{PERSISTENT, PublishError, publish_confirmed};
use crate::config::Config;
use crate::headers;

/// Messages replayed per round: published together, each acked once confirmed.
const BATCH: usize = 64;

/// Moves the selected messages of `<queue>@failed` (only those present when it starts) back to
/// `queue` alone (exchanges.master, routing key `queue`), with `worker-attempts` reset to 0,
/// broker-owned headers dropped and every other header and property kept; each is acked only
/// after its publish is confirmed. Messages not selected stay parked in their order. Messages
/// parked again while it runs are behind the ones counted, so it always ends. Progress goes to
/// `watch` after each batch; once its token is cancelled the replay stops before the next batch
/// (`Report::cancelled`), and the rest stay parked.
pub async fn replay(
    config: &Config,
    queue: &str,
    selection: &Selection,
    watch: Watch<'_>,
) -> anyhow::Result<Report> {
    let failed = super::subscription(config, queue)?.failed_queue();
    let conn = broker::connect_once(&config.broker.urls, "worker-host failed replay").await?;
    let target = (config.exchanges.master.as_str(), queue, failed.as_str());
    let report = replay_on(&conn, target, selection, watch).await;
    let _ = conn.close(200, "done".into()).await;
    report
}

/// `(master, queue, failed)`: where replayed messages go, and where they come from.
type Target<'a> = (&'a str, &'a str, &'a str);

async fn replay_on(
    conn: &Connection,
    (master, queue, failed): Target<'_>,
    selection: &Selection,
    watch: Watch<'_>,
) -> anyhow::Result<Report> {
    let mut walk = Walk::open(conn, failed, selection).await?;
    let publisher = broker::confirm_channel(conn)
        .await
        .context("opening a publisher channel")?;
    watch.progress.begin(failed, walk.total());
    let mut reported = Reported::default();
    let mut done = 0u64;
    let mut cancelled = false;
    loop {
        if watch.cancel.is_cancelled() {
            cancelled = true;
            break;
        }
        let batch = match next_batch(&mut walk).await {
            Ok(batch) if batch.is_empty() => {
                reported.advance(&watch, walk.examined(), 0);
                break;
            }
            Ok(batch) => batch,
            Err(err) => {
                walk.close().await;
                return Err(err.context(stopped(done, failed)));
            }
        };
        // Mandatory: if `queue` lost its binding the publish fails instead of vanishing.
        let sends = batch.iter().map(|p| {
            let delivery = &p.message.delivery;
            let props = replayed(&delivery.properties);
            publish_confirmed(&publisher, master, queue, &delivery.data, props, true)
        });
        let results = join_all(sends).await;
        let acked = ack_sent(&walk, batch, results, failed).await;
        done += acked.count;
        reported.advance(&watch, walk.examined(), acked.count);
        if let Some(err) = acked.error {
            walk.close().await;
            return Err(err.context(stopped(done, failed)));
        }
    }
    // Ids not reached before a cancel are not known to be missing.
    let missing = if cancelled {
        Vec::new()
    } else {
        walk.missing()
    };
    walk.close().await;
    let _ = publisher.close(200, "replayed".into()).await;
    Ok(Report {
        done,
        missing,
        cancelled,
    })
}

async fn next_batch(walk: &mut Walk<'_>) -> anyhow::Result<Vec<Picked>> {
    let mut batch = Vec::new();
    while batch.len() < BATCH {
        match walk.next().await? {
            Some(picked) => batch.push(picked),
            None => break,
        }
    }
    Ok(batch)
}

/// What acking a published batch came to.
struct Acked {
    count: u64,
    error: Option<anyhow::Error>,
}

/// Acks the messages whose publish was confirmed and waits until the broker has them; the
/// others stay unacked and go back when the walk closes. Reports the first error.
async fn ack_sent(
    walk: &Walk<'_>,
    batch: Vec<Picked>,
    results: Vec<Result<(), PublishError>>,
    failed: &str,
) -> Acked {
    let mut acked = Acked {
        count: 0,
        error: None,
    };
    for (picked, result) in batch.into_iter().zip(results) {
        let acking = match result {
            Ok(()) => {
                picked
                    .message
                    .delivery
                    .acker
                    .ack(BasicAckOptions::default())
                    .await
            }
            Err(err) => {
                acked.error.get_or_insert(err.into());
                continue;
            }
        };
        match acking {
            Ok(true) => acked.count += 1,
            Ok(false) => {
                acked.error.get_or_insert(anyhow::anyhow!(
                    "the channel of {failed} closed before a replayed message was acked \
                     (it is back in {failed} and also in its queue)"
                ));
            }
            Err(err) => {
                acked
                    .error
                    .get_or_insert(anyhow::Error::new(err).context(format!(
                        "acking a replayed message in {failed} (it may be replayed twice)"
                    )));
            }
        }
    }
    if acked.count > 0
        && let Err(err) = walk.settled().await
    {
        acked.error.get_or_insert(err);
    }
    acked
}

fn stopped(done: u64, failed: &str) -> String {
    format!("replay stopped after moving {done} message(s); the others are still in {failed}")
}

/// The properties of a replayed message: all kept but the broker-owned headers (SPEC §3),
/// `worker-attempts` = 0, persistent.
pub(super) fn replayed(properties: &BasicProperties) -> BasicProperties {
    let kept: std::collections::BTreeMap<_, _> = properties
        .headers()
        .as_ref()
        .map(|h| h.inner().iter())
        .into_iter()
        .flatten()
        .filter(|(name, _)| !headers::broker_owned(name.as_str()))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    let mut headers = FieldTable::from(kept);
    headers.insert(headers::ATTEMPTS.into(), AMQPValue::LongLongInt(0));
    properties
        .clone()
        .with_headers(headers)
        .with_delivery_mode(PERSISTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_resets_attempts_drops_broker_headers_and_keeps_the_rest() {
        let mut h = FieldTable::default();
        h.insert(headers::ATTEMPTS.into(), AMQPValue::LongLongInt(4));
        h.insert(
            headers::ORIG_ROUTING_KEY.into(),
            headers::text("user.created"),
        );
        h.insert("x-death".into(), headers::text("not even an array"));
        h.insert("x-first-death-queue".into(), headers::text("q@retry.1s"));
        h.insert("x-last-death-reason".into(), headers::text("expired"));
        h.insert("x-deathly".into(), headers::text("kept"));
        let props = BasicProperties::default()
            .with_message_id("m".into())
            .with_headers(h);
        let out = replayed(&props);
        let rendered: std::collections::BTreeMap<_, _> =
            headers::render_headers(out.headers().as_ref())
                .into_iter()
                .collect();
        assert_eq!(rendered[headers::ATTEMPTS], "0");
        assert_eq!(rendered[headers::ORIG_ROUTING_KEY], "user.created");
        assert_eq!(rendered["x-deathly"], "kept");
        assert_eq!(rendered.len(), 3, "{rendered:?}");
        assert_eq!(out.message_id().as_ref().map(|s| s.as_str()), Some("m"));
        assert_eq!(*out.delivery_mode(), Some(2));
    }
}
