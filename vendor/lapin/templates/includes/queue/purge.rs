/// Delete all messages from a queue without deleting the queue itself.
///
/// Returns the number of messages that were purged. This operation is
/// irreversible; use with care.
