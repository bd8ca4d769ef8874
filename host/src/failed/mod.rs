//! `worker-host failed list|replay|discard`: looking at the messages parked in
//! `<queue>@failed`, moving the selected ones back to their queue, or removing them for good.

mod discard;
mod list;
mod parked;
mod replay;
mod select;

use crate::cli::FailedCommand;
use crate::config::{Config, Subscription, failed_queue_name};
use crate::stdout::say;

pub use discard::discard;
pub use list::{PREVIEW_BYTES, list};
pub use parked::DIGEST_PREFIX;
pub use replay::replay;
pub use select::Selection;

/// The `tracing` target of the audit lines `failed discard` writes; main always enables it.
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
}

/// What `replay` or `discard` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Messages moved back (replay) or removed (discard).
    pub done: u64,
    /// Ids asked for that matched no message.
    pub missing: Vec<String>,
}

/// Runs a `failed` command, printing to stdout. Ids that matched nothing are an error
/// (`FailedError::NotFound`, exit 1) returned after acting on the others.
pub async fn run(command: FailedCommand) -> anyhow::Result<()> {
    match command {
        FailedCommand::List {
            config,
            queue,
            limit,
        } => {
            let config = load_config(&config.path)?;
            let mut out = std::io::stdout().lock();
            list(&config, &queue, &Selection::limit(limit), &mut out).await?;
            Ok(())
        }
        FailedCommand::Replay {
            config,
            queue,
            limit,
            ids,
            reason,
        } => {
            let config = load_config(&config.path)?;
            let selection = match reason {
                _ if !ids.is_empty() => Selection::ids(ids),
                Some(reason) => Selection::Reason(reason),
                None => Selection::limit(limit),
            };
            let report = replay(&config, &queue, &selection).await?;
            let failed = failed_queue_name(&queue);
            say!(
                "moved {} from {failed} back to {queue}",
                messages(report.done)
            );
            finish(failed, report)
        }
        FailedCommand::Discard {
            config,
            queue,
            ids,
            all,
        } => {
            let config = load_config(&config.path)?;
            let selection = if all {
                Selection::All
            } else {
                Selection::ids(ids)
            };
            let report = discard(&config, &queue, &selection).await?;
            let failed = failed_queue_name(&queue);
            say!("discarded {} from {failed}", messages(report.done));
            finish(failed, report)
        }
    }
}

fn messages(n: u64) -> String {
    format!("{n} message{}", if n == 1 { "" } else { "s" })
}

/// Ok, or the ids that matched nothing as a user error.
fn finish(failed: String, report: Report) -> anyhow::Result<()> {
    if report.missing.is_empty() {
        return Ok(());
    }
    Err(FailedError::NotFound {
        queue: failed,
        ids: report.missing,
    }
    .into())
}

fn quoted(ids: &[String]) -> String {
    ids.iter()
        .map(|id| format!("{id:?}"))
        .collect::<Vec<_>>()
        .join(", ")
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
