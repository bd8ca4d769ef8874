//! `worker-host failed list|replay|discard|dry-run`: the command line over `crate::failed`.

use super::load_config;
use crate::cli::FailedCommand;
use crate::config::failed_queue_name;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use super::progress::{Shown, until_interrupted};
use crate::capability::Capabilities;
use crate::config::Config;
use crate::failed::{
    Edit, FailedError, Report, Selection, Trial, Watch, discard, dry_run, edit, list, replay,
};
use crate::metrics::Metrics;
use crate::plugin::CompilePriority;
use crate::service;
use crate::stdout::say;

/// Runs a `failed` command, printing to stdout; replay and discard show their progress on
/// stderr. Ids that matched nothing are an error (`FailedError::NotFound`, exit 1) returned
/// after acting on the others.
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
            let report = shown(Action::Replay, &config, &queue, &selection).await?;
            let failed = failed_queue_name(&queue);
            say!(
                "moved {} from {failed} back to {queue}",
                messages(report.done)
            );
            finish(failed, report)
        }
        FailedCommand::DryRun {
            config,
            queue,
            plugin,
            limit,
        } => {
            let config = load_config(&config.path)?;
            // Boxed: the plugin runtime's futures are deep, and this is one arm of many.
            Box::pin(try_plugin(&config, &queue, plugin, limit)).await
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
            let report = shown(Action::Discard, &config, &queue, &selection).await?;
            let failed = failed_queue_name(&queue);
            say!("discarded {} from {failed}", messages(report.done));
            finish(failed, report)
        }
        FailedCommand::Edit {
            config,
            queue,
            id,
            body,
            headers,
            remove_headers,
        } => {
            let config = load_config(&config.path)?;
            let change = Edit {
                body: body.as_deref().map(read_body).transpose()?,
                set_headers: headers.into_iter().collect(),
                remove_headers,
            };
            edit_one(&config, &queue, &id, &change).await
        }
    }
}

/// `failed edit`: the edited copy replayed, the original removed, said with the diff.
async fn edit_one(config: &Config, queue: &str, id: &str, change: &Edit) -> anyhow::Result<()> {
    let who = std::env::var("USER")
        .map_or_else(|_| "command line".into(), |u| format!("command line ({u})"));
    let done = edit(config, queue, id, change, &who).await?;
    say!("replayed {id} to {queue} as {} ({})", done.id, done.diff);
    Ok(())
}

#[derive(Clone, Copy)]
enum Action {
    Replay,
    Discard,
}

/// Replays or discards with the progress on stderr, stopping between batches on Ctrl-C.
async fn shown(
    action: Action,
    config: &Config,
    queue: &str,
    selection: &Selection,
) -> anyhow::Result<Report> {
    let shown = Shown::new(match action {
        Action::Replay => "replay",
        Action::Discard => "discard",
    });
    let cancel = CancellationToken::new();
    let watch = Watch {
        progress: &shown,
        cancel: &cancel,
    };
    let report = match action {
        Action::Replay => until_interrupted(replay(config, queue, selection, watch), &cancel).await,
        Action::Discard => {
            until_interrupted(discard(config, queue, selection, watch), &cancel).await
        }
    };
    shown.finish();
    report
}

/// The bytes of a file, or of standard input for `-`.
fn read_body(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    if path == std::path::Path::new("-") {
        let mut body = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut body).context("reading stdin")?;
        return Ok(body);
    }
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// `failed dry-run`: loads the plugin and opens only what the subscription is granted, so an
/// embedded store of another subscription, held by the running service, is not needed.
async fn try_plugin(
    config: &Config,
    queue: &str,
    plugin: Option<PathBuf>,
    limit: Option<u64>,
) -> anyhow::Result<()> {
    let sub = crate::failed::subscription(config, queue)?;
    let runtime = service::runtime_for(config, CompilePriority::Foreground)?;
    let path = plugin.unwrap_or_else(|| sub.plugin_path.clone());
    let plugin = runtime.load_file_async(&path).await?;
    let mut granted_only = config.clone();
    granted_only
        .kv
        .retain(|k| sub.grants.kv.as_ref() == Some(&k.name));
    granted_only
        .sql
        .retain(|d| sub.grants.sql.as_ref() == Some(&d.name));
    let capabilities = Capabilities::open(&granted_only, Arc::new(Metrics::new()))
        .await
        .context(
            "opening the subscription's stores (an embedded key-value store opens in one \
             process at a time: while the service runs, dry-run from its console)",
        )?;
    let granted = capabilities.grant(sub);
    let trial = Trial {
        plugin: &plugin,
        granted: &granted,
    };
    let mut out = std::io::stdout().lock();
    dry_run(config, queue, &trial, &Selection::limit(limit), &mut out).await?;
    Ok(())
}

fn messages(n: u64) -> String {
    format!("{n} message{}", if n == 1 { "" } else { "s" })
}

/// Ok, or a stop on Ctrl-C, or the ids that matched nothing, as a user error.
fn finish(failed: String, report: Report) -> anyhow::Result<()> {
    if report.cancelled {
        anyhow::bail!("interrupted: the messages not reached are still in {failed}");
    }
    if report.missing.is_empty() {
        return Ok(());
    }
    Err(FailedError::NotFound {
        queue: failed,
        ids: report.missing,
    }
    .into())
}
