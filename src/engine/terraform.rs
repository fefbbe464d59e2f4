//! Terraform and OpenTofu root modules (docs/commands.md, "up, preview, refresh, destroy"): the same CLI contract, two binaries.
//!
//! Per project, in its directory: `init -input=false` when the module's init stamp is not
//! current (or the operation says the module needs it), then the operation with `-json` so that
//! change counts come from the `change_summary` message, in the stack's workspace chosen by
//! `TF_WORKSPACE` rather than a `workspace select` call: `apply -auto-approve -input=false` (up),
//! `plan -detailed-exitcode -input=false` (preview; exit 2 means changes),
//! `apply -refresh-only -auto-approve -input=false` (refresh), `destroy -auto-approve
//! -input=false`, and after up `output -json` when a hook reads the outputs. A workspace the
//! backend does not make on its own is made (`workspace new`) when `up` or `preview` finds it
//! missing; `destroy` (and `refresh` of a workspace the ledger does not know) lists the module's
//! workspaces first, and a module without the stack's is not touched. The shared
//! configuration's keys in the module's namespace (its directory's name) reach it as
//! `TF_VAR_<key>`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::state::{Generated, InServer, Migration, Shared, StateServer};
use super::{Changes, Missing, Operation, Repair, Step, StepKind, changes_summary};

/// Terraform's message when another run holds the state lock.
pub const LOCKED_MARKER: &str = "Error acquiring the state lock";

#[derive(Debug, Clone)]
pub struct Terraform {
    /// `terraform` or `tofu`.
    pub binary: String,
    pub stack: String,
    pub color: bool,
}

/// One module, as its steps need to know it.
#[derive(Debug, Clone)]
pub struct Module<'a> {
    pub dir: &'a Path,
    /// `TF_VAR_*`, from the shared configuration.
    pub variables: BTreeMap<String, String>,
    pub stamp: InitStamp,
    /// Whether the stamp is current: `init` then runs only if the operation asks for it.
    pub initialized: bool,
    /// Whether the ledger knows the stack's workspace exists.
    pub workspace_known: bool,
    /// Where a preview saves its plan.
    pub plan_file: Option<&'a Path>,
    /// Whether a saved plan's outputs are read (`show -json`): another project takes them.
    pub read_planned: bool,
    /// Whether a saved plan records which state it was made against (`state pull` before it).
    pub record_state: bool,
}

impl Terraform {
    /// One call in `module`'s directory, with its variables.
    fn call(&self, module: &Module<'_>, kind: StepKind, words: &[&str]) -> Step {
        let mut args: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        if !self.color {
            args.push("-no-color".into());
        }
        let mut step = Step::new(kind, self.binary.clone(), args, module.dir);
        step.env = module.variables.clone();
        // Terraform's own hint for tools that drive it: no "run terraform apply next" advice.
        step.env.insert("TF_IN_AUTOMATION".into(), "1".into());
        step
    }

    /// A plan of `module` in the stack's workspace saved to `file` (`-detailed-exitcode`: exit
    /// 2 is changes).
    pub fn plan_to(&self, module: &Module<'_>, file: &Path) -> Step {
        let out = format!("-out={}", file.display());
        let words = ["plan", "-detailed-exitcode", "-input=false", "-json", &out];
        let mut step = self.call(module, StepKind::Operation, &words);
        step.env.insert("TF_WORKSPACE".into(), self.stack.clone());
        step.ok_codes = vec![0, 2];
        step.changes_code = Some(2);
        step.writes = Some(file.to_path_buf());
        step
    }

    /// The apply of the plan saved in `file` (which holds its variables and workspace: Terraform
    /// refuses it once the state changed since it was made).
    pub fn apply_plan(&self, module: &Module<'_>, file: &Path) -> Step {
        let file = file.display().to_string();
        let mut step = self.call(
            module,
            StepKind::Operation,
            &["apply", "-input=false", "-json", &file],
        );
        step.env.insert("TF_WORKSPACE".into(), self.stack.clone());
        step
    }

    /// What the plan saved in `file` does, as JSON (`show -json`): never shown, it holds the
    /// plan's secrets.
    pub fn show_plan(&self, module: &Module<'_>, file: &Path) -> Step {
        let file = file.display().to_string();
        self.call(module, StepKind::PlannedOutputs, &["show", "-json", &file])
    }

    /// Reads the version of the stack's state (`state pull`, whose lineage and serial alone
    /// are kept: the state holds secrets).
    pub fn state_pull(&self, module: &Module<'_>) -> Step {
        let mut step = self.call(module, StepKind::StateVersion, &["state", "pull"]);
        step.env.insert("TF_WORKSPACE".into(), self.stack.clone());
        step
    }

    /// What reads the state's version outside a run's steps (an approved plan's check): `init`
    /// first when the module's stamp is not current, then `state pull`, which asks for `init`
    /// again if the working directory is gone.
    pub fn state_steps(&self, module: &Module<'_>) -> Vec<Step> {
        let mut init = self.call(module, StepKind::Prepare, &["init", "-input=false"]);
        init.stamp = Some(module.stamp.clone());
        let mut pull = self.state_pull(module);
        pull.repairs.push(Repair {
            when: Missing::Init,
            step: init.clone(),
        });
        match module.initialized {
            true => vec![pull],
            false => vec![init, pull],
        }
    }

    /// The steps of `operation` on `module`: `init` when its stamp is not current, a list of
    /// its workspaces where the operation must not make one, the state a saved plan is made
    /// against, the operation, what an `up` leaves as outputs, what a saved plan plans.
    pub fn steps(&self, module: &Module<'_>, operation: Operation) -> Vec<Step> {
        let init = self.init(module);
        let mut steps = Vec::new();
        if !module.initialized {
            steps.push(init.clone());
        }
        let never_makes = matches!(
            operation,
            Operation::Destroy | Operation::Refresh | Operation::Drift
        );
        if operation == Operation::Destroy || (never_makes && !module.workspace_known) {
            steps.push(self.repaired(module, self.workspaces_listed(module), &init));
        }
        let plan_file = (module.plan_file)
            .filter(|_| matches!(operation, Operation::Preview | Operation::Drift));
        // An approved plan keeps which state it was made against, read before it is made: a
        // change between the two makes the plan look stale, never a stale one current.
        if plan_file.is_some() && module.record_state {
            steps.push(self.repaired(module, self.state_pull(module), &init));
        }
        let mut op = self.repaired(module, self.operation(module, operation, plan_file), &init);
        // The local and S3 backends make a workspace as they first write its state; others
        // want it made first.
        if !never_makes {
            op.repairs.push(Repair {
                when: Missing::Stack,
                step: self.outside(module, &["workspace", "new", &self.stack]),
            });
        }
        steps.push(op);
        if operation == Operation::Up {
            let mut output = self.call(module, StepKind::Outputs, &["output", "-json"]);
            output.env.insert("TF_WORKSPACE".into(), self.stack.clone());
            steps.push(output);
        }
        if let Some(file) = plan_file.filter(|_| module.read_planned) {
            steps.push(self.show_plan(module, file));
        }
        steps
    }

    /// `init -input=false`, its stamp recorded once it succeeded.
    fn init(&self, module: &Module<'_>) -> Step {
        let mut init = self.call(module, StepKind::Prepare, &["init", "-input=false"]);
        init.stamp = Some(module.stamp.clone());
        init
    }

    /// `step`, repaired by `init` when it says the module needs one (only where `init` is not
    /// run first anyway).
    fn repaired(&self, module: &Module<'_>, mut step: Step, init: &Step) -> Step {
        if module.initialized {
            step.repairs.push(Repair {
                when: Missing::Init,
                step: init.clone(),
            });
        }
        step
    }

    /// A step outside the stack's workspace: `terraform workspace` refuses to run under a
    /// `TF_WORKSPACE` of the person's own. (`init` keeps it: a backend without a `default`
    /// workspace needs one to initialize.)
    fn outside(&self, module: &Module<'_>, words: &[&str]) -> Step {
        let mut step = self.call(module, StepKind::Prepare, words);
        step.unset = vec!["TF_WORKSPACE"];
        step
    }

    /// Its workspaces, listed: `destroy` and `refresh` never make the workspace (which the local
    /// backend would do as they write), so a module without it is reported as such and not
    /// touched — always before a destroy; before a refresh or a drift check (which writes
    /// nothing), unless the ledger knows the workspace exists.
    fn workspaces_listed(&self, module: &Module<'_>) -> Step {
        let mut list = self.outside(module, &["workspace", "list"]);
        list.listed = Some(self.stack.clone());
        list
    }

    /// The operation in the stack's workspace: a preview's plan saved to `plan_file` when one
    /// is kept; a plan's exit 2 is changes.
    fn operation(
        &self,
        module: &Module<'_>,
        operation: Operation,
        plan_file: Option<&Path>,
    ) -> Step {
        let words: &[&str] = match operation {
            Operation::Up => &["apply", "-auto-approve", "-input=false", "-json"],
            // A drift check is a plan with its refresh (Terraform's default), kept nowhere: its
            // `resource_drift` messages are what changed outside.
            Operation::Preview | Operation::Drift => {
                &["plan", "-detailed-exitcode", "-input=false", "-json"]
            }
            Operation::Refresh => &[
                "apply",
                "-refresh-only",
                "-auto-approve",
                "-input=false",
                "-json",
            ],
            Operation::Destroy => &["destroy", "-auto-approve", "-input=false", "-json"],
        };
        let mut op = match plan_file {
            Some(file) => self.plan_to(module, file),
            None => {
                let mut op = self.call(module, StepKind::Operation, words);
                op.env.insert("TF_WORKSPACE".into(), self.stack.clone());
                op
            }
        };
        if matches!(operation, Operation::Preview | Operation::Drift) {
            op.ok_codes = vec![0, 2];
            op.changes_code = Some(2);
        }
        op
    }
}

/// A root module's engine: Terraform, or OpenTofu, which takes the same command line under
/// another binary's name.
pub struct TerraformEngine {
    binary: &'static str,
}

/// Terraform (`engine = "terraform"`) and OpenTofu (`engine = "tofu"`), as `engine::ENGINES`
/// registers them.
pub static TERRAFORM: TerraformEngine = TerraformEngine {
    binary: "terraform",
};
pub static TOFU: TerraformEngine = TerraformEngine { binary: "tofu" };

impl TerraformEngine {
    /// `words` in `dir` outside a run's plan (`init` before outputs are read), with the
    /// shared configuration's variables of the module.
    fn call_in(&self, run: &super::Engines, dir: &Path, words: &[&str]) -> Step {
        let leaf = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let mut step = Step::new(
            StepKind::Prepare,
            self.binary,
            words.iter().map(|w| w.to_string()).collect(),
            dir,
        );
        step.env = variables(&run.config, leaf);
        step.env.insert("TF_IN_AUTOMATION".into(), "1".into());
        step.unset = vec!["TF_WORKSPACE"];
        step
    }

    /// The binary of this run, on its stack.
    fn terraform(&self, run: &super::Engines) -> Terraform {
        Terraform {
            binary: self.binary.to_string(),
            stack: run.stack().to_string(),
            color: run.color(),
        }
    }

    /// `target` as a module: its variables from the shared configuration, its init stamp; no
    /// plan saved.
    fn module<'t>(&self, run: &super::Engines, target: &super::Target<'t>) -> Module<'t> {
        Module {
            dir: target.dir,
            variables: variables(&run.config, target.leaf()),
            stamp: self.stamp(target),
            initialized: target.initialized,
            workspace_known: target.stack_known,
            plan_file: None,
            read_planned: false,
            record_state: false,
        }
    }

    fn stamp(&self, target: &super::Target<'_>) -> InitStamp {
        InitStamp {
            file: target.init_stamp.to_path_buf(),
            dir: target.dir.to_path_buf(),
            binary: self.binary.to_string(),
        }
    }
}

impl super::Engine for TerraformEngine {
    fn name(&self) -> &'static str {
        self.binary
    }

    fn program(&self, _programs: &super::Programs<'_>) -> Option<String> {
        Some(self.binary.to_string())
    }

    fn install_hint(&self) -> Option<&'static str> {
        Some(match self.binary {
            "tofu" => "install OpenTofu (https://opentofu.org/docs/intro/install/)",
            _ => "install Terraform (https://developer.hashicorp.com/terraform/install)",
        })
    }

    fn steps(&self, run: &super::Engines, target: &super::Target<'_>, op: Operation) -> Vec<Step> {
        let module = Module {
            plan_file: target.plan_file,
            read_planned: target.outputs_taken || target.plan_document,
            record_state: target.record_state,
            ..self.module(run, target)
        };
        self.terraform(run).steps(&module, op)
    }

    fn reader(&self, _operation: Operation) -> Box<dyn super::OutputReader> {
        Box::new(Reader::default())
    }

    fn approval_steps(
        &self,
        run: &super::Engines,
        target: &super::Target<'_>,
        saved: Option<&Path>,
        replan: &Path,
    ) -> super::ApprovalSteps {
        let module = self.module(run, target);
        let terraform = self.terraform(run);
        super::ApprovalSteps {
            apply_saved: saved.map(|file| terraform.apply_plan(&module, file)),
            replan: Some(terraform.plan_to(&module, replan)),
            apply_replanned: Some(terraform.apply_plan(&module, replan)),
            show_saved: saved.map(|file| terraform.show_plan(&module, file)),
            show_replanned: Some(terraform.show_plan(&module, replan)),
            read_state: match saved {
                Some(_) => terraform.state_steps(&module),
                None => Vec::new(),
            },
        }
    }

    fn saves_plan_files(&self) -> bool {
        true
    }

    fn plan_suffix(&self) -> Option<&'static str> {
        Some(".tfplan")
    }

    fn applies_saved_plans(&self, _run: &super::Engines) -> bool {
        true
    }

    fn input_variable(&self, name: &str) -> String {
        format!("TF_VAR_{name}")
    }

    fn config_namespace(&self, leaf: &str, _pulumi_name: Option<&str>) -> Option<String> {
        Some(leaf.to_string())
    }

    fn config_keys_read(&self, dir: &Path) -> Option<Vec<String>> {
        declared_variables(dir)
    }

    fn config_variables(
        &self,
        values: &Map<String, Value>,
        leaf: &str,
    ) -> Vec<(String, String, String)> {
        (variables(values, leaf).into_iter())
            .map(|(variable, value)| {
                let key = format!("{leaf}:{}", variable.trim_start_matches("TF_VAR_"));
                (key, variable, value)
            })
            .collect()
    }

    fn is_missing_stack(&self, stack: &str, _code: Option<i32>, stderr: &str) -> bool {
        is_missing_workspace(stderr, stack)
    }

    fn needs_init(&self, output: &str) -> bool {
        needs_init(output)
    }

    fn says_locked(&self, text: &str) -> bool {
        text.contains(LOCKED_MARKER)
    }

    fn lock_clearing(&self, dir: &Path, _unlock: &str) -> super::LockClearing {
        super::LockClearing::ByHand(format!(
            "clear it with `{} force-unlock LOCK_ID` in {} (the id is in the error of the next run)",
            self.binary,
            dir.display()
        ))
    }

    fn parse_outputs(&self, stdout: &str, show_secrets: bool) -> Value {
        outputs(stdout, show_secrets)
    }

    fn secret_names(
        &self,
        outputs: &str,
        _marks: Option<&str>,
    ) -> std::collections::BTreeSet<String> {
        let Ok(Value::Object(shown)) = serde_json::from_str::<Value>(outputs) else {
            return Default::default();
        };
        (shown.iter())
            .filter(|(_, output)| output["sensitive"] == Value::Bool(true))
            .map(|(name, _)| name.clone())
            .collect()
    }

    fn secret_outputs(&self, outputs: &str, _marks: Option<&str>) -> Vec<String> {
        let Ok(Value::Object(map)) = serde_json::from_str::<Value>(outputs) else {
            return Vec::new();
        };
        (map.values())
            .filter(|output| output["sensitive"] == Value::Bool(true))
            .flat_map(|output| super::secret_texts(&output["value"]))
            .collect()
    }

    /// `output -json` in the stack's workspace, once its workspaces are listed (`output` in a
    /// `TF_WORKSPACE` the local backend does not have makes it); none before its first `init`.
    fn outputs_source(
        &self,
        run: &super::Engines,
        dir: &Path,
        _kept: &Path,
        _show_secrets: bool,
    ) -> super::OutputsSource {
        let terraform = self.terraform(run);
        let mut steps = Vec::new();
        // A working directory never initialized here: a local state is read as it is (there is
        // none: nothing deployed), a backend elsewhere (the ledger's server, on a fresh clone)
        // after `init`.
        if !dir.join(".terraform").is_dir() {
            let own = backend_of(dir);
            let local = own.as_deref() == Some("local") || (own.is_none() && run.state.is_none());
            match local {
                true if local_workspaces(dir).is_empty() => {
                    return super::OutputsSource::NotDeployed;
                }
                true => {}
                false => steps.push(self.call_in(run, dir, &["init", "-input=false"])),
            }
        }
        let mut list = Step::new(
            StepKind::Prepare,
            self.binary,
            ["workspace", "list", "-no-color"]
                .map(String::from)
                .to_vec(),
            dir,
        );
        list.unset = vec!["TF_WORKSPACE"];
        list.listed = Some(terraform.stack.clone());
        steps.extend([list, terraform.output_step(dir)]);
        super::OutputsSource::Steps(steps)
    }

    fn lists(&self, stdout: &str, stack: &str) -> bool {
        lists(stdout, stack)
    }

    /// Not after a plan: not every backend makes a workspace for one.
    fn records_stacks(&self, operation: Operation) -> bool {
        operation != Operation::Preview
    }

    fn planned_outputs(&self, stdout: &str) -> super::PlannedOutputs {
        planned_outputs(stdout)
    }

    fn plan_digest(&self, stdout: &str) -> Option<String> {
        plan_digest(stdout)
    }

    fn plan_resources(&self, document: &str) -> Option<Vec<super::ResourceDiff>> {
        Some(resource_diffs(document))
    }

    fn state_version(&self, stdout: &str) -> Option<super::StateVersion> {
        state_version(stdout)
    }

    fn init_stamp(&self, target: &super::Target<'_>) -> Option<InitStamp> {
        Some(self.stamp(target))
    }

    fn keeps_state_locally(&self, dir: &Path, in_ledger: bool) -> bool {
        match backend_of(dir) {
            Some(backend) => backend == "local",
            None => !in_ledger,
        }
    }

    fn own_backend(&self, dir: &Path) -> Option<String> {
        backend_of(dir)
    }

    /// The `pg` backend, in a schema of the module's own (`terraform/<path>`), its workspace the
    /// stack: an override file gives the module the backend, `PG_CONN_STR` the connection.
    fn state_in(&self, server: &StateServer, path: &str, dir: &Path) -> Option<InServer> {
        if backend_of(dir).is_some() {
            return None;
        }
        Some(InServer {
            env: BTreeMap::from([("PG_CONN_STR".to_string(), server.url.clone())]),
            file: Some(Generated {
                path: dir.join(STATE_FILE),
                text: state_file(&state_schema(path)),
            }),
        })
    }

    fn local_state(&self, dir: &Path, stack: &str) -> Vec<PathBuf> {
        local_state(dir, stack)
    }

    /// `init -migrate-state -force-copy` with the module given the server's backend, which
    /// moves every workspace it keeps locally; each first looked for in the server from a
    /// module of mara's own (`scratch`) that has nothing but that backend.
    fn migration(
        &self,
        run: &super::Engines,
        path: &str,
        dir: &Path,
        (scratch, _from): (&Path, Option<&str>),
    ) -> Option<Migration> {
        let server = run.state.as_ref()?;
        let in_server = self.state_in(server, path, dir)?;
        let local = local_workspaces(dir);
        if local.is_empty() {
            return None;
        }
        let terraform = self.terraform(run);
        let keep = |mut step: Step, file: Option<Generated>| {
            step.env.extend(in_server.env.clone());
            step.env.extend(server.variables());
            step.env.insert("TF_IN_AUTOMATION".into(), "1".into());
            step.generated = file;
            step.unset = vec!["TF_WORKSPACE"];
            step
        };
        let words = |words: &[&str]| words.iter().map(|w| w.to_string()).collect::<Vec<_>>();
        let probe = scratch.join(path);
        let probe_file = (in_server.file.clone()).map(|f| Generated {
            path: probe.join(STATE_FILE),
            ..f
        });
        let taken = (local.iter())
            .map(|(workspace, _)| {
                let init = Step::new(
                    StepKind::Prepare,
                    &terraform.binary,
                    words(&["init", "-input=false", "-no-color"]),
                    &probe,
                );
                let mut pull = Step::new(
                    StepKind::StateVersion,
                    &terraform.binary,
                    words(&["state", "pull"]),
                    &probe,
                );
                pull = keep(pull, probe_file.clone());
                pull.unset.clear();
                pull.env.insert("TF_WORKSPACE".into(), workspace.clone());
                (
                    format!("workspace {workspace}"),
                    vec![keep(init, probe_file.clone()), pull],
                )
            })
            .collect();
        let migrate = Step::new(
            StepKind::Prepare,
            &terraform.binary,
            words(&[
                "init",
                "-input=false",
                "-migrate-state",
                "-force-copy",
                "-no-color",
            ]),
            dir,
        );
        let files: Vec<String> = local
            .iter()
            .map(|(_, file)| file.display().to_string())
            .collect();
        Some(Migration {
            from: files.join(", "),
            found: Vec::new(),
            taken,
            moves: vec![keep(migrate, in_server.file.clone())],
        })
    }

    /// The sequence every module's `states` table numbers its rows from, as the `pg` backend
    /// makes it (its schemas and tables are each module's own).
    fn shared_in_server(&self) -> &'static [Shared] {
        &[Shared {
            name: "public.global_states_id_seq",
            make: "CREATE SEQUENCE IF NOT EXISTS public.global_states_id_seq AS bigint",
        }]
    }

    /// A state pulled (`state pull`) that holds resources or outputs; an empty one (a workspace
    /// made and never applied) holds nothing a move would lose.
    fn holds_state(&self, stdout: &str, _stack: &str) -> bool {
        let Ok(state) = serde_json::from_str::<Value>(stdout) else {
            return false;
        };
        let some = |key: &str| match state.get(key) {
            Some(Value::Array(list)) => !list.is_empty(),
            Some(Value::Object(map)) => !map.is_empty(),
            _ => false,
        };
        some("resources") || some("outputs")
    }

    fn project_files(&self) -> super::ProjectFiles {
        super::ProjectFiles::WithExtension(&[".tf", ".tf.json"])
    }
}

impl super::OutputReader for Reader {
    fn line(&mut self, line: &str) -> Vec<String> {
        Reader::line(self, line)
    }

    fn error(&self) -> Option<&str> {
        Reader::error(self)
    }

    fn errors(&self) -> Vec<&str> {
        Reader::errors(self).iter().map(String::as_str).collect()
    }

    fn diffs(&self) -> Vec<super::ResourceDiff> {
        Reader::diffs(self)
    }

    fn drifted(&self) -> Vec<super::ResourceDiff> {
        Reader::drifted(self).to_vec()
    }

    fn show_diff(&mut self, diff: bool) {
        self.show_diff = diff;
    }

    fn outputs(&self) -> Option<(Vec<String>, bool)> {
        Reader::outputs(self)
    }

    fn applied_outputs(&self) -> Option<BTreeMap<String, Option<Value>>> {
        self.applied.clone()
    }

    fn changes(&mut self) -> Option<Changes> {
        Reader::changes(self)
    }
}

/// Where mara keeps what `terraform init` was last run on in a module (read and written by
/// `fingerprint::init_is_current` and `fingerprint::record_init`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitStamp {
    /// `<state_dir>/init/<project path>.stamp`.
    pub file: PathBuf,
    /// The module.
    pub dir: PathBuf,
    pub binary: String,
}

/// The backend a root module's `.tf` file declares: its type (`s3`, `local`, …; `cloud` for a
/// `cloud` block), or `None`. Comments are not parsed: a commented-out backend reads as one.
pub fn backend_in(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let line = line.trim_start();
        if let Some(rest) = line.strip_prefix("backend") {
            let kind = rest.trim_start().strip_prefix('"')?.split('"').next()?;
            return Some(kind.to_string());
        }
        let rest = line.strip_prefix("cloud")?.trim_start();
        rest.starts_with('{').then(|| "cloud".to_string())
    })
}

/// The backend the root module in `dir` declares (`backend_in` of its first `.tf` file, in
/// name order, that declares one), not the one mara gives it (`STATE_FILE`).
pub fn backend_of(dir: &Path) -> Option<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "tf"))
        .filter(|p| p.file_name().is_none_or(|n| n != STATE_FILE))
        .collect();
    files.sort();
    files.iter().find_map(|file| {
        let text = crate::files::read_to_string(file).ok()?;
        backend_in(&text)
    })
}

/// The file that gives a module that names no backend the ledger's server (`state =
/// "ledger"`): an override file, which Terraform and OpenTofu merge over the module's own, so
/// that no file of the user's is edited. It holds nothing secret.
pub const STATE_FILE: &str = "mara_state_override.tf";

/// The schema a module keeps its state in on the ledger's server: `terraform/<path>`, each
/// stack a workspace in it (the `pg` backend's own way to keep states apart). PostgreSQL cuts
/// a name at 63 bytes: a longer one ends in a digest of the whole.
pub fn state_schema(path: &str) -> String {
    let name = format!("terraform/{path}");
    if name.len() <= 63 {
        return name;
    }
    let digest = super::sha256(&name);
    let mut cut = 48;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}~{}", &name[..cut], &digest["sha256:".len()..][..12])
}

/// `STATE_FILE`'s text for a module kept in `schema`.
pub fn state_file(schema: &str) -> String {
    let quoted = (schema.replace('\\', "\\\\").replace('"', "\\\""))
        .replace("${", "$${")
        .replace("%{", "%%{");
    format!(
        "# Written by mara, as `state = \"ledger\"` in mara.toml says: this module keeps its state in\n\
         # the ledger's PostgreSQL server (docs/commands.md, \"State in the ledger\"). The connection\n\
         # comes from PG_CONN_STR and PGPASSWORD, which mara gives Terraform: nothing secret is here.\n\
         # mara writes it again when it is missing; keep it out of the repository.\n\
         terraform {{\n  backend \"pg\" {{\n    schema_name = \"{quoted}\"\n  }}\n}}\n"
    )
}

/// The files of the module in `dir` that hold a state of `stack`'s workspace: `state =
/// "ledger"` would leave them behind.
pub fn local_state(dir: &Path, stack: &str) -> Vec<PathBuf> {
    let file = match stack {
        "default" => dir.join("terraform.tfstate"),
        _ => dir
            .join("terraform.tfstate.d")
            .join(stack)
            .join("terraform.tfstate"),
    };
    let holds = |file: &Path| std::fs::metadata(file).is_ok_and(|m| m.len() > 0);
    std::iter::once(file).filter(|f| holds(f)).collect()
}

/// Every workspace the module in `dir` keeps a state of locally, with its file (relative to
/// `dir`): `default`'s `terraform.tfstate`, the others' in `terraform.tfstate.d/`.
pub fn local_workspaces(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut found: Vec<(String, PathBuf)> = std::fs::read_dir(dir.join("terraform.tfstate.d"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| Some(entry.file_name().to_str()?.to_string()))
        .map(|name| {
            let file = Path::new("terraform.tfstate.d")
                .join(&name)
                .join("terraform.tfstate");
            (name, file)
        })
        .collect();
    found.push(("default".into(), PathBuf::from("terraform.tfstate")));
    found.retain(|(_, file)| std::fs::metadata(dir.join(file)).is_ok_and(|m| m.len() > 0));
    found.sort();
    found
}

/// Whether a failed step says the module's working directory needs `init` (a module or a
/// provider not installed, a backend changed); Terraform and OpenTofu both say to run it.
pub fn needs_init(output: &str) -> bool {
    output.contains("terraform init") || output.contains("tofu init")
}

impl Terraform {
    /// `output -json` in the stack's workspace (`mara output`), chosen by `TF_WORKSPACE` so that
    /// reading needs no `workspace select`.
    pub fn output_step(&self, dir: &Path) -> Step {
        let mut step = Step::new(
            StepKind::Outputs,
            self.binary.clone(),
            ["output", "-json", "-no-color"].map(String::from).to_vec(),
            dir,
        );
        step.env.insert("TF_WORKSPACE".into(), self.stack.clone());
        step
    }
}

/// Whether a failed step says the workspace `name` does not exist: an operation in a
/// `TF_WORKSPACE` the backend does not make on its own ("Currently selected workspace "dev" does
/// not exist"), or `workspace select` ("Workspace "dev" doesn't exist"). Named, so that a
/// provider's own "workspace does not exist" is not taken for it.
pub fn is_missing_workspace(output: &str, name: &str) -> bool {
    [
        format!("orkspace \"{name}\" does not exist"),
        format!("orkspace \"{name}\" doesn't exist"),
    ]
    .iter()
    .any(|said| output.contains(said.as_str()))
}

/// Whether `terraform workspace list` (`* default`, `  dev`, …) names the workspace `name`.
pub fn lists(output: &str, name: &str) -> bool {
    output
        .lines()
        .any(|line| line.trim_start_matches(['*', ' ']).trim_end() == name)
}

/// The variables a module declares, sorted: each `variable "name" {` block of its `.tf` files
/// (a line that starts so, as `terraform fmt` writes it; the label quoted or not) and each key
/// of the `variable` object of its `.tf.json` files — the module's own files, as Terraform reads
/// a root module. `None` when the directory cannot be listed or holds no module file.
pub fn declared_variables(dir: &Path) -> Option<Vec<String>> {
    let mut names = std::collections::BTreeSet::new();
    let mut modules = 0;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let json = name.ends_with(".tf.json");
        if !json && !name.ends_with(".tf") {
            continue;
        }
        modules += 1;
        // A file that cannot be read (or is no regular file) says nothing here: the checks
        // before a run say what is wrong with it.
        let Ok(text) = crate::files::read_to_string(&entry.path()) else {
            continue;
        };
        match json {
            true => names.extend(json_variables(&text)),
            false => names.extend(text.lines().filter_map(variable_label)),
        }
    }
    (modules > 0).then(|| names.into_iter().collect())
}

/// The label of a `variable` block's first line (`variable "replicas" {`), if it is one.
fn variable_label(line: &str) -> Option<String> {
    let rest = line.trim_start().strip_prefix("variable")?;
    if !rest.starts_with([' ', '\t', '"']) {
        return None;
    }
    let rest = rest.trim_start();
    let (label, after) = match rest.strip_prefix('"') {
        Some(quoted) => quoted.split_once('"')?,
        None => rest.split_at(
            rest.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
                .unwrap_or(rest.len()),
        ),
    };
    (!label.is_empty() && after.trim_start().starts_with('{')).then(|| label.to_string())
}

/// The keys of a `.tf.json` file's `variable` object.
fn json_variables(text: &str) -> Vec<String> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(mut top)) => match top.remove("variable") {
            Some(Value::Object(variables)) => variables.keys().cloned().collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// `TF_VAR_<key>` for every key of the shared configuration in `namespace` (`<namespace>:<key>`);
/// strings as they are, other values as JSON (what Terraform parses for non-string variables).
pub fn variables(config: &Map<String, Value>, namespace: &str) -> BTreeMap<String, String> {
    let prefix = format!("{namespace}:");
    config
        .iter()
        .filter_map(|(key, value)| key.strip_prefix(&prefix).map(|name| (name, value)))
        .filter(|(_, value)| !super::pulumi::is_secure(value))
        .map(|(name, value)| {
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (format!("TF_VAR_{name}"), text)
        })
        .collect()
}

/// `output -json` (`{"name": {"value": …, "sensitive": …}}`) as plain `{"name": value}`; a
/// sensitive value becomes `[secret]` unless `show_secrets`.
pub fn outputs(json: &str, show_secrets: bool) -> Value {
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(json) else {
        return Value::Object(Map::new());
    };
    Value::Object(
        map.into_iter()
            .map(|(name, output)| {
                let value = if !show_secrets && output["sensitive"] == Value::Bool(true) {
                    Value::String("[secret]".into())
                } else {
                    output.get("value").cloned().unwrap_or(Value::Null)
                };
                (name, value)
            })
            .collect(),
    )
}

/// What a saved plan does, from `show -json PLANFILE`, as one digest (`super::plan_digest`):
/// each resource's actions and values after the apply (and which are known only then), each
/// output's; `None` when the text is no plan.
pub fn plan_digest(json: &str) -> Option<String> {
    let plan = serde_json::from_str::<Value>(json).ok()?;
    let resources: Vec<Value> = (plan["resource_changes"].as_array().into_iter().flatten())
        .map(|r| {
            let change = &r["change"];
            serde_json::json!([
                r["address"],
                change["actions"],
                change["after"],
                change["after_unknown"]
            ])
        })
        .collect();
    let outputs: Map<String, Value> = (plan["output_changes"].as_object().into_iter().flatten())
        .map(|(name, change)| {
            let said =
                serde_json::json!([change["actions"], change["after"], change["after_unknown"]]);
            (name.clone(), said)
        })
        .collect();
    Some(super::plan_digest(&serde_json::json!([resources, outputs])))
}

/// Whether a plan's mark (`after_unknown`, `after_sensitive`: `true`, or the value's shape with
/// `true` where it applies) holds `true` anywhere: a nested attribute's marks the whole.
fn any_true(value: &Value) -> bool {
    match value {
        Value::Bool(b) => *b,
        Value::Object(map) => map.values().any(any_true),
        Value::Array(items) => items.iter().any(any_true),
        _ => false,
    }
}

/// The resources a saved plan changes, from `show -json PLANFILE` (its `resource_changes`),
/// each with the top-level attributes that change: their values before and after as JSON,
/// `[secret]` where the plan marks them sensitive, `(known after apply)` where it cannot know
/// them yet. For the policies' deployment input (`run::gate`): Terraform's streamed plan names
/// the resources it changes, not their values.
pub fn resource_diffs(json: &str) -> Vec<super::ResourceDiff> {
    let Ok(plan) = serde_json::from_str::<Value>(json) else {
        return Vec::new();
    };
    (plan["resource_changes"].as_array().into_iter().flatten())
        .filter_map(|r| {
            let change = &r["change"];
            let actions: Vec<&str> = (change["actions"].as_array().into_iter().flatten())
                .filter_map(Value::as_str)
                .collect();
            let op = match actions.as_slice() {
                ["create"] => "create",
                ["update"] => "update",
                ["delete"] => "delete",
                ["delete", "create"] | ["create", "delete"] => "replace",
                _ => return None,
            };
            Some(super::ResourceDiff {
                op: op.to_string(),
                resource: r["address"].as_str().unwrap_or_default().to_string(),
                properties: attribute_changes(change),
            })
        })
        .collect()
}

/// The top-level attributes a resource change changes, by name.
fn attribute_changes(change: &Value) -> Vec<super::PropertyDiff> {
    let empty = Map::new();
    let before = change["before"].as_object().unwrap_or(&empty);
    let after = change["after"].as_object().unwrap_or(&empty);
    let marked = |marks: &Value, key: &str| match marks {
        Value::Bool(all) => *all,
        marks => marks.get(key).is_some_and(any_true),
    };
    let shown = |value: Option<&Value>, secret: bool| match (value, secret) {
        (None | Some(Value::Null), _) => None,
        (Some(_), true) => Some("\"[secret]\"".to_string()),
        (Some(value), false) => Some(value.to_string()),
    };
    let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|key| {
            let unknown = marked(&change["after_unknown"], key);
            let (old, new) = (before.get(key), after.get(key));
            if old == new && !unknown {
                return None;
            }
            let kind = match (
                old.is_some_and(|v| !v.is_null()),
                new.is_some_and(|v| !v.is_null()) || unknown,
            ) {
                (false, true) => "add",
                (true, false) => "delete",
                _ => "update",
            };
            let new = match unknown {
                true => Some("\"(known after apply)\"".to_string()),
                false => shown(new, marked(&change["after_sensitive"], key)),
            };
            Some(super::PropertyDiff {
                path: key.clone(),
                kind: kind.to_string(),
                old: shown(old, marked(&change["before_sensitive"], key)),
                new,
            })
        })
        .collect()
}

/// The outputs a saved plan leaves, from `show -json PLANFILE` (its `output_changes`): each
/// value after the apply (`None` where `after_unknown` says it is known only then), whether the
/// plan changes it, and whether it is sensitive.
pub fn planned_outputs(json: &str) -> super::PlannedOutputs {
    let Ok(plan) = serde_json::from_str::<Value>(json) else {
        return Default::default();
    };
    let changes = plan["output_changes"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    changes
        .into_iter()
        .filter(|(_, change)| change["actions"] != serde_json::json!(["delete"]))
        .map(|(name, change)| {
            let unknown = any_true(&change["after_unknown"]);
            let planned = super::PlannedOutput {
                value: (!unknown).then(|| change["after"].clone()),
                changes: change["actions"] != serde_json::json!(["no-op"]),
                secret: any_true(&change["after_sensitive"]),
            };
            (name, planned)
        })
        .collect()
}

/// The lineage and serial of the state `state pull` printed (`stdout`): a module without state
/// prints nothing. `None`: it is not a state.
pub fn state_version(stdout: &str) -> Option<super::StateVersion> {
    if stdout.trim().is_empty() {
        return Some(super::StateVersion {
            lineage: None,
            serial: 0,
        });
    }
    let state: Value = serde_json::from_str(stdout).ok()?;
    Some(super::StateVersion {
        lineage: Some(state["lineage"].as_str()?.to_string()),
        serial: state["serial"].as_u64()?,
    })
}

/// A message's `@level` (`info` when it has none).
fn level(message: &Value) -> &str {
    message
        .get("@level")
        .and_then(Value::as_str)
        .unwrap_or("info")
}

/// `summary: detail (file:line)` of a `-json` diagnostic.
fn diagnostic(d: &Value) -> String {
    let mut text = d["summary"].as_str().unwrap_or("").to_string();
    if let Some(detail) = d["detail"].as_str().filter(|s| !s.is_empty()) {
        text = format!(
            "{text}: {}",
            detail.split_whitespace().collect::<Vec<_>>().join(" ")
        );
    }
    if let (Some(file), Some(line)) = (
        d["range"]["filename"].as_str(),
        d["range"]["start"]["line"].as_u64(),
    ) {
        text = format!("{text} ({file}:{line})");
    }
    text
}

/// Reads `-json` output: each message's `@message` for people; the counts from the last
/// `change_summary` (resources) and the planned `outputs` actions (output-only changes are changes
/// too: `plan -detailed-exitcode` exits 2 for them).
#[derive(Debug, Default)]
pub struct Reader {
    resources: Option<Changes>,
    outputs_changed: u64,
    /// The planned outputs' actions, by name (Terraform 1.1 and later name them).
    planned: BTreeMap<String, String>,
    /// The planned resource changes (`planned_change`): address and action; Terraform's
    /// machine-readable output has no attributes.
    changes: Vec<super::ResourceDiff>,
    /// What the plan's refresh found changed outside Terraform (`resource_drift`).
    drift: Vec<super::ResourceDiff>,
    /// Every error diagnostic, each once, in the order it came: the first is the summary's
    /// reason; all of them are what `[retry]` matches (docs/formats.md, "Budgets and retries").
    errors: Vec<String>,
    last_shown: Option<String>,
    /// `preview --diff`: each output that changes under the outputs line.
    pub show_diff: bool,
    /// An apply's outputs, by name: the value, or `None` for a sensitive one.
    applied: Option<BTreeMap<String, Option<Value>>>,
}

impl Reader {
    /// An apply's outputs as its last message gave them: each value, `None` for a sensitive one.
    pub fn applied(&self) -> Option<&BTreeMap<String, Option<Value>>> {
        self.applied.as_ref()
    }

    pub fn line(&mut self, line: &str) -> Vec<String> {
        let Ok(message @ Value::Object(_)) = serde_json::from_str::<Value>(line) else {
            return vec![line.to_string()];
        };
        // Indexed as a `Value`, a missing or mistyped payload is `null`, never a panic (a `Map`
        // panics on a missing key).
        match message.get("type").and_then(Value::as_str) {
            Some("change_summary") => return self.change_summary(&message["changes"]),
            Some("outputs") => return self.planned_outputs(&message),
            Some(kind @ ("planned_change" | "resource_drift")) => {
                self.planned_change(kind, &message["change"])
            }
            Some("diagnostic") => return self.diagnostic(&message),
            _ => {}
        }
        match message.get("@message").and_then(Value::as_str) {
            Some(text) if !text.is_empty() => match level(&message) {
                level @ ("error" | "warn") => vec![format!("{level}: {text}")],
                _ => vec![text.to_string()],
            },
            _ => Vec::new(),
        }
    }

    /// The counts of a plan or an apply; said once when the apply's agree with its plan's.
    fn change_summary(&mut self, changes: &Value) -> Vec<String> {
        let count = |key: &str| changes[key].as_u64().unwrap_or(0);
        let counts: Changes = [
            ("create", count("add")),
            ("update", count("change")),
            ("delete", count("remove")),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(op, n)| (op.to_string(), n))
        .collect();
        let line = format!("Resources: {}", changes_summary(&counts));
        self.resources = Some(counts);
        self.once(line)
    }

    /// Planned output changes carry an action; the final message carries values, which are
    /// never shown (they may be sensitive).
    fn planned_outputs(&mut self, message: &Value) -> Vec<String> {
        let outputs = message["outputs"].as_object().cloned().unwrap_or_default();
        // An apply ends with its outputs' values (a sensitive one's left out): what its
        // dependents' inputs take, without an `output -json` of its own.
        if outputs.values().all(|o| o.get("action").is_none()) && !outputs.is_empty() {
            let applied = (outputs.iter())
                .map(|(name, o)| match o["sensitive"] == Value::Bool(true) {
                    true => (name.clone(), None),
                    false => (
                        name.clone(),
                        Some(o.get("value").cloned().unwrap_or(Value::Null)),
                    ),
                })
                .collect();
            self.applied = Some(applied);
            return Vec::new();
        }
        for (name, output) in &outputs {
            if let Some(action) = output.get("action").and_then(Value::as_str) {
                self.planned.insert(name.clone(), action.to_string());
            }
        }
        let count = |wanted: &str| {
            outputs
                .values()
                .filter(|o| o.get("action").and_then(Value::as_str) == Some(wanted))
                .count()
        };
        // As Terraform's own plan says it: "3 to add, 1 to change, 0 to destroy".
        let said: Vec<String> = [
            ("create", "add"),
            ("update", "change"),
            ("delete", "remove"),
        ]
        .into_iter()
        .map(|(action, word)| (count(action), word))
        .filter(|(n, _)| *n > 0)
        .map(|(n, word)| format!("{n} to {word}"))
        .collect();
        let changed = (count("create") + count("update") + count("delete")) as u64;
        self.outputs_changed = self.outputs_changed.max(changed);
        if said.is_empty() {
            return Vec::new();
        }
        let mut lines = vec![format!("Outputs: {}", said.join(", "))];
        if self.show_diff
            && let Some(outputs) = self.output_diff()
        {
            lines.extend(outputs.lines().into_iter().skip(1));
        }
        lines
    }

    /// A resource the plan changes (or found changed outside Terraform).
    fn planned_change(&mut self, kind: &str, change: &Value) {
        let action = change["action"].as_str().unwrap_or("update");
        if let Some(address) = change["resource"]["addr"].as_str() {
            let (resource, found) = match kind {
                "resource_drift" => (
                    format!("{address} (changed outside Terraform)"),
                    &mut self.drift,
                ),
                _ => (address.to_string(), &mut self.changes),
            };
            found.push(super::ResourceDiff {
                op: action.to_string(),
                resource,
                properties: Vec::new(),
            });
        }
    }

    /// A diagnostic, shown once; each error's is kept, the first as the reason. One without its
    /// payload says what its `@message` says (else nothing is kept, and the reason falls back to
    /// the exit code).
    fn diagnostic(&mut self, message: &Value) -> Vec<String> {
        let text = Some(diagnostic(&message["diagnostic"]))
            .filter(|t| !t.trim().is_empty())
            .or_else(|| {
                (message.get("@message").and_then(Value::as_str))
                    .map(|m| m.trim_start_matches("Error: ").trim().to_string())
                    .filter(|m| !m.is_empty())
            });
        let Some(text) = text else {
            return Vec::new();
        };
        let level = level(message);
        if level == "error" && !self.errors.contains(&text) {
            self.errors.push(text.clone());
        }
        // Terraform may report one diagnostic twice (plan, then validate).
        self.once(format!("{level}: {text}"))
    }

    /// `line`, unless it was the last one shown.
    fn once(&mut self, line: String) -> Vec<String> {
        if self.last_shown.as_deref() == Some(line.as_str()) {
            return Vec::new();
        }
        self.last_shown = Some(line.clone());
        vec![line]
    }

    pub fn finish(&mut self) -> Vec<String> {
        Vec::new()
    }

    /// The resources a plan changes (or found changed outside Terraform).
    /// The outputs that change are one more entry, `outputs`, with each output as a property
    /// (their planned values are not in the plan's messages).
    pub fn diffs(&self) -> Vec<super::ResourceDiff> {
        let mut diffs = self.changes.clone();
        diffs.extend(self.drift.iter().cloned());
        diffs.extend(self.output_diff());
        diffs
    }

    /// What the plan's refresh found changed outside Terraform.
    pub fn drifted(&self) -> &[super::ResourceDiff] {
        &self.drift
    }

    fn output_diff(&self) -> Option<super::ResourceDiff> {
        let properties: Vec<super::PropertyDiff> = self
            .planned
            .iter()
            .filter_map(|(name, action)| {
                let kind = match action.as_str() {
                    "create" => "add",
                    "update" => "update",
                    "delete" => "delete",
                    _ => return None,
                };
                Some(super::PropertyDiff {
                    path: name.clone(),
                    kind: kind.to_string(),
                    old: None,
                    new: None,
                })
            })
            .collect();
        (!properties.is_empty()).then(|| super::ResourceDiff {
            op: "update".into(),
            resource: "outputs".into(),
            properties,
        })
    }

    /// A plan's outputs that change, and whether it creates every one of them (a workspace
    /// not deployed yet); `None` when Terraform named no output actions (before 1.1).
    pub fn outputs(&self) -> Option<(Vec<String>, bool)> {
        if self.planned.is_empty() {
            return None;
        }
        let changed = self
            .planned
            .iter()
            .filter(|(_, action)| *action != "noop")
            .map(|(name, _)| name.clone())
            .collect();
        let all_new = self.planned.values().all(|action| action == "create");
        Some((changed, all_new))
    }

    /// The first error Terraform reported, with its place.
    pub fn error(&self) -> Option<&str> {
        self.errors.first().map(String::as_str)
    }

    /// Every error Terraform reported (its diagnostics of severity error, each once), with
    /// their places.
    pub fn errors(&self) -> &[String] {
        &self.errors
    }

    /// Resource counts, plus `output` for the outputs that change.
    pub fn changes(&mut self) -> Option<Changes> {
        let mut changes = self.resources.take().unwrap_or_default();
        if self.outputs_changed > 0 {
            changes.insert("output".into(), self.outputs_changed);
        }
        Some(changes)
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::Engine as _;
    use crate::engine::state::StateServer;

    #[test]
    fn with_state_in_the_ledger_a_module_without_a_backend_gets_the_pg_backend_from_mara() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("main.tf"),
            "output \"x\" {\n  value = 1\n}\n",
        )
        .unwrap();
        let server = StateServer {
            url: "postgres://mara@db:5432/team?sslmode=verify-full".into(),
            password: Some("hunter2".into()),
            set: Default::default(),
        };
        let kept = super::TERRAFORM
            .state_in(&server, "platform/network", dir.path())
            .unwrap();
        assert_eq!(kept.env["PG_CONN_STR"], server.url);
        let file = kept.file.unwrap();
        assert_eq!(file.path, dir.path().join(super::STATE_FILE));
        assert!(file.text.contains("backend \"pg\""), "{}", file.text);
        assert!(
            file.text
                .contains("schema_name = \"terraform/platform/network\"")
        );
        assert!(!file.text.contains("hunter2") && !file.text.contains("db:5432"));
        // Written, the module still names no backend of its own (and keeps none locally).
        file.ensure().unwrap();
        assert_eq!(super::backend_of(dir.path()), None);
        assert!(!super::TERRAFORM.keeps_state_locally(dir.path(), true));
        assert!(super::TERRAFORM.keeps_state_locally(dir.path(), false));
        // A module with a backend keeps it, even `local`.
        std::fs::write(
            dir.path().join("backend.tf"),
            "terraform {\n  backend \"local\" {}\n}\n",
        )
        .unwrap();
        assert!(
            super::TERRAFORM
                .state_in(&server, "platform/network", dir.path())
                .is_none()
        );
        assert!(super::TERRAFORM.keeps_state_locally(dir.path(), true));
    }

    #[test]
    fn a_schema_name_fits_postgres_and_its_file_quotes_it() {
        assert_eq!(super::state_schema("app"), "terraform/app");
        let long = "a/".repeat(40) + "module";
        let schema = super::state_schema(&long);
        assert!(schema.len() <= 63, "{schema}");
        assert_ne!(schema, super::state_schema(&("b/".repeat(40) + "module")));
        assert_eq!(schema, super::state_schema(&long));
        let text = super::state_file("terraform/we\"ird${x}\\");
        assert!(
            text.contains(r#"schema_name = "terraform/we\"ird$${x}\\""#),
            "{text}"
        );
    }

    #[test]
    fn local_workspaces_are_the_state_files_that_hold_something() {
        let dir = tempfile::tempdir().unwrap();
        assert!(super::local_workspaces(dir.path()).is_empty());
        let dev = dir.path().join("terraform.tfstate.d/dev");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("terraform.tfstate"), "{}").unwrap();
        std::fs::create_dir_all(dir.path().join("terraform.tfstate.d/emptied")).unwrap();
        std::fs::write(
            dir.path()
                .join("terraform.tfstate.d/emptied/terraform.tfstate"),
            "",
        )
        .unwrap();
        std::fs::write(dir.path().join("terraform.tfstate"), "{}").unwrap();
        let found: Vec<String> = super::local_workspaces(dir.path())
            .into_iter()
            .map(|(w, _)| w)
            .collect();
        assert_eq!(found, ["default", "dev"]);
        assert_eq!(super::local_state(dir.path(), "dev").len(), 1);
        assert!(super::local_state(dir.path(), "emptied").is_empty());
        let holds = |text: &str| super::TERRAFORM.holds_state(text, "dev");
        assert!(holds(
            r#"{"version":4,"resources":[{"type":"x"}],"outputs":{}}"#
        ));
        assert!(holds(
            r#"{"version":4,"resources":[],"outputs":{"a":{"value":1}}}"#
        ));
        assert!(!holds(r#"{"version":4,"resources":[],"outputs":{}}"#));
        assert!(!holds(""));
    }

    #[test]
    fn a_saved_plan_says_each_output_after_the_apply_or_that_it_is_known_only_then() {
        let show = r#"{"format_version": "1.2", "output_changes": {
            "same": {"actions": ["no-op"], "before": "a", "after": "a", "after_unknown": false, "after_sensitive": false},
            "moved": {"actions": ["update"], "before": "a", "after": "b", "after_unknown": false, "after_sensitive": false},
            "list": {"actions": ["create"], "after": ["x", null], "after_unknown": [false, true], "after_sensitive": false},
            "token": {"actions": ["update"], "after": "t", "after_unknown": false, "after_sensitive": true},
            "gone": {"actions": ["delete"], "before": "z", "after": null}
        }}"#;
        let planned = super::planned_outputs(show);
        let shown: Vec<(&str, Option<String>, bool, bool)> = (planned.iter())
            .map(|(n, p)| {
                (
                    n.as_str(),
                    p.value.as_ref().map(|v| v.to_string()),
                    p.changes,
                    p.secret,
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                ("list", None, true, false),
                ("moved", Some("\"b\"".into()), true, false),
                ("same", Some("\"a\"".into()), false, false),
                ("token", Some("\"t\"".into()), true, true),
            ]
        );
        for malformed in [
            "",
            "{",
            "[]",
            r#"{"output_changes": 7}"#,
            r#"{"output_changes": {"a": 1}}"#,
        ] {
            let _ = super::planned_outputs(malformed);
        }
    }

    use super::*;

    #[test]
    fn a_module_s_backend_is_read_from_its_files() {
        assert_eq!(backend_in("resource \"null\" \"x\" {}\n"), None);
        let s3 = "terraform {\n  backend \"s3\" {\n    bucket = \"b\"\n  }\n}\n";
        assert_eq!(backend_in(s3).as_deref(), Some("s3"));
        let cloud = "terraform {\n  cloud {\n  }\n}\n";
        assert_eq!(backend_in(cloud).as_deref(), Some("cloud"));
        let local = "terraform {\n  backend \"local\" {}\n}\n";
        assert_eq!(backend_in(local).as_deref(), Some("local"));
    }

    #[test]
    fn malformed_messages_are_read_without_a_panic() {
        let mut reader = Reader::default();
        for message in crate::engine::MALFORMED_MESSAGES {
            reader.line(message);
        }
        reader.finish();
    }

    fn terraform() -> Terraform {
        Terraform {
            binary: "terraform".into(),
            stack: "dev".into(),
            color: false,
        }
    }

    fn module(initialized: bool, workspace_known: bool) -> Module<'static> {
        Module {
            dir: Path::new("/w/dns"),
            variables: BTreeMap::from([("TF_VAR_region".to_string(), "eu".to_string())]),
            stamp: InitStamp {
                file: "/w/.mara/init/dns.stamp".into(),
                dir: "/w/dns".into(),
                binary: "terraform".into(),
            },
            initialized,
            workspace_known,
            plan_file: None,
            read_planned: false,
            record_state: false,
        }
    }

    fn shown(steps: &[Step]) -> Vec<String> {
        steps.iter().map(Step::display).collect()
    }

    #[test]
    fn a_first_up_inits_then_applies_in_the_workspace_and_reads_outputs() {
        let steps = terraform().steps(&module(false, false), Operation::Up);
        assert_eq!(
            shown(&steps),
            [
                "terraform init -input=false -no-color",
                "TF_WORKSPACE=dev terraform apply -auto-approve -input=false -json -no-color",
                "TF_WORKSPACE=dev terraform output -json -no-color",
            ]
        );
        assert!(steps[0].stamp.is_some(), "a successful init is stamped");
        assert!(!steps[0].env.contains_key("TF_WORKSPACE"));
        assert!(steps.iter().all(|s| s.env["TF_VAR_region"] == "eu"));
        // A backend that does not make the workspace as it writes: made, then applied again.
        let repairs: Vec<(Missing, String)> = steps[1]
            .repairs
            .iter()
            .map(|r| (r.when, r.step.display()))
            .collect();
        assert_eq!(
            repairs,
            [(
                Missing::Stack,
                "terraform workspace new dev -no-color".to_string()
            )]
        );
    }

    #[test]
    fn an_initialized_module_runs_one_process_and_inits_only_when_asked() {
        for operation in [Operation::Up, Operation::Preview] {
            let steps = terraform().steps(&module(true, false), operation);
            let steps: Vec<&Step> = steps
                .iter()
                .filter(|s| s.kind != StepKind::Outputs)
                .collect();
            assert_eq!(steps.len(), 1, "{operation}");
            let whens: Vec<Missing> = steps[0].repairs.iter().map(|r| r.when).collect();
            assert_eq!(whens, [Missing::Init, Missing::Stack]);
            assert!(steps[0].repairs[0].step.stamp.is_some());
        }
        let preview = terraform().steps(&module(true, true), Operation::Preview);
        assert_eq!(
            preview[0].display(),
            "TF_WORKSPACE=dev terraform plan -detailed-exitcode -input=false -json -no-color"
        );
        assert_eq!(preview[0].ok_codes, [0, 2]);
        assert_eq!(preview[0].changes_code, Some(2));
    }

    #[test]
    fn destroy_and_refresh_look_for_the_workspace_and_never_make_one() {
        let refresh = terraform().steps(&module(true, false), Operation::Refresh);
        assert_eq!(
            shown(&refresh),
            [
                "terraform workspace list -no-color",
                "TF_WORKSPACE=dev terraform apply -refresh-only -auto-approve -input=false -json -no-color",
            ]
        );
        assert_eq!(refresh[0].listed.as_deref(), Some("dev"));
        assert_eq!(refresh[0].unset, ["TF_WORKSPACE"]);
        let known = terraform().steps(&module(true, true), Operation::Refresh);
        assert_eq!(known.len(), 1, "the ledger knows it: one process");
        // A destroy always looks: with `TF_WORKSPACE` alone, a workspace deleted outside mara
        // would be made again, empty, and "destroyed".
        let destroy = terraform().steps(&module(true, true), Operation::Destroy);
        assert_eq!(
            shown(&destroy),
            [
                "terraform workspace list -no-color",
                "TF_WORKSPACE=dev terraform destroy -auto-approve -input=false -json -no-color"
            ]
        );
        assert!(
            destroy[0].repairs.iter().all(|r| r.when != Missing::Stack),
            "destroy never makes a workspace"
        );
    }

    #[test]
    fn failures_that_ask_for_init_or_a_workspace_are_told_apart() {
        assert!(needs_init(
            "Module not installed: This module is not yet installed. Run \"terraform init\" to install all modules required by this configuration. (main.tf:4)"
        ));
        assert!(needs_init(
            "Backend initialization required: please run \"tofu init\""
        ));
        assert!(!needs_init("Error acquiring the state lock"));
        assert!(is_missing_workspace(
            "Workspace \"dev\" doesn't exist.",
            "dev"
        ));
        assert!(is_missing_workspace(
            "Currently selected workspace \"dev\" does not exist",
            "dev"
        ));
        // A provider's own words are not Terraform's.
        assert!(!is_missing_workspace(
            "Log Analytics workspace does not exist",
            "dev"
        ));
        assert!(!is_missing_workspace(
            "Currently selected workspace \"prod\" does not exist",
            "dev"
        ));
        assert!(lists("  default\n* dev\n  prod\n", "dev"));
        assert!(lists("* default\n  dev\n", "dev"));
        assert!(!lists("* default\n  development\n", "dev"));
    }

    #[test]
    fn a_modules_variables_are_read_from_its_files() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(declared_variables(dir.path()), None, "no module file");
        std::fs::write(
            dir.path().join("main.tf"),
            "# variable \"commented\" {\nvariable \"replicas\" {\n  type = number\n}\nvariable bare {}\nvariable \"x\"\nvariables {}\n  output \"variable\" {}\nresource \"a\" \"variable\" {}\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("more.tf.json"),
            r#"{"variable": {"from_json": {"type": "string"}}}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("notes.txt"), "variable \"not\" {}\n").unwrap();
        assert_eq!(
            declared_variables(dir.path()).unwrap(),
            ["bare", "from_json", "replicas"]
        );
    }

    #[test]
    fn variables_come_from_the_module_namespace() {
        let config: Map<String, Value> = serde_json::from_str(
            r#"{"dns:zone": "example.com", "dns:ttl": 300, "dns:token": {"secure": "v1:x"}, "other:zone": "no"}"#,
        )
        .unwrap();
        let vars = variables(&config, "dns");
        assert_eq!(
            vars,
            BTreeMap::from([
                ("TF_VAR_ttl".into(), "300".into()),
                ("TF_VAR_zone".into(), "example.com".into())
            ])
        );
    }

    #[test]
    fn json_messages_become_lines_and_counts() {
        let mut reader = Reader::default();
        assert_eq!(reader.line(r#"{"@level":"info","@message":"null_resource.a: Creating...","type":"apply_start"}"#), ["null_resource.a: Creating..."]);
        assert_eq!(
            reader.line(r#"{"@level":"info","@message":"Plan: 2 to add, 1 to change, 0 to destroy.","type":"change_summary","changes":{"add":2,"change":1,"remove":0,"operation":"plan"}}"#),
            ["Resources: +2 ~1"]
        );
        assert!(
            reader.line(r#"{"@level":"info","@message":"Apply complete!","type":"change_summary","changes":{"add":2,"change":1,"remove":0,"operation":"apply"}}"#).is_empty(),
            "the apply's summary, the same as its plan's, is said once"
        );
        reader.show_diff = true;
        assert_eq!(
            reader.line(
                r#"{"type":"outputs","outputs":{"a":{"action":"update"},"b":{"action":"noop"},"c":{"action":"create"},"d":{"action":"create"}}}"#,
            ),
            ["Outputs: 2 to add, 1 to change", "    ~ a", "    + c", "    + d"]
        );
        assert_eq!(reader.diffs().last().unwrap().resource, "outputs");
        let changes = reader.changes().unwrap();
        assert_eq!((changes["create"], changes["output"]), (2, 3));
        assert_eq!(crate::engine::changes_summary(&changes), "+2 ~1 3 outputs");
        assert_eq!(reader.line("plain"), ["plain"]);
    }

    #[test]
    fn a_diagnostic_without_its_payload_gives_its_message_or_nothing() {
        let mut reader = Reader::default();
        let shown = reader.line(
            r#"{"@level":"error","@message":"Error: Backend init required","type":"diagnostic"}"#,
        );
        assert_eq!(shown, ["error: Backend init required"]);
        assert_eq!(reader.error(), Some("Backend init required"));
        let mut reader = Reader::default();
        assert!(
            reader
                .line(r#"{"@level":"error","type":"diagnostic","diagnostic":{}}"#)
                .is_empty()
        );
        assert_eq!(reader.error(), None, "no empty reason");
    }

    #[test]
    fn an_error_diagnostic_is_shown_once_and_kept_as_the_reason() {
        let line = r#"{"@level":"error","@message":"Error: Error in function call","diagnostic":{"severity":"error","summary":"Error in function call","detail":"Call to function \"cidrsubnet\" failed:\ninvalid CIDR address: x.","range":{"filename":"main.tf","start":{"line":21,"column":32}}},"type":"diagnostic"}"#;
        let mut reader = Reader::default();
        let shown = [
            "error: Error in function call: Call to function \"cidrsubnet\" failed: invalid CIDR address: x. (main.tf:21)",
        ];
        assert_eq!(reader.line(line), shown);
        assert!(
            reader.line(line).is_empty(),
            "a repeated diagnostic is shown once"
        );
        assert_eq!(reader.error(), Some(&shown[0]["error: ".len()..]));
    }

    /// Every error diagnostic is kept, each once, for `[retry]`; a warning, a hook's message
    /// and a provisioner's output are not.
    #[test]
    fn every_error_diagnostic_is_kept_and_nothing_else() {
        let mut reader = Reader::default();
        let lines = [
            r#"{"@level":"info","@message":"aws_s3_bucket.logs: Still creating... (rate exceeded, retrying)","type":"apply_progress"}"#,
            r#"{"@level":"warn","@message":"Warning: Throttling","diagnostic":{"severity":"warning","summary":"Throttling","detail":"rate exceeded"},"type":"diagnostic"}"#,
            r#"{"@level":"error","@message":"Error: creating IAM Role","diagnostic":{"severity":"error","summary":"creating IAM Role (app)","detail":"AccessDenied: not authorized","range":{"filename":"iam.tf","start":{"line":3}}},"type":"diagnostic"}"#,
            r#"{"@level":"error","@message":"Error: creating IAM Role","diagnostic":{"severity":"error","summary":"creating IAM Role (app)","detail":"AccessDenied: not authorized","range":{"filename":"iam.tf","start":{"line":3}}},"type":"diagnostic"}"#,
            r#"{"@level":"error","@message":"Error: creating S3 Bucket","diagnostic":{"severity":"error","summary":"creating S3 Bucket (data)","detail":"BucketAlreadyExists"},"type":"diagnostic"}"#,
            "a line that is not JSON: rate exceeded",
        ];
        for line in lines {
            reader.line(line);
        }
        assert_eq!(
            reader.errors(),
            [
                "creating IAM Role (app): AccessDenied: not authorized (iam.tf:3)",
                "creating S3 Bucket (data): BucketAlreadyExists"
            ]
        );
        assert_eq!(reader.error(), Some(reader.errors()[0].as_str()));
    }

    #[test]
    fn sensitive_outputs_are_hidden_unless_asked_for() {
        let json = r#"{"zone": {"sensitive": false, "type": "string", "value": "example.com"},
                       "token": {"sensitive": true, "type": "string", "value": "s3cr3t"}}"#;
        assert_eq!(
            outputs(json, false),
            serde_json::json!({"zone": "example.com", "token": "[secret]"})
        );
        assert_eq!(
            outputs(json, true),
            serde_json::json!({"zone": "example.com", "token": "s3cr3t"})
        );
    }

    #[test]
    fn a_state_is_read_for_its_lineage_and_serial_alone() {
        let state = r#"{"version": 4, "serial": 7, "lineage": "abc", "outputs": {"pw": {"value": "hunter2", "sensitive": true}}}"#;
        let read = state_version(state).unwrap();
        assert_eq!((read.lineage.as_deref(), read.serial), (Some("abc"), 7));
        assert!(!format!("{read:?}").contains("hunter2"));
        assert_eq!(state_version("").unwrap().lineage, None);
        assert_eq!(state_version("not json"), None);
        let pull = terraform().state_pull(&module(true, true));
        assert_eq!(pull.kind, StepKind::StateVersion);
        assert_eq!(pull.args, ["state", "pull", "-no-color"]);
        assert_eq!(pull.env["TF_WORKSPACE"], "dev");
        let steps = terraform().state_steps(&module(false, true));
        let words: Vec<&str> = steps.iter().map(|s| s.args[0].as_str()).collect();
        assert_eq!(words, ["init", "state"]);
    }

    #[test]
    fn a_plans_resources_say_their_values_secrets_apart() {
        let plan = serde_json::json!({"resource_changes": [
            {"address": "terraform_data.route", "change": {"actions": ["update"],
             "before": {"input": "10.0.0.0/16", "id": "x", "token": "old"},
             "after": {"input": "10.1.0.0/16", "id": "x", "token": "new"},
             "after_unknown": {}, "before_sensitive": {"token": true}, "after_sensitive": {"token": true}}},
            {"address": "aws_s3_bucket.b", "change": {"actions": ["create"], "before": null,
             "after": {"bucket": "b", "arn": null}, "after_unknown": {"arn": true},
             "after_sensitive": {}}},
            {"address": "terraform_data.same", "change": {"actions": ["no-op"], "before": {}, "after": {}}},
            {"address": "aws_instance.web", "change": {"actions": ["delete", "create"],
             "before": {"ami": "a"}, "after": {"ami": "b"}}}
        ]});
        let diffs = super::resource_diffs(&plan.to_string());
        let said: Vec<(String, String, Vec<String>)> = (diffs.iter())
            .map(|d| {
                let properties = (d.properties.iter())
                    .map(|p| format!("{} {} {:?} {:?}", p.path, p.kind, p.old, p.new))
                    .collect();
                (d.op.clone(), d.resource.clone(), properties)
            })
            .collect();
        assert_eq!(
            said,
            [
                (
                    "update".into(),
                    "terraform_data.route".into(),
                    vec![
                        r#"input update Some("\"10.0.0.0/16\"") Some("\"10.1.0.0/16\"")"#
                            .to_string(),
                        r#"token update Some("\"[secret]\"") Some("\"[secret]\"")"#.to_string(),
                    ]
                ),
                (
                    "create".into(),
                    "aws_s3_bucket.b".into(),
                    vec![
                        r#"arn add None Some("\"(known after apply)\"")"#.to_string(),
                        r#"bucket add None Some("\"b\"")"#.to_string(),
                    ]
                ),
                (
                    "replace".into(),
                    "aws_instance.web".into(),
                    vec![r#"ami update Some("\"a\"") Some("\"b\"")"#.to_string(),]
                ),
            ]
        );
    }
}
