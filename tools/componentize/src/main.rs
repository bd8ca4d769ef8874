//! `componentize`: the build tool of component plugins (scripts/build-plugins.sh runs it).
//!
//!   componentize adapt IN.wasm OUT.wasm   a wasm32-wasip1 core module carrying wit-bindgen's
//!                                         component type -> a component (preview1 reactor adapter)
//!   componentize check FILE.wasm...       each is a component of worker:plugin/handler@2.0.0:
//!                                         exports `handle` typed as the world says, imports only
//!                                         the world's interfaces and WASI

mod adapt;
mod check;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};

fn main() -> ExitCode {
    match run(std::env::args_os().skip(1).map(PathBuf::from).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("componentize: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Vec<PathBuf>) -> anyhow::Result<()> {
    let usage = "usage: componentize adapt IN.wasm OUT.wasm | componentize check FILE.wasm...";
    let Some((command, files)) = args.split_first() else {
        bail!("{usage}");
    };
    match (command.to_str(), files) {
        (Some("adapt"), [input, output]) => {
            let module =
                std::fs::read(input).with_context(|| format!("cannot read {}", input.display()))?;
            let component =
                adapt::component(&module).with_context(|| format!("{}", input.display()))?;
            std::fs::write(output, component)
                .with_context(|| format!("cannot write {}", output.display()))
        }
        (Some("check"), files) if !files.is_empty() => {
            let mut bad = 0;
            for file in files {
                let result = std::fs::read(file)
                    .with_context(|| format!("cannot read {}", file.display()))
                    .and_then(|bytes| check::component(&bytes));
                if let Err(e) = result {
                    eprintln!("{}: {e:#}", file.display());
                    bad += 1;
                }
            }
            if bad > 0 {
                bail!("{bad} of {} files are not plugin components", files.len());
            }
            Ok(())
        }
        _ => bail!("{usage}"),
    }
}
