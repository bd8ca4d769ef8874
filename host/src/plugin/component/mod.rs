//! ABI v2 plugins: components of the world `worker:plugin/handler@2.0.0` (`wit/`), each call in a
//! fresh instance or, with `instance = "reuse"`, in a warm one that serves a bounded run of
//! messages.

mod imports;
pub(crate) mod state;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Engine, Store};

use super::error::{HandlerError, LoadError, chain_text, classify, stop_at_deadline};
use super::pending::Pending;
use super::state::{LogBuffer, bounded_text};
use super::{Answer, Input, Instances, Limits};
use state::CState;

use crate::capability;
use crate::wit::worker::plugin::{host, types};
use crate::wit::{Handler, HandlerPre};

/// The linker every component is linked with: the world's `host` and `types`, WASI 0.2, and
/// the capabilities (kv, sql, wasi:http).
pub(crate) fn linker(engine: &Engine) -> anyhow::Result<Linker<CState>> {
    let mut linker = Linker::new(engine);
    let err = |e: wasmtime::Error| anyhow::anyhow!("{}", chain_text(&e));
    types::add_to_linker::<_, HasSelf<CState>>(&mut linker, |s| s).map_err(err)?;
    host::add_to_linker::<_, HasSelf<CState>>(&mut linker, |s| s).map_err(err)?;
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(err)?;
    capability::link(&mut linker).map_err(err)?;
    Ok(linker)
}

/// A component, linked and ready to instantiate, with its warm instances.
pub(crate) struct ComponentPlugin {
    /// The plugin file, for capability log lines.
    name: Arc<str>,
    pre: HandlerPre<CState>,
    /// Reusable instances by subscription queue: globals must never cross subscriptions.
    warm: Mutex<HashMap<String, Vec<Warm>>>,
}

/// An instance kept for the next message of the same subscription. It keeps its pool slot.
struct Warm {
    store: Store<CState>,
    handler: Handler,
    served: u32,
    _slot: OwnedSemaphorePermit,
}

/// What one call produced.
pub(crate) struct Call {
    pub answer: Result<Answer, HandlerError>,
    pub reason: Option<String>,
    pub retry_after: Option<Duration>,
    pub logs: LogBuffer,
    pub pending: Pending,
    /// The capabilities' effects, not yet committed.
    pub effects: capability::Effects,
}

impl Call {
    fn refused(why: &str) -> Call {
        Call {
            answer: Err(HandlerError::Instantiate(why.into())),
            reason: None,
            retry_after: None,
            logs: LogBuffer::default(),
            pending: Pending::default(),
            effects: capability::Effects::default(),
        }
    }
}

impl ComponentPlugin {
    /// Links `component`; an import the host does not offer is named in the error.
    pub(crate) fn new(
        file: &str,
        linker: &Linker<CState>,
        component: &Component,
    ) -> Result<ComponentPlugin, LoadError> {
        let link = |reason: String| LoadError::Link {
            file: file.to_string(),
            reason,
        };
        let pre = linker
            .instantiate_pre(component)
            .map_err(|e| link(chain_text(&e)))?;
        let pre = HandlerPre::new(pre).map_err(|e| LoadError::WrongWorld {
            file: file.to_string(),
            reason: chain_text(&e),
        })?;
        Ok(ComponentPlugin {
            name: file.into(),
            pre,
            warm: Mutex::new(HashMap::new()),
        })
    }

    /// Runs the handler on one message. A new instance first takes a pool slot from `slots`
    /// (waiting for one); a warm instance already holds its own.
    pub(crate) async fn call(
        &self,
        input: Arc<Input>,
        limits: &Limits,
        slots: &Arc<Semaphore>,
        outer_grace: Duration,
    ) -> Call {
        let queue = input.meta.queue.clone();
        let reuse = match limits.instance {
            Instances::Fresh => None,
            Instances::Reuse { max_messages } => Some(max_messages),
        };
        let warm = match reuse {
            Some(_) => self.take_warm(&queue),
            None => {
                // The subscription went back to fresh instances: release the warm ones' slots.
                self.drop_warm(&queue);
                None
            }
        };
        let (mut store, handler, served, slot) = match warm {
            Some(w) => (w.store, Some(w.handler), w.served, w._slot),
            None => {
                // The semaphore is never closed, so acquiring cannot fail.
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return Call::refused("runtime is shutting down");
                };
                (self.store(input.clone(), limits), None, 0, slot)
            }
        };
        // The timeout covers the call, not the wait for a pool slot.
        let deadline = Instant::now() + limits.timeout;
        store.data_mut().begin(input.clone(), &self.name, deadline);
        store.set_epoch_deadline(1);

        let run = self.run(&mut store, handler, &input, limits);
        let result = match tokio::time::timeout(limits.timeout + outer_grace, run).await {
            Ok(result) => result,
            Err(_) => Err(HandlerError::Timeout(limits.timeout)),
        };
        // Left open: the caller commits them on ok, before it publishes and acks.
        let effects = store.data_mut().take_effects();
        let (logs, pending) = store.data_mut().finish();
        match result {
            Ok((handler, outcome)) => {
                let (answer, reason, retry_after) = answer_of(outcome);
                if let Some(max) = reuse
                    && served + 1 < max
                {
                    self.put_warm(
                        queue,
                        Warm {
                            store,
                            handler,
                            served: served + 1,
                            _slot: slot,
                        },
                    );
                }
                Call {
                    answer: Ok(answer),
                    reason,
                    retry_after,
                    logs,
                    pending,
                    effects,
                }
            }
            // A trap, timeout or limit hit: the instance (warm or not) is dropped here.
            Err(e) => Call {
                answer: Err(e),
                reason: None,
                retry_after: None,
                logs,
                pending,
                effects,
            },
        }
    }

    fn store(&self, input: Arc<Input>, limits: &Limits) -> Store<CState> {
        let deadline = Instant::now() + limits.timeout;
        let mut store = Store::new(
            self.pre.engine(),
            CState::new(input, limits.memory_limit, deadline),
        );
        store.limiter(|s| &mut s.limiter);
        stop_at_deadline(&mut store, |s| s.deadline);
        store
    }

    async fn run(
        &self,
        store: &mut Store<CState>,
        handler: Option<Handler>,
        input: &Input,
        limits: &Limits,
    ) -> Result<(Handler, types::Outcome), HandlerError> {
        let handler = match handler {
            Some(h) => h,
            None => self
                .pre
                .instantiate_async(&mut *store)
                .await
                .map_err(|e| classify(&e, limits.timeout, true))?,
        };
        let outcome = handler
            .call_handle(&mut *store, &delivery(input))
            .await
            .map_err(|e| classify(&e, limits.timeout, false))?;
        Ok((handler, outcome))
    }

    fn take_warm(&self, queue: &str) -> Option<Warm> {
        // A poisoned lock only means a panic elsewhere while it was held; the list is intact.
        let mut warm = self.warm.lock().unwrap_or_else(|e| e.into_inner());
        warm.get_mut(queue).and_then(Vec::pop)
    }

    fn drop_warm(&self, queue: &str) {
        let mut warm = self.warm.lock().unwrap_or_else(|e| e.into_inner());
        if warm.get(queue).is_some_and(|list| !list.is_empty()) {
            warm.remove(queue);
        }
    }

    fn put_warm(&self, queue: String, w: Warm) {
        let mut warm = self.warm.lock().unwrap_or_else(|e| e.into_inner());
        warm.entry(queue).or_default().push(w);
    }
}

/// The WIT delivery record of one message.
fn delivery(input: &Input) -> types::Delivery {
    let m = &input.meta;
    types::Delivery {
        body: input.body.to_vec(),
        routing_key: m.routing_key.clone(),
        original_routing_key: m.original_routing_key.clone(),
        exchange: m.exchange.clone(),
        queue: m.queue.clone(),
        message_id: m.message_id.clone(),
        correlation_id: m.correlation_id.clone(),
        content_type: m.content_type.clone(),
        timestamp: m.timestamp,
        attempt: m.attempt,
        redelivered: m.redelivered,
        headers: m
            .headers
            .iter()
            .map(|(name, value)| types::Header {
                name: name.clone(),
                value: value.clone(),
            })
            .collect(),
    }
}

/// The answer, the reason (bounded, one line) and the asked retry delay of an outcome.
fn answer_of(outcome: types::Outcome) -> (Answer, Option<String>, Option<Duration>) {
    let reason = |text: &str| {
        Some(bounded_text(
            text.as_bytes(),
            worker_abi::limits::MAX_REASON,
        ))
    };
    match outcome {
        types::Outcome::Ok => (Answer::Ok, None, None),
        types::Outcome::Retry(r) => (
            Answer::Retry,
            reason(&r.reason),
            r.after_ms.map(Duration::from_millis),
        ),
        types::Outcome::Fail(text) => (Answer::Fail, reason(&text), None),
    }
}
