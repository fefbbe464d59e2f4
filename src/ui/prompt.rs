//! Asking a person: the questions mara puts on a terminal. The code that decides what to ask
//! (`configure`, the confirmations) asks through `configure::Prompter`, so that it neither prints
//! nor prompts itself; this is the terminal's side of that trait, and a scripted one for tests.

pub use crate::configure::Prompter;
use crate::error::{Error, Result};

/// The terminal, through dialoguer, on standard error.
#[derive(Debug, Default)]
pub struct TerminalPrompter;

fn asked(error: dialoguer::Error) -> Error {
    let dialoguer::Error::IO(error) = error;
    Error::Terminal(error)
}

impl Prompter for TerminalPrompter {
    fn say(&mut self, text: &str) {
        eprintln!("{text}");
    }

    fn text(
        &mut self,
        prompt: &str,
        default: Option<&str>,
        check: &dyn Fn(&str) -> std::result::Result<(), String>,
    ) -> Result<String> {
        let theme = dialoguer::theme::SimpleTheme;
        let mut input = dialoguer::Input::<String>::with_theme(&theme)
            .with_prompt(prompt)
            .allow_empty(true);
        if let Some(default) = default {
            input = input.default(default.to_string());
        }
        input
            .validate_with(|answer: &String| check(answer))
            .interact_text()
            .map_err(asked)
    }

    fn choose(&mut self, prompt: &str, items: &[String], default: usize) -> Result<usize> {
        dialoguer::Select::with_theme(&dialoguer::theme::SimpleTheme)
            .with_prompt(prompt)
            .items(items)
            .default(default)
            .interact()
            .map_err(asked)
    }

    fn confirm(&mut self, prompt: &str, default: bool) -> Result<bool> {
        dialoguer::Confirm::with_theme(&dialoguer::theme::SimpleTheme)
            .with_prompt(prompt)
            .default(default)
            .interact()
            .map_err(asked)
    }

    fn secret(&mut self, prompt: &str) -> Result<String> {
        dialoguer::Password::with_theme(&dialoguer::theme::SimpleTheme)
            .with_prompt(prompt)
            .with_confirmation("Repeat it", "The two entries differ; again.")
            .allow_empty_password(true)
            .interact()
            .map_err(asked)
    }
}

/// Answers given in advance, in order, and everything said: for tests of what is asked.
#[cfg(test)]
#[derive(Debug, Default)]
pub struct Scripted {
    pub answers: std::collections::VecDeque<String>,
    /// Every prompt and everything said, in order.
    pub transcript: Vec<String>,
}

#[cfg(test)]
impl Scripted {
    pub fn new<'a>(answers: impl IntoIterator<Item = &'a str>) -> Scripted {
        Scripted {
            answers: answers.into_iter().map(str::to_string).collect(),
            transcript: Vec::new(),
        }
    }

    fn next(&mut self, prompt: &str) -> Result<String> {
        self.transcript.push(format!("? {prompt}"));
        self.answers.pop_front().ok_or_else(|| {
            Error::Terminal(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("no answer scripted for `{prompt}`"),
            ))
        })
    }
}

#[cfg(test)]
impl Prompter for Scripted {
    fn say(&mut self, text: &str) {
        self.transcript.push(text.to_string());
    }

    fn text(
        &mut self,
        prompt: &str,
        default: Option<&str>,
        check: &dyn Fn(&str) -> std::result::Result<(), String>,
    ) -> Result<String> {
        loop {
            let answer = self.next(prompt)?;
            let answer = match (answer.is_empty(), default) {
                (true, Some(default)) => default.to_string(),
                _ => answer,
            };
            match check(&answer) {
                Ok(()) => return Ok(answer),
                Err(reason) => self.transcript.push(format!("! {reason}")),
            }
        }
    }

    fn choose(&mut self, prompt: &str, items: &[String], default: usize) -> Result<usize> {
        let answer = self.next(prompt)?;
        if answer.is_empty() {
            return Ok(default);
        }
        items.iter().position(|i| *i == answer).ok_or_else(|| {
            Error::Terminal(std::io::Error::other(format!("`{answer}` is not a choice")))
        })
    }

    fn confirm(&mut self, prompt: &str, default: bool) -> Result<bool> {
        let answer = self.next(prompt)?;
        Ok(match answer.as_str() {
            "" => default,
            a => a.starts_with('y'),
        })
    }

    fn secret(&mut self, prompt: &str) -> Result<String> {
        self.next(prompt)
    }
}
