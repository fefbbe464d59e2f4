//! Terraform and OpenTofu root modules (docs/commands.md, "up, preview, refresh, destroy"): the same CLI contract, two binaries.
//!
//! Per project, in its directory: `init -input=false`, then the stack's workspace (`workspace
//! select S`, else `workspace new S` — `select -or-create` only exists from 1.4, and this works on
//! 1.0), then the operation with `-json` so that change counts come from the `change_summary`
//! message: `apply -auto-approve -input=false` (up), `plan -detailed-exitcode -input=false` (preview;
//! exit 2 means changes), `apply -refresh-only -auto-approve -input=false` (refresh),
//! `destroy -auto-approve -input=false`, and after up `output -json`. The shared configuration's
//! keys in the module's namespace (its directory's name) reach it as `TF_VAR_<key>`.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::{Changes, Operation, Step, StepKind, changes_summary};

/// Terraform's message when another run holds the state lock.
pub const LOCKED_MARKER: &str = "Error acquiring the state lock";

#[derive(Debug, Clone)]
pub struct Terraform {
    /// `terraform` or `tofu`.
    pub binary: String,
    pub stack: String,
    pub color: bool,
}

impl Terraform {
    /// The steps of `operation` in the module at `dir`, with `variables` (`TF_VAR_*`) set.
    pub fn steps(
        &self,
        dir: &Path,
        operation: Operation,
        variables: &BTreeMap<String, String>,
    ) -> Vec<Step> {
        let step = |kind, words: &[&str]| {
            let mut args: Vec<String> = words.iter().map(|w| w.to_string()).collect();
            if !self.color {
                args.push("-no-color".into());
            }
            let mut step = Step::new(kind, self.binary.clone(), args, dir);
            step.env = variables.clone();
            // Terraform's own hint for tools that drive it: no "run terraform apply next" advice.
            step.env.insert("TF_IN_AUTOMATION".into(), "1".into());
            step
        };
        let init = step(StepKind::Prepare, &["init", "-input=false"]);
        let mut select = step(StepKind::Prepare, &["workspace", "select", &self.stack]);
        // Only `up` and `preview` make the stack's workspace; `destroy` and `refresh` of a stack
        // that does not exist fail to select it, which the run reports as such.
        if matches!(operation, Operation::Up | Operation::Preview) {
            select.fallback = Some(Box::new(step(
                StepKind::Prepare,
                &["workspace", "new", &self.stack],
            )));
        }
        let mut steps = vec![init, select];
        let operation_words: &[&str] = match operation {
            Operation::Up => &["apply", "-auto-approve", "-input=false", "-json"],
            Operation::Preview => &["plan", "-detailed-exitcode", "-input=false", "-json"],
            Operation::Refresh => &[
                "apply",
                "-refresh-only",
                "-auto-approve",
                "-input=false",
                "-json",
            ],
            Operation::Destroy => &["destroy", "-auto-approve", "-input=false", "-json"],
        };
        let mut op = step(StepKind::Operation, operation_words);
        if operation == Operation::Preview {
            op.ok_codes = vec![0, 2];
            op.changes_code = Some(2);
        }
        steps.push(op);
        if operation == Operation::Up {
            steps.push(step(StepKind::Outputs, &["output", "-json"]));
        }
        steps
    }
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

/// Whether a failed `workspace select` says the workspace does not exist.
pub fn is_missing_workspace(output: &str) -> bool {
    output.contains("doesn't exist") && output.contains("orkspace")
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
    /// The first error diagnostic, for the summary's reason.
    error: Option<String>,
    last_shown: Option<String>,
}

impl Reader {
    pub fn line(&mut self, line: &str) -> Vec<String> {
        let Ok(message @ Value::Object(_)) = serde_json::from_str::<Value>(line) else {
            return vec![line.to_string()];
        };
        // Indexed as a `Value`, a missing or mistyped payload is `null`, never a panic (a `Map`
        // panics on a missing key).
        match message.get("type").and_then(Value::as_str) {
            Some("change_summary") => {
                let changes = &message["changes"];
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
                return vec![line];
            }
            // Planned output changes carry an action; the final message carries values, which
            // are never shown (they may be sensitive).
            Some("outputs") => {
                let outputs = message["outputs"].as_object().cloned().unwrap_or_default();
                let changed = outputs
                    .values()
                    .filter(|o| {
                        o.get("action")
                            .and_then(Value::as_str)
                            .is_some_and(|a| a != "noop")
                    })
                    .count() as u64;
                self.outputs_changed = self.outputs_changed.max(changed);
                return if changed > 0 {
                    vec![format!("Outputs: {changed} to change")]
                } else {
                    Vec::new()
                };
            }
            Some("diagnostic") => {
                let text = diagnostic(&message["diagnostic"]);
                let level = message
                    .get("@level")
                    .and_then(Value::as_str)
                    .unwrap_or("info");
                if level == "error" && self.error.is_none() {
                    self.error = Some(text.clone());
                }
                let line = format!("{level}: {text}");
                // Terraform may report one diagnostic twice (plan, then validate).
                if self.last_shown.as_deref() == Some(line.as_str()) {
                    return Vec::new();
                }
                self.last_shown = Some(line.clone());
                return vec![line];
            }
            _ => {}
        }
        match message.get("@message").and_then(Value::as_str) {
            Some(text) if !text.is_empty() => {
                let level = message
                    .get("@level")
                    .and_then(Value::as_str)
                    .unwrap_or("info");
                if level == "error" || level == "warn" {
                    vec![format!("{level}: {text}")]
                } else {
                    vec![text.to_string()]
                }
            }
            _ => Vec::new(),
        }
    }

    pub fn finish(&mut self) -> Vec<String> {
        Vec::new()
    }

    /// The first error Terraform reported, with its place.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
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
    use super::*;

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

    #[test]
    fn up_inits_selects_or_creates_the_workspace_applies_and_reads_outputs() {
        let variables = BTreeMap::from([("TF_VAR_region".to_string(), "eu".to_string())]);
        let steps = terraform().steps(Path::new("/w/dns"), Operation::Up, &variables);
        let shown: Vec<String> = steps.iter().map(Step::display).collect();
        assert_eq!(
            shown,
            [
                "terraform init -input=false -no-color",
                "terraform workspace select dev -no-color",
                "terraform apply -auto-approve -input=false -json -no-color",
                "terraform output -json -no-color",
            ]
        );
        assert_eq!(
            steps[1].fallback.as_ref().unwrap().display(),
            "terraform workspace new dev -no-color"
        );
        assert!(steps.iter().all(|s| s.env["TF_VAR_region"] == "eu"));
        let preview = terraform().steps(Path::new("/w/dns"), Operation::Preview, &BTreeMap::new());
        assert_eq!(
            preview[2].display(),
            "terraform plan -detailed-exitcode -input=false -json -no-color"
        );
        assert_eq!(preview[2].ok_codes, [0, 2]);
        assert_eq!(preview[2].changes_code, Some(2));
        let refresh = terraform().steps(Path::new("/w/dns"), Operation::Refresh, &BTreeMap::new());
        assert_eq!(
            refresh[2].display(),
            "terraform apply -refresh-only -auto-approve -input=false -json -no-color"
        );
        let destroy = terraform().steps(Path::new("/w/dns"), Operation::Destroy, &BTreeMap::new());
        assert_eq!(
            destroy[2].display(),
            "terraform destroy -auto-approve -input=false -json -no-color"
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
            reader.line(r#"{"@level":"info","@message":"Apply complete!","type":"change_summary","changes":{"add":2,"change":1,"remove":0,"operation":"apply"}}"#),
            ["Resources: +2 ~1"]
        );
        reader.line(
            r#"{"type":"outputs","outputs":{"a":{"action":"update"},"b":{"action":"noop"}}}"#,
        );
        let changes = reader.changes().unwrap();
        assert_eq!((changes["create"], changes["output"]), (2, 1));
        assert_eq!(reader.line("plain"), ["plain"]);
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
}
