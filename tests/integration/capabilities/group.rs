//! Messages of one SQL subscription with the outbox handled close together (concurrency 8, a
//! burst published at once), so that group commit (several messages in one transaction, each
//! under its own savepoint, acked after the shared commit) gets groups to commit: exactly the
//! messages answering ok leave their rows and their publishes, whatever the messages beside
//! them answered (fail, retry, a trap, a timeout); and a crash between a commit and its acks
//! redelivers the messages with no second effect and no publish under a new id. With one
//! transaction per message the same holds.

use std::time::Instant;

use serde_json::{Value, json};

use super::db::Kind;
use super::outbox::{Case, published_under_own_ids, reports_of_all, with_id};
use super::support::Probe;
use worker_host::failpoint::FAILPOINT_ENV;

/// How the messages of the mix end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Ok (a failed statement answers retry, so a retry then commits the row).
    Ok,
    /// Answers fail: parked at once.
    Fail,
    /// Answers retry every time: parked once retries are exhausted.
    Retry,
    /// Traps every time: parked once retries are exhausted.
    Trap,
    /// Spins past the handler's timeout on its first call, answers ok on its second.
    Late,
}

/// Messages of the mix: 27 ok, 4 each of fail, retry and trap, one late; all but the late one
/// quick, so they are handled beside one another.
const MIX: usize = 40;

fn end_of(i: usize) -> End {
    match (i, i % 10) {
        (19, _) => End::Late,
        (_, 3) => End::Fail,
        (_, 5) => End::Retry,
        (_, 7) => End::Trap,
        _ => End::Ok,
    }
}

/// The script of message `id`: it inserts its id, then ends as `end` says.
fn script_of(case: &Case, id: &str, end: End) -> Value {
    let mut script = match end {
        End::Ok => case.script(id, "ok"),
        End::Fail => case.script(id, "fail"),
        End::Retry => case.script(id, "retry"),
        End::Trap => case.script(id, "trap"),
        End::Late => case.script(id, "sleep"),
    };
    match end {
        // On SQLite the late message holds the write lock until its timeout; a message that
        // waited for it past its own deadline (its insert failing, or its call timing out) is
        // retried, and its retry commits.
        End::Ok => script["on_error"] = json!("retry"),
        End::Late => script["until_attempt"] = json!(2),
        _ => {}
    }
    script
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_commits_exactly_the_ok_messages_sqlite() {
    group_commits_the_ok(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_commits_exactly_the_ok_messages_postgres() {
    group_commits_the_ok(Kind::Postgres).await;
}

/// 40 messages at once: the rows are exactly the ok messages' (the late one's from its second
/// call only), each published once as `<id>:1`; the others are parked with their reason, and
/// nothing is left in a queue or unacked.
async fn group_commits_the_ok(kind: Kind) {
    let case = Case::new(kind).await;
    let test = format!("group-mix-{kind:?}").to_ascii_lowercase();
    let keys = "concurrency = 8\nprefetch = 16\ntimeout = \"2s\"\nmax_retries = 2";
    let mut probe = Probe::start(&test, &case.sub(keys), case.state.path(), &case.tables()).await;
    let mix: Vec<(String, End)> = (0..MIX).map(|i| (format!("g-{i:02}"), end_of(i))).collect();
    let ids_ending = |want: &[End]| -> Vec<String> {
        let of = mix.iter().filter(|(_, end)| want.contains(end));
        of.map(|(id, _)| id.clone()).collect()
    };
    let ok = ids_ending(&[End::Ok, End::Late]);
    let started = Instant::now();
    let burst = mix
        .iter()
        .map(|(id, end)| (script_of(&case, id, *end), with_id(id)));
    probe.send_all("ob", burst).await;

    let seen = reports_of_all(&mut probe, &ok).await;
    let reports = published_under_own_ids(&seen, &ok);
    let strays: Vec<_> = seen.iter().filter(|(id, _)| !ok.contains(id)).collect();
    assert!(strays.is_empty(), "reports of messages not ok: {strays:?}");
    for (id, end) in mix.iter().filter(|(_, end)| !ok_end(*end)) {
        let headers = probe.parked("ob", id).await;
        let reason = headers.get("worker-failed-reason").map(String::as_str);
        let expected = if *end == End::Fail {
            "fail"
        } else {
            "retries-exhausted"
        };
        assert_eq!(reason, Some(expected), "{id} ({end:?}): {headers:?}");
    }
    println!(
        "{kind:?}: {MIX} messages settled in {:?}",
        started.elapsed()
    );
    assert_eq!(
        case.db.ids(&case.rows).await,
        ok,
        "the rows: the ok ids, each once"
    );

    let queue = format!("{}.ob", probe.n.p);
    let stopped = probe.shut_down().await;
    let late = stopped.drain(&stopped.n.seen()).await;
    assert!(late.is_empty(), "reports after the last expected: {late:?}");
    let once = reports.iter().filter(|(_, n)| **n != 1).collect::<Vec<_>>();
    assert!(once.is_empty(), "published more than once: {once:?}");
    for q in [
        queue.clone(),
        format!("{queue}@failed"),
        format!("{queue}@retry.200ms"),
    ] {
        assert_eq!(
            stopped.depth(&q).await,
            0,
            "{q} after the drain: unacked or extra"
        );
    }
    stopped.cleanup().await;
    case.done().await;
}

fn ok_end(end: End) -> bool {
    matches!(end, End::Ok | End::Late)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_between_a_groups_commit_and_its_acks_redelivers_it_without_a_second_effect() {
    killed_after_commit(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_between_a_groups_commit_and_its_acks_redelivers_it_without_a_second_effect_postgres()
 {
    killed_after_commit(Kind::Postgres).await;
}

/// 20 messages at once; the binary aborts right after the first commit (with others in flight
/// or committed beside it), then runs again: every row exists once, every report carries its
/// message's outbox id (the redelivery and the start-up sweep may both send it).
async fn killed_after_commit(kind: Kind) {
    let case = Case::new(kind).await;
    let test = format!("group-kill-{kind:?}").to_ascii_lowercase();
    let subs = case.sub("concurrency = 8\nprefetch = 16");
    let env = [(FAILPOINT_ENV, "outbox-after-commit")];
    let mut probe = Probe::start_child(&test, &subs, case.state.path(), &case.tables(), &env).await;
    let ids: Vec<String> = (0..20).map(|i| format!("k-{i:02}")).collect();
    let burst = ids.iter().map(|id| (case.script(id, "ok"), with_id(id)));
    probe.send_all("ob", burst).await;
    let status = probe.exited().await;
    assert!(!status.success(), "exited with {status}");
    let committed = case.db.ids(&case.rows).await;
    assert!(!committed.is_empty(), "the crash came after a commit");
    println!("{kind:?}: committed before the crash: {committed:?}");

    let started = Instant::now();
    probe.restart_child(&[]).await;
    let seen = reports_of_all(&mut probe, &ids).await;
    println!(
        "{kind:?}: all reported {:?} after the restart",
        started.elapsed()
    );
    assert_eq!(case.db.ids(&case.rows).await, ids, "every row once");
    let queue = format!("{}.ob", probe.n.p);
    let stopped = probe.shut_down().await;
    let mut all = seen;
    all.extend(stopped.drain(&stopped.n.seen()).await);
    let reports = published_under_own_ids(&all, &ids);
    let twice: Vec<_> = reports.iter().filter(|(_, n)| **n > 1).collect();
    println!("{kind:?}: published again under the same id: {twice:?}");
    assert_eq!(
        stopped.depth(&queue).await,
        0,
        "{queue}: unacked after the drain"
    );
    assert_eq!(stopped.depth(&format!("{queue}@failed")).await, 0);
    stopped.cleanup().await;
    case.done().await;
}
