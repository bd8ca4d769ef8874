//! SQL on the database the subscription is granted (`sql = "NAME"` in worker.toml): the component
//! world's `sql` interface. Every statement of one handler call runs in one transaction, committed
//! only when the handler answers ok. Placeholders are the backend's own (`$1` for PostgreSQL, `?`
//! for MySQL and SQLite). Components only (ABI v1 has no SQL calls).
//!
//! ```
//! use worker_plugin_sdk::{Error, Message, sql, testing::TestMessage};
//! use worker_plugin_sdk::sql::{Rows, Value};
//!
//! fn handle(msg: &Message) -> Result<(), Error> {
//!     let id: i64 = msg.body_str()?.parse().map_err(Error::fail)?;
//!     let rows = sql::query("SELECT status FROM orders WHERE id = $1", &[id.into()])?;
//!     let Some(row) = rows.first() else {
//!         return Err(Error::fail(format_args!("no order {id}")));
//!     };
//!     if row.get("status").and_then(Value::as_str) == Some("unpaid") {
//!         sql::execute("UPDATE orders SET status = 'closed' WHERE id = $1", &[id.into()])?;
//!     }
//!     Ok(())
//! }
//!
//! let run = TestMessage::new("7")
//!     .sql_rows(Rows::new(["status"]).row(["unpaid"]))
//!     .run(handle);
//! assert!(run.outcome.is_ok());
//! assert_eq!(run.sql.len(), 2);
//! assert!(run.sql[1].statement.starts_with("UPDATE"));
//! assert_eq!(run.sql[1].params, [Value::Int(7)]);
//! ```

use std::fmt;

use crate::{Error, sys};

/// A parameter or column value: the world's `sql.value`.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// A boolean.
    Boolean(bool),
    /// An integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// Text.
    Text(String),
    /// Bytes.
    Bytes(Vec<u8>),
}

impl Value {
    /// Whether this is NULL.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The boolean, if this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Boolean(b) => Some(*b),
            _ => None,
        }
    }

    /// The integer, if this is one.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// The number as `f64`, if this is a float or an integer.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(x) => Some(*x),
            Value::Int(n) => Some(*n as f64),
            _ => None,
        }
    }

    /// The text, if this is text.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Text(s) => Some(s),
            _ => None,
        }
    }

    /// The bytes, if this is bytes or text.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bytes(b) => Some(b),
            Value::Text(s) => Some(s.as_bytes()),
            _ => None,
        }
    }
}

macro_rules! value_from {
    ($($t:ty => |$v:ident| $e:expr),* $(,)?) => {
        $(impl From<$t> for Value {
            fn from($v: $t) -> Self { $e }
        })*
    };
}

value_from! {
    bool => |v| Value::Boolean(v),
    i64 => |v| Value::Int(v),
    i32 => |v| Value::Int(v.into()),
    u32 => |v| Value::Int(v.into()),
    f64 => |v| Value::Float(v),
    String => |v| Value::Text(v),
    &str => |v| Value::Text(v.to_owned()),
    &String => |v| Value::Text(v.clone()),
    Vec<u8> => |v| Value::Bytes(v),
    &[u8] => |v| Value::Bytes(v.to_vec()),
}

/// `None` is NULL.
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// A query's answer: column names and rows of values (the world's `sql.rows`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rows {
    /// The column names, in order.
    pub columns: Vec<String>,
    /// The rows, each with one value per column.
    pub rows: Vec<Vec<Value>>,
}

impl Rows {
    /// No rows, with these columns (to script a test's answer with [`Rows::row`]).
    pub fn new<S: Into<String>>(columns: impl IntoIterator<Item = S>) -> Self {
        Rows {
            columns: columns.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    #[must_use]
    pub fn row<V: Into<Value>>(mut self, values: impl IntoIterator<Item = V>) -> Self {
        self.rows.push(values.into_iter().map(Into::into).collect());
        self
    }

    /// How many rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The first row.
    pub fn first(&self) -> Option<Row<'_>> {
        self.iter().next()
    }

    /// The rows, each readable by column name.
    pub fn iter(&self) -> impl Iterator<Item = Row<'_>> {
        self.rows.iter().map(|values| Row {
            columns: &self.columns,
            values,
        })
    }
}

/// One row of [`Rows`].
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    columns: &'a [String],
    values: &'a [Value],
}

impl<'a> Row<'a> {
    /// The value of the column with this name (the first such column).
    pub fn get(&self, column: &str) -> Option<&'a Value> {
        let i = self.columns.iter().position(|c| c == column)?;
        self.values.get(i)
    }

    /// The value at this position.
    pub fn at(&self, index: usize) -> Option<&'a Value> {
        self.values.get(index)
    }

    /// The values, in column order.
    pub fn values(&self) -> &'a [Value] {
        self.values
    }
}

/// Why a statement failed: the world's `sql-error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqlError {
    /// The subscription has no `sql` grant.
    Denied,
    /// The database cannot be reached now, with the host's reason.
    Unavailable(String),
    /// A constraint refused the statement (unique key, foreign key, check).
    Constraint(String),
    /// The statement or its parameters are not valid.
    Invalid(String),
    /// Any other database error.
    Other(String),
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SqlError::Denied => f.write_str("sql: denied (the subscription has no sql grant)"),
            SqlError::Unavailable(why) => write!(f, "sql: unavailable: {why}"),
            SqlError::Constraint(why) => write!(f, "sql: constraint: {why}"),
            SqlError::Invalid(why) => write!(f, "sql: invalid: {why}"),
            SqlError::Other(why) => write!(f, "sql: {why}"),
        }
    }
}

impl std::error::Error for SqlError {}

/// A missing grant, an unreachable database or an unknown error may clear up, so those retry; a
/// constraint or an invalid statement refuses the same message again, so those fail.
impl From<SqlError> for Error {
    fn from(e: SqlError) -> Self {
        match e {
            SqlError::Denied | SqlError::Unavailable(_) | SqlError::Other(_) => Error::retry(e),
            SqlError::Constraint(_) | SqlError::Invalid(_) => Error::fail(e),
        }
    }
}

/// Runs a statement that returns rows.
pub fn query(statement: &str, params: &[Value]) -> Result<Rows, SqlError> {
    sys::sql_query(statement, params)
}

/// Runs a statement and returns how many rows it affected.
pub fn execute(statement: &str, params: &[Value]) -> Result<u64, SqlError> {
    sys::sql_execute(statement, params)
}
