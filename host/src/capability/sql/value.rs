//! The WIT `value` variant and the backends' types: how parameters are bound and how each
//! column type comes back. The guest sees one mapping for three databases:
//!
//! | WIT value | parameter binds as                         | columns that come back as it |
//! |-----------|--------------------------------------------|------------------------------|
//! | `null`    | NULL (PostgreSQL: of unspecified type, so the server infers it) | NULL of any type; PostgreSQL `void` |
//! | `boolean` | BOOL (PostgreSQL), TINYINT 0/1 (MySQL), INTEGER 0/1 (SQLite) | PostgreSQL BOOL; MySQL BOOLEAN (`TINYINT(1)`); SQLite integers of a column declared BOOLEAN |
//! | `int`     | 64-bit integer (PostgreSQL INT8)           | every integer width, signed or not (a MySQL `BIGINT UNSIGNED` above 2^63-1 is an error); MySQL YEAR and BIT |
//! | `float`   | 64-bit float (PostgreSQL FLOAT8)           | REAL, FLOAT, DOUBLE |
//! | `text`    | text (PostgreSQL TEXT: cast for other column types, `$1::date`, `$1::jsonb`) | CHAR, VARCHAR, TEXT, JSON, JSONB, XML, ENUM, SET, UUID (hyphenated), PostgreSQL NUMERIC and MySQL DECIMAL (exact digits, see below), and dates and times as ISO 8601 |
//! | `bytes`   | BYTEA, BLOB, VARBINARY                     | BYTEA, BLOB, BINARY, VARBINARY, MySQL GEOMETRY |
//!
//! Exact decimals (PostgreSQL NUMERIC, MySQL DECIMAL) come back as **text** (`"12.50"`,
//! `"NaN"`): a float would round money and large counters, and the text parses losslessly in
//! any language. Dates and times are ISO 8601 text: `2024-05-01`, `2024-05-01T13:45:00.25`
//! (PostgreSQL TIMESTAMPTZ in UTC with `Z`; MySQL TIMESTAMP in the session time zone, UTC
//! unless the URL sets one), `13:45:00`, `13:45:00+02:00` (TIMETZ), PostgreSQL INTERVAL as a
//! duration (`P1Y2M3DT4H`), MySQL TIME as a signed duration (`-838:59:59`). SQLite has no
//! column types of its own: a value comes back as what it is stored as (INTEGER, REAL, TEXT,
//! BLOB), so a date stored as text comes back as that text.
//!
//! A PostgreSQL type outside this table (arrays, ranges, geometry, network addresses, money,
//! composites) is an `invalid` error naming the column and the cast that reads it (`::text`).

use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::mysql::{MySql, MySqlArguments, MySqlRow};
use sqlx::postgres::types::Oid;
use sqlx::postgres::{PgArgumentBuffer, PgArguments, PgRow, PgTypeInfo, PgTypeKind, Postgres};
use sqlx::sqlite::{Sqlite, SqliteArguments, SqliteRow};
use sqlx::{Arguments as _, Column as _, Decode, Encode, Row, Type, TypeInfo as _, ValueRef as _};

use super::text;
use crate::wit::worker::plugin::sql::Value;

/// A NULL parameter whose type PostgreSQL infers from where it is used, as it does for a
/// literal NULL: a typed NULL (say INT8) would not go into a DATE or BYTEA column.
struct PgUntypedNull;

impl Type<Postgres> for PgUntypedNull {
    fn type_info() -> PgTypeInfo {
        // OID 0: "unspecified" in the extended protocol's Parse message.
        PgTypeInfo::with_oid(Oid(0))
    }
}

impl Encode<'_, Postgres> for PgUntypedNull {
    fn encode_by_ref(&self, _: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        Ok(IsNull::Yes)
    }
}

/// Adds one parameter of every non-null variant; the backends agree on these Rust types.
macro_rules! bind_value {
    ($args:expr, $value:expr, $null:expr) => {
        match $value {
            Value::Null => $args.add($null),
            Value::Boolean(b) => $args.add(b),
            Value::Int(i) => $args.add(i),
            Value::Float(f) => $args.add(f),
            Value::Text(s) => $args.add(s),
            Value::Bytes(b) => $args.add(b),
        }
    };
}

pub(super) fn sqlite_args(params: Vec<Value>) -> Result<SqliteArguments, BoxDynError> {
    let mut args = SqliteArguments::default();
    for value in params {
        bind_value!(args, value, None::<i64>)?;
    }
    Ok(args)
}

pub(super) fn mysql_args(params: Vec<Value>) -> Result<MySqlArguments, BoxDynError> {
    let mut args = MySqlArguments::default();
    for value in params {
        bind_value!(args, value, None::<i64>)?;
    }
    Ok(args)
}

pub(super) fn pg_args(params: Vec<Value>) -> Result<PgArguments, BoxDynError> {
    let mut args = PgArguments::default();
    for value in params {
        bind_value!(args, value, PgUntypedNull)?;
    }
    Ok(args)
}

/// One letter per parameter's variant. sqlx caches a PostgreSQL statement by its text with the
/// parameter types of its first use; the host appends this signature (as a comment) so that
/// the same text bound with other variants is prepared again rather than bound wrongly.
pub(super) fn signature(params: &[Value]) -> String {
    params
        .iter()
        .map(|v| match v {
            Value::Null => 'n',
            Value::Boolean(_) => 'b',
            Value::Int(_) => 'i',
            Value::Float(_) => 'f',
            Value::Text(_) => 't',
            Value::Bytes(_) => 'y',
        })
        .collect()
}

/// Roughly what a value costs in memory, to bound a result.
pub(super) fn size_of(value: &Value) -> usize {
    16 + match value {
        Value::Text(s) => s.len(),
        Value::Bytes(b) => b.len(),
        _ => 0,
    }
}

/// The column names of a row.
pub(super) fn columns<R: Row>(row: &R) -> Vec<String> {
    row.columns().iter().map(|c| c.name().to_string()).collect()
}

fn decode<'r, DB: sqlx::Database, T: Decode<'r, DB>>(
    value: DB::ValueRef<'r>,
) -> Result<T, ReadError> {
    T::decode(value).map_err(|e| ReadError::Bad(e.to_string()))
}

/// The values of a SQLite row, by each value's storage class; a column declared BOOLEAN reads
/// as a boolean.
pub(super) fn sqlite_row(row: &SqliteRow) -> Result<Vec<Value>, ReadError> {
    let mut out = Vec::with_capacity(row.len());
    for (i, column) in row.columns().iter().enumerate() {
        let raw = row.try_get_raw(i).map_err(|e| e.to_string())?;
        if raw.is_null() {
            out.push(Value::Null);
            continue;
        }
        let storage = raw.type_info().name().to_string();
        let declared_bool = column.type_info().name() == "BOOLEAN";
        out.push(match storage.as_str() {
            "INTEGER" if declared_bool => Value::Boolean(decode::<Sqlite, i64>(raw)? != 0),
            "INTEGER" => Value::Int(decode::<Sqlite, i64>(raw)?),
            "REAL" => Value::Float(decode::<Sqlite, f64>(raw)?),
            "BLOB" => Value::Bytes(decode::<Sqlite, Vec<u8>>(raw)?),
            _ => Value::Text(decode::<Sqlite, String>(raw)?),
        });
    }
    Ok(out)
}

/// The values of a PostgreSQL row (binary format), by column type; see the module's table.
pub(super) fn pg_row(row: &PgRow) -> Result<Vec<Value>, ReadError> {
    let mut out = Vec::with_capacity(row.len());
    for (i, column) in row.columns().iter().enumerate() {
        let raw = row.try_get_raw(i).map_err(|e| e.to_string())?;
        if raw.is_null() {
            out.push(Value::Null);
            continue;
        }
        let mut ty = column.type_info().clone();
        while let PgTypeKind::Domain(base) = ty.kind() {
            ty = base.clone();
        }
        let bytes = raw.as_bytes().map_err(|e| e.to_string())?;
        // Built-in types by OID, which PostgreSQL never renumbers.
        let oid = ty.oid().map_or(0, |o| o.0);
        let value = match (ty.kind(), oid) {
            (PgTypeKind::Enum(_), _) => Value::Text(text_of(bytes)?),
            (_, 16) => Value::Boolean(decode::<Postgres, bool>(raw)?),
            (_, 21) => Value::Int(decode::<Postgres, i16>(raw)?.into()),
            (_, 23) => Value::Int(decode::<Postgres, i32>(raw)?.into()),
            (_, 20) => Value::Int(decode::<Postgres, i64>(raw)?),
            (_, 26) => Value::Int(decode::<Postgres, Oid>(raw)?.0.into()),
            (_, 700) => Value::Float(decode::<Postgres, f32>(raw)?.into()),
            (_, 701) => Value::Float(decode::<Postgres, f64>(raw)?),
            // text, varchar, char(n), "char", name, unknown, json, xml
            (_, 25 | 1043 | 1042 | 18 | 19 | 705 | 114 | 142) => Value::Text(text_of(bytes)?),
            // JSONB's binary format is a version byte (1) and the JSON text.
            (_, 3802) => Value::Text(text_of(bytes.get(1..).unwrap_or_default())?),
            (_, 17) => Value::Bytes(bytes.to_vec()),
            (_, 1700) => Value::Text(text::pg_numeric(bytes)?),
            (_, 1082) => Value::Text(text::pg_date(bytes)?),
            (_, 1114) => Value::Text(text::pg_timestamp(bytes, false)?),
            (_, 1184) => Value::Text(text::pg_timestamp(bytes, true)?),
            (_, 1083) => Value::Text(text::pg_time(bytes, false)?),
            (_, 1266) => Value::Text(text::pg_time(bytes, true)?),
            (_, 1186) => Value::Text(text::pg_interval(bytes)?),
            (_, 2950) => Value::Text(text::pg_uuid(bytes)?),
            (_, 2278) => Value::Null,
            _ if ty.name() == "citext" => Value::Text(text_of(bytes)?),
            _ => return Err(ReadError::Unmapped(unmapped(column.name(), ty.name()))),
        };
        out.push(value);
    }
    Ok(out)
}

/// The values of a MySQL/MariaDB row (binary protocol), by column type.
pub(super) fn mysql_row(row: &MySqlRow) -> Result<Vec<Value>, ReadError> {
    let mut out = Vec::with_capacity(row.len());
    for (i, column) in row.columns().iter().enumerate() {
        let raw = row.try_get_raw(i).map_err(|e| e.to_string())?;
        if raw.is_null() {
            out.push(Value::Null);
            continue;
        }
        let ty = column.type_info();
        let value = match ty.name() {
            "BOOLEAN" => Value::Boolean(decode::<MySql, i8>(raw)? != 0),
            "TINYINT" | "SMALLINT" | "INT" | "MEDIUMINT" | "BIGINT" => {
                Value::Int(decode::<MySql, i64>(raw)?)
            }
            "TINYINT UNSIGNED" | "SMALLINT UNSIGNED" | "INT UNSIGNED" | "MEDIUMINT UNSIGNED"
            | "BIGINT UNSIGNED" => {
                let n = decode::<MySql, u64>(raw)?;
                Value::Int(i64::try_from(n).map_err(|_| {
                    ReadError::Unmapped(format!(
                        "column \"{}\" holds {n}, beyond a 64-bit signed int; cast it to text",
                        column.name()
                    ))
                })?)
            }
            "YEAR" => Value::Int(decode::<MySql, u16>(raw)?.into()),
            "BIT" => {
                let bytes = decode::<MySql, Vec<u8>>(raw)?;
                Value::Int(bytes.iter().fold(0i64, |n, b| (n << 8) | i64::from(*b)))
            }
            "FLOAT" => Value::Float(decode::<MySql, f32>(raw)?.into()),
            "DOUBLE" => Value::Float(decode::<MySql, f64>(raw)?),
            "DATE" => Value::Text(text::mysql_datetime(&decode::<MySql, Vec<u8>>(raw)?, true)?),
            "DATETIME" | "TIMESTAMP" => Value::Text(text::mysql_datetime(
                &decode::<MySql, Vec<u8>>(raw)?,
                false,
            )?),
            "TIME" => Value::Text(text::mysql_time(&decode::<MySql, Vec<u8>>(raw)?)?),
            // DECIMAL, JSON, ENUM and SET come as text in the binary protocol too.
            "DECIMAL" | "JSON" | "ENUM" | "SET" => {
                Value::Text(text_of(&decode::<MySql, Vec<u8>>(raw)?)?)
            }
            "GEOMETRY" => Value::Bytes(decode::<MySql, Vec<u8>>(raw)?),
            // Strings and blobs share their wire types; the collation tells text from bytes.
            _ if <String as Type<MySql>>::compatible(ty) => {
                Value::Text(decode::<MySql, String>(raw)?)
            }
            _ if <Vec<u8> as Type<MySql>>::compatible(ty) => {
                Value::Bytes(decode::<MySql, Vec<u8>>(raw)?)
            }
            other => return Err(ReadError::Unmapped(unmapped(column.name(), other))),
        };
        out.push(value);
    }
    Ok(out)
}

/// Why a row could not be read.
#[derive(Debug)]
pub(super) enum ReadError {
    /// A column type with no WIT value: the statement should cast it (`invalid`).
    Unmapped(String),
    /// A value the driver could not decode (`other`).
    Bad(String),
}

impl From<String> for ReadError {
    fn from(why: String) -> ReadError {
        ReadError::Bad(why)
    }
}

impl From<text::BadBytes> for ReadError {
    fn from(why: text::BadBytes) -> ReadError {
        ReadError::Bad(why.to_string())
    }
}

fn text_of(bytes: &[u8]) -> Result<String, ReadError> {
    String::from_utf8(bytes.to_vec()).map_err(|e| ReadError::Bad(e.to_string()))
}

/// Why a column cannot be read, and the cast that reads it.
fn unmapped(column: &str, ty: &str) -> String {
    format!(
        "column \"{column}\" has type {ty}, which has no WIT value; select it cast to text \
         (PostgreSQL `{column}::text`, MySQL `CAST({column} AS CHAR)`)"
    )
}
