//! Group commit on SQLite: the messages writing one database close together share one
//! transaction, and so one sync to disk, which is what a commit costs there.
//!
//! SQLite lets one connection write at a time, so messages already took turns: each held the
//! write lock from its first statement to its commit. Now a message takes its turn on the
//! database's one group connection instead, runs its statements under a savepoint of its own,
//! and leaves: a message that did not answer ok (or whose record failed) is rolled back to its
//! savepoint alone; an ok one is kept (its savepoint released) and waits for the group's
//! commit. The message leaving
//! commits the group when nobody is queued for a turn, when the group holds
//! [`MAX_MESSAGES`], or when its first kept message has waited [`MAX_AGE`]; otherwise the next
//! one goes on in the same transaction. A message still waiting after [`MAX_AGE`] takes a turn
//! to commit it (the one queued may have given up).
//! So under no load nothing waits, and under load one sync serves many messages.
//!
//! A statement error after which SQLite has ended the transaction by itself loses the message
//! (`Conn::run_guest` checks), so the next one never runs outside the group's transaction; a
//! savepoint that cannot be released or rolled back to fails the group.
//!
//! Every message learns its group's outcome before its call counts as committed: its
//! publishes and its ack come after that. A group whose transaction is lost (a statement cut
//! off, a message dropped mid-call, a failed commit) fails every message in it: their effects
//! are undone and each is retried as if its own commit had failed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, OwnedMutexGuard, watch};
use tokio::time::timeout_at;

use super::backend::{Conn, Savepoint};
use super::error::{CommitError, Failure, classify};
use super::{COMMIT_MIN, Database, First};

/// The most messages one commit serves.
const MAX_MESSAGES: usize = 64;
/// The longest a group stays open once a message in it waits for the commit: the most a
/// message's latency grows by (plus the rest of a call that has already begun).
const MAX_AGE: Duration = Duration::from_millis(5);
/// Each message's statements run under this savepoint (a plugin cannot name savepoints: the
/// guard refuses transaction control).
const SAVEPOINT: Savepoint = Savepoint {
    open: "SAVEPOINT worker_host_message",
    release: "RELEASE SAVEPOINT worker_host_message",
    rollback_to: "ROLLBACK TO SAVEPOINT worker_host_message",
};

/// The group connection of one SQLite database, and who waits for a turn on it.
pub(super) struct Group {
    slot: Arc<Mutex<Slot>>,
    /// Messages queued for a turn: while there are some, a leaving message does not commit.
    queued: Arc<AtomicUsize>,
    max_age: Duration,
}

impl Default for Group {
    fn default() -> Group {
        Group::with_max_age(MAX_AGE)
    }
}

#[derive(Default)]
struct Slot {
    open: Option<Open>,
    /// Counts groups, so a waiting message knows whether its own is still open.
    epoch: u64,
    /// Commits made (tests).
    commits: u64,
}

/// The open transaction and the messages waiting for its commit.
struct Open {
    conn: Conn,
    /// Ok messages kept in it.
    kept: usize,
    /// When the first of them left.
    since: Option<Instant>,
    outcome: watch::Sender<Option<Result<(), CommitError>>>,
}

/// One message's turn on the group connection, from its first statement to [`Member::leave`].
pub(super) struct Member {
    guard: Option<OwnedMutexGuard<Slot>>,
    slot: Arc<Mutex<Slot>>,
    queued: Arc<AtomicUsize>,
    max_age: Duration,
    store: String,
}

impl Group {
    /// A group that stays open at most `max_age` once a message waits for its commit.
    pub(super) fn with_max_age(max_age: Duration) -> Group {
        Group {
            slot: Arc::default(),
            queued: Arc::default(),
            max_age,
        }
    }

    /// Messages queued for a turn now (tests).
    #[cfg(test)]
    pub(super) fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    /// Commits made so far (tests).
    #[cfg(test)]
    pub(super) async fn commits(&self) -> u64 {
        self.slot.lock().await.commits
    }

    /// Waits for a turn (until `deadline`) and opens the message's savepoint, beginning a
    /// group transaction if none is open.
    pub(super) async fn join(&self, db: &Database, deadline: Instant) -> Result<Member, Failure> {
        self.queued.fetch_add(1, Ordering::SeqCst);
        let turn = timeout_at(deadline.into(), self.slot.clone().lock_owned()).await;
        self.queued.fetch_sub(1, Ordering::SeqCst);
        let Ok(mut guard) = turn else {
            // The turn may have come just as this gave up: a group left open with nobody to
            // end it would hold SQLite's write lock. Free now means nobody is in a turn.
            if let Ok(mut idle) = self.slot.clone().try_lock_owned() {
                let _ = commit(&mut idle, db.recorder.store()).await;
            }
            return Err(Failure::timed_out(
                "no turn on the database within the handler's time: other messages held it",
            ));
        };
        let store = db.recorder.store().to_string();
        if guard.open.is_none() {
            let conn = db.connected(deadline, First::Begin).await?;
            let (outcome, _) = watch::channel(None);
            guard.epoch += 1;
            guard.open = Some(Open {
                conn,
                kept: 0,
                since: None,
                outcome,
            });
        }
        let mut member = Member {
            guard: Some(guard),
            slot: self.slot.clone(),
            queued: self.queued.clone(),
            max_age: self.max_age,
            store,
        };
        let begun = member.conn().savepoint(&SAVEPOINT).await;
        if let Err(e) = begun {
            let why = super::error::message(&e.error);
            member.fail_group(&format!("cannot open a savepoint: {why}"));
            return Err(e.lost());
        }
        Ok(member)
    }
}

impl Member {
    /// The group's connection, in the message's savepoint.
    pub(super) fn conn(&mut self) -> &mut Conn {
        let open = self.guard.as_mut().and_then(|g| g.open.as_mut());
        // The guard and the open group live until `leave` or drop, which take them together.
        &mut open.expect("a member's group is open until it leaves").conn
    }

    /// Ends the message's turn: on `ok` its work stays and this waits for the group's commit;
    /// otherwise it is rolled back to the savepoint. An error means nothing of it committed.
    pub(super) async fn leave(mut self, ok: bool) -> Result<(), CommitError> {
        let Some(mut guard) = self.guard.take() else {
            return Err(self.lost("the message left twice"));
        };
        let epoch = guard.epoch;
        let Some(open) = guard.open.as_mut() else {
            return Err(self.lost("the group's transaction is gone"));
        };
        if open.conn.busy() {
            fail(&mut guard, &self.store, "a statement was cut off");
            return Err(CommitError::CutOff {
                store: self.store.clone(),
            });
        }
        // A kept message's savepoint is released (on the caller's thread, `inline.rs`): SQLite
        // keeps a copy of each page a message changes in its statement journal until the
        // outermost savepoint ends, so with the group's savepoints left open the journal grew
        // by a page per message and, past 64 KiB, became a temporary file, opened, written and
        // removed in every group. Released, it holds one message's pages, in memory.
        let ended = if ok {
            open.conn.release(&SAVEPOINT).await
        } else {
            open.conn.rollback_to(&SAVEPOINT).await
        };
        if let Err(e) = ended {
            let why = format!("savepoint: {}", super::error::message(&e.error));
            fail(&mut guard, &self.store, &why);
            return Err(self.lost(&why));
        }
        let mut outcome = open.outcome.subscribe();
        if ok {
            open.kept += 1;
            open.since.get_or_insert_with(Instant::now);
        }
        let old = open.since.is_some_and(|t| t.elapsed() >= self.max_age);
        if self.queued.load(Ordering::SeqCst) == 0 || open.kept >= MAX_MESSAGES || old {
            let committed = commit(&mut guard, &self.store).await;
            return if ok { committed } else { Ok(()) };
        }
        drop(guard);
        if !ok {
            return Ok(());
        }
        self.outcome(&mut outcome, epoch).await
    }

    /// Waits for the commit of group `epoch`; after `max_age` takes a turn and commits it.
    async fn outcome(
        &self,
        outcome: &mut watch::Receiver<Option<Result<(), CommitError>>>,
        epoch: u64,
    ) -> Result<(), CommitError> {
        loop {
            if let Some(result) = outcome.borrow_and_update().clone() {
                return result;
            }
            match tokio::time::timeout(self.max_age, outcome.changed()).await {
                Ok(Ok(())) => continue,
                // The sender went with a group dropped unfinished (cannot commit any more).
                Ok(Err(_)) => return Err(self.lost("the group's transaction was dropped")),
                Err(_) => {
                    let mut guard = self.slot.clone().lock_owned().await;
                    if guard.epoch == epoch && guard.open.is_some() {
                        return commit(&mut guard, &self.store).await;
                    }
                }
            }
        }
    }

    /// Fails the group this member is in (its transaction cannot be trusted any more).
    fn fail_group(&mut self, why: &str) {
        if let Some(guard) = self.guard.as_mut() {
            fail(guard, &self.store, why);
        }
    }

    fn lost(&self, why: &str) -> CommitError {
        CommitError::Lost {
            store: self.store.clone(),
            why: why.to_string(),
        }
    }
}

impl Drop for Member {
    /// A message dropped during its turn (its call stopped) leaves statements that cannot be
    /// rolled back here: the group's connection is closed, which rolls all of it back.
    fn drop(&mut self) {
        if let Some(guard) = self.guard.as_mut() {
            fail(guard, &self.store, "a message stopped during its turn");
        }
    }
}

/// Commits the open group and tells its members; the group is closed either way.
async fn commit(guard: &mut Slot, store: &str) -> Result<(), CommitError> {
    let Some(mut open) = guard.open.take() else {
        return Ok(());
    };
    let deadline = Instant::now() + COMMIT_MIN;
    guard.commits += 1;
    let result = match timeout_at(deadline.into(), open.conn.commit()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(CommitError::Failed {
            store: store.to_string(),
            why: super::error::message(&classify(&e).error).to_string(),
        }),
        Err(_) => Err(CommitError::TimedOut {
            store: store.to_string(),
        }),
    };
    open.outcome.send_replace(Some(result.clone()));
    result
}

/// Closes the open group without committing (the connection's close rolls it back) and tells
/// its members why.
fn fail(guard: &mut Slot, store: &str, why: &str) {
    if let Some(open) = guard.open.take() {
        open.outcome.send_replace(Some(Err(CommitError::Lost {
            store: store.to_string(),
            why: format!("the shared transaction was rolled back: {why}"),
        })));
        // Dropped outside a finished transaction: closed, never pooled (see `Conn`).
        drop(open.conn);
    }
}
