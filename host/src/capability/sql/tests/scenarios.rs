//! What every backend must do alike; each backend's file runs these on its database.

use std::time::Duration;

use super::{Ctx, assert_kind, assert_values, e, text, unique};
use crate::capability::Capability as _;
use crate::wit::worker::plugin::sql::{Host as _, Value};

const TIME: Duration = Duration::from_secs(10);

/// Every WIT variant goes in as a parameter and comes back the same. `types` are the column
/// types for boolean, int, float, text and bytes.
pub(super) async fn round_trip(ctx: &Ctx, types: [&str; 5]) {
    let t = unique("sql_rt");
    let [b, i, f, s, y] = types;
    ctx.exec(&format!(
        "CREATE TABLE {t} (k INTEGER, b {b}, i {i}, f {f}, s {s}, y {y})"
    ))
    .await;
    let rows = [
        vec![
            Value::Int(1),
            Value::Boolean(true),
            Value::Int(i64::MAX),
            Value::Float(1.5),
            text("héllo ✓ 'quoted'"),
            Value::Bytes(vec![0, 255, 10, 13]),
        ],
        vec![
            Value::Int(2),
            Value::Boolean(false),
            Value::Int(i64::MIN),
            Value::Float(-2.5e300),
            text(""),
            Value::Bytes(vec![]),
        ],
        vec![
            Value::Int(3),
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
        ],
    ];
    let mut m = ctx.message(TIME);
    let insert = format!("INSERT INTO {t} (k, b, i, f, s, y) {}", ctx.values(6));
    for row in &rows {
        assert_eq!(e(m.execute(insert.clone(), row.clone()).await), Ok(1));
    }
    let select = format!("SELECT k, b, i, f, s, y FROM {t} ORDER BY k");
    let got = m.query(select, vec![]).await.expect("select");
    assert_eq!(got.columns, ["k", "b", "i", "f", "s", "y"]);
    assert_eq!(got.rows.len(), 3);
    for (got, want) in got.rows.iter().zip(&rows) {
        assert_values(got, want);
    }
    // A parameter in a WHERE clause, and a query with no row still names its columns.
    let none = format!("SELECT k, s FROM {t} WHERE k = {}", ctx.p(1));
    let empty = m
        .query(none, vec![Value::Int(99)])
        .await
        .expect("select none");
    assert_eq!(empty.columns, ["k", "s"]);
    assert!(empty.rows.is_empty());
    assert_eq!(m.finish(true).await, Ok(()));
    assert_eq!(ctx.calls("ok"), 5);
    ctx.exec(&format!("DROP TABLE {t}")).await;
}

/// Committed rows are seen by another connection, and only after the commit; the instance is
/// reused for a next message whose rollback leaves them be.
pub(super) async fn commit_is_visible_and_rollback_leaves_nothing(ctx: &Ctx) {
    let t = unique("sql_commit");
    ctx.exec(&format!("CREATE TABLE {t} (id INTEGER PRIMARY KEY)"))
        .await;
    let insert = format!("INSERT INTO {t} (id) {}", ctx.values(1));
    let mut m = ctx.message(TIME);
    assert_eq!(
        e(m.execute(insert.clone(), vec![Value::Int(1)]).await),
        Ok(1)
    );
    assert_eq!(ctx.count(&t).await, 0, "not visible before the commit");
    assert_eq!(m.finish(true).await, Ok(()));
    assert_eq!(ctx.count(&t).await, 1, "visible after the commit");

    // The same instance, next message: its own reads see its writes, a rollback undoes them.
    m.begin(Some(ctx.db.clone()), &super::scope(TIME));
    assert_eq!(
        e(m.execute(insert.clone(), vec![Value::Int(2)]).await),
        Ok(1)
    );
    let seen = m
        .query(format!("SELECT COUNT(*) AS n FROM {t}"), vec![])
        .await;
    assert_values(&seen.expect("count").rows[0], &[Value::Int(2)]);
    assert_eq!(m.finish(false).await, Ok(()));
    assert_eq!(ctx.count(&t).await, 1, "the rolled back row is gone");
    ctx.exec(&format!("DROP TABLE {t}")).await;
}

/// A violated constraint is `constraint`, undoes only its own statement, and the message goes
/// on to commit the rest.
pub(super) async fn constraint_violation_is_reported_and_the_rest_commits(ctx: &Ctx) {
    let t = unique("sql_constraint");
    ctx.exec(&format!(
        "CREATE TABLE {t} (id INTEGER PRIMARY KEY, v VARCHAR(10) NOT NULL)"
    ))
    .await;
    let insert = format!("INSERT INTO {t} (id, v) {}", ctx.values(2));
    let mut m = ctx.message(TIME);
    let row = |id: i64, v: Value| vec![Value::Int(id), v];
    assert_eq!(e(m.execute(insert.clone(), row(1, text("a"))).await), Ok(1));
    let dup = assert_kind(
        m.execute(insert.clone(), row(1, text("b"))).await,
        "constraint",
    );
    assert!(!dup.is_empty());
    assert_kind(
        m.execute(insert.clone(), row(2, Value::Null)).await,
        "constraint",
    );
    assert_eq!(e(m.execute(insert.clone(), row(3, text("c"))).await), Ok(1));
    assert_eq!(m.finish(true).await, Ok(()));
    assert_eq!(ctx.count(&t).await, 2);
    assert_eq!(ctx.calls("constraint"), 2);
    ctx.exec(&format!("DROP TABLE {t}")).await;
}

/// Statements the database cannot run as written are `invalid`, and do not spoil the message.
pub(super) async fn invalid_statements(ctx: &Ctx) {
    let t = unique("sql_invalid");
    ctx.exec(&format!("CREATE TABLE {t} (a INTEGER, b INTEGER)"))
        .await;
    let mut m = ctx.message(TIME);
    assert_kind(m.query("SELEC 1".into(), vec![]).await, "invalid");
    let missing = unique("no_such_table");
    assert_kind(
        m.query(format!("SELECT * FROM {missing}"), vec![]).await,
        "invalid",
    );
    assert_kind(
        m.query(format!("SELECT nope FROM {t}"), vec![]).await,
        "invalid",
    );
    let two = format!("INSERT INTO {t} (a, b) {}", ctx.values(2));
    assert_kind(m.execute(two.clone(), vec![Value::Int(1)]).await, "invalid");
    assert_kind(m.execute("COMMIT".into(), vec![]).await, "invalid");
    assert_eq!(
        e(m.execute(two, vec![Value::Int(1), Value::Int(2)]).await),
        Ok(1)
    );
    assert_eq!(m.finish(true).await, Ok(()));
    assert_eq!(ctx.count(&t).await, 1);
    assert_eq!(ctx.calls("invalid"), 5);
    ctx.exec(&format!("DROP TABLE {t}")).await;
}
