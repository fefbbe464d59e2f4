//! `mara state migrate` (docs/commands.md, "State in the ledger"): the stack's state of every
//! project that names no backend of its own, moved into the ledger's server by its engine's own
//! commands — every move checked first, so that nothing moves when the server already holds any
//! of it (a move would replace it).

use std::collections::BTreeMap;
use std::path::Path;

use crate::cli::StateCommand;
use crate::deployment::Deployment;
use crate::engine::state::Migration;
use crate::engine::{EngineKind, Step};
use crate::error::{Error, Problem, Result};
use crate::ledger::{self, Opener};
use crate::run::process::{self, run_blocking};
use crate::settings::{OutputFormat, Settings};
use crate::workspace::mara_toml::StatePlace;
use crate::workspace::stack_config::StackConfigFile;

/// `mara state …`, as typed.
pub fn run(settings: &Settings, command: StateCommand) -> Result<()> {
    let StateCommand::Migrate { from } = command;
    let deployment = Deployment::load(settings)?;
    let root = deployment.files.workspace.root.clone();
    migrate(settings, &deployment, from).map_err(|e| e.relative_to(&root))
}

/// One project's move, as its engine gives it.
struct Move {
    path: String,
    engine: EngineKind,
    migration: Migration,
}

/// Finds what moves, checks it all, moves it, records that the projects have the stack there.
fn migrate(settings: &Settings, deployment: &Deployment, from: Option<String>) -> Result<()> {
    let files = &deployment.files;
    let workspace = &files.workspace;
    let stack = files.required_stack()?;
    if !matches!(workspace.settings.state, StatePlace::Ledger(_)) {
        return Err(Error::usage(
            Problem::new("mara.toml does not say `state = \"ledger\"`: the state has nowhere to move to")
                .hint("add `state = \"ledger\"` to mara.toml first (docs/commands.md, \"State in the ledger\")"),
        ));
    }
    let all = files.environment(settings);
    let mut ledger = Opener::new(ledger::place(workspace, &settings.env)?);
    refuse_while_locked(&mut ledger, stack.name.as_str())?;
    // The ledger's server whatever the environment names: that is what the state leaves.
    let server = crate::deployment::state::server(
        (workspace, &[]),
        &mut ledger,
        &settings.env,
        &BTreeMap::new(),
    )?
    .expect("`state = \"ledger\"` was checked");
    let env = crate::run::prepare::engine_env_in(workspace, &all);
    let config = (files.config.clone())
        .unwrap_or_else(|| StackConfigFile::Missing(workspace.stack_config_file(&stack.name)));
    let engines = crate::run::plan::engines(deployment, stack, &config, (&env, Some(&server)));
    let scratch = workspace.state_dir().join("migrating");
    make_private(&scratch)?;
    // A relative `file://` means the same as in the environment file: under the workspace root.
    let from = (from.or_else(|| all.get("PULUMI_BACKEND_URL").cloned()))
        .map(|url| crate::deployment::absolute_backend_url(&url, &workspace.root));
    let moves: Vec<Move> = (deployment.graph.order().iter())
        .map(|&i| deployment.graph.project(i))
        .filter_map(|project| {
            let engine = project.engine_or(workspace.settings.engine);
            let dir = workspace.project_dir(&project.path);
            let migration =
                engine.migration(&engines, &project.path, &dir, (&scratch, from.as_deref()))?;
            Some(Move {
                path: project.path.clone(),
                engine,
                migration,
            })
        })
        .collect();
    let result = checked_and_moved(&moves, &env, stack.name.as_str());
    let _ = std::fs::remove_dir_all(&scratch);
    let (moved, nothing) = result?;
    let backend = crate::run::stacks::backend_of(&BTreeMap::new(), Some(&server));
    if !moved.is_empty() {
        let moved: Vec<String> = moved.iter().map(|(path, _)| path.clone()).collect();
        (ledger.writable()?).stacks_changed(&backend, stack.name.as_str(), &moved, &[])?;
    }
    let told = Told {
        moved: &moved,
        nothing: &nothing,
        to: &server.url,
        named: all.contains_key("PULUMI_BACKEND_URL"),
    };
    crate::ui::print(&told.render(settings.output))
}

/// A run of the stack holds its lock: its engines are using the state that would move.
fn refuse_while_locked(ledger: &mut Opener, stack: &str) -> Result<()> {
    let Some(opened) = ledger.existing()? else {
        return Ok(());
    };
    match opened.holder(stack)? {
        None => Ok(()),
        Some(holder) => Err(Error::Locked(Box::new(
            Problem::new(format!(
                "stack `{stack}` is locked by a run: {holder}; its engines use the state that would move"
            ))
            .hint("wait for it to end, then migrate"),
        ))),
    }
}

/// Every move checked (is there a state to move; does the server hold one already), then made
/// in order: the projects moved (with what from), and those with nothing to move.
type Moved = (Vec<(String, String)>, Vec<String>);

fn checked_and_moved(moves: &[Move], env: &BTreeMap<String, String>, stack: &str) -> Result<Moved> {
    let mut problems = Vec::new();
    let mut due = Vec::new();
    let mut nothing = Vec::new();
    for each in moves {
        let Migration { found, taken, .. } = &each.migration;
        if !found.is_empty() && !holds(each, found, env, stack)? {
            nothing.push(each.path.clone());
            continue;
        }
        for (what, steps) in taken {
            if holds(each, steps, env, stack)? {
                problems.push(
                    Problem::new(format!(
                        "the ledger's server holds {what} of it already: moving {} there would replace it",
                        each.migration.from
                    ))
                    .subject(each.path.clone()),
                );
            }
        }
        due.push(each);
    }
    if !problems.is_empty() {
        let last = problems.pop().expect("not empty").hint(
            "nothing was moved: compare the two (the engine's own commands read both), and remove the one not wanted",
        );
        problems.push(last);
        return Err(Error::Problems(problems));
    }
    let mut moved = Vec::new();
    for each in due {
        for step in &each.migration.moves {
            ran(each, step, env)?;
        }
        moved.push((each.path.clone(), each.migration.from.clone()));
    }
    Ok((moved, nothing))
}

/// Whether the last of `steps` (each run in turn, stopping at one that fails) says there is a
/// state of `stack`.
/// Whether the state `steps` read holds the stack: `false` when the engine says there is no
/// such stack (or workspace); any other failure (a backend that cannot be read, a login
/// missing, a permission) stops the migration before anything moves, with what the engine said.
fn holds(each: &Move, steps: &[Step], env: &BTreeMap<String, String>, stack: &str) -> Result<bool> {
    let mut last = None;
    for step in steps {
        let finished = run_blocking(step, env, None).map_err(|source| Error::Spawn {
            program: step.program.clone(),
            source,
        })?;
        if finished.code == Some(0) {
            last = Some(finished.stdout);
            continue;
        }
        if (each.engine).is_missing_stack(stack, finished.code, &finished.stderr) {
            return Ok(false);
        }
        let said = process::last_error(&finished.stderr)
            .or_else(|| process::last_error(&finished.stdout))
            .unwrap_or("it failed");
        return Err(Error::config(
            Problem::new(format!("`{}` failed: {said}", step.display()))
                .subject(each.path.clone())
                .hint("nothing was moved: where a Pulumi stack is comes from `--from URL`, else PULUMI_BACKEND_URL, else Pulumi's login; the server needs a role that may use what the backends made (docs/commands.md, \"State in the ledger\")"),
        ));
    }
    Ok(last.is_some_and(|stdout| each.engine.holds_state(&stdout, stack)))
}

/// Runs `step` of a move; when it fails, the project's failure (what the engine said).
fn ran(each: &Move, step: &Step, env: &BTreeMap<String, String>) -> Result<()> {
    let finished = run_blocking(step, env, None).map_err(|source| Error::Spawn {
        program: step.program.clone(),
        source,
    })?;
    if finished.code == Some(0) {
        return Ok(());
    }
    let said = process::last_error(&finished.stderr)
        .or_else(|| process::last_error(&finished.stdout))
        .unwrap_or("it failed");
    Err(Error::config(
        Problem::new(format!("`{}` failed: {said}", step.display()))
            .subject(each.path.clone())
            .hint("what moved before it is in the server; run `mara state migrate` again once this is fixed"),
    ))
}

/// A directory of mara's own for what the moves need (a stack's export), private.
fn make_private(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)))
        .map_err(|e| Error::write(dir, e))
}

/// What the migration says.
struct Told<'a> {
    moved: &'a [(String, String)],
    nothing: &'a [String],
    to: &'a str,
    /// Whether the environment names a Pulumi backend, which wins over the ledger's.
    named: bool,
}

impl Told<'_> {
    fn render(&self, output: OutputFormat) -> String {
        if output == OutputFormat::Json {
            let moved: Vec<_> = (self.moved.iter())
                .map(|(path, from)| serde_json::json!({"project": path, "from": from}))
                .collect();
            let json =
                serde_json::json!({"to": self.to, "moved": moved, "nothing_to_move": self.nothing});
            return format!("{json:#}\n");
        }
        let mut text = String::new();
        for (path, from) in self.moved {
            text.push_str(&format!("{path}: moved {from} into {}\n", self.to));
        }
        for path in self.nothing {
            text.push_str(&format!("{path}: nothing to move\n"));
        }
        if self.moved.is_empty() && self.nothing.is_empty() {
            text.push_str("No project keeps state outside the ledger's server: nothing to move.\n");
        }
        if self.named {
            text.push_str("PULUMI_BACKEND_URL is set (the environment file, or this shell): while it is, the Pulumi projects keep their stacks where it says; remove it to use the ledger's server.\n");
        }
        text
    }
}
