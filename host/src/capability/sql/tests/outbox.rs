//! The outbox tables on each backend: created on first use, a record commits with the
//! message's effects or not at all, a second record of one message id is a duplicate whose
//! effects are undone, unsent messages come back until marked, old records are pruned.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::super::outbox::{Outgoing, Record, RecordError};
#[cfg(feature = "server-tests")]
use super::server::{MYSQL_URL, POSTGRES_URL, require_server};
use super::{Ctx, open, unique};
use crate::config::SqlKind;
use crate::wit::worker::plugin::sql::{Host as _, Value};

/// Unix ms, as the outbox's clock (`crate::outbox::now_ms`, a layer above) gives it.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn outgoing(key: &str) -> Outgoing {
    Outgoing {
        exchange: "ex".into(),
        routing_key: key.into(),
        properties: "{}".into(),
        body: vec![0, 1, 2, 255],
    }
}

async fn scenario(ctx: &Ctx) {
    let queue = unique("q");
    let t = unique("ob_rows");
    ctx.db.outbox_ready().await.expect("outbox tables");
    ctx.db.outbox_ready().await.expect("a second time");
    ctx.exec(&format!("CREATE TABLE {t} (id VARCHAR(64))"))
        .await;
    let insert = format!("INSERT INTO {t} (id) VALUES ({})", ctx.p(1));
    let record = |id: &str| Record {
        queue: queue.clone(),
        message_id: id.into(),
        handled_at_ms: now_ms(),
        messages: vec![outgoing("a"), outgoing("b")],
    };
    let handle = |id: &'static str, ok: bool| {
        let insert = insert.clone();
        let record = record(id);
        async move {
            let mut m = ctx.message(Duration::from_secs(10));
            m.execute(insert, vec![Value::Text(id.into())])
                .await
                .expect("insert");
            m.finish_recorded(ok, Some(&record)).await
        }
    };
    assert_eq!(handle("m-1", true).await, Ok(()));
    assert_eq!(ctx.count(&t).await, 1);
    let unsent = ctx
        .db
        .handled(&queue, "m-1")
        .await
        .expect("handled")
        .expect("recorded");
    assert_eq!(unsent.iter().map(|u| u.n).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(unsent[1].message, outgoing("b"));

    assert_eq!(handle("m-1", true).await, Err(RecordError::Duplicate));
    assert_eq!(ctx.count(&t).await, 1, "a duplicate's effects are undone");
    assert_eq!(handle("m-2", false).await, Ok(()));
    assert_eq!(
        ctx.db.handled(&queue, "m-2").await,
        Ok(None),
        "not ok: no record"
    );
    assert_eq!(ctx.count(&t).await, 1);

    let later = now_ms() + 60_000;
    assert_eq!(
        ctx.db
            .unsent(&queue, later, 10)
            .await
            .expect("unsent")
            .len(),
        2
    );
    assert_eq!(
        ctx.db.prune(&queue, later, 10).await,
        Ok(0),
        "unsent records stay"
    );
    ctx.db
        .mark_sent(&queue, "m-1", &[1, 2], now_ms())
        .await
        .expect("mark");
    assert_eq!(ctx.db.handled(&queue, "m-1").await, Ok(Some(vec![])));
    assert!(
        ctx.db
            .unsent(&queue, later, 10)
            .await
            .expect("unsent")
            .is_empty()
    );
    assert_eq!(
        ctx.db.prune(&queue, now_ms() - 60_000, 10).await,
        Ok(0),
        "too young"
    );
    assert_eq!(ctx.db.prune(&queue, later, 10).await, Ok(1));
    assert_eq!(ctx.db.handled(&queue, "m-1").await, Ok(None));
    many(ctx, &queue, &insert).await;
    ctx.exec(&format!("DROP TABLE {t}")).await;
}

/// A message that published more than one INSERT holds: every message is recorded, in order,
/// and marking some sent leaves the rest.
async fn many(ctx: &Ctx, queue: &str, insert: &str) {
    let messages: Vec<Outgoing> = (0..250).map(|i| outgoing(&format!("k{i}"))).collect();
    let record = Record {
        queue: queue.to_string(),
        message_id: "m-many".into(),
        handled_at_ms: now_ms(),
        messages: messages.clone(),
    };
    let mut m = ctx.message(Duration::from_secs(10));
    m.execute(insert.to_string(), vec![Value::Text("m-many".into())])
        .await
        .expect("insert");
    assert_eq!(m.finish_recorded(true, Some(&record)).await, Ok(()));
    let unsent = ctx.db.handled(queue, "m-many").await.expect("handled");
    let unsent = unsent.expect("recorded");
    assert_eq!(unsent.len(), 250);
    assert!(unsent.iter().zip(1..).all(|(u, n)| u.n == n));
    assert_eq!(unsent[249].message, messages[249]);
    let ns: Vec<u32> = (1..=200).collect();
    ctx.db
        .mark_sent(queue, "m-many", &ns, now_ms())
        .await
        .expect("mark");
    let left = ctx.db.handled(queue, "m-many").await.expect("handled");
    let left: Vec<u32> = left.expect("recorded").iter().map(|u| u.n).collect();
    assert_eq!(left, (201..=250).collect::<Vec<_>>());
}

#[tokio::test]
async fn sqlite_outbox() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}/outbox.db", dir.path().display());
    scenario(&open(SqlKind::Sqlite, &url, Some(dir)).await).await;
}

#[cfg(feature = "server-tests")]
#[tokio::test]
async fn postgres_outbox() {
    require_server(SqlKind::Postgres, POSTGRES_URL, "service postgresql start").await;
    scenario(&open(SqlKind::Postgres, POSTGRES_URL, None).await).await;
}

#[cfg(feature = "server-tests")]
#[tokio::test]
async fn mysql_outbox() {
    require_server(SqlKind::MySql, MYSQL_URL, "service mariadb start").await;
    scenario(&open(SqlKind::MySql, MYSQL_URL, None).await).await;
}

/// Hosts starting at once on a database without the outbox's tables: in each of 3 rounds,
/// 4 hosts make or find them in a new, empty schema (PostgreSQL) or database (MySQL), made and
/// then dropped through `admin_url`, also when the round fails, and reached at `url_of(name)`.
/// Returns how many version rows each round's migrations wrote.
#[cfg(feature = "server-tests")]
async fn migrated_at_once(
    kind: SqlKind,
    admin_url: &str,
    url_of: impl Fn(&str) -> String,
) -> Vec<i64> {
    use futures_util::FutureExt as _;
    // PostgreSQL: a schema (dropped with what is in it); MySQL: a database.
    let (place, cascade) = if kind == SqlKind::Postgres {
        ("SCHEMA", " CASCADE")
    } else {
        ("DATABASE", "")
    };
    let admin = open(kind, admin_url, None).await;
    let mut versions = Vec::new();
    for _ in 0..3 {
        let name = unique("ob_fresh");
        admin.exec(&format!("CREATE {place} {name}")).await;
        let url = url_of(&name);
        let round = async {
            let hosts =
                futures_util::future::join_all((0..4).map(|_| open(kind, &url, None))).await;
            let made = futures_util::future::join_all(hosts.iter().map(|h| h.db.outbox_ready()));
            for result in made.await {
                result.expect("every host makes or finds the outbox tables");
            }
            hosts[0]
                .count(&format!("{name}.worker_outbox_schema"))
                .await
        };
        let round = std::panic::AssertUnwindSafe(round).catch_unwind().await;
        admin.exec(&format!("DROP {place} {name}{cascade}")).await;
        match round {
            Ok(rows) => versions.push(rows),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
    versions
}

#[cfg(feature = "server-tests")]
#[tokio::test]
async fn postgres_outbox_tables_made_by_hosts_starting_at_once() {
    require_server(SqlKind::Postgres, POSTGRES_URL, "service postgresql start").await;
    let url_of = |schema: &str| format!("{POSTGRES_URL}?options[search_path]={schema}");
    let versions = migrated_at_once(SqlKind::Postgres, POSTGRES_URL, url_of).await;
    assert_eq!(
        versions,
        [1, 1, 1],
        "the migrations ran one after the other"
    );
}

#[cfg(feature = "server-tests")]
#[tokio::test]
async fn mysql_outbox_tables_made_by_hosts_starting_at_once() {
    require_server(SqlKind::MySql, MYSQL_URL, "service mariadb start").await;
    let url_of = |db: &str| format!("{}/{db}", MYSQL_URL.trim_end_matches("/test"));
    let versions = migrated_at_once(SqlKind::MySql, MYSQL_URL, url_of).await;
    // Two hosts may both write version 1 (harmless: the highest is read).
    assert!(
        versions.iter().all(|&v| v >= 1),
        "version rows: {versions:?}"
    );
}

/// A message of queue `queue` with id `id`, under the outbox's grant.
#[cfg(feature = "server-tests")]
fn claiming(ctx: &Ctx, queue: &str, id: &str) -> super::super::Instance {
    use crate::capability::Capability as _;
    let mut m = super::super::Instance::default();
    let mut scope = super::scope(Duration::from_secs(10));
    scope.queue = queue.to_string();
    scope.message_id = Some(id.to_string());
    m.begin(Some(ctx.db.clone()), &scope);
    m
}

/// PostgreSQL: the claim inserts the inbox row in the transaction the call then takes; one
/// that no call takes, or whose call does not answer ok, leaves nothing; a handled message
/// is found handled, with what it left unsent.
#[cfg(feature = "server-tests")]
#[tokio::test]
async fn postgres_claim_runs_the_call_in_the_claimed_transaction() {
    use super::super::outbox::Claimed;
    use crate::capability::Capability as _;
    require_server(SqlKind::Postgres, POSTGRES_URL, "service postgresql start").await;
    let ctx = open(SqlKind::Postgres, POSTGRES_URL, None).await;
    let queue = unique("q");
    let t = unique("claim_rows");
    ctx.exec(&format!("CREATE TABLE {t} (id TEXT)")).await;
    let insert = format!("INSERT INTO {t} (id) VALUES ($1)");
    let timeout = Duration::from_secs(10);
    let claim = |id: &'static str| {
        let (db, queue) = (ctx.db.clone(), queue.clone());
        async move {
            db.claim(&queue, id, now_ms(), timeout)
                .await
                .expect("claim")
        }
    };
    let inbox = format!("SELECT COUNT(*) FROM worker_inbox WHERE queue = '{queue}'");

    // Claimed, and the call's statements and record commit in that transaction.
    let Claimed::Free(Some(held)) = claim("m-1").await else {
        panic!("a new message is claimed");
    };
    let mut m = claiming(&ctx, &queue, "m-1");
    m.execute(insert.clone(), vec![Value::Text("m-1".into())])
        .await
        .expect("insert");
    let record = Record {
        queue: queue.clone(),
        message_id: "m-1".into(),
        handled_at_ms: now_ms(),
        messages: vec![outgoing("a")],
    };
    assert_eq!(m.finish_recorded(true, Some(&record)).await, Ok(()));
    drop(held);
    assert_eq!(ctx.count(&t).await, 1);
    let Claimed::Handled(unsent) = claim("m-1").await else {
        panic!("a committed claim is handled");
    };
    assert_eq!(unsent.iter().map(|u| u.n).collect::<Vec<_>>(), [1]);

    // A claim no call took, and one whose call answered retry: rolled back.
    let Claimed::Free(Some(held)) = claim("m-2").await else {
        panic!("claimed");
    };
    drop(held);
    let Claimed::Free(Some(held)) = claim("m-2").await else {
        panic!("a dropped claim left nothing");
    };
    let mut m = claiming(&ctx, &queue, "m-2");
    m.execute(insert.clone(), vec![Value::Text("m-2".into())])
        .await
        .expect("insert");
    assert_eq!(m.finish(false).await, Ok(()));
    drop(held);
    assert_eq!(
        ctx.count(&t).await,
        1,
        "the retried call's insert is undone"
    );
    let Claimed::Free(Some(held)) = claim("m-2").await else {
        panic!("a call that did not answer ok left nothing");
    };

    // A call that ran no statement still commits its record through the claim.
    let mut m = claiming(&ctx, &queue, "m-2");
    let record = Record {
        message_id: "m-2".into(),
        messages: Vec::new(),
        ..record
    };
    assert_eq!(m.finish_recorded(true, Some(&record)).await, Ok(()));
    drop(held);
    assert!(matches!(claim("m-2").await, Claimed::Handled(u) if u.is_empty()));
    let rows: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(inbox.clone()))
        .fetch_one(match &ctx.db.pool {
            super::super::backend::Pool::Postgres(p) => p,
            _ => unreachable!("PostgreSQL"),
        })
        .await
        .expect("count");
    assert_eq!(rows, 2, "m-1 and m-2 recorded once each");
    ctx.exec(&format!("DROP TABLE {t}")).await;
    ctx.exec(&format!(
        "DELETE FROM worker_outbox WHERE queue = '{queue}'"
    ))
    .await;
    ctx.exec(&format!("DELETE FROM worker_inbox WHERE queue = '{queue}'"))
        .await;
}
