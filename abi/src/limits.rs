//! Bounds the host puts on one handler call. The publish bounds are defaults of a subscription;
//! the others are fixed.

const KIB: usize = 1024;

/// Messages one call may publish, by default.
pub const MAX_PUBLISHES: usize = 100;
/// Bytes (routing keys plus bodies) one call may publish, by default.
pub const MAX_PUBLISH_BYTES: usize = 4 * KIB * KIB;
/// Longest exchange name or routing key, in bytes (an AMQP short string).
pub const MAX_NAME_LEN: usize = 255;
/// Longest `set_reason` text kept, in bytes.
pub const MAX_REASON: usize = KIB;
/// Most log lines kept per call.
pub const MAX_LOG_LINES: usize = 256;
/// Longest single log line kept, in bytes.
pub const MAX_LOG_LINE: usize = 4 * KIB;
/// Most log bytes kept per call, all lines together.
pub const MAX_LOG_BYTES: usize = 64 * KIB;
/// Most bytes kept from each of WASI stdout and stderr per call.
pub const MAX_WASI_OUTPUT: usize = 64 * KIB;
/// Most elements of an instance's table.
pub const MAX_TABLE_ELEMENTS: u32 = 20_000;
/// Memories an instance may have.
pub const MAX_MEMORIES: usize = 1;
/// Tables an instance may have.
pub const MAX_TABLES: usize = 1;
/// Instances a call may create.
pub const MAX_INSTANCES: usize = 1;
