//! The terminal side: colour, and writing output so that a closed pipe is a quiet exit.
//!
//! Only the command layer and this module know about terminals; everything below them returns
//! data or text.

pub mod confirm;
pub mod prompt;
pub mod report;
pub mod reporter;

use std::io::{self, IsTerminal, Write};

/// ANSI styling, on or off. Off yields the text unchanged, which is what tests snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Style {
    pub enabled: bool,
}

impl Style {
    fn paint(self, code: &str, text: &str) -> String {
        if self.enabled {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    pub fn bold(self, text: &str) -> String {
        self.paint("1", text)
    }

    pub fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }

    pub fn green(self, text: &str) -> String {
        self.paint("32", text)
    }

    pub fn red(self, text: &str) -> String {
        self.paint("31", text)
    }

    pub fn yellow(self, text: &str) -> String {
        self.paint("33", text)
    }

    pub fn cyan(self, text: &str) -> String {
        self.paint("36", text)
    }
}

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

/// `text` padded with spaces to `width` characters.
pub fn pad(text: &str, width: usize) -> String {
    format!(
        "{text}{}",
        " ".repeat(width.saturating_sub(text.chars().count()))
    )
}

/// When to colour: `--color`, else `NO_COLOR`, else whether the stream is a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ColorChoice {
    #[default]
    Auto,
    Always,
    Never,
}

impl ColorChoice {
    pub fn style_for(self, no_color_set: bool, is_terminal: bool) -> Style {
        Style {
            enabled: match self {
                ColorChoice::Always => true,
                ColorChoice::Never => false,
                ColorChoice::Auto => !no_color_set && is_terminal,
            },
        }
    }
}

pub fn stdout_is_terminal() -> bool {
    io::stdout().is_terminal()
}

pub fn stderr_is_terminal() -> bool {
    io::stderr().is_terminal()
}

/// Writes `text` to stdout in one piece. A closed pipe (`mara … | head`) is not an error.
pub fn print(text: &str) -> crate::error::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(crate::error::Error::Output),
    }
}
