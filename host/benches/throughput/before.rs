//! Before and after in one run: with `WORKER_BENCH_BEFORE` naming another worker-host binary
//! (an earlier commit's, which scripts/bench-before.sh builds), (b), (c), (d) and (k) also run
//! on it, interleaved with this tree's binary in every run (the order alternating, so drift hits
//! both alike), and one table compares the medians beside each side's run-to-run spread.

use std::path::PathBuf;

use super::cpu::CpuUse;
use super::median;

/// The earlier binary, when one is named.
pub(super) fn binary() -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os("WORKER_BENCH_BEFORE")?);
    assert!(
        path.is_file(),
        "WORKER_BENCH_BEFORE={} is not a file",
        path.display()
    );
    Some(path)
}

/// Which binary a measurement came from.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Side {
    Before,
    After,
}

impl Side {
    /// The two sides in the order run `run` measures them.
    pub(super) fn order(run: usize) -> [Side; 2] {
        if run.is_multiple_of(2) {
            [Side::Before, Side::After]
        } else {
            [Side::After, Side::Before]
        }
    }
}

#[derive(Default)]
struct Row {
    name: String,
    rates: [Vec<f64>; 2],
    cpu_us: [Vec<f64>; 2],
}

/// Every measurement of both sides, by scenario, in the order first seen.
#[derive(Default)]
pub(super) struct Table {
    rows: Vec<Row>,
}

impl Table {
    pub(super) fn push(&mut self, name: &str, side: Side, rate: f64, cpu: Option<CpuUse>) {
        let i = match self.rows.iter().position(|r| r.name == name) {
            Some(i) => i,
            None => {
                self.rows.push(Row {
                    name: name.to_string(),
                    ..Row::default()
                });
                self.rows.len() - 1
            }
        };
        let s = side as usize;
        self.rows[i].rates[s].push(rate);
        if let Some(cpu) = cpu {
            self.rows[i].cpu_us[s].push(cpu.consumer_us);
        }
    }

    pub(super) fn print(&self, before: &std::path::Path) {
        if self.rows.is_empty() {
            return;
        }
        println!();
        println!(
            "before: {} (WORKER_BENCH_BEFORE); after: this tree",
            before.display()
        );
        println!(
            "{:<44} {:>9} {:>9} {:>7} {:>8} {:>8} {:>7} {:>7}",
            "median msgs/s, spread = (max-min)/median",
            "before",
            "after",
            "a/b",
            "spread b",
            "spread a",
            "µs b",
            "µs a"
        );
        for row in &self.rows {
            let [b, a] = [stat(&row.rates[0]), stat(&row.rates[1])];
            let [cb, ca] = [stat(&row.cpu_us[0]).0, stat(&row.cpu_us[1]).0];
            println!(
                "{:<44} {:>9.0} {:>9.0} {:>7.2} {:>7.0}% {:>7.0}% {:>7.1} {:>7.1}",
                row.name,
                b.0,
                a.0,
                a.0 / b.0,
                b.1 * 100.0,
                a.1 * 100.0,
                cb,
                ca
            );
        }
    }
}

/// Median and relative spread, NaN for no samples.
fn stat(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let m = median(v.to_vec());
    let (lo, hi) = v
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
    (m, (hi - lo) / m)
}
