//! The consumers running on one connection, each stoppable on its own.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::consumer::{Link, Subscriber};

/// How a consumer task ended: its queue, its start number, its result.
pub(super) type Ended = (String, u64, anyhow::Result<()>);

pub(super) struct Consumers {
    pub tasks: JoinSet<Ended>,
    pub running: HashMap<String, (u64, CancellationToken)>,
    next_id: u64,
}

impl Consumers {
    pub(super) fn new() -> Consumers {
        Consumers {
            tasks: JoinSet::new(),
            running: HashMap::new(),
            next_id: 0,
        }
    }

    /// Starts consuming for `subscriber`, stopping the consumer it replaces.
    pub(super) fn start(&mut self, link: &Link, subscriber: Arc<Subscriber>) {
        let queue = subscriber.sub.queue.clone();
        self.stop(&queue);
        let cancel = CancellationToken::new();
        self.next_id += 1;
        let id = self.next_id;
        self.running.insert(queue.clone(), (id, cancel.clone()));
        let link = link.clone();
        self.tasks
            .spawn(async move { (queue, id, subscriber.consume(link, cancel).await) });
    }

    /// Stops taking deliveries for `queue`; its in-flight messages still settle.
    pub(super) fn stop(&mut self, queue: &str) {
        if let Some((_, cancel)) = self.running.remove(queue) {
            cancel.cancel();
        }
    }

    /// True if `id` is the consumer running for `queue` now (not one stopped on purpose).
    pub(super) fn is_current(&self, queue: &str, id: u64) -> bool {
        self.running
            .get(queue)
            .is_some_and(|(running, _)| *running == id)
    }

    /// Stops everything and waits for in-flight messages to settle.
    pub(super) async fn drain(&mut self) {
        for (_, cancel) in self.running.values() {
            cancel.cancel();
        }
        self.running.clear();
        while let Some(ended) = self.tasks.join_next().await {
            if let Ok((queue, _, Err(err))) = ended {
                warn!(queue, "consumer ended: {err:#}");
            }
        }
    }
}
