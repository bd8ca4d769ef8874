//! SQLite as the host opens it: the file and its pool, and on every connection the two
//! callbacks that hold a plugin's statements inside the granted database whatever their text.
//!
//! - The authorizer (`sqlite3_set_authorizer`) sees what a statement touches when it is
//!   prepared, views and triggers included, and refuses for a plugin: transaction control,
//!   `ATTACH`/`DETACH`, temporary objects (session state), PRAGMAs other than read-only ones,
//!   functions that load code or touch files, and the host's own tables. It is the second wall
//!   behind the statement guard (`guard.rs`), and the one that does not depend on reading text.
//! - The progress handler ends a plugin's statement once the handler's deadline has passed
//!   (SQLite then stops it as `sqlite3_interrupt` would), so a runaway query holds no lock and
//!   no core after the host gave up on it.
//!
//! Both read a [`Watch`] per connection that says whose statement runs (the plugin's, with
//! its deadline, or the host's own: BEGIN, COMMIT, the outbox) and is a plugin's unless the
//! host says otherwise. SQLite owns one reference to it (client data, dropped when the
//! connection closes, after which no callback runs); the host reaches it through the locked
//! handle when a message takes the connection.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::str::FromStr as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use libsqlite3_sys as ffi;
use sqlx::pool::PoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode};
use tokio::time::timeout;

use super::guard::{HOST_TABLES, Refused};
use super::inline::Handle;
use crate::config::SqlDatabaseConfig;

/// How long SQLite waits for another connection's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long opening a SQLite file at start-up may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);
/// Virtual-machine steps between two looks at the deadline: microseconds of work.
const PROGRESS_STEPS: i32 = 1000;
/// The name of the [`Watch`] among a connection's client data.
const WATCH_KEY: &CStr = c"worker-host.watch";

/// Opens the pool of `config` (a SQLite URL): the file and its directory are created now, so
/// a path that cannot be is a start-up error; every connection gets the authorizer and the
/// progress handler before it is used.
pub(super) async fn open(
    config: &SqlDatabaseConfig,
    options: PoolOptions<sqlx::Sqlite>,
) -> anyhow::Result<sqlx::SqlitePool> {
    let url = config.url.expose();
    let connect = SqliteConnectOptions::from_str(url)
        .with_context(|| format!("invalid SQLite URL {}", config.url.redacted_url()))?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(BUSY_TIMEOUT)
        .foreign_keys(true)
        // The host runs some statements on the caller's thread (`inline.rs`): in serialized
        // mode SQLite takes its own lock around every call, whichever thread makes it.
        .serialized(true);
    let in_memory = in_memory(url);
    let options = if in_memory {
        // The database lives as long as a connection does: keep one.
        options
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
    } else {
        if let Some(dir) = connect.get_filename().parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create the directory {}", dir.display()))?;
        }
        options
    };
    let options = options.after_connect(|conn, _| Box::pin(install(conn)));
    let pool = options.connect_lazy_with(connect);
    let first = timeout(OPEN_TIMEOUT, pool.acquire())
        .await
        .map_err(|_| anyhow::anyhow!("opening {} timed out", config.url.redacted_url()))?;
    first.with_context(|| format!("cannot open {}", config.url.redacted_url()))?;
    Ok(pool)
}

/// Whose statements a connection runs, read by its callbacks on SQLite's worker thread.
#[derive(Debug)]
pub(super) struct Watch {
    /// The host's own statement runs (the default is a plugin's).
    host: AtomicBool,
    /// A plugin's statement stops after this, in ms since [`EPOCH`] (0: no deadline).
    deadline: AtomicU64,
    /// Why the authorizer last refused, for the error the plugin gets.
    refused: Mutex<Option<String>>,
}

/// The zero of [`Watch::deadline`].
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn millis(at: Instant) -> u64 {
    // +1: 0 means no deadline.
    at.saturating_duration_since(*EPOCH).as_millis() as u64 + 1
}

impl Watch {
    fn new() -> Watch {
        Watch {
            host: AtomicBool::new(false),
            deadline: AtomicU64::new(0),
            refused: Mutex::new(None),
        }
    }

    /// The connection's watch, and its handle for statements on the caller's thread. A
    /// connection without a watch (cannot happen: every connection of the pool is set up by
    /// [`install`]) is an error, never an unwatched plugin.
    pub(super) async fn of(
        conn: &mut SqliteConnection,
    ) -> Result<(Arc<Watch>, Handle), sqlx::Error> {
        let mut locked = conn.lock_handle().await?;
        let raw = locked.as_raw_handle();
        let db = raw.as_ptr();
        // SAFETY: `db` is open and locked for us; the client data under WATCH_KEY is only ever
        // set by `install`, to a pointer from `Arc::into_raw`, which SQLite keeps alive until
        // the connection closes: taking a new strong reference from it is sound.
        let data = unsafe { ffi::sqlite3_get_clientdata(db, WATCH_KEY.as_ptr()) };
        if data.is_null() {
            return Err(sqlx::Error::Protocol(
                "a SQLite connection without the host's authorizer".into(),
            ));
        }
        let watch = data as *const Watch;
        // SAFETY: as above.
        let watch = unsafe {
            Arc::increment_strong_count(watch);
            Arc::from_raw(watch)
        };
        // SAFETY: `open` opens every connection in serialized mode; the caller keeps the
        // handle beside the connection, so it lives no longer.
        let handle = unsafe { Handle::new(raw) };
        Ok((watch, handle))
    }

    /// A plugin's statements run from now on, until `deadline`.
    pub(super) fn guest(&self, deadline: Instant) {
        self.deadline.store(millis(deadline), Ordering::SeqCst);
        self.host.store(false, Ordering::SeqCst);
    }

    /// The host's own statements run until the returned guard drops.
    pub(super) fn host(self: &Arc<Self>) -> HostTurn {
        self.host.store(true, Ordering::SeqCst);
        HostTurn(self.clone())
    }

    /// Why the authorizer refused the last statement, if it did.
    pub(super) fn take_refusal(&self) -> Option<String> {
        self.refused.lock().ok()?.take()
    }

    /// The progress handler's question: may the statement go on?
    fn proceed(&self) -> bool {
        if self.host.load(Ordering::SeqCst) {
            return true;
        }
        let deadline = self.deadline.load(Ordering::SeqCst);
        deadline == 0 || millis(Instant::now()) <= deadline
    }

    fn refuse(&self, why: String) -> c_int {
        if let Ok(mut refused) = self.refused.lock() {
            *refused = Some(why);
        }
        ffi::SQLITE_DENY
    }
}

/// The host's turn on a connection: back to the plugin's when dropped, even mid-statement.
pub(super) struct HostTurn(Arc<Watch>);

impl Drop for HostTurn {
    fn drop(&mut self) {
        self.0.host.store(false, Ordering::SeqCst);
    }
}

/// Whether a SQLite URL names an in-memory database (no file, no write-ahead log).
pub(super) fn in_memory(url: &str) -> bool {
    url.contains(":memory:") || url.contains("mode=memory")
}

/// Sets up a new connection: its watch, the authorizer and the progress handler.
pub(super) async fn install(conn: &mut SqliteConnection) -> Result<(), sqlx::Error> {
    let watch = Arc::new(Watch::new());
    let mut handle = conn.lock_handle().await?;
    let db = handle.as_raw_handle().as_ptr();
    let data = Arc::into_raw(watch.clone()) as *mut c_void;
    // SAFETY: `db` is open and locked for us. SQLite keeps `data` (one strong reference) until
    // the connection closes and then calls `release`, which takes it back; the authorizer gets
    // the same pointer, valid for as long as it can be called.
    let rc = unsafe {
        let rc = ffi::sqlite3_set_clientdata(db, WATCH_KEY.as_ptr(), data, Some(release));
        if rc == ffi::SQLITE_OK {
            ffi::sqlite3_set_authorizer(db, Some(authorize), data);
        } else {
            drop(Arc::from_raw(data as *const Watch));
        }
        rc
    };
    if rc != ffi::SQLITE_OK {
        return Err(sqlx::Error::Protocol(format!(
            "cannot set up the SQLite connection's authorizer (code {rc})"
        )));
    }
    handle.set_progress_handler(PROGRESS_STEPS, move || watch.proceed());
    Ok(())
}

/// SQLite's destructor of the client data: the reference `install` gave it.
unsafe extern "C" fn release(data: *mut c_void) {
    // SAFETY: `data` came from `Arc::into_raw` in `install` and SQLite calls this once.
    drop(unsafe { Arc::from_raw(data as *const Watch) });
}

/// The authorizer: every action a statement being prepared would take.
unsafe extern "C" fn authorize(
    data: *mut c_void,
    action: c_int,
    a: *const c_char,
    b: *const c_char,
    _database: *const c_char,
    _trigger: *const c_char,
) -> c_int {
    // SAFETY: `data` is the watch `install` registered, alive while the connection is; `a`
    // and `b` are NULL or NUL-terminated strings valid during the call.
    let (watch, a, b) = unsafe { (&*(data as *const Watch), text(a), text(b)) };
    if watch.host.load(Ordering::SeqCst) {
        return ffi::SQLITE_OK;
    }
    match judge(action, a.as_deref(), b.as_deref()) {
        Ok(()) => ffi::SQLITE_OK,
        Err(Refused(why)) => watch.refuse(why),
    }
}

fn text(p: *const c_char) -> Option<String> {
    // SAFETY: see `authorize`.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Read-only PRAGMAs a plugin may run; those marked `true` take an object's name.
const PRAGMAS: &[(&str, bool)] = &[
    ("table_info", true),
    ("table_xinfo", true),
    ("table_list", true),
    ("index_list", true),
    ("index_info", true),
    ("index_xinfo", true),
    ("foreign_key_list", true),
    ("foreign_key_check", true),
    ("integrity_check", true),
    ("quick_check", true),
    ("collation_list", false),
    ("function_list", false),
    ("module_list", false),
    ("pragma_list", false),
    ("compile_options", false),
    ("data_version", false),
    ("user_version", false),
    ("schema_version", false),
    ("application_id", false),
    ("page_count", false),
    ("page_size", false),
    ("freelist_count", false),
    ("encoding", false),
    ("foreign_keys", false),
    ("journal_mode", false),
];

/// Virtual-table modules a plugin may create tables of: full-text search and R-trees.
const MODULES: &[&str] = &["fts3", "fts4", "fts5", "rtree", "rtree_i32"];

/// Functions that load native code or touch files.
const FUNCTIONS: &[&str] = &[
    "load_extension",
    "readfile",
    "writefile",
    "edit",
    "fts3_tokenizer",
];

/// Whether a plugin's statement may take `action` (SQLite's authorizer codes and arguments).
fn judge(action: c_int, a: Option<&str>, b: Option<&str>) -> Result<(), Refused> {
    use ffi::*;
    let host_table = |name: Option<&str>| {
        name.map(str::to_ascii_lowercase)
            .filter(|n| HOST_TABLES.iter().any(|t| n.starts_with(t)))
    };
    let table = match action {
        SQLITE_CREATE_INDEX
        | SQLITE_DROP_INDEX
        | SQLITE_CREATE_TRIGGER
        | SQLITE_DROP_TRIGGER
        | SQLITE_ALTER_TABLE => host_table(b).or(host_table(a)),
        _ => host_table(a),
    };
    if let Some(name) = table.filter(|_| action != SQLITE_FUNCTION && action != SQLITE_PRAGMA) {
        return Err(Refused(format!(
            "{name} is the host's table (the outbox and inbox of exactly-once delivery): a \
             plugin can neither read nor write it"
        )));
    }
    match action {
        SQLITE_TRANSACTION | SQLITE_SAVEPOINT => Err(Refused(
            "the host owns the message's transaction (committed when the handler answers ok, \
             rolled back otherwise); transaction control is not allowed"
                .into(),
        )),
        SQLITE_ATTACH | SQLITE_DETACH => Err(Refused(
            "ATTACH and DETACH reach past the granted database and are not allowed".into(),
        )),
        SQLITE_CREATE_TEMP_INDEX
        | SQLITE_CREATE_TEMP_TABLE
        | SQLITE_CREATE_TEMP_TRIGGER
        | SQLITE_CREATE_TEMP_VIEW => Err(Refused(
            "temporary objects are session state that outlives the message; not allowed".into(),
        )),
        SQLITE_CREATE_TRIGGER => Err(Refused("a plugin cannot create triggers".into())),
        SQLITE_CREATE_VTABLE | SQLITE_DROP_VTABLE => match b {
            Some(m) if MODULES.contains(&m.to_ascii_lowercase().as_str()) => Ok(()),
            m => Err(Refused(format!(
                "virtual tables of module {} are not allowed (only {})",
                m.unwrap_or("?"),
                MODULES.join(", ")
            ))),
        },
        SQLITE_PRAGMA => pragma(a.unwrap_or(""), b),
        SQLITE_FUNCTION => match b.map(str::to_ascii_lowercase) {
            Some(f) if FUNCTIONS.contains(&f.as_str()) => Err(Refused(format!(
                "{f}() reaches past the granted database and is not allowed"
            ))),
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

/// A PRAGMA is allowed only if it is in [`PRAGMAS`] and only reads: no value, or an object's
/// name where it takes one.
fn pragma(name: &str, argument: Option<&str>) -> Result<(), Refused> {
    let name = name.to_ascii_lowercase();
    match PRAGMAS.iter().find(|(p, _)| *p == name) {
        Some((_, takes_name)) if argument.is_none() || *takes_name => Ok(()),
        _ => Err(Refused(format!(
            "PRAGMA {name}{} changes the connection or reaches past the database; a plugin may \
             run only read-only PRAGMAs (table_info, index_list, ...)",
            argument.map(|a| format!(" = {a}")).unwrap_or_default()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libsqlite3_sys::*;

    #[test]
    fn judge_refuses_what_reaches_past_the_grant() {
        assert!(judge(SQLITE_READ, Some("orders"), Some("worker_id")).is_ok());
        assert!(judge(SQLITE_INSERT, Some("orders"), None).is_ok());
        assert!(judge(SQLITE_READ, Some("worker_inbox"), Some("queue")).is_err());
        assert!(judge(SQLITE_INSERT, Some("Worker_Outbox"), None).is_err());
        assert!(judge(SQLITE_CREATE_INDEX, Some("i"), Some("worker_outbox")).is_err());
        assert!(judge(SQLITE_TRANSACTION, Some("COMMIT"), None).is_err());
        assert!(judge(SQLITE_SAVEPOINT, Some("BEGIN"), Some("s")).is_err());
        assert!(judge(SQLITE_ATTACH, Some("/tmp/x.db"), None).is_err());
        assert!(judge(SQLITE_CREATE_TEMP_TABLE, Some("t"), None).is_err());
        assert!(judge(SQLITE_PRAGMA, Some("table_info"), Some("orders")).is_ok());
        assert!(judge(SQLITE_PRAGMA, Some("foreign_keys"), None).is_ok());
        assert!(judge(SQLITE_PRAGMA, Some("foreign_keys"), Some("0")).is_err());
        assert!(judge(SQLITE_PRAGMA, Some("writable_schema"), None).is_err());
        assert!(judge(SQLITE_FUNCTION, None, Some("load_extension")).is_err());
        assert!(judge(SQLITE_FUNCTION, None, Some("lower")).is_ok());
        assert!(judge(SQLITE_CREATE_VTABLE, Some("f"), Some("fts5")).is_ok());
        assert!(judge(SQLITE_CREATE_VTABLE, Some("f"), Some("dbstat")).is_err());
    }
}
