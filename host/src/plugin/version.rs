//! One compiled version of a plugin file, a core module (ABI v1) or a component (ABI v2), and
//! one handler call per message.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use wasmtime::Store;

use super::component::ComponentPlugin;
use super::error::{HandlerError, stop_at_deadline};
use super::module::ModulePlugin;
use super::state::State;
use super::{Answer, Input, Invocation, Limits};

/// Extra time the outer timer grants beyond the epoch deadline; it only fires
/// when the guest is stuck inside a host call.
const OUTER_GRACE: Duration = Duration::from_millis(100);

/// What the file holds.
pub(crate) enum Kind {
    Module(ModulePlugin),
    Component(ComponentPlugin),
}

/// How a version was made ready, and how long that took: what `check` reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Loaded {
    /// Compiled (a component: in the compiler child, then written to the compile cache).
    Compiled(Duration),
    /// A component's artifact read from the compile cache.
    Cached(Duration),
}

impl std::fmt::Display for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Loaded::Compiled(t) => write!(f, "compiled in {:.1} s", t.as_secs_f64()),
            Loaded::Cached(t) => write!(f, "from the compile cache in {} ms", t.as_millis()),
        }
    }
}

/// One compiled version of a plugin file.
pub struct Plugin {
    pub(crate) loaded: Loaded,
    pub(crate) name: String,
    pub(crate) sha256: String,
    pub(crate) short_sha: String,
    pub(crate) kind: Kind,
    pub(crate) slots: Arc<Semaphore>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("sha256", &self.sha256)
            .field("component", &self.is_component())
            .finish_non_exhaustive()
    }
}

impl Plugin {
    /// Compiled or read from the cache, and how long that took.
    pub fn loaded(&self) -> Loaded {
        self.loaded
    }

    /// The file name, e.g. `user_monitor.wasm`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// SHA-256 of the file, full lowercase hex.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// The first 12 hex chars of the SHA-256, for logs.
    pub fn short_sha(&self) -> &str {
        &self.short_sha
    }

    /// Whether the module imports WASI preview1 (components always have WASI 0.2).
    pub fn uses_wasi(&self) -> bool {
        match &self.kind {
            Kind::Module(m) => m.uses_wasi,
            Kind::Component(_) => true,
        }
    }

    /// Whether the file is a component (ABI v2) rather than a core module (ABI v1).
    pub fn is_component(&self) -> bool {
        matches!(self.kind, Kind::Component(_))
    }

    /// `"v1 module"` or `"v2 component"`, for logs.
    pub fn abi(&self) -> &'static str {
        if self.is_component() {
            "v2 component"
        } else {
            "v1 module"
        }
    }

    /// Runs the handler on one message and commits its effects on ok (undoes them
    /// otherwise). Never panics; every failure, a failed commit too, comes back in
    /// `Invocation::answer`.
    pub async fn handle(&self, input: Arc<Input>, limits: &Limits) -> Invocation {
        let mut invocation = self.invoke(input, limits).await;
        let effects = std::mem::take(&mut invocation.effects);
        let ok = invocation.is_ok();
        if let Err(why) = effects.finish(ok, None).await
            && ok
        {
            invocation.commit_failed(why);
        }
        invocation
    }

    /// Runs the handler on one message, leaving its effects open in `Invocation::effects` for
    /// the caller to finish. Never panics.
    pub(crate) async fn invoke(&self, input: Arc<Input>, limits: &Limits) -> Invocation {
        let start = Instant::now();
        match &self.kind {
            Kind::Module(module) => self.handle_module(module, input, limits, start).await,
            Kind::Component(component) => {
                let call = component
                    .call(input, limits, &self.slots, OUTER_GRACE)
                    .await;
                let ok = matches!(call.answer, Ok(Answer::Ok));
                Invocation {
                    answer: call.answer,
                    reason: call.reason,
                    retry_after: call.retry_after,
                    // Dropped on retry, fail and errors.
                    publishes: if ok {
                        call.pending.publishes
                    } else {
                        Vec::new()
                    },
                    logs: call.logs.finish(),
                    elapsed: start.elapsed(),
                    effects: call.effects,
                }
            }
        }
    }

    async fn handle_module(
        &self,
        module: &ModulePlugin,
        input: Arc<Input>,
        limits: &Limits,
        start: Instant,
    ) -> Invocation {
        // The semaphore is never closed, so acquiring cannot fail; a closed one
        // would only mean "no slot", reported as such.
        let Ok(_slot) = self.slots.acquire().await else {
            return Invocation {
                answer: Err(HandlerError::Instantiate("runtime is shutting down".into())),
                reason: None,
                retry_after: None,
                publishes: Vec::new(),
                logs: Vec::new(),
                elapsed: start.elapsed(),
                effects: Default::default(),
            };
        };
        // The timeout covers the call, not the wait for a pool slot.
        let deadline = Instant::now() + limits.timeout;
        let mut store = Store::new(
            module.pre.module().engine(),
            State::new(input, limits.memory_limit, deadline),
        );
        store.limiter(|s| &mut s.limiter);
        stop_at_deadline(&mut store, |s| s.deadline);
        store.set_epoch_deadline(1);

        let run = module.run(&mut store, limits);
        let answer = match tokio::time::timeout(limits.timeout + OUTER_GRACE, run).await {
            Ok(answer) => answer,
            Err(_) => Err(HandlerError::Timeout(limits.timeout)),
        };

        let mut state = store.into_data();
        state.drain_wasi_output();
        let publishes = if matches!(answer, Ok(Answer::Ok)) {
            state.pending.publishes
        } else {
            // Dropped on retry, fail and errors (ABI v1).
            Vec::new()
        };
        Invocation {
            answer,
            reason: state.reason,
            retry_after: None,
            publishes,
            logs: state.logs.finish(),
            elapsed: start.elapsed(),
            effects: Default::default(),
        }
    }
}
