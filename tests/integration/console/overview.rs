//! `GET /api/overview` on a running service with `[admin] token`: refused without the token;
//! with it, a subscription's ok rate and totals move while messages flow, its depths come from
//! the broker, and it shows paused once `pause_after` answers in a row were not ok.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::{TOKEN, request};
use crate::capabilities::db::{self, Kind, Pool};
use crate::capabilities::support::{Probe, Sub};
use crate::harness::{self, free_addr};

/// A running service with two subscriptions on the probe: `ov` pauses after 3 answers in a row
/// that are not ok (for a minute), `st` never does. Messages answer ok until
/// [`Flow::break_dependency`] puts a row in a flag table; then `ov`'s answer retry.
pub(crate) struct Flow {
    pub probe: Probe,
    pub admin: SocketAddr,
    /// The pausing subscription's queue, and the steady one's.
    pub queue: String,
    pub steady: String,
    db: Pool,
    flag: String,
    sent: AtomicUsize,
    _state: tempfile::TempDir,
}

impl Flow {
    pub async fn start(test: &str) -> Flow {
        let state = tempfile::tempdir().expect("state dir");
        let db = Pool::connect(Kind::Sqlite, state.path()).await;
        let flag = db::table(&format!("{}_flag", test.replace('-', "_")));
        db.exec(&format!("CREATE TABLE {flag} (x INTEGER)")).await;
        let admin = free_addr();
        let tables = format!(
            "[admin]\nlisten = \"{admin}\"\ntoken = \"{TOKEN}\"\n\n[sql.db]\nurl = \"{}\"\n",
            Kind::Sqlite.toml_url()
        );
        let pausing = "sql = \"db\"\npause_after = 3\npause_for = \"60s\"\nmax_retries = 20\n\
                       retry_delays = [\"500ms\"]\nconcurrency = 1\nprefetch = 1";
        let subs = [Sub::new("ov", pausing), Sub::new("st", "sql = \"db\"")];
        let probe = Probe::start(test, &subs, state.path(), &tables).await;
        let queue = format!("{}.ov", probe.n.p);
        let steady = format!("{}.st", probe.n.p);
        Flow {
            probe,
            admin,
            queue,
            steady,
            db,
            flag,
            sent: AtomicUsize::new(0),
            _state: state,
        }
    }

    /// Sends `n` messages to subscription `sub` (`ov` or `st`): ok while the flag table is
    /// empty, retry (an integer overflow) once it has a row.
    pub async fn send(&self, sub: &str, n: usize) {
        let statement = format!(
            "SELECT CASE WHEN EXISTS (SELECT 1 FROM {}) THEN abs(-9223372036854775808) ELSE 1 END",
            self.flag
        );
        for _ in 0..n {
            let i = self.sent.fetch_add(1, Ordering::Relaxed);
            let step = json!({"sql": "query", "statement": statement});
            let script = json!({"id": format!("m-{i}"), "steps": [step], "on_error": "retry"});
            self.probe.send(sub, &script).await;
        }
    }

    /// From now on `ov`'s messages answer retry.
    pub async fn break_dependency(&self) {
        self.db
            .exec(&format!("INSERT INTO {} VALUES (1)", self.flag))
            .await;
    }

    /// `GET /api/overview` with the token.
    pub async fn overview(&self) -> Value {
        let (status, body) = request(self.admin, "GET", "/api/overview", Some(TOKEN), "").await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// The row of `queue`, polled until `check` holds (20 s at most).
    pub async fn row_until(
        &self,
        queue: &str,
        what: &str,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        harness::eventually(Duration::from_secs(20), what, || async {
            let all = self.overview().await;
            let row = all["subscriptions"]
                .as_array()?
                .iter()
                .find(|s| s["queue"] == json!(queue))?
                .clone();
            check(&row).then_some(row)
        })
        .await
    }

    pub async fn stop(self) {
        self.probe.stop().await;
    }
}

#[tokio::test]
async fn the_overview_api_shows_rates_depths_and_pause_and_needs_the_token() {
    let flow = Flow::start("overview").await;
    for token in [None, Some("wrong")] {
        let (status, body) = request(flow.admin, "GET", "/api/overview", token, "").await;
        assert_eq!(status, 401, "{body}");
    }
    let page = harness::http_get(flow.admin, "/overview").await;
    assert_eq!(page.map(|(s, _)| s), Some(200), "the page itself loads");
    let root = harness::http_get(flow.admin, "/").await;
    assert_eq!(root.map(|(s, _)| s), Some(303), "/ leads to /overview");

    let idle = flow.row_until(&flow.queue, "the first row", |_| true).await;
    assert_eq!(idle["totals"], json!({"ok": 0, "retry": 0, "fail": 0}));
    assert_eq!(idle["last_ok"], Value::Null);
    assert_eq!(idle["pause_after"], json!(3));
    assert_eq!(idle["plugin"], json!("cap_probe.wasm"));
    assert!(
        idle["version"].as_str().is_some_and(|v| v.len() == 12),
        "{idle}"
    );
    assert_eq!(
        idle["failed_queue"],
        json!(format!("{}@failed", flow.queue))
    );

    flow.send("ov", 20).await;
    let moving = flow
        .row_until(&flow.queue, "20 ok and a rate", |r| {
            r["totals"]["ok"] == json!(20) && r["rates"]["ok"].as_f64() > Some(0.0)
        })
        .await;
    assert_eq!(moving["paused"], json!(false), "{moving}");
    assert!(moving["last_ok"].is_i64(), "{moving}");
    assert_eq!(moving["rates"]["fail"], json!(0.0), "{moving}");
    let depths = flow
        .row_until(&flow.queue, "depths read", |r| {
            r["depth"]["failed"].is_u64()
        })
        .await;
    assert_eq!(depths["depth"]["failed"], json!(0), "{depths}");
    assert!(depths["consumers"].as_u64() >= Some(1), "{depths}");
    let retry = &depths["depth"]["retry"];
    assert_eq!(
        retry[0]["queue"],
        json!(format!("{}@retry.500ms", flow.queue))
    );

    flow.break_dependency().await;
    flow.send("ov", 10).await;
    let paused = flow
        .row_until(&flow.queue, "paused", |r| r["paused"] == json!(true))
        .await;
    assert!(paused["totals"]["retry"].as_u64() >= Some(3), "{paused}");
    assert!(paused["rates"]["retry"].as_f64() > Some(0.0), "{paused}");
    let waiting = flow
        .row_until(&flow.queue, "messages waiting in Q", |r| {
            r["depth"]["queue"].as_u64() >= Some(5)
        })
        .await;
    assert_eq!(waiting["paused"], json!(true));
    let steady = flow
        .row_until(&flow.steady, "the steady row", |_| true)
        .await;
    assert_eq!(steady["paused"], json!(false), "{steady}");
    let all = flow.overview().await;
    assert_eq!(all["ready"], json!(true), "{all}");
    assert_eq!(all["window_s"], json!(900));
    flow.stop().await;
}
