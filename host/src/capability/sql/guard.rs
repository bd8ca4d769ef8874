//! The statement guard: what a plugin's SQL may be, decided on its text before the database
//! sees it (SPEC section 9, "What a grant cannot reach").
//!
//! The text is read with `sqlparser`'s tokenizer in the backend's own dialect (its quoting,
//! comments, dollar quotes and MySQL's executable comments), not parsed: a tokenizer reads
//! every statement a server accepts, so the guard never refuses valid SQL for want of grammar.
//! On the tokens it allows exactly one statement, of a kind from a short list (queries, data
//! changes and the DDL of a plugin's own tables), and refuses the rest by name. Independently
//! of the tokens, the raw text is searched for the host's table names and for the functions
//! that reach past the database, so a lexing difference between the tokenizer and the server
//! (a string the server ends earlier, say) cannot hide them; a literal that merely contains such
//! a name is refused too, and can be passed as a parameter instead.
//!
//! On SQLite the authorizer (`sqlite.rs`) checks the same rules again on what the statement
//! actually touches; on the servers the database role's privileges remain the outer wall.

use std::collections::HashMap;
use std::sync::Mutex;

use sqlparser::dialect::{Dialect, MySqlDialect, PostgreSqlDialect, SQLiteDialect};
use sqlparser::tokenizer::{Token, Tokenizer, Whitespace};

use crate::config::SqlKind;

/// A statement the guard let through, and what the host must do around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pass {
    /// Runs inside the message's transaction.
    Plain,
    /// MySQL/MariaDB DDL, which commits implicitly: allowed only as a message's first
    /// statement, after which the host begins the transaction again.
    ImplicitCommit,
}

/// Functions that read or write files, run programs, reach other databases, change the
/// session or signal other sessions. Lower case; matched as a call (`name(`).
const FUNCTIONS: &[&str] = &[
    // PostgreSQL: files, large objects on the server's disk, other databases, settings,
    // session-level locks, other backends, and the XML functions that run a query given as
    // text (which would read any table by a name built at run time).
    "pg_read_file",
    "pg_read_binary_file",
    "pg_ls_dir",
    "pg_stat_file",
    "pg_ls_logdir",
    "pg_ls_waldir",
    "pg_ls_tmpdir",
    "pg_ls_archive_statusdir",
    "pg_file_write",
    "lo_import",
    "lo_export",
    "dblink",
    "set_config",
    "pg_advisory_lock",
    "pg_advisory_lock_shared",
    "pg_try_advisory_lock",
    "pg_try_advisory_lock_shared",
    "pg_advisory_unlock",
    "pg_advisory_unlock_shared",
    "pg_advisory_unlock_all",
    "pg_terminate_backend",
    "pg_cancel_backend",
    "pg_reload_conf",
    "pg_rotate_logfile",
    "pg_promote",
    "query_to_xml",
    "table_to_xml",
    "schema_to_xml",
    "database_to_xml",
    "cursor_to_xml",
    // MySQL/MariaDB: files and session-level locks.
    "load_file",
    "get_lock",
    "release_lock",
    "release_all_locks",
    "sys_exec",
    "sys_eval",
    // SQLite: native code and files.
    "load_extension",
    "readfile",
    "writefile",
    "fts3_tokenizer",
];

/// The beginnings of the names of the host's tables and indexes in a subscription's database
/// (lower case: the outbox's), which a plugin's statements cannot name or touch (here and in
/// `sqlite.rs`).
pub(super) const HOST_TABLES: &[&str] = &["worker_inbox", "worker_outbox"];

/// Why a plugin's statement may not run: the text of its `invalid` error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(super) struct Refused(pub(super) String);

/// The most statement texts a [`Checked`] remembers; past it, it starts again empty.
const CHECKED_TEXTS: usize = 256;
/// Longer texts are checked every time (a plugin repeats its statements; a long one is rare,
/// and remembering it would hold its memory).
const CHECKED_LEN: usize = 4096;

/// The guard's verdicts on the statement texts of one database, remembered: a plugin sends
/// the same few texts message after message, and tokenizing one costs more than the insert
/// it guards. A verdict depends on nothing but the kind and the text, so it cannot go stale.
pub(super) struct Checked {
    kind: SqlKind,
    verdicts: Mutex<HashMap<Box<str>, Result<Pass, Refused>>>,
}

impl Checked {
    pub(super) fn new(kind: SqlKind) -> Checked {
        Checked {
            kind,
            verdicts: Mutex::default(),
        }
    }

    /// [`check`] on this database's kind, from memory when the text was checked before.
    pub(super) fn check(&self, statement: &str) -> Result<Pass, Refused> {
        if statement.len() > CHECKED_LEN {
            return check(self.kind, statement);
        }
        if let Some(verdict) = self.lock().get(statement) {
            return verdict.clone();
        }
        let verdict = check(self.kind, statement);
        let mut verdicts = self.lock();
        if verdicts.len() >= CHECKED_TEXTS {
            verdicts.clear();
        }
        verdicts.insert(statement.into(), verdict.clone());
        verdict
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, Result<Pass, Refused>>> {
        // A panic while holding it cannot leave the map half-written in a way that matters:
        // every entry is a complete verdict.
        self.verdicts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Checks a plugin's statement on `kind`: the statement as it may run, or why it may not
/// (the text of an `invalid` error).
pub(super) fn check(kind: SqlKind, statement: &str) -> Result<Pass, Refused> {
    raw(kind, statement)?;
    let tokens = tokenize(kind, statement)?;
    hidden_comments(kind, &tokens)?;
    let words = single(&tokens)?;
    words_allowed(kind, &words)?;
    classify(kind, &words)
}

/// The rules that read the raw text, whatever the tokens say.
fn raw(kind: SqlKind, statement: &str) -> Result<(), Refused> {
    let lower = statement.to_ascii_lowercase();
    for table in HOST_TABLES {
        if lower.contains(table) {
            return Err(Refused(format!(
                "{table}* are the host's tables (the outbox and inbox of exactly-once \
                 delivery): a plugin can neither read nor write them"
            )));
        }
    }
    for name in FUNCTIONS {
        if called(&lower, name) {
            return Err(Refused(format!(
                "{name}() reaches past the granted database (files, programs, other \
                 databases, the session or other sessions) and is not allowed"
            )));
        }
    }
    if kind == SqlKind::MySql {
        for word in ["outfile", "dumpfile"] {
            if word_in(&lower, word) {
                return Err(Refused(format!(
                    "INTO {}: writing files on the database server is not allowed",
                    word.to_ascii_uppercase()
                )));
            }
        }
    }
    if kind == SqlKind::Postgres && lower.contains("u&\"") {
        return Err(Refused(
            "Unicode-escaped identifiers (U&\"...\") are not allowed".into(),
        ));
    }
    Ok(())
}

/// Whether `lower` calls `name`: the name, not part of a longer identifier, then `(` after
/// optional quotes and blanks.
fn called(lower: &str, name: &str) -> bool {
    lower.match_indices(name).any(|(at, _)| {
        let before = lower[..at].chars().next_back();
        if before.is_some_and(is_ident) {
            return false;
        }
        let after = lower[at + name.len()..]
            .trim_start_matches(['"', '`', ']'])
            .trim_start();
        // dblink comes as dblink, dblink_exec, dblink_connect, ...
        let after = if name == "dblink" {
            after.trim_start_matches(|c: char| c == '_' || c.is_ascii_alphabetic())
        } else {
            after
        };
        after.starts_with('(')
    })
}

/// Whether `word` stands in `lower` as a word of its own.
fn word_in(lower: &str, word: &str) -> bool {
    lower.match_indices(word).any(|(at, _)| {
        let before = lower[..at].chars().next_back();
        let after = lower[at + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

fn is_ident(c: char) -> bool {
    c == '_' || c == '$' || c.is_alphanumeric()
}

fn tokenize(kind: SqlKind, statement: &str) -> Result<Vec<Token>, Refused> {
    let dialect: &dyn Dialect = match kind {
        SqlKind::Sqlite => &SQLiteDialect {},
        SqlKind::Postgres => &PostgreSqlDialect {},
        SqlKind::MySql => &MySqlDialect {},
    };
    Tokenizer::new(dialect, statement)
        .tokenize()
        .map_err(|e| Refused(format!("the host cannot read this statement: {e}")))
}

/// MariaDB runs the text of `/*M! ... */` comments; the tokenizer (like MySQL) does not, so
/// what they hold would pass unseen.
fn hidden_comments(kind: SqlKind, tokens: &[Token]) -> Result<(), Refused> {
    if kind != SqlKind::MySql {
        return Ok(());
    }
    let hidden = tokens.iter().any(|t| {
        matches!(t, Token::Whitespace(Whitespace::MultiLineComment(c))
            if c.trim_start().to_ascii_uppercase().starts_with("M!"))
    });
    if hidden {
        return Err(Refused(
            "executable comments (/*M! ... */) are not allowed".into(),
        ));
    }
    Ok(())
}

/// The statement's tokens without blanks and comments; more than one statement is refused.
fn single(tokens: &[Token]) -> Result<Vec<&Token>, Refused> {
    let mut statements = 0;
    let mut current: Vec<&Token> = Vec::new();
    let mut first: Vec<&Token> = Vec::new();
    for token in tokens {
        match token {
            Token::Whitespace(_) | Token::EOF => {}
            Token::SemiColon => {
                if !current.is_empty() {
                    statements += 1;
                    if first.is_empty() {
                        first = std::mem::take(&mut current);
                    }
                    current.clear();
                }
            }
            t => current.push(t),
        }
    }
    if !current.is_empty() {
        statements += 1;
        if first.is_empty() {
            first = current;
        }
    }
    if statements > 1 {
        return Err(Refused(format!(
            "one statement per call: this text holds {statements}; send them in separate \
             calls (they share the message's transaction)"
        )));
    }
    Ok(first)
}

/// Rules on single tokens: MySQL user variables (session state that outlives the message).
fn words_allowed(kind: SqlKind, words: &[&Token]) -> Result<(), Refused> {
    if kind != SqlKind::MySql {
        return Ok(());
    }
    for token in words {
        if let Token::Word(w) = token
            && w.quote_style.is_none()
            && w.value.starts_with('@')
            && !w.value.starts_with("@@")
        {
            return Err(Refused(format!(
                "user variables ({}) are session state that outlives the message; use \
                 parameters instead",
                w.value
            )));
        }
    }
    Ok(())
}

/// An unquoted word, upper-cased; anything else is `None`.
fn keyword(token: Option<&&Token>) -> Option<String> {
    match token {
        Some(Token::Word(w)) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
        _ => None,
    }
}

const DML: &[&str] = &["SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "VALUES"];

/// The statement's kind, from its first words, against the list of what a plugin may run.
fn classify(kind: SqlKind, words: &[&Token]) -> Result<Pass, Refused> {
    // A parenthesized query: `(SELECT ...) UNION (SELECT ...)`.
    let start = words
        .iter()
        .position(|t| !matches!(t, Token::LParen))
        .unwrap_or(words.len());
    let words = &words[start..];
    let Some(first) = keyword(words.first()) else {
        return match words.first() {
            None => Ok(Pass::Plain),
            Some(t) => Err(Refused(format!("a statement cannot start with {t}"))),
        };
    };
    match first.as_str() {
        w if DML.contains(&w) => dml(kind, words),
        "REPLACE" if kind != SqlKind::Postgres => dml(kind, words),
        "MERGE" | "TABLE" if kind == SqlKind::Postgres => dml(kind, words),
        "SHOW" if kind != SqlKind::Sqlite => Ok(Pass::Plain),
        "DESCRIBE" | "DESC" if kind == SqlKind::MySql => Ok(Pass::Plain),
        // Read-only pragmas only: the authorizer decides which (sqlite.rs).
        "PRAGMA" if kind == SqlKind::Sqlite => Ok(Pass::Plain),
        "EXPLAIN" => explain(kind, &words[1..]),
        "CREATE" | "ALTER" | "DROP" | "TRUNCATE" | "COMMENT" | "ANALYZE" => ddl(kind, words),
        "BEGIN" | "START" | "COMMIT" | "END" | "ROLLBACK" | "ABORT" | "SAVEPOINT" | "RELEASE"
        | "XA" => Err(Refused(format!(
            "{first}: the host owns the message's transaction (committed when the handler \
             answers ok, rolled back otherwise); transaction control is not allowed"
        ))),
        "SET" | "RESET" | "DISCARD" | "USE" => Err(Refused(format!(
            "{first} changes the connection's session, which outlives the message; session \
             settings are not allowed (SHOW and current_setting() read them)"
        ))),
        "ATTACH" | "DETACH" | "COPY" | "LOAD" | "VACUUM" => Err(Refused(format!(
            "{first} reaches past the granted database (other files or databases) and is not \
             allowed"
        ))),
        other => Err(Refused(format!(
            "{other} statements are not allowed: a plugin runs queries and data changes \
             (SELECT, INSERT, UPDATE, DELETE, WITH, ...) and the DDL of its own tables, \
             indexes and views"
        ))),
    }
}

/// A query or data change: refuses what it may hold that makes session state or files.
fn dml(kind: SqlKind, words: &[&Token]) -> Result<Pass, Refused> {
    for pair in words.windows(2) {
        let (a, b) = (keyword(Some(&pair[0])), keyword(Some(&pair[1])));
        if a.as_deref() == Some("INTO")
            && matches!(b.as_deref(), Some("TEMP" | "TEMPORARY"))
            && kind == SqlKind::Postgres
        {
            return Err(Refused(
                "SELECT INTO TEMP makes a session table that outlives the message; not allowed"
                    .into(),
            ));
        }
    }
    Ok(Pass::Plain)
}

/// `EXPLAIN [options] statement`: the statement must be one a plugin may run (EXPLAIN ANALYZE
/// runs it).
fn explain(kind: SqlKind, words: &[&Token]) -> Result<Pass, Refused> {
    let mut rest = words;
    loop {
        match rest.first() {
            Some(Token::LParen) => {
                // PostgreSQL's option list: `EXPLAIN (ANALYZE, FORMAT JSON) ...`.
                let close = rest.iter().position(|t| matches!(t, Token::RParen));
                rest = &rest[close.map_or(rest.len(), |i| i + 1)..];
            }
            Some(Token::Eq) => rest = &rest[1..],
            t => match keyword(t).as_deref() {
                Some(
                    "ANALYZE" | "VERBOSE" | "QUERY" | "PLAN" | "EXTENDED" | "PARTITIONS" | "FORMAT"
                    | "JSON" | "TEXT" | "TREE" | "TRADITIONAL" | "XML" | "YAML",
                ) => rest = &rest[1..],
                _ => break,
            },
        }
    }
    match keyword(rest.first()) {
        Some(w) if DML.contains(&w.as_str()) || w == "REPLACE" || w == "MERGE" || w == "TABLE" => {
            dml(kind, rest)
        }
        _ => Err(Refused(
            "EXPLAIN is allowed only of a query or data change".into(),
        )),
    }
}

/// DDL on the plugin's own tables, indexes, views and sequences; nothing temporary (session
/// state), no code (functions, procedures, triggers, rules) and no other kind of object.
fn ddl(kind: SqlKind, words: &[&Token]) -> Result<Pass, Refused> {
    let verb = keyword(words.first()).unwrap_or_default();
    let mut i = 1;
    if verb == "CREATE" && keyword(words.get(1)).as_deref() == Some("OR") {
        i = 3; // OR REPLACE
    }
    let object = loop {
        match keyword(words.get(i)).as_deref() {
            Some("TEMP" | "TEMPORARY" | "GLOBAL" | "LOCAL") => {
                return Err(Refused(format!(
                    "{verb} TEMPORARY objects are session state that outlives the message; \
                     not allowed"
                )));
            }
            Some("UNIQUE" | "UNLOGGED" | "MATERIALIZED" | "RECURSIVE" | "FULLTEXT" | "SPATIAL")
                if verb == "CREATE" || verb == "DROP" || verb == "ALTER" =>
            {
                i += 1;
            }
            Some("VIRTUAL") if kind == SqlKind::Sqlite && verb == "CREATE" => i += 1,
            other => break other.map(str::to_owned),
        }
    };
    let allowed = match verb.as_str() {
        "TRUNCATE" => true,
        "ANALYZE" => kind != SqlKind::MySql || object.as_deref() == Some("TABLE"),
        "COMMENT" => kind == SqlKind::Postgres,
        _ => match object.as_deref() {
            Some("TABLE" | "INDEX" | "VIEW" | "SEQUENCE") => true,
            Some("TYPE") => kind == SqlKind::Postgres,
            _ => false,
        },
    };
    if !allowed {
        let what = object.unwrap_or_default();
        return Err(Refused(
            format!(
                "{verb} {what} is not allowed: a plugin may create, alter and drop its own \
             tables, indexes, views and sequences, nothing else"
            )
            .replace("  ", " "),
        ));
    }
    Ok(match kind {
        SqlKind::MySql => Pass::ImplicitCommit,
        _ => Pass::Plain,
    })
}

#[cfg(test)]
mod tests;
