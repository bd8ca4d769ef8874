//! ABI v1 plugins: a compiled core module and one handler call in a fresh instance.

use wasmtime::{Extern, InstancePre, ModuleExport, Store};
use worker_abi::export;

use super::error::{HandlerError, chain_text, classify};
use super::state::State;
use super::{Answer, Limits};

/// A core module, linked and ready to instantiate.
pub(crate) struct ModulePlugin {
    pub uses_wasi: bool,
    pub pre: InstancePre<State>,
    pub handle: ModuleExport,
    pub memory: ModuleExport,
}

impl ModulePlugin {
    /// Instantiates the module in `store` and calls `worker_handle`.
    pub(crate) async fn run(
        &self,
        store: &mut Store<State>,
        limits: &Limits,
    ) -> Result<Answer, HandlerError> {
        let instance = self
            .pre
            .instantiate_async(&mut *store)
            .await
            .map_err(|e| classify(&e, limits.timeout, true))?;
        let memory = instance
            .get_module_export(&mut *store, &self.memory)
            .and_then(Extern::into_memory);
        store.data_mut().memory = memory;
        let func = instance
            .get_module_export(&mut *store, &self.handle)
            .and_then(Extern::into_func)
            .ok_or_else(|| HandlerError::Instantiate(format!("{} is missing", export::HANDLE)))?;
        let func = func
            .typed::<(), i32>(&*store)
            .map_err(|e| HandlerError::Instantiate(chain_text(&e)))?;
        let code = func
            .call_async(&mut *store, ())
            .await
            .map_err(|e| classify(&e, limits.timeout, false))?;
        Answer::from_code(code)
    }
}
