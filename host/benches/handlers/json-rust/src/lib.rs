//! The Rust handler of the performance targets: parse the 1 KiB JSON body, answer ok. The same
//! work as the Python and JavaScript handlers beside it and the peers' no-op tasks, written as a
//! Rust handler is: the body deserialized into the type it stands for.

#![forbid(unsafe_code)]

use serde::Deserialize;
use worker_plugin_sdk::{Error, Message, Outcome};

/// The bench's body: `{"id": 12345, "name": "...", "tags": ["tag-0", ...]}`.
#[derive(Deserialize)]
struct Record {
    id: u64,
    name: String,
    tags: Vec<String>,
}

/// Parses the body; a body that is not such an object fails the message.
pub fn handle(msg: &Message) -> Result<Outcome, Error> {
    let record: Record = msg.json()?;
    std::hint::black_box((record.id, &record.name, &record.tags));
    Ok(Outcome::Ok)
}

worker_plugin_sdk::handler!(handle);
