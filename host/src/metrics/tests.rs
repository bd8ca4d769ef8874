//! The metrics against their manual: the table of docs/operations.md lists exactly what
//! `/metrics` exports, and no page names a metric by another name.

use std::collections::BTreeMap;
use std::path::Path;

use super::{Metrics, PluginReport};

/// Every metric family of `/metrics`: its name and type, from the `# TYPE` lines. A family is
/// encoded once it has a series, so one of each is made.
fn families() -> BTreeMap<String, String> {
    let metrics = Metrics::new();
    let _queue = metrics.for_queue("q");
    metrics.capability_call("kv", "cache", "ok", std::time::Duration::from_millis(1));
    metrics.set_capability_health("kv", "cache", None);
    let report = PluginReport {
        reloads: [("ok", 1), ("failed", 0), ("unchanged", 0)],
        versions: vec![("a.wasm".into(), "0123456789ab".into())],
    };
    metrics
        .encode(Some(&report))
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .map(|rest| {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
            (name.to_string(), kind.to_string())
        })
        .collect()
}

/// The names a family's samples go by: `_total` for a counter, the bare name otherwise (a
/// histogram's `_bucket`, `_sum` and `_count` included).
fn sample_names(name: &str, kind: &str) -> Vec<String> {
    match kind {
        "counter" => vec![format!("{name}_total")],
        "histogram" => ["", "_bucket", "_sum", "_count"]
            .iter()
            .map(|s| format!("{name}{s}"))
            .collect(),
        _ => vec![name.to_string()],
    }
}

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

#[test]
fn the_metrics_table_of_operations_md_lists_every_metric_and_no_other() {
    let doc = read("docs/operations.md");
    let section = &doc[doc.find("\n## Metrics\n").expect("## Metrics")..];
    let table = &section[section.find("\n| metric |").expect("the metrics table") + 1..];
    let mut documented: Vec<String> = table
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.split('|')
                .nth(1)
                .unwrap_or_default()
                .trim()
                .trim_matches('`')
                .to_string()
        })
        .collect();
    let mut exported: Vec<String> = families()
        .iter()
        .map(|(name, kind)| sample_names(name, kind).swap_remove(0))
        .collect();
    documented.sort();
    exported.sort();
    assert_eq!(
        documented, exported,
        "docs/operations.md's metrics table against what /metrics exports"
    );
}

/// `worker_plugin_reloads{result="failed"}` for a counter exported as
/// `worker_plugin_reloads_total` is a query that finds nothing.
#[test]
fn the_docs_name_each_metric_as_it_is_exported() {
    let families = families();
    let mut pages = vec!["README.md".to_string()];
    for entry in
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs")).expect("docs/")
    {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".md") {
            pages.push(format!("docs/{name}"));
        }
    }
    let mut wrong = Vec::new();
    for page in &pages {
        let text = read(page);
        let words = text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
        for word in words.filter(|w| w.starts_with("worker_")) {
            for (name, kind) in &families {
                let ours = word == name || word.starts_with(&format!("{name}_"));
                if ours && !sample_names(name, kind).iter().any(|s| s == word) {
                    wrong.push(format!(
                        "{page}: `{word}` (exported as {:?})",
                        sample_names(name, kind)
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "metrics named otherwise than exported:\n{}",
        wrong.join("\n")
    );
}
