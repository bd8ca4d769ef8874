//! The one integration-test binary: everything here talks to a real RabbitMQ at
//! 127.0.0.1:5672 (or `WORKER_TEST_BROKER_URL`). A missing broker fails loudly. The `cluster_`
//! tests use the three-node cluster of scripts/cluster.sh instead (127.0.0.1:5673-5675).

mod browser;
mod capabilities;
mod cli;
mod cluster;
mod components;
mod console;
mod consumer;
mod delay;
mod descriptors;
mod docs;
mod failed;
mod faults;
mod forwarder;
mod harness;
mod logs;
mod orders;
mod plugins;
mod poison;
mod raw_amqp;
mod reload;
mod service;
mod topology;
mod traces;
