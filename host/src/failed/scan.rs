//! A bounded read of the parked messages of one queue or of every queue, each left in place:
//! what the failure groups and the search of the console are built on. Each queue is read from
//! its head, at most `per_queue` messages, and the answer says how far each read went.

use serde::Serialize;

use super::select::{Picked, Selection, Walk};
use crate::broker;
use crate::config::{Config, Subscription};

/// What part of one failed queue a scan covered.
#[derive(Debug, Clone, Serialize)]
pub struct Covered {
    /// The subscription queue and its failed queue.
    pub queue: String,
    pub failed_queue: String,
    /// Messages the failed queue held when the scan reached it (`None`: it could not be read).
    pub depth: Option<u64>,
    /// Messages read, from the head of the queue.
    pub scanned: u64,
    /// Whether every message it held was read.
    pub complete: bool,
    /// Why it could not be read (a failed queue not declared yet).
    pub error: Option<String>,
}

/// Reads the first `per_queue` messages of the failed queue of `only` (every subscription when
/// `None`) over one connection, handing each to `visit` with its subscription queue; every
/// message goes back in place. A queue that cannot be read is reported, not an error.
pub(crate) async fn scan<F>(
    config: &Config,
    only: Option<&str>,
    per_queue: u64,
    mut visit: F,
) -> anyhow::Result<Vec<Covered>>
where
    F: FnMut(&str, &Picked),
{
    let subs: Vec<&Subscription> = match only {
        Some(queue) => vec![super::subscription(config, queue)?],
        None => config.subscriptions.iter().collect(),
    };
    let conn = broker::connect_once(&config.broker.urls, "worker-host console scan").await?;
    let mut covered = Vec::new();
    for sub in subs {
        let failed = sub.failed_queue();
        let selection = Selection::First(per_queue);
        let read = async {
            let mut walk = Walk::open(&conn, &failed, &selection).await?;
            let mut scanned = 0;
            let result = async {
                while let Some(picked) = walk.next().await? {
                    scanned += 1;
                    visit(&sub.queue, &picked);
                }
                anyhow::Ok(())
            }
            .await;
            let depth = walk.depth();
            // Closing without acks puts every fetched message back where it was.
            walk.close().await;
            result.map(|()| (depth, scanned))
        }
        .await;
        covered.push(match read {
            Ok((depth, scanned)) => Covered {
                queue: sub.queue.clone(),
                failed_queue: failed,
                depth: Some(depth),
                scanned,
                complete: scanned >= depth,
                error: None,
            },
            Err(err) => Covered {
                queue: sub.queue.clone(),
                failed_queue: failed,
                depth: None,
                scanned: 0,
                complete: false,
                error: Some(format!("{err:#}")),
            },
        });
    }
    let _ = conn.close(200, "done".into()).await;
    Ok(covered)
}
