//! SQL through the service on SQLite, PostgreSQL and MariaDB: a message's statements share one
//! transaction, committed when the handler answers ok (before its report is published) and
//! rolled back on retry, fail, trap and timeout; constraint and invalid statements come back
//! under their own names; a slow statement ends with the handler's timeout. Each test makes its
//! own tables (unique names) and reads them back through sqlx, from outside the host.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::db::{self, Kind, Pool};
use super::support::{Probe, Sub, outcomes, results, script, worker_error};

#[tokio::test]
async fn sqlite_commits_on_ok_and_rolls_back_otherwise() {
    commit_and_rollback(Kind::Sqlite).await;
}

#[tokio::test]
async fn postgres_commits_on_ok_and_rolls_back_otherwise() {
    commit_and_rollback(Kind::Postgres).await;
}

#[tokio::test]
async fn mariadb_commits_on_ok_and_rolls_back_otherwise() {
    commit_and_rollback(Kind::MariaDb).await;
}

/// One test's database, tables and service.
struct Case {
    kind: Kind,
    db: Pool,
    /// `(id, n)` rows the messages insert.
    rows: String,
    /// `id` primary keys, for the constraint error.
    keys: String,
    probe: Probe,
}

impl Case {
    /// The step inserting `(id, n)` into the rows table.
    fn insert(&self, id: &str, n: i64) -> Value {
        let (p1, p2) = (self.kind.param(1), self.kind.param(2));
        let statement = format!("INSERT INTO {} (id, n) VALUES ({p1}, {p2})", self.rows);
        json!({"sql": "execute", "statement": statement, "params": [id, n]})
    }

    /// Sends `steps` answering `answer` and waits until the message is parked; the report the
    /// parked message carries (a retry's or fail's reason) if `answer` leaves one.
    async fn parked(&mut self, id: &str, steps: Value, answer: &str) -> Option<Value> {
        let body = json!({"id": id, "steps": steps, "answer": answer});
        self.probe.send("db", &body).await;
        let headers = self.probe.parked("db", id).await;
        matches!(answer, "retry" | "fail").then(|| worker_error(&headers))
    }
}

/// One service on `kind`: ok commits, every other ending rolls back, errors are named.
async fn commit_and_rollback(kind: Kind) {
    let state = tempfile::tempdir().expect("state dir");
    let db = Pool::connect(kind, state.path()).await;
    let (rows, keys) = (db::table("cap_rows"), db::table("cap_keys"));
    db.exec(&format!(
        "CREATE TABLE {rows} (id VARCHAR(64) NOT NULL, n BIGINT)"
    ))
    .await;
    db.exec(&format!("CREATE TABLE {keys} (id VARCHAR(64) PRIMARY KEY)"))
        .await;
    let sub = Sub::new("db", "sql = \"db\"\nmax_retries = 0\ntimeout = \"5s\"");
    let tables = format!(
        "[sql.db]\nurl = \"{}\"\nmax_connections = 4\n",
        kind.toml_url()
    );
    let test = format!("cap-sql-{kind:?}").to_ascii_lowercase();
    let probe = Probe::start(&test, &[sub], state.path(), &tables).await;
    let mut case = Case {
        kind,
        db,
        rows,
        keys,
        probe,
    };
    committed_on_ok(&mut case).await;
    rolled_back_otherwise(&mut case).await;
    errors_by_name(&mut case).await;
    slow_statement_ends_with_the_handler(&mut case).await;
    case.probe.stop().await;
    case.db.drop_tables(&[&case.rows, &case.keys]).await;
}

/// Both rows, which the message's own query already sees; committed before the report.
async fn committed_on_ok(case: &mut Case) {
    let select = format!("SELECT id, n FROM {} ORDER BY id", case.rows);
    let query = json!({"sql": "query", "statement": select});
    let steps = json!([case.insert("ok-1", 1), case.insert("ok-2", 2), query]);
    let ok = case.probe.run("db", script("ok", steps)).await;
    let rows = json!({"columns": ["id", "n"], "rows": [["ok-1", 1], ["ok-2", 2]]});
    let expected = [json!({"ok": 1}), json!({"ok": 1}), json!({"ok": rows})];
    assert_eq!(results(&ok), expected, "{ok}");
    let ids = case.db.ids(&case.rows).await;
    assert_eq!(
        ids,
        ["ok-1", "ok-2"],
        "committed before the report went out"
    );
}

/// retry, fail, trap, timeout: the insert ran (a reason says so), then was rolled back.
async fn rolled_back_otherwise(case: &mut Case) {
    // Timeout last: on SQLite its open transaction holds the write lock until the deadline.
    for (id, answer) in [
        ("retry", "retry"),
        ("fail", "fail"),
        ("trap", "trap"),
        ("timeout", "sleep"),
    ] {
        let steps = json!([case.insert(id, 0)]);
        if let Some(why) = case.parked(id, steps, answer).await {
            assert_eq!(
                outcomes(&why),
                ["ok"],
                "the insert ran before {answer}: {why}"
            );
        }
    }
    let ids = case.db.ids(&case.rows).await;
    assert_eq!(
        ids,
        ["ok-1", "ok-2"],
        "retry, fail, trap and timeout rolled back"
    );
}

/// A constraint and invalid statements come back under their own names.
async fn errors_by_name(case: &mut Case) {
    let p1 = case.kind.param(1);
    let statement = format!("INSERT INTO {} (id) VALUES ({p1})", case.keys);
    let dup = json!({"sql": "execute", "statement": statement, "params": ["dup"]});
    let why = case.parked("constraint", json!([dup, dup]), "fail").await;
    let why = why.expect("a fail leaves its report");
    assert_eq!(outcomes(&why), ["ok", "constraint"], "{why}");
    let missing = format!("SELECT id FROM {}_missing", case.rows);
    for (id, statement) in [("syntax", "SELEC 1"), ("no-table", missing.as_str())] {
        let steps = json!([{"sql": "query", "statement": statement}]);
        let why = case.parked(id, steps, "fail").await.expect("a report");
        assert_eq!(outcomes(&why), ["invalid"], "{why}");
    }
    assert!(
        case.db.ids(&case.keys).await.is_empty(),
        "a failed message leaves no row"
    );
}

/// A statement slower than the handler's timeout ends with it, and the pool still serves
/// (PostgreSQL and MariaDB: SQLite has no sleep).
async fn slow_statement_ends_with_the_handler(case: &mut Case) {
    let Some(slow) = case.kind.sleep(30) else {
        return;
    };
    let sent = Instant::now();
    let steps = json!([{"sql": "query", "statement": slow}]);
    case.parked("slow", steps, "trap").await;
    assert!(
        sent.elapsed() < Duration::from_secs(20),
        "a 30 s statement under a 5 s timeout took {:?}",
        sent.elapsed()
    );
    let after = script("after", json!([case.insert("after", 3)]));
    let after = case.probe.run("db", after).await;
    assert_eq!(outcomes(&after), ["ok"], "{after}");
}
