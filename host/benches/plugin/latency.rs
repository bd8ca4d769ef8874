//! Per-message latency as a distribution: a timed loop of single calls, since criterion reports
//! means and medians of batches but no tail.

use std::sync::Arc;
use std::time::{Duration, Instant};

use worker_host::plugin::{Answer, Input, Limits, Plugin};

/// Calls of the timed loop: 2000 for a real run, fewer in a short one (`--quick`, or a test
/// run without `--bench`).
pub fn calls() -> usize {
    if short_run() { 200 } else { 2000 }
}

/// Whether criterion runs in a short mode, so the extra measurements shrink too.
pub fn short_run() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--quick") || !args.iter().any(|a| a == "--bench")
}

/// Median and 99th percentile of one call, in µs.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    pub median_us: f64,
    pub p99_us: f64,
}

/// Times `calls` handler calls one after the other, after a warm-up of a tenth as many (for a
/// reused instance, the warm-up also creates it). Every answer must be ok: a demo that fails
/// would measure something else.
pub fn measure(
    rt: &tokio::runtime::Runtime,
    plugin: &Plugin,
    input: &Arc<Input>,
    limits: &Limits,
    calls: usize,
) -> Latency {
    let samples = rt.block_on(async {
        for _ in 0..calls / 10 {
            let inv = plugin.handle(input.clone(), limits).await;
            assert_ok(plugin, &inv.answer);
        }
        let mut samples = Vec::with_capacity(calls);
        for _ in 0..calls {
            let started = Instant::now();
            let inv = plugin.handle(input.clone(), limits).await;
            samples.push(started.elapsed());
            assert_ok(plugin, &inv.answer);
        }
        samples
    });
    summarize(samples)
}

fn assert_ok(plugin: &Plugin, answer: &Result<Answer, worker_host::plugin::HandlerError>) {
    assert!(
        matches!(answer, Ok(Answer::Ok)),
        "{} answered {answer:?} to the 1 KiB JSON object",
        plugin.name()
    );
}

/// Nearest-rank percentiles of the samples.
fn summarize(mut samples: Vec<Duration>) -> Latency {
    samples.sort_unstable();
    let rank = |p: f64| {
        let i = ((p / 100.0) * samples.len() as f64).ceil() as usize;
        samples[i.clamp(1, samples.len()) - 1].as_secs_f64() * 1e6
    };
    Latency {
        median_us: rank(50.0),
        p99_us: rank(99.0),
    }
}
