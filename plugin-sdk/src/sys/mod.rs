//! The host boundary, one backend per build (`cfg(worker_backend)`, set by build.rs): the
//! `worker_v1` imports of an ABI v1 module, the imports of the component world, or natively the
//! test harness's in-process host. Everything above this module is backend-independent, except
//! the calls only one ABI has (v1's `body`/`meta`; the world's `kv`/`sql` and WASI's HTTP).

#[cfg(worker_backend = "v1")]
mod v1;
#[cfg(worker_backend = "v1")]
pub(crate) use v1::{body, config, log, meta, publish, set_reason};

#[cfg(worker_backend = "component")]
mod component;
#[cfg(worker_backend = "component")]
mod component_http;
#[cfg(worker_backend = "component")]
pub(crate) use component::{
    config, kv_compare_and_swap, kv_delete, kv_get, kv_increment, kv_set, log, publish, set_reason,
    sql_execute, sql_query,
};
#[cfg(worker_backend = "component")]
pub(crate) use component_http::http_send;

#[cfg(worker_backend = "native")]
pub(crate) mod native;
#[cfg(worker_backend = "native")]
pub(crate) use native::{
    body, config, http_send, kv_compare_and_swap, kv_delete, kv_get, kv_increment, kv_set, log,
    meta, publish, set_reason, sql_execute, sql_query,
};

#[cfg(all(test, worker_backend = "native"))]
mod tests;
