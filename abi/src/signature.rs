//! Function signatures as data, so the host can check a module's imports and exports against them.

use core::fmt;

/// A WebAssembly value type used by ABI v1. Pointers and lengths are `i32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValType {
    /// A 32-bit integer: pointers, lengths, codes.
    I32,
    /// A 64-bit integer: the publish delay in milliseconds.
    I64,
}

impl ValType {
    /// The name in the WebAssembly text format: `i32` or `i64`.
    pub const fn name(self) -> &'static str {
        match self {
            ValType::I32 => "i32",
            ValType::I64 => "i64",
        }
    }
}

impl fmt::Display for ValType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The parameter and result types of a function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Signature {
    /// Parameter types, in order.
    pub params: &'static [ValType],
    /// Result types (none or one in ABI v1).
    pub results: &'static [ValType],
}

/// Written as `(i32, i32) -> (i32)`, the way the host reports a mismatch.
impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn list(f: &mut fmt::Formatter<'_>, types: &[ValType]) -> fmt::Result {
            f.write_str("(")?;
            for (i, t) in types.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                f.write_str(t.name())?;
            }
            f.write_str(")")
        }
        list(f, self.params)?;
        f.write_str(" -> ")?;
        list(f, self.results)
    }
}
