//! What a declined `up` leaves (docs/commands.md, "Confirmation"; exit 6): nothing it made. The
//! stacks its confirmation's preview created (empty: `stack rm` without `--force`, their files
//! kept), the secrets it stored (the secrets project's stack, when this run made its
//! configuration, else each key), and a first run's answers (the shared file as it was) are
//! taken back, in that order; whatever cannot be is said, with why, and kept.

use super::{Loaded, Ready};
use crate::engine::pulumi::Pulumi;
use crate::engine::{Step, StepKind};
use crate::error::{Error, Problem};
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

impl Stored {
    /// What preparing `loaded` for `operation` made: a first run's answers, written to
    /// `config`; the `secrets` stored. The preview's stacks are added once it has run.
    pub(super) fn of(
        operation: crate::engine::Operation,
        loaded: &Loaded<'_>,
        workspace: &crate::workspace::Workspace,
        config: &StackConfigFile,
        secrets: &crate::run::prepare::Secrets,
    ) -> Stored {
        let first = operation == crate::engine::Operation::Up && loaded.config.is_first_run();
        Stored {
            first_run: first.then(|| {
                let shown = workspace.display(config.path()).display().to_string();
                (loaded.config.clone(), shown)
            }),
            secrets: secrets.keys().cloned().collect(),
            secrets_file_before: !matches!(loaded.stored, StackConfigFile::Missing(_)),
            created: Vec::new(),
        }
    }
}

/// What a take-back came to: what it took away, and what it kept, with why.
#[derive(Default)]
pub(super) struct TakenBack {
    pub taken: Vec<String>,
    pub kept: Vec<String>,
}

impl TakenBack {
    /// `step` run for `what`: taken when it succeeds, else kept with Pulumi's last words.
    fn run(&mut self, at: (&Ready, &Interrupt), step: Step, what: String) {
        self.ran(at, step, what, false);
    }

    /// `run` for a stack's removal, where Pulumi's refusal of a stack that holds resources
    /// means it was there before the run: not the run's to take back, and not said.
    fn run_unless_held(&mut self, at: (&Ready, &Interrupt), step: Step, what: String) {
        self.ran(at, step, what, true);
    }

    fn ran(
        &mut self,
        (ready, interrupt): (&Ready, &Interrupt),
        step: Step,
        what: String,
        held: bool,
    ) {
        match run_step(&step, &ready.context.env, None, interrupt) {
            Ok(done) if done.code == Some(0) => self.taken.push(what),
            Ok(done) if held && done.stderr.contains("still has resources") => {}
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
    // Each secret this run stored, whatever its stack held before.
    for key in &stored.secrets {
        let path =
            crate::workspace::config_path::ConfigPath::parse(key).is_ok_and(|p| p.is_nested());
        let step = pulumi.rm_step(&secrets_dir, key, path);
        done.run(at, step, format!("the secret `{key}`"));
    }
    // Its stack, when this run made it (its preview did, or it had no configuration before the
    // secrets were stored): its file goes with it only when the run made that too. A stack that
    // holds resources was there before, and is not removed (no `--force`).
    let made = stored.created.contains(secrets_project)
        || (!stored.secrets_file_before && !stored.secrets.is_empty());
    if made && done.kept.is_empty() {
        let own = !stored.secrets_file_before;
        let step = pulumi.remove_stack_step(StepKind::Cleanup, &secrets_dir, own);
        done.run_unless_held(at, step, format!("the empty stack of {secrets_project}"));
    }
    if let Some((before, shown)) = &stored.first_run {
        // With anything kept, the answers stay too: the stack is then not new, and its next
        // run reads them rather than asking again over what is left.
        let said = format!("the first run's answers in {shown}");
        match done.kept.is_empty() {
            true => match restore(before, &ready.config) {
                Ok(()) => done.taken.push(said),
                Err(why) => done.kept.push(format!("{said} ({why})")),
            },
            false => done.kept.push(format!("{said} (with what was kept)")),
        }
    }
    done
}

/// The shared configuration as it was before a first run wrote its answers (`written`): no
/// file, or the file without keys as it was — unless it changed since it was written (a
/// `config set` while the question waited), which is kept.
fn restore(before: &StackConfigFile, written: &StackConfigFile) -> std::result::Result<(), String> {
    let now = crate::files::read_to_string(written.path()).unwrap_or_default();
    if now != written.text() {
        return Err("changed since the first run wrote it".into());
    }
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
