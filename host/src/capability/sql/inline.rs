//! SQLite statements run on the caller's thread, straight on the connection's handle.
//!
//! Through sqlx every SQLite statement is a round trip to the connection's own thread: a
//! channel send, that thread woken, the answer sent back, the calling task woken. On two busy
//! cores each wake-up waits for a core, and on the group connection (`group.rs`) those waits
//! were taken one message at a time, inside the turn every other message queues for. So a
//! connection that holds SQLite's write lock (`BEGIN IMMEDIATE`) runs its statements here
//! instead. There a statement never waits for another writer; what it can take is bounded by
//! the handler's deadline, which the connection's progress handler enforces (`sqlite.rs`), so
//! blocking the calling thread is bounded by the same deadline a plugin's own code has.
//! BEGIN and COMMIT, which may wait for the lock or for the disk, stay on sqlx's thread.
//!
//! Parameters bind as sqlx binds them (`?` in order, `?NNN` and `$NNN` by number), and rows
//! read as `value::sqlite_row` reads sqlx's. A text this path would read differently (a
//! script of several statements, an empty text) is not run here: [`Handle::run`] answers
//! `None` and the caller goes through sqlx.

use std::collections::HashMap;
use std::ffi::{CStr, c_int};
use std::ptr::{self, NonNull};

use libsqlite3_sys as ffi;

use super::error::{self, Failure};
use super::execute::{Output, Want, count_matches, push_bounded};
use crate::wit::worker::plugin::sql::{Rows, Value};

/// A SQLite connection's handle, used while no sqlx operation is in flight on it.
pub(super) struct Handle(NonNull<ffi::sqlite3>);

// SAFETY: the connection is opened in SQLite's serialized mode (`sqlite.rs`), in which every
// API call on it may come from any thread; and the host uses it here only between sqlx's
// operations on it (`Conn` is `&mut` and never inline while one is cut off), so sqlx's thread
// and this one never interleave statements.
unsafe impl Send for Handle {}
// SAFETY: as for `Send`: in serialized mode SQLite itself locks around every call, so calls
// through a shared reference from several threads at once are sound.
unsafe impl Sync for Handle {}

impl Handle {
    /// # Safety
    /// `db` is an open connection opened in serialized mode that outlives the handle.
    pub(super) unsafe fn new(db: NonNull<ffi::sqlite3>) -> Handle {
        Handle(db)
    }

    fn db(&self) -> *mut ffi::sqlite3 {
        self.0.as_ptr()
    }

    /// Makes a statement that would wait for another connection's lock fail at once instead.
    pub(super) fn never_wait(&self) {
        // SAFETY: open (see `new`); 0 removes the busy handler.
        unsafe { ffi::sqlite3_busy_timeout(self.db(), 0) };
    }

    /// Whether the connection is inside a transaction. SQLite rolls a whole transaction back
    /// by itself on some errors (a full disk, an interrupt), after which statements would
    /// commit one by one: the host checks this wherever that would break a message's
    /// all-or-nothing.
    pub(super) fn in_transaction(&self) -> bool {
        // SAFETY: open (see `new`); the call only reads the connection's state.
        unsafe { ffi::sqlite3_get_autocommit(self.db()) == 0 }
    }

    /// Runs one statement with its parameters: its rows or the count it changed; `None` if the
    /// text is not one this path runs as sqlx would (see the module's comment). The statement
    /// is kept in `prepared` for the next call with the same text.
    pub(super) fn run(
        &self,
        prepared: &mut Prepared,
        statement: &str,
        params: &[Value],
        want: Want,
    ) -> Option<Result<Output, Failure>> {
        if !prepared.0.contains_key(statement) {
            let stmt = match self.prepare(statement) {
                Ok(Some(stmt)) => stmt,
                Ok(None) => return None,
                Err(failure) => return Some(Err(failure)),
            };
            let numbers = match stmt.numbers() {
                Ok(numbers) => numbers,
                Err(failure) => return Some(Err(failure)),
            };
            if prepared.0.len() >= PREPARED {
                prepared.0.clear();
            }
            prepared.0.insert(statement.into(), Entry { stmt, numbers });
        }
        let entry = prepared.0.get(statement)?;
        Some(self.execute(entry, params, want))
    }

    /// Binds and steps a prepared statement, then resets it (so that it holds no lock and
    /// no value past the call, and can run again).
    fn execute(&self, entry: &Entry, params: &[Value], want: Want) -> Result<Output, Failure> {
        let result = count_matches(entry.numbers.len(), params.len())
            .and_then(|()| self.bind(&entry.stmt, &entry.numbers, params))
            .and_then(|()| self.step(&entry.stmt, want));
        entry.stmt.reset();
        result
    }

    /// Prepares the first statement of `text`: `None` if it is empty or more than blanks
    /// follow it.
    fn prepare(&self, text: &str) -> Result<Option<Statement>, Failure> {
        let len =
            c_int::try_from(text.len()).map_err(|_| Failure::invalid("statement too long"))?;
        let mut raw = ptr::null_mut();
        let mut tail = ptr::null();
        // SAFETY: open (see `new`); `text` is valid for `len` bytes (no NUL needed with a
        // length); `raw` and `tail` are written by SQLite.
        let rc = unsafe {
            ffi::sqlite3_prepare_v2(self.db(), text.as_ptr().cast(), len, &mut raw, &mut tail)
        };
        if rc != ffi::SQLITE_OK {
            return Err(self.failure());
        }
        let Some(raw) = NonNull::new(raw) else {
            return Ok(None);
        };
        let stmt = Statement(raw);
        // `tail` points into `text`, past the first statement.
        let used = (tail as usize).saturating_sub(text.as_ptr() as usize);
        let rest = text.get(used..).unwrap_or_default();
        if !rest.trim().is_empty() {
            return Ok(None);
        }
        Ok(Some(stmt))
    }

    /// Binds `params` as sqlx does: `?` in order, `?NNN` and `$NNN` by number (`numbers`,
    /// from [`Statement::numbers`]); booleans as 0 or 1.
    fn bind(
        &self,
        stmt: &Statement,
        numbers: &[Option<usize>],
        params: &[Value],
    ) -> Result<(), Failure> {
        let mut next = 0;
        for (i, number) in (1..).zip(numbers) {
            let n = number.unwrap_or_else(|| {
                next += 1;
                next
            });
            let Some(value) = n.checked_sub(1).and_then(|n| params.get(n)) else {
                // SQLite binds what is left unbound as NULL, as sqlx leaves it.
                break;
            };
            let s = stmt.0.as_ptr();
            // SAFETY: `s` is a prepared statement of this connection; text and blobs are
            // copied by SQLite (SQLITE_TRANSIENT) before the call returns.
            let rc = unsafe {
                match value {
                    Value::Null => ffi::sqlite3_bind_null(s, i),
                    Value::Boolean(b) => ffi::sqlite3_bind_int(s, i, c_int::from(*b)),
                    Value::Int(v) => ffi::sqlite3_bind_int64(s, i, *v),
                    Value::Float(v) => ffi::sqlite3_bind_double(s, i, *v),
                    Value::Text(t) => ffi::sqlite3_bind_text64(
                        s,
                        i,
                        t.as_ptr().cast(),
                        t.len() as u64,
                        ffi::SQLITE_TRANSIENT(),
                        ffi::SQLITE_UTF8 as u8,
                    ),
                    Value::Bytes(b) => ffi::sqlite3_bind_blob64(
                        s,
                        i,
                        b.as_ptr().cast(),
                        b.len() as u64,
                        ffi::SQLITE_TRANSIENT(),
                    ),
                }
            };
            if rc != ffi::SQLITE_OK {
                return Err(self.failure());
            }
        }
        Ok(())
    }

    /// Steps the statement to its end: the rows (bounded by `execute::MAX_RESULT_BYTES`) or the count.
    /// The columns are read after the first step: a statement kept prepared is prepared again
    /// by that step if the schema changed since (a column added, say).
    fn step(&self, stmt: &Statement, want: Want) -> Result<Output, Failure> {
        let mut columns = None;
        let mut rows = Vec::new();
        let mut size = 0usize;
        loop {
            // SAFETY: a prepared, bound statement of this connection.
            match unsafe { ffi::sqlite3_step(stmt.0.as_ptr()) } {
                ffi::SQLITE_ROW if want == Want::Affected => {}
                ffi::SQLITE_ROW => {
                    let values = stmt.row(columns.get_or_insert_with(|| stmt.columns()))?;
                    push_bounded(&mut rows, &mut size, values)?;
                }
                ffi::SQLITE_DONE => break,
                _ => return Err(self.failure()),
            }
        }
        let columns = columns.unwrap_or_else(|| stmt.columns());
        Ok(match want {
            // SAFETY: open (see `new`); reads the count of the last statement.
            Want::Affected => Output::Affected(unsafe { ffi::sqlite3_changes64(self.db()) } as u64),
            Want::Rows => Output::Rows(Rows {
                columns: columns.into_iter().map(|(name, _)| name).collect(),
                rows,
            }),
        })
    }

    /// The connection's last error, sorted as sqlx's would be.
    fn failure(&self) -> Failure {
        // SAFETY: open (see `new`); the message is copied before any other call.
        let (code, message) = unsafe {
            let code = ffi::sqlite3_extended_errcode(self.db());
            let message = CStr::from_ptr(ffi::sqlite3_errmsg(self.db()));
            (code, message.to_string_lossy().into_owned())
        };
        error::sqlite(i64::from(code), &message)
    }
}

/// The most statements a [`Prepared`] keeps; past it, it starts again empty.
const PREPARED: usize = 32;

/// Statements prepared on one connection, by text: a plugin sends the same few texts message
/// after message, the host's outbox too, and preparing one costs about what running an insert
/// does (planning the duplicate check's join, more). One cache holds either a plugin's
/// statements or the host's, never both, so each was judged by the authorizer as what it is
/// (SQLite prepares one again, authorizer included, when the schema changed). The owner drops
/// it before the connection goes back to the pool or is closed.
#[derive(Default)]
pub(super) struct Prepared(HashMap<Box<str>, Entry>);

impl Prepared {
    /// Finalizes every statement kept.
    pub(super) fn clear(&mut self) {
        self.0.clear();
    }
}

/// A prepared statement and its parameters' numbers.
struct Entry {
    stmt: Statement,
    numbers: Vec<Option<usize>>,
}

/// A prepared statement, finalized when dropped.
struct Statement(NonNull<ffi::sqlite3_stmt>);

// SAFETY: as for `Handle`: the connection is in serialized mode, and a statement is used only
// by its connection's owner (a `Conn`, between sqlx's operations on it, or the outbox's reader,
// under its lock).
unsafe impl Send for Statement {}
// SAFETY: as for `Send`; SQLite locks around every call in serialized mode.
unsafe impl Sync for Statement {}

impl Drop for Statement {
    fn drop(&mut self) {
        // SAFETY: prepared by `Handle::prepare` and finalized only here.
        unsafe { ffi::sqlite3_finalize(self.0.as_ptr()) };
    }
}

impl Statement {
    /// Ends the statement's run and unbinds its parameters.
    fn reset(&self) {
        // SAFETY: a prepared statement; the codes repeat the last step's, already reported.
        unsafe {
            ffi::sqlite3_reset(self.0.as_ptr());
            ffi::sqlite3_clear_bindings(self.0.as_ptr());
        }
    }

    /// Each parameter's number (`?NNN`, `$NNN`), `None` for a plain `?`. A name that is not a
    /// number (`:id`, `@id`, `$id`) is refused: sqlx binds none of them, nor does the host.
    fn numbers(&self) -> Result<Vec<Option<usize>>, Failure> {
        let s = self.0.as_ptr();
        // SAFETY: a prepared statement.
        let n = unsafe { ffi::sqlite3_bind_parameter_count(s) };
        (1..=n)
            .map(|i| {
                // SAFETY: a prepared statement; the name lives as long as it does.
                let name = unsafe { ffi::sqlite3_bind_parameter_name(s, i) };
                if name.is_null() {
                    return Ok(None);
                }
                // SAFETY: as above; NUL-terminated.
                let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
                match name.strip_prefix(['?', '$']).and_then(|n| n.parse().ok()) {
                    Some(number) => Ok(Some(number)),
                    None => Err(Failure::invalid(format!(
                        "parameter {name}: parameters are written ?, ?NNN or $NNN (bound by \
                         number)"
                    ))),
                }
            })
            .collect()
    }

    /// Each column's name and whether it is declared BOOLEAN (read as a boolean, as sqlx
    /// types it).
    fn columns(&self) -> Vec<(String, bool)> {
        let s = self.0.as_ptr();
        // SAFETY: a prepared statement; names and declared types are copied at once.
        let n = unsafe { ffi::sqlite3_column_count(s) };
        (0..n)
            .map(|i| unsafe {
                let name = ffi::sqlite3_column_name(s, i);
                let name = if name.is_null() {
                    String::new()
                } else {
                    CStr::from_ptr(name).to_string_lossy().into_owned()
                };
                let declared = ffi::sqlite3_column_decltype(s, i);
                let boolean = !declared.is_null() && {
                    let d = CStr::from_ptr(declared).to_bytes();
                    d.eq_ignore_ascii_case(b"boolean") || d.eq_ignore_ascii_case(b"bool")
                };
                (name, boolean)
            })
            .collect()
    }

    /// The current row's values by storage class, as `value::sqlite_row` reads sqlx's rows.
    fn row(&self, columns: &[(String, bool)]) -> Result<Vec<Value>, Failure> {
        let s = self.0.as_ptr();
        let mut out = Vec::with_capacity(columns.len());
        for (i, (_, boolean)) in columns.iter().enumerate() {
            let i = i as c_int;
            // SAFETY: a statement on a row; text and blob pointers are read with their length
            // before the next call on the statement.
            let value = unsafe {
                match ffi::sqlite3_column_type(s, i) {
                    ffi::SQLITE_NULL => Value::Null,
                    ffi::SQLITE_INTEGER if *boolean => {
                        Value::Boolean(ffi::sqlite3_column_int64(s, i) != 0)
                    }
                    ffi::SQLITE_INTEGER => Value::Int(ffi::sqlite3_column_int64(s, i)),
                    ffi::SQLITE_FLOAT => Value::Float(ffi::sqlite3_column_double(s, i)),
                    ffi::SQLITE_BLOB => Value::Bytes(bytes(
                        ffi::sqlite3_column_blob(s, i).cast(),
                        ffi::sqlite3_column_bytes(s, i),
                    )),
                    _ => {
                        let text = bytes(
                            ffi::sqlite3_column_text(s, i).cast(),
                            ffi::sqlite3_column_bytes(s, i),
                        );
                        Value::Text(
                            String::from_utf8(text)
                                .map_err(|e| Failure::other(format!("cannot read a value: {e}")))?,
                        )
                    }
                }
            };
            out.push(value);
        }
        Ok(out)
    }
}

/// Copies `len` bytes from `p` (NULL for an empty value).
///
/// # Safety
/// `p` is NULL or valid for `len` bytes.
unsafe fn bytes(p: *const u8, len: c_int) -> Vec<u8> {
    if p.is_null() || len <= 0 {
        return Vec::new();
    }
    // SAFETY: as the caller promises.
    unsafe { std::slice::from_raw_parts(p, len as usize) }.to_vec()
}
