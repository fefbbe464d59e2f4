//! What a person approved is what is applied (docs/commands.md, "Saved plans"): the plans a
//! preview saved (`preview --save-plans DIR`, or the preview an interactive `up` showed), and
//! what each project's plan took — its inputs, its changes — kept in a manifest; and, as a
//! project's turn comes in `up`, whether its approved plan still holds.
//!
//! Pure: the files are read and written by the command, the steps run by the project's task.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::{Changes, EngineKind, ResourceDiff};

/// The manifest's file in a plans directory.
pub const MANIFEST: &str = "mara-plans.json";

/// What a preview planned, for `up --plans` (docs/commands.md, "Saved plans").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub version: u32,
    pub stack: String,
    pub provider: String,
    /// The preview's run.
    pub run_id: String,
    pub projects: Vec<Planned>,
}

/// One project as its preview planned it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Planned {
    pub path: String,
    pub engine: EngineKind,
    /// Its saved plan (Terraform), relative to the plans directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// For a project with inputs: which values its plan took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_with: Option<PlannedWith>,
    /// Its inputs as its plan took them, by name: the value as JSON, a secret's as its SHA-256
    /// (`sha256:…`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inputs: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<Changes>,
    /// The resources it changes: `op resource`, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// Not previewed (deferred, or waiting on what is not deployed yet): planned only as its
    /// turn comes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub waited: bool,
    /// What its preview planned, as one digest (a Pulumi preview's; a Terraform plan's is read
    /// from its file when it is compared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

impl Planned {
    /// Not previewed: planned only as its turn comes.
    pub fn deferred(&self) -> bool {
        self.waited || self.planned_with == Some(PlannedWith::Deferred)
    }
}

/// The resources a plan changes, as the approval compares them: `op resource`, sorted.
pub fn resources(diff: &[ResourceDiff]) -> Vec<String> {
    let mut resources: Vec<String> = (diff.iter())
        .filter(|d| d.op != "same" && d.op != "read")
        .map(|d| format!("{} {}", d.op, d.resource))
        .collect();
    resources.sort();
    resources
}

/// A value as the manifest keeps what an input took: JSON, or a secret's SHA-256.
pub fn fingerprint(value: &str, secret: bool) -> String {
    match secret {
        false => value.to_string(),
        true => crate::engine::sha256(value),
    }
}

pub use crate::status::PlannedWith;

/// How a project's approved plan went in `up` (the report's and the ledger's `approval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Held {
    /// Its saved plan applied, its inputs as planned.
    AsApproved,
    /// Planned again (its inputs differ from those approved), and its new plan does what the
    /// approved one did.
    Replanned,
    /// Planned again, its new plan not the approved one, and applied all the same: `--replan`,
    /// or a yes when asked again.
    Changed,
    /// Its approved plan no longer holds: not applied, nor what follows it.
    Refused,
}

impl Held {
    pub fn as_str(self) -> &'static str {
        match self {
            Held::AsApproved => "applied as approved",
            Held::Replanned => "replanned",
            Held::Changed => "applied as changed",
            Held::Refused => "refused",
        }
    }

    pub fn parse(text: &str) -> Option<Held> {
        [
            Held::AsApproved,
            Held::Replanned,
            Held::Changed,
            Held::Refused,
        ]
        .into_iter()
        .find(|h| h.as_str() == text)
    }
}

/// Why a plan made again as the project's turn came does not hold: its changes differ from the
/// approved ones, or the same changes set other values (`digests`: the approved plan's and the
/// new one's, where both are known). `None`: it holds.
pub fn differs(
    approved: &Planned,
    changes: Option<&Changes>,
    diff: &[ResourceDiff],
    digests: Option<(&str, &str)>,
) -> Option<String> {
    if approved.deferred() {
        return Some("it was not previewed (its inputs were known only after apply)".into());
    }
    let now = resources(diff);
    let counts = |c: Option<&Changes>| c.map(crate::engine::changes_summary);
    let same_counts = counts(changes) == counts(approved.changes.as_ref());
    if now == approved.resources && same_counts {
        return match digests {
            Some((was, is)) if was != is => Some(
                "the same resources change, but to other values than the approved plan's".into(),
            ),
            _ => None,
        };
    }
    let was = counts(approved.changes.as_ref()).unwrap_or_else(|| "no changes".into());
    let is = counts(changes).unwrap_or_else(|| "no changes".into());
    let added: Vec<&String> = now
        .iter()
        .filter(|r| !approved.resources.contains(r))
        .collect();
    let gone: Vec<&String> = (approved.resources.iter())
        .filter(|r| !now.contains(r))
        .collect();
    let mut said = format!("its changes are now {is}, approved {was}");
    if !added.is_empty() {
        let added: Vec<&str> = added.iter().map(|r| r.as_str()).collect();
        said.push_str(&format!("; new: {}", added.join(", ")));
    }
    if !gone.is_empty() {
        let gone: Vec<&str> = gone.iter().map(|r| r.as_str()).collect();
        said.push_str(&format!("; no longer: {}", gone.join(", ")));
    }
    Some(said)
}

/// The inputs whose values differ from those the approved plan took, by source name.
pub fn inputs_differ(approved: &Planned, now: &BTreeMap<String, String>) -> Vec<String> {
    let names = approved.inputs.keys().chain(now.keys());
    let mut differ: Vec<String> = names
        .filter(|name| approved.inputs.get(*name) != now.get(*name))
        .cloned()
        .collect();
    differ.sort();
    differ.dedup();
    differ
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diff(op: &str, resource: &str) -> ResourceDiff {
        ResourceDiff {
            op: op.into(),
            resource: resource.into(),
            properties: Vec::new(),
        }
    }

    #[test]
    fn a_new_plan_holds_when_its_changes_are_the_approved_ones() {
        let changes: Changes = [("create".to_string(), 1), ("update".to_string(), 1)].into();
        let approved = Planned {
            path: "app".into(),
            engine: EngineKind::Terraform,
            plan: Some("app.tfplan".into()),
            planned_with: Some(PlannedWith::Projected),
            inputs: [("subnet_id".to_string(), "\"s-1\"".to_string())].into(),
            changes: Some(changes.clone()),
            resources: resources(&[
                diff("update", "aws_instance.a"),
                diff("create", "aws_eip.b"),
            ]),
            waited: false,
            digest: None,
        };
        let same = [
            diff("create", "aws_eip.b"),
            diff("update", "aws_instance.a"),
        ];
        assert_eq!(differs(&approved, Some(&changes), &same, None), None);
        let digests = |was, is| Some((was, is));
        assert_eq!(
            differs(
                &approved,
                Some(&changes),
                &same,
                digests("sha256:a", "sha256:a")
            ),
            None
        );
        assert_eq!(
            differs(
                &approved,
                Some(&changes),
                &same,
                digests("sha256:a", "sha256:b")
            )
            .unwrap(),
            "the same resources change, but to other values than the approved plan's"
        );
        let more: Changes = [("create".to_string(), 1), ("replace".to_string(), 1)].into();
        let other = [
            diff("create", "aws_eip.b"),
            diff("replace", "aws_instance.a"),
        ];
        assert_eq!(
            differs(&approved, Some(&more), &other, None).unwrap(),
            "its changes are now +1 ±1, approved +1 ~1; new: replace aws_instance.a; no longer: update aws_instance.a"
        );
        let now = [("subnet_id".to_string(), "\"s-2\"".to_string())].into();
        assert_eq!(inputs_differ(&approved, &now), ["subnet_id"]);
        assert!(inputs_differ(&approved, &approved.inputs.clone()).is_empty());
        assert!(fingerprint("hunter2", true).starts_with("sha256:"));
        assert!(!fingerprint("hunter2", true).contains("hunter2"));
        let deferred = Planned {
            planned_with: Some(PlannedWith::Deferred),
            changes: None,
            ..approved
        };
        assert!(differs(&deferred, Some(&changes), &same, None).is_some());
    }
}
