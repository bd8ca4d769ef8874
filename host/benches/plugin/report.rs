//! The closing table of the component benchmark: per plugin and instance mode, size, compile
//! time, median and p99 per message, and RSS, with ratios against the ABI v1 module of the same
//! run. Printed as Markdown, ready for docs/performance.md.

use std::path::Path;

use worker_host::plugin::Instances;

use crate::components::{Loaded, modes};
use crate::latency::{self, Latency};
use crate::rss::{self, Rss};

pub struct Row<'a> {
    loaded: &'a Loaded,
    mode: &'static str,
    latency: Latency,
    rss: Rss,
}

/// Measures the v1 module (fresh instances) and every component in both modes.
pub fn measure<'a>(
    rt: &tokio::runtime::Runtime,
    cache: &Path,
    v1: &'a Loaded,
    components: &'a [Loaded],
) -> Vec<Row<'a>> {
    let calls = latency::calls();
    let rounds = if latency::short_run() { 3 } else { 25 };
    let json = crate::setup::input(crate::setup::json_1k());
    let mut cases = vec![(v1, "fresh", Instances::Fresh)];
    for c in components {
        for (mode, instance) in modes() {
            cases.push((c, mode, instance));
        }
    }
    eprintln!(
        "\ntimed loops: {calls} calls per case; RSS: a child per case, rounds of 8 concurrent calls"
    );
    cases
        .into_iter()
        .map(|(loaded, mode, instance)| {
            let limits = crate::setup::limits(instance);
            let latency = latency::measure(rt, &loaded.plugin, &json, &limits, calls);
            let rss = rss::measure(cache, &loaded.path, mode, rounds);
            eprintln!("  {} {mode}: {latency:?} {rss:?}", loaded.label);
            Row {
                loaded,
                mode,
                latency,
                rss,
            }
        })
        .collect()
}

pub fn print(rows: &[Row]) {
    let Some(v1) = rows.first() else { return };
    let mib = |kib: u64| format!("{:.1}", kib as f64 / 1024.0);
    let size = |bytes: u64| {
        if bytes >= 1 << 20 {
            format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
        } else {
            format!("{:.0} KiB", bytes as f64 / 1024.0)
        }
    };
    let ms = |d: std::time::Duration| {
        let ms = d.as_secs_f64() * 1e3;
        if ms >= 1000.0 {
            format!("{:.2} s", ms / 1e3)
        } else if ms < 10.0 {
            format!("{ms:.1} ms")
        } else {
            format!("{ms:.0} ms")
        }
    };
    println!();
    println!(
        "1 KiB JSON object, parsed, answer ok; one call at a time on one tokio worker \
         ({} calls per case). RSS: a process per case, runtime alone {} MiB.",
        latency::calls(),
        mib(v1.rss.runtime_kib)
    );
    println!();
    println!(
        "| plugin | instance | .wasm | compiled | compile | cached load | median µs | p99 µs | median vs v1 | p99 vs v1 | RSS loaded MiB | RSS after 8 concurrent MiB | of which anon MiB | peak RSS MiB |"
    );
    println!("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for row in rows {
        let l = row.loaded;
        let warm = match row.rss.instances {
            // 0: the plugin does not echo (only the demos count their instances).
            Some(n) if n > 0 => format!("{} ({n} warm)", mib(row.rss.warm_kib)),
            _ => mib(row.rss.warm_kib),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.2} | {:.2} | {} | {} | {} | {} |",
            l.label,
            row.mode,
            size(l.file_bytes),
            l.artifact_bytes.map_or("—".into(), size),
            ms(l.compile),
            l.cached_load.map_or("—".into(), ms),
            row.latency.median_us,
            row.latency.p99_us,
            row.latency.median_us / v1.latency.median_us,
            row.latency.p99_us / v1.latency.p99_us,
            mib(row.rss.loaded_kib),
            warm,
            mib(row.rss.warm_anon_kib),
            mib(row.rss.peak_kib),
        );
    }
    println!();
    println!(
        "compile: first load (components: compiled by a `worker-host compile-plugin` child, \
         written to the cache, loaded); cached load: the same file again, from the cache. \
         anon: RssAnon, the rest is mapped files (the executable, the artifacts) and shared memory."
    );
}
