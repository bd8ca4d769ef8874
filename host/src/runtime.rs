//! The async runtime the host runs on, and how many worker threads it has.
//!
//! tokio itself reads `TOKIO_WORKER_THREADS`, but panics on a value it cannot use; read here
//! first, a bad value is a one-line error like any other bad setting.

/// The variable that sets the number of worker threads (default: one per core).
const WORKER_THREADS_VAR: &str = "TOKIO_WORKER_THREADS";

/// Builds the multi-thread runtime, with the worker count `TOKIO_WORKER_THREADS` asks for.
pub fn build() -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(value) = std::env::var_os(WORKER_THREADS_VAR) {
        builder.worker_threads(worker_threads(&value.to_string_lossy())?);
    }
    builder
        .build()
        .map_err(|err| anyhow::anyhow!("cannot start the async runtime: {err}"))
}

/// Parses the worker count: a whole number of at least 1.
fn worker_threads(value: &str) -> anyhow::Result<usize> {
    match value.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => anyhow::bail!(
            "{WORKER_THREADS_VAR}={value:?} is not a number of worker threads (a whole number, 1 or more)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::worker_threads;

    #[test]
    fn a_worker_count_is_a_whole_number_of_at_least_one() {
        assert_eq!(worker_threads("1").unwrap(), 1);
        assert_eq!(worker_threads(" 4 ").unwrap(), 4);
        for bad in ["0", "-1", "two", "1.5", ""] {
            let err = worker_threads(bad).unwrap_err().to_string();
            assert_eq!(
                err,
                format!(
                    "TOKIO_WORKER_THREADS={bad:?} is not a number of worker threads (a whole \
                     number, 1 or more)"
                )
            );
        }
    }
}
