//! MariaDB (or MySQL) at 127.0.0.1:3306 (database `test`, root without a password).

use std::time::Duration;

use super::server::{self, MYSQL_URL, require_server};
use super::{Ctx, assert_kind, assert_values, open, scenarios, text};
use crate::capability::Capability as _;
use crate::config::SqlKind;
use crate::wit::worker::plugin::sql::{Host as _, Value};

async fn mysql() -> Ctx {
    require_server(SqlKind::MySql, MYSQL_URL, "service mariadb start").await;
    open(SqlKind::MySql, MYSQL_URL, None).await
}

#[tokio::test]
async fn values_round_trip() {
    let ctx = mysql().await;
    scenarios::round_trip(&ctx, ["BOOLEAN", "BIGINT", "DOUBLE", "TEXT", "BLOB"]).await;
}

#[tokio::test]
async fn column_types_map_to_values() {
    let ctx = mysql().await;
    let t = super::unique("sql_types");
    ctx.exec(&format!(
        "CREATE TABLE {t} (a TINYINT, b SMALLINT UNSIGNED, c INT, d BIGINT UNSIGNED, \
         e DECIMAL(10,2), f FLOAT, g DATE, h DATETIME(6), i TIMESTAMP NULL, j TIME, k YEAR, \
         l BIT(8), m JSON, n ENUM('x','y'), o VARCHAR(10) COLLATE utf8mb4_bin, \
         p VARBINARY(4), q CHAR(3)); \
         INSERT INTO {t} VALUES (-5, 65535, 7, 9007199254740993, 12.50, 0.5, '2024-05-01', \
         '2024-05-01 13:45:00.250000', '2024-05-01 13:45:00', '-26:03:04', 2024, b'00000101', \
         '{{\"a\": 1}}', 'y', 'Bin', x'00ff', 'ab')"
    ))
    .await;
    let mut m = ctx.message(Duration::from_secs(10));
    let rows = m
        .query(format!("SELECT * FROM {t}"), vec![])
        .await
        .expect("select");
    let want = [
        Value::Int(-5),
        Value::Int(65535),
        Value::Int(7),
        Value::Int(9007199254740993),
        text("12.50"),
        Value::Float(0.5),
        text("2024-05-01"),
        text("2024-05-01T13:45:00.25"),
        text("2024-05-01T13:45:00"),
        text("-26:03:04"),
        Value::Int(2024),
        Value::Int(5),
        text("{\"a\": 1}"),
        text("y"),
        text("Bin"),
        Value::Bytes(vec![0, 255]),
        text("ab"),
    ];
    assert_values(&rows.rows[0], &want);
    let big = assert_kind(
        m.query(
            "SELECT CAST(18446744073709551615 AS UNSIGNED) AS big".into(),
            vec![],
        )
        .await,
        "invalid",
    );
    assert!(big.contains("big"), "{big}");
    assert_eq!(m.finish(true).await, Ok(()));
    ctx.exec(&format!("DROP TABLE {t}")).await;
}

#[tokio::test]
async fn commit_is_visible_and_rollback_leaves_nothing() {
    scenarios::commit_is_visible_and_rollback_leaves_nothing(&mysql().await).await;
}

#[tokio::test]
async fn constraint_violation_is_reported_and_the_rest_commits() {
    scenarios::constraint_violation_is_reported_and_the_rest_commits(&mysql().await).await;
}

#[tokio::test]
async fn invalid_statements() {
    scenarios::invalid_statements(&mysql().await).await;
}

#[tokio::test]
async fn statement_past_the_deadline_is_cut_off() {
    let ctx = mysql().await;
    server::statement_past_the_deadline_is_cut_off(&ctx, "SELECT SLEEP(15)").await;
}

#[tokio::test]
async fn closed_port_is_unavailable() {
    let port = server::closed_port();
    let url = format!("mysql://root:secret@127.0.0.1:{port}/test");
    server::closed_port_is_unavailable(&open(SqlKind::MySql, &url, None).await).await;
}

#[tokio::test]
async fn ping_answers() {
    assert_eq!(mysql().await.db.ping().await, Ok(()));
}
