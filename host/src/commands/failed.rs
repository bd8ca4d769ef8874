//! `worker-host failed list|replay|discard`: the command line over `crate::failed`.

use super::load_config;
use crate::cli::FailedCommand;
use crate::config::failed_queue_name;
use crate::failed::{FailedError, Report, Selection, discard, list, replay};
use crate::stdout::say;

/// Runs a `failed` command, printing to stdout. Ids that matched nothing are an error
/// (`FailedError::NotFound`, exit 1) returned after acting on the others.
pub(super) async fn run(command: FailedCommand) -> anyhow::Result<()> {
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
