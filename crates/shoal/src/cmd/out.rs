//! Standard output of every command. A reader that goes away early
//! (`shoal rados -p rbd ls | head`) ends the process at once, quietly and
//! with status 0, as Unix tools stop when their pipe closes: no error line,
//! no panic. Everything the binary writes to standard output goes through
//! [`Stdout`] or the `out!`/`outln!` macros (main.rs denies
//! `clippy::print_stdout`), so this is the one place that decides it.
//!
//! A closed pipe is told apart from a failing socket by where it happens:
//! only writes to standard output come here, so an `EPIPE` from a
//! connection to a daemon still reaches the user as an error.

use std::io::{self, Write};

/// Standard output; a closed pipe ends the process quietly. Each write
/// takes the stream's lock for itself only: a handle kept across an
/// `.await` must not hold it, or a worker thread printing meanwhile (`rbd
/// bench`'s per-second line) would block on it for good, and with it the
/// tasks queued on that worker.
#[derive(Debug, Default)]
pub struct Stdout(());

impl Stdout {
    /// A handle on standard output.
    pub fn new() -> Self {
        Stdout(())
    }
}

/// Ends the process if `e` says the reader of standard output went away.
fn check(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        // Whatever the command still had to say has no reader; the shell
        // sees success, as for `yes | head`, only without the signal.
        std::process::exit(0);
    }
    e
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        io::stdout().lock().write(buf).map_err(check)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        io::stdout().lock().write_all(buf).map_err(check)
    }

    fn write_fmt(&mut self, args: std::fmt::Arguments<'_>) -> io::Result<()> {
        io::stdout().lock().write_fmt(args).map_err(check)
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stdout().lock().flush().map_err(check)
    }
}

/// What `out!` and `outln!` expand to: writes, and on an error other than
/// a closed pipe (a full disk behind a redirection) says so and exits 1,
/// where `print!` would panic.
pub fn print_fmt(args: std::fmt::Arguments<'_>) {
    if let Err(e) = Stdout::new().write_fmt(args) {
        eprintln!("shoal: error: writing to standard output: {e}");
        std::process::exit(1);
    }
}

/// Flushes standard output (progress lines without a newline).
pub fn flush() {
    if let Err(e) = Stdout::new().flush() {
        eprintln!("shoal: error: writing to standard output: {e}");
        std::process::exit(1);
    }
}
