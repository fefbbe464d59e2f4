//! Reading a Pulumi operation's stdout: the NDJSON event stream of up, refresh and destroy, the
//! digest a preview prints at its end — lines for people, change counts, errors, what a preview
//! plans.

use serde_json::Value;

use super::digest::{plan_digest, planned_outputs, resource_diff, stack_outputs};
use super::stream::{self, Streamed};
use crate::engine::{Changes, Operation, PolicyViolation, changes_nothing, changes_summary};

/// Reads an operation's stdout: lines for people, and the change counts.
#[derive(Debug)]
pub struct Reader {
    operation: Operation,
    /// `preview --json` prints one document at the end: it is collected, then read.
    document: String,
    pub changes: Option<Changes>,
    /// A preview's: the root stack's outputs that change, and whether it creates the stack.
    pub outputs: Option<(Vec<String>, bool)>,
    /// A preview's: the root stack's outputs as it plans them.
    pub planned: Option<crate::engine::PlannedOutputs>,
    /// A preview's: what it plans, as one digest (`plan_digest`).
    pub plan_digest: Option<String>,
    /// A preview's: the resources that change, with their properties.
    pub diffs: Vec<crate::engine::ResourceDiff>,
    /// A drift check's: the resources its refresh found changed outside Pulumi (the digest's
    /// `refresh` steps).
    pub drifted: Vec<crate::engine::ResourceDiff>,
    /// Whether a preview shows each change's properties under it.
    pub show_diff: bool,
    pub result: Option<String>,
    /// The first diagnostic of severity `error` (its first line): why the operation failed.
    pub error: Option<String>,
    /// Every diagnostic of severity `error`, its whole message, each once: what `[retry]`
    /// matches (docs/formats.md, "Budgets and retries").
    pub errors: Vec<String>,
    /// A preview that streams its events (mara has every Pulumi preview and drift check
    /// stream): read into its digest.
    streamed: Option<Streamed>,
    /// What the policy packs said (`policyEvent`s).
    pub violations: Vec<PolicyViolation>,
}

impl Reader {
    pub fn new(operation: Operation) -> Reader {
        Reader {
            operation,
            document: String::new(),
            changes: None,
            outputs: None,
            planned: None,
            plan_digest: None,
            diffs: Vec::new(),
            drifted: Vec::new(),
            show_diff: false,
            result: None,
            error: None,
            errors: Vec::new(),
            streamed: None,
            violations: Vec::new(),
        }
    }

    /// The lines to show for one line of stdout.
    pub fn line(&mut self, line: &str) -> Vec<String> {
        let previews = matches!(self.operation, Operation::Preview | Operation::Drift);
        // A preview's first line an event: it streams (`stream`), else it prints its digest.
        if previews && self.streamed.is_none() && self.document.is_empty() {
            self.streamed = stream::starts(line).then(Streamed::default);
        }
        if let Some(streamed) = self.streamed.as_mut() {
            let Ok(Value::Object(event)) = serde_json::from_str::<Value>(line) else {
                return vec![line.to_string()];
            };
            streamed.event(&event);
            return match event.get("policyEvent") {
                Some(policy) => vec![self.violated(policy)],
                None => Vec::new(),
            };
        }
        if previews {
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
        if let Some(streamed) = self.streamed.take() {
            self.document = streamed.digest();
        }
        let previews = matches!(self.operation, Operation::Preview | Operation::Drift);
        if !previews || self.document.trim().is_empty() {
            return Vec::new();
        }
        let Ok(digest) = serde_json::from_str::<Value>(&self.document) else {
            return self.document.lines().map(str::to_string).collect();
        };
        let mut lines = Vec::new();
        for step in digest["steps"].as_array().into_iter().flatten() {
            let op = step["op"].as_str().unwrap_or_default();
            if op == "refresh" {
                // What the refresh found changed outside Pulumi: a refresh step that found the
                // resource as recorded is no drift.
                if !refresh_changed(step) {
                    continue;
                }
                let diff = resource_diff(step);
                lines.push(format!(
                    "drifted {}",
                    urn_name(step["urn"].as_str().unwrap_or_default())
                ));
                if self.show_diff {
                    lines.extend(diff.lines().into_iter().skip(1));
                }
                self.drifted.push(diff);
            } else if !changes_nothing(op) {
                lines.push(format!(
                    "{op} {}",
                    urn_name(step["urn"].as_str().unwrap_or_default())
                ));
                let diff = resource_diff(step);
                if self.show_diff {
                    lines.extend(diff.lines().into_iter().skip(1));
                }
                self.diffs.push(diff);
            }
        }
        for diagnostic in digest["diagnostics"].as_array().into_iter().flatten() {
            self.keep_error(diagnostic);
            lines.push(diagnostic_line(diagnostic));
        }
        let mut changes = counts(&digest["changeSummary"]);
        // What a refresh read is no change of the preview's.
        changes.remove("refresh");
        // Pulumi counts the root stack `same` when only its outputs change (its inputs do not):
        // a change of the project's all the same, counted as Terraform's output-only plan is.
        let outputs = stack_outputs(&digest);
        if !outputs.0.is_empty() && !crate::engine::has_changes(&changes) {
            changes.insert("output".into(), outputs.0.len() as u64);
        }
        lines.push(format!("Preview: {}", changes_summary(&changes)));
        self.changes = Some(changes);
        if digest["diagnostics"]
            .as_array()
            .is_none_or(|d| d.is_empty())
        {
            self.outputs = Some(outputs);
            self.planned = planned_outputs(&digest);
            self.plan_digest = Some(plan_digest(&digest));
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
        if let Some(policy) = event.get("policyEvent") {
            return vec![self.violated(policy)];
        }
        if let Some(stdout) = event.get("stdoutEvent") {
            let message =
                stream::without_directives(stdout["message"].as_str().unwrap_or_default());
            return message.lines().map(str::to_string).collect();
        }
        if let Some(pre) = event.get("resourcePreEvent") {
            let op = pre["metadata"]["op"].as_str().unwrap_or_default();
            // A replacement's parts, each a step of its own, are said by its `replace` step.
            let part = matches!(op, "create-replacement" | "delete-replaced")
                && pre["metadata"]["logical"] != true;
            if !changes_nothing(op) && !op.is_empty() && !part {
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
        // Every operation's stream ends with a cancel event, after its summary: one before the
        // summary is a cancellation.
        if event.contains_key("cancelEvent") && self.result.is_none() && self.changes.is_none() {
            return vec!["cancelled".into()];
        }
        Vec::new()
    }
}

impl Reader {
    /// Keeps a policy pack's violation; a mandatory one is why the operation failed (Pulumi
    /// says nothing else). The line that says it.
    fn violated(&mut self, event: &Value) -> String {
        let violation = stream::violation(event);
        let level = if violation.mandatory {
            "mandatory"
        } else {
            "advisory"
        };
        let line = format!(
            "policy {level}: {} ({} {})",
            violation.message, violation.pack, violation.policy
        );
        if violation.mandatory && self.error.is_none() {
            self.error = Some(format!(
                "policy pack {}: {}",
                violation.pack, violation.message
            ));
        }
        self.violations.push(violation);
        line
    }

    /// Keeps an error diagnostic's message; the first one's first line is the failure's reason.
    fn keep_error(&mut self, diagnostic: &Value) {
        if diagnostic["severity"] != "error" {
            return;
        }
        let message = diagnostic_message(diagnostic);
        let message = message.trim();
        if message.is_empty() {
            return;
        }
        if self.error.is_none() {
            let first = message.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            self.error = Some(first.trim().to_string());
        }
        if !self.errors.iter().any(|kept| kept == message) {
            self.errors.push(message.to_string());
        }
    }
}

/// A diagnostic's message without colour directives (`--color always` leaves them in the JSON)
/// or the severity's prefix (the digest writes it into the message: "error: …").
fn diagnostic_message(diagnostic: &Value) -> String {
    let severity = diagnostic["severity"].as_str().unwrap_or("info");
    let message = stream::without_directives(diagnostic["message"].as_str().unwrap_or_default());
    match message.strip_prefix(&format!("{severity}: ")) {
        Some(rest) => rest.to_string(),
        None => message,
    }
}

fn diagnostic_line(diagnostic: &Value) -> String {
    let severity = diagnostic["severity"].as_str().unwrap_or("info");
    let message = diagnostic_message(diagnostic);
    let message = message.trim_end();
    // `infoerr`: what the program wrote to its standard error, said as its output is.
    if severity == "info" || severity == "infoerr" {
        message.to_string()
    } else {
        format!("{severity}: {message}")
    }
}

/// Whether a refresh step found the resource other than recorded: properties that differ
/// (`detailedDiff`, `diffReasons`), or other outputs.
fn refresh_changed(step: &Value) -> bool {
    let said = |key: &str| match &step[key] {
        Value::Object(map) => !map.is_empty(),
        Value::Array(list) => !list.is_empty(),
        _ => false,
    };
    said("detailedDiff")
        || said("diffReasons")
        || step["oldState"]["outputs"] != step["newState"]["outputs"]
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

impl crate::engine::OutputReader for Reader {
    fn line(&mut self, line: &str) -> Vec<String> {
        Reader::line(self, line)
    }

    fn finish(&mut self) -> Vec<String> {
        Reader::finish(self)
    }

    fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    fn errors(&self) -> Vec<&str> {
        self.errors.iter().map(String::as_str).collect()
    }

    fn diffs(&self) -> Vec<crate::engine::ResourceDiff> {
        self.diffs.clone()
    }

    fn drifted(&self) -> Vec<crate::engine::ResourceDiff> {
        self.drifted.clone()
    }

    fn show_diff(&mut self, diff: bool) {
        self.show_diff = diff;
    }

    fn outputs(&self) -> Option<(Vec<String>, bool)> {
        self.outputs.clone()
    }

    fn planned_outputs(&mut self) -> Option<crate::engine::PlannedOutputs> {
        self.planned.take()
    }

    fn plan_digest(&self) -> Option<String> {
        self.plan_digest.clone()
    }

    fn plan_document(&mut self) -> Option<String> {
        // A digest that was read (the preview ended with one); its secrets are Pulumi's
        // ciphertexts, which the policies see as `[secret]` (`run::gate`).
        (self.plan_digest.is_some()).then(|| std::mem::take(&mut self.document))
    }

    fn changes(&mut self) -> Option<Changes> {
        self.changes.take()
    }

    fn policy_violations(&self) -> Vec<PolicyViolation> {
        self.violations.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(operation: Operation, lines: &[&str]) -> (Reader, Vec<String>) {
        let mut reader = Reader::new(operation);
        let mut said = Vec::new();
        for line in lines {
            said.extend(reader.line(line));
        }
        said.extend(reader.finish());
        (reader, said)
    }

    /// Every operation's stream ends with a cancel event after its summary (Pulumi's engine
    /// closes its events so): only one before the summary is a cancellation.
    #[test]
    fn a_cancel_event_after_the_summary_is_the_streams_end() {
        let summary = r#"{"sequence":1,"timestamp":1,"summaryEvent":{"maybeCorrupt":false,"durationSeconds":0,"resourceChanges":{"same":1},"isPreview":false,"result":"succeeded"}}"#;
        let cancel = r#"{"sequence":2,"timestamp":1,"cancelEvent":{}}"#;
        let (_, said) = read(Operation::Up, &[summary, cancel]);
        assert_eq!(said, ["Resources: no changes (0s)"]);
        let (_, said) = read(Operation::Up, &[cancel]);
        assert_eq!(said, ["cancelled"]);
    }

    /// `--color always` leaves colour directives in the JSON's diagnostics, and the digest writes
    /// a diagnostic's prefix into its message: the reason and the line hold neither.
    #[test]
    fn a_diagnostic_is_read_without_directives_or_its_prefix_twice() {
        let event = r#"{"sequence":0,"timestamp":1,"diagnosticEvent":{"message":"<{%reset%}>update failed: quota<{%reset%}>\n","prefix":"<{%fg 1%}>error: <{%reset%}>","color":"always","severity":"error"}}"#;
        let (reader, said) = read(Operation::Up, &[event]);
        assert_eq!(said, ["error: update failed: quota"]);
        assert_eq!(reader.error.as_deref(), Some("update failed: quota"));
        assert_eq!(reader.errors, ["update failed: quota"]);

        let digest = r#"{"diagnostics": [{"message": "error: Preview failed: no quota\n", "severity": "error"}], "changeSummary": {}}"#;
        let (reader, said) = read(Operation::Preview, &[digest]);
        assert_eq!(
            said,
            ["error: Preview failed: no quota", "Preview: no changes"]
        );
        assert_eq!(reader.error.as_deref(), Some("Preview failed: no quota"));
    }

    /// A replacement is three steps, each with its event: the logical `replace` says it once;
    /// what the program wrote to its standard error (`infoerr`) is said as its output is.
    #[test]
    fn a_replacement_is_said_once_and_the_programs_stderr_as_its_output() {
        let pre = |op: &str, logical: bool| {
            let metadata = serde_json::json!({"op": op, "urn": "urn:pulumi:dev::p::aws:s3/bucket:Bucket::b", "logical": logical});
            serde_json::json!({"sequence": 1, "timestamp": 1, "resourcePreEvent": {"metadata": metadata}}).to_string()
        };
        let stderr = r#"{"sequence":4,"timestamp":1,"diagnosticEvent":{"message":"deprecated option\n","prefix":"","color":"never","severity":"infoerr"}}"#;
        let lines = [
            pre("replace", true),
            pre("create-replacement", false),
            pre("delete-replaced", false),
            stderr.to_string(),
        ];
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let (reader, said) = read(Operation::Up, &lines);
        assert_eq!(
            said,
            ["replace aws:s3/bucket:Bucket b", "deprecated option"]
        );
        assert!(reader.error.is_none());
    }

    /// An output-only change leaves the root stack `same` in Pulumi's counts: it is counted as
    /// an output change, as Terraform's output-only plan is.
    #[test]
    fn a_change_of_the_stacks_outputs_alone_is_a_change() {
        let stack =
            |outputs: Value| serde_json::json!({"type": "pulumi:pulumi:Stack", "outputs": outputs});
        let digest = serde_json::json!({
            "steps": [{"op": "same", "urn": "urn:pulumi:dev::a::pulumi:pulumi:Stack::a-dev",
                       "oldState": stack(serde_json::json!({"url": "old", "port": 1})),
                       "newState": stack(serde_json::json!({"url": "new", "port": 1}))}],
            "changeSummary": {"same": 1}
        });
        let (reader, said) = read(Operation::Preview, &[&digest.to_string()]);
        assert_eq!(said, ["Preview: 1 output"]);
        assert!(crate::engine::has_changes(reader.changes.as_ref().unwrap()));
        assert_eq!(reader.outputs, Some((vec!["url".to_string()], false)));
    }

    /// Pulumi reads a stack reference on every run (a `read` step, counted when the stack it
    /// reads changed): no change of the project's, nor part of what its plan approves.
    #[test]
    fn a_read_step_changes_nothing() {
        let digest = serde_json::json!({
            "steps": [
                {"op": "read", "urn": "urn:pulumi:dev::b::pulumi:pulumi:StackReference::a",
                 "newState": {"type": "pulumi:pulumi:StackReference",
                              "outputs": {"outputs": {"url": "https://a"}}}},
            ],
            "changeSummary": {"read": 1, "same": 1}
        });
        let (reader, said) = read(Operation::Preview, &[&digest.to_string()]);
        assert_eq!(said, ["Preview: no changes"]);
        assert!(reader.diffs.is_empty());
        assert!(!crate::engine::has_changes(
            reader.changes.as_ref().unwrap()
        ));
        let without = serde_json::json!({"steps": [], "changeSummary": {"same": 1}});
        assert_eq!(reader.plan_digest, Some(plan_digest(&without)));
    }

    /// A resource deleted outside Pulumi: its refresh step's outputs event has no new state.
    #[test]
    fn a_resource_the_refresh_found_deleted_has_drifted() {
        let urn = "urn:pulumi:dev::p::aws:s3/bucket:Bucket::gone";
        let recorded =
            serde_json::json!({"type": "aws:s3/bucket:Bucket", "outputs": {"acl": "private"}});
        let event = |kind: &str, new: &Value| {
            let metadata =
                serde_json::json!({"op": "refresh", "urn": urn, "old": recorded, "new": new});
            serde_json::json!({"sequence": 1, "timestamp": 1, kind: {"metadata": metadata}})
                .to_string()
        };
        let pre = event("resourcePreEvent", &recorded);
        let read_back = event("resOutputsEvent", &Value::Null);
        let summary = r#"{"sequence":3,"timestamp":1,"summaryEvent":{"resourceChanges":{},"result":"succeeded"}}"#;
        let (reader, said) = read(Operation::Drift, &[&pre, &read_back, summary]);
        assert_eq!(reader.drifted.len(), 1, "{said:?}");
        assert!(said.contains(&"drifted aws:s3/bucket:Bucket gone".to_string()));
    }

    /// A secret output as Pulumi's digest (and a streamed one) holds it, `[secret]`: planned as
    /// a secret of unknown value, never as the text.
    #[test]
    fn a_secret_planned_output_is_no_value() {
        let digest = serde_json::json!({"steps": [
            {"op": "same", "urn": "urn:pulumi:dev::a::pulumi:pulumi:Stack::a-dev",
             "oldState": {"type": "pulumi:pulumi:Stack", "outputs": {"token": "[secret]"}},
             "newState": {"type": "pulumi:pulumi:Stack", "outputs": {"token": "[secret]", "url": "u"}}}
        ]});
        let planned = planned_outputs(&digest).unwrap();
        assert!(planned["token"].secret && planned["token"].value.is_none());
        assert_eq!(planned["url"].value, Some(Value::from("u")));
    }
}
