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

/// Writes `text` to stdout in one piece. A closed pipe (`mara … | head`) is not an error.
pub fn print(text: &str) -> crate::error::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(crate::error::Error::Output),
    }
}
