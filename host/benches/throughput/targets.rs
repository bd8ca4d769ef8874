//! The table of targets: every figure the performance targets are stated in, from this run, with
//! its goal and whether it was met. A row whose scenarios were not run (`--only`) says so.

/// The figures of this run (NaN: not run).
pub(super) struct Measured {
    /// (a): the faster bare consumer, the denominator.
    pub(super) a: f64,
    pub(super) a_plus: f64,
    pub(super) b: f64,
    /// The lowest (b)/(a+) of the single runs: target 1 asks for every run.
    pub(super) b_lowest_run: f64,
    /// The consumer's own CPU µs per message (median) in (a+) and (b): the steadier figure of
    /// target 1, as the rates swing with the VM.
    pub(super) a_plus_cpu_us: f64,
    pub(super) b_cpu_us: f64,
    /// (B): (b) with `instance = "reuse"`, and its CPU µs per message.
    pub(super) b_reuse: f64,
    pub(super) b_reuse_cpu_us: f64,
    /// (x): the batch consumer prototype with the ok WAT call, and its CPU µs per message.
    pub(super) x: f64,
    pub(super) x_cpu_us: f64,
    pub(super) rust: f64,
    pub(super) rust_reuse: f64,
    pub(super) py_reuse: f64,
    pub(super) js_reuse: f64,
    pub(super) celery: f64,
    pub(super) dramatiq: f64,
    /// µs per call in-process, fresh instance ((u)).
    pub(super) rust_us: f64,
    pub(super) py_us: f64,
    pub(super) js_us: f64,
    /// MiB: the mixed host's peak, fresh instances ((m)), and 8 idle WAT subscriptions ((i)).
    pub(super) mix_peak_mib: f64,
    pub(super) idle_mib: f64,
    /// Seconds from spawn to ready, 12 subscriptions, warm cache ((s)).
    pub(super) startup_s: f64,
    /// (k): msgs/s with an SQL insert and the outbox on SQLite over the same handler doing
    /// nothing.
    pub(super) outbox_sqlite: f64,
    /// (k): the same with the plain insert.
    pub(super) sql_sqlite: f64,
    /// (k): PostgreSQL insert + outbox over the plain insert.
    pub(super) outbox_postgres: f64,
}

/// What a row's goal bounds.
#[derive(Clone, Copy)]
enum Goal {
    AtLeast(f64),
    AtMost(f64),
}

/// Prints the table.
pub(super) fn print(m: &Measured) {
    use Goal::{AtLeast, AtMost};
    let rows = [
        (
            "1",
            "(b) ok WAT / (a+) batched-ack bare lapin",
            m.b / m.a_plus,
            AtLeast(1.0),
            "",
        ),
        (
            "1",
            "(b) / (a+), the lowest single run",
            m.b_lowest_run,
            AtLeast(1.0),
            "",
        ),
        (
            "1'",
            "consumer CPU per message: (a+) / (b)",
            m.a_plus_cpu_us / m.b_cpu_us,
            AtLeast(1.2),
            "",
        ),
        (
            "1",
            "(B) ok WAT, reused / (a+)",
            m.b_reuse / m.a_plus,
            AtLeast(1.0),
            "",
        ),
        (
            "1'",
            "consumer CPU per message: (a+) / (B)",
            m.a_plus_cpu_us / m.b_reuse_cpu_us,
            AtLeast(1.2),
            "",
        ),
        (
            "1",
            "prototype (x) batch consumer + ok WAT / (a+)",
            m.x / m.a_plus,
            AtLeast(1.0),
            "",
        ),
        (
            "1'",
            "consumer CPU per message: (a+) / (x)",
            m.a_plus_cpu_us / m.x_cpu_us,
            AtLeast(1.0),
            "",
        ),
        (
            "2",
            "Rust serde_json, fresh: one call",
            m.rust_us,
            AtMost(12.0),
            " µs",
        ),
        (
            "2",
            "(r) Rust serde_json, fresh / (a)",
            m.rust / m.a,
            AtLeast(0.9),
            "",
        ),
        (
            "2",
            "(r) Rust serde_json, reuse / (a)",
            m.rust_reuse / m.a,
            AtLeast(1.2),
            "",
        ),
        (
            "3",
            "Python json.loads, fresh: one call",
            m.py_us,
            AtMost(400.0),
            " µs",
        ),
        (
            "3",
            "(p) Python, reuse / Celery -P solo",
            m.py_reuse / m.celery,
            AtLeast(2.0),
            "",
        ),
        (
            "3",
            "(p) Python, reuse / Dramatiq -p 2 -t 8",
            m.py_reuse / m.dramatiq,
            AtLeast(1.0),
            "",
        ),
        (
            "4",
            "JS JSON.parse, fresh: one call",
            m.js_us,
            AtMost(200.0),
            " µs",
        ),
        (
            "4",
            "(j) JS, reuse / Dramatiq -p 2 -t 8",
            m.js_reuse / m.dramatiq,
            AtLeast(1.0),
            "",
        ),
        (
            "5",
            "(s) start-up, 12 subscriptions, warm cache",
            m.startup_s,
            AtMost(1.0),
            " s",
        ),
        (
            "6",
            "(m) 8 mixed subscriptions, peak RSS",
            m.mix_peak_mib,
            AtMost(300.0),
            " MiB",
        ),
        (
            "6",
            "(i) 8 idle WAT subscriptions, RSS",
            m.idle_mib,
            AtMost(64.0),
            " MiB",
        ),
        (
            "7",
            "(k) SQL insert + outbox, SQLite / doing nothing",
            m.outbox_sqlite,
            AtLeast(0.5),
            "",
        ),
        (
            "7'",
            "(k) SQL insert, SQLite / doing nothing",
            m.sql_sqlite,
            AtLeast(0.6),
            "",
        ),
        (
            "7''",
            "(k) insert + outbox / plain insert, PostgreSQL",
            m.outbox_postgres,
            AtLeast(0.85),
            "",
        ),
    ];
    println!();
    println!(
        "{:<3} {:<46} {:>12} {:>10} {:>6}",
        "#", "target", "measured", "goal", "met"
    );
    for (n, name, v, goal, unit) in rows {
        let (bound, met) = match goal {
            AtLeast(g) => (format!(">= {g}{unit}"), v >= g),
            AtMost(g) => (format!("<= {g}{unit}"), v <= g),
        };
        if v.is_nan() {
            println!("{n:<3} {name:<46} {:>12} {bound:>10} {:>6}", "not run", "");
        } else {
            let shown = format!("{v:.2}{unit}");
            let met = if met { "yes" } else { "NO" };
            println!("{n:<3} {name:<46} {shown:>12} {bound:>10} {met:>6}");
        }
    }
}
