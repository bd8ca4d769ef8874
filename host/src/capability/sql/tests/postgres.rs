//! PostgreSQL at 127.0.0.1:5432 (database `test`, trust authentication).

use std::time::Duration;

use super::super::backend::Pool;
use super::server::{self, POSTGRES_URL, require_server};
use super::{Ctx, assert_kind, assert_values, e, open, scenarios, text};
use crate::capability::Capability as _;
use crate::config::SqlKind;
use crate::wit::worker::plugin::sql::{Host as _, Value};

async fn postgres() -> Ctx {
    require_server(SqlKind::Postgres, POSTGRES_URL, "service postgresql start").await;
    open(SqlKind::Postgres, POSTGRES_URL, None).await
}

#[tokio::test]
async fn values_round_trip() {
    let ctx = postgres().await;
    scenarios::round_trip(
        &ctx,
        ["BOOLEAN", "BIGINT", "DOUBLE PRECISION", "TEXT", "BYTEA"],
    )
    .await;
}

#[tokio::test]
async fn column_types_map_to_values() {
    let ctx = postgres().await;
    let mut m = ctx.message(Duration::from_secs(10));
    let sql = "SELECT 1::int2, 2::int4, 1.5::float4, 12.50::numeric(10,2), -0.000123::numeric, \
               123456789012345678901234567890.5::numeric, 'NaN'::numeric, 0::numeric, \
               DATE '2024-05-01', DATE '0044-03-15 BC', 'infinity'::date, \
               TIMESTAMP '2024-05-01 13:45:00.25', TIMESTAMPTZ '2024-05-01 13:45:00+02', \
               TIME '13:45:01', TIMETZ '13:45:00+02:00', \
               INTERVAL '1 year 2 months 3 days 04:05:06.5', INTERVAL '-1 day', \
               '{\"a\":1}'::json, '{\"a\": 1}'::jsonb, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, \
               'y'::char(2), 'n'::name, pg_sleep(0)";
    let rows = m.query(sql.into(), vec![]).await.expect("select");
    let want = [
        Value::Int(1),
        Value::Int(2),
        Value::Float(1.5),
        text("12.50"),
        text("-0.000123"),
        text("123456789012345678901234567890.5"),
        text("NaN"),
        text("0"),
        text("2024-05-01"),
        text("-0043-03-15"),
        text("infinity"),
        text("2024-05-01T13:45:00.25"),
        text("2024-05-01T11:45:00Z"),
        text("13:45:01"),
        text("13:45:00+02:00"),
        text("P1Y2M3DT4H5M6.5S"),
        text("P-1D"),
        text("{\"a\":1}"),
        text("{\"a\": 1}"),
        text("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        text("y "),
        text("n"),
        Value::Null,
    ];
    assert_values(&rows.rows[0], &want);
    let array = assert_kind(
        m.query("SELECT ARRAY[1, 2] AS xs".into(), vec![]).await,
        "invalid",
    );
    assert!(array.contains("xs::text"), "{array}");
    assert_eq!(m.finish(true).await, Ok(()));
}

#[tokio::test]
async fn enums_domains_and_typed_nulls() {
    let ctx = postgres().await;
    let (mood, pos, t) = (
        super::unique("mood"),
        super::unique("pos"),
        super::unique("sql_nulls"),
    );
    ctx.exec(&format!(
        "CREATE TYPE {mood} AS ENUM ('happy', 'sad'); \
         CREATE DOMAIN {pos} AS integer CHECK (VALUE > 0); \
         CREATE TABLE {t} (d date, j jsonb, y bytea, m {mood})"
    ))
    .await;
    let mut m = ctx.message(Duration::from_secs(10));
    let rows = m
        .query(format!("SELECT 'happy'::{mood}, 5::{pos}"), vec![])
        .await;
    assert_values(
        &rows.expect("select").rows[0],
        &[text("happy"), Value::Int(5)],
    );
    assert_kind(
        m.query(format!("SELECT 0::{pos}"), vec![]).await,
        "constraint",
    );
    // NULL goes into a column of any type; text goes in with a cast.
    let insert = format!("INSERT INTO {t} VALUES ($1, $2, $3, $4)");
    assert_eq!(e(m.execute(insert, vec![Value::Null; 4]).await), Ok(1));
    let cast = format!("INSERT INTO {t} VALUES ($1::date, $2::jsonb, $3, $4::{mood})");
    let values = vec![
        text("2024-05-01"),
        text("[1]"),
        Value::Bytes(vec![1]),
        text("sad"),
    ];
    assert_eq!(e(m.execute(cast, values).await), Ok(1));
    // One text bound with other variants each time is prepared for each.
    for v in [
        Value::Int(1),
        text("x"),
        Value::Null,
        Value::Float(0.5),
        Value::Int(2),
    ] {
        let got = m.query("SELECT $1 AS v".into(), vec![v.clone()]).await;
        let want = if matches!(v, Value::Null) {
            Value::Null
        } else {
            v
        };
        assert_values(&got.expect("echo").rows[0], &[want]);
    }
    let sum = m
        .query("SELECT $1::numeric + 1".into(), vec![text("1.5")])
        .await;
    assert_values(&sum.expect("numeric").rows[0], &[text("2.5")]);
    assert_eq!(m.finish(true).await, Ok(()));
    assert_eq!(ctx.count(&t).await, 2);
    ctx.exec(&format!(
        "DROP TABLE {t}; DROP DOMAIN {pos}; DROP TYPE {mood}"
    ))
    .await;
}

#[tokio::test]
async fn commit_is_visible_and_rollback_leaves_nothing() {
    scenarios::commit_is_visible_and_rollback_leaves_nothing(&postgres().await).await;
}

#[tokio::test]
async fn constraint_violation_is_reported_and_the_rest_commits() {
    scenarios::constraint_violation_is_reported_and_the_rest_commits(&postgres().await).await;
}

/// Two messages making the same table with `CREATE TABLE IF NOT EXISTS` at once: the one that
/// waits for the other's commit fails, and must read `constraint` (which handlers retry), not
/// `invalid` (which they park). PostgreSQL answers 23505 or, by timing, 42P07 or 42710: making
/// a table or a type that exists is `constraint` too.
#[tokio::test]
async fn creating_what_exists_is_a_constraint() {
    let ctx = postgres().await;
    let (t, kind) = (super::unique("sql_race"), super::unique("sql_kind"));
    let create = format!("CREATE TABLE IF NOT EXISTS {t} (id INTEGER PRIMARY KEY)");
    let (mut first, mut second) = (
        ctx.message(Duration::from_secs(20)),
        ctx.message(Duration::from_secs(20)),
    );
    e(first.execute(create.clone(), vec![]).await).expect("the first create");
    let commit_once_the_second_waits = async {
        let Pool::Postgres(pool) = &ctx.db.pool else {
            unreachable!("a PostgreSQL context")
        };
        let waiting = format!(
            "SELECT COUNT(*) FROM pg_stat_activity \
             WHERE wait_event_type = 'Lock' AND query LIKE '%{t}%'"
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(waiting.clone()))
                .fetch_one(pool)
                .await
                .expect("pg_stat_activity");
            if n > 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the second create never waited"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(first.finish(true).await, Ok(()));
    };
    let (raced, ()) = tokio::join!(
        second.execute(create.clone(), vec![]),
        commit_once_the_second_waits
    );
    assert_kind(raced, "constraint");
    let mut m = ctx.message(Duration::from_secs(10));
    let again = format!("CREATE TABLE {t} (id INTEGER)");
    assert!(assert_kind(m.execute(again, vec![]).await, "constraint").contains("exists"));
    let enum_type = format!("CREATE TYPE {kind} AS ENUM ('a')");
    e(m.execute(enum_type.clone(), vec![]).await).expect("the type");
    assert_kind(m.execute(enum_type, vec![]).await, "constraint");
    assert_eq!(second.finish(false).await, Ok(()));
    assert_eq!(m.finish(false).await, Ok(()));
    ctx.exec(&format!("DROP TABLE {t}")).await;
}

#[tokio::test]
async fn invalid_statements() {
    scenarios::invalid_statements(&postgres().await).await;
}

#[tokio::test]
async fn statement_past_the_deadline_is_cut_off() {
    let ctx = postgres().await;
    server::statement_past_the_deadline_is_cut_off(&ctx, "SELECT pg_sleep(15)").await;
}

#[tokio::test]
async fn closed_port_is_unavailable() {
    let port = server::closed_port();
    let url = format!("postgres://postgres:secret@127.0.0.1:{port}/test");
    server::closed_port_is_unavailable(&open(SqlKind::Postgres, &url, None).await).await;
}

#[tokio::test]
async fn ping_answers() {
    assert_eq!(postgres().await.db.ping().await, Ok(()));
}

/// A pooled connection the server has since closed (restart, idle limit, terminated) is
/// replaced at BEGIN: the message does not notice.
#[tokio::test]
async fn a_connection_the_server_closed_is_replaced() {
    use sqlx::Connection as _;
    let ctx = postgres().await;
    let t = super::unique("sql_stale");
    ctx.exec(&format!("CREATE TABLE {t} (id INTEGER)")).await;
    let insert = format!("INSERT INTO {t} VALUES ($1)");
    let mut m = ctx.message(Duration::from_secs(10));
    assert_eq!(
        e(m.execute(insert.clone(), vec![Value::Int(1)]).await),
        Ok(1)
    );
    assert_eq!(m.finish(true).await, Ok(()));

    let app = format!("worker-host sql.{}", ctx.db.recorder.store());
    let mut admin = sqlx::PgConnection::connect(POSTGRES_URL)
        .await
        .expect("admin connection");
    let kill =
        "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1";
    let killed: i64 = sqlx::query_scalar(kill)
        .bind(&app)
        .fetch_one(&mut admin)
        .await
        .expect("terminate");
    assert!(killed >= 1, "the pool's connections were found");
    let left = "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = $1";
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while sqlx::query_scalar::<_, i64>(left)
        .bind(&app)
        .fetch_one(&mut admin)
        .await
        .expect("poll")
        > 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the backends did not go"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    m.begin(Some(ctx.db.clone()), &super::scope(Duration::from_secs(10)));
    assert_eq!(e(m.execute(insert, vec![Value::Int(2)]).await), Ok(1));
    assert_eq!(m.finish(true).await, Ok(()));
    assert_eq!(ctx.count(&t).await, 2);
    ctx.exec(&format!("DROP TABLE {t}")).await;
}

/// A commit the database refuses (a deferred constraint) comes back as the commit's error,
/// which the engine turns into a retry; nothing stays.
#[tokio::test]
async fn a_refused_commit_is_an_error() {
    let ctx = postgres().await;
    let t = super::unique("sql_deferred");
    ctx.exec(&format!(
        "CREATE TABLE {t} (id INTEGER UNIQUE DEFERRABLE INITIALLY DEFERRED)"
    ))
    .await;
    let insert = format!("INSERT INTO {t} VALUES ($1)");
    let mut m = ctx.message(Duration::from_secs(10));
    for _ in 0..2 {
        assert_eq!(
            e(m.execute(insert.clone(), vec![Value::Int(1)]).await),
            Ok(1)
        );
    }
    let why = m
        .finish(true)
        .await
        .expect_err("the commit must fail")
        .to_string();
    assert!(
        why.contains("commit failed") && why.contains("duplicate key"),
        "{why}"
    );
    assert_eq!(ctx.count(&t).await, 0);
    ctx.exec(&format!("DROP TABLE {t}")).await;
}
