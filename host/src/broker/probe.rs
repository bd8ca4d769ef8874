//! Asking the broker whether an exchange or a queue exists, and a queue's depth: passive
//! declares, where a missing name closes the channel asked on.

use lapin::options::{ExchangeDeclareOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ExchangeKind};

use super::is_not_found;

/// Whether `exchange` exists, asked with a passive declare on a throwaway channel (a missing
/// one closes it, so no channel in use is affected).
pub(crate) async fn exchange_exists(
    conn: &Connection,
    exchange: &str,
) -> Result<bool, lapin::Error> {
    let probe = conn.create_channel().await?;
    let passive = ExchangeDeclareOptions {
        passive: true,
        ..ExchangeDeclareOptions::default()
    };
    let kind = ExchangeKind::Topic; // Ignored by a passive declare.
    match probe
        .exchange_declare(exchange.into(), kind, passive, FieldTable::default())
        .await
    {
        Ok(()) => {
            let _ = probe.close(200, "checked".into()).await;
            Ok(true)
        }
        Err(err) if is_not_found(&err) => Ok(false),
        Err(err) => Err(err),
    }
}

/// `queue` as the broker sees it (ready messages, consumers), asked with a passive declare on
/// `channel`; `None` when it does not exist, which also closes `channel`.
pub(crate) async fn queue_state(
    channel: &Channel,
    queue: &str,
) -> Result<Option<lapin::Queue>, lapin::Error> {
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    match channel
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await
    {
        Ok(q) => Ok(Some(q)),
        Err(err) if is_not_found(&err) => Ok(None),
        Err(err) => Err(err),
    }
}
