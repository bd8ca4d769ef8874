//! Poison deliveries: messages whose properties the AMQP client could not decode (invalid UTF-8
//! in a header name or property, headers nested too deep, an unknown field type). The patched
//! decoder (vendor/README.md) delivers them with default properties and one marker header that
//! names the problem, instead of dropping the connection; the consumer parks them in
//! `<queue>@failed` without calling the plugin.

use lapin::BasicProperties;
use lapin::protocol::UNDECODABLE_PROPERTIES_HEADER;
use lapin::types::FieldTable;

use crate::headers;

/// What `worker-error` says on a parked undecodable delivery, before the problem.
pub(crate) const ERROR_PREFIX: &str = "undecodable delivery: ";

/// The problem with a delivery the client could not decode, or `None` for a normal delivery.
pub(crate) fn undecodable(properties: &BasicProperties) -> Option<String> {
    let value = properties
        .headers()
        .as_ref()?
        .inner()
        .get(UNDECODABLE_PROPERTIES_HEADER)?;
    Some(headers::render(value))
}

/// The `worker-error` recorded for `problem`.
pub(crate) fn cause(problem: &str) -> String {
    format!("{ERROR_PREFIX}{problem}")
}

/// The properties without the marker: the problem lives on in `worker-error`, and a replayed
/// copy must not look undecodable again.
pub(crate) fn without_marker(properties: &BasicProperties) -> BasicProperties {
    let Some(headers) = properties.headers().as_ref() else {
        return properties.clone();
    };
    let kept = headers
        .inner()
        .iter()
        .filter(|(name, _)| name.as_str() != UNDECODABLE_PROPERTIES_HEADER)
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect::<std::collections::BTreeMap<_, _>>();
    properties.clone().with_headers(FieldTable::from(kept))
}

#[cfg(test)]
mod tests;
