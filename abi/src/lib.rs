//! Plugin ABI v1 of worker-host: every name and number of the contract between the host and a
//! plugin, defined once. The host checks and serves modules with these values; the Rust SDK
//! calls the host with them; `docs/abi.md` is checked against them by this crate's tests.
//!
//! ```
//! use worker_abi::{ABI_MODULE, PublishRefusal};
//!
//! assert_eq!(ABI_MODULE, "worker_v1");
//! assert_eq!(PublishRefusal::from_code(-2), Some(PublishRefusal::DelayRefused));
//! assert_eq!(PublishRefusal::DelayRefused.code(), -2);
//! ```

#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod answer;
pub mod export;
pub mod import;
pub mod limits;
mod log;
pub mod meta;
mod publish;
mod signature;

pub use answer::Answer;
pub use log::LogLevel;
pub use publish::{PUBLISH_ACCEPTED, PublishRefusal};
pub use signature::{Signature, ValType};

/// The ABI version this crate describes.
pub const VERSION: u32 = 1;

/// The import module of the host functions (see [`import`]).
pub const ABI_MODULE: &str = "worker_v1";

/// The only other module a plugin may import from: WASI preview1, sandboxed by the host.
pub const WASI_MODULE: &str = "wasi_snapshot_preview1";

#[cfg(test)]
mod tests {
    extern crate std;
    use std::collections::BTreeSet;
    use std::string::ToString;

    use super::*;

    #[test]
    fn answer_codes_round_trip() {
        for a in Answer::ALL {
            assert_eq!(Answer::from_code(a.code()), Some(a));
        }
        assert_eq!(Answer::from_code(3), None);
        assert_eq!(Answer::from_code(-1), None);
        assert_eq!(Answer::list().to_string(), "0 ok, 1 retry, 2 fail");
    }

    #[test]
    fn log_levels_round_trip_and_clamp() {
        for l in LogLevel::ALL {
            assert_eq!(LogLevel::from_code(l.code()), l);
        }
        assert_eq!(LogLevel::from_code(-7), LogLevel::Trace);
        assert_eq!(LogLevel::from_code(99), LogLevel::Error);
        assert_eq!(
            LogLevel::list().to_string(),
            "0 trace, 1 debug, 2 info, 3 warn, 4 error"
        );
    }

    #[test]
    fn refusal_codes_are_negative_distinct_and_round_trip() {
        let mut seen = BTreeSet::new();
        for r in PublishRefusal::ALL {
            assert!(r.code() < PUBLISH_ACCEPTED, "{r:?}");
            assert!(seen.insert(r.code()), "{r:?} reuses a code");
            assert_eq!(PublishRefusal::from_code(r.code()), Some(r));
            assert!(!r.description().is_empty() && !r.description().contains('\n'));
        }
        assert_eq!(PublishRefusal::from_code(PUBLISH_ACCEPTED), None);
        assert_eq!(PublishRefusal::from_code(-6), None);
        let name_len = limits::MAX_NAME_LEN.to_string();
        assert!(PublishRefusal::Invalid.description().contains(&*name_len));
    }

    #[test]
    fn names_are_unique() {
        let imports: BTreeSet<&str> = import::ALL.iter().map(|i| i.name).collect();
        assert_eq!(imports.len(), import::ALL.len());
        let exports: BTreeSet<&str> = export::ALL.iter().map(|e| e.name).collect();
        assert_eq!(exports.len(), export::ALL.len());
        let keys: BTreeSet<&str> = meta::KEYS.iter().copied().collect();
        assert_eq!(keys.len(), meta::KEYS.len());
        assert!(keys.iter().all(|k| !k.starts_with(meta::HEADER_PREFIX)));
    }

    #[test]
    fn signatures_read_like_wat() {
        let publish = import::find(import::PUBLISH).expect("publish");
        assert_eq!(
            publish.signature.to_string(),
            "(i32, i32, i32, i32, i32, i32, i64) -> (i32)"
        );
        let handle = export::find(export::HANDLE).expect("handle");
        assert_eq!(handle.kind.to_string(), "a function () -> (i32)");
    }
}
