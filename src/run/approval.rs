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

/// The manifest's version: 2 keeps what each plan was made against (its configuration, code and
/// state), which `up --plans` checks before it applies anything.
pub const VERSION: u32 = 2;

/// What a preview planned, for `up --plans` (docs/commands.md, "Saved plans").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub version: u32,
    pub stack: String,
    pub provider: String,
    /// The preview's run.
    pub run_id: String,
    pub projects: Vec<Planned>,
    /// The workspace's policies that judged these plans, and passed them: their digest
    /// (`policy::Policies::digest`). `up --plans` applies them only under the same policies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judged_by: Option<String>,
}

/// One project as its preview planned it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Planned {
    pub path: String,
    pub engine: EngineKind,
    /// Its saved plan (a Terraform module's; a Pulumi project's update plan, with `[pulumi]
    /// update_plans`), relative to the plans directory.
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
    /// The state its saved plan was made against (a Terraform module's lineage and serial).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<crate::engine::StateVersion>,
    /// Its configuration and code as it was planned.
    #[serde(flatten)]
    pub against: Against,
}

/// What a project is planned against besides its inputs and state: the shared configuration's
/// keys of its namespace (`engine::config_namespace`), each value as text (a secret's as
/// `secret:sha256:…`, the digest of what the file holds), and its code (`fingerprint::code`:
/// its files and its entry in the provider, not the shared configuration).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Against {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

/// How a secret value of the configuration is kept: its digest, marked.
const SECRET_SETTING: &str = "secret:";

impl Against {
    /// The keys of `namespace` among the configuration's `values`, as kept.
    pub fn config_of(
        values: &serde_json::Map<String, serde_json::Value>,
        namespace: &str,
    ) -> BTreeMap<String, String> {
        let prefix = format!("{namespace}:");
        (values.iter())
            .filter(|(key, _)| key.starts_with(&prefix))
            .map(|(key, value)| {
                let text = match value {
                    serde_json::Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                let kept = match crate::engine::pulumi::is_secure(value) {
                    true => format!("{SECRET_SETTING}{}", crate::engine::sha256(&text)),
                    false => text,
                };
                (key.clone(), kept)
            })
            .collect()
    }
}

/// A kept value as people read it: a secret's as `[secret]`, none as `(none)`.
fn shown(value: Option<&String>) -> String {
    match value {
        None => "(none)".to_string(),
        Some(v) if v.starts_with(SECRET_SETTING) || v.starts_with("sha256:") => "[secret]".into(),
        Some(v) => v.clone(),
    }
}

/// `key old → new` for each key whose value differs between `was` and `is`, sorted.
fn changed_values(was: &BTreeMap<String, String>, is: &BTreeMap<String, String>) -> Vec<String> {
    let mut keys: Vec<&String> = was.keys().chain(is.keys()).collect();
    keys.sort();
    keys.dedup();
    (keys.into_iter())
        .filter(|key| was.get(*key) != is.get(*key))
        .map(|key| format!("{key} {} → {}", shown(was.get(key)), shown(is.get(key))))
        .collect()
}

/// What a project's approved plan was made against, as it is now: what `still_holds` compares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Now {
    pub against: Against,
    /// Its inputs whose upstreams the run does not apply, as they are now (by name, kept as
    /// `fingerprint` keeps them); the others are known only as the run goes.
    pub inputs: BTreeMap<String, String>,
    /// Its module's state, where it was read.
    pub state: Option<crate::engine::StateVersion>,
}

/// Why `approved` cannot be applied as it is now (`now`), each said; empty when it can.
/// Checked before anything of the run is applied: a deferred project (never previewed: refused
/// unless `replan` lets a plan made as its turn comes apply), its namespace's configuration,
/// its code, its inputs from outside the run, and its module's state.
pub fn still_holds(approved: &Planned, now: &Now, replan: bool) -> Vec<String> {
    let mut why = Vec::new();
    if approved.deferred() && !replan {
        why.push("it was not previewed (it waited on values known only once applied): its plan can be made only as its turn comes, and nobody approved that plan (`--replan` applies it)".to_string());
    }
    let config = changed_values(&approved.against.config, &now.against.config);
    if !config.is_empty() {
        why.push(format!(
            "the configuration changed since it was planned: {}",
            config.join(", ")
        ));
    }
    if approved.against.code.is_some() && approved.against.code != now.against.code {
        why.push(
            "its code changed since it was planned (its files, or its entry in the provider)"
                .into(),
        );
    }
    let outside: BTreeMap<String, String> = (approved.inputs.iter())
        .filter(|(name, _)| now.inputs.contains_key(*name))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    let inputs = changed_values(&outside, &now.inputs);
    if !inputs.is_empty() && !approved.deferred() {
        why.push(format!(
            "its inputs changed since it was planned: {}",
            inputs.join(", ")
        ));
    }
    if let (Some(was), Some(is)) = (&approved.state, &now.state)
        && was != is
    {
        let moved = match (&was.lineage, &is.lineage) {
            (Some(a), Some(b)) if a == b => format!("serial {}, now {}", was.serial, is.serial),
            _ => format!("{was}, now {is}"),
        };
        why.push(format!(
            "its state changed since it was planned ({moved}): another apply, or this plan applied already"
        ));
    }
    why
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
            engine: EngineKind::named("terraform").unwrap(),
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
            state: None,
            against: Against::default(),
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

    #[test]
    fn what_a_plan_was_made_against_is_checked_each_change_said() {
        use crate::engine::StateVersion;
        let values: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
            r#"{"a:n": "2", "a:list": [1, 2], "a:pw": {"secure": "v1:abc"}, "b:n": "9"}"#,
        )
        .unwrap();
        let config = Against::config_of(&values, "a");
        assert_eq!(config.len(), 3, "{config:?}: only its namespace");
        assert_eq!(config["a:list"], "[1,2]");
        assert!(config["a:pw"].starts_with("secret:sha256:"));
        assert!(!config["a:pw"].contains("abc"));
        let state = |serial| StateVersion {
            lineage: Some("L1".into()),
            serial,
        };
        let approved = Planned {
            path: "a".into(),
            engine: EngineKind::named("terraform").unwrap(),
            plan: Some("a.tfplan".into()),
            planned_with: None,
            inputs: [("up".to_string(), "x".to_string())].into(),
            changes: None,
            resources: Vec::new(),
            waited: false,
            digest: None,
            state: Some(state(3)),
            against: Against {
                config: config.clone(),
                code: Some("sha256:c1".into()),
            },
        };
        let now = Now {
            against: approved.against.clone(),
            inputs: approved.inputs.clone(),
            state: Some(state(3)),
        };
        assert!(still_holds(&approved, &now, false).is_empty());
        // Inputs whose upstreams the run applies are not known yet: not compared.
        let later = Now {
            inputs: Default::default(),
            ..now.clone()
        };
        assert!(still_holds(&approved, &later, false).is_empty());
        let mut moved = values.clone();
        moved.insert("a:n".into(), "3".into());
        moved.insert("a:pw".into(), serde_json::json!({"secure": "v1:def"}));
        moved.remove("a:list");
        let changed = Now {
            against: Against {
                config: Against::config_of(&moved, "a"),
                code: Some("sha256:c2".into()),
            },
            inputs: [("up".to_string(), "y".to_string())].into(),
            state: Some(state(4)),
        };
        assert_eq!(
            still_holds(&approved, &changed, true),
            [
                "the configuration changed since it was planned: a:list [1,2] → (none), a:n 2 → 3, a:pw [secret] → [secret]",
                "its code changed since it was planned (its files, or its entry in the provider)",
                "its inputs changed since it was planned: up x → y",
                "its state changed since it was planned (serial 3, now 4): another apply, or this plan applied already",
            ]
        );
        let other = Now {
            state: Some(StateVersion {
                lineage: None,
                serial: 0,
            }),
            ..now.clone()
        };
        assert_eq!(
            still_holds(&approved, &other, false),
            [
                "its state changed since it was planned (serial 3 of lineage L1, now no state): another apply, or this plan applied already"
            ]
        );
        // Never previewed: refused unless --replan lets the plan made as its turn comes apply.
        let deferred = Planned {
            waited: true,
            ..approved
        };
        assert_eq!(still_holds(&deferred, &now, false).len(), 1);
        assert!(still_holds(&deferred, &now, true).is_empty());
    }
}
