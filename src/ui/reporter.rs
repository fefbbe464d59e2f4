//! What the user sees while a run goes on (docs/commands.md, "What you see"): a sink of the run's
//! events that writes to the writers it is given.
//!
//! On a terminal: one live line per running project (spinner, path, elapsed time) under the
//! scrolling output. Without one, or in CI: every line prefixed with `[project]`, no progress
//! bars. `--log-order grouped` holds each project's lines back and prints them in one block when
//! it ends. A line is always written whole, so parallel projects never interleave mid-line. The
//! interruption notice goes to the notices writer and stays there: with the live view, the bars
//! are cleared around every line, never over one.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::Style;
use crate::run::events::{Event, Question, Sink};
use crate::run::interrupt::{Cause, InterruptLevel};
pub use crate::settings::run::LogOrder;
use crate::status::ProjectStatus;

/// How the reporter shows a run.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Draw the live view (spinners) on the terminal.
    pub live: bool,
    pub order: LogOrder,
    pub style: Style,
    /// `-q`: only what went wrong.
    pub quiet: bool,
    /// The verb of the run (`up`, `preview`, …), shown on each live line.
    pub verb: &'static str,
}

/// A writer the reporter owns.
pub type Output = Box<dyn Write + Send>;

/// The live view: a line per running project above one that counts what is done.
struct Live {
    multi: MultiProgress,
    bars: BTreeMap<usize, ProgressBar>,
    /// "3 of 15 done", once the run says how many projects it has.
    total: Option<ProgressBar>,
}

pub struct Reporter {
    options: Options,
    live: Option<Live>,
    /// Cancelled by `mara cancel`: an engine's "press ^C again" is not for anyone here.
    cancel_requested: bool,
    held: BTreeMap<usize, Vec<String>>,
    /// Where the projects' lines go.
    out: Output,
    /// Where notices go (the interruption): standard error.
    notices: Output,
    /// Who is asked whether a project's new plan applies (`Event::Asks`); none: nobody, and
    /// the answer is no.
    asker: Option<Box<dyn crate::configure::Prompter + Send>>,
}

impl Reporter {
    pub fn new(options: Options, out: Output, notices: Output) -> Reporter {
        let live = options.live.then(|| Live {
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
            bars: BTreeMap::new(),
            total: None,
        });
        Reporter {
            options,
            live,
            cancel_requested: false,
            held: BTreeMap::new(),
            out,
            notices,
            asker: None,
        }
    }

    /// The reporter asking `asker` whether a project's new plan applies.
    pub fn asking(mut self, asker: Box<dyn crate::configure::Prompter + Send>) -> Reporter {
        self.asker = Some(asker);
        self
    }

    /// A project's new plan differs from the approved one: shown, and asked about (yes, no, or
    /// its details first). An error asking is a no.
    fn ask(&mut self, path: &str, question: &Question) {
        let Some(asker) = self.asker.as_mut() else {
            return question.answer(false);
        };
        let style = self.options.style;
        let said = format!(
            "\n{}\n  {}\n",
            style.bold(&format!("{path}: its new plan is not the one you approved")),
            question.why
        );
        let mut ask = || -> crate::error::Result<bool> {
            asker.say(&said);
            let choices = ["yes", "no", "details"].map(String::from);
            loop {
                match asker.choose(&format!("Apply {path}'s new plan?"), &choices, 1)? {
                    0 => return Ok(true),
                    1 => return Ok(false),
                    _ => asker.say(&format!("{}\n", question.plan.join("\n"))),
                }
            }
        };
        let yes = match &self.live {
            Some(live) => live.multi.suspend(ask),
            None => ask(),
        };
        question.answer(yes.unwrap_or(false));
    }

    fn prefix(&self, path: &str) -> String {
        self.options.style.cyan(&format!("[{path}]"))
    }

    /// Writes one whole line, clearing the live lines around it. A closed pipe is not the run's
    /// problem: the run goes on, quietly.
    fn write(&mut self, line: &str, notice: bool) {
        let target = if notice {
            &mut self.notices
        } else {
            &mut self.out
        };
        let mut write = || {
            let _ = writeln!(target, "{line}").and_then(|()| target.flush());
        };
        match &self.live {
            Some(live) => live.multi.suspend(write),
            None => write(),
        }
    }

    /// The line that counts what is done, below the projects' (on a terminal).
    fn run_started(&mut self, projects: usize) {
        let style = self.options.style;
        if let Some(live) = &mut self.live {
            let total = live.multi.add(ProgressBar::new(projects as u64));
            let template = match style.enabled {
                true => "{msg:.dim} {pos} of {len} done {elapsed:.dim}",
                false => "{msg} {pos} of {len} done {elapsed}",
            };
            total.set_style(ProgressStyle::with_template(template).expect("a valid template"));
            total.set_message(self.options.verb);
            // Its elapsed time counts on its own, not only when a project ends.
            total.enable_steady_tick(Duration::from_secs(1));
            live.total = Some(total);
        }
    }

    /// A ready project its pool's or engine's budget holds back: a line of its own in the live
    /// view until it starts, or a line in the stream.
    fn waits_for_budget(&mut self, index: usize, path: &str, why: &str) {
        let Options {
            style,
            quiet,
            order,
            ..
        } = self.options;
        if let Some(Live { multi, bars, total }) = &mut self.live {
            let bar = match total {
                Some(total) => multi.insert_before(total, ProgressBar::new_spinner()),
                None => multi.add(ProgressBar::new_spinner()),
            };
            let template = match style.enabled {
                true => "  {msg:.dim}",
                false => "  {msg}",
            };
            bar.set_style(ProgressStyle::with_template(template).expect("a valid template"));
            bar.set_message(format!("{path} {why}"));
            bar.tick();
            bars.insert(index, bar);
        } else if !quiet && order == LogOrder::Stream {
            let line = format!("{} {}", self.prefix(path), style.dim(why));
            self.write(&line, false);
        }
    }

    fn started(&mut self, index: usize, path: &str) {
        let Options {
            style,
            verb,
            quiet,
            order,
            ..
        } = self.options;
        if let Some(Live { multi, bars, total }) = &mut self.live {
            // In place of the line that said it waited for a budget.
            if let Some(waited) = bars.remove(&index) {
                waited.finish_and_clear();
            }
            // Above the count, which stays the last line.
            let bar = match total {
                Some(total) => multi.insert_before(total, ProgressBar::new_spinner()),
                None => multi.add(ProgressBar::new_spinner()),
            };
            let template = if style.enabled {
                "{spinner:.cyan} {msg} {elapsed:.dim}"
            } else {
                "{spinner} {msg} {elapsed}"
            };
            bar.set_style(ProgressStyle::with_template(template).expect("a valid template"));
            bar.set_message(format!("{verb} {path}"));
            bar.enable_steady_tick(Duration::from_millis(100));
            bars.insert(index, bar);
        } else if !quiet && order == LogOrder::Stream {
            let line = format!(
                "{} {}",
                self.prefix(path),
                style.dim(&format!("{verb} started"))
            );
            self.write(&line, false);
        }
    }

    fn finished(&mut self, index: usize, report: &crate::run::events::ProjectReport) {
        if let Some(live) = &mut self.live {
            if let Some(bar) = live.bars.remove(&index) {
                bar.finish_and_clear();
            }
            if let Some(total) = &live.total {
                total.inc(1);
            }
        }
        for line in self.held.remove(&index).unwrap_or_default() {
            self.write(&line, false);
        }
        let style = self.options.style;
        let took = report
            .duration_ms
            .map(|ms| format!(" in {}", crate::clock::human(Duration::from_millis(ms))))
            .unwrap_or_default();
        let detail = match (&report.reason, &report.changes) {
            (Some(reason), _) => format!(": {reason}"),
            (None, Some(changes)) => format!(" ({})", crate::engine::changes_summary(changes)),
            (None, None) => String::new(),
        };
        let status = super::report::status_word(report.status, style);
        if !self.options.quiet || report.status == ProjectStatus::Failed {
            let line = format!("{} {status}{took}{detail}", self.prefix(&report.path));
            self.write(&line, false);
        }
    }

    /// Clears the live lines, for good: what follows is written as plain lines.
    fn clear(&mut self) {
        if let Some(live) = &mut self.live {
            for (_, bar) in std::mem::take(&mut live.bars) {
                bar.finish_and_clear();
            }
            if let Some(total) = live.total.take() {
                total.finish_and_clear();
            }
            let _ = live.multi.clear();
        }
    }
}

impl Sink for Reporter {
    fn handle(&mut self, event: &Event) {
        match event {
            Event::RunStarted { projects, .. } => self.run_started(*projects),
            Event::ProjectStarted { index, path, .. } => self.started(*index, path),
            Event::Line {
                index, path, text, ..
            } => {
                // Pulumi's answer to the SIGINT a `mara cancel` sent tells a person to press
                // Ctrl-C again, which nobody here can, and mara never needs.
                if self.options.quiet || (self.cancel_requested && text.starts_with("^C received"))
                {
                    return;
                }
                let line = format!("{} {text}", self.prefix(path));
                match self.options.order {
                    LogOrder::Grouped => self.held.entry(*index).or_default().push(line),
                    LogOrder::Stream => self.write(&line, false),
                }
            }
            Event::ProjectFinished { index, report } => self.finished(*index, report),
            Event::Interrupting { level, cause } => {
                let message = match (level, cause) {
                    (InterruptLevel::Kill, _) => "killing the running engine processes",
                    (_, Cause::Signal) => {
                        "interrupted: the running projects are cancelling (Ctrl-C again to kill them)"
                    }
                    (_, Cause::CancelRequest) => {
                        "a cancel was asked (`mara cancel` or the web page; `mara status` says by whom): the running projects are cancelling"
                    }
                };
                // The live lines go first: the notice is not drawn among them, and what
                // follows — the projects winding down — comes as plain lines.
                self.clear();
                self.cancel_requested |= *cause == Cause::CancelRequest;
                let line = self.options.style.yellow(message);
                self.write(&line, true);
            }
            Event::Asks { path, question, .. } => self.ask(path, question),
            Event::Held { index, path, why } => self.waits_for_budget(*index, path, why),
            Event::RunFinished { .. } => self.clear(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Changes;
    use crate::run::events::{Finished, Outcome, ProjectReport};
    use crate::run::process::Stream;
    use crate::status::RunStatus;
    use std::sync::{Arc, Mutex};

    /// A writer whose text the test reads afterwards.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    fn report(path: &str, outcome: Outcome, changes: Option<Changes>) -> ProjectReport {
        let mut report = ProjectReport::new(
            path.into(),
            None,
            Finished {
                exit_code: Some(0),
                changes,
                ..Finished::without_running(outcome)
            },
        );
        report.duration_ms = Some(1200);
        report
    }

    /// Two projects in parallel, their lines interleaved, the first failing; then an interruption.
    fn events() -> Vec<Event> {
        let line = |index: usize, path: &str, text: &str| Event::Line {
            index,
            path: path.into(),
            stream: Stream::Stdout,
            text: text.into(),
        };
        vec![
            Event::RunStarted {
                operation: crate::engine::Operation::Up,
                projects: 2,
                at: std::time::UNIX_EPOCH,
            },
            Event::ProjectStarted {
                index: 0,
                path: "infra/vpc".into(),
                at: std::time::UNIX_EPOCH,
            },
            Event::ProjectStarted {
                index: 1,
                path: "infra/dns".into(),
                at: std::time::UNIX_EPOCH,
            },
            line(0, "infra/vpc", "create aws:ec2:Vpc main"),
            line(1, "infra/dns", "create aws:route53:Zone zone"),
            line(0, "infra/vpc", "error: quota exceeded"),
            Event::ProjectFinished {
                index: 0,
                report: Box::new(report(
                    "infra/vpc",
                    Outcome::Failed {
                        code: Some(1),
                        reason: "failed: quota exceeded".into(),
                    },
                    None,
                )),
            },
            Event::Interrupting {
                level: InterruptLevel::Graceful,
                cause: Cause::Signal,
            },
            line(1, "infra/dns", "Resources: +1 (1s)"),
            Event::ProjectFinished {
                index: 1,
                report: Box::new(report(
                    "infra/dns",
                    Outcome::Succeeded,
                    Some(Changes::from([("create".into(), 1)])),
                )),
            },
            Event::RunFinished {
                status: RunStatus::Cancelled,
                at: std::time::UNIX_EPOCH,
            },
        ]
    }

    fn shown(live: bool, order: LogOrder, quiet: bool) -> (String, String) {
        let (out, notices) = (Captured::default(), Captured::default());
        let options = Options {
            live,
            order,
            style: Style::default(),
            quiet,
            verb: "up",
        };
        let mut reporter = Reporter::new(options, Box::new(out.clone()), Box::new(notices.clone()));
        if let Some(live) = &reporter.live {
            live.multi.set_draw_target(ProgressDrawTarget::hidden());
        }
        for event in events() {
            reporter.handle(&event);
        }
        (out.text(), notices.text())
    }

    #[test]
    fn streamed_lines_come_as_they_come() {
        let (out, notices) = shown(false, LogOrder::Stream, false);
        insta::assert_snapshot!(out, @r"
        [infra/vpc] up started
        [infra/dns] up started
        [infra/vpc] create aws:ec2:Vpc main
        [infra/dns] create aws:route53:Zone zone
        [infra/vpc] error: quota exceeded
        [infra/vpc] failed in 1.2s: failed: quota exceeded
        [infra/dns] Resources: +1 (1s)
        [infra/dns] succeeded in 1.2s (+1)
        ");
        assert_eq!(
            notices,
            "interrupted: the running projects are cancelling (Ctrl-C again to kill them)\n"
        );
    }

    #[test]
    fn grouped_lines_come_in_one_block_per_project() {
        let (out, _) = shown(false, LogOrder::Grouped, false);
        insta::assert_snapshot!(out, @r"
        [infra/vpc] create aws:ec2:Vpc main
        [infra/vpc] error: quota exceeded
        [infra/vpc] failed in 1.2s: failed: quota exceeded
        [infra/dns] create aws:route53:Zone zone
        [infra/dns] Resources: +1 (1s)
        [infra/dns] succeeded in 1.2s (+1)
        ");
    }

    #[test]
    fn the_live_view_prints_the_same_lines_without_the_start_lines() {
        let (out, notices) = shown(true, LogOrder::Stream, false);
        insta::assert_snapshot!(out, @r"
        [infra/vpc] create aws:ec2:Vpc main
        [infra/dns] create aws:route53:Zone zone
        [infra/vpc] error: quota exceeded
        [infra/vpc] failed in 1.2s: failed: quota exceeded
        [infra/dns] Resources: +1 (1s)
        [infra/dns] succeeded in 1.2s (+1)
        ");
        assert!(notices.starts_with("interrupted:"), "{notices}");
    }

    #[test]
    fn quiet_shows_only_what_failed() {
        let (out, notices) = shown(false, LogOrder::Stream, true);
        assert_eq!(out, "[infra/vpc] failed in 1.2s: failed: quota exceeded\n");
        assert!(!notices.is_empty(), "an interruption is always said");
    }

    /// A terminal that keeps what is drawn on it.
    #[derive(Debug, Clone, Default)]
    struct Screen(Arc<Mutex<String>>);

    impl indicatif::TermLike for Screen {
        fn width(&self) -> u16 {
            80
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.write_str(&format!("{s}\n"))
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.0.lock().unwrap().push_str(s);
            Ok(())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_live_view_counts_what_is_done_and_goes_at_an_interruption() {
        let options = Options {
            live: true,
            order: LogOrder::Stream,
            style: Style::default(),
            quiet: false,
            verb: "up",
        };
        let (out, notices) = (Captured::default(), Captured::default());
        let mut reporter = Reporter::new(options, Box::new(out), Box::new(notices));
        let screen = Screen::default();
        let live = reporter.live.as_ref().unwrap();
        live.multi
            .set_draw_target(ProgressDrawTarget::term_like(Box::new(screen.clone())));
        let mut events = events().into_iter();
        let mut drawn_when = |reporter: &mut Reporter, n: usize| {
            for event in events.by_ref().take(n) {
                reporter.handle(&event);
            }
            let live = reporter.live.as_ref().unwrap();
            if let Some(total) = &live.total {
                // Drawn now, not on its ticker's next turn (a ticking bar draws only then).
                total.disable_steady_tick();
                total.tick();
            }
            screen.0.lock().unwrap().clone()
        };
        // Started, both projects running: none done yet.
        assert!(drawn_when(&mut reporter, 3).contains("up 0 of 2 done"));
        // The first ends.
        assert!(drawn_when(&mut reporter, 4).contains("up 1 of 2 done"));
        // Interrupted: no live line is left to draw among the notice and what follows.
        drawn_when(&mut reporter, 1);
        let live = reporter.live.as_ref().unwrap();
        assert!(live.bars.is_empty() && live.total.is_none());
    }

    #[test]
    fn an_engine_s_press_ctrl_c_again_is_not_shown_after_mara_cancel() {
        let pulumi =
            "^C received; cancelling. If you would like to terminate immediately, press ^C again.";
        let run = |cause: Cause| {
            let out = Captured::default();
            let options = Options {
                live: false,
                order: LogOrder::Stream,
                style: Style::default(),
                quiet: false,
                verb: "up",
            };
            let mut reporter = Reporter::new(
                options,
                Box::new(out.clone()),
                Box::new(Captured::default()),
            );
            reporter.handle(&Event::Interrupting {
                level: InterruptLevel::Graceful,
                cause,
            });
            reporter.handle(&Event::Line {
                index: 0,
                path: "infra/vpc".into(),
                stream: Stream::Stdout,
                text: pulumi.into(),
            });
            out.text()
        };
        assert_eq!(run(Cause::CancelRequest), "");
        assert_eq!(run(Cause::Signal), format!("[infra/vpc] {pulumi}\n"));
    }
}
