//! (k) What one capability call adds per message, end to end: worker-host with cap_probe.wasm
//! (a component that runs the steps in its body) doing nothing, then one kv get+set (embedded,
//! Redis) and one SQL insert (SQLite, PostgreSQL) per message, then the same insert with
//! `outbox = true` (every message has an id, so each is recorded). The cost is the difference of
//! the time per message against the do-nothing run of the same round; an outbox row also shows
//! its rate against the plain insert on the same database.

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
    /// Run once after (dropping the table); `{queue}` stands for the measured queue.
    cleanup: Option<String>,
    /// The row this one is compared with (the plain insert, for an outbox row).
    plain: Option<&'static str>,
}

const SQLITE: &str = "[sql.bench]\nurl = \"sqlite:bench.db\"\n";
const POSTGRES: &str = "[sql.bench]\nurl = \"postgres://postgres@127.0.0.1:5432/test\"\n";
const SQL_SQLITE: &str = "SQL insert, SQLite";
const SQL_POSTGRES: &str = "SQL insert, PostgreSQL";
const OUTBOX_SQLITE: &str = "SQL insert + outbox, SQLite";
const OUTBOX_POSTGRES: &str = "SQL insert + outbox, PostgreSQL";

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
            plain: None,
        },
        Case {
            name: "kv get+set, embedded (redb)",
            sections: "[kv.bench]\n".into(),
            grant: "kv = \"bench\"\n",
            setup: None,
            body: script(kv_steps),
            cleanup: None,
            plain: None,
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
            plain: None,
        },
        Case {
            name: SQL_SQLITE,
            sections: SQLITE.into(),
            grant: "sql = \"bench\"\n",
            setup: Some(create.clone()),
            body: insert.clone(),
            cleanup: None,
            plain: None,
        },
        Case {
            name: SQL_POSTGRES,
            sections: POSTGRES.into(),
            grant: "sql = \"bench\"\n",
            setup: Some(create.clone()),
            body: insert.clone(),
            cleanup: Some(drop.clone()),
            plain: None,
        },
        Case {
            name: OUTBOX_SQLITE,
            sections: SQLITE.into(),
            grant: "sql = \"bench\"\noutbox = true\n",
            setup: Some(create.clone()),
            body: insert.clone(),
            cleanup: None,
            plain: Some(SQL_SQLITE),
        },
        Case {
            name: OUTBOX_POSTGRES,
            sections: POSTGRES.into(),
            grant: "sql = \"bench\"\noutbox = true\n",
            setup: Some(create),
            body: insert,
            cleanup: Some(drop),
            plain: Some(SQL_POSTGRES),
        },
    ]
}

/// The binaries (k) measures: this tree's, and an earlier one to compare with.
#[derive(Clone, Copy)]
pub(crate) struct Bins<'a> {
    pub(crate) after: &'a Path,
    pub(crate) before: Option<&'a Path>,
}

/// Runs every case `runs` times (interleaved) and prints msgs/s, the added time per message,
/// for an outbox row its rate over the plain insert's on the same database, and the CPU per
/// message of the host and of the broker. Returns target 7's ratio: the SQLite outbox row's rate
/// over the do-nothing row's.
pub(crate) async fn bench(
    bins: Bins<'_>,
    probe: &Path,
    n: u64,
    runs: usize,
    compared: &mut before::Table,
) -> Ratios {
    assert!(
        probe.exists(),
        "{} is missing: scripts/build-plugins.sh",
        probe.display()
    );
    let mut rates: Vec<Vec<f64>> = Vec::new();
    let mut cpus: Vec<Vec<CpuUse>> = Vec::new();
    for run in 0..runs {
        for i in 0..cases("t").len() {
            for side in Side::order(run) {
                let bin = match side {
                    Side::After => bins.after,
                    Side::Before => match bins.before {
                        Some(bin) => bin,
                        None => continue,
                    },
                };
                // A table of its own per measurement: no case sees another's rows.
                let table = unique("bench_caps").replace(['-', '.'], "_");
                let case = cases(&table).swap_remove(i);
                eprintln!("(k) {} on {}", case.name, bin.display());
                let Some((rate, cpu)) = measure(bin, probe, &case, n).await else {
                    // Only an earlier binary may fail a case: this tree's must handle them all.
                    assert!(
                        side == Side::Before,
                        "{}: setup not handled in 60 s",
                        case.name
                    );
                    eprintln!(
                        "(k) {}: the earlier binary did not handle the setup; left out",
                        case.name
                    );
                    continue;
                };
                compared.push(&format!("(k) {}", case.name), side, rate, Some(cpu));
                if side == Side::After {
                    if rates.len() <= i {
                        rates.push(Vec::new());
                        cpus.push(Vec::new());
                    }
                    rates[i].push(rate);
                    cpus[i].push(cpu);
                }
            }
        }
        eprintln!("capability run {} done", run + 1);
    }
    let cases = cases("t");
    let rate_of = |name: &str| {
        let i = cases.iter().position(|c| c.name == name);
        median(rates[i.expect("a case's plain row is a case")].clone())
    };
    let base = median(rates[0].clone());
    println!();
    println!(
        "(k) capability cost per message (cap_probe.wasm, concurrency 8, {n} messages, median of {runs})"
    );
    println!(
        "{:<40} {:>10} {:>16} {:>14}",
        "per message", "msgs/s", "added µs/msg", "vs plain SQL"
    );
    for (case, r) in cases.iter().zip(&rates) {
        let (name, rate) = (case.name, median(r.clone()));
        let added = (1.0 / rate - 1.0 / base) * 1e6;
        let vs = case
            .plain
            .map(|plain| format!("{:.2}", rate / rate_of(plain)))
            .unwrap_or_default();
        println!("{name:<40} {rate:>10.0} {added:>16.1} {vs:>14}");
    }
    // Whether a slower row spends more CPU per message or waits more.
    let named: Vec<String> = cases.iter().map(|c| format!("(k) {}", c.name)).collect();
    let rows: Vec<(&str, &[CpuUse])> = named
        .iter()
        .zip(&cpus)
        .map(|(name, v)| (name.as_str(), v.as_slice()))
        .collect();
    super::cpu::print(&rows);
    Ratios {
        outbox_sqlite: rate_of(OUTBOX_SQLITE) / base,
        sql_sqlite: rate_of(SQL_SQLITE) / base,
        outbox_postgres: rate_of(OUTBOX_POSTGRES) / rate_of(SQL_POSTGRES),
    }
}

/// The (k) figures the targets are stated in.
pub(crate) struct Ratios {
    /// SQLite insert + outbox / doing nothing.
    pub(crate) outbox_sqlite: f64,
    /// SQLite plain insert / doing nothing.
    pub(crate) sql_sqlite: f64,
    /// PostgreSQL insert + outbox / PostgreSQL plain insert.
    pub(crate) outbox_postgres: f64,
}

impl Ratios {
    /// Not measured.
    pub(crate) const NOT_RUN: Ratios = Ratios {
        outbox_sqlite: f64::NAN,
        sql_sqlite: f64::NAN,
        outbox_postgres: f64::NAN,
    };
}

/// One case: declare, set up, fill, consume (timed), clean up: its msgs/s and CPU per message.
/// None when the setup message is not handled (a binary that cannot run the case).
async fn measure(bin: &Path, probe: &Path, case: &Case, n: u64) -> Option<(f64, CpuUse)> {
    let prefix = unique("bench-caps");
    let queue = format!("{prefix}.q");
    let state = std::env::temp_dir().join(format!("{prefix}-state"));
    let extra = Extra {
        sections: format!("[state]\ndir = \"{}\"\n{}", state.display(), case.sections),
        subscription: case.grant.to_string(),
        ..Extra::default()
    };
    let plugin = Plugin::File(probe);
    let conn = connect().await;
    let ch = conn.create_channel().await.expect("channel");
    {
        let host = start_host_with(bin, &plugin, std::slice::from_ref(&queue), &prefix, &extra);
        wait_ready(&host.admin).await;
        // Setup and cleanup carry no message id: the outbox does not record them.
        if let Some(setup) = &case.setup {
            fill_with(&ch, &queue, 1, setup.as_bytes(), false).await;
            if !wait_handled(&host.admin, 1).await {
                drop(host);
                remove_topology(&ch, &queue, &prefix).await;
                let _ = std::fs::remove_dir_all(&state);
                return None;
            }
        }
        // Acks are batched: a kill now could leave the setup message to the measured host.
        host.stop();
    }
    fill(&ch, &queue, n, case.body.as_bytes()).await;
    let host = start_host_with(bin, &plugin, std::slice::from_ref(&queue), &prefix, &extra);
    // With WORKER_BENCH_PERF, one profile per case in the order of the table (-k.data for
    // "nothing", -k.2.data for the next row, ...).
    let perf = start_perf(host.child.id(), 'k');
    let (rate, cpu) = consume_rate(&host.admin, host.child.id(), n).await;
    stop_perf(perf);
    if case.grant.contains("outbox") {
        // Every measured message was recorded: none went without an id, none was a duplicate.
        for name in ["worker_outbox_without_id_total", "worker_duplicates_total"] {
            let count = counter(&host.admin, name).await;
            assert_eq!(count, 0, "{}: {name} = {count}", case.name);
        }
    }
    if let Some(cleanup) = &case.cleanup {
        let cleanup = cleanup.replace("{queue}", &queue);
        fill_with(&ch, &queue, 1, cleanup.as_bytes(), false).await;
        if !wait_handled(&host.admin, n + 1).await {
            // The rate stands; the table may stay behind (the names are unique).
            eprintln!(
                "(k) {}: cleanup not handled in 60 s on {}",
                case.name,
                bin.display()
            );
        }
    }
    drop(host);
    if case.grant.contains("outbox") && case.sections == POSTGRES {
        forget_recorded(&queue).await;
    }
    remove_topology(&ch, &queue, &prefix).await;
    let _ = conn.close(200, "bye".into()).await;
    let _ = std::fs::remove_dir_all(&state);
    Some((rate, cpu))
}

/// Sum of the samples of counter `name` on the host's /metrics.
async fn counter(admin: &str, name: &str) -> u64 {
    let text = http_get(admin, "/metrics").await.expect("/metrics answers");
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

async fn wait_handled(admin: &str, n: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while handled_ok(admin).await.unwrap_or(0) < n {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

/// Removes the outbox's rows of `queue` from the shared PostgreSQL test database, from outside
/// the host (a plugin may not name the outbox's tables), so runs leave nothing behind.
async fn forget_recorded(queue: &str) {
    use sqlx::Connection as _;
    let url = "postgres://postgres@127.0.0.1:5432/test";
    let mut db = sqlx::PgConnection::connect(url)
        .await
        .unwrap_or_else(|e| panic!("{url}: {e} (scripts/services.sh starts PostgreSQL)"));
    for delete in [
        "DELETE FROM worker_inbox WHERE queue = $1",
        "DELETE FROM worker_outbox WHERE queue = $1",
    ] {
        sqlx::query(delete)
            .bind(queue)
            .execute(&mut db)
            .await
            .unwrap_or_else(|e| panic!("{delete}: {e}"));
    }
}
