//! Where the projects' state is, with `state = "ledger"` (docs/commands.md, "State in the
//! ledger"): a project whose state is still in files beside it would start anew in the ledger's
//! server, and deploy everything again beside what its old state holds.

use std::collections::BTreeMap;

use super::Checks;
use crate::graph::Plan;
use crate::workspace::Workspace;
use crate::workspace::mara_toml::StatePlace;

/// Where `state` keeps the projects' state, checked without reaching the ledger: a ledger server
/// for `"ledger"`, and said when the environment's `PULUMI_BACKEND_URL` wins over it.
pub fn keeping(
    checks: &mut Checks,
    workspace: &Workspace,
    process: &BTreeMap<String, String>,
    env: &BTreeMap<String, String>,
) {
    if !matches!(workspace.settings.state, StatePlace::Ledger(_)) {
        return;
    }
    let place = match crate::ledger::place(workspace, process) {
        Ok(place) => place,
        Err(error) => return checks.fail_with("state", error),
    };
    if let Err(error) = crate::deployment::state::check(workspace, &place) {
        return checks.fail_with("state", error);
    }
    checks.pass(
        "state",
        format!("kept in the ledger's server, {place} (`state = \"ledger\"`)"),
    );
    if let Some(url) = env.get("PULUMI_BACKEND_URL") {
        checks.warn(
            "state",
            format!("PULUMI_BACKEND_URL is set ({url}): the Pulumi projects keep their stacks there, not in the ledger's server"),
            Some("take it out of the environment file (after `mara state migrate`) to keep them in the server".into()),
        );
    }
}

/// Each selected project that names no backend and still keeps `stack`'s state in files beside
/// it (a Terraform module's `terraform.tfstate.d/<stack>/`): `mara state migrate` moves it.
pub fn left_behind(checks: &mut Checks, workspace: &Workspace, plan: &Plan<'_>, stack: &str) {
    if !matches!(workspace.settings.state, StatePlace::Ledger(_)) {
        return;
    }
    let mut left = Vec::new();
    for &i in plan.order() {
        let project = plan.graph.project(i);
        let dir = workspace.project_dir(&project.path);
        let engine = project.engine_or(workspace.settings.engine);
        if engine.own_backend(&dir).is_some() {
            continue;
        }
        for file in engine.local_state(&dir, stack) {
            left.push(format!(
                "{} ({})",
                project.path,
                workspace.display(&file).display()
            ));
        }
    }
    if left.is_empty() {
        return;
    }
    let one = left.len() == 1;
    let (keeps, files, it, those) = match one {
        true => ("keeps", "a file beside it", "it", "that file holds"),
        false => ("keep", "files beside them", "them", "those files hold"),
    };
    checks.fail(
        "state",
        format!(
            "{} {keeps} stack {stack}'s state in {files}, which `state = \"ledger\"` leaves behind: the run would start {it} anew in the ledger's server, beside the resources {those}",
            left.join(", ")
        ),
        Some("`mara state migrate` moves it into the server first (docs/commands.md, \"State in the ledger\")".into()),
    );
}
