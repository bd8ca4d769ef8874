//! docs/configuration.md against the keys the raw types take.

use std::collections::BTreeSet;
use std::path::Path;

use super::{ANY, Shape, accepted, shape};

fn doc() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md");
    std::fs::read_to_string(&path).expect("docs/configuration.md")
}

/// The TOML block of "## A complete example".
fn complete_example(doc: &str) -> String {
    let section = &doc[doc.find("## A complete example").expect("the section")..];
    let start = section.find("```toml\n").expect("its toml block") + "```toml\n".len();
    let end = start + section[start..].find("\n```").expect("the block's end");
    section[start..end].to_string()
}

/// The block with `# key = value` lines uncommented: keys that cannot be set together
/// (`url`, `urls`) or have no default to show are documented as comments.
fn uncommented(block: &str) -> String {
    let key_line = |rest: &str| {
        let name = rest.split('=').next().unwrap_or_default().trim();
        rest.contains('=')
            && !name.is_empty()
            && name.chars().all(|c| c.is_ascii_lowercase() || c == '_')
    };
    block
        .lines()
        .map(|line| match line.strip_prefix("# ") {
            Some(rest) if key_line(rest) => rest,
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The key paths a parsed example sets, named as [`accepted`] names them.
fn documented(table: &toml::Table, path: &mut Vec<String>, out: &mut BTreeSet<String>) {
    let here = shape(&path.iter().map(String::as_str).collect::<Vec<_>>());
    for (key, value) in table {
        path.push(if here == Shape::Map {
            ANY.to_string()
        } else {
            key.clone()
        });
        let at: Vec<&str> = path.iter().map(String::as_str).collect();
        let table_below = match shape(&at) {
            Shape::Table(_) => true,
            Shape::Map => {
                let mut named = at.clone();
                named.push(ANY);
                matches!(shape(&named), Shape::Table(_))
            }
            Shape::Leaf | Shape::Missing => false,
        };
        match value {
            toml::Value::Table(t) if table_below => documented(t, path, out),
            toml::Value::Array(items) if table_below => {
                for item in items {
                    if let toml::Value::Table(t) = item {
                        documented(t, path, out);
                    }
                }
            }
            _ => {
                out.insert(path.join("."));
            }
        }
        path.pop();
    }
}

#[test]
fn the_complete_example_holds_every_key_and_only_keys_the_config_takes() {
    let block = uncommented(&complete_example(&doc()));
    let table: toml::Table = toml::from_str(&block).expect("the example is TOML");
    let mut shown = BTreeSet::new();
    documented(&table, &mut Vec::new(), &mut shown);
    let accepted = accepted();
    assert!(
        accepted.len() > 50,
        "the probe found too few keys: {accepted:?}"
    );
    let missing: Vec<_> = accepted.difference(&shown).collect();
    let unknown: Vec<_> = shown.difference(&accepted).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/configuration.md, \"A complete example\": keys the config takes but the example \
         lacks: {missing:?}; keys in the example the config refuses: {unknown:?}"
    );
}

#[test]
fn the_complete_example_loads_through_the_parser() {
    let block = complete_example(&doc());
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("plugins")).expect("plugins");
    for line in block.lines() {
        if let Some(rest) = line.strip_prefix("plugin = \"") {
            let name = rest.split('"').next().expect("a file name");
            std::fs::write(dir.path().join("plugins").join(name), b"\0asm").expect("stub");
        }
    }
    let path = dir.path().join("worker.toml");
    let (_, warnings) = super::super::validate::parse_with_vars(&block, &path, None, &|_: &str| {
        Some(String::from("x"))
    })
    .unwrap_or_else(|err| panic!("docs/configuration.md's complete example: {err}"));
    assert!(warnings.is_empty(), "{warnings:?}");
}

/// The top-level tables: `broker`, `subscription`, `kv` (whose tables are `kv.*`), ...
fn sections() -> Vec<(&'static str, Vec<&'static str>)> {
    let Shape::Table(top) = shape(&[]) else {
        panic!("worker.toml is a table")
    };
    top.into_iter()
        .filter_map(|name| match shape(&[name]) {
            Shape::Table(keys) => Some((name, keys)),
            Shape::Map => match shape(&[name, ANY]) {
                Shape::Table(keys) => Some((name, keys)),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The text of the section headed `[name]`, `[[name]]` or `[name.NAME]`.
fn section<'d>(doc: &'d str, name: &str) -> Option<&'d str> {
    [
        format!("\n## `[{name}]`\n"),
        format!("\n## `[[{name}]]`\n"),
        format!("\n## `[{name}.NAME]`\n"),
    ]
    .iter()
    .find_map(|heading| {
        let start = doc.find(heading.as_str())? + heading.len();
        let end = doc[start..].find("\n## ").map_or(doc.len(), |e| start + e);
        Some(&doc[start..end])
    })
}

/// The first column's key of each row of the section's `| key |` tables.
fn table_keys(section: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut in_table = false;
    for line in section.lines() {
        if line.starts_with("| key |") {
            in_table = true;
        } else if !line.starts_with('|') {
            in_table = false;
        } else if in_table && !line.starts_with("|---") {
            let cell = line.split('|').nth(1).unwrap_or_default();
            let name: String = cell
                .trim()
                .trim_start_matches('`')
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            keys.push(name);
        }
    }
    keys
}

#[test]
fn each_section_describes_every_key_of_its_table_and_no_other() {
    let doc = doc();
    let mut problems = Vec::new();
    for (name, keys) in sections() {
        let Some(text) = section(&doc, name) else {
            problems.push(format!("no section `[{name}]`"));
            continue;
        };
        for key in &keys {
            if !text.contains(&format!("`{key}`")) && !text.contains(&format!("`{key}.")) {
                problems.push(format!("[{name}]: `{key}` is not described"));
            }
        }
        for key in table_keys(text) {
            if !keys.iter().any(|k| *k == key) {
                problems.push(format!(
                    "[{name}]: the table lists `{key}`, which it does not take"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "docs/configuration.md:\n{}",
        problems.join("\n")
    );
}
