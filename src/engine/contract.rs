//! The engine contract (docs/ARCHITECTURE.md, "Engines"): what every engine provides — the
//! steps of each operation and of an approved plan, how its output is read, what its failures
//! say (a stack missing, a working directory to initialize, a lock), its outputs and which of
//! them are secret, the lock a killed operation may leave and how it is cleared, what its
//! project directory holds, where its state is — and `EngineKind`, a registered engine named
//! as a provider names it.
//!
//! Nothing outside `engine/` asks which engine a project has: it asks the project's engine.
//! A new engine is a module implementing `Engine` and one line in `ENGINES` (`engine/mod.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use serde_json::Value;

use super::state::{InServer, Migration, Shared, StateServer};
use super::{
    ApprovalSteps, Changes, Engines, Operation, PlannedOutputs, ResourceDiff, StateVersion, Step,
    Target,
};

/// An engine: a tool that runs a project's operations.
pub trait Engine: Send + Sync + 'static {
    /// Its name, as a provider and mara.toml write it (`engine = "terraform"`).
    fn name(&self) -> &'static str;

    /// The program the tools check looks for on `PATH` (`pulumi` is the one `programs` names):
    /// `None` when a shell runs what it runs.
    fn program(&self, programs: &Programs<'_>) -> Option<String>;

    /// How to install its program, when it is missing.
    fn install_hint(&self) -> Option<&'static str> {
        None
    }

    /// The steps of `operation` on `target`, in order, before what every engine's steps share
    /// (`Engines::steps`: the outputs read only for their readers).
    fn steps(&self, run: &Engines, target: &Target<'_>, operation: Operation) -> Vec<Step>;

    /// What reads its operation's output.
    fn reader(&self, operation: Operation) -> Box<dyn OutputReader>;

    /// What an `up` of an approved plan may run instead of its operation (docs/commands.md,
    /// "Saved plans"): `saved`, the approved plan's file, `replan` where a new one is saved.
    /// None of it: an approval is its inputs as planned.
    fn approval_steps(
        &self,
        _run: &Engines,
        _target: &Target<'_>,
        _saved: Option<&Path>,
        _replan: &Path,
    ) -> ApprovalSteps {
        ApprovalSteps::default()
    }

    /// Whether every previewed project of it has its plan in a file (a Terraform module's
    /// approval is that file, and its planned outputs are read from it): then an approved one
    /// without its file is refused, and a preview whose planned outputs others take saves one.
    fn saves_plan_files(&self) -> bool {
        false
    }

    /// How the file of a plan it saves ends (`.tfplan`), for an engine whose `up` can apply the
    /// plan its preview saved; `None`: it has none.
    fn plan_suffix(&self) -> Option<&'static str> {
        None
    }

    /// Whether, in this run, a preview that keeps its plan for an approval saves it
    /// (`Target::plan_file`) and the `up` of that approval applies it (`approval_steps`'s
    /// `apply_saved`): Terraform's always; Pulumi's with `[pulumi] update_plans`.
    fn applies_saved_plans(&self, _run: &Engines) -> bool {
        false
    }

    /// The variable it gets its input `name` as (docs/formats.md, "Inputs").
    fn input_variable(&self, name: &str) -> String {
        super::command::input_var(name)
    }

    /// The shared configuration's keys it reads as its own: its namespace (a Terraform module's
    /// directory name `leaf`, a Pulumi project's name `pulumi_name`).
    fn config_namespace(&self, _leaf: &str, _pulumi_name: Option<&str>) -> Option<String> {
        None
    }

    /// The keys of its namespace of the shared configuration that its project in `dir` reads,
    /// when its files say all of them (a Terraform module's `variable` blocks), by their names
    /// after the namespace; `None` when they do not (a Pulumi program reads what its code asks
    /// for). `config set` warns of a key no project reads (docs/commands.md, "config").
    fn config_keys_read(&self, _dir: &Path) -> Option<Vec<String>> {
        None
    }

    /// The variables the shared configuration's `values` of namespace `leaf` reach it as
    /// (`TF_VAR_*`): `(key, variable, value)`, for the checks that they can be sent.
    fn config_variables(
        &self,
        _values: &serde_json::Map<String, Value>,
        _leaf: &str,
    ) -> Vec<(String, String, String)> {
        Vec::new()
    }

    /// Whether a failed step on `stack` says the stack does not exist.
    fn is_missing_stack(&self, _stack: &str, _code: Option<i32>, _stderr: &str) -> bool {
        false
    }

    /// Whether a failed step says its working directory must be initialized first.
    fn needs_init(&self, _output: &str) -> bool {
        false
    }

    /// Whether `text` (its stderr, its error) says another run holds the stack's lock.
    fn says_locked(&self, _text: &str) -> bool {
        false
    }

    /// How the lock its operation killed mid-way may leave on the stack of the project in
    /// `dir` is cleared (`unlock`: `mara unlock --engine` as the invocation types it).
    fn lock_clearing(&self, _dir: &Path, _unlock: &str) -> LockClearing {
        LockClearing::NoLock
    }

    /// What `mara unlock --engine` runs to clear that lock, when mara can (Pulumi's `cancel`).
    fn cancel_step(&self, _run: &Engines, _dir: &Path) -> Option<Step> {
        None
    }

    /// What its outputs step printed, as `{"name": value}`; a secret value `[secret]` unless
    /// `show_secrets` (where the step itself does not hide them).
    fn parse_outputs(&self, stdout: &str, _show_secrets: bool) -> Value {
        serde_json::from_str(stdout).unwrap_or(Value::Object(Default::default()))
    }

    /// The names of its outputs that are secret (`outputs`, what its outputs step printed;
    /// `marks`, what its secret marks step printed).
    fn secret_names(&self, _outputs: &str, _marks: Option<&str>) -> BTreeSet<String> {
        BTreeSet::new()
    }

    /// The secret values among its outputs, as text, for the redactor.
    fn secret_outputs(&self, _outputs: &str, _marks: Option<&str>) -> Vec<String> {
        Vec::new()
    }

    /// The step that reads which of its outputs are secret (Pulumi's outputs without
    /// `--show-secrets`), for a hook that receives them; `None` where its outputs step says.
    fn secret_marks_step(&self, _run: &Engines, _dir: &Path) -> Option<Step> {
        None
    }

    /// Where the outputs of the project in `dir` are read outside a run (`mara output`, the
    /// inputs a run takes from a project it does not apply), secret values shown only with
    /// `show_secrets`: the steps that print them, or the file its runs keep them in (`kept`).
    fn outputs_source(
        &self,
        _run: &Engines,
        _dir: &Path,
        _kept: &Path,
        _show_secrets: bool,
    ) -> OutputsSource {
        OutputsSource::Nothing
    }

    /// The step that lists the stacks a project has, read-only, asked before a `destroy` or
    /// `refresh` that must not make one (Pulumi's `stack ls --json`); `None`: its run finds out.
    fn stacks_step(&self, _run: &Engines, _dir: &Path) -> Option<Step> {
        None
    }

    /// The stacks `stacks_step` printed.
    fn stack_names(&self, _stdout: &str) -> Option<Vec<String>> {
        None
    }

    /// Whether a list of its stacks (a step's `listed`) names `stack`.
    fn lists(&self, _stdout: &str, _stack: &str) -> bool {
        true
    }

    /// Whether the ledger records its stacks as existing once a run of `operation` succeeded
    /// on it (for the next run's plan: a stack known is not selected first).
    fn records_stacks(&self, _operation: Operation) -> bool {
        false
    }

    /// What a saved plan leaves as outputs (`StepKind::PlannedOutputs`'s output).
    fn planned_outputs(&self, _stdout: &str) -> PlannedOutputs {
        PlannedOutputs::new()
    }

    /// What a saved plan does, as one digest (a `StepKind::PlannedOutputs` step's output).
    fn plan_digest(&self, _stdout: &str) -> Option<String> {
        None
    }

    /// The resources a preview's own plan (`Preview::document`) changes, with their values,
    /// where the engine's streamed output named them without (Terraform's): for the policies'
    /// deployment input. `None`: the streamed output said them already.
    fn plan_resources(&self, _document: &str) -> Option<Vec<ResourceDiff>> {
        None
    }

    /// Which state a plan was made against (`StepKind::StateVersion`'s output).
    fn state_version(&self, _stdout: &str) -> Option<StateVersion> {
        None
    }

    /// Whether a drift check found drift by its exit code alone (a command's exit 2).
    fn drift_by_exit_code(&self, _code: Option<i32>) -> bool {
        false
    }

    /// Where its init stamp is kept and what it covers, when it has a working directory to
    /// initialize (a Terraform module's): the run plan leaves `init` out when it is current.
    fn init_stamp(&self, _target: &Target<'_>) -> Option<super::terraform::InitStamp> {
        None
    }

    /// Whether the project in `dir` keeps its state in a file beside it (no backend, or a local
    /// one), unless `in_ledger` (`state = "ledger"`) keeps it in the ledger's server: a run
    /// fanned out over CI jobs needs it elsewhere.
    fn keeps_state_locally(&self, _dir: &Path, _in_ledger: bool) -> bool {
        false
    }

    /// The backend the project in `dir` names itself (a module's `backend` block, a Pulumi
    /// project's `backend.url`): it keeps its state there whatever `state` says.
    fn own_backend(&self, _dir: &Path) -> Option<String> {
        None
    }

    /// How the project at `path` (in `dir`) keeps its state in the ledger's server `server`
    /// (`state = "ledger"`): `None` when it names a backend of its own (or the environment
    /// does), or keeps no state.
    fn state_in(&self, _server: &StateServer, _path: &str, _dir: &Path) -> Option<InServer> {
        None
    }

    /// How `run`'s stack's state of the project at `path` (in `dir`) moves into the ledger's
    /// server (`run.state`), from where it is now — `from`, a backend URL its engine takes
    /// (`None`: its own default) — with `scratch`, a private directory of mara's for what the
    /// move needs: `None` when it names a backend of its own, keeps no state, or has none there.
    fn migration(
        &self,
        _run: &Engines,
        _path: &str,
        _dir: &Path,
        (_scratch, _from): (&Path, Option<&str>),
    ) -> Option<Migration> {
        None
    }

    /// What its backend makes in the ledger's server on first use that all its projects share
    /// (`state = "ledger"`): mara makes it first, once.
    fn shared_in_server(&self) -> &'static [Shared] {
        &[]
    }

    /// Whether what a migration's `found` or `taken` step printed says there is a state of
    /// `stack` there.
    fn holds_state(&self, _stdout: &str, _stack: &str) -> bool {
        false
    }

    /// The state the project in `dir` keeps in files beside it for `stack` that `state =
    /// "ledger"` would leave behind (`mara state migrate` moves it): each file that holds one.
    fn local_state(&self, _dir: &Path, _stack: &str) -> Vec<std::path::PathBuf> {
        Vec::new()
    }

    /// Whether its projects have outputs (another project may take them as inputs).
    fn has_outputs(&self) -> bool {
        true
    }

    /// What a project of it must hold to run (docs/commands.md, "validate").
    fn project_files(&self) -> ProjectFiles;

    /// Whether it runs the shell commands a provider entry gives (`up = "…"`): a project with
    /// commands and no engine is one of it.
    fn runs_commands(&self) -> bool {
        false
    }

    /// Whether it reaches the stack's cluster through its kubeconfig: without the kubeconfig,
    /// a `destroy`, `refresh` or drift check leaves it untouched.
    fn needs_cluster(&self) -> bool {
        false
    }

    /// Whether it keeps its stacks' configuration and secrets encrypted with the passphrase
    /// of `secrets_provider` (a job of a fanned-out run then needs the passphrase).
    fn needs_passphrase(&self, _secrets_provider: Option<&str>) -> bool {
        false
    }

    /// Whether a project of it keeps a stack that a preview may create (so that a preview
    /// that ran, or made one, leaves it known to exist).
    fn previews_make_stacks(&self) -> bool {
        false
    }
}

/// The programs the workspace configures for its engines (mara.toml's `[pulumi] binary`).
#[derive(Debug, Clone, Copy)]
pub struct Programs<'a> {
    pub pulumi: &'a str,
}

/// How a lock a killed operation may have left is cleared, as people are told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockClearing {
    /// By `mara unlock --engine` (which runs the engine's `cancel_step` with the run's
    /// environment, where its backend is).
    ByMara(String),
    /// By hand (Terraform's `force-unlock` with the id its next run names).
    ByHand(String),
    /// Its engine keeps no lock.
    NoLock,
}

impl LockClearing {
    /// What to do, said; `None` for an engine that keeps no lock.
    pub fn how(&self) -> Option<&str> {
        match self {
            LockClearing::ByMara(how) | LockClearing::ByHand(how) => Some(how),
            LockClearing::NoLock => None,
        }
    }
}

/// Where a project's outputs are read from outside a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputsSource {
    /// These steps, in order: one that lists the project's stacks (`Step::listed`) says whether
    /// it has the stack at all; the last prints them (`parse_outputs` reads it).
    Steps(Vec<Step>),
    /// The JSON file its runs keep them in.
    Kept(std::path::PathBuf),
    /// Nothing deployed yet: no outputs to read.
    NotDeployed,
    /// It has no outputs.
    Nothing,
}

/// What a project directory of an engine must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProjectFiles {
    /// A Pulumi project file (`Pulumi.yaml`), read for its name and runtime.
    PulumiProject,
    /// Files of these extensions (a Terraform module's `.tf`, `.tf.json`).
    WithExtension(&'static [&'static str]),
    /// Kubernetes manifests, or a kustomization.
    Manifests,
    /// Nothing: it runs commands (in its directory when it has one).
    Nothing,
}

/// Reads an engine's operation output: lines for people, the change counts, and what it says of
/// a failure, a preview or a drift check.
/// A violation of one of the engine's own policies (a Pulumi policy pack's, docs/commands.md,
/// "Policies"): which pack and policy, about which resource, what it says, and whether it blocks
/// (Pulumi's `mandatory`) or is said (`advisory`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyViolation {
    pub pack: String,
    pub version: String,
    pub policy: String,
    pub resource: String,
    pub message: String,
    pub mandatory: bool,
}

pub trait OutputReader: Send + fmt::Debug {
    /// A line of its stdout: the lines to show for it.
    fn line(&mut self, line: &str) -> Vec<String>;

    /// A line of its stderr, which the caller shows as it is.
    fn stderr(&mut self, _line: &str) {}

    /// What is left to show once the process ended.
    fn finish(&mut self) -> Vec<String> {
        Vec::new()
    }

    /// The error it reported, if any: a failure's reason.
    fn error(&self) -> Option<&str> {
        None
    }

    /// What a failed step said of its failure, which `[retry]` matches (docs/formats.md,
    /// "Budgets and retries").
    fn errors(&self) -> Vec<&str> {
        Vec::new()
    }

    /// A preview's resources that change, with their properties.
    fn diffs(&self) -> Vec<ResourceDiff> {
        Vec::new()
    }

    /// A drift check's resources changed outside the engine.
    fn drifted(&self) -> Vec<ResourceDiff> {
        Vec::new()
    }

    /// Shows each change's properties under it.
    fn show_diff(&mut self, _diff: bool) {}

    /// A preview's outputs that change, and whether it creates its stack.
    fn outputs(&self) -> Option<(Vec<String>, bool)> {
        None
    }

    /// A preview's planned outputs, when its own output gave them.
    fn planned_outputs(&mut self) -> Option<PlannedOutputs> {
        None
    }

    /// What a preview plans, as one digest, when its own output says it.
    fn plan_digest(&self) -> Option<String> {
        None
    }

    /// A preview's own plan as JSON text, when its own output is one (Pulumi's preview
    /// digest), for the policies: taken, not copied.
    fn plan_document(&mut self) -> Option<String> {
        None
    }

    /// An apply's outputs, when its own output gave them: each value, `None` for a secret.
    fn applied_outputs(&self) -> Option<BTreeMap<String, Option<Value>>> {
        None
    }

    /// What the engine's own policies said of the operation (Pulumi's policy packs'
    /// `policyEvent`s), in the order it said them.
    fn policy_violations(&self) -> Vec<PolicyViolation> {
        Vec::new()
    }

    fn changes(&mut self) -> Option<Changes> {
        None
    }
}
