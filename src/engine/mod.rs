//! Engines: what a project's operation runs (argv, directory, variables) and how its output is
//! read. One file per engine; `Engines::steps` is the one place a project's steps are made, and
//! nothing outside this module builds an engine's argv. The scheduler only sees `Step`s.
//!
//! This module knows nothing of providers or workspaces: it is given plain values (`Target`).

pub mod command;
mod contract;
pub mod kubectl;
pub mod pulumi;
pub mod state;
pub mod terraform;
#[cfg(test)]
pub mod test_engine;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use contract::{
    Engine, LockClearing, OutputReader, OutputsSource, PolicyViolation, Programs, ProjectFiles,
};

/// Every engine mara knows, in the order they are listed (and sorted): to add one, write its
/// module (an `Engine`) and add it here.
static ENGINES: &[&dyn Engine] = &[
    &pulumi::PULUMI,
    &terraform::TERRAFORM,
    &terraform::TOFU,
    &command::COMMAND,
    &kubectl::KUBECTL,
    #[cfg(test)]
    &test_engine::TEST,
];

/// The engine of a project: one of `ENGINES`, named as a provider names it. It dereferences to
/// the engine itself, which answers everything engine-specific.
#[derive(Clone, Copy)]
pub struct EngineKind(&'static dyn Engine);

impl EngineKind {
    /// The engine named `name`, if mara knows one.
    pub fn named(name: &str) -> Option<EngineKind> {
        ENGINES
            .iter()
            .find(|e| e.name() == name)
            .map(|e| EngineKind(*e))
    }

    /// Every engine, in the order they are listed.
    pub fn all() -> impl Iterator<Item = EngineKind> {
        ENGINES.iter().map(|e| EngineKind(*e))
    }

    pub fn as_str(self) -> &'static str {
        self.0.name()
    }

    /// The engine of a project that gives shell commands and names no engine.
    pub fn running_commands() -> EngineKind {
        EngineKind::all()
            .find(|e| e.runs_commands())
            .expect("an engine runs commands")
    }

    /// Its place in `ENGINES`: how engines sort.
    fn rank(self) -> usize {
        ENGINES
            .iter()
            .position(|e| e.name() == self.0.name())
            .unwrap_or(usize::MAX)
    }

    /// Every engine's name, as an unknown one is answered.
    fn names() -> &'static [&'static str] {
        static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
        NAMES.get_or_init(|| ENGINES.iter().map(|e| e.name()).collect())
    }
}

/// The workspace's engine when mara.toml names none (docs/formats.md): the first listed,
/// Pulumi's.
impl Default for EngineKind {
    fn default() -> EngineKind {
        EngineKind(ENGINES[0])
    }
}

impl std::ops::Deref for EngineKind {
    type Target = dyn Engine;

    fn deref(&self) -> &dyn Engine {
        self.0
    }
}

impl PartialEq for EngineKind {
    /// By name: names are unique, and an engine may be zero-sized (two statics of no size
    /// may share an address).
    fn eq(&self, other: &EngineKind) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for EngineKind {}

impl PartialOrd for EngineKind {
    fn partial_cmp(&self, other: &EngineKind) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for EngineKind {
    fn cmp(&self, other: &EngineKind) -> std::cmp::Ordering {
        self.rank().cmp(&other.rank())
    }
}

impl std::hash::Hash for EngineKind {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for EngineKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EngineKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<EngineKind, D::Error> {
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = EngineKind;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an engine's name")
            }

            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<EngineKind, E> {
                EngineKind::named(name).ok_or_else(|| E::unknown_variant(name, EngineKind::names()))
            }
        }
        deserializer.deserialize_str(Name)
    }
}

/// The operation of a run.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    Up,
    Preview,
    Refresh,
    Destroy,
    /// `mara drift`: whether what is deployed still matches the cloud and the code, read-only.
    Drift,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Up => "up",
            Operation::Preview => "preview",
            Operation::Refresh => "refresh",
            Operation::Destroy => "destroy",
            Operation::Drift => "drift",
        }
    }

    /// Every operation.
    pub const ALL: [Operation; 5] = [
        Operation::Up,
        Operation::Preview,
        Operation::Refresh,
        Operation::Destroy,
        Operation::Drift,
    ];

    pub fn parse(text: &str) -> Option<Operation> {
        Operation::ALL.into_iter().find(|o| o.as_str() == text)
    }

    /// Whether it changes infrastructure (and so takes locks and asks for confirmation).
    pub fn mutates(self) -> bool {
        !matches!(self, Operation::Preview | Operation::Drift)
    }

    /// Whether it runs the projects' programs: an update, a preview and a drift check do;
    /// refresh and destroy do not.
    pub fn runs_programs(self) -> bool {
        matches!(self, Operation::Up | Operation::Preview | Operation::Drift)
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What every engine step of one run shares: the stack, the tools, the shared configuration.
#[derive(Debug, Clone)]
pub struct Engines {
    /// The workspace's engine, for projects that name none.
    pub default: EngineKind,
    pub pulumi: pulumi::Pulumi,
    /// The shared configuration's values: Terraform modules get theirs as `TF_VAR_*`.
    pub config: serde_json::Map<String, serde_json::Value>,
    /// `destroy --remove`: Pulumi stacks are removed once destroyed.
    pub remove_stacks: bool,
    /// How the kubectl engine reaches the stack's cluster.
    pub kubectl: kubectl::Kubectl,
    /// `state = "ledger"`: the server the projects that name no backend keep their state in.
    pub state: Option<state::StateServer>,
}

/// One project, as its engine needs to know it.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// Its path in the provider (`kubernetes/secrets`).
    pub path: &'a str,
    /// `None`: the workspace's engine.
    pub engine: Option<EngineKind>,
    /// Its shell commands, for a command project.
    pub commands: &'a command::Commands,
    /// Whether an `on_destroy` command hook reads its outputs: they are read before the destroy.
    pub destroy_reads_outputs: bool,
    /// Whether a command hook of the operation receives its outputs: which of them are secret
    /// is read too, so that what the hook prints is redacted.
    pub hook_reads_outputs: bool,
    /// Whether a hook runs after its `up`, or another project takes its outputs as inputs: only
    /// then are its outputs read (`mara output` reads them itself).
    pub up_hooks: bool,
    /// Whether another project takes its outputs as inputs: which of them are secret is read
    /// too, so that they are never recorded.
    pub outputs_taken: bool,
    /// Whether the ledger knows its stack exists: then `up` and `preview` run without selecting
    /// (or creating) it first, and do so only if the operation finds it missing.
    pub stack_known: bool,
    /// Where a Terraform module's init stamp is kept (`<state_dir>/init/<path>.stamp`).
    pub init_stamp: &'a Path,
    /// Where its preview saves its plan: an approval's, with the saved plans (`DIR/<path>.tfplan`,
    /// `DIR/<path>.plan.json`), or a Terraform module's whose planned outputs are read
    /// (`<state_dir>/plans/<run>/<path>.tfplan`).
    pub plan_file: Option<&'a Path>,
    /// Whether a preview that saves its plan records which state it was made against (the
    /// approved plans of `preview --save-plans`).
    pub record_state: bool,
    /// Whether the policies read its preview's own plan: a Terraform module's is saved and
    /// shown as JSON (`show -json`).
    pub plan_document: bool,
    /// Whether its stamp says the module was initialized on its current inputs: then `init` is
    /// left out, and runs only if the operation asks for it.
    pub initialized: bool,
    pub dir: &'a Path,
    /// Whether `dir` exists.
    pub has_dir: bool,
    /// What `dir` holds for the kubectl engine: a kustomization, or manifest files.
    pub manifests: kubectl::Source,
    /// Where a command project without a directory of its own runs: the workspace root.
    pub root: &'a Path,
    /// Where a command project leaves its outputs (`$MARA_OUTPUTS`).
    pub outputs: &'a Path,
    /// The `MARA_*` variables of its processes.
    pub context: &'a command::Context,
}

impl Target<'_> {
    /// The last path segment: a Terraform module's namespace in the shared configuration.
    pub fn leaf(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(self.path)
    }
}

impl Engines {
    /// The run's stack: every engine's (Pulumi's stack, a Terraform workspace).
    pub fn stack(&self) -> &str {
        &self.pulumi.stack
    }

    /// The run's colour: whether the engines colour what they print.
    pub fn color(&self) -> bool {
        self.pulumi.color
    }

    pub fn engine_of(&self, target: &Target<'_>) -> EngineKind {
        target.engine.unwrap_or(self.default)
    }

    /// The steps of `operation` on `target`, in order: its engine's, its outputs read only for
    /// whoever reads them.
    pub fn steps(&self, target: &Target<'_>, operation: Operation) -> Vec<Step> {
        let engine = self.engine_of(target);
        let mut steps = engine.steps(self, target, operation);
        // The outputs are read for whoever reads them: the project's hooks (docs/decisions.md).
        if operation == Operation::Up && !target.up_hooks {
            steps.retain(|s| s.kind != StepKind::Outputs);
        }
        // A destroy hook that reads the outputs needs them before they are gone.
        if operation == Operation::Destroy
            && target.destroy_reads_outputs
            && let Some(outputs) = (engine.steps(self, target, Operation::Up).into_iter())
                .find(|s| s.kind == StepKind::Outputs)
            && let Some(at) = steps.iter().position(|s| s.kind == StepKind::Operation)
        {
            steps.insert(at, outputs);
        }
        // Which outputs are secret, for a hook that receives them, or the ledger that records
        // those others take.
        if (target.hook_reads_outputs || (target.outputs_taken && operation == Operation::Up))
            && let Some(marks) = engine.secret_marks_step(self, target.dir)
            && let Some(at) = steps.iter().position(|s| s.kind == StepKind::Outputs)
        {
            steps.insert(at + 1, marks);
        }
        self.keep_state(engine, target.path, target.dir, &mut steps);
        // Held by the plan until the run ends: no room for steps that will not come.
        steps.shrink_to_fit();
        steps
    }

    /// Gives each of `steps` of the project at `path` (in `dir`) what keeps its state in the
    /// ledger's server (`state = "ledger"`), when it keeps it there: its engine's variables,
    /// the password, the file its engine reads.
    pub fn keep_state(&self, engine: EngineKind, path: &str, dir: &Path, steps: &mut [Step]) {
        state::keep(&*engine, self.state.as_ref(), path, dir, steps);
    }

    /// `step` of the project at `path` (in `dir`), with what keeps its state (`keep_state`).
    pub fn keeping_state(&self, engine: EngineKind, path: &str, dir: &Path, step: Step) -> Step {
        let mut steps = [step];
        self.keep_state(engine, path, dir, &mut steps);
        let [step] = steps;
        step
    }

    /// What an `up` of an approved plan may run instead of its operation (docs/commands.md,
    /// "Saved plans"): `saved` is the approved plan's file, `replan` where a new one is saved.
    pub fn approval_steps(
        &self,
        target: &Target<'_>,
        saved: Option<&Path>,
        replan: &Path,
    ) -> ApprovalSteps {
        let engine = self.engine_of(target);
        let mut steps = engine.approval_steps(self, target, saved, replan);
        let ApprovalSteps {
            apply_saved,
            replan,
            apply_replanned,
            show_saved,
            show_replanned,
            read_state,
        } = &mut steps;
        let each = [
            apply_saved,
            replan,
            apply_replanned,
            show_saved,
            show_replanned,
        ];
        for step in each.into_iter().flatten() {
            self.keep_state(engine, target.path, target.dir, std::slice::from_mut(step));
        }
        self.keep_state(engine, target.path, target.dir, read_state);
        steps
    }
}

/// The steps an `up` of an approved plan may run instead of its operation (docs/commands.md,
/// "Saved plans").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApprovalSteps {
    /// Applies the saved plan (Terraform's `apply PLANFILE`, Pulumi's `up --plan FILE`).
    pub apply_saved: Option<Step>,
    /// Plans again, to compare with the approved plan: Terraform's `plan -out=NEW`, Pulumi's
    /// preview.
    pub replan: Option<Step>,
    /// Applies what `replan` planned (Terraform's `apply NEW`); `None`: the operation as planned.
    pub apply_replanned: Option<Step>,
    /// Reads what the saved plan and the new one do (Terraform's `show -json`), to compare them.
    pub show_saved: Option<Step>,
    pub show_replanned: Option<Step>,
    /// Reads the version of the state the saved plan must still be made against (Terraform's
    /// `state pull`, `init` first when needed), before anything of the run is applied.
    pub read_state: Vec<Step>,
}

/// Why a step runs: its output is read differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// Makes sure the stack exists.
    Prepare,
    /// The operation itself: its output is shown and its changes counted.
    Operation,
    /// Reads the stack outputs (after a successful `up`), as JSON on stdout.
    Outputs,
    /// Reads which of them are secret, for a command hook that receives them (Pulumi: the
    /// outputs without `--show-secrets`, whose secrets are `"[secret]"`).
    SecretMarks,
    /// Cleans up after the operation (`stack rm` for `destroy --remove`).
    Cleanup,
    /// Reads what a saved plan leaves as outputs (Terraform's `show -json PLANFILE`); never
    /// shown: it holds the plan's secrets.
    PlannedOutputs,
    /// Reads the version of the state a plan is made against (Terraform's `state pull`: its
    /// lineage and serial); never shown: the state holds the resources' secrets.
    StateVersion,
}

/// Which state a Terraform plan was made against: its lineage and serial, which Terraform
/// compares with the state's before it applies a saved plan (docs/commands.md, "Saved plans").
/// A module without state yet has no lineage, and serial 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateVersion {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage: Option<String>,
    pub serial: u64,
}

impl fmt::Display for StateVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.lineage {
            None => f.write_str("no state"),
            Some(lineage) => write!(f, "serial {} of lineage {lineage}", self.serial),
        }
    }
}

/// One output as a preview plans it (docs/commands.md, "Previews across stacks").
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedOutput {
    /// Its value once the update is applied; `None` when it is known only then.
    pub value: Option<serde_json::Value>,
    /// Whether the update changes it (or makes it).
    pub changes: bool,
    pub secret: bool,
}

/// A preview's planned outputs, by name.
pub type PlannedOutputs = BTreeMap<String, PlannedOutput>;

/// A plan's content as one digest (`sha256:…`): what it does to each resource and output, so
/// that two plans that do the same thing have the same digest, and no two that differ in a value
/// do. Secrets count by their digest alone, never kept.
pub fn plan_digest(content: &serde_json::Value) -> String {
    sha256(&content.to_string())
}

/// `sha256:<hex>` of `text`: how a plan's digest, and a secret an approval compares, are kept.
pub fn sha256(text: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// One engine process to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub kind: StepKind,
    pub program: String,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    /// Variables added to the run's environment for this step (`TF_VAR_*`, `MARA_OUTPUTS`).
    pub env: BTreeMap<String, String>,
    /// The exit codes that mean success (`plan -detailed-exitcode` exits 2 for changes).
    pub ok_codes: Vec<i32>,
    /// The exit code that says the operation found changes, whatever its output counted
    /// (`plan -detailed-exitcode` exits 2; Terraform before 1.1 reports no output actions).
    pub changes_code: Option<i32>,
    /// What may repair this step when it fails, each tried at most once: its step runs, then
    /// this step again (the stack the ledger knew is gone; a Terraform module needs `init`).
    pub repairs: Vec<Repair>,
    /// Recorded once the step succeeds: the inputs `terraform init` was run on.
    pub stamp: Option<terraform::InitStamp>,
    /// Variables of the run's environment this step does not get (`TF_WORKSPACE`, which
    /// `terraform workspace` refuses to work under).
    pub unset: Vec<&'static str>,
    /// A file the step writes (a plan): its directory is made first, private.
    pub writes: Option<PathBuf>,
    /// A list of the project's stacks (`terraform workspace list`): the project is without its
    /// stack unless the list names this one.
    pub listed: Option<String>,
    /// A file its engine reads that mara writes (`state = "ledger"`'s backend for a Terraform
    /// module): made, when missing or different, before its process starts.
    pub generated: Option<state::Generated>,
}

/// What a step's failure may say is missing, and what provides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    pub when: Missing,
    pub step: Step,
}

/// What a failed step may find missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// Its stack (a Pulumi stack, a Terraform workspace).
    Stack,
    /// The Terraform module's working directory (`init`).
    Init,
}

impl Missing {
    /// Whether a step on `stack` that failed with `code`, `stderr` and the engine's own error
    /// (`reported`) says this is missing.
    pub fn said(
        self,
        engine: EngineKind,
        stack: &str,
        code: Option<i32>,
        stderr: &str,
        reported: Option<&str>,
    ) -> bool {
        match self {
            Missing::Stack => {
                engine.is_missing_stack(stack, code, stderr)
                    || reported.is_some_and(|r| engine.is_missing_stack(stack, code, r))
            }
            Missing::Init => {
                engine.needs_init(stderr) || reported.is_some_and(|r| engine.needs_init(r))
            }
        }
    }
}

/// The variables a step's display shows before its program (`--dry-run`, the logs): the ones
/// that choose what it works on. The others (`TF_VAR_*`) stay out of sight.
const SHOWN_VARIABLES: &[&str] = &["TF_WORKSPACE"];

impl Step {
    /// A step with no extra variables, succeeding on exit 0.
    pub fn new(
        kind: StepKind,
        program: impl Into<String>,
        mut args: Vec<String>,
        cwd: impl Into<PathBuf>,
    ) -> Step {
        // A plan of thousands holds every step until the run ends (docs/benchmarks.md).
        args.shrink_to_fit();
        Step {
            kind,
            program: program.into(),
            args,
            cwd: cwd.into(),
            env: BTreeMap::new(),
            ok_codes: vec![0],
            changes_code: None,
            repairs: Vec::new(),
            stamp: None,
            unset: Vec::new(),
            listed: None,
            writes: None,
            generated: None,
        }
    }

    pub fn succeeded(&self, code: Option<i32>) -> bool {
        code.is_some_and(|c| self.ok_codes.contains(&c))
    }

    /// The command as a shell would show it (for `--dry-run` and logs).
    pub fn display(&self) -> String {
        let variables = SHOWN_VARIABLES.iter().filter_map(|name| {
            self.env
                .get(*name)
                .map(|value| format!("{name}={}", shell_quote(value)))
        });
        let words = std::iter::once(self.program.as_str())
            .chain(self.args.iter().map(String::as_str))
            .map(shell_quote);
        variables.chain(words).collect::<Vec<_>>().join(" ")
    }
}

/// A word quoted for a POSIX shell when it needs it.
pub fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@,+%".contains(c))
    {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// One resource a preview changes, with the properties that change (docs/commands.md, "Property
/// diffs").
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ResourceDiff {
    /// `create`, `update`, `delete`, `replace`, … as the engine names it.
    pub op: String,
    /// `type (name)` for Pulumi, the address for Terraform.
    pub resource: String,
    pub properties: Vec<PropertyDiff>,
}

/// One property that changes: its path, how (`add`, `update`, `delete`, with `-replace` when it
/// forces a replacement), and its values as JSON text — `[secret]` for a secret.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PropertyDiff {
    pub path: String,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new: Option<String>,
}

impl ResourceDiff {
    /// As `pulumi preview --diff` shows it: the resource, then each property, indented.
    pub fn lines(&self) -> Vec<String> {
        let mark = match self.op.as_str() {
            "create" => "+",
            "delete" => "-",
            "update" => "~",
            "same" => " ",
            _ => "+-",
        };
        let mut lines = vec![format!("{mark} {}", self.resource)];
        for property in &self.properties {
            let mark = match property.kind.trim_end_matches("-replace") {
                "add" => "+",
                "delete" => "-",
                _ => "~",
            };
            let values = match (&property.old, &property.new) {
                (Some(old), Some(new)) => format!(": {old} => {new}"),
                (None, Some(new)) => format!(": {new}"),
                (Some(old), None) => format!(": {old}"),
                (None, None) => String::new(),
            };
            let replaces = match property.kind.ends_with("-replace") {
                true => " (forces replacement)",
                false => "",
            };
            lines.push(format!("    {mark} {}{values}{replaces}", property.path));
        }
        lines
    }
}

/// Reads an engine's operation output (its `OutputReader`): lines for people, and the change
/// counts.
#[derive(Debug)]
pub struct Reader(Box<dyn OutputReader>);

impl Reader {
    pub fn new(engine: EngineKind, operation: Operation) -> Reader {
        Reader(engine.reader(operation))
    }

    pub fn line(&mut self, line: &str) -> Vec<String> {
        self.0.line(line)
    }

    /// A line of the step's stderr, which the caller shows as it is: a command keeps it among
    /// its last lines (the engines' own errors come in their stdout's messages).
    pub fn stderr(&mut self, line: &str) {
        self.0.stderr(line);
    }

    pub fn finish(&mut self) -> Vec<String> {
        self.0.finish()
    }

    /// The error the engine reported in its output (Pulumi's and Terraform's diagnostics of
    /// severity error), if any: a failure's reason.
    pub fn error(&self) -> Option<&str> {
        self.0.error()
    }

    /// What a failed step said of its failure, which `[retry]` matches (docs/formats.md,
    /// "Budgets and retries"): Terraform's and Pulumi's diagnostics of severity error, every one
    /// of them; a command's last lines of output (`command::LAST_LINES`, stdout and stderr as
    /// they came). Never the rest of what it printed: one resource's throttling is not why
    /// another failed. kubectl has none: its failure's reason (its last `error:` line) stands
    /// for it.
    pub fn errors(&self) -> Vec<&str> {
        self.0.errors()
    }

    /// A preview's resources that change, with their properties.
    pub fn diffs(&self) -> Vec<ResourceDiff> {
        self.0.diffs()
    }

    /// A drift check's resources changed outside the engine: Terraform's `resource_drift`,
    /// Pulumi's refresh steps. (`kubectl diff` cannot tell an object changed in the cluster from
    /// a manifest changed in the code: what it finds is what applying would change.)
    pub fn drifted(&self) -> Vec<ResourceDiff> {
        self.0.drifted()
    }

    /// Shows each change's properties under it (`preview --diff`, the confirmation's details).
    pub fn with_diff(mut self, diff: bool) -> Reader {
        self.0.show_diff(diff);
        self
    }

    /// A preview's outputs that change, and whether it creates its stack; `None` when the
    /// engine did not say.
    pub fn outputs(&self) -> Option<(Vec<String>, bool)> {
        self.0.outputs()
    }

    /// A preview's planned outputs, when its own output gave them (Pulumi's digest; Terraform's
    /// come from its saved plan, `StepKind::PlannedOutputs`).
    pub fn planned_outputs(&mut self) -> Option<PlannedOutputs> {
        self.0.planned_outputs()
    }

    /// What a preview plans, as one digest, when its own output says it (Pulumi's digest;
    /// Terraform's is read from its saved plan).
    pub fn plan_digest(&self) -> Option<String> {
        self.0.plan_digest()
    }

    /// A preview's own plan as JSON text, when its own output is one (Pulumi's digest;
    /// Terraform's is shown from its saved plan, `StepKind::PlannedOutputs`).
    pub fn plan_document(&mut self) -> Option<String> {
        self.0.plan_document()
    }

    /// What the engine's own policies said of the operation (Pulumi's policy packs).
    pub fn policy_violations(&self) -> Vec<PolicyViolation> {
        self.0.policy_violations()
    }

    /// An apply's outputs, when its own output gave them (Terraform's last message): each
    /// value, `None` for a sensitive one.
    pub fn applied_outputs(&self) -> Option<BTreeMap<String, Option<serde_json::Value>>> {
        self.0.applied_outputs()
    }

    pub fn changes(&mut self) -> Option<Changes> {
        self.0.changes()
    }
}

/// The secret values among outputs as Pulumi marks them: where the outputs read without
/// `--show-secrets` (`marks`) say `"[secret]"` (`outputs` is what the outputs step printed).
pub(crate) fn marked_values(outputs: &str, marks: Option<&str>) -> Vec<String> {
    let mut secrets = Vec::new();
    let shown = serde_json::from_str(outputs).unwrap_or_default();
    let marks = marks
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or_default();
    marked(&shown, &marks, &mut secrets);
    secrets
}

/// The names of outputs that are secret as Pulumi marks them, or hold a secret anywhere inside:
/// where the outputs read without `--show-secrets` (`marks`) say `"[secret]"` (all of them when
/// the marks are that alone).
pub(crate) fn marked_names(
    outputs: &str,
    marks: Option<&str>,
) -> std::collections::BTreeSet<String> {
    use serde_json::Value;
    fn holds_secret(mark: &Value) -> bool {
        match mark {
            Value::String(mark) => mark == "[secret]",
            Value::Object(map) => map.values().any(holds_secret),
            Value::Array(items) => items.iter().any(holds_secret),
            _ => false,
        }
    }
    let Ok(Value::Object(shown)) = serde_json::from_str::<Value>(outputs) else {
        return Default::default();
    };
    let marks: Value = marks
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or(Value::String("[secret]".into()));
    (shown.keys())
        .filter(|name| match &marks {
            Value::Object(marks) => marks.get(*name).is_none_or(holds_secret),
            other => holds_secret(other),
        })
        .cloned()
        .collect()
}

/// The leaves of `shown` where `marks` holds `"[secret]"`.
fn marked(shown: &serde_json::Value, marks: &serde_json::Value, into: &mut Vec<String>) {
    use serde_json::Value;
    match (shown, marks) {
        (_, Value::String(mark)) if mark == "[secret]" => leaves(shown, into),
        (Value::Object(shown), Value::Object(marks)) => {
            for (key, mark) in marks {
                if let Some(value) = shown.get(key) {
                    marked(value, mark, into);
                }
            }
        }
        (Value::Array(shown), Value::Array(marks)) => {
            for (value, mark) in shown.iter().zip(marks) {
                marked(value, mark, into);
            }
        }
        _ => {}
    }
}

/// What the redactor must hide of a secret `value`: every scalar in it, as text, and a
/// structured one also whole, as one line of JSON.
pub fn secret_texts(value: &serde_json::Value) -> Vec<String> {
    let mut texts = Vec::new();
    leaves(value, &mut texts);
    texts
}

/// Every scalar in `value`, as text; a structured secret also whole, as one line of JSON.
fn leaves(value: &serde_json::Value, into: &mut Vec<String>) {
    use serde_json::Value;
    match value {
        Value::String(text) => into.push(text.clone()),
        Value::Number(number) => into.push(number.to_string()),
        Value::Object(map) => {
            into.push(value.to_string());
            map.values().for_each(|v| leaves(v, into));
        }
        Value::Array(items) => {
            into.push(value.to_string());
            items.iter().for_each(|v| leaves(v, into));
        }
        Value::Bool(_) | Value::Null => {}
    }
}

/// Whether an engine's stderr (or error) says another run holds the stack's (or state's) lock,
/// as any engine says it.
pub fn is_locked(stderr: &str) -> bool {
    ENGINES.iter().any(|e| e.says_locked(stderr))
}

/// Resource change counts by Pulumi operation name (`create`, `same`, `update`, `delete`, …).
pub type Changes = BTreeMap<String, u64>;

/// What a count of changes names that changes nothing: a resource left as it was (`same`), or
/// only read (`read`: Pulumi reads a stack reference on every run, and counts it when the stack
/// it reads changed; Terraform reads its data sources) — as Pulumi's own `--expect-no-changes`
/// counts them.
pub fn changes_nothing(op: &str) -> bool {
    op == "same" || op == "read"
}

/// Whether any count is a real change.
pub fn has_changes(changes: &Changes) -> bool {
    changes.iter().any(|(op, n)| !changes_nothing(op) && *n > 0)
}

/// `+2 ~1 -1` for people (`same` is not a change).
pub fn changes_summary(changes: &Changes) -> String {
    let symbol = |op: &str| match op {
        "create" => "+",
        "update" => "~",
        "delete" => "-",
        "replace" => "±",
        _ => "",
    };
    // Pulumi's and Terraform's order (create, update, delete, replace), then the others.
    let rank = |op: &str| {
        ["create", "update", "delete", "replace"]
            .iter()
            .position(|o| *o == op)
            .unwrap_or(4)
    };
    let mut ordered: Vec<(&String, &u64)> = changes.iter().collect();
    ordered.sort_by_key(|(op, _)| rank(op));
    let parts: Vec<String> = ordered
        .into_iter()
        .filter(|(op, n)| !changes_nothing(op) && **n > 0)
        .map(|(op, n)| match symbol(op) {
            "" => format!(
                "{n} {}",
                crate::error::plural(*n as usize, op, &format!("{op}s"))
            ),
            s => format!("{s}{n}"),
        })
        .collect();
    if parts.is_empty() {
        "no changes".into()
    } else {
        parts.join(" ")
    }
}

/// Messages with their payload missing, of the wrong type, or cut short: the hostile-input sweep
/// (issue 12) found readers that indexed them blindly. Each must be read without a panic.
#[cfg(test)]
pub(crate) const MALFORMED_MESSAGES: &[&str] = &[
    "",
    "{",
    "null",
    "[]",
    "42",
    "\"text\"",
    r#"{"type":"change_summary"}"#,
    r#"{"type":"change_summary","changes":5}"#,
    r#"{"type":"change_summary","changes":{"add":-1,"change":"x","remove":1e400}}"#,
    r#"{"type":"outputs"}"#,
    r#"{"type":"outputs","outputs":[1,2]}"#,
    r#"{"type":"outputs","outputs":{"a":null,"b":{"action":7}}}"#,
    r#"{"type":"diagnostic"}"#,
    r#"{"type":"diagnostic","@level":"error","diagnostic":{"range":{"start":{"line":"x"}}}}"#,
    r#"{"type":7}"#,
    r#"{"diagnosticEvent":null}"#,
    r#"{"diagnosticEvent":{"severity":"error"}}"#,
    r#"{"diagnosticEvent":{"severity":"error","message":7}}"#,
    r#"{"summaryEvent":{"resourceChanges":[1]}}"#,
    r#"{"summaryEvent":{"resourceChanges":{"create":"many"}}}"#,
    r#"{"resourcePreEvent":{}}"#,
    r#"{"resOpFailedEvent":{"metadata":7}}"#,
    r#"{"cancelEvent":1}"#,
    r#"{"changeSummary":{"create":-3},"steps":7,"diagnostics":"x"}"#,
    r#"{"changeSummary":[],"diagnostics":[{"severity":"error"}]}"#,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// What `[retry]` matches, per engine: a command's last lines of both streams; an engine's
    /// error diagnostics, not its other lines nor its stderr.
    #[test]
    fn a_failure_says_its_errors_and_not_the_rest_of_its_output() {
        let mut command = Reader::new(EngineKind::named("command").unwrap(), Operation::Up);
        command.line("rate exceeded on another resource");
        for i in 0..command::LAST_LINES {
            command.line(&format!("line {i}"));
        }
        command.stderr("error: permission denied");
        let said = command.errors();
        assert_eq!(said.len(), command::LAST_LINES);
        assert_eq!(said.last(), Some(&"error: permission denied"));
        assert!(!said.iter().any(|l| l.contains("rate exceeded")));

        let mut terraform = Reader::new(EngineKind::named("tofu").unwrap(), Operation::Up);
        terraform.line(r#"{"@level":"info","@message":"rate exceeded","type":"log"}"#);
        terraform.stderr("rate exceeded");
        assert!(terraform.errors().is_empty());
        terraform.line(r#"{"@level":"error","@message":"Error: x","diagnostic":{"severity":"error","summary":"x"},"type":"diagnostic"}"#);
        assert_eq!(terraform.errors(), ["x"]);

        let mut kubectl = Reader::new(EngineKind::named("kubectl").unwrap(), Operation::Up);
        kubectl.stderr("error: rate exceeded");
        assert!(kubectl.errors().is_empty(), "its reason stands for it");
    }

    #[test]
    fn secret_outputs_are_found_where_pulumi_marks_them_and_terraform_calls_them_sensitive() {
        let shown = r#"{"url": "https://x", "token": "t0k3n", "db": {"user": "u", "password": "pw-123"}, "keys": ["k1", "k2"]}"#;
        let marks = r#"{"url": "https://x", "token": "[secret]", "db": {"user": "u", "password": "[secret]"}, "keys": "[secret]"}"#;
        let mut found = EngineKind::named("pulumi")
            .unwrap()
            .secret_outputs(shown, Some(marks));
        found.sort();
        assert_eq!(found, ["[\"k1\",\"k2\"]", "k1", "k2", "pw-123", "t0k3n"]);
        assert!(
            EngineKind::named("pulumi")
                .unwrap()
                .secret_outputs(shown, None)
                .is_empty()
        );
        assert!(
            EngineKind::named("pulumi")
                .unwrap()
                .secret_outputs("not json", Some("{}"))
                .is_empty()
        );
        let terraform = r#"{"a": {"value": "open", "sensitive": false}, "b": {"value": 4242, "sensitive": true}}"#;
        assert_eq!(
            EngineKind::named("terraform")
                .unwrap()
                .secret_outputs(terraform, None),
            ["4242"]
        );
    }
}
