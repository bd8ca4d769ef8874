//! `worker-host failed list|replay|discard|dry-run`: looking at the messages parked in
//! `<queue>@failed`, moving the selected ones back to their queue, removing them for good, or
//! trying a plugin on them with every effect captured.

mod discard;
mod dry_run;
mod edit;
mod fingerprint;
mod groups;
mod list;
mod parked;
mod progress;
mod replay;
mod scan;
mod search;
mod select;

use crate::config::{Config, Subscription};

pub use discard::discard;
pub use dry_run::{Trial, dry_run};
pub use edit::{EDITED_FROM, Edit, Edited, edit};
pub use groups::{Group, Listing, groups};
pub use list::{PREVIEW_BYTES, list, list_with};
pub use parked::DIGEST_PREFIX;
pub use progress::{Progress, Unwatched, Watch};
pub use replay::replay;
pub use scan::Covered;
pub use search::{Found, search};
pub use select::Selection;

/// The `tracing` target of the audit lines (`failed discard` and `edit`, the console's jobs);
/// main always enables it.
pub const AUDIT_TARGET: &str = "worker_host::audit";

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
    /// Ids given with `--id` that no parked message had (the others were acted on).
    #[error("no message in {queue} has the id{} {}", if ids.len() == 1 { "" } else { "s" }, quoted(ids))]
    NotFound { queue: String, ids: Vec<String> },
    /// An edit that cannot be made (a JSON body no longer JSON, a header the broker owns).
    #[error("edit refused: {0}")]
    BadEdit(String),
    /// A search for nothing.
    #[error("search for what? give the text to find (an id, a header value, a word of a body)")]
    EmptySearch,
}

/// What `replay` or `discard` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Messages moved back (replay) or removed (discard).
    pub done: u64,
    /// Ids asked for that matched no message (none when cancelled: the rest were not read).
    pub missing: Vec<String>,
    /// Whether it stopped early on its watch's token; the messages not reached stay parked.
    pub cancelled: bool,
}

fn quoted(ids: &[String]) -> String {
    ids.iter()
        .map(|id| format!("{id:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every subscription queue with its failed queue and the messages parked there (`None` when
/// the failed queue is missing), asked over one connection.
pub async fn counts(config: &Config) -> anyhow::Result<Vec<(String, String, Option<u64>)>> {
    let conn = crate::broker::connect_once(&config.broker.urls, "worker-host console").await?;
    let mut out = Vec::new();
    for sub in &config.subscriptions {
        let failed = sub.failed_queue();
        let count = select::count(&conn, &failed).await.ok();
        out.push((sub.queue.clone(), failed, count));
    }
    let _ = conn.close(200, "done".into()).await;
    Ok(out)
}

/// The subscription of `queue`, or a user error listing the ones there are.
pub(crate) fn subscription<'a>(
    config: &'a Config,
    queue: &str,
) -> Result<&'a Subscription, FailedError> {
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
