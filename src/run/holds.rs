//! Whether the plans an `up --plans DIR` applies still hold — all of them, before it applies any
//! (docs/commands.md, "Saved plans"): what each project was planned against, as it is now (its
//! namespace of the shared configuration and its code, `against`; its inputs from projects the
//! run does not apply; each Terraform module's state, read through its engine, `states`), and
//! the projects never previewed. What only the run can tell (an upstream's apply giving another
//! value than planned) is checked as each project's turn comes (`run/project/approve.rs`).
//!
//! `preview --save-plans` keeps the same `against` in its manifest, so that the two are read
//! one way.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::engine::{ProjectFiles, StateVersion};
use crate::error::{Problem, Result};
use crate::graph::Plan;
use crate::run::approval::{self, Against};
use crate::run::inputs::Known;
use crate::run::interrupt::Interrupt;
use crate::run::plan::RunPlan;
use crate::run::process::run_step;
use crate::workspace::Workspace;
use crate::workspace::pulumi_project::PulumiProject;

/// What each selected project is planned against now, by path: its namespace's keys of the
/// shared configuration (`config`) and its code. A Pulumi project's namespace is its name,
/// read from its `Pulumi.yaml`.
pub fn against(
    selected: &Plan<'_>,
    workspace: &Workspace,
    stack: &str,
    config: &Map<String, Value>,
) -> Result<BTreeMap<String, Against>> {
    let default_engine = workspace.settings.engine;
    let order = selected.order();
    let projects: Vec<_> = order.iter().map(|&i| selected.graph.project(i)).collect();
    let dirs: Vec<_> = (projects.iter())
        .map(|p| workspace.project_dir(&p.path))
        .collect();
    // A Pulumi project's namespace is its name, in its project file.
    let named = |k: usize| {
        projects[k].engine_or(default_engine).project_files() == ProjectFiles::PulumiProject
    };
    let names: Vec<Option<String>> = crate::parallel::map(projects.len(), |k| {
        let found = named(k).then(|| PulumiProject::load_each(&dirs[k..=k]).pop().flatten());
        found.flatten().and_then(|read| read.ok()).map(|p| p.name)
    });
    let code = crate::fingerprint::code(
        selected,
        |p| workspace.project_dir(p),
        &workspace.state_dir(),
        stack,
    )
    .map_err(|error| error.relative_to(&workspace.root))?;
    Ok((order.iter().zip(projects.iter()).zip(names))
        .map(|((i, project), name)| {
            let leaf = project.path.rsplit('/').next().unwrap_or(&project.path);
            let engine = project.engine_or(default_engine);
            let namespace = engine.config_namespace(leaf, name.as_deref());
            let against = Against {
                config: namespace.map_or_else(BTreeMap::new, |n| Against::config_of(config, &n)),
                code: code.get(i).cloned(),
            };
            (project.path.clone(), against)
        })
        .collect())
}

/// Each approved Terraform module's state version now (`None`: it could not be read, said as
/// such), by path, read through its engine (`init` first when its working directory needs it),
/// `width` at once; an interruption reaches the processes.
pub fn states(
    plan: &RunPlan,
    env: &BTreeMap<String, String>,
    width: usize,
    interrupt: &Interrupt,
) -> BTreeMap<String, std::result::Result<StateVersion, String>> {
    let reading: Vec<_> = (plan.projects.iter())
        .filter_map(|p| {
            let approval = p.approval.as_ref()?;
            let steps = &approval.steps.read_state;
            (approval.approved.state.is_some() && !steps.is_empty()).then_some((p, steps))
        })
        .collect();
    let read = crate::parallel::map_with(width, reading.len(), |k| {
        let (project, steps) = reading[k];
        read_state(project.engine, steps, env, interrupt)
            .map_err(|why| format!("{}: {why}", project.path))
    });
    (reading.iter().map(|(p, _)| p.path.clone()))
        .zip(read)
        .collect()
}

/// Runs `steps` (the last one reads the state), each step's repair once when it asks for one.
fn read_state(
    engine: crate::engine::EngineKind,
    steps: &[crate::engine::Step],
    env: &BTreeMap<String, String>,
    interrupt: &Interrupt,
) -> std::result::Result<StateVersion, String> {
    let mut last = None;
    for step in steps {
        let mut finished = run_step(step, env, None, interrupt).map_err(|e| e.to_string())?;
        if !step.succeeded(finished.code)
            && let Some(repair) = step.repairs.first()
            && engine.needs_init(&finished.stderr)
        {
            let repaired =
                run_step(&repair.step, env, None, interrupt).map_err(|e| e.to_string())?;
            if repaired.code == Some(0) {
                finished = run_step(step, env, None, interrupt).map_err(|e| e.to_string())?;
            }
        }
        if !step.succeeded(finished.code) {
            let said = crate::run::process::last_error(&finished.stderr).unwrap_or("it failed");
            return Err(format!("reading its state failed: {said}"));
        }
        if let Some(stamp) = &step.stamp {
            crate::fingerprint::record_init(stamp);
        }
        last = Some(finished.stdout);
    }
    let stdout = last.unwrap_or_default();
    engine
        .state_version(&stdout)
        .ok_or_else(|| "reading its state failed: `state pull` printed no state".to_string())
}

/// Every reason the approved plans of `plan` do not hold now, each a problem naming its project;
/// empty when all do. `against` and `states` are as read now, `before` the outputs of the
/// projects the run does not apply (`Survey::inputs`).
pub fn refusals(
    plan: &RunPlan,
    against: &BTreeMap<String, Against>,
    states: &BTreeMap<String, std::result::Result<StateVersion, String>>,
    before: &BTreeMap<String, Known>,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    // Only what the run does not apply is as it will be: the others' values come as it goes.
    let in_run: std::collections::BTreeSet<&str> =
        plan.projects.iter().map(|p| p.path.as_str()).collect();
    let before: BTreeMap<String, Known> = (before.iter())
        .filter(|(path, _)| !in_run.contains(path.as_str()))
        .map(|(path, known)| (path.clone(), known.clone()))
        .collect();
    for project in &plan.projects {
        let Some(approval) = &project.approval else {
            continue;
        };
        let state = match states.get(&project.path) {
            Some(Ok(state)) => Some(state.clone()),
            Some(Err(why)) => {
                problems.push(Problem::new(why.clone()));
                continue;
            }
            None => None,
        };
        let now = approval::Now {
            against: against.get(&project.path).cloned().unwrap_or_default(),
            inputs: inputs_now(&project.inputs, &before),
            state,
        };
        for why in approval::still_holds(&approval.approved, &now, approval.replan) {
            problems.push(Problem::new(format!(
                "{}: the approved plan no longer holds: {why}",
                project.path
            )));
        }
    }
    problems
}

/// The inputs whose upstreams the run does not apply, as they are now, kept as a plan keeps them.
fn inputs_now(
    inputs: &[crate::run::plan::PlannedInput],
    before: &BTreeMap<String, Known>,
) -> BTreeMap<String, String> {
    (inputs.iter())
        .filter_map(|input| {
            let known = before.get(&input.from)?;
            let value = known.values.get(&input.output)?;
            let secret = known.secret.contains(&input.output);
            let text = crate::run::inputs::as_text(value);
            Some((input.name.clone(), approval::fingerprint(&text, secret)))
        })
        .collect()
}
