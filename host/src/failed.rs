//! `worker-host failed list|replay`: looking at and replaying the messages parked in
//! `<queue>@failed`.

use std::io::Write;

use anyhow::Context as _;
use futures_util::future::join_all;
use lapin::message::BasicGetMessage;
use lapin::options::{BasicAckOptions, BasicGetOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection};
use serde_json::{Map, Value, json};

use crate::broker;
use crate::cli::FailedCommand;
use crate::config::{Config, Subscription};
use crate::consumer::publish_confirmed;
use crate::outcome;

/// Bytes of the body shown by `failed list`.
pub const PREVIEW_BYTES: usize = 256;

/// Messages replayed per round: published together, each acked once confirmed.
const REPLAY_BATCH: usize = 64;

/// A `failed` request that cannot be served; a user error (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum FailedError {
    /// No subscription consumes that queue.
    #[error("{path} has no subscription for queue {queue:?}{hint}; its queues are: {known}")]
    UnknownQueue {
        queue: String,
        path: String,
        known: String,
        hint: String,
    },
    /// The failed queue is not on the broker (the topology was never declared).
    #[error(
        "queue {queue:?} does not exist on the broker: start the service or run \
         `worker-host topology --apply` first"
    )]
    Missing { queue: String },
}

/// Runs `failed list` or `failed replay`, printing to stdout.
pub async fn run(command: FailedCommand) -> anyhow::Result<()> {
    match command {
        FailedCommand::List {
            config,
            queue,
            limit,
        } => {
            let config = load_config(&config.path)?;
            let stdout = std::io::stdout();
            list(&config, &queue, limit, &mut stdout.lock()).await?;
            Ok(())
        }
        FailedCommand::Replay {
            config,
            queue,
            limit,
        } => {
            let config = load_config(&config.path)?;
            let moved = replay(&config, &queue, limit).await?;
            println!(
                "moved {moved} message{} from {} back to {queue}",
                if moved == 1 { "" } else { "s" },
                crate::config::failed_queue_name(&queue)
            );
            Ok(())
        }
    }
}

/// Writes up to `limit` messages of `<queue>@failed` to `out`, one JSON object per line, and
/// returns how many. The messages are fetched without ack and go back in place when the
/// channel closes, so listing never removes anything (they are marked redelivered).
pub async fn list(
    config: &Config,
    queue: &str,
    limit: Option<u64>,
    out: &mut impl Write,
) -> anyhow::Result<u64> {
    let sub = subscription(config, queue)?;
    let failed = sub.failed_queue();
    let conn = broker::connect_once(&config.broker.urls, "worker-host failed list").await?;
    let listed = async {
        let channel = conn.create_channel().await.context("opening a channel")?;
        let present = count(&conn, &failed).await?;
        let wanted = limit.map_or(present, |l| l.min(present));
        let mut listed = 0;
        while listed < wanted {
            let Some(message) = get(&channel, &failed).await? else {
                break;
            };
            let line = describe(&message);
            writeln!(out, "{line}").context("writing to stdout")?;
            listed += 1;
        }
        out.flush().context("writing to stdout")?;
        // Closing without acks puts every fetched message back where it was.
        let _ = channel.close(200, "listed".into()).await;
        anyhow::Ok(listed)
    }
    .await;
    let _ = conn.close(200, "done".into()).await;
    listed
}

/// Moves up to `limit` of the messages present in `<queue>@failed` when it starts back to
/// `queue` alone (exchanges.master, routing key `queue`), with `worker-attempts` reset to 0 and
/// every other header and property kept; each is acked only after its publish is confirmed.
/// Messages parked again while it runs are behind the ones counted, so it always ends. Returns
/// how many it moved.
pub async fn replay(config: &Config, queue: &str, limit: Option<u64>) -> anyhow::Result<u64> {
    let sub = subscription(config, queue)?;
    let failed = sub.failed_queue();
    let conn = broker::connect_once(&config.broker.urls, "worker-host failed replay").await?;
    let moved = replay_on(&conn, &config.exchanges.master, queue, &failed, limit).await;
    let _ = conn.close(200, "done".into()).await;
    moved
}

async fn replay_on(
    conn: &Connection,
    master: &str,
    queue: &str,
    failed: &str,
    limit: Option<u64>,
) -> anyhow::Result<u64> {
    let present = count(conn, failed).await?;
    let wanted = limit.map_or(present, |l| l.min(present));
    let channel = conn.create_channel().await.context("opening a channel")?;
    let publisher = conn.create_channel().await.context("opening a channel")?;
    publisher
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .context("enabling publisher confirms")?;
    let mut moved = 0u64;
    while moved < wanted {
        let round = (wanted - moved).min(REPLAY_BATCH as u64);
        let mut batch = Vec::new();
        for _ in 0..round {
            match get(&channel, failed).await? {
                Some(message) => batch.push(message),
                None => break,
            }
        }
        if batch.is_empty() {
            break;
        }
        let taken = batch.len();
        // Mandatory: if `queue` lost its binding the publish fails instead of vanishing.
        let sends = batch.iter().map(|m| {
            let props = replayed(&m.delivery.properties);
            publish_confirmed(&publisher, master, queue, &m.delivery.data, props, true)
        });
        let results = join_all(sends).await;
        let mut first_error = None;
        for (message, result) in batch.into_iter().zip(results) {
            match result {
                Ok(()) => {
                    message
                        .delivery
                        .acker
                        .ack(BasicAckOptions::default())
                        .await
                        .with_context(|| {
                            format!(
                                "acking a replayed message in {failed} (it may be replayed twice)"
                            )
                        })?;
                    moved += 1;
                }
                // Not acked: it goes back to the failed queue when the channel closes.
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        if let Some(err) = first_error {
            let _ = channel.close(200, "stopping".into()).await;
            return Err(anyhow::Error::new(err).context(format!(
                "replay stopped after moving {moved} message(s); the others are still in {failed}"
            )));
        }
        if taken < round as usize {
            break;
        }
    }
    let _ = channel.close(200, "replayed".into()).await;
    let _ = publisher.close(200, "replayed".into()).await;
    Ok(moved)
}

/// Loads the config, printing its warnings to stderr.
fn load_config(path: &std::path::Path) -> anyhow::Result<Config> {
    let (config, warnings) = Config::load(path)?;
    for warning in &warnings {
        eprintln!("{warning}");
    }
    Ok(config)
}

/// The subscription of `queue`, or a user error listing the ones there are.
fn subscription<'a>(config: &'a Config, queue: &str) -> Result<&'a Subscription, FailedError> {
    if let Some(sub) = config.subscription(queue) {
        return Ok(sub);
    }
    let hint = match queue.strip_suffix("@failed") {
        Some(base) if config.subscription(base).is_some() => {
            format!(" (give the subscription queue {base:?}, not its failed queue)")
        }
        _ => String::new(),
    };
    let known = config
        .subscriptions
        .iter()
        .map(|s| s.queue.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    Err(FailedError::UnknownQueue {
        queue: queue.to_string(),
        path: config.path.display().to_string(),
        known: if known.is_empty() {
            "(none)".into()
        } else {
            known
        },
        hint,
    })
}

/// Messages ready in `queue`, asked on a throwaway channel (a missing queue closes it).
async fn count(conn: &Connection, queue: &str) -> anyhow::Result<u64> {
    let channel = conn.create_channel().await.context("opening a channel")?;
    let declared = channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await;
    match declared {
        Ok(q) => {
            let _ = channel.close(200, "counted".into()).await;
            Ok(u64::from(q.message_count()))
        }
        Err(err)
            if err.to_string().contains("NOT_FOUND") || err.to_string().contains("NOT-FOUND") =>
        {
            Err(FailedError::Missing {
                queue: queue.to_string(),
            }
            .into())
        }
        Err(err) => Err(anyhow::Error::new(err).context(format!("reading the depth of {queue}"))),
    }
}

/// One message, fetched without ack.
async fn get(channel: &Channel, queue: &str) -> anyhow::Result<Option<BasicGetMessage>> {
    channel
        .basic_get(queue.into(), BasicGetOptions { no_ack: false })
        .await
        .with_context(|| format!("fetching from {queue}"))
}

/// The properties of a replayed message: all kept, `worker-attempts` = 0, persistent.
fn replayed(properties: &BasicProperties) -> BasicProperties {
    let mut headers = properties.headers().clone().unwrap_or_default();
    headers.insert(outcome::ATTEMPTS.into(), AMQPValue::LongLongInt(0));
    properties
        .clone()
        .with_headers(headers)
        .with_delivery_mode(2)
}

/// The JSON line `failed list` prints for one message.
fn describe(message: &BasicGetMessage) -> Value {
    let delivery = &message.delivery;
    let props = &delivery.properties;
    let headers = props.headers().as_ref();
    let mut worker = Map::new();
    for (name, value) in headers.map(|h| h.inner().iter()).into_iter().flatten() {
        if name.as_str().starts_with("worker-") {
            worker.insert(name.as_str().to_string(), header_json(value));
        }
    }
    let body = &delivery.data;
    let shown = &body[..body.len().min(PREVIEW_BYTES)];
    let mut line = json!({
        "message_id": props.message_id().as_ref().map(|s| s.as_str()),
        "routing_key": delivery.routing_key.as_str(),
        "original_routing_key": outcome::original_routing_key(headers, delivery.routing_key.as_str()),
        "headers": worker,
        "size": body.len(),
        "body_preview": String::from_utf8_lossy(shown),
        "body_truncated": body.len() > shown.len(),
    });
    let extra = [
        (
            "correlation_id",
            props
                .correlation_id()
                .as_ref()
                .map(|s| Value::from(s.as_str())),
        ),
        (
            "content_type",
            props
                .content_type()
                .as_ref()
                .map(|s| Value::from(s.as_str())),
        ),
        ("timestamp", props.timestamp().map(Value::from)),
    ];
    if let Value::Object(map) = &mut line {
        for (name, value) in extra {
            if let Some(value) = value {
                map.insert(name.to_string(), value);
            }
        }
    }
    line
}

/// A header as JSON: integers stay numbers, everything else is its text.
fn header_json(value: &AMQPValue) -> Value {
    match *value {
        AMQPValue::ShortShortInt(n) => Value::from(n),
        AMQPValue::ShortShortUInt(n) => Value::from(n),
        AMQPValue::ShortInt(n) => Value::from(n),
        AMQPValue::ShortUInt(n) => Value::from(n),
        AMQPValue::LongInt(n) => Value::from(n),
        AMQPValue::LongUInt(n) => Value::from(n),
        AMQPValue::LongLongInt(n) => Value::from(n),
        AMQPValue::Boolean(b) => Value::from(b),
        _ => Value::from(outcome::render(value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_resets_attempts_and_keeps_the_rest() {
        let mut h = FieldTable::default();
        h.insert(outcome::ATTEMPTS.into(), AMQPValue::LongLongInt(4));
        h.insert(
            outcome::ORIG_ROUTING_KEY.into(),
            outcome::text("user.created"),
        );
        let props = BasicProperties::default()
            .with_message_id("m".into())
            .with_headers(h);
        let out = replayed(&props);
        let rendered: std::collections::BTreeMap<_, _> =
            outcome::render_headers(out.headers().as_ref())
                .into_iter()
                .collect();
        assert_eq!(rendered[outcome::ATTEMPTS], "0");
        assert_eq!(rendered[outcome::ORIG_ROUTING_KEY], "user.created");
        assert_eq!(out.message_id().as_ref().map(|s| s.as_str()), Some("m"));
        assert_eq!(*out.delivery_mode(), Some(2));
    }

    #[test]
    fn header_numbers_stay_numbers() {
        assert_eq!(header_json(&AMQPValue::LongLongInt(3)), json!(3));
        assert_eq!(header_json(&outcome::text("x")), json!("x"));
    }
}
