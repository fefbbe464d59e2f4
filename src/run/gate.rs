//! The policy gate of a run (docs/commands.md, "Policies"): the two inputs the workspace's
//! policies are evaluated over, and their decision over a planned run. Per project, the
//! engine's own plan as its users' policies already expect it — Terraform's `show -json`,
//! Pulumi's preview digest — with mara's context under `mara`; per deployment, the run as a
//! whole: its projects in order with what each plans, its graph, what waits and what was
//! planned with projected values, and what a destroy would leave standing on what it removes.
//! Secrets are `[secret]` in both; the plans are read in memory only.

use serde_json::{Map, Value, json};

use super::events::ProjectReport;
use super::plan::{PlannedProject, RunPlan};
use crate::engine::Operation;
use crate::policy::{Decision, Failed, Kind, Policies};

/// What every input says of the run.
#[derive(Debug, Clone, Copy)]
pub struct About<'a> {
    /// The operation the decision is for: an `up`'s, though its plans are a preview's.
    pub operation: Operation,
    pub stack: &'a str,
    pub provider: &'a str,
    pub run_id: &'a str,
    /// A run fanned out over CI jobs (`ci open`, a job's `--run`).
    pub fanned_out: bool,
}

/// A project that a destroy would leave standing on one it removes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    pub path: String,
    /// The projects the destroy removes that it depends on.
    pub depends_on: Vec<String>,
}

/// The `mara` key of every input, and the deployment input's own fields.
fn context(about: &About<'_>) -> Map<String, Value> {
    let (user, host) = crate::ledger::whoami();
    let mut context = Map::new();
    context.insert("operation".into(), about.operation.as_str().into());
    context.insert("stack".into(), about.stack.into());
    context.insert("provider".into(), about.provider.into());
    context.insert("run_id".into(), about.run_id.into());
    context.insert("who".into(), format!("{user}@{host}").into());
    context.insert("fanned_out".into(), about.fanned_out.into());
    context
}

/// A project's input: its engine's plan (an empty object without one: a command, kubectl, a
/// destroy, which plans nothing), with mara's context under `mara` — the project, its engine,
/// and the run's.
pub fn project_input(
    about: &About<'_>,
    project: &PlannedProject,
    report: Option<&ProjectReport>,
) -> Value {
    let document = (report.and_then(|r| r.document.as_deref()))
        .and_then(|text| serde_json::from_str(text).ok());
    // A Pulumi digest's secrets are their ciphertexts: the policies see `[secret]`.
    let mut input = match document.map(crate::engine::pulumi::blinded) {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    let mut mara = context(about);
    mara.insert("project".into(), project.path.clone().into());
    mara.insert("engine".into(), project.engine.as_str().into());
    input.insert("mara".into(), Value::Object(mara));
    Value::Object(input)
}

/// A property's value as a policy compares it: JSON where the diff holds JSON text, else the
/// text itself (`[secret]`).
fn property_value(text: &Option<String>) -> Value {
    match text {
        None => Value::Null,
        Some(text) => serde_json::from_str(text).unwrap_or_else(|_| Value::from(text.as_str())),
    }
}

/// What a project plans, in the deployment input: as its preview said (`report`), or, judged
/// before it runs (a destroy), `planned` and nothing more.
fn planned(project: &PlannedProject, report: Option<&ProjectReport>, plan: &RunPlan) -> Value {
    let after: Vec<&str> = (project.waits_for.iter())
        .filter_map(|&i| plan.projects.get(i).map(|p| p.path.as_str()))
        .collect();
    let Some(report) = report else {
        return json!({
            "path": project.path, "engine": project.engine.as_str(), "after": after,
            "status": "planned", "changes": null, "resources": [], "changed_outputs": null,
            "new_stack": false, "stale": [], "waits_on": [], "planned_with": null,
            "deferred": false, "inputs": {}, "projected": [],
        });
    };
    // A Terraform module's streamed plan names its resources without their values: its own
    // plan, kept for the policies, has them.
    let from_document = (report.document.as_deref()).and_then(|d| project.engine.plan_resources(d));
    let resources: Vec<Value> = (from_document.as_ref().unwrap_or(&report.diff).iter())
        .map(|d| {
            let properties: Vec<Value> = (d.properties.iter())
                .map(|p| {
                    json!({"path": p.path, "kind": p.kind,
                           "old": property_value(&p.old), "new": property_value(&p.new)})
                })
                .collect();
            json!({"resource": d.resource, "action": d.op, "properties": properties})
        })
        .collect();
    let inputs: Map<String, Value> = (report.inputs_taken.iter())
        .map(|(name, taken)| {
            let value = match taken.starts_with("sha256:") {
                true => Value::from("[secret]"),
                false => property_value(&Some(taken.clone())),
            };
            (name.clone(), value)
        })
        .collect();
    let stale: Vec<Value> = (report.stale.iter())
        .map(|s| json!({"reads": s.reads, "outputs": s.outputs}))
        .collect();
    json!({
        "path": project.path,
        "engine": project.engine.as_str(),
        "after": after,
        "status": report.status.as_str(),
        "changes": report.changes,
        "resources": resources,
        "changed_outputs": report.changed_outputs,
        "new_stack": report.new_stack,
        "stale": stale,
        "waits_on": report.waits_on,
        "planned_with": report.planned_with,
        "deferred": report.planned_with == Some(super::events::PlannedWith::Deferred),
        "inputs": inputs,
        "projected": report.projected,
    })
}

/// The deployment's input: the run's context, its projects in the plan's order with what each
/// plans, and what a destroy would orphan.
pub fn deployment_input(
    about: &About<'_>,
    plan: &RunPlan,
    reports: Option<&[ProjectReport]>,
    orphans: &[Orphan],
) -> Value {
    let mut input = context(about);
    let projects: Vec<Value> = (plan.projects.iter().enumerate())
        .map(|(i, project)| planned(project, reports.and_then(|r| r.get(i)), plan))
        .collect();
    input.insert("projects".into(), Value::Array(projects));
    let orphans: Vec<Value> = (orphans.iter())
        .map(|o| json!({"path": o.path, "depends_on": o.depends_on}))
        .collect();
    input.insert("orphans".into(), Value::Array(orphans));
    Value::Object(input)
}

/// Which packages judge a run, and what a destroy would orphan.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// Each project by the per-project packages: not `ci open`'s, whose jobs judge their own
    /// plans.
    pub projects: bool,
    /// The run by the deployment packages: not a job of a fanned-out run's, which holds only
    /// its own projects.
    pub deployment: bool,
    pub orphans: &'a [Orphan],
}

/// What the policies decide of a planned run — previewed (`reports`, where each project's
/// messages are also put), or judged before it runs (a destroy, `ci open`) —, by the packages
/// `scope` names. Every message, denials first.
pub fn decide(
    policies: &mut Policies,
    about: &About<'_>,
    (plan, mut reports): (&RunPlan, Option<&mut [ProjectReport]>),
    scope: Scope<'_>,
) -> Result<Decision, Failed> {
    let mut decision = Decision::default();
    if scope.projects && policies.has(Kind::Project) {
        for (i, project) in plan.projects.iter().enumerate() {
            let mut report = reports.as_deref_mut().and_then(|r| r.get_mut(i));
            // A preview that failed planned nothing to judge: the run fails on it already.
            if report.as_ref().is_some_and(|r| !r.status.is_success()) {
                continue;
            }
            let input = project_input(about, project, report.as_deref());
            let said = policies.evaluate(Kind::Project, &input, Some(&project.path))?;
            // Beside what the engine's own policies said of it (Pulumi's policy packs).
            if let Some(report) = report.as_mut() {
                report.policy.retain(crate::policy::Message::is_pack);
                report.policy.extend(said.messages.iter().cloned());
            }
            decision.messages.extend(said.messages);
        }
    }
    if scope.deployment && policies.has(Kind::Deployment) {
        let input = deployment_input(about, plan, reports.as_deref(), scope.orphans);
        decision.extend(policies.evaluate(Kind::Deployment, &input, None)?);
    }
    decision.messages.sort();
    Ok(decision)
}
