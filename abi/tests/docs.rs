//! `docs/abi.md` states the same names and numbers as this crate: every table row of exports,
//! imports, meta keys, publish codes and limits is checked against the constants.

use std::collections::BTreeSet;

use worker_abi::export::ExportKind;
use worker_abi::{
    ABI_MODULE, Answer, LogLevel, PUBLISH_ACCEPTED, PublishRefusal, Signature, ValType,
    WASI_MODULE, export, import, limits, meta,
};

fn doc() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/abi.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The rows (cells trimmed) of the Markdown table whose header's first cell is `first`.
fn table(doc: &str, first: &str) -> Vec<Vec<String>> {
    let lines: Vec<&str> = doc.lines().map(str::trim).collect();
    let cells = |line: &str| -> Vec<String> {
        let inner = line.trim_start_matches('|').trim_end_matches('|');
        inner.split(" | ").map(|c| c.trim().to_owned()).collect()
    };
    let start = lines
        .iter()
        .position(|l| l.starts_with('|') && cells(l)[0] == first)
        .unwrap_or_else(|| panic!("docs/abi.md has no table headed `{first}`"));
    lines[start + 2..]
        .iter()
        .take_while(|l| l.starts_with('|'))
        .map(|l| cells(l))
        .collect()
}

/// The text between backticks in `cell`, each.
fn quoted(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// One quoted name per row, as a set; fails on a repeated row.
fn names(rows: &[Vec<String>]) -> BTreeSet<String> {
    let mut set = BTreeSet::new();
    for row in rows {
        let name = quoted(&row[0]).concat();
        assert!(set.insert(name.clone()), "`{name}` listed twice");
    }
    set
}

/// A documented signature: `(ptr, len) -> i32`, `(level, ptr, len)`, `() -> ()`. Parameters are
/// i32 unless written `name: i64`.
fn parse_signature(text: &str) -> (Vec<ValType>, Vec<ValType>) {
    let text = text.trim_matches('`');
    let (params, results) = text.split_once(" -> ").unwrap_or((text, "()"));
    let ty = |p: &str| match p.rsplit_once(": ").map_or("i32", |(_, t)| t) {
        "i32" => ValType::I32,
        "i64" => ValType::I64,
        other => panic!("unknown type {other} in {text}"),
    };
    let params = params.trim_start_matches('(').trim_end_matches(')');
    let params = params
        .split(", ")
        .filter(|p| !p.is_empty())
        .map(ty)
        .collect();
    let results = results.trim_start_matches('(').trim_end_matches(')');
    let results = results
        .split(", ")
        .filter(|r| !r.is_empty())
        .map(ty)
        .collect();
    (params, results)
}

fn assert_signature(name: &str, documented: &str, sig: &Signature) {
    let (params, results) = parse_signature(documented);
    assert_eq!(
        (params.as_slice(), results.as_slice()),
        (sig.params, sig.results),
        "`{name}` is documented as {documented}, the ABI says {sig}"
    );
}

fn size(bytes: usize) -> String {
    match bytes {
        b if b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// `20 000`: thousands grouped as the docs write them.
fn grouped(n: u32) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

#[test]
fn module_names() {
    let doc = doc();
    assert!(doc.contains(&format!("(module `{ABI_MODULE}`")));
    assert!(doc.contains(&format!("import `{WASI_MODULE}`")));
}

#[test]
fn exports_table() {
    let rows = table(&doc(), "export");
    let want: BTreeSet<String> = export::ALL.iter().map(|e| e.name.to_owned()).collect();
    assert_eq!(names(&rows), want);
    for row in &rows {
        let name = quoted(&row[0]).concat();
        let export = export::find(&name).expect("listed");
        match export.kind {
            ExportKind::Func(sig) => assert_signature(&name, &row[1], &sig),
            ExportKind::Memory => assert!(row[1].contains("32-bit memory"), "{row:?}"),
        }
    }
    let handle = rows
        .iter()
        .find(|r| quoted(&r[0]) == [export::HANDLE])
        .expect("handle row");
    let answers: Vec<String> = Answer::ALL
        .iter()
        .map(|a| format!("`{}` {}", a.code(), a.name()))
        .collect();
    assert!(handle[2].ends_with(&answers.join(", ")), "{handle:?}");
}

#[test]
fn imports_table() {
    let rows = table(&doc(), "import");
    let want: BTreeSet<String> = import::ALL.iter().map(|i| i.name.to_owned()).collect();
    assert_eq!(names(&rows), want);
    for row in &rows {
        let name = quoted(&row[0]).concat();
        let import = import::find(&name).expect("listed");
        assert_signature(&name, &row[1], &import.signature);
        match import.name {
            import::LOG => assert!(
                row[2].ends_with(&format!("level {}", LogLevel::list())),
                "{row:?}"
            ),
            import::META_GET => assert!(
                row[2].contains(&format!("`{}` if absent", meta::ABSENT)),
                "{row:?}"
            ),
            import::PUBLISH => assert!(
                row[2].contains(&format!("`{PUBLISH_ACCEPTED}` accepted")),
                "{row:?}"
            ),
            _ => {}
        }
    }
}

#[test]
fn meta_keys_table() {
    let rows = table(&doc(), "key");
    let documented: BTreeSet<String> = rows.iter().flat_map(|r| quoted(&r[0])).collect();
    let mut want: BTreeSet<String> = meta::KEYS.iter().map(|k| (*k).to_owned()).collect();
    want.insert(format!("{}<name>", meta::HEADER_PREFIX));
    assert_eq!(documented, want);
    let redelivered = rows
        .iter()
        .find(|r| quoted(&r[0]) == [meta::REDELIVERED])
        .expect("redelivered row");
    assert_eq!(
        redelivered[1],
        format!("`{}` or `{}`", meta::TRUE, meta::FALSE)
    );
}

#[test]
fn publish_codes_table() {
    let rows = table(&doc(), "code");
    let mut seen = BTreeSet::new();
    for row in &rows {
        let code: i32 = quoted(&row[0]).concat().parse().expect("a number");
        assert!(seen.insert(code), "code {code} listed twice");
        if code == PUBLISH_ACCEPTED {
            continue;
        }
        let refusal = PublishRefusal::from_code(code)
            .unwrap_or_else(|| panic!("code {code} is documented but not in the ABI"));
        assert!(
            row[1].starts_with(refusal.description()),
            "code {code}: documented as {:?}, the ABI says {:?}",
            row[1],
            refusal.description()
        );
    }
    let mut want: BTreeSet<i32> = PublishRefusal::ALL.iter().map(|r| r.code()).collect();
    want.insert(PUBLISH_ACCEPTED);
    assert_eq!(seen, want);
    let defaults = [
        (
            PublishRefusal::TooManyMessages,
            limits::MAX_PUBLISHES.to_string(),
        ),
        (
            PublishRefusal::TooManyBytes,
            size(limits::MAX_PUBLISH_BYTES),
        ),
    ];
    for (refusal, default) in defaults {
        let row = rows
            .iter()
            .find(|r| quoted(&r[0]) == [refusal.code().to_string()])
            .expect("row");
        assert!(row[1].ends_with(&format!("(default {default})")), "{row:?}");
    }
}

#[test]
fn limits_table() {
    let rows = table(&doc(), "what");
    let limit = |what: &str| -> String {
        rows.iter()
            .find(|r| r[0] == what)
            .unwrap_or_else(|| panic!("no limit row `{what}`"))[1]
            .clone()
    };
    assert_eq!(
        (
            limits::MAX_INSTANCES,
            limits::MAX_MEMORIES,
            limits::MAX_TABLES
        ),
        (1, 1, 1)
    );
    assert_eq!(limit("instances, memories, tables"), "1 each");
    assert_eq!(limit("table elements"), grouped(limits::MAX_TABLE_ELEMENTS));
    assert_eq!(
        limit("log"),
        format!(
            "{} lines, {} per line, {} per message",
            limits::MAX_LOG_LINES,
            size(limits::MAX_LOG_LINE),
            size(limits::MAX_LOG_BYTES)
        )
    );
    assert_eq!(
        limit("WASI stdout / stderr"),
        format!("{} each per message", size(limits::MAX_WASI_OUTPUT))
    );
    assert_eq!(
        limit("reason"),
        format!("{}, one line", size(limits::MAX_REASON))
    );
    assert_eq!(
        limit("publishes"),
        format!(
            "{} messages, {} per message handled (defaults)",
            limits::MAX_PUBLISHES,
            size(limits::MAX_PUBLISH_BYTES)
        )
    );
}
