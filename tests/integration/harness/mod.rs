//! The one harness of the integration tests: the test broker ([`amqp`]), a worker-host under
//! test, in-process or as the real binary ([`host`]), names no other test uses ([`names`]),
//! free local ports ([`ports`]), GETs to the admin endpoint ([`http`]) and polling with a deadline ([`eventually`]). Every test builds
//! on these; a test module's own `support.rs` keeps only what is particular to its tests.

#![allow(dead_code)]

pub mod amqp;
pub mod host;
pub mod http;
pub mod names;
mod poll;
pub mod ports;

pub use amqp::*;
pub use host::{Host, folder, write_config};
pub use http::{http_get, http_get_within, wait_status, watch_status};
pub use names::{Names, unique};
pub use poll::eventually;
pub use ports::{free_addr, free_port};
