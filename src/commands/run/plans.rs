//! Saved plans (docs/commands.md, "Saved plans"): where `preview --save-plans DIR` keeps them and
//! writes its manifest, and what `up --plans DIR` reads and checks of them before anything runs.

use std::path::{Path, PathBuf};

use super::{Invocation, Loaded};
use crate::deployment::Deployment;
use crate::error::{Error, Problem, Result};
use crate::run::approval::{self, MANIFEST, Manifest};
use crate::run::events::ProjectReport;
use crate::run::plan::{Planner, Plans, RunPlan};
use crate::status::ProjectStatus;

impl Invocation<'_> {
    /// The plans of the run: for `preview --save-plans DIR`, DIR made (private: Terraform's
    /// plans hold what it plans, secrets too); for `up --plans DIR`, its manifest, checked
    /// against the run — a different stack or provider, a selected project it does not hold, or
    /// a plan file gone, and nothing runs (exit 4).
    pub(super) fn plans(&self, deployment: &Deployment, loaded: &Loaded<'_>) -> Result<Plans> {
        let run = self.run;
        let mut plans = Plans {
            replan: run.replan,
            ..Plans::default()
        };
        if let Some(dir) = &run.save_plans {
            let dir = absolute(dir)?;
            if !run.dry_run {
                crate::files::private_dir(&dir).map_err(|e| Error::write(&dir, e))?;
                forget_saved(&dir).map_err(|e| Error::write(&dir, e))?;
            }
            plans.save_in = Some(dir);
        }
        if let Some(dir) = &run.plans {
            let dir = absolute(dir)?;
            let manifest = read(&dir)?;
            let problems = mismatches(&manifest, &dir, deployment, loaded);
            if !problems.is_empty() {
                return Err(Error::NotAsApproved(problems));
            }
            plans.approved = Some((dir, manifest));
        }
        Ok(plans)
    }

    /// After `preview --save-plans DIR`: what every project planned against, in DIR's manifest.
    pub(super) fn save_manifest(
        &self,
        planner: &Planner<'_>,
        plan: &RunPlan,
        reports: &[ProjectReport],
    ) -> Result<()> {
        let Some(dir) = &planner.plans.save_in else {
            return Ok(());
        };
        // A preview that failed approves nothing: no manifest, no plans kept.
        let whole =
            (reports.iter()).all(|r| r.status.is_success() || r.status == ProjectStatus::Waiting);
        if !whole {
            return forget_saved(dir).map_err(|e| Error::write(dir, e));
        }
        let manifest = manifest(
            planner.stack.name.as_str(),
            &planner.deployment.provider.name,
            planner.run_id,
            (plan, reports),
            dir,
            &|file| file.is_file(),
        );
        let file = dir.join(MANIFEST);
        let text = serde_json::to_string_pretty(&manifest).unwrap_or_default() + "\n";
        crate::files::write_private(&file, &text).map_err(|e| Error::write(&file, e))
    }
}

/// The manifest of a preview's `plan` and `reports` (in the plan's order), its Terraform plans
/// saved in `dir`; `exists` says whether a plan file was written.
pub(super) fn manifest(
    stack: &str,
    provider: &str,
    run_id: &str,
    (plan, reports): (&RunPlan, &[ProjectReport]),
    dir: &Path,
    exists: &dyn Fn(&Path) -> bool,
) -> Manifest {
    let projects = (plan.projects.iter().zip(reports))
        .map(|(planned, report)| {
            let previewed = report.status.is_success();
            let saved = (planned.steps.iter()).find_map(|s| s.writes.as_deref());
            let plan = saved
                .filter(|file| previewed && exists(file))
                .and_then(|file| Some(file.strip_prefix(dir).ok()?.display().to_string()));
            approval::Planned {
                path: report.path.clone(),
                engine: planned.engine,
                plan,
                planned_with: report.planned_with,
                inputs: report.inputs_taken.clone(),
                changes: report.changes.clone().filter(|_| previewed),
                resources: approval::resources(&report.diff),
                waited: report.status == ProjectStatus::Waiting,
                digest: report.plan_digest.clone().filter(|_| previewed),
            }
        })
        .collect();
    Manifest {
        version: 1,
        stack: stack.to_string(),
        provider: provider.to_string(),
        run_id: run_id.to_string(),
        projects,
    }
}

/// The plans an earlier preview saved in `dir`, and its manifest, removed: what `dir` holds
/// after this preview is this preview's alone.
fn forget_saved(dir: &Path) -> std::io::Result<()> {
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if entry.file_type()?.is_dir() {
                dirs.push(path);
            } else if name.ends_with(".tfplan") || name == MANIFEST {
                std::fs::remove_file(&path)?;
            }
        }
    }
    Ok(())
}

/// `dir` made absolute (engines run in their projects' directories).
fn absolute(dir: &Path) -> Result<PathBuf> {
    let here = std::env::current_dir().map_err(|e| Error::read(Path::new("."), e))?;
    Ok(here.join(dir))
}

/// The manifest in `dir`.
fn read(dir: &Path) -> Result<Manifest> {
    let file = dir.join(MANIFEST);
    let text = crate::workspace::read_input(&file).map_err(|e| Error::read(&file, e))?;
    serde_json::from_str(&text).map_err(|e| {
        Error::config(
            Problem::new(format!("not a manifest of saved plans: {e}"))
                .at(crate::error::Location::line(&file, e.line()))
                .hint("it is what `mara preview --save-plans DIR` writes"),
        )
    })
}

/// Why the plans in `dir` cannot be the approval of this run, each said.
fn mismatches(
    manifest: &Manifest,
    dir: &Path,
    deployment: &Deployment,
    loaded: &Loaded<'_>,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    let stack = loaded.stack.name.as_str();
    let provider = &deployment.provider.name;
    let made = format!("the plans in {} were made", dir.display());
    if manifest.stack != stack {
        problems.push(Problem::new(format!(
            "{made} for stack `{}`, and this run is on stack `{stack}`",
            manifest.stack
        )));
    }
    if &manifest.provider != provider {
        problems.push(Problem::new(format!(
            "{made} with provider `{}`, and this run's is `{provider}`",
            manifest.provider
        )));
    }
    if manifest.version != 1 {
        problems.push(Problem::new(format!(
            "{made} by another version of mara (manifest version {}, this one reads 1)",
            manifest.version
        )));
    }
    let default_engine = deployment.files.workspace.settings.engine;
    for &i in loaded.selected.order() {
        let project = loaded.selected.graph.project(i);
        let path = &project.path;
        let planned: Vec<_> = manifest
            .projects
            .iter()
            .filter(|p| &p.path == path)
            .collect();
        let planned = match planned.as_slice() {
            [] => {
                problems.push(
                    Problem::new(format!(
                        "{path}: not in the approved plans ({made} without it)"
                    ))
                    .hint("preview it with the others, or leave it out (`--skip`)"),
                );
                continue;
            }
            [one] => *one,
            _ => {
                problems.push(Problem::new(format!("{path}: the manifest holds it twice")));
                continue;
            }
        };
        let engine = project.engine_or(default_engine);
        if planned.engine != engine {
            problems.push(Problem::new(format!(
                "{path}: planned as a {} project, and it is a {engine} project now",
                planned.engine
            )));
        }
        problems.extend(plan_file_problem(path, planned, engine, dir));
    }
    problems
}

/// What is wrong with a project's plan file in the manifest: one outside `dir` (or not a plan),
/// one gone, or none for a Terraform module that was previewed.
fn plan_file_problem(
    path: &str,
    planned: &approval::Planned,
    engine: crate::engine::EngineKind,
    dir: &Path,
) -> Option<Problem> {
    use crate::engine::EngineKind;
    let terraform = matches!(engine, EngineKind::Terraform | EngineKind::Tofu);
    let Some(file) = &planned.plan else {
        return (terraform && !planned.deferred()).then(|| {
            Problem::new(format!(
                "{path}: the manifest names no saved plan for this module"
            ))
        });
    };
    let inside = Path::new(file)
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)));
    if !inside || !file.ends_with(".tfplan") {
        return Some(Problem::new(format!(
            "{path}: the manifest names `{file}`, which is no plan file in {}",
            dir.display()
        )));
    }
    (!dir.join(file).is_file()).then(|| {
        Problem::new(format!(
            "{path}: its saved plan {} is gone",
            dir.join(file).display()
        ))
    })
}
