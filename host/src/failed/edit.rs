//! `failed edit`: one parked message replayed as an edited copy (its body and headers
//! changed) under a new id, `<id>.edit<n>`, with a header naming the original; the original is
//! removed only once the broker has confirmed the copy, and one audit line says who changed
//! what.

use std::collections::BTreeMap;
use std::time::SystemTime;

use anyhow::Context as _;
use lapin::options::BasicAckOptions;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection};

use super::select::{Selection, Walk};
use super::{AUDIT_TARGET, FailedError};
use crate::broker::{self, publish_confirmed};
use crate::config::Config;
use crate::headers;

/// Header of an edited copy: the id of the message it was made from.
pub const EDITED_FROM: &str = "worker-edited-from";

/// What to change in a parked message.
#[derive(Debug, Clone, Default)]
pub struct Edit {
    /// The new body; `None` keeps it.
    pub body: Option<Vec<u8>>,
    /// Headers added or replaced, as text.
    pub set_headers: BTreeMap<String, String>,
    /// Headers removed.
    pub remove_headers: Vec<String>,
}

/// What an edit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edited {
    /// The id of the copy sent to the queue.
    pub id: String,
    /// What changed, in one line.
    pub diff: String,
}

/// Replays the first parked message of `queue` with the id `id` as an edited copy, and removes
/// it once the copy is confirmed; `who` names the editor in the audit line. A JSON message
/// (its content type says so, or its body parsed) must keep a JSON body.
pub async fn edit(
    config: &Config,
    queue: &str,
    id: &str,
    edit: &Edit,
    who: &str,
) -> anyhow::Result<Edited> {
    let failed = super::subscription(config, queue)?.failed_queue();
    let conn = broker::connect_once(&config.broker.urls, "worker-host failed edit").await?;
    let done = edit_on(&conn, (&config.exchanges.master, queue), &failed, id, edit).await;
    let _ = conn.close(200, "done".into()).await;
    let edited = done?;
    let time = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
    let (copy, diff) = (edited.id.as_str(), edited.diff.as_str());
    tracing::info!(target: AUDIT_TARGET, id, copy, queue, who, diff, time, "edited and replayed");
    Ok(edited)
}

async fn edit_on(
    conn: &Connection,
    (master, queue): (&str, &str),
    failed: &str,
    id: &str,
    edit: &Edit,
) -> anyhow::Result<Edited> {
    let selection = Selection::ids([id]);
    let mut walk = Walk::open(conn, failed, &selection).await?;
    let result: anyhow::Result<Edited> = async {
        let Some(picked) = walk.next().await? else {
            return Err(FailedError::NotFound {
                queue: failed.to_string(),
                ids: vec![id.to_string()],
            }
            .into());
        };
        let delivery = &picked.message.delivery;
        let (props, body, edited) = edited(&delivery.properties, &delivery.data, id, edit)?;
        let publisher = broker::confirm_channel(conn)
            .await
            .context("opening a publisher channel")?;
        // Mandatory: if `queue` lost its binding the publish fails instead of vanishing.
        publish_confirmed(&publisher, master, queue, &body, props, true)
            .await
            .with_context(|| format!("sending the edited copy; {id} is still in {failed}"))?;
        let _ = publisher.close(200, "edited".into()).await;
        let acked = picked
            .message
            .delivery
            .acker
            .ack(BasicAckOptions::default())
            .await
            .with_context(|| format!("removing {id} from {failed} after its copy was sent"))?;
        anyhow::ensure!(
            acked,
            "the channel of {failed} closed before {id} was removed: it is still parked, \
             and its edited copy {} was sent",
            edited.id
        );
        walk.settled().await?;
        Ok(edited)
    }
    .await;
    walk.close().await;
    result
}

/// The copy's properties and body, and what changed; a refused edit is an error.
fn edited(
    original: &BasicProperties,
    body: &[u8],
    id: &str,
    edit: &Edit,
) -> anyhow::Result<(BasicProperties, Vec<u8>, Edited)> {
    let new_body = edit.body.clone().unwrap_or_else(|| body.to_vec());
    if is_json(original, body)
        && let Err(err) = serde_json::from_slice::<serde_json::Value>(&new_body)
    {
        return Err(
            FailedError::BadEdit(format!("the body is JSON and must stay JSON: {err}")).into(),
        );
    }
    let mut headers: BTreeMap<_, _> = original
        .headers()
        .as_ref()
        .map(|h| h.inner().clone())
        .unwrap_or_default();
    let before = headers.clone();
    for name in edit.set_headers.keys().chain(&edit.remove_headers) {
        if headers::broker_owned(name) || name == EDITED_FROM {
            return Err(FailedError::BadEdit(format!("header {name:?} is not editable")).into());
        }
    }
    headers.retain(|name, _| !edit.remove_headers.iter().any(|r| r == name.as_str()));
    for (name, value) in &edit.set_headers {
        headers.insert(name.as_str().into(), headers::text(value));
    }
    let copy = copy_id(id);
    let diff = diff(&before, &headers, body, &new_body);
    headers.insert(EDITED_FROM.into(), headers::text(id));
    let props = super::replay::replayed(&original.clone().with_headers(FieldTable::from(headers)))
        .with_message_id(copy.as_str().into());
    Ok((props, new_body, Edited { id: copy, diff }))
}

/// Whether a body must stay JSON: its content type says JSON, or it parses as JSON.
fn is_json(props: &BasicProperties, body: &[u8]) -> bool {
    let typed = props
        .content_type()
        .as_ref()
        .is_some_and(|t| t.as_str().contains("json"));
    typed || serde_json::from_slice::<serde_json::Value>(body).is_ok()
}

/// `<id>.edit1` for an original, `<base>.edit<n+1>` for the copy `<base>.edit<n>`.
fn copy_id(id: &str) -> String {
    if let Some((base, n)) = id.rsplit_once(".edit")
        && let Ok(n) = n.parse::<u32>()
    {
        return format!("{base}.edit{}", n.saturating_add(1));
    }
    format!("{id}.edit1")
}

type Headers = BTreeMap<lapin::types::ShortString, lapin::types::AMQPValue>;

/// `body 120 -> 134 bytes; headers +a ~b -c`, or `no change`.
fn diff(before: &Headers, after: &Headers, old: &[u8], new: &[u8]) -> String {
    let mut parts = Vec::new();
    if old != new {
        parts.push(format!("body {} -> {} bytes", old.len(), new.len()));
    }
    let mut changes = Vec::new();
    for (name, value) in after {
        match before.get(name) {
            None => changes.push(format!("+{name}")),
            Some(old) if old != value => changes.push(format!("~{name}")),
            Some(_) => {}
        }
    }
    changes.extend(
        before
            .keys()
            .filter(|name| !after.contains_key(*name))
            .map(|name| format!("-{name}")),
    );
    if !changes.is_empty() {
        parts.push(format!("headers {}", changes.join(" ")));
    }
    if parts.is_empty() {
        return "no change".to_string();
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_numbered_from_the_original() {
        assert_eq!(copy_id("m-1"), "m-1.edit1");
        assert_eq!(copy_id("m-1.edit1"), "m-1.edit2");
        assert_eq!(copy_id("a.editor"), "a.editor.edit1");
    }

    #[test]
    fn an_edit_keeps_json_json_and_says_what_changed() {
        let mut h = FieldTable::default();
        h.insert("keep".into(), headers::text("k"));
        h.insert("drop".into(), headers::text("d"));
        h.insert(
            headers::ATTEMPTS.into(),
            lapin::types::AMQPValue::LongLongInt(3),
        );
        let props = BasicProperties::default().with_headers(h);
        let mut edit = Edit {
            body: Some(b"{not json".to_vec()),
            ..Edit::default()
        };
        let err = edited(&props, br#"{"a": 1}"#, "m", &edit).expect_err("refused");
        assert!(err.to_string().contains("must stay JSON"), "{err}");

        edit.body = Some(br#"{"a": 2}"#.to_vec());
        edit.set_headers.insert("new".into(), "n".into());
        edit.remove_headers.push("drop".into());
        let (props, body, done) = edited(&props, br#"{"a": 1}"#, "m", &edit).expect("edited");
        assert_eq!(body, br#"{"a": 2}"#);
        assert_eq!(done.id, "m.edit1");
        assert_eq!(done.diff, "body 8 -> 8 bytes; headers +new -drop");
        let rendered: BTreeMap<_, _> = headers::render_headers(props.headers().as_ref())
            .into_iter()
            .collect();
        assert_eq!(rendered[EDITED_FROM], "m");
        assert_eq!(rendered[headers::ATTEMPTS], "0");
        assert_eq!(
            props.message_id().as_ref().map(|s| s.as_str()),
            Some("m.edit1")
        );

        edit.set_headers.insert("x-death".into(), "no".into());
        assert!(edited(&props, b"x", "m", &edit).is_err(), "broker-owned");
    }
}
