//! `worker-host new-plugin NAME`: writes a new Rust plugin crate into the plugins workspace from
//! the same templates as `scripts/new-plugin.sh`, ready for `cargo test` and
//! `scripts/build-plugins.sh`.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

const CARGO_TOML: &str = include_str!("../../scripts/plugin-template/Cargo.toml.tmpl");
const LIB_RS: &str = include_str!("../../scripts/plugin-template/lib.rs.tmpl");

/// Creates `plugins_dir/NAME/` (Cargo.toml and src/lib.rs) and returns that folder.
///
/// `plugins_dir` must be the plugins cargo workspace (its Cargo.toml has `[workspace]` with
/// `members = ["*"]`), so the new crate joins it without editing anything. NAME is lowercase
/// letters, digits and single dashes; the built module will be `NAME` with `_` for `-`, `.wasm`.
pub fn new_plugin(plugins_dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    if !valid_name(name) {
        bail!(
            "plugin name {name:?}: use lowercase letters, digits and single dashes, starting with a letter"
        );
    }
    let workspace = plugins_dir.join("Cargo.toml");
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
    let sdk = sdk_path(plugins_dir)?;
    let dir = plugins_dir.join(name);
    fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    fs::create_dir(dir.join("src"))
        .with_context(|| format!("cannot create {}/src", dir.display()))?;
    for (file, template) in [("Cargo.toml", CARGO_TOML), ("src/lib.rs", LIB_RS)] {
        let path = dir.join(file);
        fs::write(&path, render(template, name, &sdk))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(dir)
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

/// The SDK path as written in the new crate: relative for the repository layout
/// (`plugins/` beside `plugin-sdk/`), else this build's own SDK folder.
fn sdk_path(plugins_dir: &Path) -> anyhow::Result<String> {
    if plugins_dir.join("../plugin-sdk/Cargo.toml").is_file() {
        return Ok("../../plugin-sdk".to_owned());
    }
    let built_with = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugin-sdk");
    let sdk = built_with.canonicalize().with_context(|| {
        format!(
            "cannot find the plugin SDK beside {} or at {}",
            plugins_dir.display(),
            built_with.display()
        )
    })?;
    Ok(sdk.to_string_lossy().into_owned())
}

fn render(template: &str, name: &str, sdk: &str) -> String {
    template
        .replace("{{name}}", name)
        .replace("{{lib}}", &name.replace('-', "_"))
        .replace("{{sdk}}", sdk)
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
        let dir = new_plugin(&root.path().join("plugins"), "audit-log").unwrap();
        let cargo = fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let lib = fs::read_to_string(dir.join("src/lib.rs")).unwrap();
        assert!(cargo.contains("name = \"audit-log\""));
        assert!(cargo.contains("path = \"../../plugin-sdk\""));
        assert!(lib.contains("audit_log.wasm") && lib.contains("handler!(handle)"));
        assert!(!cargo.contains("{{") && !lib.contains("{{"));
    }

    #[test]
    fn refuses_bad_names_and_existing_plugins() {
        let root = workspace();
        let plugins = root.path().join("plugins");
        for bad in ["", "Audit", "1x", "a_b", "a--b", "a-", "../x"] {
            assert!(new_plugin(&plugins, bad).is_err(), "{bad:?}");
        }
        new_plugin(&plugins, "x").unwrap();
        let again = new_plugin(&plugins, "x").unwrap_err();
        assert!(format!("{again:#}").contains("cannot create"));
    }

    #[test]
    fn refuses_a_folder_that_is_not_the_plugins_workspace() {
        let root = tempfile::tempdir().unwrap();
        let err = new_plugin(root.path(), "x").unwrap_err();
        assert!(err.to_string().contains("not a plugins workspace"));
    }
}
