//! Group commit on SQLite: messages close together share one commit, and each one that does
//! not answer ok, or is dropped during its turn, is undone as the rules say.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Ctx, e, unique};
use crate::capability::Capability as _;
use crate::capability::sql::Instance;
use crate::capability::sql::group::Group;
use crate::config::SqlKind;
use crate::wit::worker::plugin::sql::{Host as _, Value};

/// A SQLite database whose group waits `max_age` for more messages, and a table of ids.
async fn grouped(max_age: Duration) -> (Ctx, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}/group.db", dir.path().display());
    let mut ctx = super::open(SqlKind::Sqlite, &url, Some(dir)).await;
    let db = Arc::get_mut(&mut ctx.db).expect("not shared yet");
    db.group = Some(Group::with_max_age(max_age));
    let t = unique("sql_group");
    ctx.exec(&format!("CREATE TABLE {t} (id INTEGER PRIMARY KEY)"))
        .await;
    (ctx, t)
}

fn group(ctx: &Ctx) -> &Group {
    ctx.db.group.as_ref().expect("SQLite has a group")
}

/// Polls until `n` messages are queued for a turn.
async fn until_queued(ctx: &Ctx, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while group(ctx).queued() != n {
        assert!(Instant::now() < deadline, "{n} messages never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Starts a message that inserts `id`, in a task of its own; it is finished by the caller.
fn start(
    ctx: &Ctx,
    t: &str,
    id: i64,
) -> tokio::task::JoinHandle<(Instance, Result<u64, super::Shown>)> {
    let mut m = ctx.message(Duration::from_secs(10));
    let insert = format!("INSERT INTO {t} (id) VALUES (?)");
    tokio::spawn(async move {
        let done = e(m.execute(insert, vec![Value::Int(id)]).await);
        (m, done)
    })
}

/// A message that inserted `id` and so holds the turn, not finished yet.
async fn holding(ctx: &Ctx, t: &str, id: i64) -> Instance {
    let mut m = ctx.message(Duration::from_secs(10));
    let insert = format!("INSERT INTO {t} (id) VALUES (?)");
    assert_eq!(e(m.execute(insert, vec![Value::Int(id)]).await), Ok(1));
    m
}

#[tokio::test]
async fn messages_close_together_share_one_commit_and_a_failed_one_is_undone_alone() {
    let (ctx, t) = grouped(Duration::from_secs(30)).await;
    let mut first = holding(&ctx, &t, 1).await;
    let second = start(&ctx, &t, 2);
    until_queued(&ctx, 1).await;
    let third = start(&ctx, &t, 3);
    until_queued(&ctx, 2).await;
    // The first is kept and its turn handed on: its commit waits for the group's.
    let first = tokio::spawn(async move { first.finish(true).await });
    let (mut second, done) = second.await.expect("join");
    assert_eq!(done, Ok(1));
    assert_eq!(second.finish(false).await, Ok(()));
    let (mut third, done) = third.await.expect("join");
    assert_eq!(done, Ok(1));
    assert_eq!(third.finish(true).await, Ok(()));
    assert_eq!(first.await.expect("join"), Ok(()));
    assert_eq!(group(&ctx).commits().await, 1, "one commit for the group");
    assert_eq!(ctx.count(&t).await, 2, "ids 1 and 3");
}

#[tokio::test]
async fn alone_a_message_commits_at_once() {
    let (ctx, t) = grouped(Duration::from_secs(30)).await;
    for id in 1..=3 {
        let (mut m, done) = start(&ctx, &t, id).await.expect("join");
        assert_eq!(done, Ok(1));
        assert_eq!(m.finish(true).await, Ok(()));
        assert_eq!(ctx.count(&t).await, id, "committed when it finished");
    }
    assert_eq!(group(&ctx).commits().await, 3);
}

#[tokio::test]
async fn a_message_dropped_during_its_turn_fails_its_group_and_undoes_it() {
    let (ctx, t) = grouped(Duration::from_secs(30)).await;
    let mut first = holding(&ctx, &t, 1).await;
    let second = start(&ctx, &t, 2);
    until_queued(&ctx, 1).await;
    let first = tokio::spawn(async move { first.finish(true).await });
    // The second is dropped in its turn (its call stopped), its statement not undone.
    let (second, done) = second.await.expect("join");
    assert_eq!(done, Ok(1));
    drop(second);
    let failed = first.await.expect("join");
    assert!(
        failed
            .as_ref()
            .is_err_and(|e| e.to_string().contains("rolled back")),
        "{failed:?}"
    );
    assert_eq!(ctx.count(&t).await, 0, "nothing of the group committed");
    // The next message starts a new group.
    let (mut m, done) = start(&ctx, &t, 4).await.expect("join");
    assert_eq!(done, Ok(1));
    assert_eq!(m.finish(true).await, Ok(()));
    assert_eq!(ctx.count(&t).await, 1);
}

/// The outbox's duplicate check reads on a connection of its own (`reader.rs`): a record kept in
/// an open group is not there until the group commits, so a message never looks handled by a
/// record that may still be rolled back.
#[tokio::test]
async fn the_duplicate_check_sees_a_record_only_once_its_group_committed() {
    let (ctx, t) = grouped(Duration::from_secs(30)).await;
    ctx.db.outbox_ready().await.expect("outbox tables");
    let queue = unique("q");
    let record = crate::capability::sql::outbox::Record {
        queue: queue.clone(),
        message_id: "m-1".into(),
        handled_at_ms: 1,
        messages: Vec::new(),
    };
    let mut first = holding(&ctx, &t, 1).await;
    let second = start(&ctx, &t, 2);
    until_queued(&ctx, 1).await;
    let first = tokio::spawn(async move { first.finish_recorded(true, Some(&record)).await });
    let (mut second, done) = second.await.expect("join");
    assert_eq!(done, Ok(1));
    // The first is recorded and kept, in the group that the second's turn holds open.
    assert_eq!(ctx.db.handled(&queue, "m-1").await, Ok(None));
    assert_eq!(second.finish(true).await, Ok(()));
    assert_eq!(first.await.expect("join"), Ok(()));
    assert_eq!(ctx.db.handled(&queue, "m-1").await, Ok(Some(Vec::new())));
}

/// A plugin's statements stay prepared on the group's connection from one message to the next;
/// one prepared before a later message changed the table reads the table as it is now.
#[tokio::test]
async fn a_statement_kept_prepared_reads_the_table_as_it_is_now() {
    let (ctx, t) = grouped(Duration::from_secs(30)).await;
    let select = format!("SELECT * FROM {t} ORDER BY id");
    let mut first = holding(&ctx, &t, 1).await;
    let rows = first.query(select.clone(), vec![]).await.expect("select");
    assert_eq!(rows.columns, ["id"]);
    let mut second = ctx.message(Duration::from_secs(10));
    let alter = format!("ALTER TABLE {t} ADD COLUMN note TEXT");
    let insert = format!("INSERT INTO {t} (id, note) VALUES (?, ?)");
    let second = tokio::spawn(async move {
        let altered = e(second.execute(alter, vec![]).await);
        let inserted = e(second
            .execute(insert, vec![Value::Int(2), super::text("n")])
            .await);
        let rows = e(second.query(select, vec![]).await);
        (second, altered, inserted, rows)
    });
    until_queued(&ctx, 1).await;
    let first = tokio::spawn(async move { first.finish(true).await });
    let (mut second, altered, inserted, rows) = second.await.expect("join");
    assert!(altered.is_ok(), "{altered:?}");
    assert_eq!(inserted, Ok(1));
    let rows = rows.expect("select again");
    assert_eq!(rows.columns, ["id", "note"]);
    assert_eq!(rows.rows.len(), 2);
    assert_eq!(second.finish(true).await, Ok(()));
    assert_eq!(first.await.expect("join"), Ok(()));
    assert_eq!(group(&ctx).commits().await, 1, "one commit for both");
    assert_eq!(ctx.count(&t).await, 2);
}
