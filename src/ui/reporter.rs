//! What the user sees while a run goes on (SPEC §6.3), from the scheduler's events.
//!
//! On a terminal: one live line per running project (spinner, path, elapsed time) under the
//! scrolling output. Without one, or in CI: every line prefixed with `[project]`, no progress
//! bars. `--log-order grouped` holds each project's lines back and prints them in one block when
//! it ends. A line is always written whole, so parallel projects never interleave mid-line.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::Style;
use crate::run::scheduler::Event;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogOrder {
    /// Lines as they come, from every running project
    #[default]
    Stream,
    /// Each project's lines in one block when it ends
    Grouped,
}

/// Where plain output goes: stdout, or stderr when stdout carries JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Stdout,
    Stderr,
}

pub struct Reporter {
    live: Option<(MultiProgress, BTreeMap<usize, ProgressBar>)>,
    order: LogOrder,
    style: Style,
    target: Target,
    quiet: bool,
    held: BTreeMap<usize, Vec<String>>,
    verb: &'static str,
}

impl Reporter {
    pub fn new(
        live: bool,
        order: LogOrder,
        style: Style,
        target: Target,
        quiet: bool,
        verb: &'static str,
    ) -> Reporter {
        let live = live.then(|| {
            (
                MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
                BTreeMap::new(),
            )
        });
        Reporter {
            live,
            order,
            style,
            target,
            quiet,
            held: BTreeMap::new(),
            verb,
        }
    }

    pub fn handle(&mut self, event: Event) {
        match event {
            Event::Started { index, path } => {
                if let Some((multi, bars)) = &mut self.live {
                    let bar = multi.add(ProgressBar::new_spinner());
                    let template = if self.style.enabled {
                        "{spinner:.cyan} {msg} {elapsed:.dim}"
                    } else {
                        "{spinner} {msg} {elapsed}"
                    };
                    bar.set_style(
                        ProgressStyle::with_template(template).expect("a valid template"),
                    );
                    bar.set_message(format!("{} {path}", self.verb));
                    bar.enable_steady_tick(Duration::from_millis(100));
                    bars.insert(index, bar);
                } else if !self.quiet && self.order == LogOrder::Stream {
                    let line = format!(
                        "{} {}",
                        self.prefix(&path),
                        self.style.dim(&format!("{} started", self.verb))
                    );
                    self.write(&line);
                }
            }
            Event::Line {
                index, path, text, ..
            } => {
                if self.quiet {
                    return;
                }
                let line = format!("{} {text}", self.prefix(&path));
                match self.order {
                    LogOrder::Grouped => self.held.entry(index).or_default().push(line),
                    LogOrder::Stream => self.write(&line),
                }
            }
            Event::Finished { index, report } => {
                if let Some((_, bars)) = &mut self.live
                    && let Some(bar) = bars.remove(&index)
                {
                    bar.finish_and_clear();
                }
                let held = self.held.remove(&index).unwrap_or_default();
                for line in held {
                    self.write(&line);
                }
                let took = report
                    .duration_ms
                    .map(|ms| {
                        format!(
                            " in {}",
                            crate::run::clock::human(Duration::from_millis(ms))
                        )
                    })
                    .unwrap_or_default();
                let detail = match (&report.reason, &report.changes) {
                    (Some(reason), _) => format!(": {reason}"),
                    (None, Some(changes)) => {
                        format!(" ({})", crate::engine::changes_summary(changes))
                    }
                    (None, None) => String::new(),
                };
                let status = match report.status {
                    "succeeded" | "unchanged" => self.style.green(report.status),
                    "failed" => self.style.red(report.status),
                    other => self.style.yellow(other),
                };
                if !self.quiet || report.status == "failed" {
                    let line = format!("{} {status}{took}{detail}", self.prefix(&report.path));
                    self.write(&line);
                }
            }
        }
    }

    /// Clears the live lines.
    pub fn finish(&mut self) {
        if let Some((multi, bars)) = &mut self.live {
            for (_, bar) in std::mem::take(bars) {
                bar.finish_and_clear();
            }
            let _ = multi.clear();
        }
    }

    fn prefix(&self, path: &str) -> String {
        self.style.cyan(&format!("[{path}]"))
    }

    fn write(&self, line: &str) {
        if let Some((multi, _)) = &self.live {
            let _ = multi.println(line);
            return;
        }
        let result = match self.target {
            Target::Stdout => writeln!(std::io::stdout().lock(), "{line}"),
            Target::Stderr => writeln!(std::io::stderr().lock(), "{line}"),
        };
        // A closed pipe is not the run's problem: the run goes on, quietly.
        let _ = result;
    }
}
