//! `failed list`: every parked message as one JSON object per line, left in place.

use std::io::Write;

use anyhow::Context as _;
use lapin::BasicProperties;
use serde_json::{Map, Value, json};

use super::parked::{Parked, header_json};
use super::select::{Picked, Selection, Walk};
use crate::broker;
use crate::config::Config;
use crate::headers;

/// Bytes of the body shown by `failed list`.
pub const PREVIEW_BYTES: usize = 256;

/// Writes the selected messages of `<queue>@failed` to `out`, one JSON object per line, and
/// returns how many. The messages are fetched without ack and go back in place when the walk
/// closes, so listing never removes or reorders anything (they are marked redelivered).
pub async fn list(
    config: &Config,
    queue: &str,
    selection: &Selection,
    out: &mut impl Write,
) -> anyhow::Result<u64> {
    list_with(config, queue, selection, PREVIEW_BYTES, out).await
}

/// [`list`] with the first `preview` bytes of each body (the console shows more).
pub async fn list_with(
    config: &Config,
    queue: &str,
    selection: &Selection,
    preview: usize,
    out: &mut impl Write,
) -> anyhow::Result<u64> {
    let failed = super::subscription(config, queue)?.failed_queue();
    let name = "worker-host failed list";
    print_each(
        config,
        (&failed, name),
        selection,
        out,
        |picked| async move { describe_picked(&picked, preview) },
    )
    .await
}

/// The JSON object `failed list` prints for a fetched message, with `preview` bytes of body.
pub(super) fn describe_picked(picked: &Picked, preview: usize) -> Value {
    let delivery = &picked.message.delivery;
    let shown = Shown {
        routing_key: delivery.routing_key.as_str(),
        properties: &delivery.properties,
        body: &delivery.data,
    };
    describe(&picked.parked, &shown, preview)
}

/// Walks the selected messages of the failed queue `failed`, writing the JSON line `line`
/// makes of each to `out`, and returns how many. The messages are fetched without ack and go
/// back in place when the walk closes (they are marked redelivered). `name` names the
/// connection.
pub(super) async fn print_each<F, Fut>(
    config: &Config,
    (failed, name): (&str, &str),
    selection: &Selection,
    out: &mut impl Write,
    mut line: F,
) -> anyhow::Result<u64>
where
    F: FnMut(Picked) -> Fut,
    Fut: std::future::Future<Output = Value>,
{
    let conn = broker::connect_once(&config.broker.urls, name).await?;
    let printed = async {
        let mut walk = Walk::open(&conn, failed, selection).await?;
        let mut printed = 0;
        while let Some(picked) = walk.next().await? {
            let json = line(picked).await;
            if !written(writeln!(out, "{json}"))? {
                break;
            }
            printed += 1;
        }
        written(out.flush())?;
        // Closing without acks puts every fetched message back where it was.
        walk.close().await;
        anyhow::Ok(printed)
    }
    .await;
    let _ = conn.close(200, "done".into()).await;
    printed
}

/// Whether a write went through: false when the reader has gone (`failed list | head`), which
/// ends the listing without an error.
fn written(result: std::io::Result<()>) -> anyhow::Result<bool> {
    match result {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(err) => Err(err).context("writing to stdout"),
    }
}

/// What `failed list` shows of a fetched message.
struct Shown<'a> {
    routing_key: &'a str,
    properties: &'a BasicProperties,
    body: &'a [u8],
}

/// The JSON line `failed list` prints for one message.
/// A body that is not UTF-8 text also comes as `body_hex`.
fn describe(parked: &Parked, delivery: &Shown<'_>, preview: usize) -> Value {
    let props = delivery.properties;
    let headers = props.headers().as_ref();
    let all: Map<String, Value> = headers
        .map(|h| h.inner().iter())
        .into_iter()
        .flatten()
        .map(|(name, value)| (name.as_str().to_string(), header_json(value)))
        .collect();
    let body = delivery.body;
    let shown = &body[..body.len().min(preview)];
    let hex = std::str::from_utf8(shown)
        .is_err()
        .then(|| hex::encode(shown));
    let header = |name: &str| headers?.inner().get(name).and_then(headers::text_of);
    json!({
        "id": parked.id,
        "reason": parked.reason,
        "cause": parked.cause,
        "plugin": header(headers::PLUGIN),
        "plugin_sha256": header(headers::PLUGIN_SHA256),
        "routing_key": delivery.routing_key,
        "original_routing_key": headers::original_routing_key(headers, delivery.routing_key),
        "properties": properties(props),
        "headers": all,
        "size": body.len(),
        "body_preview": String::from_utf8_lossy(shown),
        "body_hex": hex,
        "body_truncated": body.len() > shown.len(),
    })
}

/// The properties that are set (headers aside), by their AMQP names in snake case.
fn properties(props: &BasicProperties) -> Map<String, Value> {
    let text = |s: &Option<lapin::types::ShortString>| s.as_ref().map(|s| Value::from(s.as_str()));
    let fields = [
        ("message_id", text(props.message_id())),
        ("correlation_id", text(props.correlation_id())),
        ("content_type", text(props.content_type())),
        ("content_encoding", text(props.content_encoding())),
        ("delivery_mode", props.delivery_mode().map(Value::from)),
        ("priority", props.priority().map(Value::from)),
        ("timestamp", props.timestamp().map(Value::from)),
        ("reply_to", text(props.reply_to())),
        ("expiration", text(props.expiration())),
        ("type", text(props.kind())),
        ("user_id", text(props.user_id())),
        ("app_id", text(props.app_id())),
        ("cluster_id", text(props.cluster_id())),
    ];
    fields
        .into_iter()
        .filter_map(|(name, value)| Some((name.to_string(), value?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_lists_only_what_is_set() {
        let props = BasicProperties::default()
            .with_message_id("m".into())
            .with_type("order".into())
            .with_delivery_mode(crate::broker::PERSISTENT)
            .with_timestamp(7);
        assert_eq!(
            Value::Object(properties(&props)),
            json!({"message_id": "m", "type": "order", "delivery_mode": 2, "timestamp": 7})
        );
    }

    /// The field names of the table that follows the JSON sample of docs/failed.md.
    fn documented_fields() -> Vec<String> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/failed.md");
        let doc = std::fs::read_to_string(&path).expect("docs/failed.md");
        let table = &doc[doc.find("| field | what |").expect("the field table")..];
        let mut fields = Vec::new();
        for line in table.lines().skip(2).take_while(|l| l.starts_with('|')) {
            let cell = line.split('|').nth(1).unwrap_or_default();
            fields.extend(
                cell.split(',')
                    .map(|f| f.trim().trim_matches('`').to_string()),
            );
        }
        fields
    }

    #[test]
    fn docs_failed_md_describes_every_field_of_a_listed_message() {
        let mut headers = lapin::types::FieldTable::default();
        headers.insert(headers::PLUGIN.into(), headers::text("order_close.wasm"));
        let props = BasicProperties::default().with_headers(headers);
        let parked = Parked {
            id: "m".into(),
            reason: Some("fail".into()),
            cause: Some("bad".into()),
            plugin: None,
            plugin_sha256: None,
        };
        // Not UTF-8, so `body_hex` is there too.
        let shown = Shown {
            routing_key: "orders",
            properties: &props,
            body: b"\xff\x00",
        };
        let Value::Object(line) = describe(&parked, &shown, PREVIEW_BYTES) else {
            panic!("an object")
        };
        let mut listed: Vec<String> = line.keys().cloned().collect();
        let mut documented = documented_fields();
        listed.sort();
        documented.sort();
        assert_eq!(
            listed, documented,
            "the fields of `failed list` against the table of docs/failed.md"
        );
    }
}
