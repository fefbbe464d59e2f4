//! What a declined `up` leaves (docs/commands.md, "Confirmation"; exit 6): nothing it made. The
//! stacks its confirmation's preview created (empty: `stack rm` without `--force`, their files
//! kept), the secrets it stored (the secrets project's stack, when this run made its
//! configuration, else each key), and a first run's answers (the shared file as it was) are
//! taken back, in that order; whatever cannot be is said, with why, and kept.

use super::Ready;
use crate::engine::pulumi::Pulumi;
use crate::engine::{Step, StepKind};
use crate::error::{Error, Problem, plural};
use crate::run::interrupt::Interrupt;
use crate::run::plan::Planner;
use crate::run::process::run_step;
use crate::workspace::stack_config::StackConfigFile;

/// What an `up` had made before its confirmation, for a "no" to take back.
#[derive(Clone)]
pub(super) struct Stored {
    /// A first run's: the shared configuration as it was before the answers were written
    /// (missing, or without keys), and the file as shown.
    pub first_run: Option<(StackConfigFile, String)>,
    /// The secrets it stored, by key.
    pub secrets: Vec<String>,
    /// Whether the secrets project's stack configuration was there before the run.
    pub secrets_file_before: bool,
    /// The projects whose stack the preview created.
    pub created: Vec<String>,
}

/// What a take-back came to: what it took away, and what it kept, with why.
#[derive(Default)]
pub(super) struct TakenBack {
    pub taken: Vec<String>,
    pub kept: Vec<String>,
}

impl TakenBack {
    /// `step` run for `what`: taken when it succeeds, else kept with Pulumi's last words.
    fn run(&mut self, (ready, interrupt): (&Ready, &Interrupt), step: Step, what: String) {
        match run_step(&step, &ready.context.env, None, interrupt) {
            Ok(done) if done.code == Some(0) => self.taken.push(what),
            Ok(done) => {
                let why = crate::run::process::last_error(&done.stderr).unwrap_or("it failed");
                self.kept
                    .push(format!("{what} (`{}`: {why})", step.display()));
            }
            Err(error) => self
                .kept
                .push(format!("{what} ({}: {error})", step.program)),
        }
    }
}

/// Takes back what `stored` says the run made, its steps under the run's `interrupt`.
pub(super) fn take_back(
    planner: &Planner<'_>,
    (ready, interrupt): (&Ready, &Interrupt),
    stored: &Stored,
) -> TakenBack {
    let mut done = TakenBack::default();
    let at = (ready, interrupt);
    let workspace = &planner.deployment.files.workspace;
    let pulumi: Pulumi = planner.pulumi(&ready.config);
    let secrets_project = &workspace.settings.secrets_project;
    for path in stored.created.iter().filter(|p| *p != secrets_project) {
        let dir = workspace.project_dir(path);
        let step = pulumi.remove_stack_step(StepKind::Cleanup, &dir, false);
        done.run(at, step, format!("the empty stack of {path}"));
    }
    let secrets_dir = workspace.project_dir(secrets_project);
    let secrets_stack_new = !stored.secrets_file_before
        && (!stored.secrets.is_empty() || stored.created.contains(secrets_project));
    if secrets_stack_new {
        // Its configuration, which holds the secrets, goes with it.
        let step = pulumi.remove_stack_step(StepKind::Cleanup, &secrets_dir, true);
        let what = format!(
            "the stack of {secrets_project} with the {} {} stored in it",
            stored.secrets.len(),
            plural(stored.secrets.len(), "secret", "secrets")
        );
        done.run(at, step, what);
    } else {
        for key in &stored.secrets {
            let path =
                crate::workspace::config_path::ConfigPath::parse(key).is_ok_and(|p| p.is_nested());
            let step = pulumi.rm_step(&secrets_dir, key, path);
            done.run(at, step, format!("the secret `{key}`"));
        }
    }
    if let Some((before, shown)) = &stored.first_run {
        match restore(before) {
            Ok(()) => done
                .taken
                .push(format!("the first run's answers in {shown}")),
            Err(why) => done
                .kept
                .push(format!("the first run's answers in {shown} ({why})")),
        }
    }
    done
}

/// The shared configuration as it was before a first run wrote its answers: no file, or the
/// file without keys as it was.
fn restore(before: &StackConfigFile) -> std::result::Result<(), String> {
    match before {
        StackConfigFile::Missing(path) => std::fs::remove_file(path).map_err(|e| e.to_string()),
        StackConfigFile::Empty { path, text } => {
            crate::files::rewrite(path, text).map_err(|e| e.to_string())
        }
        StackConfigFile::Present(_) => Ok(()),
    }
}

/// "Not confirmed": nothing deployed, what was taken back, and what could not be (exit 6).
pub(super) fn declined(operation: crate::engine::Operation, done: &TakenBack) -> Error {
    let what = match operation {
        crate::engine::Operation::Destroy => "destroyed",
        _ => "deployed",
    };
    let mut problem = Problem::new(format!("not confirmed: nothing was {what}"));
    let mut said = Vec::new();
    if !done.taken.is_empty() {
        said.push(format!("taken back: {}", done.taken.join("; ")));
    }
    if !done.kept.is_empty() {
        said.push(format!(
            "could not be taken back, and kept: {}",
            done.kept.join("; ")
        ));
    }
    if !said.is_empty() {
        problem = problem.hint(said.join(". "));
    }
    Error::Declined(Box::new(problem))
}
