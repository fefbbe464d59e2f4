//! A preview that streams its engine events (`PULUMI_ENABLE_STREAMING_JSON_PREVIEW`, which mara
//! sets for every preview and drift check: the digest leaves the packs' violations out, holds a
//! refresh step as recorded and may hold the stack's old outputs), read back into the digest
//! Pulumi would have printed (`ShowPreviewDigest`) with what the outputs events add, so that a
//! streamed preview is read as a digest is (docs/commands.md, "Pulumi's own policy packs"):
//!
//! - the steps the digest shows — not a `same` one (unless its protection changed) but the root
//!   stack's always, not a replacement's parts unless logical — each `resourcePreEvent`'s metadata
//!   (`old`/`new` as `oldState`/`newState`, `diffs`, `keys`, `detailedDiff` with `diffKind` as
//!   `kind`), a secret as `[secret]`; what a `resOutputsEvent` says over it (a refresh step's
//!   state and diff come there, the root stack's outputs too);
//! - the diagnostics it keeps: not an ephemeral or debug one, each as `prefix` + `message`
//!   without colour directives, and the program's output (`stdoutEvent`) as `info`;
//! - the configuration (`preludeEvent`), the counts, `maybeCorrupt` and the duration (to the
//!   second) of the summary.
//!
//! And the packs' `policyEvent`s, in either stream.

use serde_json::{Map, Value, json};

use super::digest::{blinded, is_root_urn};
use crate::engine::PolicyViolation;

/// The digest of a streamed preview, as its events come.
#[derive(Debug, Default)]
pub struct Streamed {
    digest: Map<String, Value>,
    steps: Vec<Value>,
    diagnostics: Vec<Value>,
}

impl Streamed {
    /// Takes one event of the stream.
    pub fn event(&mut self, event: &Map<String, Value>) {
        if let Some(prelude) = event.get("preludeEvent") {
            self.keep("config", &prelude["config"]);
        } else if let Some(pre) = event.get("resourcePreEvent") {
            if shown(&pre["metadata"]) {
                self.steps.push(step(&pre["metadata"]));
            }
        } else if let Some(outputs) = event.get("resOutputsEvent") {
            self.outputs(&outputs["metadata"]);
        } else if let Some(diagnostic) = event.get("diagnosticEvent") {
            let kept = diagnostic["ephemeral"] != true && diagnostic["severity"] != "debug";
            if kept {
                let text = |key: &str| diagnostic[key].as_str().unwrap_or_default().to_string();
                let message = without_directives(&(text("prefix") + &text("message")));
                let urn = diagnostic
                    .get("urn")
                    .filter(|u| u.as_str().is_some_and(|u| !u.is_empty()));
                let mut kept = json!({"message": message, "severity": diagnostic["severity"]});
                if let Some(urn) = urn {
                    kept["urn"] = urn.clone();
                }
                self.diagnostics.push(kept);
            }
        } else if let Some(stdout) = event.get("stdoutEvent") {
            let message = without_directives(stdout["message"].as_str().unwrap_or_default());
            (self.diagnostics).push(json!({"message": message, "severity": "info"}));
        } else if let Some(summary) = event.get("summaryEvent") {
            self.keep("changeSummary", &summary["resourceChanges"]);
            if summary["maybeCorrupt"] == true {
                self.keep("maybeCorrupt", &Value::Bool(true));
            }
            if let Some(seconds) = summary["durationSeconds"].as_u64().filter(|s| *s > 0) {
                self.keep("duration", &Value::from(seconds * 1_000_000_000));
            }
        }
    }

    fn keep(&mut self, key: &str, value: &Value) {
        if !value.is_null() {
            self.digest.insert(key.to_string(), value.clone());
        }
    }

    /// What a `resOutputsEvent` says of its step: a refresh step's state as the refresh read it
    /// and its diff (its `resourcePreEvent` holds the recorded state); another's outputs (the
    /// root stack's, registered at its end).
    fn outputs(&mut self, metadata: &Value) {
        let urn = &metadata["urn"];
        let Some(step) = self.steps.iter_mut().rev().find(|s| &s["urn"] == urn) else {
            return;
        };
        let refreshed = step["op"] == "refresh" && metadata["op"] == "refresh";
        let new = &metadata["new"];
        // A resource the refresh found deleted has no new state.
        if refreshed && (new.is_object() || new.is_null()) {
            let read = step_of(metadata);
            for key in ["newState", "diffReasons", "detailedDiff"] {
                match read.get(key) {
                    Some(value) => step[key] = value.clone(),
                    None => _ = step.as_object_mut().map(|s| s.remove(key)),
                }
            }
        } else if new["outputs"].is_object() && step["newState"].is_object() {
            step["newState"]["outputs"] = blinded(new["outputs"].clone());
        }
    }

    /// The digest, as `preview --json` prints it (4-space indent, empty fields left out).
    pub fn digest(&self) -> String {
        let mut digest = self.digest.clone();
        if !self.steps.is_empty() {
            digest.insert("steps".into(), Value::Array(self.steps.clone()));
        }
        if !self.diagnostics.is_empty() {
            digest.insert("diagnostics".into(), Value::Array(self.diagnostics.clone()));
        }
        let mut text = Vec::new();
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut serializer = serde_json::Serializer::with_formatter(&mut text, formatter);
        serde::Serialize::serialize(&Value::Object(digest), &mut serializer).expect("JSON");
        String::from_utf8(text).expect("JSON is UTF-8")
    }
}

/// Whether a preview's first line is an engine event (`{"sequence":0,…}` on one line), not the
/// first line of a digest (`{`).
pub fn starts(line: &str) -> bool {
    line.starts_with("{\"sequence\"")
        || serde_json::from_str::<Value>(line).is_ok_and(|v| v.get("sequence").is_some())
}

/// Whether the digest shows a step (`ShowPreviewDigest`'s `shouldShow`, in JSON mode): not a
/// `same` one unless its protection changed, nor a replacement's part that is not logical; the
/// root stack's always.
fn shown(metadata: &Value) -> bool {
    let root = is_root_urn(&metadata["urn"]);
    let op = metadata["op"].as_str().unwrap_or_default();
    let protection_changed = metadata["old"]["protect"] != metadata["new"]["protect"];
    let replacement = REPLACEMENT_OPS.contains(&op) && metadata["logical"] != true;
    root || (op != "same" || protection_changed) && !replacement
}

/// The ops of a replacement (`deploy.IsReplacementStep`).
const REPLACEMENT_OPS: &[&str] = &[
    "replace",
    "create-replacement",
    "delete-replaced",
    "read-replacement",
    "discard-replaced",
    "remove-pending-replace",
    "import-replacement",
];

/// A `resourcePreEvent`'s metadata as the digest's step.
fn step(metadata: &Value) -> Value {
    Value::Object(step_of(metadata))
}

fn step_of(metadata: &Value) -> Map<String, Value> {
    let mut step = Map::new();
    let mut put = |key: &str, value: &Value| {
        let empty = match value {
            Value::Null => true,
            Value::Array(items) => items.is_empty(),
            Value::Object(map) => map.is_empty() && key != "detailedDiff",
            Value::String(text) => text.is_empty(),
            _ => false,
        };
        if !empty {
            step.insert(key.to_string(), value.clone());
        }
    };
    put("op", &metadata["op"]);
    put("urn", &metadata["urn"]);
    put("provider", &metadata["provider"]);
    put("oldState", &state(&metadata["old"]));
    put("newState", &state(&metadata["new"]));
    put("diffReasons", &metadata["diffs"]);
    put("replaceReasons", &metadata["keys"]);
    if let Some(detailed) = metadata["detailedDiff"].as_object() {
        let detailed: Map<String, Value> = (detailed.iter())
            .map(|(path, diff)| {
                let diff = json!({"kind": diff["diffKind"], "inputDiff": diff["inputDiff"]});
                (path.clone(), diff)
            })
            .collect();
        put("detailedDiff", &Value::Object(detailed));
    }
    step
}

/// A state of an event as the digest writes it: each secret (an object with Pulumi's secret
/// signature, its ciphertext blinded) as `[secret]`.
fn state(state: &Value) -> Value {
    let mut state = state.clone();
    for key in ["inputs", "outputs"] {
        if let Some(value) = state.get_mut(key) {
            *value = blinded(value.take());
        }
    }
    state
}

/// A `policyEvent` as the violation it reports: its message without Pulumi's colour directives
/// (`<{%reset%}>`, the event's colour being `raw`).
pub fn violation(event: &Value) -> PolicyViolation {
    let text = |key: &str| event[key].as_str().unwrap_or_default().to_string();
    PolicyViolation {
        pack: text("policyPackName"),
        version: text("policyPackVersion"),
        policy: text("policyName"),
        resource: text("resourceUrn"),
        message: without_directives(&text("message")).trim().to_string(),
        mandatory: event["enforcementLevel"] == "mandatory",
    }
}

/// `text` without Pulumi's colour directives (`<{%fg 1%}>`, `<{%reset%}>`).
pub(super) fn without_directives(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<{%") {
        plain.push_str(&rest[..start]);
        match rest[start..].find("%}>") {
            Some(end) => rest = &rest[start + end + 3..],
            None => {
                rest = &rest[start..];
                break;
            }
        }
    }
    plain.push_str(rest);
    plain
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_event_is_read_without_its_directives() {
        let event = json!({"resourceUrn": "urn:pulumi:dev::b::pulumi:pulumi:StackReference::a",
            "message": "<{%reset%}>a reads proj-a<{%reset%}>\n", "color": "raw",
            "policyName": "deny_cross_project", "policyPackName": "refs",
            "policyPackVersion": "1.2.0", "enforcementLevel": "mandatory"});
        let v = violation(&event);
        assert_eq!(v.message, "a reads proj-a");
        assert!(v.mandatory);
        assert_eq!(
            (v.pack.as_str(), v.policy.as_str()),
            ("refs", "deny_cross_project")
        );
        assert_eq!(without_directives("<{%fg 1%}>x<{%reset"), "x<{%reset");
        let advisory = violation(&json!({"enforcementLevel": "advisory", "message": "w"}));
        assert!(!advisory.mandatory);
    }

    #[test]
    fn a_streamed_preview_reads_back_as_its_digest() {
        let mut streamed = Streamed::default();
        let events = [
            json!({"sequence": 0, "preludeEvent": {"config": {}}}),
            json!({"sequence": 1, "resourcePreEvent": {"planning": true, "metadata": {
                "op": "update", "urn": "urn:pulumi:dev::a::pulumi:pulumi:Stack::a-dev",
                "type": "pulumi:pulumi:Stack", "provider": "",
                "old": {"type": "pulumi:pulumi:Stack", "outputs": {"n": 1}},
                "new": {"type": "pulumi:pulumi:Stack", "outputs": {}},
                "diffs": ["n"], "detailedDiff": {"outputs.n": {"diffKind": "update", "inputDiff": false}}}}}),
            json!({"sequence": 2, "resOutputsEvent": {"planning": true, "metadata": {
                "op": "update", "urn": "urn:pulumi:dev::a::pulumi:pulumi:Stack::a-dev",
                "new": {"type": "pulumi:pulumi:Stack", "outputs": {"n": 2}}}}}),
            json!({"sequence": 3, "diagnosticEvent": {"prefix": "warning: ", "message": "w\n", "severity": "warning"}}),
            json!({"sequence": 4, "summaryEvent": {"resourceChanges": {"update": 1}, "isPreview": true}}),
        ];
        let same =
            |urn: &str| json!({"resourcePreEvent": {"metadata": {"op": "same", "urn": urn}}});
        streamed.event(
            same("urn:pulumi:dev::a::pulumi:pulumi:StackReference::k")
                .as_object()
                .unwrap(),
        );
        for event in &events {
            streamed.event(event.as_object().unwrap());
        }
        streamed.event(
            same("urn:pulumi:dev::b::pulumi:pulumi:Stack::b-dev")
                .as_object()
                .unwrap(),
        );
        let digest: Value = serde_json::from_str(&streamed.digest()).unwrap();
        let step = &digest["steps"][0];
        assert_eq!(step["op"], "update");
        assert_eq!(step["oldState"]["outputs"]["n"], 1);
        assert_eq!(step["newState"]["outputs"]["n"], 2);
        assert_eq!(step["detailedDiff"]["outputs.n"]["kind"], "update");
        assert!(step.get("provider").is_none());
        assert_eq!(digest["diagnostics"][0]["message"], "warning: w\n");
        assert_eq!(digest["changeSummary"]["update"], 1);
        let ops: Vec<&str> = (digest["steps"].as_array().unwrap().iter())
            .map(|s| s["op"].as_str().unwrap())
            .collect();
        assert_eq!(
            ops,
            ["update", "same"],
            "the root stack's step is shown, same or not"
        );
    }

    /// What the digest leaves out is left out of the stream's: debug and ephemeral diagnostics,
    /// a replacement's parts; the program's output is an `info` diagnostic; colour directives go;
    /// a refresh step's state and diff come with its outputs; secrets are `[secret]`.
    #[test]
    fn a_streamed_preview_keeps_what_the_digest_keeps() {
        let mut streamed = Streamed::default();
        let urn = "urn:pulumi:dev::a::aws:s3/bucket:Bucket::b";
        let sig = "4dabf18193072939515e22adb298388d";
        let events = [
            json!({"preludeEvent": {"config": {"a:region": "eu"}}}),
            json!({"diagnosticEvent": {"message": "noise", "severity": "debug"}}),
            json!({"diagnosticEvent": {"message": "tick", "severity": "info", "ephemeral": true}}),
            json!({"diagnosticEvent": {"prefix": "<{%fg 1%}>error: <{%reset%}>", "message": "bad\n", "severity": "error"}}),
            json!({"stdoutEvent": {"message": "<{%bold%}>hello<{%reset%}>\n"}}),
            json!({"resourcePreEvent": {"metadata": {"op": "replace", "urn": urn, "logical": true,
                "new": {"inputs": {"key": {sig: "1b47061264138c4ac30d75fd1eb44270", "ciphertext": "[secret]"}}}}}}),
            json!({"resourcePreEvent": {"metadata": {"op": "create-replacement", "urn": urn}}}),
            json!({"resourcePreEvent": {"metadata": {"op": "delete-replaced", "urn": urn}}}),
            json!({"resourcePreEvent": {"metadata": {"op": "refresh", "urn": "urn:pulumi:dev::a::x:y:Z::z",
                "old": {"outputs": {"n": 1}}, "new": {"outputs": {"n": 1}}}}}),
            json!({"resOutputsEvent": {"metadata": {"op": "refresh", "urn": "urn:pulumi:dev::a::x:y:Z::z",
                "old": {"outputs": {"n": 1}}, "new": {"outputs": {"n": 2}}, "diffs": ["n"],
                "detailedDiff": {"n": {"diffKind": "update", "inputDiff": false}}}}}),
            json!({"summaryEvent": {"resourceChanges": {"replace": 1}, "maybeCorrupt": true}}),
        ];
        for event in &events {
            streamed.event(event.as_object().unwrap());
        }
        let digest: Value = serde_json::from_str(&streamed.digest()).unwrap();
        assert_eq!(digest["config"]["a:region"], "eu");
        assert_eq!(digest["maybeCorrupt"], true);
        let said: Vec<(&str, &str)> = (digest["diagnostics"].as_array().unwrap().iter())
            .map(|d| {
                (
                    d["severity"].as_str().unwrap(),
                    d["message"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(said, [("error", "error: bad\n"), ("info", "hello\n")]);
        let steps = digest["steps"].as_array().unwrap();
        let ops: Vec<&str> = steps.iter().map(|s| s["op"].as_str().unwrap()).collect();
        assert_eq!(ops, ["replace", "refresh"]);
        assert_eq!(steps[0]["newState"]["inputs"]["key"], "[secret]");
        assert_eq!(steps[1]["newState"]["outputs"]["n"], 2);
        assert_eq!(steps[1]["diffReasons"], json!(["n"]));
        assert_eq!(steps[1]["detailedDiff"]["n"]["kind"], "update");
    }
}
