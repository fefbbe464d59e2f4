//! A preview that streams its engine events (`PULUMI_ENABLE_STREAMING_JSON_PREVIEW`, which mara
//! sets when policy packs run: the digest leaves their violations out), read back into the digest
//! Pulumi would have printed — the steps it shows (not a `same` one but the root stack's), each
//! `resourcePreEvent`'s metadata as a step (`old`/`new` as
//! `oldState`/`newState`, `diffs`, `keys`, `detailedDiff` with `diffKind` as `kind`), the outputs a
//! `resOutputsEvent` registers over its step's, diagnostics (their message without the prefix
//! the severity says), the change counts — so that a
//! streamed preview is read as a digest is (docs/commands.md, "Policies"). And the packs'
//! `policyEvent`s, in either stream.

use serde_json::{Map, Value, json};

use crate::engine::PolicyViolation;

/// The digest of a streamed preview, as its events come.
#[derive(Debug, Default)]
pub struct Streamed {
    steps: Vec<Value>,
    diagnostics: Vec<Value>,
    changes: Value,
    /// The summary's duration, in seconds (the digest's is in nanoseconds).
    seconds: Option<u64>,
}

impl Streamed {
    /// Takes one event of the stream.
    pub fn event(&mut self, event: &Map<String, Value>) {
        if let Some(pre) = event.get("resourcePreEvent") {
            if shown(&pre["metadata"]) {
                self.steps.push(step(&pre["metadata"]));
            }
        } else if let Some(outputs) = event.get("resOutputsEvent") {
            let metadata = &outputs["metadata"];
            let new = &metadata["new"]["outputs"];
            let urn = &metadata["urn"];
            if let Some(step) = self.steps.iter_mut().rev().find(|s| &s["urn"] == urn)
                && new.is_object()
                && step["newState"].is_object()
            {
                step["newState"]["outputs"] = new.clone();
            }
        } else if let Some(diagnostic) = event.get("diagnosticEvent") {
            // Its message without the prefix (`error: `), which the severity says.
            self.diagnostics.push(json!({
                "urn": diagnostic["urn"],
                "message": diagnostic["message"],
                "severity": diagnostic["severity"],
            }));
        } else if let Some(summary) = event.get("summaryEvent") {
            self.changes = summary["resourceChanges"].clone();
            self.seconds = summary["durationSeconds"].as_u64();
        }
    }

    /// The digest, as `preview --json` prints it (4-space indent, empty fields left out).
    pub fn digest(&self) -> String {
        let mut digest = Map::new();
        if !self.steps.is_empty() {
            digest.insert("steps".into(), Value::Array(self.steps.clone()));
        }
        if !self.diagnostics.is_empty() {
            digest.insert("diagnostics".into(), Value::Array(self.diagnostics.clone()));
        }
        if let Some(seconds) = self.seconds.filter(|s| *s > 0) {
            digest.insert("duration".into(), Value::from(seconds * 1_000_000_000));
        }
        if self.changes.is_object() {
            digest.insert("changeSummary".into(), self.changes.clone());
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

/// Whether the digest shows a step (`ShowPreviewDigest`): not a `same` one — unless its
/// protection changed — but the root stack's always.
fn shown(metadata: &Value) -> bool {
    let root =
        (metadata["urn"].as_str()).is_some_and(|urn| urn.contains("::pulumi:pulumi:Stack::"));
    let protection_changed = metadata["old"]["protect"] != metadata["new"]["protect"];
    metadata["op"] != "same" || protection_changed || root
}

/// A `resourcePreEvent`'s metadata as the digest's step.
fn step(metadata: &Value) -> Value {
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
    put("oldState", &metadata["old"]);
    put("newState", &metadata["new"]);
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
    Value::Object(step)
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
fn without_directives(text: &str) -> String {
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
        assert_eq!(digest["diagnostics"][0]["message"], "w\n");
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
}
