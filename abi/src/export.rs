//! What a plugin module must export. The host refuses a module missing any of them.

use core::fmt;

use crate::signature::{Signature, ValType};

/// The module's linear memory, where every pointer points.
pub const MEMORY: &str = "memory";
/// The ABI v1 marker: `() -> ()`, never called.
pub const MARKER: &str = "worker_abi_v1";
/// The handler: `() -> i32`, answering one message with an [`Answer`](crate::Answer) code.
pub const HANDLE: &str = "worker_handle";

/// One required export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Export {
    /// Its name.
    pub name: &'static str,
    /// What it must be.
    pub kind: ExportKind,
}

/// What an export must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportKind {
    /// A function of this signature.
    Func(Signature),
    /// A 32-bit, unshared linear memory.
    Memory,
}

/// Written as the host's load errors say it: `a function () -> (i32)`, `a 32-bit memory`.
impl fmt::Display for ExportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExportKind::Func(sig) => write!(f, "a function {sig}"),
            ExportKind::Memory => f.write_str("a 32-bit memory"),
        }
    }
}

/// Every required export, in the order the host checks them.
pub const ALL: &[Export] = &[
    Export {
        name: MARKER,
        kind: ExportKind::Func(Signature {
            params: &[],
            results: &[],
        }),
    },
    Export {
        name: HANDLE,
        kind: ExportKind::Func(Signature {
            params: &[],
            results: &[ValType::I32],
        }),
    },
    Export {
        name: MEMORY,
        kind: ExportKind::Memory,
    },
];

/// The required export called `name`.
pub fn find(name: &str) -> Option<&'static Export> {
    ALL.iter().find(|e| e.name == name)
}
