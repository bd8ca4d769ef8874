//! The admin endpoint's open connections, capped: when the cap is reached, the connection idle
//! the longest is closed to make room, so a flood of idle sockets cannot lock the probes out;
//! only when every connection is answering a request is a new one refused.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio_util::sync::CancellationToken;
use tracing::warn;

/// The table of open connections.
pub(super) struct Conns {
    max: usize,
    table: Mutex<Table>,
}

struct Table {
    next_id: u64,
    open: HashMap<u64, Arc<Conn>>,
    /// Whether "full" was logged since the table last had room.
    full_logged: bool,
}

struct Conn {
    /// Requests being answered.
    busy: AtomicUsize,
    /// Accepted, or last began or finished a request.
    last_active: Mutex<Instant>,
    /// Cancelled when this connection is closed to make room.
    evict: CancellationToken,
}

impl Conn {
    fn last_active(&self) -> Instant {
        *self.last_active.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn touch(&self) {
        *self.last_active.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }
}

/// One admitted connection; leaves the table when dropped.
pub(super) struct Ticket {
    id: u64,
    conn: Arc<Conn>,
    conns: Arc<Conns>,
}

/// Marks its connection busy (not evictable) while alive.
pub(super) struct Busy(Arc<Conn>);

impl Conns {
    pub(super) fn new(max: usize) -> Conns {
        Conns {
            max: max.max(1),
            table: Mutex::new(Table {
                next_id: 0,
                open: HashMap::new(),
                full_logged: false,
            }),
        }
    }

    /// Admits a new connection, evicting the idlest one when full; None when every open
    /// connection is busy (the caller closes the new one at once).
    pub(super) fn admit(self: &Arc<Self>) -> Option<Ticket> {
        let mut table = self.lock();
        if table.open.len() < self.max {
            table.full_logged = false;
        } else {
            let idlest = table
                .open
                .iter()
                .filter(|(_, c)| c.busy.load(Ordering::Relaxed) == 0)
                .min_by_key(|(_, c)| c.last_active())
                .map(|(id, _)| *id);
            let evicted = idlest.and_then(|id| table.open.remove(&id))?;
            evicted.evict.cancel();
            if !table.full_logged {
                warn!(
                    max = self.max,
                    "admin endpoint has {} connections open; closing the idlest for each new one",
                    self.max
                );
                table.full_logged = true;
            }
        }
        let id = table.next_id;
        table.next_id += 1;
        let conn = Arc::new(Conn {
            busy: AtomicUsize::new(0),
            last_active: Mutex::new(Instant::now()),
            evict: CancellationToken::new(),
        });
        table.open.insert(id, conn.clone());
        Some(Ticket {
            id,
            conn,
            conns: self.clone(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // Nothing panics while holding it; if something did, the table is still consistent.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().open.len()
    }
}

impl Ticket {
    /// Cancelled when this connection must close to make room.
    pub(super) fn evicted(&self) -> CancellationToken {
        self.conn.evict.clone()
    }

    /// Call while answering a request.
    pub(super) fn busy(&self) -> Busy {
        self.conn.busy.fetch_add(1, Ordering::Relaxed);
        self.conn.touch();
        Busy(self.conn.clone())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.conns.lock().open.remove(&self.id);
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_full_the_idlest_connection_makes_room() {
        let conns = Arc::new(Conns::new(3));
        let a = conns.admit().expect("a");
        let b = conns.admit().expect("b");
        let c = conns.admit().expect("c");
        // a is busy, b was active after c: c is the idlest evictable one.
        let _busy = a.busy();
        std::thread::sleep(std::time::Duration::from_millis(2));
        drop(b.busy());
        let d = conns.admit().expect("d makes room");
        assert!(c.evicted().is_cancelled(), "the idlest one is closed");
        assert!(!a.evicted().is_cancelled() && !b.evicted().is_cancelled());
        assert_eq!(conns.len(), 3);
        // Its ticket leaving later does not remove anyone else.
        drop(c);
        assert_eq!(conns.len(), 3);
        drop(d);
        assert_eq!(conns.len(), 2);
    }

    #[test]
    fn when_every_connection_is_busy_a_new_one_is_refused() {
        let conns = Arc::new(Conns::new(2));
        let a = conns.admit().expect("a");
        let b = conns.admit().expect("b");
        let (_x, _y) = (a.busy(), b.busy());
        assert!(conns.admit().is_none());
        assert!(!a.evicted().is_cancelled() && !b.evicted().is_cancelled());
    }
}
