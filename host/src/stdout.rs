//! Command output on stdout, where a closed pipe is a normal way for a reader to stop.

/// Prints a line to stdout; a closed pipe (`worker-host topology | head`) ends the command
/// quietly instead of panicking.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::stdout::write_line(format_args!($($arg)*))
    };
}
pub(crate) use say;

/// See [`say!`].
pub(crate) fn write_line(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let written = out
        .write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    if let Err(err) = written
        && err.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(0);
    }
}
