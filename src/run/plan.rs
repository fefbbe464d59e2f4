//! The run plan: everything a run will do, decided before anything is done (docs/ARCHITECTURE.md,
//! "How a run goes"). The operation, the projects in the order they start, and for each its
//! engine steps (made by `engine::Engines`), its hooks, its log file and the projects it waits
//! for. Pure: building it starts no process, reads no clock and touches no terminal, so it is
//! tested and snapshot-tested as data; `--dry-run` prints it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::deployment::Deployment;
use crate::engine::command::Context;
use crate::engine::kubectl::{self, Kubectl};
use crate::engine::pulumi::Pulumi;
use crate::engine::state::StateServer;
use crate::engine::terraform::InitStamp;
use crate::engine::{EngineKind, Engines, Operation, Step, Target};
use crate::graph::Plan;
use crate::provider::Hook;
use crate::workspace::Workspace;
use crate::workspace::stack::ResolvedStack;
use crate::workspace::stack_config::StackConfigFile;

/// One project of the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedProject {
    pub path: String,
    pub engine: EngineKind,
    /// Where its command hooks run (the workspace root when it has no directory).
    pub dir: PathBuf,
    pub steps: Vec<Step>,
    /// What runs after its operation succeeds: `on_success` after up, `on_destroy` after destroy.
    pub hooks: Vec<Hook>,
    /// `<state_dir>/logs/<run>/<path>.log`.
    pub log: PathBuf,
    /// Its preview keeps its engine's own plan in its report, for the policies (`run::gate`).
    pub keeps_document: bool,
    /// The positions (in the plan) of the projects that must succeed before it starts.
    pub waits_for: Vec<usize>,
    /// Its inputs' fingerprint, recorded with it (`up` only).
    pub fingerprint: Option<String>,
    /// Why it is not touched at all: its stack does not exist (`destroy`, `refresh`).
    pub absent: Option<String>,
    /// Why it is skipped before it starts: a project it follows did not succeed in the run it
    /// joined (`--run`), on another runner.
    pub blocked: Option<Blocked>,
    /// The `MARA_*` variables of its hooks.
    pub context: Context,
    /// Its inputs: each the output of another project, given to its engine as a variable.
    pub inputs: Vec<PlannedInput>,
    /// Its outputs that other projects take as inputs: read after its `up` and recorded.
    pub outputs_taken: Vec<String>,
    /// In an `up` of approved plans: what was approved, and the steps that apply it or plan
    /// again (docs/commands.md, "Saved plans").
    pub approval: Option<Box<Approval>>,
    /// The pool whose budget it counts against.
    pub pool: Option<String>,
    /// Which failures of its operation run it again: its own `[project.retry]`, else
    /// mara.toml's `[retry]`.
    pub retry: Option<crate::workspace::budgets::Retry>,
}

pub use crate::workspace::budgets::Budgets;

/// Why a job of a fanned-out run does not run one of its projects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    /// A dependency (for destroy, a dependent) did not succeed in the run, or has not run in it
    /// yet: skipped.
    Skipped(String),
    /// A preview whose dependency is not deployed yet, as that dependency's job found: it waits
    /// on `on`, as it would in one `preview`.
    Waits { on: Vec<String>, reason: String },
}

impl Blocked {
    pub fn reason(&self) -> &str {
        match self {
            Blocked::Skipped(reason) | Blocked::Waits { reason, .. } => reason,
        }
    }
}

/// A project's approved plan, as its `up` applies it.
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    pub approved: crate::run::approval::Planned,
    pub steps: crate::engine::ApprovalSteps,
    /// `--replan`: a new plan whose changes differ from the approved ones may apply.
    pub replan: bool,
    /// An interactive `up`: a new plan whose changes differ is shown, and the person asked.
    pub ask: bool,
    /// Why the plan its engine would apply in this run is not there (a manifest without it, a
    /// file gone): it is checked as an engine without one is, which its turn says.
    pub unsaved: Option<String>,
}

impl Approval {
    /// `--dry-run`'s lines in the place of its `operation`: what it will run (`inputs`: whether
    /// it has any, which may have moved).
    fn render(&self, inputs: bool, operation: &Step) -> String {
        let steps = &self.steps;
        let mut text = String::new();
        if let Some(why) = &self.unsaved {
            text.push_str(&format!("#   {why}: checked as without one\n"));
        }
        if let Some(apply) = (steps.apply_saved.as_ref()).filter(|_| !self.approved.deferred()) {
            text.push_str(&format!("{}\n", apply.display()));
            if !inputs {
                return text;
            }
            text.push_str("#   when its inputs are as planned; else:\n");
        }
        match (&steps.replan, &steps.apply_replanned) {
            // Never previewed: planned as its turn comes, and applied (`--replan`).
            (Some(replan), Some(apply)) if self.approved.deferred() => text.push_str(&format!(
                "#   never previewed: planned as its turn comes: {}\n#   then applied (--replan): {}\n",
                replan.display(),
                apply.display()
            )),
            (Some(replan), Some(apply)) => text.push_str(&format!(
                "#   planned again: {}\n#   then, if it does what the approved plan did: {}\n",
                replan.display(),
                apply.display()
            )),
            (Some(replan), None) => text.push_str(&format!(
                "#   previewed again: {}\n#   then, if it does what the approved plan did, its up:\n",
                replan.display()
            )),
            (None, _) => text.push_str("#   its up, when its inputs are as planned:\n"),
        }
        // Pulumi's, a command's: the operation itself, once it holds.
        if steps.apply_replanned.is_none() {
            text.push_str(&format!("{}\n", operation.display()));
        }
        text
    }
}

impl Plans {
    /// Where a preview saves project `path`'s plan (its `engine`'s, as the run's `engines`
    /// say it saves one): with the saved plans, when its `up` applies it; or — a Terraform
    /// module's, whose planned outputs are read from it, when other projects take them — in
    /// the run's `plans`.
    fn plan_file(
        &self,
        (operation, plans): (Operation, &Path),
        (path, outputs_taken): (&str, &[String]),
        (engine, engines): (EngineKind, &Engines),
    ) -> Option<PathBuf> {
        let suffix = engine.plan_suffix()?;
        match (operation, &self.save_in) {
            (Operation::Preview, Some(dir)) if engine.applies_saved_plans(engines) => {
                Some(dir.join(format!("{path}{suffix}")))
            }
            (Operation::Preview, None)
                if engine.saves_plan_files() && (!outputs_taken.is_empty() || self.documents) =>
            {
                Some(plans.join(format!("{path}{suffix}")))
            }
            // A drift check's plan, shown for the policies.
            (Operation::Drift, _) if engine.saves_plan_files() && self.documents => {
                Some(plans.join(format!("{path}{suffix}")))
            }
            _ => None,
        }
    }

    /// Project `path`'s approved plan in an `up`, with the steps that apply it — its saved
    /// plan, where its engine applies one in this run and the file is there (`is_file`) — or
    /// plan it again (a new plan saved in the run's `plans`).
    fn approval(
        &self,
        (path, target): (&str, &Target<'_>),
        engines: &Engines,
        plans: &Path,
        is_file: &(dyn Fn(&Path) -> bool + Sync),
    ) -> Option<Approval> {
        let (dir, manifest) = self.approved.as_ref()?;
        let approved = manifest.projects.iter().find(|p| p.path == path)?;
        let engine = engines.engine_of(target);
        let suffix = engine.plan_suffix().unwrap_or_default();
        let replan = plans.join(format!("{path}.replan{suffix}"));
        let applies = engine.applies_saved_plans(engines);
        let saved_plan = (approved.plan.as_ref())
            .map(|file| dir.join(file))
            .filter(|_| applies);
        let unsaved = match &saved_plan {
            _ if !applies || approved.deferred() => None,
            None => Some("its approval holds no saved plan".to_string()),
            Some(file) if !is_file(file) => {
                Some(format!("its saved plan {} is gone", file.display()))
            }
            Some(_) => None,
        };
        let saved_plan = saved_plan.filter(|_| unsaved.is_none());
        Some(Approval {
            approved: approved.clone(),
            steps: engines.approval_steps(target, saved_plan.as_deref(), &replan),
            replan: self.replan,
            ask: self.ask,
            unsaved,
        })
    }
}

/// The plans a run works with (docs/commands.md, "Saved plans").
#[derive(Debug, Clone, Default)]
pub struct Plans {
    /// A preview saves here every plan its `up` would apply (`preview --save-plans DIR`, the
    /// confirmation of `up`): Terraform's, and Pulumi's with `update_plans`; else only the
    /// Terraform plans whose planned outputs are read, in the run's own directory.
    pub save_in: Option<PathBuf>,
    /// An `up` applies these: the directory and its manifest.
    pub approved: Option<(PathBuf, crate::run::approval::Manifest)>,
    /// `--replan`.
    pub replan: bool,
    /// An interactive `up`: a new plan that differs is asked about (`Approval::ask`).
    pub ask: bool,
    /// `preview --save-plans`: each module's plan keeps which state it was made against, for
    /// `up --plans` to check before anything is applied.
    pub record_state: bool,
    /// `preview --save-plans`: what each project is planned against besides its inputs and
    /// state (its namespace's configuration, its code), by path, for the manifest.
    pub against: BTreeMap<String, crate::run::approval::Against>,
    /// The policies read each project's own plan (`run::gate`): a preview keeps it in its
    /// report, and a Terraform module's preview saves its plan to show it as JSON.
    pub documents: bool,
}

/// An input of a planned project (docs/formats.md, "Inputs"): `variable` (`TF_VAR_<name>` or
/// `MARA_INPUT_<NAME>`) gets the output `output` of project `from`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedInput {
    pub name: String,
    pub variable: String,
    pub from: String,
    pub output: String,
}

impl PlannedInput {
    /// The inputs of `project`, as a project of `engine` gets them.
    fn of(project: &crate::provider::Project, engine: EngineKind) -> Vec<PlannedInput> {
        (project.inputs.iter())
            .map(|input| PlannedInput {
                name: input.name.clone(),
                variable: engine.input_variable(&input.name),
                from: input.from.target.clone(),
                output: input.output.clone(),
            })
            .collect()
    }

    /// `network:subnet_id`, as the provider names it.
    pub fn source(&self) -> String {
        format!("{}:{}", self.from, self.output)
    }
}

impl PlannedProject {
    /// Whether it starts with preparation that needs nothing from its dependencies (selecting or
    /// creating its stack, initializing its module), which can run ahead of its turn.
    pub fn prepares_first(&self) -> bool {
        self.absent.is_none()
            && self.blocked.is_none()
            && self
                .steps
                .first()
                .is_some_and(|s| s.kind == crate::engine::StepKind::Prepare)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunPlan {
    pub operation: Operation,
    /// In the order they start when nothing runs in parallel: the execution order, reversed for
    /// destroy.
    pub projects: Vec<PlannedProject>,
    /// A preview's: each change's properties are shown under it (`preview --diff`, and the
    /// preview of `up`'s confirmation, for its details).
    pub show_diff: bool,
    pub budgets: Budgets,
    /// Each project's duration in the operation's last recorded run on the stack, where the
    /// ledger has one (empty when not asked): what the scheduler ranks them by
    /// (`run::priority`).
    pub estimates: Vec<Option<std::time::Duration>>,
}

/// Makes the plans of one run from its deployment: the run's own, and the preview its
/// confirmation shows.
#[derive(Clone, Copy)]
pub struct Planner<'a> {
    pub deployment: &'a Deployment,
    pub selected: &'a Plan<'a>,
    pub stack: &'a ResolvedStack,
    pub fingerprints: &'a BTreeMap<usize, String>,
    pub run_id: &'a str,
    /// Whether engines colour their output.
    pub color: bool,
    pub remove_stacks: bool,
    /// The projects (graph index) known not to have the stack, with why.
    pub absent: &'a BTreeMap<usize, String>,
    /// The projects (graph index) skipped before they start, with why.
    pub blocked: &'a BTreeMap<usize, Blocked>,
    /// The projects (path) the ledger knows to have the stack on this backend.
    pub known_stacks: &'a std::collections::BTreeSet<String>,
    /// The stack's kubeconfig, for the kubectl engine.
    pub kubeconfig: &'a crate::workspace::kubeconfig::Choice,
    /// The plans its previews save and its `up` applies.
    pub plans: &'a Plans,
    /// `state = "ledger"`: the server the projects that name no backend keep their state in.
    pub state: Option<&'a StateServer>,
}

/// The Pulumi CLI of a run on `stack`, with the shared configuration `config`.
pub fn pulumi(
    deployment: &Deployment,
    stack: &ResolvedStack,
    config: &StackConfigFile,
    (color, state): (bool, Option<&StateServer>),
) -> Pulumi {
    let settings = &deployment.files.workspace.settings;
    Pulumi {
        binary: settings.pulumi.binary.clone(),
        stack: stack.name.to_string(),
        shared_config: config.path().to_path_buf(),
        secrets_project: settings.secrets_project.clone(),
        secrets_provider: settings.pulumi.secrets_provider.clone(),
        color,
        state: state.cloned(),
        update_plans: settings.pulumi.update_plans,
        policy_packs: (settings.policy.pulumi_packs.iter())
            .map(|pack| deployment.files.workspace.root.join(pack))
            .collect(),
    }
}

/// The engines of a command that runs them outside a run (`mara output`, `unlock --engine`):
/// on `stack`, with the shared configuration `config`, the kubeconfig the stack's is, the
/// server `state = "ledger"` keeps state in.
pub fn engines(
    deployment: &Deployment,
    stack: &ResolvedStack,
    config: &StackConfigFile,
    (env, state): (&BTreeMap<String, String>, Option<&StateServer>),
) -> Engines {
    let workspace = &deployment.files.workspace;
    let kubeconfig =
        crate::workspace::kubeconfig::choose(workspace, &stack.name, config.config(), env);
    Engines {
        default: workspace.settings.engine,
        pulumi: pulumi(deployment, stack, config, (false, state)),
        config: (config.config())
            .map(|c| c.values.clone())
            .unwrap_or_default(),
        remove_stacks: false,
        kubectl: Kubectl {
            kubeconfig: kubeconfig.file,
            context: kubeconfig.context,
        },
        state: state.cloned(),
    }
}

impl Planner<'_> {
    /// The Pulumi CLI of this run, on the shared configuration `config` (as the engines get it:
    /// `StackConfigFile::for_engines`).
    pub fn pulumi(&self, config: &StackConfigFile) -> Pulumi {
        pulumi(
            self.deployment,
            self.stack,
            &self.for_engines(config),
            (self.color, self.state),
        )
    }

    /// The shared configuration as the engines get it.
    fn for_engines(&self, config: &StackConfigFile) -> StackConfigFile {
        let workspace = &self.deployment.files.workspace;
        (config.for_engines(&workspace.root, &workspace.state_dir()))
            .unwrap_or_else(|| config.clone())
    }

    /// The run's log directory, `<state_dir>/logs/<run><suffix>`.
    pub fn logs(&self, suffix: &str) -> PathBuf {
        let workspace = &self.deployment.files.workspace;
        workspace
            .state_dir()
            .join("logs")
            .join(format!("{}{suffix}", self.run_id))
    }

    /// Where the run's previews save their Terraform plans, `<state_dir>/plans/<run><suffix>`:
    /// private, and removed once the run ends (`Planner::forget_plans`).
    pub fn plans(&self, suffix: &str) -> PathBuf {
        let workspace = &self.deployment.files.workspace;
        workspace
            .state_dir()
            .join("plans")
            .join(format!("{}{suffix}", self.run_id))
    }

    /// Removes the plans the run's previews saved (they hold what the modules' secrets plan).
    pub fn forget_plans(&self) {
        for suffix in ["", "-preview"] {
            let _ = std::fs::remove_dir_all(self.plans(suffix));
        }
    }

    /// The plan of `operation` with the shared configuration `config` (Terraform modules get
    /// its values), logging into `logs(suffix)`.
    pub fn plan(&self, operation: Operation, config: &StackConfigFile, suffix: &str) -> RunPlan {
        let workspace = &self.deployment.files.workspace;
        let engines = self.engines(config);
        RunPlan::build(&Inputs {
            operation,
            selected: self.selected,
            engines: &engines,
            workspace,
            provider: &self.deployment.provider.name,
            logs: &self.logs(suffix),
            plans: &self.plans(suffix),
            saved: self.plans,
            fingerprints: self.fingerprints,
            kubeconfig: &workspace.kubeconfig_file(&self.stack.name),
            is_dir: &|dir| dir.is_dir(),
            is_file: &|file| file.is_file(),
            has_kustomization: &|dir| kubectl::kustomization(dir).is_some(),
            initialized: &crate::fingerprint::init_is_current,
            absent: self.absent,
            blocked: self.blocked,
            known_stacks: self.known_stacks,
            budgets: &Budgets {
                pools: self.deployment.pools.clone(),
                engines: workspace.settings.limits.clone(),
            },
        })
    }

    /// The engines of this run, on the shared configuration `config` (as they get it).
    pub fn engines(&self, config: &StackConfigFile) -> Engines {
        let workspace = &self.deployment.files.workspace;
        let config = &self.for_engines(config);
        Engines {
            default: workspace.settings.engine,
            pulumi: self.pulumi(config),
            config: config
                .config()
                .map(|c| c.values.clone())
                .unwrap_or_default(),
            remove_stacks: self.remove_stacks,
            kubectl: Kubectl {
                kubeconfig: self.kubeconfig.file.clone(),
                context: self.kubeconfig.context.clone(),
            },
            state: self.state.cloned(),
        }
    }
}

/// What a plan is built from.
pub struct Inputs<'a> {
    pub operation: Operation,
    pub selected: &'a Plan<'a>,
    pub engines: &'a Engines,
    pub workspace: &'a Workspace,
    pub provider: &'a str,
    /// The run's log directory.
    pub logs: &'a Path,
    /// Where its previews save their Terraform plans.
    pub plans: &'a Path,
    /// The plans it saves elsewhere, or applies.
    pub saved: &'a Plans,
    /// Fingerprints by graph index.
    pub fingerprints: &'a BTreeMap<usize, String>,
    /// `<state_dir>/kube/<stack>.yaml`, the kubeconfig the hooks write.
    pub kubeconfig: &'a Path,
    /// Whether a directory exists (the plan itself never looks).
    pub is_dir: &'a (dyn Fn(&Path) -> bool + Sync),
    /// Whether a file exists: an approved plan's.
    pub is_file: &'a (dyn Fn(&Path) -> bool + Sync),
    /// Whether a directory holds a kustomization (for the kubectl engine).
    pub has_kustomization: &'a (dyn Fn(&Path) -> bool + Sync),
    /// Whether a Terraform module's init stamp is current (the plan itself never reads it).
    pub initialized: &'a (dyn Fn(&InitStamp) -> bool + Sync),
    /// The projects (graph index) known not to have the stack, with why.
    pub absent: &'a BTreeMap<usize, String>,
    /// The projects (graph index) skipped before they start, with why (`PlannedProject::blocked`).
    pub blocked: &'a BTreeMap<usize, Blocked>,
    /// The projects (path) the ledger knows to have the stack on this backend.
    pub known_stacks: &'a std::collections::BTreeSet<String>,
    pub budgets: &'a Budgets,
}

/// Why a drift check does not check a project: a command project says how only with a `drift`
/// command.
fn unchecked(
    operation: Operation,
    project: &crate::provider::Project,
    engine: EngineKind,
) -> Option<String> {
    let no_check =
        operation == Operation::Drift && engine.runs_commands() && project.commands.drift.is_none();
    no_check.then(|| "not checked: it has no `drift` command".to_string())
}

impl RunPlan {
    /// Every selected project's place in the run, in its order (dependencies first; dependents
    /// first for a destroy), planned on every core (a plan of thousands: docs/benchmarks.md).
    pub fn build(inputs: &Inputs<'_>) -> RunPlan {
        let order: Vec<usize> = match inputs.operation == Operation::Destroy {
            true => inputs.selected.reverse_order().collect(),
            false => inputs.selected.order().to_vec(),
        };
        let position: BTreeMap<usize, usize> =
            order.iter().enumerate().map(|(p, &i)| (i, p)).collect();
        let projects = crate::parallel::map(order.len(), |k| planned(inputs, order[k], &position));
        RunPlan {
            operation: inputs.operation,
            projects,
            show_diff: false,
            budgets: inputs.budgets.clone(),
            estimates: Vec::new(),
        }
    }

    /// `--dry-run`: every engine command with its directory, in order; `shown` shortens paths.
    pub fn render(&self, shown: impl Fn(&Path) -> String) -> String {
        let mut text = String::new();
        for project in &self.projects {
            let dir = project
                .steps
                .first()
                .map(|s| s.cwd.as_path())
                .unwrap_or(&project.dir);
            text.push_str(&format!("# {} (in {})\n", project.path, shown(dir)));
            for input in &project.inputs {
                text.push_str(&format!("#   {} from {}\n", input.variable, input.source()));
            }

            for step in &project.steps {
                match &project.approval {
                    // What an approved plan runs in its operation's place.
                    Some(approval) if step.kind == crate::engine::StepKind::Operation => {
                        text.push_str(&approval.render(!project.inputs.is_empty(), step));
                    }
                    _ => {
                        text.push_str(&step.display());
                        text.push('\n');
                    }
                }
            }
        }
        text
    }

    pub fn len(&self) -> usize {
        self.projects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.projects.is_empty()
    }
}

/// One project's place in the run: its steps, hooks, log, what it waits for (by `position`, its
/// neighbours' places in the run's order) and why it may not run.
fn planned(inputs: &Inputs<'_>, i: usize, position: &BTreeMap<usize, usize>) -> PlannedProject {
    let (engines, workspace) = (inputs.engines, inputs.workspace);
    let operation = inputs.operation;
    let graph = inputs.selected.graph;
    let stack = engines.stack().to_string();
    let project = graph.project(i);
    let dir = workspace.project_dir(&project.path);
    let has_dir = (inputs.is_dir)(&dir);
    let outputs = workspace.command_outputs_file(&stack, &project.path);
    let init_stamp = workspace.init_stamp_file(&project.path);
    let context = Context {
        stack: stack.clone(),
        project: project.path.clone(),
        provider: inputs.provider.to_string(),
        kubeconfig: inputs.kubeconfig.to_path_buf(),
    };
    let outputs_taken = outputs_taken(graph, i);
    // A preview's planned outputs are read for the projects that take them; every
    // plan its `up` would apply is kept where plans are saved.
    let plan_file = inputs.saved.plan_file(
        (operation, inputs.plans),
        (&project.path, &outputs_taken),
        (project.engine_or(engines.default), engines),
    );
    let mut target = Target {
        path: &project.path,
        engine: project.engine,
        commands: &project.commands,
        destroy_reads_outputs: reads_outputs(&project.on_destroy),
        up_hooks: !project.on_success.is_empty() || !outputs_taken.is_empty(),
        outputs_taken: !outputs_taken.is_empty(),
        stack_known: inputs.known_stacks.contains(&project.path),
        init_stamp: &init_stamp,
        plan_file: plan_file.as_deref(),
        record_state: inputs.saved.record_state,
        plan_document: inputs.saved.documents,
        initialized: false,
        hook_reads_outputs: reads_outputs(hooks_of(project, operation)),
        dir: &dir,
        has_dir,
        manifests: manifests_in(inputs, project, &dir),
        root: &workspace.root,
        outputs: &outputs,
        context: &context,
    };
    let engine = engines.engine_of(&target);
    if let Some(stamp) = engine.init_stamp(&target) {
        target.initialized = (inputs.initialized)(&stamp);
    }
    PlannedProject {
        path: project.path.clone(),
        engine,
        inputs: PlannedInput::of(project, engine),
        outputs_taken,
        approval: approval_of(inputs, &project.path, &target),
        steps: engines.steps(&target, operation),
        hooks: hooks_of(project, operation).to_vec(),
        log: inputs.logs.join(format!("{}.log", project.path)),
        waits_for: waits_for(graph, i, operation, position),
        fingerprint: inputs.fingerprints.get(&i).cloned(),
        absent: (inputs.absent.get(&i))
            .cloned()
            .or_else(|| unchecked(operation, project, engine)),
        blocked: inputs.blocked.get(&i).cloned(),
        pool: project.pool.as_ref().map(|pool| pool.target.clone()),
        retry: (project.retry.clone()).or_else(|| workspace.settings.retry.clone()),
        keeps_document: inputs.saved.documents
            && matches!(operation, Operation::Preview | Operation::Drift),
        dir: if has_dir {
            dir.clone()
        } else {
            workspace.root.clone()
        },
        context,
    }
}

/// What an `up` of the project `path` (as `target`) applies that a person approved, if anything.
fn approval_of(inputs: &Inputs<'_>, path: &str, target: &Target<'_>) -> Option<Box<Approval>> {
    if inputs.operation != Operation::Up {
        return None;
    }
    let saved = inputs.saved;
    (saved.approval((path, target), inputs.engines, inputs.plans, inputs.is_file)).map(Box::new)
}

/// Whether any of `hooks` reads the project's outputs (a command hook gets them).
fn reads_outputs(hooks: &[Hook]) -> bool {
    hooks.iter().any(|h| matches!(h, Hook::Command { .. }))
}

/// Where a kubectl project's manifests come from: its kustomization, else its files.
fn manifests_in(
    inputs: &Inputs<'_>,
    project: &crate::provider::Project,
    dir: &Path,
) -> kubectl::Source {
    let engine = project.engine_or(inputs.engines.default);
    match engine.project_files() == crate::engine::ProjectFiles::Manifests
        && (inputs.has_kustomization)(dir)
    {
        true => kubectl::Source::Kustomization,
        false => kubectl::Source::Files,
    }
}

/// The hooks a project runs after `operation`.
fn hooks_of(project: &crate::provider::Project, operation: Operation) -> &[Hook] {
    match operation {
        Operation::Up => &project.on_success,
        Operation::Destroy => &project.on_destroy,
        Operation::Preview | Operation::Refresh | Operation::Drift => &[],
    }
}

/// The places in the run (`position`) of the projects project `i` waits for: its dependencies,
/// or for a destroy its dependents.
fn waits_for(
    graph: &crate::graph::ExecutionGraph,
    i: usize,
    operation: Operation,
    position: &BTreeMap<usize, usize>,
) -> Vec<usize> {
    let neighbours = match operation == Operation::Destroy {
        true => graph.successors(i),
        false => graph.predecessors(i),
    };
    let mut waits_for: Vec<usize> = (neighbours.into_iter())
        .filter_map(|(j, _)| position.get(&j).copied())
        .collect();
    waits_for.sort_unstable();
    waits_for.dedup();
    waits_for
}

/// The outputs of project `i` that the projects of `graph` take as inputs, sorted.
fn outputs_taken(graph: &crate::graph::ExecutionGraph, i: usize) -> Vec<String> {
    let path = &graph.project(i).path;
    let mut taken: Vec<String> = (graph.successors(i).into_iter())
        .flat_map(|(j, _)| graph.project(j).inputs.iter())
        .filter(|input| &input.from.target == path)
        .map(|input| input.output.clone())
        .collect();
    taken.sort_unstable();
    taken.dedup();
    taken
}

/// Plans of the built-in providers, for the tests of what runs them.
#[cfg(test)]
pub mod fixtures {
    use super::*;
    use crate::engine::pulumi::Pulumi;
    use crate::graph::{ExecutionGraph, Selection};
    use crate::provider::Registry;
    use crate::workspace::WorkspaceSettings;

    pub fn engines() -> Engines {
        Engines {
            default: EngineKind::named("pulumi").unwrap(),
            pulumi: Pulumi {
                binary: "pulumi".into(),
                stack: "dev".into(),
                shared_config: "/w/config/pulumi/Pulumi.dev.yaml".into(),
                secrets_project: "kubernetes/secrets".into(),
                secrets_provider: None,
                color: false,
                state: None,
                update_plans: false,
                policy_packs: Vec::new(),
            },
            config: Default::default(),
            remove_stacks: false,
            kubectl: Kubectl {
                kubeconfig: "/w/.mara/kube/dev.yaml".into(),
                context: None,
            },
            state: None,
        }
    }

    pub fn workspace() -> Workspace {
        Workspace {
            root: "/w".into(),
            settings_file: None,
            settings: WorkspaceSettings::default(),
        }
    }

    /// The plan of the built-in `aws` provider for `operation`, narrowed to `only` (all when
    /// empty).
    pub fn plan(operation: Operation, only: &[&str]) -> RunPlan {
        plan_with(operation, only, (&Plans::default(), &engines()), &|_| true)
    }

    /// `plan`, with the plans `saved` it saves or applies, the `engines`, and which files
    /// exist (`is_file`).
    pub fn plan_with(
        operation: Operation,
        only: &[&str],
        (saved, engines): (&Plans, &Engines),
        is_file: &(dyn Fn(&Path) -> bool + Sync),
    ) -> RunPlan {
        let graph = ExecutionGraph::build(&Registry::builtin().resolve("aws").unwrap()).unwrap();
        let selection = Selection {
            only: only.iter().map(|s| s.to_string()).collect(),
            ..Selection::default()
        };
        let selected = Plan::select(&graph, &selection).unwrap();
        let fingerprints = (0..graph.len()).map(|i| (i, format!("f{i}"))).collect();
        RunPlan::build(&Inputs {
            operation,
            selected: &selected,
            engines,
            workspace: &workspace(),
            provider: "aws",
            logs: Path::new("/w/.mara/logs/r1"),
            plans: Path::new("/w/.mara/plans/r1"),
            saved,
            fingerprints: &fingerprints,
            kubeconfig: Path::new("/w/.mara/kube/dev.yaml"),
            is_dir: &|_| true,
            is_file,
            has_kustomization: &|_| false,
            initialized: &|_| false,
            absent: &BTreeMap::new(),
            blocked: &BTreeMap::new(),
            known_stacks: &Default::default(),
            budgets: &Budgets::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::plan;
    use super::*;

    #[test]
    fn an_up_plan_is_the_execution_order_with_its_steps_hooks_and_logs() {
        let plan = plan(
            Operation::Up,
            &[
                "infrastructure/aws/eks",
                "infrastructure/kubeconfig",
                "kubernetes/logstore",
            ],
        );
        let paths: Vec<&str> = plan.projects.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "infrastructure/aws/eks",
                "infrastructure/kubeconfig",
                "kubernetes/logstore"
            ]
        );
        let eks = &plan.projects[0];
        assert!(matches!(
            eks.hooks[..],
            [Hook::Kubeconfig { merge: true, .. }]
        ));
        let kubeconfig = &plan.projects[1];
        assert_eq!(kubeconfig.waits_for, [0], "after eks, within the plan");
        assert_eq!(plan.projects[2].waits_for, [1]);
        assert!(kubeconfig.hooks.is_empty());
        assert_eq!(
            kubeconfig.log,
            Path::new("/w/.mara/logs/r1/infrastructure/kubeconfig.log")
        );
        // No hook reads its outputs: select and up only; eks's kubeconfig hook reads its own.
        assert_eq!(kubeconfig.steps.len(), 2, "select, up");
        assert_eq!(eks.steps.len(), 3, "select, up, outputs");
        assert!(kubeconfig.fingerprint.is_some());
        assert_eq!(
            kubeconfig.context.kubeconfig,
            Path::new("/w/.mara/kube/dev.yaml")
        );
    }

    #[test]
    fn a_destroy_plan_is_reversed_and_waits_for_dependents() {
        let plan = plan(
            Operation::Destroy,
            &[
                "infrastructure/aws/eks",
                "infrastructure/kubeconfig",
                "kubernetes/logstore",
            ],
        );
        let paths: Vec<&str> = plan.projects.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "kubernetes/logstore",
                "infrastructure/kubeconfig",
                "infrastructure/aws/eks"
            ]
        );
        assert_eq!(plan.projects[0].waits_for, Vec::<usize>::new());
        assert_eq!(plan.projects[2].waits_for, [1]);
        assert!(matches!(
            plan.projects[2].hooks[..],
            [Hook::Kubeconfig { .. }]
        ));
        assert_eq!(
            plan.render(|p| super::fixtures::workspace().display(p).display().to_string()),
            "\
# kubernetes/logstore (in kubernetes/logstore)
pulumi --non-interactive destroy --yes --skip-preview --stack dev --config-file /w/config/pulumi/Pulumi.dev.yaml --color never --json
# infrastructure/kubeconfig (in infrastructure/kubeconfig)
pulumi --non-interactive destroy --yes --skip-preview --stack dev --config-file /w/config/pulumi/Pulumi.dev.yaml --color never --json
# infrastructure/aws/eks (in infrastructure/aws/eks)
pulumi --non-interactive destroy --yes --skip-preview --stack dev --config-file /w/config/pulumi/Pulumi.dev.yaml --color never --json
"
        );
    }

    #[test]
    fn with_update_plans_a_pulumi_preview_saves_the_plan_its_approved_up_applies() {
        use super::fixtures::{engines, plan_with};
        use crate::run::approval::{Manifest, Planned};
        let eks = "infrastructure/aws/eks";
        let holding = |update_plans: bool| Engines {
            pulumi: Pulumi {
                update_plans,
                ..engines().pulumi
            },
            ..engines()
        };
        let saving = Plans {
            save_in: Some("/w/release".into()),
            ..Plans::default()
        };
        let arg = |plan: &RunPlan, flag: &str| {
            let operation = crate::engine::StepKind::Operation;
            let op = (plan.projects[0].steps.iter()).find(|s| s.kind == operation);
            let args = &op.unwrap().args;
            let at = args.iter().position(|a| a == flag)?;
            Some(args[at + 1].clone())
        };
        let previewed = plan_with(
            Operation::Preview,
            &[eks],
            (&saving, &holding(true)),
            &|_| true,
        );
        let file = "/w/release/infrastructure/aws/eks.plan.json";
        assert_eq!(arg(&previewed, "--save-plan").as_deref(), Some(file));
        let op = previewed.projects[0]
            .steps
            .iter()
            .find(|s| s.writes.is_some());
        assert_eq!(op.unwrap().writes.as_deref(), Some(Path::new(file)));
        // Off (the default): a preview as always.
        let today = plan_with(
            Operation::Preview,
            &[eks],
            (&saving, &holding(false)),
            &|_| true,
        );
        assert_eq!(arg(&today, "--save-plan"), None);

        let approved = |plan: Option<&str>| Plans {
            approved: Some((
                "/w/release".into(),
                Manifest {
                    version: crate::run::approval::VERSION,
                    stack: "dev".into(),
                    provider: "aws".into(),
                    run_id: "r0".into(),
                    projects: vec![Planned {
                        path: eks.into(),
                        engine: EngineKind::named("pulumi").unwrap(),
                        plan: plan.map(str::to_string),
                        planned_with: None,
                        inputs: Default::default(),
                        changes: None,
                        resources: Vec::new(),
                        waited: false,
                        digest: None,
                        state: None,
                        against: Default::default(),
                    }],
                    judged_by: None,
                },
            )),
            ..Plans::default()
        };
        let named = approved(Some("infrastructure/aws/eks.plan.json"));
        let up = |plans: &Plans, update_plans: bool, there: bool| {
            let is_file = move |_: &Path| there;
            let plan = plan_with(
                Operation::Up,
                &[eks],
                (plans, &holding(update_plans)),
                &is_file,
            );
            *plan.projects[0].approval.clone().unwrap()
        };
        let held = up(&named, true, true);
        let apply = held.steps.apply_saved.as_ref().unwrap();
        assert_eq!(apply.args[1], "up");
        assert!(
            apply.display().ends_with(&format!("--plan {file}")),
            "{}",
            apply.display()
        );
        // Never experimental: the flag is taken without it.
        assert!(!apply.env.contains_key("PULUMI_EXPERIMENTAL"));
        assert_eq!(held.unsaved, None);
        assert!(
            held.steps.replan.is_some(),
            "a fresh preview, when its inputs moved"
        );
        let shown = plan_with(Operation::Up, &[eks], (&named, &holding(true)), &|_| true);
        let shown = shown.render(|p| p.display().to_string());
        assert_eq!(shown.matches(" up ").count(), 1, "{shown}");
        // Without its plan, or with update plans off: checked by a fresh preview, as today.
        let gone = up(&named, true, false);
        assert_eq!(gone.steps.apply_saved, None);
        assert_eq!(
            gone.unsaved.unwrap(),
            format!("its saved plan {file} is gone")
        );
        let none = up(&approved(None), true, true);
        assert_eq!(none.steps.apply_saved, None);
        assert_eq!(
            none.unsaved.as_deref(),
            Some("its approval holds no saved plan")
        );
        let off = up(&named, false, true);
        assert_eq!((off.steps.apply_saved, off.unsaved), (None, None));
        assert!(off.steps.replan.is_some());
    }

    #[test]
    fn preview_and_refresh_run_no_hooks() {
        for operation in [Operation::Preview, Operation::Refresh] {
            let plan = plan(operation, &[]);
            assert!(plan.projects.iter().all(|p| p.hooks.is_empty()));
            assert_eq!(plan.len(), 15);
        }
    }
}
