//! What one message may send: at most `http_max_requests` requests, at most [`MAX_OPEN`] of them
//! open at once (SPEC section 9), so a guest that loops on requests spends its own budget, not
//! the host's descriptors.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, timeout_at};
use wasmtime_wasi_http::Error;

use super::Scope;

/// Requests of one message open at once (connecting, or with a response not yet read to its
/// end): a further one waits until one ends, at most until the handler's deadline.
pub(crate) const MAX_OPEN: usize = 8;

/// The requests of one message: made afresh at `begin`.
pub(super) struct Budget {
    max: u32,
    made: u32,
    /// Whether the warning about this message went to the log already.
    warned: bool,
    open: Arc<Semaphore>,
}

impl Budget {
    pub(super) fn new(max: u32) -> Budget {
        Budget {
            max,
            made: 0,
            warned: false,
            open: Arc::new(Semaphore::new(MAX_OPEN)),
        }
    }

    /// Counts a request: false past `max` (`connection-limit-reached` for the guest). The first
    /// refusal of a message logs one warning naming the plugin and the queue.
    pub(super) fn take(&mut self, scope: &Scope) -> bool {
        if self.made < self.max {
            self.made += 1;
            return true;
        }
        if !self.warned {
            self.warned = true;
            tracing::warn!(
                plugin = %scope.plugin,
                queue = %scope.queue,
                "the plugin made {} outgoing HTTP requests for one message, the most \
                 http_max_requests allows: its further requests get an error",
                self.max
            );
        }
        false
    }

    /// The semaphore the open requests share.
    pub(super) fn slots(&self) -> Arc<Semaphore> {
        self.open.clone()
    }
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new(crate::config::DEFAULT_HTTP_MAX_REQUESTS)
    }
}

/// One of the [`MAX_OPEN`] slots of `slots`, held until the request's connection ends; waits
/// for a free one until `deadline` (then `connection-timeout`).
pub(super) async fn open_slot(
    slots: Arc<Semaphore>,
    deadline: Instant,
) -> Result<OwnedSemaphorePermit, Error> {
    match timeout_at(deadline, slots.acquire_owned()).await {
        Ok(Ok(permit)) => Ok(permit),
        Err(_) => Err(Error::ConnectionTimeout),
        // The semaphore is never closed.
        Ok(Err(_)) => Err(Error::InternalError(Some("request slots closed".into()))),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn scope() -> Scope {
        Scope {
            plugin: "test.wasm".into(),
            queue: "budget-test".into(),
            deadline: std::time::Instant::now() + Duration::from_secs(5),
            capture: None,
            message_id: None,
        }
    }

    #[test]
    fn a_message_makes_at_most_max_requests() {
        let mut budget = Budget::new(3);
        let taken: Vec<bool> = (0..5).map(|_| budget.take(&scope())).collect();
        assert_eq!(taken, [true, true, true, false, false]);
        assert!(Budget::new(3).take(&scope()), "a new message starts afresh");
    }

    #[tokio::test]
    async fn at_most_eight_are_open_and_the_ninth_waits_for_one_to_end() {
        let budget = Budget::new(100);
        let soon = || Instant::now() + Duration::from_millis(200);
        let mut open = Vec::new();
        for _ in 0..MAX_OPEN {
            open.push(
                open_slot(budget.slots(), soon())
                    .await
                    .expect("a free slot"),
            );
        }
        // The ninth waits, and gets a timeout when none ends before its deadline.
        let ninth = open_slot(budget.slots(), soon()).await;
        assert!(matches!(ninth, Err(Error::ConnectionTimeout)), "{ninth:?}");
        // One ends: the waiting one goes on.
        let slots = budget.slots();
        let waiting =
            tokio::spawn(
                async move { open_slot(slots, Instant::now() + Duration::from_secs(5)).await },
            );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "the ninth must wait while eight are open"
        );
        open.pop();
        let ninth = waiting.await.expect("joined");
        assert!(ninth.is_ok(), "{ninth:?}");
        assert_eq!(budget.slots().available_permits(), 0);
    }
}
