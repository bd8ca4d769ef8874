//! How a long `failed` action (replay, discard) tells how far it is and learns that it should
//! stop. The caller owns both: the command line draws a bar and stops on Ctrl-C, the console
//! keeps the figures of a job for its page and stops on the job's cancel or the service's
//! shutdown. Neither is known here: the action only reports and checks.

use std::sync::LazyLock;

use tokio_util::sync::CancellationToken;

/// Where a long action reports its progress. Called on the action's task between batches, so
/// it must not block.
pub trait Progress: Send + Sync {
    /// A walk over `failed` begins; it looks at `total` messages at most (those present when
    /// it started, or the first N of them).
    fn begin(&self, failed: &str, total: u64);
    /// `examined` more messages were looked at, and `done` of them moved back (replay) or
    /// removed (discard).
    fn advance(&self, examined: u64, done: u64);
}

/// Progress nobody looks at.
pub struct Unwatched;

impl Progress for Unwatched {
    fn begin(&self, _: &str, _: u64) {}
    fn advance(&self, _: u64, _: u64) {}
}

/// What a long action is handed: where its progress goes, and the token that stops it. A
/// cancelled action stops between batches: every message of a batch under way is finished
/// (published and acked, or acked), and every later one stays parked where it was.
#[derive(Clone, Copy)]
pub struct Watch<'a> {
    pub progress: &'a dyn Progress,
    pub cancel: &'a CancellationToken,
}

impl Watch<'static> {
    /// Not watched, never cancelled: for callers that act on a few messages and wait.
    pub fn none() -> Watch<'static> {
        static NEVER: LazyLock<CancellationToken> = LazyLock::new(CancellationToken::new);
        Watch {
            progress: &Unwatched,
            cancel: &NEVER,
        }
    }
}

/// Counts what a walk reports, so each batch passes on only what is new.
#[derive(Default)]
pub(crate) struct Reported {
    examined: u64,
}

impl Reported {
    /// Passes on the messages examined since the last call (`examined` is the walk's total so
    /// far) and `done` of them acted on.
    pub(crate) fn advance(&mut self, watch: &Watch<'_>, examined: u64, done: u64) {
        watch
            .progress
            .advance(examined.saturating_sub(self.examined), done);
        self.examined = self.examined.max(examined);
    }
}
