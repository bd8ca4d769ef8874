//! Reading a plugin file with bounded memory: its size and its first bytes are checked before
//! the rest is read, so a huge or foreign file dropped into the plugins folder costs nothing.

use std::fs::File;
use std::io::Read as _;
use std::path::Path;

use super::error::LoadError;

/// Every WebAssembly binary (core module or component) starts with these bytes.
const MAGIC: &[u8; 4] = b"\0asm";

/// The bytes of the plugin file at `path`, at most `limit` of them. Refused without reading
/// further: a file that is not a regular file, one larger than `limit` (by its size, or by what
/// it turns out to hold if it grows while being read), and one that does not start with `\0asm`.
/// Blocking: call it from `spawn_blocking`.
pub(crate) fn read(path: &Path, limit: u64) -> Result<Vec<u8>, LoadError> {
    let file_name = || file_name(path);
    let io = |error| LoadError::Io {
        file: file_name(),
        error,
    };
    // Checked before opening: opening a FIFO would block until someone writes to it.
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(LoadError::NotAFile { file: file_name() });
    }
    let mut file = File::open(path).map_err(io)?;
    // The file that was opened, in case another one was renamed into place meanwhile.
    let size = file.metadata().map_err(io)?.len();
    if size > limit {
        return Err(too_large(file_name(), size, limit));
    }
    let mut head = [0u8; MAGIC.len()];
    let got = read_up_to(&mut file, &mut head).map_err(io)?;
    if head[..got] != MAGIC[..] {
        return Err(LoadError::NotWasm { file: file_name() });
    }
    // `size <= limit`, and `limit` is at most a few GiB (config bounds), so this fits.
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    bytes.extend_from_slice(&head);
    let rest = limit.saturating_sub(MAGIC.len() as u64).saturating_add(1);
    (&mut file).take(rest).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > limit {
        // It grew while being read; stop at the limit.
        return Err(too_large(file_name(), bytes.len() as u64, limit));
    }
    Ok(bytes)
}

/// Fills as much of `buf` as the file holds, retrying short reads.
fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}

fn too_large(file: String, size: u64, limit: u64) -> LoadError {
    LoadError::TooLarge {
        file,
        size: human_size(size),
        limit: human_size(limit),
    }
}

pub(crate) fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// `1GiB`, `300MiB`, or `123456789 bytes`: exact, in the unit worker.toml would use.
pub(crate) fn human_size(bytes: u64) -> String {
    for (unit, shift) in [("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if bytes >= 1u64 << shift && bytes.is_multiple_of(1u64 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).expect("write");
        path
    }

    #[test]
    fn reads_a_module_within_the_limit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bytes = b"\0asm\x01\0\0\0rest";
        let path = write(dir.path(), "ok.wasm", bytes);
        assert_eq!(read(&path, 1024).expect("read"), bytes);
        assert_eq!(read(&path, bytes.len() as u64).expect("exactly"), bytes);
    }

    #[test]
    fn refuses_a_larger_file_by_its_size_without_reading_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("huge.wasm");
        // Sparse: its size says 1GiB; reading it would allocate that much.
        File::create(&path)
            .and_then(|f| f.set_len(1 << 30))
            .expect("sparse file");
        let err = read(&path, 256 << 20).expect_err("too large");
        assert!(matches!(err, LoadError::TooLarge { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "huge.wasm: the file is 1GiB, larger than max_plugin_size (256MiB); it was not read"
        );
    }

    #[test]
    fn refuses_a_file_without_the_wasm_header() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, bytes) in [
            ("text.wasm", &b"(module)"[..]),
            ("empty.wasm", b""),
            ("short.wasm", b"\0as"),
        ] {
            let path = write(dir.path(), name, bytes);
            let err = read(&path, 1024).expect_err(name);
            assert!(matches!(err, LoadError::NotWasm { .. }), "{name}: {err}");
        }
    }

    #[test]
    fn refuses_what_is_not_a_regular_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = read(dir.path(), 1024).expect_err("a folder");
        assert!(matches!(err, LoadError::NotAFile { .. }), "{err}");
        let err = read(&dir.path().join("missing.wasm"), 1024).expect_err("missing");
        assert!(
            matches!(&err, LoadError::Io { error, .. } if error.kind() == std::io::ErrorKind::NotFound),
            "{err}"
        );
    }

    #[test]
    fn sizes_are_shown_in_the_unit_they_divide() {
        assert_eq!(human_size(256 << 20), "256MiB");
        assert_eq!(human_size(1 << 30), "1GiB");
        assert_eq!(human_size(1536), "1536 bytes");
        assert_eq!(human_size(2048), "2KiB");
        assert_eq!(human_size(7), "7 bytes");
    }
}
