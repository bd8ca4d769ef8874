/// Server notification that the connection has been blocked due to resource constraints (e.g. memory alarm).
///
/// While blocked, the server will not accept new publishes. Unblocked by `connection.unblocked`.
