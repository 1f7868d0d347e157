//! Standard output, which may go away: `fragprobe report t.fpt | head -1` closes it, and
//! `> /dev/full` makes every write fail. A closed pipe ends the output quietly (what `head`
//! expects, and the command's own exit code stands); any other failure is one line on
//! stderr and exit code [`crate::exit::OUTPUT`]. Nothing here panics, unlike `println!`.

use std::io::{ErrorKind, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::exit;
use crate::load::CodedError;

/// Set once a write found the reader gone: later output is dropped without trying.
static GONE: AtomicBool = AtomicBool::new(false);

/// Writes `text` to standard output and flushes it.
///
/// Ok when it was written or when the reader has gone (a closed pipe); an error carrying
/// [`exit::OUTPUT`] when it could not be written (a full disk, an I/O error).
pub fn print(text: &str) -> anyhow::Result<()> {
    write_to(&mut std::io::stdout().lock(), text)
}

/// [`print`] with a newline after `text`.
pub fn println(text: &str) -> anyhow::Result<()> {
    let mut s = String::with_capacity(text.len() + 1);
    s.push_str(text);
    s.push('\n');
    print(&s)
}

/// Whether a write found standard output's reader gone.
pub fn gone() -> bool {
    GONE.load(Ordering::Relaxed)
}

/// Writes `text` to `out` under [`print`]'s rules (for tests, and for writers that stand
/// for standard output).
pub fn write_to(out: &mut dyn Write, text: &str) -> anyhow::Result<()> {
    if gone() {
        return Ok(());
    }
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) => checked(e),
    }
}

/// Classifies a failed write to standard output: Ok for a closed pipe (remembered), else
/// the coded error.
pub fn checked(e: std::io::Error) -> anyhow::Result<()> {
    if e.kind() == ErrorKind::BrokenPipe {
        GONE.store(true, Ordering::Relaxed);
        return Ok(());
    }
    Err(failed(&e).into())
}

/// The error for output that could not be written.
pub fn failed(e: &std::io::Error) -> CodedError {
    CodedError::new(
        exit::OUTPUT,
        format!("cannot write to standard output: {e} (is the disk full?)"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Failing(ErrorKind);

    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from(self.0))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_full_disk_is_a_coded_error_and_a_closed_pipe_is_quiet() {
        let e = write_to(&mut Failing(ErrorKind::StorageFull), "x").unwrap_err();
        assert_eq!(crate::load::exit_code_of(&e), exit::OUTPUT);
        assert!(e.to_string().contains("cannot write to standard output"));
        assert!(!gone());
        write_to(&mut Failing(ErrorKind::BrokenPipe), "x").unwrap();
        assert!(gone());
    }
}
