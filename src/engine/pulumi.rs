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
//! `destroy --remove` runs `stack rm --yes` after the destroy instead of passing Pulumi's
//! `--remove`, as the Automation API does: `stack rm` takes no `--config-file`, so it can only
//! ever delete the project's own stack file, never the shared configuration.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{Changes, Operation, Step, StepKind, changes_summary};

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
}

impl Pulumi {
    /// The steps of `operation` on the project at `path` (relative to the projects directory),
    /// whose directory is `dir`.
    pub fn steps(&self, path: &str, dir: &Path, operation: Operation, remove: bool) -> Vec<Step> {
        let owned = |words: &[&str]| words.iter().map(|w| w.to_string()).collect::<Vec<String>>();
        let mut op = owned(&["--non-interactive", operation.as_str()]);
        match operation {
            Operation::Preview => {}
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
        // `destroy` and `refresh` never create a stack: they name it, and a stack that does not
        // exist fails them (exit 6), which the run reports as such.
        let mut steps = match operation {
            Operation::Up | Operation::Preview => vec![self.select_step(dir)],
            Operation::Refresh | Operation::Destroy => Vec::new(),
        };
        steps.push(Step::new(StepKind::Operation, self.binary.clone(), op, dir));
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
            Operation::Destroy if remove => steps.push(self.step(
                StepKind::Cleanup,
                dir,
                &[
                    "--non-interactive",
                    "stack",
                    "rm",
                    "--yes",
                    "--stack",
                    stack,
                ],
                false,
            )),
            _ => {}
        }
        steps
    }
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
        Step::new(kind, self.binary.clone(), args, dir)
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
    pub fn set_secret_step(&self, dir: &Path, key: &str, shared: bool) -> Step {
        self.step(
            StepKind::Prepare,
            dir,
            &[
                "--non-interactive",
                "config",
                "set",
                "--secret",
                key,
                "--stack",
                &self.stack,
            ],
            shared,
        )
    }

    /// `config set KEY VALUE` (plain) into the shared configuration, from `dir`.
    pub fn set_plain_step(&self, dir: &Path, key: &str, value: &str, path: bool) -> Step {
        let mut words = vec!["--non-interactive", "config", "set", "--plaintext"];
        if path {
            words.push("--path");
        }
        let shared = self.shared_config.display().to_string();
        words.extend([
            key,
            "--stack",
            &self.stack,
            "--config-file",
            &shared,
            "--",
            value,
        ]);
        self.step(StepKind::Prepare, dir, &words, false)
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
    pub fn get_step(&self, dir: &Path, key: &str, shared: bool) -> Step {
        self.step(
            StepKind::Outputs,
            dir,
            &[
                "--non-interactive",
                "config",
                "get",
                key,
                "--stack",
                &self.stack,
            ],
            shared,
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
pub fn secret_values(config_json: &str) -> std::collections::BTreeMap<String, String> {
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(config_json) else {
        return Default::default();
    };
    map.into_iter()
        .filter(|(_, entry)| entry["secret"] == Value::Bool(true))
        .filter_map(|(key, entry)| entry["value"].as_str().map(|v| (key, v.to_string())))
        .collect()
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

/// The root stack's outputs that a preview digest changes (its step's `oldState` and
/// `newState` outputs differ; without a step, none), and whether it creates the stack.
pub fn stack_outputs(digest: &Value) -> (Vec<String>, bool) {
    let is_stack = |step: &&Value| {
        step["newState"]["type"] == "pulumi:pulumi:Stack"
            || step["oldState"]["type"] == "pulumi:pulumi:Stack"
            || step["urn"]
                .as_str()
                .is_some_and(|urn| urn.contains("::pulumi:pulumi:Stack::"))
    };
    let Some(step) = digest["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .find(is_stack)
    else {
        return (Vec::new(), false);
    };
    let created = step["op"] == "create";
    let empty = serde_json::Map::new();
    let old = step["oldState"]["outputs"].as_object().unwrap_or(&empty);
    let new = step["newState"]["outputs"].as_object().unwrap_or(&empty);
    let names: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    let changed = names
        .into_iter()
        .filter(|name| old.get(*name) != new.get(*name))
        .cloned()
        .collect();
    (changed, created)
}

/// Reads an operation's stdout: lines for people, and the change counts.
#[derive(Debug)]
pub struct OutputReader {
    operation: Operation,
    /// `preview --json` prints one document at the end: it is collected, then read.
    document: String,
    pub changes: Option<Changes>,
    /// A preview's: the root stack's outputs that change, and whether it creates the stack.
    pub outputs: Option<(Vec<String>, bool)>,
    pub result: Option<String>,
    /// The first diagnostic of severity `error`: why the operation failed.
    pub error: Option<String>,
}

impl OutputReader {
    pub fn new(operation: Operation) -> OutputReader {
        OutputReader {
            operation,
            document: String::new(),
            changes: None,
            outputs: None,
            result: None,
            error: None,
        }
    }

    /// The lines to show for one line of stdout.
    pub fn line(&mut self, line: &str) -> Vec<String> {
        if self.operation == Operation::Preview {
            self.document.push_str(line);
            self.document.push('\n');
            return Vec::new();
        }
        match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(event)) => self.event(&event),
            _ => vec![line.to_string()],
        }
    }

    /// The lines still to show once stdout has ended.
    pub fn finish(&mut self) -> Vec<String> {
        if self.operation != Operation::Preview || self.document.trim().is_empty() {
            return Vec::new();
        }
        let Ok(digest) = serde_json::from_str::<Value>(&self.document) else {
            return self.document.lines().map(str::to_string).collect();
        };
        let mut lines = Vec::new();
        for step in digest["steps"].as_array().into_iter().flatten() {
            let op = step["op"].as_str().unwrap_or_default();
            if op != "same" {
                lines.push(format!(
                    "{op} {}",
                    urn_name(step["urn"].as_str().unwrap_or_default())
                ));
            }
        }
        for diagnostic in digest["diagnostics"].as_array().into_iter().flatten() {
            self.keep_error(diagnostic);
            lines.push(diagnostic_line(diagnostic));
        }
        let changes = counts(&digest["changeSummary"]);
        lines.push(format!("Preview: {}", changes_summary(&changes)));
        self.changes = Some(changes);
        if digest["diagnostics"]
            .as_array()
            .is_none_or(|d| d.is_empty())
        {
            self.outputs = Some(stack_outputs(&digest));
        }
        lines
    }

    fn event(&mut self, event: &serde_json::Map<String, Value>) -> Vec<String> {
        if let Some(summary) = event.get("summaryEvent") {
            let changes = counts(&summary["resourceChanges"]);
            self.result = summary["result"].as_str().map(str::to_string);
            let line = format!(
                "Resources: {} ({}s)",
                changes_summary(&changes),
                summary["durationSeconds"].as_u64().unwrap_or_default()
            );
            self.changes = Some(changes);
            return vec![line];
        }
        if let Some(diagnostic) = event.get("diagnosticEvent") {
            self.keep_error(diagnostic);
            return vec![diagnostic_line(diagnostic)];
        }
        if let Some(stdout) = event.get("stdoutEvent") {
            return stdout["message"]
                .as_str()
                .unwrap_or_default()
                .lines()
                .map(str::to_string)
                .collect();
        }
        if let Some(pre) = event.get("resourcePreEvent") {
            let op = pre["metadata"]["op"].as_str().unwrap_or_default();
            if op != "same" && !op.is_empty() {
                return vec![format!(
                    "{op} {}",
                    urn_name(pre["metadata"]["urn"].as_str().unwrap_or_default())
                )];
            }
        }
        if let Some(failed) = event.get("resOpFailedEvent") {
            return vec![format!(
                "failed: {}",
                urn_name(failed["metadata"]["urn"].as_str().unwrap_or_default())
            )];
        }
        if event.contains_key("cancelEvent") {
            return vec!["cancelled".into()];
        }
        Vec::new()
    }
}

impl OutputReader {
    /// Keeps the first error diagnostic's message (its first line) as the failure's reason.
    fn keep_error(&mut self, diagnostic: &Value) {
        if self.error.is_none() && diagnostic["severity"] == "error" {
            let message = diagnostic["message"].as_str().unwrap_or_default().trim();
            let first = message.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            if !first.is_empty() {
                self.error = Some(first.trim().to_string());
            }
        }
    }
}

fn diagnostic_line(diagnostic: &Value) -> String {
    let severity = diagnostic["severity"].as_str().unwrap_or("info");
    let message = diagnostic["message"]
        .as_str()
        .unwrap_or_default()
        .trim_end();
    if severity == "info" {
        message.to_string()
    } else {
        format!("{severity}: {message}")
    }
}

/// `urn:pulumi:dev::proj::pulumi:pulumi:StackReference::cluster` → `pulumi:pulumi:StackReference cluster`.
fn urn_name(urn: &str) -> String {
    let mut parts = urn.rsplitn(3, "::");
    let name = parts.next().unwrap_or_default();
    let kind = parts.next().unwrap_or_default();
    if kind.is_empty() {
        name.to_string()
    } else {
        format!("{kind} {name}")
    }
}

fn counts(value: &Value) -> Changes {
    value
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_u64().map(|n| (k.clone(), n)))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_messages_are_read_without_a_panic() {
        for operation in [Operation::Up, Operation::Preview, Operation::Destroy] {
            let mut reader = OutputReader::new(operation);
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
        }
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
            "pulumi --non-interactive stack rm --yes --stack dev"
        );
        assert_eq!(steps[1].kind, StepKind::Cleanup);
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
        let mut reader = OutputReader::new(Operation::Up);
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

    #[test]
    fn the_preview_digest_is_read_at_the_end() {
        let mut reader = OutputReader::new(Operation::Preview);
        for line in "{\n    \"steps\": [{\"op\": \"update\", \"urn\": \"urn:pulumi:dev::p::pulumi:pulumi:Stack::p-dev\"}],\n    \"changeSummary\": {\"update\": 1, \"same\": 1}\n}".lines() {
            assert!(reader.line(line).is_empty());
        }
        assert_eq!(
            reader.finish(),
            ["update pulumi:pulumi:Stack p-dev", "Preview: ~1"]
        );
        assert_eq!(reader.changes.as_ref().unwrap()["update"], 1);
    }

    #[test]
    fn secrets_travel_on_stdin_and_are_read_back_by_value() {
        let p = pulumi();
        let step = p.set_secret_step(Path::new("/w/s"), "prometheus:adminpass", false);
        assert_eq!(
            step.display(),
            "pulumi --non-interactive config set --secret prometheus:adminpass --stack dev"
        );
        let step = p.set_plain_step(Path::new("/w/a"), "aws:region", "-x", false);
        assert!(
            step.display()
                .ends_with("--config-file /w/config/pulumi/Pulumi.dev.yaml -- -x"),
            "{}",
            step.display()
        );
        let json = r#"{"a:b": {"value": "v", "secret": false}, "p:pw": {"value": "hunter2", "secret": true}, "p:x": {"secret": true}}"#;
        assert_eq!(
            secret_values(json),
            std::collections::BTreeMap::from([("p:pw".to_string(), "hunter2".to_string())])
        );
    }

    #[test]
    fn a_held_lock_is_recognised() {
        assert!(is_locked(
            "error: the stack is currently locked by 1 lock(s). Either wait"
        ));
        assert!(!is_locked("error: something else"));
    }
}
