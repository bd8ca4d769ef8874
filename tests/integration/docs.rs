//! The manual against what it describes: the `check` sample of docs/cli.md is what `check`
//! prints for the example worker.toml, every file docs/architecture.md names exists, and the
//! README's table of what the scripts install has every group of scripts/packages.txt. (The
//! config keys, metrics and `failed list` fields are checked by unit tests beside their code.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::cli::{text, worker_host};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// What changes from run to run: a plugin's sha256 (a rebuild) and how it was made ready
/// (compiled, or read from the compile cache, and how long that took).
fn normalized(output: &str) -> String {
    output
        .lines()
        .map(|line| {
            let Some(start) = line.find(", sha256 ") else {
                return line.to_string();
            };
            let kept = &line[..start];
            let shape = if line.ends_with(" s)") || line.ends_with(" ms)") {
                ", sha256 <sha>, <compiled or cached>)"
            } else {
                ", sha256 <sha>, ?)"
            };
            format!("{kept}{shape}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_check_sample_of_cli_md_is_what_check_prints_for_the_example() {
    let doc = read("docs/cli.md");
    let section = &doc[doc.find("\n## `check`\n").expect("## `check`")..];
    let start = section
        .find("```sh\n$ worker-host check -c worker.toml\n")
        .expect("the sample");
    let sample = &section[start..];
    let sample = &sample[sample.find('\n').expect("line") + 1..];
    let sample = &sample[sample.find('\n').expect("line") + 1..];
    let sample = &sample[..sample.find("```").expect("the sample's end")];

    let out = worker_host(&["check", "-c", "worker.toml"], &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(
        normalized(sample.trim_end()),
        normalized(stdout.trim_end()),
        "docs/cli.md's check sample (left) against `worker-host check -c worker.toml` (right)"
    );
}

/// A name in backticks that looks like a file or folder of the repository: `plugin/cache.rs`,
/// `main.rs`, `wit/`, `tools/componentize` (not `/metrics`, nor `worker:plugin/handler@2.0.0`).
fn looks_like_a_path(name: &str) -> bool {
    let file = [".rs", ".md", ".toml", ".wit", ".sh", ".txt"]
        .iter()
        .any(|ext| name.ends_with(ext));
    (file || name.contains('/')) && !name.starts_with('/') && !name.contains([' ', ':', '<', '*'])
}

#[test]
fn every_file_architecture_md_names_exists() {
    let doc = read("docs/architecture.md");
    let mut missing = Vec::new();
    let mut seen = 0;
    for (i, piece) in doc.split('`').enumerate() {
        // Odd pieces are inside backticks.
        if i % 2 == 0 || !looks_like_a_path(piece) {
            continue;
        }
        seen += 1;
        let found = [root().join(piece), root().join("host/src").join(piece)]
            .iter()
            .any(|p| p.exists());
        if !found {
            missing.push(piece.to_string());
        }
    }
    assert!(
        seen >= 20,
        "only {seen} paths found in docs/architecture.md"
    );
    assert!(
        missing.is_empty(),
        "docs/architecture.md names paths that are neither in the repository nor in host/src: \
         {missing:?}"
    );
}

/// `group -> packages` of scripts/packages.txt.
fn package_groups() -> BTreeMap<String, Vec<String>> {
    read("scripts/packages.txt")
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut words = l.split_whitespace().map(str::to_string);
            let group = words.next().expect("a group");
            (group, words.collect())
        })
        .collect()
}

#[test]
fn the_readme_lists_every_package_group_the_scripts_install() {
    let readme = read("README.md");
    let section = &readme[readme
        .find("\n## What the scripts install\n")
        .expect("the section")..];
    let table = &section[section.find("\n| group |").expect("its table") + 1..];
    let listed: BTreeMap<String, Vec<String>> = table
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').collect();
            let group = cells[1].trim().trim_matches('`').to_string();
            let packages = cells[2].split(',').map(|p| p.trim().to_string()).collect();
            (group, packages)
        })
        .collect();
    assert_eq!(
        listed,
        package_groups(),
        "README's \"What the scripts install\" (left) against scripts/packages.txt (right)"
    );
}
