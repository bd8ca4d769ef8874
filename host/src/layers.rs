//! The layers of the crate, checked: a module may use only modules of a lower layer, so arrows
//! point down and there are no import circles. docs/architecture.md explains each layer.

/// Every top-level module and its layer, bottom (0) to top.
const LAYERS: &[(&str, u8)] = &[
    ("config", 0),
    ("descriptors", 0),
    ("failpoint", 0),
    ("headers", 0),
    ("runtime", 0),
    ("scaffold", 0),
    ("stdout", 0),
    ("telemetry", 0),
    ("testing", 0),
    ("wit", 0),
    ("broker", 1),
    ("metrics", 1),
    ("capability", 2),
    ("plugin", 3),
    ("outbox", 4),
    ("outcome", 4),
    ("poison", 5),
    ("topology", 5),
    ("delay", 6),
    ("reload", 6),
    ("consumer", 7),
    ("failed", 7),
    ("admin", 8),
    ("service", 9),
    ("cli", 10),
    ("commands", 11),
];

/// The largest a source file may grow before it is split.
const MAX_LINES: usize = 500;

mod paths;

mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    use super::{LAYERS, MAX_LINES, paths};

    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read host/src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    fn src() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
    }

    fn layer(module: &str) -> Option<u8> {
        LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
    }

    /// The top-level modules a file's code (not its comments or strings) names as
    /// `crate::<module>`, `use crate::{<module>, ...}` groups included.
    fn uses(text: &str) -> BTreeSet<String> {
        paths::paths(&paths::code_only(text), &[])
            .into_iter()
            .filter(|(start, _)| *start == paths::Start::Crate)
            .filter_map(|(_, path)| path.into_iter().next())
            .collect()
    }

    #[test]
    fn modules_only_use_lower_layers() {
        let root = src();
        let mut files = Vec::new();
        sources(&root, &mut files);
        let mut wrong = Vec::new();
        for file in &files {
            let rel = file.strip_prefix(&root).expect("under src");
            let first = rel.components().next().expect("a component");
            let module = first
                .as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string();
            if module == "lib" || module == "main" || module == "layers" {
                continue;
            }
            let Some(own) = layer(&module) else {
                wrong.push(format!("{module} has no layer in layers.rs"));
                continue;
            };
            let text = std::fs::read_to_string(file).expect("read source");
            for used in uses(&text) {
                if used == module {
                    continue;
                }
                match layer(&used) {
                    Some(l) if l < own => {}
                    Some(l) => wrong.push(format!(
                        "{} (layer {own}) uses crate::{used} (layer {l})",
                        rel.display()
                    )),
                    None => {} // A crate-root item such as `crate::exit_code`.
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "arrows must point down:\n{}",
            wrong.join("\n")
        );
    }

    #[test]
    fn no_source_file_is_over_the_limit() {
        let mut files = Vec::new();
        sources(&src(), &mut files);
        let long: Vec<String> = files
            .iter()
            .filter_map(|f| {
                let lines = std::fs::read_to_string(f).ok()?.lines().count();
                (lines > MAX_LINES).then(|| format!("{} ({lines} lines)", f.display()))
            })
            .collect();
        assert!(long.is_empty(), "split these files:\n{}", long.join("\n"));
    }

    /// Every file of the library under `root` by its module, with its name and text
    /// (`main.rs` is another crate).
    fn library(root: &Path) -> BTreeMap<paths::ModPath, (String, String)> {
        let mut files = Vec::new();
        sources(root, &mut files);
        files
            .iter()
            .filter_map(|file| {
                let rel = file.strip_prefix(root).expect("under the root");
                (rel != Path::new("main.rs")).then(|| {
                    let text = std::fs::read_to_string(file).expect("read source");
                    (paths::module_of(rel), (rel.display().to_string(), text))
                })
            })
            .collect()
    }

    /// The host's files, and the Rust SDK's, use each other one way only.
    #[test]
    fn no_circle_of_files() {
        let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugin-sdk/src");
        for root in [src(), sdk] {
            let graph = paths::file_graph(&library(&root));
            if let Some(circle) = paths::circle(&graph) {
                panic!(
                    "these files of {} use each other in a circle: {}; move what they share \
                     into a file both use, or pass the dependency in",
                    root.display(),
                    circle.join(" -> ")
                );
            }
        }
    }

    #[test]
    fn paths_are_read_with_groups_and_super() {
        let text = r#"
            use crate::{config, plugin::{Meta, Input}};
            use super::super::delay::Delayer; // crate::commented
            fn f() { let s = "crate::in_a_string"; let c = '"'; crate::headers::text(s); }
            mod tests { use super::*; }
        "#;
        let own: Vec<String> = vec!["a".into(), "b".into()];
        let found: Vec<String> = paths::paths(&paths::code_only(text), &own)
            .into_iter()
            .map(|(_, p)| p.join("::"))
            .collect();
        assert_eq!(
            found,
            [
                "config",
                "plugin::Meta",
                "plugin::Input",
                "delay::Delayer",
                "headers::text",
                "a::b",
            ]
        );
        assert_eq!(
            uses(text),
            BTreeSet::from(["config".into(), "plugin".into(), "headers".into()])
        );
        let graph = BTreeMap::from([
            ("x.rs".to_string(), BTreeSet::from(["y.rs".to_string()])),
            ("y.rs".to_string(), BTreeSet::from(["x.rs".to_string()])),
        ]);
        assert_eq!(
            paths::circle(&graph),
            Some(vec!["x.rs".into(), "y.rs".into(), "x.rs".into()])
        );
    }
}
