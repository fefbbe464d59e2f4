//! The terminal side: colour, and writing output so that a closed pipe is a quiet exit.
//!
//! Only the command layer and this module know about terminals; everything below them returns
//! data or text.

pub mod confirm;
pub mod ledger;
pub mod prompt;
pub mod recorded;
pub mod report;
pub mod reporter;

pub use crate::style::{ColorChoice, Style};

use std::io::{self, IsTerminal, Write};

/// The width of each column of a table (headers included), in characters; the last column is
/// never padded, so it is left out (0).
pub fn column_widths<const N: usize>(headers: [&str; N], rows: &[[String; N]]) -> [usize; N] {
    let mut widths = [0; N];
    for (c, width) in widths.iter_mut().enumerate().take(N.saturating_sub(1)) {
        *width = rows
            .iter()
            .map(|r| r[c].chars().count())
            .chain([headers[c].chars().count()])
            .max()
            .unwrap_or(0);
    }
    widths
}

/// A plain table: the headers, then each row, columns two spaces apart, every line after
/// `indent` and without trailing spaces.
pub fn table<const N: usize>(indent: &str, headers: [&str; N], rows: &[[String; N]]) -> String {
    let widths = column_widths(headers, rows);
    let line = |cells: [&str; N]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(cell, width)| pad(cell, width))
            .collect();
        format!("{indent}{}\n", padded.join("  ").trim_end())
    };
    let mut text = line(headers);
    for row in rows {
        text.push_str(&line(std::array::from_fn(|c| row[c].as_str())));
    }
    text
}

/// `text` padded with spaces to `width` characters.
pub fn pad(text: &str, width: usize) -> String {
    format!(
        "{text}{}",
        " ".repeat(width.saturating_sub(text.chars().count()))
    )
}

/// Which of the standard streams are terminals.
pub fn terminals() -> crate::settings::Terminals {
    crate::settings::Terminals {
        stdin: io::stdin().is_terminal(),
        stdout: stdout_is_terminal(),
        stderr: stderr_is_terminal(),
    }
}

pub fn stdout_is_terminal() -> bool {
    io::stdout().is_terminal()
}

pub fn stderr_is_terminal() -> bool {
    io::stderr().is_terminal()
}

/// Whether whoever read stdout is gone (`mara logs --follow | head -1`, once `head` has its
/// line): a pipe whose reading end is closed says so before anything more is written to it, so a
/// command that waits between writes can stop at once rather than at its next line.
pub fn stdout_closed() -> bool {
    let mut fd = libc::pollfd {
        fd: libc::STDOUT_FILENO,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd, and no wait.
    let ready = unsafe { libc::poll(&mut fd, 1, 0) };
    ready > 0 && fd.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// Writes `text` to stderr in one piece; a closed or failing stderr (`mara … 2>&1 >/dev/null |
/// head -3`) drops it. A message is never worth a run: the run goes on and is recorded as it
/// ends (docs/decisions.md, "A closed pipe ends output, not the run"). `errln!` is the
/// `eprintln!` of mara's own code, which never uses the standard one (tests/architecture.rs).
pub fn eprint(text: &str) {
    let _ = io::stderr().lock().write_all(text.as_bytes());
}

/// `eprintln!` that never panics: see `eprint`.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::ui::eprint(&format!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use errln;

/// What a command says of what it did or found, beside the output it was asked for ("No run
/// holds stack dev.", "Removed `a:b` from …"): written as `print` does, and not at all with `-q`,
/// which says only what went wrong (docs/decisions.md, "Help and flags").
pub fn note(settings: &crate::settings::Settings, text: &str) -> crate::error::Result<()> {
    match settings.verbosity < 0 {
        true => Ok(()),
        false => print(text),
    }
}

/// Writes to stdout the items of the pages `next` gives, until it gives none, as one JSON array
/// and a newline — byte for byte what `serde_json::to_string_pretty` of them all would be — each
/// as it comes, through a buffer: one page in memory at a time, however long the array. A closed
/// pipe ends it quietly, as `print`, and asks for no more pages.
pub fn print_json_array<T: serde::Serialize>(
    mut next: impl FnMut() -> crate::error::Result<Option<Vec<T>>>,
) -> crate::error::Result<()> {
    use serde::ser::{SerializeSeq, Serializer};
    let closed = std::rc::Rc::new(std::cell::Cell::new(false));
    let out = UntilClosed {
        out: io::BufWriter::new(io::stdout().lock()),
        closed: closed.clone(),
    };
    let failed = |e: serde_json::Error| crate::error::Error::Output(io::Error::other(e));
    let mut json = serde_json::Serializer::pretty(out);
    let mut array = (&mut json).serialize_seq(None).map_err(failed)?;
    while !closed.get()
        && let Some(page) = next()?
    {
        for item in &page {
            array.serialize_element(item).map_err(failed)?;
        }
    }
    array.end().map_err(failed)?;
    let mut out = json.into_inner();
    out.write_all(b"\n")
        .and_then(|()| out.flush())
        .map_err(crate::error::Error::Output)
}

/// A writer whose closed pipe (`mara … | head`) is where its reader stopped: said in `closed`,
/// and what follows dropped.
struct UntilClosed<W> {
    out: W,
    closed: std::rc::Rc<std::cell::Cell<bool>>,
}

impl<W: Write> UntilClosed<W> {
    fn quiet(&self, result: io::Result<()>) -> io::Result<()> {
        match result {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed.set(true);
                Ok(())
            }
            other => other,
        }
    }
}

impl<W: Write> Write for UntilClosed<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.closed.get() {
            return Ok(buf.len());
        }
        let written = self.out.write_all(buf);
        self.quiet(written).map(|()| buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.closed.get() {
            return Ok(());
        }
        let flushed = self.out.flush();
        self.quiet(flushed)
    }
}

/// Writes `text` to stdout in one piece. A closed pipe (`mara … | head`) is not an error.
pub fn print(text: &str) -> crate::error::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(crate::error::Error::Output),
    }
}
