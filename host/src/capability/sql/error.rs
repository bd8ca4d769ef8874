//! How a failure reads to the guest: sqlx's errors sorted into the WIT `sql-error` kinds by
//! each backend's codes, and whether the message's transaction survives the failure.

use sqlx::error::DatabaseError;
use sqlx::mysql::MySqlDatabaseError;
use sqlx::postgres::PgDatabaseError;
use sqlx::sqlite::SqliteError;

use crate::wit::worker::plugin::sql::SqlError;

/// Why a message's transaction was not committed: the cause its retry records.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CommitError {
    /// A statement was cut off mid-way (its deadline): the transaction was rolled back.
    #[error("[sql.{store}] a statement was cut off; rolled back")]
    CutOff { store: String },
    /// The database refused the commit.
    #[error("[sql.{store}] commit failed: {why}")]
    Failed { store: String, why: String },
    #[error("[sql.{store}] commit timed out")]
    TimedOut { store: String },
    /// An earlier failure lost the transaction.
    #[error("[sql.{store}] {why}")]
    Lost { store: String, why: String },
}

/// Why the database did not answer the `/readyz` ping (its URL's password removed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub(crate) struct PingError {
    pub why: String,
}

/// A failed statement: what the guest is told, and whether the transaction is gone with it.
#[derive(Debug, Clone)]
pub(super) struct Failure {
    pub error: SqlError,
    /// The connection or the transaction cannot go on (connection lost, timed out, rolled
    /// back by the server): later statements of the message fail and it cannot commit.
    pub lost: bool,
    /// The failure says the database does not answer (for `/readyz`); a statement that ran
    /// out of the handler's time says nothing about the database.
    pub down: bool,
}

impl Failure {
    pub(super) fn unavailable(why: impl Into<String>) -> Failure {
        Failure {
            error: SqlError::Unavailable(why.into()),
            lost: true,
            down: true,
        }
    }

    /// The handler's deadline passed during the call.
    pub(super) fn timed_out(why: impl Into<String>) -> Failure {
        Failure {
            down: false,
            ..Failure::unavailable(why)
        }
    }

    pub(super) fn invalid(why: impl Into<String>) -> Failure {
        Failure {
            error: SqlError::Invalid(why.into()),
            lost: false,
            down: false,
        }
    }

    pub(super) fn other(why: impl Into<String>) -> Failure {
        Failure {
            error: SqlError::Other(why.into()),
            lost: false,
            down: false,
        }
    }

    fn constraint(why: String) -> Failure {
        Failure {
            error: SqlError::Constraint(why),
            lost: false,
            down: false,
        }
    }

    /// The same failure, marking the transaction gone.
    pub(super) fn lost(mut self) -> Failure {
        self.lost = true;
        self
    }

    /// The metrics label of the error kind.
    pub(super) fn kind(&self) -> &'static str {
        kind(&self.error)
    }
}

/// The metrics label of an error kind.
pub(super) fn kind(error: &SqlError) -> &'static str {
    match error {
        SqlError::Denied => "denied",
        SqlError::Unavailable(_) => "unavailable",
        SqlError::Constraint(_) => "constraint",
        SqlError::Invalid(_) => "invalid",
        SqlError::Other(_) => "other",
    }
}

/// The error's text, whichever its kind.
pub(super) fn message(error: &SqlError) -> &str {
    match error {
        SqlError::Denied => "denied",
        SqlError::Unavailable(m)
        | SqlError::Constraint(m)
        | SqlError::Invalid(m)
        | SqlError::Other(m) => m,
    }
}

/// Sorts a sqlx error. Its texts name no URL: sqlx's own messages hold none, and the server's
/// are about the statement.
pub(super) fn classify(error: &sqlx::Error) -> Failure {
    use sqlx::Error as E;
    match error {
        E::Database(db) => database(db.as_ref()),
        E::Io(e) => Failure::unavailable(format!("connection failed: {e}")),
        E::Tls(e) => Failure::unavailable(format!("TLS failed: {e}")),
        E::PoolTimedOut => {
            Failure::unavailable("no connection became free or could be opened in time")
        }
        E::PoolClosed | E::WorkerCrashed => Failure::unavailable(error.to_string()),
        E::Configuration(e) => Failure::unavailable(format!("cannot connect: {e}")),
        // sqlx's own parameter count check on MySQL, which leaves the connection unusable (the
        // host checks first, so this is a backstop).
        E::Protocol(m) if m.contains("parameters") => Failure::invalid(m.clone()).lost(),
        E::Protocol(m) => Failure::other(m.clone()).lost(),
        E::InvalidArgument(m) => Failure::invalid(m.clone()),
        E::Encode(e) => Failure::invalid(format!("cannot bind a parameter: {e}")),
        E::TypeNotFound { type_name } => Failure::invalid(format!("unknown type {type_name}")),
        other => Failure::other(other.to_string()),
    }
}

fn database(db: &dyn DatabaseError) -> Failure {
    if let Some(pg) = db.try_downcast_ref::<PgDatabaseError>() {
        return postgres(pg);
    }
    if let Some(my) = db.try_downcast_ref::<MySqlDatabaseError>() {
        return mysql(my, db.kind());
    }
    if let Some(lite) = db.try_downcast_ref::<SqliteError>() {
        let code = lite.code().and_then(|c| c.parse::<i64>().ok()).unwrap_or(0);
        return sqlite(code, db.message());
    }
    Failure::other(db.message().to_string())
}

/// PostgreSQL, by SQLSTATE class: 23 integrity, 42 syntax or access rule, 08 connection.
fn postgres(e: &PgDatabaseError) -> Failure {
    let text = match e.detail() {
        Some(detail) => format!("{} ({detail})", e.message()),
        None => e.message().to_string(),
    };
    let code = e.code();
    match code {
        c if c.starts_with("23") => Failure::constraint(text),
        // A table, type or schema already there. Two transactions running the same
        // `CREATE TABLE IF NOT EXISTS` at once collide as 23505 on the catalog or as one of
        // these, depending on timing: both read as the state conflict they are.
        "42P07" | "42710" | "42P06" => Failure::constraint(text),
        // 08P01 is how the server refuses a wrong parameter count.
        c if c.starts_with("42") || matches!(c, "08P01" | "26000" | "3F000" | "34000") => {
            Failure::invalid(text)
        }
        // The statement_timeout the host sets to the handler's deadline.
        "57014" => Failure::timed_out(format!("timed out: {text}")),
        c if c.starts_with("08") || c.starts_with("53") || c.starts_with("57P") => {
            Failure::unavailable(text)
        }
        c if c.starts_with("58") => Failure::unavailable(text),
        _ => Failure::other(text),
    }
}

/// MySQL/MariaDB, by error number (constraints as sqlx sorts them).
fn mysql(e: &MySqlDatabaseError, kind: sqlx::error::ErrorKind) -> Failure {
    let text = e.message().to_string();
    if !matches!(kind, sqlx::error::ErrorKind::Other) {
        return Failure::constraint(text);
    }
    match e.number() {
        // Parse error, unknown table/column/function/database, column count, bad arguments
        // to a prepared statement, statement not allowed as a prepared one.
        1046 | 1049 | 1052 | 1054 | 1064 | 1109 | 1136 | 1146 | 1149 | 1210 | 1295 | 1305
        | 1630 => Failure::invalid(text),
        // Too many connections, shutdown, killed, connection lost.
        1040 | 1053 | 1927 | 2006 | 2013 => Failure::unavailable(text),
        // Interrupted, statement time limits (MariaDB, MySQL).
        1317 | 1969 | 3024 => Failure::timed_out(text),
        // A deadlock rolls back the whole transaction, not only the statement.
        1213 => Failure::other(text).lost(),
        _ => Failure::other(text),
    }
}

/// SQLite, by primary result code (the low byte of the extended one).
pub(super) fn sqlite(code: i64, message: &str) -> Failure {
    let text = message.to_string();
    match code & 0xff {
        // CONSTRAINT, MISMATCH (a value of the wrong type for the column).
        19 | 20 => Failure::constraint(text),
        // ERROR (syntax, no such table or column), RANGE (parameter index).
        1 | 25 => Failure::invalid(text),
        // BUSY, LOCKED: another writer held the lock past the busy timeout.
        5 | 6 => Failure::timed_out(text),
        // NOMEM, READONLY, INTERRUPT, IOERR, CORRUPT, FULL, CANTOPEN, NOTADB: SQLite may have
        // rolled the transaction back itself.
        7 | 8 | 9 | 10 | 11 | 13 | 14 | 26 => Failure::unavailable(text),
        _ => Failure::other(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_codes_sort_into_kinds() {
        assert_eq!(
            sqlite(2067, "UNIQUE constraint failed").kind(),
            "constraint"
        );
        assert_eq!(sqlite(1, "near \"SELEC\": syntax error").kind(), "invalid");
        assert_eq!(sqlite(5, "database is locked").kind(), "unavailable");
        assert!(sqlite(5, "database is locked").lost);
        assert_eq!(sqlite(21, "misuse").kind(), "other");
    }

    #[test]
    fn transport_errors_are_unavailable_and_lose_the_transaction() {
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        let failure = classify(&io);
        assert_eq!(failure.kind(), "unavailable");
        assert!(failure.lost);
        assert_eq!(classify(&sqlx::Error::PoolTimedOut).kind(), "unavailable");
        let count = sqlx::Error::Protocol(
            "prepared statement expected 2 parameters but 1 parameters were provided".into(),
        );
        assert_eq!(classify(&count).kind(), "invalid");
    }
}
