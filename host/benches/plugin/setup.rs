//! What both benches hand a plugin: the 1 KiB JSON body, the call's input and limits, and the
//! runtime configured as the service configures it. Shared by `plugin` and `throughput`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use worker_host::plugin::{
    CompilePriority, Input, Instances, Limits, Meta, PublishPolicy, RuntimeConfig,
};

/// The handlers the performance targets name (host/benches/handlers: parse the 1 KiB JSON body,
/// answer ok), relative to the repository root; scripts/bench.sh builds them.
pub const JSON_RUST: &str = "host/benches/handlers/json_rust.wasm";
pub const JSON_PYTHON: &str = "host/benches/handlers/json_python.wasm";
pub const JSON_JS: &str = "host/benches/handlers/json_js.wasm";

/// A call's input: this body, routing key and queue `bench`, first attempt.
pub fn input(body: Vec<u8>) -> Arc<Input> {
    Arc::new(Input {
        body: body.into(),
        meta: Meta {
            routing_key: "bench".into(),
            queue: "bench".into(),
            attempt: 1,
            ..Meta::default()
        },
        config_json: Arc::from("{}"),
        publish: Arc::new(PublishPolicy::default()),
        granted: Arc::default(),
    })
}

/// The 1 KiB JSON object every JSON scenario sends. It has none of the demo plugins' command
/// keys, so the demos parse it and answer ok.
pub fn json_1k() -> Vec<u8> {
    let mut s = String::from("{\"id\": 12345, \"name\": \"ada lovelace\", \"tags\": [");
    let mut i = 0;
    while s.len() < 1000 {
        s.push_str(&format!("\"tag-{i}\","));
        i += 1;
    }
    s.push_str("\"end\"]}");
    s.into_bytes()
}

/// The pool of the service with few subscriptions (`service::runtime_for`: at least 32 slots),
/// components compiled in a `worker-host` child process into `cache_dir`, as the service does.
pub fn runtime_config(cache_dir: &Path) -> RuntimeConfig {
    RuntimeConfig {
        max_instances: 32,
        max_memory: 64 << 20,
        cache_dir: Some(cache_dir.to_path_buf()),
        compiler_exe: Some(env!("CARGO_BIN_EXE_worker-host").into()),
        compile_priority: CompilePriority::Background,
    }
}

/// A 10 s timeout, 64 MiB of memory, instances as given.
pub fn limits(instance: Instances) -> Limits {
    Limits {
        timeout: Duration::from_secs(10),
        memory_limit: 64 << 20,
        instance,
    }
}
