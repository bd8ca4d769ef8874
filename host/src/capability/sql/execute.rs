//! One statement on any backend, as the host runs it: its parameters counted and bound, its
//! rows read and bounded. Transactions and savepoints are `backend.rs`'s.

use futures_util::TryStreamExt as _;
use sqlx::pool::PoolConnection;
use sqlx::{
    AssertSqlSafe, Column as _, Database, Either, Executor, IntoArguments, MySql, Postgres,
    SqlSafeStr as _, Sqlite, Statement as _,
};

use super::error::{Failure, classify};
use super::value::{self, ReadError};
use crate::wit::worker::plugin::sql::{Rows, Value};

/// The most a query's result may hold in memory (roughly: bytes of text and blobs and 16 per
/// value) before the host refuses it: a guest cannot make the host buffer a whole table.
pub(super) const MAX_RESULT_BYTES: usize = 32 << 20;

/// What a statement is run for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Want {
    Rows,
    Affected,
}

pub(super) enum Output {
    Rows(Rows),
    Affected(u64),
}

fn encode_failure(e: sqlx::error::BoxDynError) -> Failure {
    Failure::invalid(format!("cannot bind a parameter: {e}"))
}

/// A PostgreSQL statement, as it comes (no savepoint). Its text carries the parameters' types:
/// sqlx caches one prepared statement per text, and a text bound with other types would fail.
pub(super) async fn postgres(
    conn: &mut PoolConnection<Postgres>,
    statement: &str,
    params: Vec<Value>,
    want: Want,
) -> Result<Output, Failure> {
    let sql = if params.is_empty() {
        statement.to_string()
    } else {
        format!(
            "{statement}\n-- worker-host params {}",
            value::signature(&params)
        )
    };
    let args = value::pg_args(params).map_err(encode_failure)?;
    run::<Postgres>(conn, sql, args, want, value::pg_row, |r| r.rows_affected()).await
}

/// A SQLite statement. A script whose later statements need its earlier ones cannot be
/// prepared ahead: it runs unchecked and reports its own errors.
pub(super) async fn sqlite(
    conn: &mut PoolConnection<Sqlite>,
    statement: &str,
    params: Vec<Value>,
    want: Want,
) -> Result<Output, Failure> {
    if let Ok(Some(expected)) = parameters::<Sqlite>(conn, statement).await {
        count_matches(expected, params.len())?;
    }
    let args = value::sqlite_args(params).map_err(encode_failure)?;
    let sql = statement.to_string();
    run::<Sqlite>(conn, sql, args, want, value::sqlite_row, |r| {
        r.rows_affected()
    })
    .await
}

/// A MySQL statement (one statement: a prepared one cannot hold more).
pub(super) async fn mysql(
    conn: &mut PoolConnection<MySql>,
    statement: &str,
    params: Vec<Value>,
    want: Want,
) -> Result<Output, Failure> {
    let expected = parameters::<MySql>(conn, statement).await;
    if let Some(expected) = expected.map_err(|e| classify(&e))? {
        count_matches(expected, params.len())?;
    }
    let args = value::mysql_args(params).map_err(encode_failure)?;
    let sql = statement.to_string();
    run::<MySql>(conn, sql, args, want, value::mysql_row, |r| {
        r.rows_affected()
    })
    .await
}

/// How many parameters `sql` takes, from its prepared statement (sqlx caches it per
/// connection, so the statement is still parsed once). The host checks the count itself
/// because sqlx does not help: SQLite binds missing parameters as NULL, and a mismatch on
/// MySQL leaves the connection waiting for an answer that never comes.
async fn parameters<DB>(conn: &mut DB::Connection, sql: &str) -> Result<Option<usize>, sqlx::Error>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    let sql = AssertSqlSafe(sql.to_string()).into_sql_str();
    let prepared = conn.prepare(sql).await?;
    Ok(match prepared.parameters() {
        Some(Either::Right(n)) => Some(n),
        Some(Either::Left(types)) => Some(types.len()),
        None => None,
    })
}

/// Adds a row to a result of `size` bytes so far, refusing one past [`MAX_RESULT_BYTES`].
pub(super) fn push_bounded(
    rows: &mut Vec<Vec<Value>>,
    size: &mut usize,
    values: Vec<Value>,
) -> Result<(), Failure> {
    *size += values.iter().map(value::size_of).sum::<usize>();
    if *size > MAX_RESULT_BYTES {
        return Err(Failure::other(format!(
            "the result passed {} MiB after {} rows; select fewer rows or columns",
            MAX_RESULT_BYTES >> 20,
            rows.len()
        )));
    }
    rows.push(values);
    Ok(())
}

pub(super) fn count_matches(expected: usize, given: usize) -> Result<(), Failure> {
    if expected == given {
        return Ok(());
    }
    Err(Failure::invalid(format!(
        "the statement takes {expected} parameters, {given} given"
    )))
}

/// Runs `sql` on any backend: the rows (bounded by [`MAX_RESULT_BYTES`]) or the count.
async fn run<DB>(
    conn: &mut DB::Connection,
    sql: String,
    args: DB::Arguments,
    want: Want,
    read: fn(&DB::Row) -> Result<Vec<Value>, ReadError>,
    affected: fn(DB::QueryResult) -> u64,
) -> Result<Output, Failure>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    let query = sqlx::query_with::<DB, _>(AssertSqlSafe(sql.clone()), args);
    if want == Want::Affected {
        let done = query.execute(&mut *conn).await.map_err(|e| classify(&e))?;
        return Ok(Output::Affected(affected(done)));
    }
    let mut columns = None;
    let mut rows = Vec::new();
    let mut size = 0usize;
    {
        let mut stream = query.fetch(&mut *conn);
        while let Some(row) = stream.try_next().await.map_err(|e| classify(&e))? {
            if columns.is_none() {
                columns = Some(value::columns(&row));
            }
            let values = read(&row).map_err(|e| match e {
                ReadError::Unmapped(why) => Failure::invalid(why),
                ReadError::Bad(why) => Failure::other(format!("cannot read a value: {why}")),
            })?;
            push_bounded(&mut rows, &mut size, values)?;
        }
    }
    let columns = match columns {
        Some(c) => c,
        // No row to read names from: the prepared statement has them (cached, no round trip).
        None => match conn.prepare(AssertSqlSafe(sql).into_sql_str()).await {
            Ok(prepared) => prepared
                .columns()
                .iter()
                .map(|c| c.name().to_string())
                .collect(),
            Err(_) => Vec::new(),
        },
    };
    Ok(Output::Rows(Rows { columns, rows }))
}
