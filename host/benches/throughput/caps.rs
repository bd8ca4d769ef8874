//! (k) What one capability call adds per message, end to end: worker-host with cap_probe.wasm
//! (a component that runs the steps in its body) doing nothing, then one kv get+set (embedded,
//! Redis) and one SQL insert (SQLite, PostgreSQL) per message. The cost is the difference of the
//! time per message against the do-nothing run of the same round.

use super::*;

/// One capability setup: the worker.toml lines it needs and the steps of each message.
struct Case {
    name: &'static str,
    /// Top-level tables (`[kv.bench]`, `[sql.bench]`).
    sections: String,
    /// Lines of the subscription table.
    grant: &'static str,
    /// Run once before the queue is filled (creating the table).
    setup: Option<String>,
    /// The body of every measured message.
    body: String,
    /// Run once after (dropping the table).
    cleanup: Option<String>,
}

fn script(steps: &str) -> String {
    format!(r#"{{"steps":[{steps}],"answer":"ok","on_error":"fail"}}"#)
}

fn cases(table: &str) -> Vec<Case> {
    let kv_steps = r#"{"kv":"get","key":"k"},{"kv":"set","key":"k","value":"v"}"#;
    let create = script(&format!(
        r#"{{"sql":"execute","statement":"CREATE TABLE {table} (v INTEGER)"}}"#
    ));
    let insert = script(&format!(
        r#"{{"sql":"execute","statement":"INSERT INTO {table} (v) VALUES (1)"}}"#
    ));
    let drop = script(&format!(
        r#"{{"sql":"execute","statement":"DROP TABLE {table}"}}"#
    ));
    let redis_prefix = table.replace('_', "-");
    vec![
        Case {
            name: "nothing",
            sections: String::new(),
            grant: "",
            setup: None,
            body: script(""),
            cleanup: None,
        },
        Case {
            name: "kv get+set, embedded (redb)",
            sections: "[kv.bench]\n".into(),
            grant: "kv = \"bench\"\n",
            setup: None,
            body: script(kv_steps),
            cleanup: None,
        },
        Case {
            name: "kv get+set, Redis",
            sections: "[kv.bench]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:6379/0\"\n"
                .into(),
            grant: "kv = \"bench\"\n",
            setup: None,
            body: script(&kv_steps.replace("\"k\"", &format!("\"{redis_prefix}\""))),
            cleanup: Some(script(&format!(
                r#"{{"kv":"delete","key":"{redis_prefix}"}}"#
            ))),
        },
        Case {
            name: "SQL insert, SQLite",
            sections: "[sql.bench]\nurl = \"sqlite:bench.db\"\n".into(),
            grant: "sql = \"bench\"\n",
            setup: Some(create.clone()),
            body: insert.clone(),
            cleanup: None,
        },
        Case {
            name: "SQL insert, PostgreSQL",
            sections: "[sql.bench]\nurl = \"postgres://postgres@127.0.0.1:5432/test\"\n".into(),
            grant: "sql = \"bench\"\n",
            setup: Some(create),
            body: insert,
            cleanup: Some(drop),
        },
    ]
}

/// Runs every case `runs` times (interleaved) and prints msgs/s and the added time per message.
pub(crate) async fn bench(bin: &Path, probe: &Path, n: u64, runs: usize) {
    assert!(
        probe.exists(),
        "{} is missing: scripts/build-plugins.sh",
        probe.display()
    );
    let mut rates: Vec<Vec<f64>> = Vec::new();
    for run in 0..runs {
        let table = unique("bench_caps").replace(['-', '.'], "_");
        for (i, case) in cases(&table).iter().enumerate() {
            let rate = measure(bin, probe, case, n).await;
            if rates.len() <= i {
                rates.push(Vec::new());
            }
            rates[i].push(rate);
        }
        eprintln!("capability run {} done", run + 1);
    }
    let names: Vec<&str> = cases("t").iter().map(|c| c.name).collect();
    let base = median(rates[0].clone());
    println!();
    println!(
        "(k) capability cost per message (cap_probe.wasm, concurrency 8, {n} messages, median of {runs})"
    );
    println!(
        "{:<40} {:>10} {:>16}",
        "per message", "msgs/s", "added µs/msg"
    );
    for (name, r) in names.iter().zip(&rates) {
        let rate = median(r.clone());
        let added = (1.0 / rate - 1.0 / base) * 1e6;
        println!("{name:<40} {rate:>10.0} {added:>16.1}");
    }
}

/// One case: declare, set up, fill, consume (timed), clean up.
async fn measure(bin: &Path, probe: &Path, case: &Case, n: u64) -> f64 {
    let prefix = unique("bench-caps");
    let queue = format!("{prefix}.q");
    let state = std::env::temp_dir().join(format!("{prefix}-state"));
    let extra = Extra {
        sections: format!("[state]\ndir = \"{}\"\n{}", state.display(), case.sections),
        subscription: case.grant.to_string(),
    };
    let plugin = Plugin::File(probe);
    let conn = connect().await;
    let ch = conn.create_channel().await.expect("channel");
    {
        let host = start_host_with(bin, &plugin, std::slice::from_ref(&queue), &prefix, &extra);
        wait_ready(&host.admin).await;
        if let Some(setup) = &case.setup {
            fill(&ch, &queue, 1, setup.as_bytes()).await;
            wait_handled(&host.admin, 1).await;
        }
    }
    fill(&ch, &queue, n, case.body.as_bytes()).await;
    let host = start_host_with(bin, &plugin, std::slice::from_ref(&queue), &prefix, &extra);
    let rate = consume_rate(&host.admin, n).await;
    if let Some(cleanup) = &case.cleanup {
        fill(&ch, &queue, 1, cleanup.as_bytes()).await;
        wait_handled(&host.admin, n + 1).await;
    }
    drop(host);
    remove_topology(&ch, &queue, &prefix).await;
    let _ = conn.close(200, "bye".into()).await;
    let _ = std::fs::remove_dir_all(&state);
    rate
}

async fn wait_handled(admin: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while handled_ok(admin).await.unwrap_or(0) < n {
        assert!(
            Instant::now() < deadline,
            "setup message not handled in 60s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
