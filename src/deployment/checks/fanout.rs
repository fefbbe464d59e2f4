//! What a run fanned out over CI jobs needs (docs/commands.md, "ci"), each rule worded once: every
//! runner reaches the same ledger, the same Pulumi backend and the same Terraform state. A job on
//! a runner of its own cannot see a file another runner wrote.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use crate::deployment::Deployment;
use crate::error::{Error, Problem, Result};
use crate::graph::Plan;
use crate::ledger::Place;
use crate::workspace::mara_toml::StatePlace;

/// Everything `mara ci open` checks of where the run's state is kept: the ledger, the Pulumi
/// backend, each selected Terraform module's state.
pub fn open(
    place: &Place,
    env: &BTreeMap<String, String>,
    deployment: &Deployment,
    selected: &Plan<'_>,
) -> Result<()> {
    team_ledger(place, None)?;
    shared_backend(env, &deployment.files.workspace.root)?;
    shared_terraform_state(deployment, selected)
}

/// The ledger is a team's (a server every runner reaches), not this workspace's own file.
/// `doing` names what was refused (`cannot close run X`), when not the run itself.
pub fn team_ledger(place: &Place, doing: Option<&str>) -> Result<()> {
    if matches!(place, Place::Server(_)) {
        return Ok(());
    }
    let rule = "a run fanned out over CI jobs needs a team's ledger, which every runner reaches; this workspace's own is not shared";
    Err(Error::config(
        Problem::new(match doing {
            Some(doing) => format!("{doing}: {rule}"),
            None => rule.to_string(),
        })
        .hint("set MARA_LEDGER_URL (docs/commands.md, \"A team's ledger\")"),
    ))
}

/// `PULUMI_BACKEND_URL` is one every runner shares: not a `file://` path that is relative, or
/// inside the workspace (`root`), which would be each runner's own copy.
pub fn shared_backend(env: &BTreeMap<String, String>, root: &Path) -> Result<()> {
    let Some(url) = env.get("PULUMI_BACKEND_URL") else {
        return Ok(());
    };
    let Some(path) = url.strip_prefix("file://") else {
        return Ok(());
    };
    let path = Path::new(path);
    let whose = match (path.is_absolute(), lexical(path).starts_with(root)) {
        (false, _) => "a relative path, resolved on each runner",
        (true, true) => "inside the workspace",
        (true, false) => return Ok(()),
    };
    Err(Error::config(
        Problem::new(format!(
            "PULUMI_BACKEND_URL is {url}, {whose}: each CI runner would have a copy of its own, and no job would see what the others deployed"
        ))
        .hint("a fanned-out run needs a shared backend: `state = \"ledger\"` in mara.toml (the team ledger's server) without this line, Pulumi Cloud, a bucket (s3://, gs://, azblob://), or a file:// path every runner mounts"),
    ))
}

/// `path` with `..` taken out as the path says, not as links lead.
fn lexical(path: &Path) -> PathBuf {
    path.components().fold(PathBuf::new(), |mut p, c| {
        match c {
            Component::ParentDir => {
                p.pop();
            }
            other => p.push(other),
        }
        p
    })
}

/// No selected Terraform module keeps its state locally (no backend, or `backend "local"`): that
/// is a file on each runner.
pub fn shared_terraform_state(deployment: &Deployment, selected: &Plan<'_>) -> Result<()> {
    let workspace = &deployment.files.workspace;
    let in_ledger = matches!(workspace.settings.state, StatePlace::Ledger(_));
    let local: Vec<&str> = (selected.order().iter())
        .map(|&i| deployment.graph.project(i))
        .filter(|p| {
            let engine = p.engine_or(workspace.settings.engine);
            engine.keeps_state_locally(&workspace.project_dir(&p.path), in_ledger)
        })
        .map(|p| p.path.as_str())
        .collect();
    if local.is_empty() {
        return Ok(());
    }
    Err(Error::config(
        Problem::new(format!(
            "{} keep{} Terraform's state locally (no backend, or `backend \"local\"`): each CI runner would have a copy of its own, and no job would see what the others deployed",
            local.join(", "),
            if local.len() == 1 { "s" } else { "" }
        ))
        .hint(match in_ledger {
            true => "a fanned-out run needs shared state: `state = \"ledger\"` keeps a module without a backend in the team ledger's server, not one with `backend \"local\"`",
            false => "a fanned-out run needs shared state: `state = \"ledger\"` in mara.toml (the team ledger's server), or a `backend` block (s3, gcs, azurerm, pg, …) or a `cloud` block in each module",
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_server_is_a_team_s_ledger() {
        assert!(team_ledger(&Place::Server("postgres://db/mara".into()), None).is_ok());
        let file = Place::File("/w/.mara/ledger.db".into());
        let refused = team_ledger(&file, Some("cannot close run `r1`")).unwrap_err();
        assert_eq!(refused.exit_code(), crate::error::exit::CONFIG);
        assert!(
            refused.to_string().starts_with(
                "cannot close run `r1`: a run fanned out over CI jobs needs a team's ledger"
            ),
            "{refused}"
        );
    }

    #[test]
    fn a_file_backend_must_be_outside_the_workspace_and_absolute() {
        let root = Path::new("/w/repo");
        let env = |url: &str| BTreeMap::from([("PULUMI_BACKEND_URL".to_string(), url.to_string())]);
        assert!(shared_backend(&env("s3://bucket"), root).is_ok());
        assert!(shared_backend(&env("file:///mnt/shared/state"), root).is_ok());
        assert!(shared_backend(&BTreeMap::new(), root).is_ok());
        for (url, whose) in [
            ("file://state", "a relative path"),
            ("file:///w/repo/.mara/state", "inside the workspace"),
            ("file:///mnt/../w/repo/state", "inside the workspace"),
        ] {
            let refused = shared_backend(&env(url), root).unwrap_err().to_string();
            assert!(refused.contains(whose), "{url}: {refused}");
        }
    }
}
