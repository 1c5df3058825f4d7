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

use std::io::{self, StdoutLock, Write};

/// Standard output, locked; a closed pipe ends the process quietly.
pub struct Stdout(StdoutLock<'static>);

impl Stdout {
    /// Locks standard output for this writer's lifetime.
    pub fn lock() -> Self {
        Stdout(io::stdout().lock())
    }
}

impl Default for Stdout {
    fn default() -> Self {
        Stdout::lock()
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
        self.0.write(buf).map_err(check)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush().map_err(check)
    }
}

/// What `out!` and `outln!` expand to: writes, and on an error other than
/// a closed pipe (a full disk behind a redirection) says so and exits 1,
/// where `print!` would panic.
pub fn print_fmt(args: std::fmt::Arguments<'_>) {
    if let Err(e) = Stdout::lock().write_fmt(args) {
        eprintln!("shoal: error: writing to standard output: {e}");
        std::process::exit(1);
    }
}

/// Flushes standard output (progress lines without a newline).
pub fn flush() {
    if let Err(e) = Stdout::lock().flush() {
        eprintln!("shoal: error: writing to standard output: {e}");
        std::process::exit(1);
    }
}
