//! `pause_after` / `pause_for`: after that many answers in a row that are not ok (a dependency
//! is down, say), the subscription stops taking deliveries, so the messages wait ready in `Q`
//! instead of burning their retries; after `pause_for` it takes one message at a time until one
//! answers ok, pausing again after each that does not.

use std::sync::Mutex;

use tokio_util::sync::CancellationToken;

use crate::config::Pause;

/// Why a run of the consumer should end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Turn {
    /// Stop taking deliveries for `pause_for`.
    Pause,
    /// A probe answered ok: take deliveries as configured again.
    Resume,
}

/// The answers of one subscription, across the runs of its consumer.
pub(super) struct Breaker {
    pause: Option<Pause>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Answers in a row that were not ok.
    streak: u32,
    /// One message at a time, after a pause.
    probing: bool,
    /// Ends the current run, and why.
    run: Option<CancellationToken>,
    turn: Option<Turn>,
}

impl Breaker {
    pub(super) fn new(pause: Option<Pause>) -> Breaker {
        Breaker {
            pause,
            state: Mutex::new(State::default()),
        }
    }

    /// A new run of the consumer, ended through `run` when it should turn; whether it probes
    /// (one message at a time).
    pub(super) fn start_run(&self, run: CancellationToken) -> bool {
        let mut s = self.lock();
        s.run = Some(run);
        s.turn = None;
        s.probing
    }

    /// Why the run ended, if the breaker ended it.
    pub(super) fn turn(&self) -> Option<Turn> {
        self.lock().turn
    }

    /// One plugin answer: ok or not.
    pub(super) fn answered(&self, ok: bool) {
        let Some(pause) = self.pause else { return };
        let mut s = self.lock();
        let turn = match (ok, s.probing) {
            (true, true) => Some(Turn::Resume),
            (true, false) => {
                s.streak = 0;
                None
            }
            (false, true) => Some(Turn::Pause),
            (false, false) => {
                s.streak += 1;
                (s.streak >= pause.after).then_some(Turn::Pause)
            }
        };
        if let Some(turn) = turn
            && s.turn.is_none()
        {
            s.turn = Some(turn);
            s.streak = 0;
            s.probing = turn == Turn::Pause;
            if let Some(run) = &s.run {
                run.cancel();
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere while it was held; the state is intact.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn pauses_after_n_in_a_row_and_resumes_on_the_first_ok_probe() {
        let b = Breaker::new(Some(Pause {
            after: 3,
            pause_for: Duration::from_secs(1),
        }));
        let run = CancellationToken::new();
        assert!(!b.start_run(run.clone()));
        b.answered(false);
        b.answered(false);
        b.answered(true);
        b.answered(false);
        b.answered(false);
        assert!(
            !run.is_cancelled(),
            "an ok in between starts the count again"
        );
        b.answered(false);
        assert!(run.is_cancelled());
        assert_eq!(b.turn(), Some(Turn::Pause));

        let probe = CancellationToken::new();
        assert!(b.start_run(probe.clone()), "after a pause it probes");
        b.answered(false);
        assert_eq!(b.turn(), Some(Turn::Pause), "a failed probe pauses again");
        let probe = CancellationToken::new();
        assert!(b.start_run(probe.clone()));
        b.answered(true);
        assert!(probe.is_cancelled());
        assert_eq!(b.turn(), Some(Turn::Resume));
        assert!(!b.start_run(CancellationToken::new()), "back to normal");
    }

    #[test]
    fn without_pause_after_nothing_turns() {
        let b = Breaker::new(None);
        let run = CancellationToken::new();
        b.start_run(run.clone());
        for _ in 0..100 {
            b.answered(false);
        }
        assert!(!run.is_cancelled());
    }
}
