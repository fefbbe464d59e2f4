//! The stacks a run finds and leaves (docs/commands.md, "up, preview, refresh, destroy"): which
//! selected projects have the stack before a `destroy` or `refresh` — neither ever creates a
//! stack, and a project whose stack does not exist is not touched — and which have it once a run
//! ends, for the ledger's record of the stacks that exist (`backend_of` keys it).
//!
//! Each Pulumi project's CLI is asked, read-only (`stack ls --json`), at most `width` at once,
//! unless the ledger knows it has the stack; a project that cannot be asked counts as having it
//! (the run then finds out, and says so).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::engine::state::StateServer;
use crate::engine::{Engines, Operation, StepKind};
use crate::error::{Error, Problem, Result};
use crate::graph::Plan;
use crate::ledger::{Ledger, RunRecord};
use crate::run::events::{Outcome, ProjectReport};
use crate::run::interrupt::Interrupt;
use crate::run::plan::RunPlan;
use crate::run::process::run_step;
use crate::run::project::absent;
use crate::status::{ProjectStatus, RunStatus};
use crate::workspace::Workspace;
use crate::workspace::stack::ResolvedStack;

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

impl Found {
    /// Whether the engines say that none of the `selected` projects has the stack.
    pub fn none_has_it(&self, selected: usize) -> bool {
        self.all_asked && self.absent.len() == selected
    }
}

/// The run that destroyed `stack` last, while none of the `selected` projects (paths) was
/// deployed since: the stack's last destroy succeeded, no `up` started after it, and the ledger
/// records none of them as deployed on it (a destroy of a part, `--only`, leaves the rest). A
/// destroy that finds no stack then has nothing to do, and is no mistake (a teardown job run
/// twice); one that finds none while the ledger says projects are deployed is looking in the
/// wrong place (a backend or stack name changed), and says so.
///
/// Asked before the run is recorded: once it is, the stack's last destroy is the run itself.
pub fn destroyed_by<'p>(
    ledger: Option<&dyn Ledger>,
    stack: &str,
    selected: impl IntoIterator<Item = &'p str>,
) -> Result<Option<RunRecord>> {
    let Some(ledger) = ledger else {
        return Ok(None);
    };
    let Some(destroy) = ledger.last_run(stack, Operation::Destroy)? else {
        return Ok(None);
    };
    if destroy.status != RunStatus::Succeeded {
        return Ok(None);
    }
    let up = ledger.last_run(stack, Operation::Up)?;
    if up.is_some_and(|up| up.started > destroy.started) {
        return Ok(None);
    }
    let deployed = ledger.last_fingerprints(stack)?;
    match selected.into_iter().any(|path| deployed.contains_key(path)) {
        true => Ok(None),
        false => Ok(Some(destroy)),
    }
}

/// What a destroy with nothing to do says: which run destroyed the stack, and when.
pub fn already_destroyed(stack: &str, by: &RunRecord) -> String {
    format!(
        "Stack {stack} was destroyed already, by run {} ({}): nothing to do.\n",
        by.run_id,
        by.finished.as_deref().unwrap_or(&by.started)
    )
}

/// Asks each selected project whose engine lists its stacks read-only (Pulumi's) which stacks
/// it has; an interruption reaches the processes asking (the caller asks `interrupt` whether
/// one came).
pub fn find(
    selected: &Plan<'_>,
    workspace: &Workspace,
    engines: &Engines,
    env: &BTreeMap<String, String>,
    width: usize,
    interrupt: &Interrupt,
    known: &BTreeSet<String>,
) -> Found {
    let order = selected.order();
    let stack = engines.stack();
    let answers = crate::parallel::map_with(width, order.len(), |k| {
        let project = selected.graph.project(order[k]);
        let engine = project.engine_or(workspace.settings.engine);
        let dir = workspace.project_dir(&project.path);
        let step = engine.stacks_step(engines, &dir)?;
        let step = engines.keeping_state(engine, &project.path, &dir, step);
        // The ledger knows it has the stack: not asked (if it is gone after all, the operation
        // says so, and the project is reported without it).
        if known.contains(&project.path) {
            return Some(vec![stack.to_string()]);
        }
        if interrupt.is_interrupted() {
            return None;
        }
        let finished = run_step(&step, env, None, interrupt).ok()?;
        if finished.code != Some(0) {
            return None;
        }
        engine.stack_names(&finished.stdout)
    });
    let mut found = Found {
        all_asked: answers.iter().all(Option::is_some),
        ..Found::default()
    };
    for (&i, names) in order.iter().zip(answers) {
        let Some(names) = names else { continue };
        if !names.iter().any(|name| name == stack) {
            found.absent.insert(i);
        }
        found.stacks.extend(names);
    }
    found
}

/// The selected projects a run leaves untouched, with why: for `destroy` and `refresh`, those
/// `found` without the stack (an error when the engines say no selected project has it); for
/// these and `preview`, the manifests whose cluster no kubeconfig reaches (`kubeconfig`, the one
/// the kubectl engine names, does not exist: the cluster was destroyed, or never made).
pub fn untouched(
    operation: Operation,
    selected: &Plan<'_>,
    workspace: &Workspace,
    stack: &ResolvedStack,
    found: Option<Found>,
    kubeconfig: &Path,
) -> Result<BTreeMap<usize, String>> {
    let mut untouched = BTreeMap::new();
    if let Some(found) = found {
        if found.none_has_it(selected.len()) {
            return Err(no_such_stack(stack, &found.stacks));
        }
        let reason = match operation {
            Operation::Drift => crate::run::project::not_checked(stack.name.as_str()),
            _ => absent(stack.name.as_str()),
        };
        untouched.extend(found.absent.into_iter().map(|i| (i, reason.clone())));
    }
    let not = match operation {
        Operation::Preview => "waits for its cluster (not previewed)",
        Operation::Up => return Ok(untouched),
        Operation::Destroy | Operation::Refresh => "not touched",
        Operation::Drift => "not checked: its cluster is not reachable",
    };
    if kubeconfig.is_file() {
        return Ok(untouched);
    }
    let shown = workspace.display(kubeconfig).display().to_string();
    for &i in selected.order() {
        let engine = selected
            .graph
            .project(i)
            .engine_or(workspace.settings.engine);
        if engine.needs_cluster() {
            untouched.entry(i).or_insert_with(|| {
                format!("the kubeconfig of its cluster, {shown}, does not exist: {not}")
            });
        }
    }
    Ok(untouched)
}

/// Whether a run found no project with the stack: every report is of a project without it (its
/// name is likely wrong). Manifests whose cluster is gone are untouched for another reason, and a
/// run of nothing else but them did what it could.
pub fn none_has_it(reports: &[ProjectReport], stack: &str) -> bool {
    let reasons = [absent(stack), crate::run::project::not_checked(stack)];
    !reports.is_empty()
        && reports
            .iter()
            .all(|p| matches!(&p.outcome, Outcome::Absent { reason: r } if reasons.contains(r)))
}

/// The projects the ledger knows to have `stack` on `backend`: those are not selected first, nor
/// asked about before a destroy or refresh. A ledger that cannot say knows none.
pub fn known(
    ledger: Result<Option<&dyn crate::ledger::Ledger>>,
    backend: &str,
    stack: &ResolvedStack,
) -> BTreeSet<String> {
    (ledger.ok().flatten())
        .and_then(|l| l.known_stacks(backend, stack.name.as_str()).ok())
        .unwrap_or_default()
}

/// With `state = "ledger"` (`state`), the selected projects kept in the ledger's server
/// (`backend`) that the ledger knows to have the stack on another backend, and not there: an
/// `up` would start them anew in the server, beside what their stacks there hold. Refused
/// (exit 3) before anything runs, naming where each is.
pub fn moved_away(
    (ledger, whose): (Option<&dyn crate::ledger::Ledger>, Option<&str>),
    (selected, workspace): (&Plan<'_>, &Workspace),
    (state, backend): (Option<&StateServer>, &str),
    known: &BTreeSet<String>,
    stack: &str,
) -> Result<()> {
    let (Some(ledger), Some(server)) = (ledger, state) else {
        return Ok(());
    };
    let elsewhere = ledger.stack_backends(stack)?;
    // The projects of each other backend, in order.
    let mut on: Vec<(String, Vec<&str>)> = Vec::new();
    for p in (selected.order().iter()).map(|&i| selected.graph.project(i)) {
        let engine = p.engine_or(workspace.settings.engine);
        let dir = workspace.project_dir(&p.path);
        if known.contains(&p.path) || engine.state_in(server, &p.path, &dir).is_none() {
            continue;
        }
        let others = (elsewhere.get(&p.path).into_iter().flatten()).filter(|b| *b != backend);
        for other in others {
            let named = match other.as_str() {
                "(login)" => {
                    "their engines' default: Pulumi's login, a module's local files".into()
                }
                url => url.to_string(),
            };
            match on.iter_mut().find(|(b, _)| *b == named) {
                Some((_, paths)) => paths.push(&p.path),
                None => on.push((named, vec![&p.path])),
            }
        }
    }
    let left: Vec<String> = (on.iter())
        .map(|(backend, paths)| format!("{} (on {backend})", paths.join(", ")))
        .collect();
    if left.is_empty() {
        return Ok(());
    }
    let one = on.len() == 1 && on[0].1.len() == 1;
    let them = if one { "it" } else { "them" };
    let from = match on.as_slice() {
        [(url, _)] if url.contains("://") => {
            format!("`mara state migrate --from {url}` moves {them} in from there")
        }
        _ => "`mara state migrate` moves a stack in from where it is: `--from URL` names a Pulumi backend; a module's local files move from the machine that has them".to_string(),
    };
    let history = match whose {
        Some(_) => "; `mara ledger migrate` brings its runs along",
        None => "",
    };
    Err(Error::config(
        Problem::new(format!(
            "{} records stack {stack} of {} elsewhere, and not in the ledger's server where `state = \"ledger\"` keeps {}: the run would start {} anew there, beside what {} hold{}",
            whose.map_or("the ledger".to_string(), |w| format!("this workspace's own ledger ({w})")),
            left.join(" and "),
            if one { "it" } else { "them" },
            if one { "it" } else { "them" },
            if one { "that stack" } else { "those stacks" },
            if one { "s" } else { "" },
        ))
        .hint(format!("{from}{history} (docs/commands.md, \"State in the ledger\")")),
    ))
}

/// A `destroy` or `refresh` of a stack no selected project has (a typo, a stack never deployed),
/// naming the stacks that exist.
pub fn no_such_stack(stack: &ResolvedStack, existing: &BTreeSet<String>) -> Error {
    let existing = match existing.len() {
        0 => "no stack exists yet".to_string(),
        _ => format!(
            "the stacks that exist: {}",
            existing.iter().cloned().collect::<Vec<_>>().join(", ")
        ),
    };
    Error::config(
        Problem::new(format!(
            "stack `{}` does not exist in any selected project ({existing}): nothing to do",
            stack.name
        ))
        .hint(format!(
            "the stack came from {}: check its name",
            stack.source
        )),
    )
}

/// What the ledger records as the backend of a stack kept in its own server (`state =
/// "ledger"`): not the URL the engine was given, which names a user and a spelling of the host
/// (every member of a team has their own), but the ledger itself, which is that server.
pub const IN_THE_LEDGER: &str = "(the ledger's server)";

/// The backend the run's Pulumi projects use, as the ledger keys the stacks it knows: the
/// environment's `PULUMI_BACKEND_URL` (made absolute), else the ledger's server with `state =
/// "ledger"` (`state`), else the CLI's login.
pub fn backend_of(env: &BTreeMap<String, String>, state: Option<&StateServer>) -> String {
    let ledger = state.map(|_| IN_THE_LEDGER.to_string());
    env.get("PULUMI_BACKEND_URL")
        .filter(|url| !url.is_empty())
        .cloned()
        .or(ledger)
        .unwrap_or_else(|| "(login)".to_string())
}

/// What a finished run saw of the stack: the projects (paths) that have it now, and those found
/// without it (or whose stack it removed).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Seen {
    pub exist: Vec<String>,
    pub gone: Vec<String>,
}

/// Which Pulumi projects (and Terraform modules, the stack's workspace) of the run now have the
/// stack, and which were found without it: the ledger's record of the stacks that exist.
pub fn seen(plan: &RunPlan, reports: &[ProjectReport]) -> Seen {
    let mut seen = Seen::default();
    for (project, report) in plan.projects.iter().zip(reports) {
        if !project.engine.records_stacks(plan.operation) {
            continue;
        }
        let removed = plan.operation == Operation::Destroy
            && project.steps.iter().any(|s| s.kind == StepKind::Cleanup);
        match (&report.outcome, report.status) {
            (Outcome::Absent { .. }, _) => seen.gone.push(project.path.clone()),
            (_, ProjectStatus::Succeeded | ProjectStatus::Unchanged) if removed => {
                seen.gone.push(project.path.clone())
            }
            (_, ProjectStatus::Succeeded | ProjectStatus::Unchanged) => {
                seen.exist.push(project.path.clone())
            }
            _ => {}
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{ExecutionGraph, Selection};
    use crate::provider::Registry;
    use crate::workspace::stack::{StackName, StackSource};

    /// The aws graph, with `kubernetes/logstore` made a directory of manifests.
    fn graph() -> ExecutionGraph {
        let mut projects = Registry::builtin().resolve("aws").unwrap().projects;
        for project in &mut projects {
            if project.path == "kubernetes/logstore" {
                project.engine = Some(crate::engine::EngineKind::named("kubectl").unwrap());
            }
        }
        ExecutionGraph::from_projects(projects).unwrap()
    }

    fn stack() -> ResolvedStack {
        ResolvedStack {
            name: StackName::parse("dev").unwrap(),
            source: StackSource::Flag,
        }
    }

    fn workspace() -> Workspace {
        crate::run::plan::fixtures::workspace()
    }

    fn paths(graph: &ExecutionGraph, untouched: &BTreeMap<usize, String>) -> Vec<String> {
        (untouched.iter())
            .map(|(&i, why)| format!("{}: {why}", graph.project(i).path))
            .collect()
    }

    #[test]
    fn a_destroy_leaves_the_projects_without_the_stack_and_refuses_when_none_has_it() {
        let graph = graph();
        let only = |paths: &[&str]| Selection {
            only: paths.iter().map(|s| s.to_string()).collect(),
            ..Selection::default()
        };
        let selected = Plan::select(
            &graph,
            &only(&["infrastructure/aws/vpc", "infrastructure/aws/eks"]),
        )
        .unwrap();
        let vpc = graph.find("infrastructure/aws/vpc").unwrap();
        let eks = graph.find("infrastructure/aws/eks").unwrap();
        let found = |absent: &[usize], all_asked| Found {
            absent: absent.iter().copied().collect(),
            stacks: BTreeSet::from(["prod".to_string()]),
            all_asked,
        };
        let kubeconfig = Path::new("/nonexistent/dev.yaml");
        let untouched = untouched(
            Operation::Destroy,
            &selected,
            &workspace(),
            &stack(),
            Some(found(&[vpc], true)),
            kubeconfig,
        )
        .unwrap();
        assert_eq!(
            paths(&graph, &untouched),
            [
                "infrastructure/aws/vpc: stack `dev` does not exist here (never deployed, or removed): not touched"
            ]
        );
        // None has it: the stack's name is likely wrong, and the message names those that exist.
        let refused = super::untouched(
            Operation::Destroy,
            &selected,
            &workspace(),
            &stack(),
            Some(found(&[vpc, eks], true)),
            kubeconfig,
        )
        .unwrap_err();
        assert_eq!(refused.exit_code(), crate::error::exit::CONFIG);
        assert!(
            refused
                .to_string()
                .contains("(the stacks that exist: prod): nothing to do"),
            "{refused}"
        );
        // Unless a project could not be asked: then the run finds out.
        let untouched = super::untouched(
            Operation::Destroy,
            &selected,
            &workspace(),
            &stack(),
            Some(found(&[vpc, eks], false)),
            kubeconfig,
        )
        .unwrap();
        assert_eq!(untouched.len(), 2);
    }

    #[test]
    fn manifests_whose_cluster_no_kubeconfig_reaches_are_left_or_wait() {
        let graph = graph();
        let selected = Plan::everything(&graph);
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("dev.yaml");
        let reasons = |operation| {
            paths(
                &graph,
                &untouched(operation, &selected, &workspace(), &stack(), None, &missing).unwrap(),
            )
        };
        let shown = missing.display();
        assert_eq!(
            reasons(Operation::Preview),
            [format!(
                "kubernetes/logstore: the kubeconfig of its cluster, {shown}, does not exist: waits for its cluster (not previewed)"
            )]
        );
        assert_eq!(
            reasons(Operation::Refresh),
            [format!(
                "kubernetes/logstore: the kubeconfig of its cluster, {shown}, does not exist: not touched"
            )]
        );
        assert!(
            reasons(Operation::Up).is_empty(),
            "up writes it, or was refused before"
        );
        std::fs::write(&missing, "apiVersion: v1\n").unwrap();
        assert!(reasons(Operation::Destroy).is_empty());
    }

    #[test]
    fn the_backend_is_the_url_or_the_login() {
        let env = |url: &str| BTreeMap::from([("PULUMI_BACKEND_URL".to_string(), url.to_string())]);
        assert_eq!(
            backend_of(&env("file:///w/.mara/state"), None),
            "file:///w/.mara/state"
        );
        assert_eq!(backend_of(&env(""), None), "(login)");
        assert_eq!(backend_of(&BTreeMap::new(), None), "(login)");
        let server = StateServer {
            url: "postgres://mara@db:5432/team?sslmode=verify-full".into(),
            password: Some("hunter2".into()),
            set: Default::default(),
        };
        // Whoever connects, by whichever name of the host: the ledger's own server.
        let ledger = backend_of(&BTreeMap::new(), Some(&server));
        assert_eq!(ledger, IN_THE_LEDGER);
        assert_eq!(backend_of(&env("s3://b"), Some(&server)), "s3://b");
    }

    #[test]
    fn a_finished_run_says_which_projects_have_the_stack() {
        use crate::run::events::Finished;
        use crate::run::plan::fixtures;
        let report = |path: &str, outcome: Outcome| {
            let finished = Finished {
                exit_code: Some(0),
                ..Finished::without_running(outcome)
            };
            ProjectReport::new(path.to_string(), None, finished)
        };
        let only = [
            "infrastructure/aws/vpc",
            "infrastructure/aws/eks",
            "infrastructure/aws/ecr",
        ];
        let failed = Outcome::Failed {
            code: Some(1),
            reason: "boom".into(),
        };
        let gone = Outcome::Absent {
            reason: absent("dev"),
        };
        for (operation, expected) in [
            (
                Operation::Up,
                Seen {
                    exist: vec!["infrastructure/aws/vpc".into()],
                    gone: vec!["infrastructure/aws/ecr".into()],
                },
            ),
            // A destroy without --remove leaves the empty stack.
            (
                Operation::Destroy,
                Seen {
                    exist: vec!["infrastructure/aws/vpc".into()],
                    gone: vec!["infrastructure/aws/ecr".into()],
                },
            ),
        ] {
            let plan = fixtures::plan(operation, &only);
            let reports: Vec<ProjectReport> = plan
                .projects
                .iter()
                .map(|p| match p.path.as_str() {
                    "infrastructure/aws/vpc" => report(&p.path, Outcome::Succeeded),
                    "infrastructure/aws/eks" => report(&p.path, failed.clone()),
                    _ => report(&p.path, gone.clone()),
                })
                .collect();
            assert_eq!(seen(&plan, &reports), expected, "{operation}");
            assert!(!none_has_it(&reports, "dev"));
            let all_gone: Vec<ProjectReport> = plan
                .projects
                .iter()
                .map(|p| report(&p.path, gone.clone()))
                .collect();
            assert!(none_has_it(&all_gone, "dev"));
        }
    }
}
