//! The one integration-test binary: everything here talks to a real RabbitMQ at
//! 127.0.0.1:5672 (or `WORKER_TEST_BROKER_URL`). A missing broker fails loudly.

mod cli;
mod common;
mod consumer;
mod plugins;
mod delay;
mod failed;
mod reload;
mod service;
mod topology;
