//! The Pulumi CLI, exactly (docs/commands.md, "up, preview, refresh, destroy"): every flag here
//! exists in Pulumi v3.259 (`tests/pulumi-stand-in/pulumi-flags.json`; the stand-in refuses any
//! other, and the tests check every recorded argv against the list).
//!
//! Per project, in its directory: `stack select --create` (plus `--secrets-provider` when set),
//! then the operation with `--stack`, `--config-file <shared>` (not for the secrets project, which
//! keeps its own configuration), `--color` and `--json`, then after a successful `up`
//! `stack output --json --show-secrets`. Change counts come from the JSON: the `summaryEvent` of
//! the NDJSON stream for up/refresh/destroy, the digest's `changeSummary` for preview.
//!
//! With `[pulumi] update_plans`, a preview whose plan an approval keeps saves Pulumi's update
//! plan (`--save-plan FILE`), and the approved `up` applies it (`--plan FILE`, a hidden flag the
//! CLI takes without `PULUMI_EXPERIMENTAL`, which is never set: it would change every preview).
//!
//! `destroy --remove` runs `stack rm --yes` after the destroy instead of passing Pulumi's
//! `--remove`, as the Automation API does: `stack rm` takes no `--config-file`, so it can only
//! ever delete the project's own stack file, never the shared configuration.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::state::{InServer, Migration, Shared, StateServer};
use super::{Operation, Step, StepKind};

mod digest;
mod reader;
mod stream;

pub use digest::{blinded, plan_digest, planned_outputs, resource_diff, stack_outputs};
pub use reader::Reader;

/// Pulumi's message when another update holds the stack (DIY backends and Pulumi Cloud).
pub const LOCKED_MARKERS: &[&str] = &[
    "the stack is currently locked by",
    "Conflict: Another update is currently in progress",
];

/// What every Pulumi step of a run shares.
#[derive(Debug, Clone)]
pub struct Pulumi {
    pub binary: String,
    pub stack: String,
    pub shared_config: PathBuf,
    pub secrets_project: String,
    pub secrets_provider: Option<String>,
    pub color: bool,
    /// `state = "ledger"`: the server its projects that name no backend keep their stacks in.
    pub state: Option<super::state::StateServer>,
    /// `[pulumi] update_plans`: a preview that saves its plan saves Pulumi's update plan
    /// (`--save-plan`), and the `up` of an approved one applies it (`--plan`).
    pub update_plans: bool,
    /// `[policy] pulumi_packs`: the policy packs (absolute directories) its previews and
    /// updates run (`--policy-pack`).
    pub policy_packs: Vec<PathBuf>,
}

/// The variable that makes `preview --json` print the engine's events as they come instead of
/// one digest at the end, which leaves out the policy packs' violations and what a refresh
/// step read (the digest holds its resource as recorded), and may hold the root stack's
/// outputs as they were rather than as planned.
pub const STREAMING_PREVIEW: &str = "PULUMI_ENABLE_STREAMING_JSON_PREVIEW";

impl Pulumi {
    /// The steps of `operation` on the project at `path` (relative to the projects directory),
    /// whose directory is `dir`.
    pub fn steps(&self, path: &str, dir: &Path, operation: Operation, remove: bool) -> Vec<Step> {
        let owned = |words: &[&str]| words.iter().map(|w| w.to_string()).collect::<Vec<String>>();
        let mut op = owned(&["--non-interactive", operation.as_str()]);
        match operation {
            Operation::Preview => {}
            // A preview of the code against the cloud as it is, which writes no state: its
            // refresh steps are what changed outside.
            Operation::Drift => op = owned(&["--non-interactive", "preview", "--refresh"]),
            Operation::Up | Operation::Refresh | Operation::Destroy => {
                op.extend(owned(&["--yes", "--skip-preview"]))
            }
        }
        op.extend(owned(&["--stack", &self.stack]));
        if path != self.secrets_project {
            op.extend(owned(&[
                "--config-file",
                &self.shared_config.display().to_string(),
            ]));
        }
        op.extend(owned(&[
            "--color",
            if self.color { "always" } else { "never" },
            "--json",
        ]));
        // The policy packs judge what a preview plans and what an update does: not a drift
        // check, which a pack's refusal would fail, hiding the drift it found (Pulumi's refresh
        // and destroy take none: docs/commands.md, "Pulumi's own policy packs"); a preview then
        // streams its events, so that their violations are read.
        let judged = matches!(operation, Operation::Preview | Operation::Up);
        for pack in self.policy_packs.iter().filter(|_| judged) {
            op.extend(["--policy-pack".to_string(), pack.display().to_string()]);
        }
        // `destroy`, `refresh` and a drift check never create a stack: they name it, and a
        // stack that does not exist fails them (exit 6), which the run reports as such.
        let mut steps = match operation {
            Operation::Up | Operation::Preview => vec![self.select_step(dir)],
            Operation::Refresh | Operation::Destroy | Operation::Drift => Vec::new(),
        };
        let mut operation_step = Step::new(StepKind::Operation, self.binary.clone(), op, dir);
        // A preview streams its events: only they say the stack's planned outputs (its outputs
        // event; the digest may hold them as they were), what a drift check's refresh steps
        // read, and the packs' violations (docs/decisions.md, "Pulumi's output as the real CLI
        // writes it").
        if matches!(operation, Operation::Preview | Operation::Drift) {
            (operation_step.env).insert(STREAMING_PREVIEW.into(), "true".into());
        }
        steps.push(self.kept(operation_step));
        let stack = self.stack.as_str();
        match operation {
            Operation::Up => steps.push(self.step(
                StepKind::Outputs,
                dir,
                &[
                    "--non-interactive",
                    "stack",
                    "output",
                    "--json",
                    "--show-secrets",
                    "--stack",
                    stack,
                ],
                false,
            )),
            Operation::Destroy if remove => steps.push(self.remove_stack_step(
                StepKind::Cleanup,
                dir,
                path == self.secrets_project,
            )),
            _ => {}
        }
        steps
    }
}

/// The Pulumi engine (`engine = "pulumi"`, the default).
pub struct PulumiEngine;

/// The Pulumi engine, as `engine::ENGINES` registers it.
pub static PULUMI: PulumiEngine = PulumiEngine;

impl super::Engine for PulumiEngine {
    fn name(&self) -> &'static str {
        "pulumi"
    }

    fn program(&self, programs: &super::Programs<'_>) -> Option<String> {
        Some(programs.pulumi.to_string())
    }

    fn install_hint(&self) -> Option<&'static str> {
        Some(
            "install the Pulumi CLI (https://www.pulumi.com/docs/iac/download-install/), or set `binary` under [pulumi] in mara.toml",
        )
    }

    /// `stack output --json`; what is not JSON is no outputs at all (`null`).
    fn parse_outputs(&self, stdout: &str, _show_secrets: bool) -> Value {
        serde_json::from_str(stdout).unwrap_or(Value::Null)
    }

    fn steps(&self, run: &super::Engines, target: &super::Target<'_>, op: Operation) -> Vec<Step> {
        let remove = run.remove_stacks && op == Operation::Destroy;
        let mut steps = run.pulumi.steps(target.path, target.dir, op, remove);
        // A preview whose plan is kept saves Pulumi's update plan there (`[pulumi]
        // update_plans`), which the `up` of its approval applies.
        if let (Operation::Preview, Some(file)) = (op, target.plan_file)
            && let Some(preview) = steps.iter_mut().find(|s| s.kind == StepKind::Operation)
        {
            preview
                .args
                .extend(["--save-plan".into(), file.display().to_string()]);
            preview.writes = Some(file.to_path_buf());
        }
        // A stack known to exist is not selected first: the operation names it (`--stack`), and
        // selects (creates) it only if it finds it gone.
        if target.stack_known
            && matches!(op, Operation::Up | Operation::Preview)
            && steps.first().is_some_and(|s| s.kind == StepKind::Prepare)
        {
            let select = steps.remove(0);
            if let Some(operation) = steps.iter_mut().find(|s| s.kind == StepKind::Operation) {
                operation.repairs.reserve_exact(1);
                operation.repairs.push(super::Repair {
                    when: super::Missing::Stack,
                    step: select,
                });
            }
        }
        steps
    }

    fn reader(&self, operation: Operation) -> Box<dyn super::OutputReader> {
        Box::new(Reader::new(operation))
    }

    /// The update plan its preview saved (`saved`), applied: `up --plan`, which Pulumi refuses
    /// when the update would do what the plan does not hold. Without one, or once its inputs
    /// moved: a fresh preview, compared with the approved one; then the operation as planned.
    fn approval_steps(
        &self,
        run: &super::Engines,
        target: &super::Target<'_>,
        saved: Option<&Path>,
        _replan: &Path,
    ) -> super::ApprovalSteps {
        let operation =
            |op| (run.steps(target, op).into_iter()).find(|s| s.kind == StepKind::Operation);
        let apply_saved = saved.and_then(|file| {
            let mut up = operation(Operation::Up)?;
            up.args
                .extend(["--plan".into(), file.display().to_string()]);
            Some(up)
        });
        super::ApprovalSteps {
            apply_saved,
            replan: operation(Operation::Preview),
            ..super::ApprovalSteps::default()
        }
    }

    fn plan_suffix(&self) -> Option<&'static str> {
        Some(".plan.json")
    }

    /// With `[pulumi] update_plans` (docs/decisions.md, "One preview per approval").
    fn applies_saved_plans(&self, run: &super::Engines) -> bool {
        run.pulumi.update_plans
    }

    fn config_namespace(&self, _leaf: &str, pulumi_name: Option<&str>) -> Option<String> {
        pulumi_name.map(str::to_string)
    }

    fn is_missing_stack(&self, _stack: &str, code: Option<i32>, stderr: &str) -> bool {
        is_missing_stack(code, stderr)
    }

    fn says_locked(&self, text: &str) -> bool {
        is_locked(text)
    }

    fn lock_clearing(&self, _dir: &Path, unlock: &str) -> super::LockClearing {
        super::LockClearing::ByMara(format!("clear it with `{unlock}`"))
    }

    fn cancel_step(&self, run: &super::Engines, dir: &Path) -> Option<Step> {
        Some(run.pulumi.cancel_step(dir))
    }

    fn secret_names(
        &self,
        outputs: &str,
        marks: Option<&str>,
    ) -> std::collections::BTreeSet<String> {
        super::marked_names(outputs, marks)
    }

    fn secret_outputs(&self, outputs: &str, marks: Option<&str>) -> Vec<String> {
        super::marked_values(outputs, marks)
    }

    fn secret_marks_step(&self, run: &super::Engines, dir: &Path) -> Option<Step> {
        let mut marks = run.pulumi.output_step(dir, false);
        marks.kind = StepKind::SecretMarks;
        Some(marks)
    }

    /// Its stack's outputs; none before its directory is there.
    fn outputs_source(
        &self,
        run: &super::Engines,
        dir: &Path,
        _kept: &Path,
        show_secrets: bool,
    ) -> super::OutputsSource {
        match dir.is_dir() {
            true => super::OutputsSource::Steps(vec![run.pulumi.output_step(dir, show_secrets)]),
            false => super::OutputsSource::NotDeployed,
        }
    }

    fn stacks_step(&self, run: &super::Engines, dir: &Path) -> Option<Step> {
        Some(run.pulumi.list_step(dir))
    }

    fn stack_names(&self, stdout: &str) -> Option<Vec<String>> {
        stack_names(stdout)
    }

    fn records_stacks(&self, _operation: Operation) -> bool {
        true
    }

    fn previews_make_stacks(&self) -> bool {
        true
    }

    fn needs_passphrase(&self, secrets_provider: Option<&str>) -> bool {
        secrets_provider.unwrap_or("passphrase") == "passphrase"
    }

    fn project_files(&self) -> super::ProjectFiles {
        super::ProjectFiles::PulumiProject
    }

    fn own_backend(&self, dir: &Path) -> Option<String> {
        backend_of(dir)
    }

    /// `stack export` from where the stack is (`from`, else the login), `stack select
    /// --create` and `stack import` in the server: Pulumi's own way to move a stack between
    /// backends. The export (secrets encrypted, as the stack keeps them) goes through
    /// `scratch`.
    fn migration(
        &self,
        run: &super::Engines,
        path: &str,
        dir: &Path,
        (scratch, from): (&Path, Option<&str>),
    ) -> Option<Migration> {
        let server = run.state.as_ref()?;
        backend_of(dir).is_none().then_some(())?;
        let pulumi = Pulumi {
            state: Some(StateServer {
                set: Default::default(),
                ..server.clone()
            }),
            ..run.pulumi.clone()
        };
        let source = |mut step: Step| {
            step.env.remove(BACKEND_VARIABLE);
            step.env.remove(super::state::PASSWORD_VARIABLE);
            match from {
                Some(url) => {
                    step.env.insert(BACKEND_VARIABLE.into(), url.to_string());
                }
                None => step.unset = vec![BACKEND_VARIABLE],
            }
            step
        };
        let file = scratch.join(format!("{}.json", path.replace('/', "__")));
        let file = file.display().to_string();
        let stack = pulumi.stack.as_str();
        let export = [
            "--non-interactive",
            "stack",
            "export",
            "--stack",
            stack,
            "--file",
            &file,
        ];
        let import = [
            "--non-interactive",
            "stack",
            "import",
            "--stack",
            stack,
            "--file",
            &file,
        ];
        Some(Migration {
            from: format!("stack {stack} in {}", from.unwrap_or("Pulumi's login")),
            found: vec![source(pulumi.list_step(dir))],
            taken: vec![(format!("stack {stack}"), vec![pulumi.list_step(dir)])],
            moves: vec![
                source(pulumi.step(StepKind::Prepare, dir, &export, false)),
                pulumi.select_step(dir),
                pulumi.step(StepKind::Prepare, dir, &import, false),
            ],
        })
    }

    fn holds_state(&self, stdout: &str, stack: &str) -> bool {
        stack_names(stdout).is_some_and(|names| names.iter().any(|n| n == stack))
    }

    /// The table and index of its `postgres://` backend, as Pulumi makes them
    /// (`pkg/backend/diy/postgres/schema.sql`).
    fn shared_in_server(&self) -> &'static [Shared] {
        &[
            Shared {
                name: "pulumi_state",
                make: "CREATE TABLE IF NOT EXISTS pulumi_state (key TEXT PRIMARY KEY, data JSON NOT NULL, updated_at TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now())",
            },
            Shared {
                name: "pulumi_state_key_prefix_idx",
                make: "CREATE INDEX IF NOT EXISTS pulumi_state_key_prefix_idx ON pulumi_state (key text_pattern_ops)",
            },
        ]
    }

    /// Pulumi's DIY `postgres://` backend, in its table `pulumi_state` (Pulumi's default, so
    /// that `pulumi login` with the same URL finds the same stacks); not when the project's
    /// `Pulumi.yaml` or the environment (`PULUMI_BACKEND_URL`) names a backend.
    fn state_in(&self, server: &StateServer, _path: &str, dir: &Path) -> Option<InServer> {
        if server.set.contains(BACKEND_VARIABLE) || backend_of(dir).is_some() {
            return None;
        }
        let joiner = if server.url.contains('?') { '&' } else { '?' };
        let url = format!("{}{joiner}table={STATE_TABLE}", server.url);
        Some(InServer {
            env: std::collections::BTreeMap::from([(BACKEND_VARIABLE.to_string(), url)]),
            file: None,
        })
    }
}

/// The variable that names Pulumi's backend, over `Pulumi.yaml`'s and the login's.
pub const BACKEND_VARIABLE: &str = "PULUMI_BACKEND_URL";

/// The table Pulumi's `postgres://` backend keeps the stacks of `state = "ledger"` in.
pub const STATE_TABLE: &str = "pulumi_state";

/// The backend the Pulumi project in `dir` names (`backend.url` in its `Pulumi.yaml`).
pub fn backend_of(dir: &Path) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Project {
        backend: Option<Backend>,
    }
    #[derive(serde::Deserialize)]
    struct Backend {
        url: Option<String>,
    }
    let text = ["Pulumi.yaml", "Pulumi.yml"]
        .iter()
        .find_map(|name| crate::files::read_to_string(&dir.join(name)).ok())?;
    let project: Project = serde_saphyr::from_str(&text).ok()?;
    project.backend?.url.filter(|url| !url.trim().is_empty())
}

impl Pulumi {
    /// A step of `kind` in `dir`; with `shared`, on the shared configuration (`--config-file`).
    fn step(&self, kind: StepKind, dir: &Path, words: &[&str], shared: bool) -> Step {
        let mut args: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        if shared {
            args.extend([
                "--config-file".to_string(),
                self.shared_config.display().to_string(),
            ]);
        }
        self.kept(Step::new(kind, self.binary.clone(), args, dir))
    }

    /// `step`, with what keeps its project's stacks in the ledger's server (`state`).
    fn kept(&self, mut step: Step) -> Step {
        let dir = step.cwd.clone();
        let steps = std::slice::from_mut(&mut step);
        super::state::keep(&PULUMI, self.state.as_ref(), "", &dir, steps);
        step
    }

    /// `stack rm --yes` in `dir`: the stack, which must hold no resources (no `--force`). A
    /// project's own configuration file goes with it only when it is `own` (the secrets
    /// project's, holding its secrets); any other's is kept (`--preserve-config`): a
    /// `Pulumi.yaml` whose `config:`/`stackConfigDir` points at the shared directory would
    /// otherwise have Pulumi delete the shared configuration (the original MARA's do).
    pub fn remove_stack_step(&self, kind: StepKind, dir: &Path, own: bool) -> Step {
        let mut words = vec!["--non-interactive", "stack", "rm", "--yes"];
        if !own {
            words.push("--preserve-config");
        }
        words.extend(["--stack", &self.stack]);
        self.step(kind, dir, &words, false)
    }

    /// `stack select --create` in `dir`: a stack must exist before its configuration can be set.
    pub fn select_step(&self, dir: &Path) -> Step {
        let mut words = vec![
            "--non-interactive",
            "stack",
            "select",
            "--create",
            "--stack",
            &self.stack,
        ];
        if let Some(provider) = &self.secrets_provider {
            words.extend(["--secrets-provider", provider]);
        }
        self.step(StepKind::Prepare, dir, &words, false)
    }

    /// `config set --secret KEY` in `dir`, the value to be written to standard input (never an
    /// argument); with `shared`, into the shared configuration.
    pub fn set_secret_step(&self, dir: &Path, key: &str, path: bool, shared: bool) -> Step {
        let mut words = vec!["--non-interactive", "config", "set", "--secret"];
        if path {
            words.push("--path");
        }
        words.extend([key, "--stack", &self.stack]);
        self.step(StepKind::Prepare, dir, &words, shared)
    }

    /// `stack output --json` in `dir` (`mara output`), decrypted with `show_secrets`.
    pub fn output_step(&self, dir: &Path, show_secrets: bool) -> Step {
        let mut words = vec![
            "--non-interactive",
            "stack",
            "output",
            "--json",
            "--stack",
            &self.stack,
        ];
        if show_secrets {
            words.push("--show-secrets");
        }
        self.step(StepKind::Outputs, dir, &words, false)
    }

    /// `config get KEY` in `dir` (Pulumi decrypts a secret); with `shared`, from the shared
    /// configuration.
    pub fn get_step(&self, dir: &Path, key: &str, path: bool, shared: bool) -> Step {
        let mut words = vec!["--non-interactive", "config", "get"];
        if path {
            words.push("--path");
        }
        words.extend([key, "--stack", &self.stack]);
        self.step(StepKind::Outputs, dir, &words, shared)
    }

    /// `config rm KEY` in `dir` (with `path`, `--path`): the stack configuration without it.
    pub fn rm_step(&self, dir: &Path, key: &str, path: bool) -> Step {
        let mut words = vec!["--non-interactive", "config", "rm"];
        if path {
            words.push("--path");
        }
        words.extend([key, "--stack", &self.stack]);
        self.step(StepKind::Prepare, dir, &words, false)
    }

    /// `cancel --yes` in `dir`: the stack's lock removed, which an update killed mid-way leaves
    /// (on a self-managed backend, its lock files).
    pub fn cancel_step(&self, dir: &Path) -> Step {
        self.step(
            StepKind::Operation,
            dir,
            &[
                "--non-interactive",
                "cancel",
                "--yes",
                "--stack",
                &self.stack,
            ],
            false,
        )
    }

    /// `stack ls --json` in `dir`: the project's stacks, read-only.
    pub fn list_step(&self, dir: &Path) -> Step {
        self.step(
            StepKind::Outputs,
            dir,
            &["--non-interactive", "stack", "ls", "--json"],
            false,
        )
    }

    /// `config --json --show-secrets` in `dir` (the shared configuration with `shared`): how mara
    /// learns the secret values it must keep out of its output.
    pub fn read_config_step(&self, dir: &Path, shared: bool) -> Step {
        self.step(
            StepKind::Outputs,
            dir,
            &[
                "--non-interactive",
                "config",
                "--json",
                "--show-secrets",
                "--stack",
                &self.stack,
            ],
            shared,
        )
    }
}

/// Whether a configuration value is one Pulumi encrypted (`{secure: v1:…}`).
pub fn is_secure(value: &Value) -> bool {
    matches!(value, Value::Object(map) if map.len() == 1 && map.contains_key("secure"))
}

/// The secrets of `pulumi config --json --show-secrets` output, by key.
/// A structured value that holds secrets is one entry (`objectValue`, marked secret): its secret
/// leaves are those where `file` (the stack configuration it was read from) has `secure:`, each
/// under its path (`key.inner`).
pub fn secret_values(
    config_json: &str,
    file: Option<&serde_json::Map<String, Value>>,
) -> std::collections::BTreeMap<String, String> {
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(config_json) else {
        return Default::default();
    };
    let mut secrets = std::collections::BTreeMap::new();
    for (key, entry) in map {
        if entry["secret"] != Value::Bool(true) {
            continue;
        }
        match (entry.get("objectValue"), file.and_then(|f| f.get(&key))) {
            (Some(opened), Some(stored)) => secret_leaves(&key, stored, opened, &mut secrets),
            (Some(_), None) => {}
            (None, _) => {
                if let Some(value) = entry["value"].as_str() {
                    secrets.insert(key, value.to_string());
                }
            }
        }
    }
    secrets
}

/// The leaves of `opened` where `stored` is `{secure: …}`, as text, by path.
fn secret_leaves(
    path: &str,
    stored: &Value,
    opened: &Value,
    into: &mut std::collections::BTreeMap<String, String>,
) {
    if is_secure(stored) {
        let text = match opened {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        into.insert(path.to_string(), text);
        return;
    }
    match (stored, opened) {
        (Value::Object(stored), Value::Object(opened)) => {
            for (name, inner) in stored {
                if let Some(value) = opened.get(name) {
                    secret_leaves(&format!("{path}.{name}"), inner, value, into);
                }
            }
        }
        (Value::Array(stored), Value::Array(opened)) => {
            for (i, (inner, value)) in stored.iter().zip(opened).enumerate() {
                secret_leaves(&format!("{path}[{i}]"), inner, value, into);
            }
        }
        _ => {}
    }
}

/// The stack names of `stack ls --json` output (short: `dev`, also from `organization/p/dev`);
/// `None` when it is not that output.
pub fn stack_names(json: &str) -> Option<Vec<String>> {
    let Ok(Value::Array(stacks)) = serde_json::from_str::<Value>(json) else {
        return None;
    };
    Some(
        stacks
            .iter()
            .filter_map(|s| s["name"].as_str())
            .map(|name| name.rsplit('/').next().unwrap_or(name).to_string())
            .collect(),
    )
}

/// Whether a failed call says the stack does not exist (exit 6, or "no stack named").
pub fn is_missing_stack(code: Option<i32>, stderr: &str) -> bool {
    code == Some(6) || stderr.contains("no stack named")
}

/// Whether stderr says another update holds the stack's lock.
pub fn is_locked(stderr: &str) -> bool {
    LOCKED_MARKERS.iter().any(|m| stderr.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Changes, Engine as _, Engines};

    #[test]
    fn malformed_messages_are_read_without_a_panic() {
        for operation in [Operation::Up, Operation::Preview, Operation::Destroy] {
            let mut reader = Reader::new(operation);
            for message in crate::engine::MALFORMED_MESSAGES {
                reader.line(message);
            }
            reader.finish();
        }
    }

    fn pulumi() -> Pulumi {
        Pulumi {
            binary: "pulumi".into(),
            stack: "dev".into(),
            shared_config: "/w/config/pulumi/Pulumi.dev.yaml".into(),
            secrets_project: "kubernetes/secrets".into(),
            secrets_provider: None,
            color: false,
            state: None,
            update_plans: false,
            policy_packs: Vec::new(),
        }
    }

    /// Policy packs go to previews and updates (not to a drift check; Pulumi's refresh and
    /// destroy take none); a preview streams its events, with packs or not, as a drift check
    /// does (the planned outputs and what its refresh steps read are only in the stream).
    #[test]
    fn policy_packs_go_to_previews_and_updates_and_a_preview_streams() {
        let mut p = pulumi();
        p.policy_packs = vec!["/w/policy/a".into(), "/w/policy/b".into()];
        let operation = |op| {
            let steps = p.steps("x", Path::new("/w/x"), op, false);
            steps
                .into_iter()
                .find(|s| s.kind == StepKind::Operation)
                .unwrap()
        };
        for op in [Operation::Preview, Operation::Up] {
            let step = operation(op);
            assert!(
                step.display()
                    .ends_with("--policy-pack /w/policy/a --policy-pack /w/policy/b"),
                "{}",
                step.display()
            );
            let streams = step.env.get(STREAMING_PREVIEW).map(String::as_str);
            assert_eq!(streams, (op == Operation::Preview).then_some("true"));
        }
        for op in [Operation::Drift, Operation::Refresh, Operation::Destroy] {
            let step = operation(op);
            assert!(!step.args.iter().any(|a| a == "--policy-pack"), "{op:?}");
            let streams = step.env.get(STREAMING_PREVIEW).map(String::as_str);
            assert_eq!(streams, (op == Operation::Drift).then_some("true"));
        }
        let without_packs = |op| {
            let steps = pulumi().steps("x", Path::new("/w/x"), op, false);
            steps.iter().any(|s| s.env.contains_key(STREAMING_PREVIEW))
        };
        assert!(without_packs(Operation::Preview));
        assert!(without_packs(Operation::Drift));
        assert!(!without_packs(Operation::Up));
    }

    /// A streamed preview reads as its digest would, and its packs' violations are kept: a
    /// mandatory one is why it failed.
    #[test]
    fn a_streamed_preview_gives_its_changes_and_the_packs_violations() {
        let mut reader = Reader::new(Operation::Preview);
        let lines = [
            r#"{"sequence":0,"timestamp":1,"preludeEvent":{"config":{}}}"#,
            r#"{"sequence":1,"timestamp":1,"resourcePreEvent":{"metadata":{"op":"create","urn":"urn:pulumi:dev::b::pulumi:pulumi:StackReference::a","type":"pulumi:pulumi:StackReference","old":null,"new":{"type":"pulumi:pulumi:StackReference","inputs":{"name":"o/a/dev"}}},"planning":true}}"#,
            r#"{"sequence":2,"timestamp":1,"policyEvent":{"resourceUrn":"urn:pulumi:dev::b::pulumi:pulumi:StackReference::a","message":"<{%reset%}>a reads o/a/dev<{%reset%}>\n","color":"raw","policyName":"warn_any","policyPackName":"refs","policyPackVersion":"0.0.1","policyPackVersionTag":"0.0.1","enforcementLevel":"advisory"}}"#,
            r#"{"sequence":3,"timestamp":1,"policyEvent":{"message":"<{%reset%}>no<{%reset%}>\n","policyName":"deny_all","policyPackName":"refs","policyPackVersion":"0.0.1","enforcementLevel":"mandatory"}}"#,
            r#"{"sequence":4,"timestamp":1,"summaryEvent":{"maybeCorrupt":false,"durationSeconds":0,"resourceChanges":{"create":1},"PolicyPacks":{"refs":"v0.0.1"},"isPreview":true,"result":"failed"}}"#,
        ];
        let mut said = Vec::new();
        for line in lines {
            said.extend(reader.line(line));
        }
        said.extend(reader.finish());
        assert_eq!(
            said,
            [
                "policy advisory: a reads o/a/dev (refs warn_any)",
                "policy mandatory: no (refs deny_all)",
                "create pulumi:pulumi:StackReference a",
                "Preview: +1",
            ]
        );
        assert_eq!(reader.changes, Some(Changes::from([("create".into(), 1)])));
        assert_eq!(reader.error.as_deref(), Some("policy pack refs: no"));
        assert!(reader.errors.is_empty(), "a denial is no error to retry");
        let violations = crate::engine::OutputReader::policy_violations(&reader);
        assert_eq!(violations.len(), 2);
        assert_eq!(
            violations[0].resource,
            "urn:pulumi:dev::b::pulumi:pulumi:StackReference::a"
        );
        assert!(!violations[0].mandatory && violations[1].mandatory);
        assert!(reader.plan_digest.is_some());
    }

    fn server() -> StateServer {
        StateServer {
            url: "postgres://mara@db:5432/team?sslmode=verify-full".into(),
            password: Some("hunter2".into()),
            set: Default::default(),
        }
    }

    #[test]
    fn with_state_in_the_ledger_every_step_names_the_server_and_gets_the_password() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("Pulumi.yaml"), "name: vpc\nruntime: yaml\n").unwrap();
        let pulumi = Pulumi {
            state: Some(server()),
            ..self::pulumi()
        };
        let mut steps = pulumi.steps("infrastructure/vpc", dir.path(), Operation::Up, false);
        steps.push(pulumi.set_secret_step(dir.path(), "vpc:x", false, false));
        steps.push(pulumi.list_step(dir.path()));
        for step in &steps {
            assert_eq!(
                step.env["PULUMI_BACKEND_URL"],
                "postgres://mara@db:5432/team?sslmode=verify-full&table=pulumi_state",
                "{}",
                step.display()
            );
            assert_eq!(step.env["PGPASSWORD"], "hunter2");
            // Never in the arguments, nor where a step is shown.
            assert!(!step.args.iter().any(|a| a.contains("hunter2")));
            assert!(!step.display().contains("hunter2"));
        }
        // A project that names its backend keeps it; so does one whose environment names one.
        let own = "name: vpc\nruntime: yaml\nbackend:\n  url: s3://bucket/state\n";
        std::fs::write(dir.path().join("Pulumi.yaml"), own).unwrap();
        assert_eq!(
            PULUMI.own_backend(dir.path()).as_deref(),
            Some("s3://bucket/state")
        );
        let kept = pulumi.list_step(dir.path());
        assert!(!kept.env.contains_key("PULUMI_BACKEND_URL"));
        assert!(!kept.env.contains_key("PGPASSWORD"));
        std::fs::write(dir.path().join("Pulumi.yaml"), "name: vpc\n").unwrap();
        let named = Pulumi {
            state: Some(StateServer {
                set: ["PULUMI_BACKEND_URL".to_string()].into(),
                ..server()
            }),
            ..self::pulumi()
        };
        assert!(named.list_step(dir.path()).env.is_empty());
        // The password is not in what a run's debug output shows of its server.
        assert!(!format!("{:?}", server()).contains("hunter2"));
    }

    #[test]
    fn a_stack_moves_by_export_select_and_import_from_where_it_is() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("Pulumi.yaml"), "name: vpc\n").unwrap();
        let run = crate::run::plan::fixtures::engines();
        let run = Engines {
            state: Some(server()),
            ..run
        };
        let scratch = Path::new("/w/.mara/migrating");
        let from = Some("file:///w/.mara/pulumi-state");
        let migration = PULUMI
            .migration(&run, "infrastructure/vpc", dir.path(), (scratch, from))
            .unwrap();
        let source = &migration.found[0];
        assert_eq!(
            source.env["PULUMI_BACKEND_URL"],
            "file:///w/.mara/pulumi-state"
        );
        assert!(!source.env.contains_key("PGPASSWORD"));
        let target = &migration.taken[0].1[0];
        assert!(target.env["PULUMI_BACKEND_URL"].starts_with("postgres://"));
        let shown: Vec<String> = migration.moves.iter().map(Step::display).collect();
        assert_eq!(
            shown,
            [
                "pulumi --non-interactive stack export --stack dev --file /w/.mara/migrating/infrastructure__vpc.json",
                "pulumi --non-interactive stack select --create --stack dev",
                "pulumi --non-interactive stack import --stack dev --file /w/.mara/migrating/infrastructure__vpc.json",
            ]
        );
        assert_eq!(
            migration.moves[0].env["PULUMI_BACKEND_URL"],
            "file:///w/.mara/pulumi-state"
        );
        assert!(migration.moves[2].env["PULUMI_BACKEND_URL"].starts_with("postgres://"));
        // From Pulumi's login: the environment's backend is not passed.
        let login = PULUMI
            .migration(&run, "infrastructure/vpc", dir.path(), (scratch, None))
            .unwrap();
        assert_eq!(login.found[0].unset, ["PULUMI_BACKEND_URL"]);
        assert!(PULUMI.holds_state(r#"[{"name":"organization/vpc/dev"}]"#, "dev"));
        assert!(!PULUMI.holds_state(r#"[{"name":"prod"}]"#, "dev"));
    }

    fn lines(steps: &[Step]) -> Vec<String> {
        steps.iter().map(Step::display).collect()
    }

    #[test]
    fn up_selects_the_stack_runs_and_reads_the_outputs() {
        let steps = pulumi().steps(
            "kubernetes/logstore",
            Path::new("/w/kubernetes/logstore"),
            Operation::Up,
            false,
        );
        assert_eq!(
            lines(&steps),
            [
                "pulumi --non-interactive stack select --create --stack dev",
                "pulumi --non-interactive up --yes --skip-preview --stack dev --config-file /w/config/pulumi/Pulumi.dev.yaml --color never --json",
                "pulumi --non-interactive stack output --json --show-secrets --stack dev",
            ]
        );
        assert!(
            steps
                .iter()
                .all(|s| s.cwd == Path::new("/w/kubernetes/logstore"))
        );
    }

    #[test]
    fn the_secrets_project_keeps_its_own_configuration() {
        let steps = pulumi().steps(
            "kubernetes/secrets",
            Path::new("/w/s"),
            Operation::Refresh,
            false,
        );
        assert_eq!(
            steps[0].display(),
            "pulumi --non-interactive refresh --yes --skip-preview --stack dev --color never --json"
        );
    }

    #[test]
    fn preview_needs_no_yes_and_destroy_remove_is_a_stack_rm() {
        let mut p = pulumi();
        p.secrets_provider = Some("passphrase".into());
        p.color = true;
        let steps = p.steps("a", Path::new("/w/a"), Operation::Preview, false);
        assert_eq!(
            steps[0].display(),
            "pulumi --non-interactive stack select --create --stack dev --secrets-provider passphrase"
        );
        assert!(
            steps[1]
                .display()
                .starts_with("pulumi --non-interactive preview --stack dev --config-file")
        );
        assert!(steps[1].args.iter().any(|a| a == "always"));
        // destroy and refresh never create a stack: no `stack select --create`.
        let steps = p.steps("a", Path::new("/w/a"), Operation::Destroy, true);
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[0].kind, StepKind::Operation);
        assert_eq!(
            steps[1].display(),
            "pulumi --non-interactive stack rm --yes --preserve-config --stack dev"
        );
        assert_eq!(steps[1].kind, StepKind::Cleanup);
        // The secrets project's own file, which holds its secrets, goes with its stack.
        let steps = p.steps(
            "kubernetes/secrets",
            Path::new("/w/s"),
            Operation::Destroy,
            true,
        );
        assert_eq!(
            steps[1].display(),
            "pulumi --non-interactive stack rm --yes --stack dev"
        );
        let steps = p.steps("a", Path::new("/w/a"), Operation::Refresh, false);
        assert!(
            steps
                .iter()
                .all(|s| !s.args.contains(&"--create".to_string()))
        );
        assert_eq!(
            stack_names(r#"[{"name": "dev", "current": true}, {"name": "organization/a/prod"}]"#),
            Some(vec!["dev".to_string(), "prod".to_string()])
        );
        assert_eq!(stack_names("error"), None);
    }

    #[test]
    fn the_event_stream_gives_lines_and_counts() {
        let mut reader = Reader::new(Operation::Up);
        assert!(
            reader
                .line(r#"{"sequence":0,"timestamp":1,"preludeEvent":{"config":{}}}"#)
                .is_empty()
        );
        assert_eq!(
            reader.line(r#"{"sequence":1,"resourcePreEvent":{"metadata":{"op":"create","urn":"urn:pulumi:dev::p::pulumi:pulumi:StackReference::cluster","type":"pulumi:pulumi:StackReference"}}}"#),
            ["create pulumi:pulumi:StackReference cluster"]
        );
        assert_eq!(
            reader.line(r#"{"diagnosticEvent":{"message":"careful\n","severity":"warning"}}"#),
            ["warning: careful"]
        );
        assert_eq!(reader.line("plain text"), ["plain text"]);
        let last = reader.line(r#"{"summaryEvent":{"durationSeconds":3,"resourceChanges":{"create":1,"same":2},"result":"succeeded"}}"#);
        assert_eq!(last, ["Resources: +1 (3s)"]);
        assert_eq!(
            reader.changes,
            Some(Changes::from([("create".into(), 1), ("same".into(), 2)]))
        );
        assert_eq!(reader.result.as_deref(), Some("succeeded"));
    }

    /// Every error diagnostic is kept whole, each once, for `[retry]`; the first one's first
    /// line is the reason. What a resource printed, a warning or an info diagnostic is none.
    #[test]
    fn every_error_diagnostic_is_kept_and_nothing_else() {
        let mut reader = Reader::new(Operation::Up);
        let events = [
            r#"{"stdoutEvent":{"message":"aws:s3 bucket logs: rate exceeded, retrying\n"}}"#,
            r#"{"diagnosticEvent":{"message":"Throttling: rate exceeded\n","severity":"warning"}}"#,
            r#"{"diagnosticEvent":{"message":"  \n","severity":"error"}}"#,
            r#"{"diagnosticEvent":{"message":"creating IAM role app:\n  AccessDenied: not authorized\n","severity":"error"}}"#,
            r#"{"diagnosticEvent":{"message":"update failed\n","severity":"error"}}"#,
            r#"{"diagnosticEvent":{"message":"update failed\n","severity":"error"}}"#,
        ];
        for event in events {
            reader.line(event);
        }
        assert_eq!(reader.error.as_deref(), Some("creating IAM role app:"));
        assert_eq!(
            reader.errors,
            [
                "creating IAM role app:\n  AccessDenied: not authorized",
                "update failed"
            ]
        );
        // A preview's come in its digest, read at the end.
        let mut reader = Reader::new(Operation::Preview);
        reader.line(r#"{"diagnostics": [{"message": "a\n", "severity": "error"}, {"message": "b", "severity": "info"}, {"message": "c", "severity": "error"}], "changeSummary": {}}"#);
        assert!(reader.errors.is_empty(), "not before its output ended");
        reader.finish();
        assert_eq!(reader.errors, ["a", "c"]);
    }

    #[test]
    fn the_preview_digest_is_read_at_the_end() {
        let mut reader = Reader::new(Operation::Preview);
        for line in "{\n    \"steps\": [{\"op\": \"update\", \"urn\": \"urn:pulumi:dev::p::pulumi:pulumi:Stack::p-dev\"}],\n    \"changeSummary\": {\"update\": 1, \"same\": 1}\n}".lines() {
            assert!(reader.line(line).is_empty());
        }
        assert_eq!(
            reader.finish(),
            ["update pulumi:pulumi:Stack p-dev", "Preview: ~1"]
        );
        assert_eq!(reader.changes.as_ref().unwrap()["update"], 1);
    }

    /// A `preview --refresh` lists a refresh step for every resource it read: only one that
    /// found the resource other than recorded is drift, and refresh steps are not counted. (The
    /// digest a drift check's stream is read into: Pulumi's own holds a refresh step as recorded.)
    #[test]
    fn only_a_refresh_step_that_found_a_difference_is_drift() {
        let mut reader = Reader::new(Operation::Drift);
        let digest = serde_json::json!({
            "steps": [
                {"op": "refresh", "urn": "urn:pulumi:dev::p::aws:s3/bucket:Bucket::same",
                 "oldState": {"outputs": {"acl": "private"}}, "newState": {"outputs": {"acl": "private"}}},
                {"op": "refresh", "urn": "urn:pulumi:dev::p::aws:s3/bucket:Bucket::changed",
                 "oldState": {"outputs": {"acl": "private"}}, "newState": {"outputs": {"acl": "public-read"}},
                 "diffReasons": ["acl"], "detailedDiff": {"acl": {"kind": "update"}}},
                {"op": "update", "urn": "urn:pulumi:dev::p::aws:s3/bucket:Bucket::changed"}
            ],
            "changeSummary": {"update": 1, "same": 1, "refresh": 2}
        });
        reader.line(&digest.to_string());
        let lines = reader.finish();
        assert_eq!(reader.drifted.len(), 1, "{lines:?}");
        assert_eq!(reader.drifted[0].resource, "aws:s3/bucket:Bucket (changed)");
        assert!(
            lines.contains(&"drifted aws:s3/bucket:Bucket changed".to_string()),
            "{lines:?}"
        );
        assert_eq!(
            reader.diffs.len(),
            1,
            "what applying would change: {:?}",
            reader.diffs
        );
        assert_eq!(
            reader.changes,
            Some(Changes::from([("update".into(), 1), ("same".into(), 1)]))
        );
    }

    #[test]
    fn secrets_travel_on_stdin_and_are_read_back_by_value() {
        let p = pulumi();
        let step = p.set_secret_step(Path::new("/w/s"), "prometheus:adminpass", false, false);
        assert_eq!(
            step.display(),
            "pulumi --non-interactive config set --secret prometheus:adminpass --stack dev"
        );
        let step = p.set_secret_step(Path::new("/w/s"), "a:b.c[0]", true, false);
        assert_eq!(
            step.display(),
            "pulumi --non-interactive config set --secret --path 'a:b.c[0]' --stack dev"
        );
        let json = r#"{"a:b": {"value": "v", "secret": false}, "p:pw": {"value": "hunter2", "secret": true}, "p:x": {"secret": true}}"#;
        assert_eq!(
            secret_values(json, None),
            std::collections::BTreeMap::from([("p:pw".to_string(), "hunter2".to_string())])
        );
        // A structured value holding a secret: its secret leaves, where the file has `secure:`.
        let json = r#"{"a:cfg": {"value": "{\"env\":{\"URL\":\"pg://x\"},\"n\":2}", "objectValue": {"env": {"URL": "pg://x"}, "n": 2}, "secret": true}}"#;
        let file = serde_json::json!({"a:cfg": {"env": {"URL": {"secure": "v1:x"}}, "n": 2}});
        assert_eq!(
            secret_values(json, file.as_object()),
            std::collections::BTreeMap::from([("a:cfg.env.URL".to_string(), "pg://x".to_string())])
        );
    }

    #[test]
    fn a_held_lock_is_recognised() {
        assert!(is_locked(
            "error: the stack is currently locked by 1 lock(s). Either wait"
        ));
        assert!(!is_locked("error: something else"));
    }

    #[test]
    fn a_digest_step_becomes_its_property_diff() {
        let step: Value = serde_json::from_str(
            r#"{"op": "update", "urn": "urn:pulumi:dev::p::aws:eks/cluster:Cluster::main",
                "oldState": {"type": "aws:eks/cluster:Cluster", "inputs": {"version": "1.27",
                  "tags": {"env": "dev"}, "subnets": ["a", "b"],
                  "token": {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "ciphertext": "x"}}},
                "newState": {"type": "aws:eks/cluster:Cluster", "inputs": {"version": "1.28",
                  "tags": {"env": "prod", "team": "a"}, "subnets": ["a", "c"],
                  "token": {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "ciphertext": "y"}}},
                "detailedDiff": {"version": {"kind": "update-replace"}, "tags.env": {"kind": "update"},
                  "tags.team": {"kind": "add"}, "subnets[1]": {"kind": "update"}, "token": {"kind": "update"}}}"#,
        )
        .unwrap();
        let diff = resource_diff(&step);
        assert_eq!(
            diff.lines(),
            [
                "~ aws:eks/cluster:Cluster (main)",
                "    ~ subnets[1]: \"b\" => \"c\"",
                "    ~ tags.env: \"dev\" => \"prod\"",
                "    + tags.team: \"a\"",
                "    ~ token: [secret] => [secret]",
                "    ~ version: \"1.27\" => \"1.28\" (forces replacement)",
            ]
        );
    }
}
