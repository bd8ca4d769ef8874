//! `worker-host new-plugin NAME [--lang rust|python|js]`: writes a new plugin project into the
//! plugins folder from the templates in `scripts/plugin-template/<lang>/` (the Rust ones are also
//! `scripts/new-plugin.sh`'s), ready for its own test and `scripts/build-plugins.sh`.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The language of a new plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Lang {
    /// A Rust crate using the SDK (`plugin-sdk`), built as a component.
    #[default]
    Rust,
    /// A Python component (componentize-py).
    Python,
    /// A JavaScript component (componentize-js).
    Js,
}

/// The files of each language's project: path in the project, template text. Templates may use
/// `{{name}}`, `{{lib}}` (the name with `_` for `-`, the built file's stem), `{{root}}` (the
/// repository, as seen from the project folder) and `{{sdk}}` (the Rust SDK, likewise).
fn templates(lang: Lang) -> &'static [(&'static str, &'static str)] {
    macro_rules! template {
        ($path:literal) => {
            include_str!(concat!("../../scripts/plugin-template/", $path))
        };
    }
    match lang {
        Lang::Rust => &[
            ("Cargo.toml", template!("rust/Cargo.toml.tmpl")),
            ("src/lib.rs", template!("rust/lib.rs.tmpl")),
        ],
        Lang::Python => &[
            ("app.py", template!("python/app.py.tmpl")),
            ("test_app.py", template!("python/test_app.py.tmpl")),
            (
                "requirements.txt",
                template!("python/requirements.txt.tmpl"),
            ),
        ],
        Lang::Js => &[
            ("app.js", template!("js/app.js.tmpl")),
            ("app.test.js", template!("js/app.test.js.tmpl")),
            ("package.json", template!("js/package.json.tmpl")),
        ],
    }
}

/// Creates `plugins_dir/NAME/` with the project of `lang` and returns that folder.
///
/// `plugins_dir` must be the plugins cargo workspace (its Cargo.toml has `[workspace]` with
/// `members = ["*"]`), so a Rust crate joins it without editing anything; a Python or JavaScript
/// folder has no Cargo.toml, so it is added to the workspace's `exclude` list instead. A missing
/// or empty `plugins_dir` becomes such a workspace first, so a plugin can be started in any
/// folder. NAME is lowercase letters, digits and single dashes; the built file will be `NAME`
/// with `_` for `-`, `.wasm`.
pub(crate) fn new_plugin(plugins_dir: &Path, name: &str, lang: Lang) -> anyhow::Result<PathBuf> {
    if !valid_name(name) {
        bail!(
            "plugin name {name:?}: use lowercase letters, digits and single dashes, starting with a letter"
        );
    }
    let workspace = plugins_dir.join("Cargo.toml");
    if is_missing_or_empty(plugins_dir) {
        fs::create_dir_all(plugins_dir)
            .with_context(|| format!("cannot create {}", plugins_dir.display()))?;
        fs::write(&workspace, WORKSPACE)
            .with_context(|| format!("cannot write {}", workspace.display()))?;
    }
    let manifest = fs::read_to_string(&workspace).with_context(|| {
        format!(
            "{} is not a plugins workspace (no Cargo.toml)",
            plugins_dir.display()
        )
    })?;
    if !manifest.lines().any(|l| l.trim() == "[workspace]") {
        bail!(
            "{} has no [workspace] table; new plugins go into the plugins workspace",
            workspace.display()
        );
    }
    let root = root_path(plugins_dir)?;
    let dir = plugins_dir.join(name);
    fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (file, template) in templates(lang) {
        let path = dir.join(file);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        fs::write(&path, render(template, name, &root))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if lang != Lang::Rust {
        let manifest = excluding(&manifest, name).with_context(|| {
            format!(
                "add \"{name}\" to the exclude list of {} by hand",
                workspace.display()
            )
        })?;
        fs::write(&workspace, manifest).with_context(|| {
            format!(
                "cannot add {name} to the exclude list of {}",
                workspace.display()
            )
        })?;
    }
    Ok(dir)
}

/// The workspace manifest with `name` in its `exclude` list (cargo would take the folder, which
/// matches `members = ["*"]`, for a crate and fail on its missing Cargo.toml).
fn excluding(manifest: &str, name: &str) -> anyhow::Result<String> {
    let entry = format!("\"{name}\"");
    let mut out = String::with_capacity(manifest.len() + entry.len() + 16);
    let mut done = false;
    let mut in_workspace = false;
    for line in manifest.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            in_workspace = trimmed == "[workspace]";
        }
        match trimmed.strip_prefix("exclude") {
            Some(rest) if in_workspace && !done && rest.trim_start().starts_with('=') => {
                let Some(close) = line.rfind(']') else {
                    bail!("its exclude list spans several lines");
                };
                let inside = line[..close].trim_end();
                let sep = if inside.ends_with('[') { "" } else { ", " };
                out.push_str(&format!("{inside}{sep}{entry}{}", &line[close..]));
                done = true;
            }
            _ => out.push_str(line),
        }
        out.push('\n');
        if trimmed == "[workspace]" && !manifest.contains("\nexclude") {
            out.push_str(&format!("exclude = [{entry}]\n"));
            done = true;
        }
    }
    Ok(out)
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-')
        && !name.contains("--")
}

/// The manifest of a new plugins workspace.
const WORKSPACE: &str = include_str!("../../scripts/plugin-template/workspace/Cargo.toml.tmpl");

fn is_missing_or_empty(dir: &Path) -> bool {
    match fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_none(),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// The repository root as written in the new project: relative for the repository layout
/// (`plugins/` beside `plugin-sdk/`), else the installed SDK, else the root this build came from.
fn root_path(plugins_dir: &Path) -> anyhow::Result<String> {
    let built_with = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let installed = installed_root();
    let candidates: Vec<&Path> = installed
        .iter()
        .map(PathBuf::as_path)
        .chain([built_with.as_path()])
        .collect();
    sdk_root(plugins_dir, &candidates)
}

/// Where a package installs the SDK: `../share/worker-host` from the binary's folder, so
/// `/usr/share/worker-host` for `/usr/bin/worker-host`.
fn installed_root() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.join("share/worker-host"))
}

/// `../..` when `plugins_dir` sits beside `plugin-sdk/`, else the first of `candidates` that
/// holds `plugin-sdk/`, as an absolute path.
fn sdk_root(plugins_dir: &Path, candidates: &[&Path]) -> anyhow::Result<String> {
    if plugins_dir.join("../plugin-sdk/Cargo.toml").is_file() {
        return Ok("../..".to_owned());
    }
    for root in candidates {
        if let Ok(sdk) = root.join("plugin-sdk/Cargo.toml").canonicalize()
            && let Some(root) = sdk.parent().and_then(Path::parent)
        {
            return Ok(root.to_string_lossy().into_owned());
        }
    }
    let looked: Vec<String> = candidates
        .iter()
        .map(|root| root.join("plugin-sdk").display().to_string())
        .collect();
    bail!(
        "cannot find the plugin SDK beside {} or at {}",
        plugins_dir.display(),
        looked.join(", ")
    )
}

fn render(template: &str, name: &str, root: &str) -> String {
    template
        .replace("{{name}}", name)
        .replace("{{lib}}", &name.replace('-', "_"))
        .replace("{{sdk}}", &format!("{root}/plugin-sdk"))
        .replace("{{root}}", root)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> tempfile::TempDir {
        let root = tempfile::tempdir().expect("temp dir");
        fs::create_dir_all(root.path().join("plugins")).unwrap();
        fs::write(
            root.path().join("plugins/Cargo.toml"),
            "[workspace]\nmembers = [\"*\"]\n",
        )
        .unwrap();
        fs::create_dir_all(root.path().join("plugin-sdk")).unwrap();
        fs::write(root.path().join("plugin-sdk/Cargo.toml"), "").unwrap();
        root
    }

    #[test]
    fn writes_a_crate_from_the_templates() {
        let root = workspace();
        let plugins = root.path().join("plugins");
        let dir = new_plugin(&plugins, "audit-log", Lang::Rust).unwrap();
        let cargo = fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let lib = fs::read_to_string(dir.join("src/lib.rs")).unwrap();
        assert!(cargo.contains("name = \"audit-log\""));
        assert!(cargo.contains("path = \"../../plugin-sdk\""));
        // A component: scripts/build-plugins.sh reads this key.
        assert!(cargo.contains("[package.metadata.worker]\nabi = 2"));
        assert!(lib.contains("audit_log.wasm") && lib.contains("handler!(handle)"));
        assert!(!cargo.contains("{{") && !lib.contains("{{"));
        // The workspace is left alone: `members = ["*"]` takes the crate.
        let workspace = fs::read_to_string(plugins.join("Cargo.toml")).unwrap();
        assert_eq!(workspace, "[workspace]\nmembers = [\"*\"]\n");
    }

    #[test]
    fn python_and_js_projects_get_their_files_and_leave_the_cargo_workspace() {
        let root = workspace();
        let plugins = root.path().join("plugins");
        let cases = [
            (
                Lang::Python,
                "py-demo",
                ["app.py", "test_app.py", "requirements.txt"],
            ),
            (
                Lang::Js,
                "js-demo",
                ["app.js", "app.test.js", "package.json"],
            ),
        ];
        for (lang, name, files) in cases {
            let dir = new_plugin(&plugins, name, lang).unwrap();
            assert_eq!(dir, plugins.join(name));
            for file in files {
                let text = fs::read_to_string(dir.join(file)).unwrap();
                assert!(!text.contains("{{"), "{file}: {text}");
            }
            assert!(!dir.join("Cargo.toml").exists());
        }
        let workspace = fs::read_to_string(plugins.join("Cargo.toml")).unwrap();
        assert_eq!(
            workspace,
            "[workspace]\nexclude = [\"py-demo\", \"js-demo\"]\nmembers = [\"*\"]\n"
        );
    }

    #[test]
    fn exclude_lists_grow_in_place() {
        let manifest = "[workspace]\nmembers = [\"*\"]\nexclude = [\"target\", \"c-echo\"]\n\n[profile.release]\nlto = true\n";
        assert_eq!(
            excluding(manifest, "demo-js").unwrap(),
            "[workspace]\nmembers = [\"*\"]\nexclude = [\"target\", \"c-echo\", \"demo-js\"]\n\n[profile.release]\nlto = true\n"
        );
        assert_eq!(
            excluding("[workspace]\nexclude = []\n", "x").unwrap(),
            "[workspace]\nexclude = [\"x\"]\n"
        );
        assert!(excluding("[workspace]\nexclude = [\n  \"a\",\n]\n", "x").is_err());
    }

    #[test]
    fn every_template_renders_every_placeholder() {
        for lang in [Lang::Rust, Lang::Python, Lang::Js] {
            for (file, template) in templates(lang) {
                let text = render(template, "a-b", "../..");
                assert!(!text.contains("{{"), "{lang:?} {file}");
            }
        }
    }

    #[test]
    fn refuses_bad_names_and_existing_plugins() {
        let root = workspace();
        let plugins = root.path().join("plugins");
        for bad in ["", "Audit", "1x", "a_b", "a--b", "a-", "../x"] {
            assert!(new_plugin(&plugins, bad, Lang::Rust).is_err(), "{bad:?}");
        }
        new_plugin(&plugins, "x", Lang::Rust).unwrap();
        let again = new_plugin(&plugins, "x", Lang::Python).unwrap_err();
        assert!(format!("{again:#}").contains("cannot create"));
    }

    #[test]
    fn refuses_a_folder_that_is_not_the_plugins_workspace() {
        let root = tempfile::tempdir().unwrap();
        fs::write(root.path().join("notes.txt"), "mine").unwrap();
        let err = new_plugin(root.path(), "x", Lang::Js).unwrap_err();
        assert!(err.to_string().contains("not a plugins workspace"));
    }

    #[test]
    fn a_missing_folder_becomes_a_plugins_workspace() {
        let root = tempfile::tempdir().unwrap();
        let plugins = root.path().join("elsewhere/plugins");
        new_plugin(&plugins, "py-one", Lang::Python).unwrap();
        let manifest = fs::read_to_string(plugins.join("Cargo.toml")).unwrap();
        assert!(manifest.contains("members = [\"*\"]"), "{manifest}");
        assert!(
            manifest.contains("exclude = [\"target\", \"py-one\"]"),
            "{manifest}"
        );
    }

    #[test]
    fn outside_the_repository_the_sdk_is_the_installed_one() {
        let plugins = tempfile::tempdir().unwrap();
        let share = tempfile::tempdir().unwrap();
        let missing = share.path().join("nothing-here");
        // Nothing beside the plugins folder, no SDK in the first candidate: the second one.
        let err = sdk_root(plugins.path(), &[&missing]).unwrap_err();
        assert!(
            err.to_string().contains("cannot find the plugin SDK"),
            "{err}"
        );
        fs::create_dir_all(share.path().join("plugin-sdk")).unwrap();
        fs::write(share.path().join("plugin-sdk/Cargo.toml"), "").unwrap();
        let root = sdk_root(plugins.path(), &[&missing, share.path()]).unwrap();
        assert_eq!(Path::new(&root), share.path().canonicalize().unwrap());
        let cargo = render(templates(Lang::Rust)[0].1, "x", &root);
        assert!(
            cargo.contains(&format!("path = \"{root}/plugin-sdk\"")),
            "{cargo}"
        );
    }
}
