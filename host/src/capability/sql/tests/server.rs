//! What the PostgreSQL and MariaDB tests share: the servers of this machine, a check that fails
//! (never skips) when one does not answer, and a port where none listens.

use std::time::{Duration, Instant};

use super::{Ctx, assert_kind, e, unique};
use crate::capability::Capability as _;
use crate::config::SqlKind;
use crate::wit::worker::plugin::sql::{Host as _, Value};

pub(super) const POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
pub(super) const MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";

/// Fails (never skips) unless `url` accepts a session and answers `SELECT 1`, naming the
/// command that starts the server. A server still starting up (or restarting under another
/// test) gets up to 30 s; the last error is in the message, since a port that answers is not
/// enough (wrong authentication, a missing database).
pub(super) async fn require_server(kind: SqlKind, url: &str, start: &str) {
    use sqlx::Connection as _;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let attempt = async {
            match kind {
                SqlKind::Postgres => {
                    let mut c = sqlx::PgConnection::connect(url).await?;
                    sqlx::query("SELECT 1").execute(&mut c).await.map(drop)
                }
                _ => {
                    let mut c = sqlx::MySqlConnection::connect(url).await?;
                    sqlx::query("SELECT 1").execute(&mut c).await.map(drop)
                }
            }
        };
        let error = match tokio::time::timeout(Duration::from_secs(5), attempt).await {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e.to_string(),
            Err(_) => "no answer within 5 s".to_string(),
        };
        if Instant::now() >= deadline {
            panic!(
                "{url} does not answer SELECT 1: {error}\nstart the server with `{start}`, or run \
                 scripts/services.sh (it installs, starts and configures every server these tests use)"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A server that does not listen: the call answers `unavailable` within the deadline, and
/// `/readyz`'s ping says so, without the password.
pub(super) async fn closed_port_is_unavailable(ctx: &Ctx) {
    let deadline = Duration::from_millis(1000);
    let mut m = ctx.message(deadline);
    let started = Instant::now();
    let why = assert_kind(m.query("SELECT 1".into(), vec![]).await, "unavailable");
    // Below ACQUIRE_TIMEOUT (5 s): the deadline ended the wait, not the pool.
    assert!(started.elapsed() < deadline + Duration::from_secs(3));
    assert!(!why.contains("secret"), "{why}");
    assert_eq!(m.finish(true).await, Ok(()));
    let ping = ctx
        .db
        .ping()
        .await
        .expect_err("the ping must fail")
        .to_string();
    assert!(!ping.contains("secret"), "{ping}");
    assert_eq!(ctx.calls("unavailable"), 1);
    assert_eq!(ctx.up(), Some(0), "reported down");
}

/// A port nothing listens on.
pub(super) fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    port
}

/// A statement still running at the deadline is cut off as `unavailable`; the message's
/// transaction is gone: later statements fail, the commit fails, nothing stays. `sleep` runs
/// longer than the 10 s the cut-off may take (MariaDB's DROP TABLE then waits for it to end).
pub(super) async fn statement_past_the_deadline_is_cut_off(ctx: &Ctx, sleep: &str) {
    let t = unique("sql_deadline");
    ctx.exec(&format!("CREATE TABLE {t} (id INTEGER)")).await;
    let mut m = ctx.message(Duration::from_secs(2));
    let insert = format!("INSERT INTO {t} (id) {}", ctx.values(1));
    assert_eq!(
        e(m.execute(insert.clone(), vec![Value::Int(1)]).await),
        Ok(1)
    );
    let started = Instant::now();
    assert_kind(m.query(sleep.to_string(), vec![]).await, "unavailable");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let later = assert_kind(m.execute(insert, vec![Value::Int(2)]).await, "unavailable");
    assert!(later.contains("rolled back"), "{later}");
    let commit = m
        .finish(true)
        .await
        .expect_err("the commit must fail")
        .to_string();
    assert!(commit.contains("rolled back"), "{commit}");
    assert_eq!(ctx.count(&t).await, 0);
    ctx.exec(&format!("DROP TABLE {t}")).await;
}
