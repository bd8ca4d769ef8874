//! Runtime tests against the WAT fixtures in `host/tests/fixtures`; no broker.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::*;

const MIB: u64 = 1024 * 1024;

fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        Runtime::new(&RuntimeConfig {
            max_instances: 16,
            max_memory: 64 * MIB,
            cache_dir: None,
            compiler_exe: None,
            compile_priority: CompilePriority::Foreground,
        })
        .expect("runtime")
    })
}

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("{name}.wat"))
}

fn fixture_bytes(name: &str) -> Vec<u8> {
    wat::parse_file(fixture_path(name)).expect("fixture parses")
}

fn load(name: &str) -> Arc<Plugin> {
    runtime()
        .load_bytes(&format!("{name}.wasm"), &fixture_bytes(name))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn limits() -> Limits {
    Limits {
        timeout: Duration::from_secs(5),
        memory_limit: 16 * MIB,
        instance: Instances::Fresh,
    }
}

fn policy() -> PublishPolicy {
    PublishPolicy {
        allowed_exchanges: vec!["out".into()],
        ..PublishPolicy::default()
    }
}

fn input(body: impl Into<bytes::Bytes>) -> Input {
    Input {
        body: body.into(),
        meta: Meta {
            routing_key: "Q".into(),
            original_routing_key: "user.created".into(),
            exchange: "master".into(),
            queue: "ucenter@user".into(),
            message_id: Some("m-1".into()),
            correlation_id: Some("c-9".into()),
            content_type: Some("application/json".into()),
            timestamp: Some(1_700_000_000),
            attempt: 2,
            redelivered: true,
            headers: vec![
                ("x-tenant".into(), "acme".into()),
                ("x-count".into(), "42".into()),
            ],
        },
        config_json: Arc::from(r#"{"greeting":"hello"}"#),
        publish: Arc::new(policy()),
        granted: Arc::default(),
    }
}

async fn run(name: &str, input: Input) -> Invocation {
    load(name).handle(Arc::new(input), &limits()).await
}

mod answers;
mod components;
mod contract;
mod failures;
mod imports;
mod loading;
mod running;
