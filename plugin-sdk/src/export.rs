//! What [`handler!`](crate::handler) expands to, one definition per backend: it expands in the
//! plugin's crate, where the SDK's `cfg(worker_backend)` is not set, so the SDK picks the
//! definition when it compiles.

/// ABI v1: the marker and the `worker_handle` export.
#[cfg(worker_backend = "v1")]
#[doc(hidden)]
#[macro_export]
macro_rules! __handler_exports {
    ($handler:path) => {
        const _: () = {
            /// ABI v1 marker: the host refuses modules without it. The export names are literals
            /// (Rust needs them so); `sys` tests check them against `abi::export`.
            #[unsafe(no_mangle)]
            pub extern "C" fn worker_abi_v1() {}

            /// Handles the current message: 0 ok, 1 retry, 2 fail.
            #[unsafe(no_mangle)]
            pub extern "C" fn worker_handle() -> i32 {
                $crate::rt::handle($handler)
            }
        };
    };
}

/// The component world: the `handle` export, through the export macro wit-bindgen generated.
#[cfg(worker_backend = "component")]
#[doc(hidden)]
#[macro_export]
macro_rules! __handler_exports {
    ($handler:path) => {
        const _: () = {
            struct WorkerPlugin;

            impl $crate::bindings::Guest for WorkerPlugin {
                fn handle(message: $crate::bindings::Delivery) -> $crate::bindings::Outcome {
                    $crate::rt::handle_delivery($handler, message)
                }
            }

    $crate::bindings::__export_handler_world!(WorkerPlugin with_types_in $crate::bindings);
        };
    };
}

/// Natively nothing is exported (test binaries of several plugins must not clash); both call
/// paths are type-checked, so a handler that builds natively builds for either ABI.
#[cfg(worker_backend = "native")]
#[doc(hidden)]
#[macro_export]
macro_rules! __handler_exports {
    ($handler:path) => {
        const _: fn() -> i32 = || $crate::rt::handle($handler);
        const _: fn($crate::bindings::Delivery) -> $crate::bindings::Outcome =
            |message| $crate::rt::handle_delivery($handler, message);
    };
}
