//! `failed discard`: the selected parked messages removed for good, one audit line each.

use std::time::SystemTime;

use anyhow::Context as _;
use lapin::Connection;
use lapin::options::BasicAckOptions;

use super::parked::Parked;
use super::progress::{Reported, Watch};
use super::select::{Selection, Walk};
use super::{AUDIT_TARGET, Report};
use crate::broker;
use crate::config::Config;

/// Messages acked per round before waiting for the broker to take the acks.
const BATCH: usize = 256;

/// Removes the selected messages of `<queue>@failed` (only those present when it starts) for
/// good and logs one audit line per message once the broker has taken its ack. Messages not
/// selected stay parked in their order. Progress goes to `watch` after each round; once its
/// token is cancelled the discard stops before the next round (`Report::cancelled`).
pub async fn discard(
    config: &Config,
    queue: &str,
    selection: &Selection,
    watch: Watch<'_>,
) -> anyhow::Result<Report> {
    let failed = super::subscription(config, queue)?.failed_queue();
    let conn = broker::connect_once(&config.broker.urls, "worker-host failed discard").await?;
    let report = discard_on(&conn, (queue, &failed), selection, watch).await;
    let _ = conn.close(200, "done".into()).await;
    report
}

async fn discard_on(
    conn: &Connection,
    (queue, failed): (&str, &str),
    selection: &Selection,
    watch: Watch<'_>,
) -> anyhow::Result<Report> {
    let mut walk = Walk::open(conn, failed, selection).await?;
    watch.progress.begin(failed, walk.total());
    let mut reported = Reported::default();
    let mut done = 0u64;
    let mut cancelled = false;
    loop {
        if watch.cancel.is_cancelled() {
            cancelled = true;
            break;
        }
        match round(&mut walk, queue, failed).await {
            Ok(0) => {
                reported.advance(&watch, walk.examined(), 0);
                break;
            }
            Ok(n) => {
                done += n;
                reported.advance(&watch, walk.examined(), n);
            }
            Err(err) => {
                walk.close().await;
                return Err(err.context(format!(
                    "discard stopped after removing {done} message(s); the others are still in \
                     {failed}"
                )));
            }
        }
    }
    // Ids not reached before a cancel are not known to be missing.
    let missing = if cancelled {
        Vec::new()
    } else {
        walk.missing()
    };
    walk.close().await;
    Ok(Report {
        done,
        missing,
        cancelled,
    })
}

/// Acks up to `BATCH` selected messages, waits until the broker has the acks, then logs them.
/// Returns how many it removed (0 when the walk is over).
async fn round(walk: &mut Walk<'_>, queue: &str, failed: &str) -> anyhow::Result<u64> {
    let mut acked = Vec::new();
    let settled = match ack_batch(walk, failed, &mut acked).await {
        Ok(()) if acked.is_empty() => return Ok(0),
        Ok(()) => walk.settled().await,
        Err(err) => Err(err),
    };
    let confirmed = settled.is_ok();
    audit(&acked, queue, confirmed);
    settled.map(|()| acked.len() as u64)
}

/// Fetches and acks selected messages until `BATCH` or the end of the walk; `acked` gets each
/// one whose ack was sent, also when a later one fails.
async fn ack_batch(
    walk: &mut Walk<'_>,
    failed: &str,
    acked: &mut Vec<Parked>,
) -> anyhow::Result<()> {
    while acked.len() < BATCH {
        let Some(picked) = walk.next().await? else {
            break;
        };
        let sent = picked
            .message
            .delivery
            .acker
            .ack(BasicAckOptions::default())
            .await
            .with_context(|| format!("acking a message in {failed}"))?;
        if !sent {
            anyhow::bail!("the channel of {failed} closed before a message was acked");
        }
        acked.push(picked.parked);
    }
    Ok(())
}

/// One audit line per discarded message (always printed: main enables `AUDIT_TARGET`). When
/// the broker did not confirm the acks, the lines say so at warn: those may still be parked.
fn audit(acked: &[Parked], queue: &str, confirmed: bool) {
    let time = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
    for parked in acked {
        let id = parked.id.as_str();
        let reason = parked.reason.as_deref().unwrap_or("");
        let cause = parked.cause.as_deref().unwrap_or("");
        let time = time.as_str();
        if confirmed {
            tracing::info!(target: AUDIT_TARGET, id, queue, reason, cause, time, "discarded");
        } else {
            tracing::warn!(
                target: AUDIT_TARGET,
                id,
                queue,
                reason,
                cause,
                time,
                "discard sent but not confirmed: the message may still be parked"
            );
        }
    }
}
