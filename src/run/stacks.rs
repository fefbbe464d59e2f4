//! Which selected projects have the stack, before a `destroy` or `refresh` (docs/commands.md, "up,
//! preview, refresh, destroy"): neither ever creates a stack, and a project whose stack does not
//! exist is not touched. Each Pulumi project's CLI is asked, read-only (`stack ls --json`), at
//! most `width` at once, unless the ledger knows it has the stack; a project that cannot be asked
//! counts as having it (the run then finds out, and says so).

use std::collections::{BTreeMap, BTreeSet};

use crate::engine::EngineKind;
use crate::engine::pulumi::{self, Pulumi};
use crate::graph::Plan;
use crate::run::interrupt::Interrupt;
use crate::run::process::run_step;
use crate::workspace::Workspace;

/// What the projects' engines said.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Found {
    /// The selected projects (graph index) without the stack.
    pub absent: BTreeSet<usize>,
    /// Every stack the asked projects have, for the message when none has this one.
    pub stacks: BTreeSet<String>,
    /// Whether every selected project was asked (none is a command or Terraform project, and
    /// every answer could be read).
    pub all_asked: bool,
}

/// Asks each selected Pulumi project's CLI which stacks it has; an interruption reaches the
/// processes asking (the caller asks `interrupt` whether one came).
pub fn find(
    selected: &Plan<'_>,
    workspace: &Workspace,
    pulumi: &Pulumi,
    env: &BTreeMap<String, String>,
    width: usize,
    interrupt: &Interrupt,
    known: &BTreeSet<String>,
) -> Found {
    let order = selected.order();
    let answers = crate::parallel::map_with(width, order.len(), |k| {
        let project = selected.graph.project(order[k]);
        if project.engine_or(workspace.settings.engine) != EngineKind::Pulumi {
            return None;
        }
        // The ledger knows it has the stack: not asked (if it is gone after all, the operation
        // says so, and the project is reported without it).
        if known.contains(&project.path) {
            return Some(vec![pulumi.stack.clone()]);
        }
        let step = pulumi.list_step(&workspace.project_dir(&project.path));
        if interrupt.is_interrupted() {
            return None;
        }
        let finished = run_step(&step, env, None, interrupt).ok()?;
        if finished.code != Some(0) {
            return None;
        }
        pulumi::stack_names(&finished.stdout)
    });
    let mut found = Found {
        all_asked: answers.iter().all(Option::is_some),
        ..Found::default()
    };
    for (&i, names) in order.iter().zip(answers) {
        let Some(names) = names else { continue };
        if !names.contains(&pulumi.stack) {
            found.absent.insert(i);
        }
        found.stacks.extend(names);
    }
    found
}
