//! A password in a store URL, in its user-info or a query parameter, appears nowhere (SPEC
//! section 9): not in `worker-host check`, a start-up error, the log, `/readyz` (which names a
//! store that is down, but not its URL, host, user or database) or `/metrics`.

use std::time::Duration;

use serde_json::json;

use super::support::{Probe, Sub, outcomes, script};
use crate::cli::{text, worker_host};
use crate::harness::{self, free_addr, http_get};

/// PostgreSQL and Redis URLs with passwords in query parameters (and PostgreSQL's in one sqlx
/// does not know, which it would log), to servers that are down: the host runs, calls answer
/// `unavailable`, and the password shows nowhere.
#[tokio::test]
async fn a_password_in_a_store_url_appears_nowhere() {
    let secret = harness::unique("S3CRET");
    let admin = free_addr();
    let tables = format!(
        "[admin]\nlisten = \"{admin}\"\n\n\
         [sql.x]\nurl = \"postgres://orders_user@127.0.0.1:1/orders_db?password={secret}&sslpassword={secret}\"\n\n\
         [kv.y]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:1/0?password={secret}\"\n"
    );
    let state = tempfile::tempdir().expect("state dir");
    let subs = [Sub::new(
        "down",
        "kv = \"y\"\nsql = \"x\"\ntimeout = \"10s\"",
    )];
    let mut probe = Probe::start_child("cap-secret", &subs, state.path(), &tables, &[]).await;

    let config = probe.config_path();
    let check = worker_host(&["check", "-c", config.to_str().expect("utf-8")], &[]);
    let (stdout, stderr) = text(&check);
    assert!(check.status.success(), "check failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("password=***&sslpassword=***") && stdout.contains("0?password=***"),
        "check shows the URLs, passwords hidden:\n{stdout}"
    );

    let steps = json!([
        {"kv": "get", "key": "a"},
        {"sql": "query", "statement": "SELECT 1"},
    ]);
    let report = probe.run("down", script("down", steps)).await;
    assert_eq!(outcomes(&report), ["unavailable"; 2], "{report}");
    let ready = harness::eventually(Duration::from_secs(20), "/readyz 503", || async {
        let (status, body) = http_get(admin, "/readyz").await?;
        (status == 503 && body.contains("sql.x") && body.contains("kv.y")).then_some(body)
    })
    .await;
    println!("/readyz with two stores down: {ready}");
    let (_, metrics) = http_get(admin, "/metrics").await.expect("/metrics");
    for part in ["://", "127.0.0.1", "orders_user", "orders_db"] {
        assert!(!ready.contains(part), "/readyz shows {part:?}: {ready}");
    }
    let log = probe.log();

    // A URL the driver refuses stops the start (before it connects to anything), and the
    // error hides the password too.
    let bad = config.with_file_name("bad.toml");
    let bad_toml = std::fs::read_to_string(&config)
        .expect("worker.toml")
        .replace("127.0.0.1:1/orders_db", "127.0.0.1:notaport/orders_db");
    std::fs::write(&bad, bad_toml).expect("write bad.toml");
    let run = worker_host(&["run", "-c", bad.to_str().expect("utf-8")], &[]);
    let (_, start_error) = text(&run);
    assert!(!run.status.success(), "a bad URL must stop the start");
    assert!(
        start_error.contains("invalid PostgreSQL URL"),
        "{start_error}"
    );
    probe.stop().await;

    for (what, shown) in [
        ("check", &format!("{stdout}{stderr}")),
        ("the guest", &report.to_string()),
        ("/readyz", &ready),
        ("/metrics", &metrics),
        ("the log", &log),
        ("the start-up error", &start_error),
    ] {
        assert!(!shown.contains(&secret), "the password in {what}:\n{shown}");
    }
}
