//! `worker-host failed dry-run` through the real binary while the service runs: a parked
//! message runs through the plugin with its HTTP request, key-value write, SQL insert and
//! publish each captured and printed, and none of them reaches the HTTP server, Redis, the
//! database or the broker; the message stays parked.

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use super::db;
use super::support::{Probe, REDIS, Sub, outcomes, require};
use crate::harness;
use crate::traces::support::HttpServer;

#[tokio::test]
async fn dry_run_captures_every_effect_and_leaves_the_message_parked() {
    require(&REDIS);
    let web = HttpServer::start().await;
    let state = tempfile::tempdir().expect("state dir");
    let table = db::table("dry_t");
    let key = harness::unique("dry-key");
    let keys = format!(
        "allowed_hosts = [\"http://{}\"]\nkv = \"red\"\nsql = \"db\"\nmax_retries = 0\n\
         max_message_size = \"1KiB\"",
        web.addr
    );
    let tables = "[kv.red]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:6379/0\"\n\n\
                  [sql.db]\nurl = \"sqlite:dry.db\"\n";
    let mut probe = Probe::start("dry-run", &[Sub::new("dr", &keys)], state.path(), tables).await;
    let create = json!({"sql": "execute", "statement": format!("CREATE TABLE {table} (id TEXT)")});
    let report = probe
        .run("dr", json!({"id": "setup", "steps": [create]}))
        .await;
    assert_eq!(outcomes(&report), ["ok"]);

    // Over max_message_size: parked untouched, without a handler call.
    let steps = json!([
        {"http": "GET", "url": format!("http://{}/dry", web.addr)},
        {"kv": "set", "key": key, "value": "v"},
        {"sql": "execute", "statement": format!("INSERT INTO {table} VALUES (?)"), "params": ["m"]},
    ]);
    let parked = json!({"id": "dry-1", "pad": "x".repeat(2000), "steps": steps});
    let props = lapin::BasicProperties::default().with_message_id("dry-1".into());
    probe.send_with("dr", &parked, props).await;
    let queue = format!("{}.dr", probe.n.p);
    let failed = format!("{queue}@failed");
    harness::eventually(Duration::from_secs(20), "dry-1 parked", || async {
        (harness::depth(&probe.ch, &failed).await == 1).then_some(())
    })
    .await;

    let config = probe.config();
    let out = Command::new(env!("CARGO_BIN_EXE_worker-host"))
        .args(["failed", "dry-run", "-c"])
        .arg(&config.path)
        .args(["--queue", &queue])
        .output()
        .expect("run worker-host failed dry-run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "dry-run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    let line = &lines[0];
    assert_eq!(line["id"], json!("dry-1"));
    assert_eq!(line["answer"], json!("ok"), "{line}");
    let effects = line["effects"].as_array().expect("effects");
    let kinds: Vec<&str> = effects
        .iter()
        .map(|e| {
            ["http", "kv", "sql", "publish"]
                .into_iter()
                .find(|k| e.get(*k).is_some())
                .unwrap_or("?")
        })
        .collect();
    assert_eq!(kinds, ["http", "kv", "sql", "publish"], "{line}");
    assert_eq!(effects[0]["url"], json!(format!("http://{}/dry", web.addr)));
    assert_eq!(
        effects[1],
        json!({"kv": "set", "store": "red", "key": key, "value": "v", "ttl_ms": null})
    );
    assert_eq!(effects[2]["affected"], json!(1), "{line}");
    assert_eq!(effects[2]["params"], json!(["m"]));
    assert_eq!(effects[3]["publish"], json!(probe.n.out()));

    // Nothing left the host: no request, no key, no row, no report; still parked.
    assert!(web.traceparents().is_empty(), "the HTTP server was called");
    assert_eq!(
        harness::depth(&probe.ch, &probe.n.seen()).await,
        0,
        "a report was published"
    );
    assert_eq!(
        harness::depth(&probe.ch, &failed).await,
        1,
        "dry-1 left the failed queue"
    );
    let check = json!({"id": "check", "steps": [
        {"kv": "get", "key": key},
        {"sql": "query", "statement": format!("SELECT count(*) FROM {table}")},
    ]});
    let report = probe.run("dr", check).await;
    assert_eq!(outcomes(&report), ["ok", "ok"], "{report}");
    assert_eq!(
        report["results"][0]["ok"],
        Value::Null,
        "the key was written: {report}"
    );
    assert_eq!(
        report["results"][1]["ok"]["rows"][0][0],
        json!(0),
        "a row was written: {report}"
    );
    probe.stop().await;
}
