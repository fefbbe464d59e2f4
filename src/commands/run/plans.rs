//! Saved plans (docs/commands.md, "Saved plans"): where `preview --save-plans DIR` keeps them and
//! writes its manifest, and what `up --plans DIR` reads and checks of them before anything runs.

use std::path::{Path, PathBuf};

use super::{Invocation, Loaded};
use crate::deployment::Deployment;
use crate::engine::Operation;
use crate::error::{Error, Problem, Result};
use crate::run::approval::{self, MANIFEST, Manifest};
use crate::run::events::ProjectReport;
use crate::run::holds;
use crate::run::plan::{Planner, Plans, RunPlan};
use crate::status::ProjectStatus;

impl Invocation<'_> {
    /// The plans of the run: for `preview --save-plans DIR`, DIR claimed (`claim`: new, empty,
    /// or holding plans mara saved there, which are removed); for `up --plans DIR`, its
    /// manifest, checked against the run — a different stack or provider, a selected project
    /// it does not hold, or a plan file gone, and nothing runs (exit 4).
    pub(super) fn plans(&self, deployment: &Deployment, loaded: &Loaded<'_>) -> Result<Plans> {
        let run = self.run;
        let mut plans = Plans {
            replan: run.replan,
            documents: super::policies::read_plans(loaded),
            ..Plans::default()
        };
        if let Some(dir) = &run.save_plans {
            let claimed = claim(&absolute(dir)?, dir)?;
            let dir = absolute(dir)?;
            if !run.dry_run {
                claimed.take(&dir)?;
            }
            plans.save_in = Some(dir);
            plans.record_state = true;
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

    /// Before an `up --plans DIR` records or runs anything: every approved plan checked
    /// against the deployment as it is now (`run::holds`), each reason said; any, and nothing
    /// is applied (exit 4).
    pub(super) fn approved_hold(
        &self,
        planner: &Planner<'_>,
        loaded: &Loaded<'_>,
        env: &std::collections::BTreeMap<String, String>,
        before: &std::collections::BTreeMap<String, crate::run::inputs::Known>,
    ) -> Result<()> {
        if planner.plans.approved.is_none() {
            return Ok(());
        }
        let workspace = &planner.deployment.files.workspace;
        let plan = planner.plan(Operation::Up, &loaded.config, "");
        let values = (loaded.config.config()).map(|c| c.values.clone());
        let values = values.unwrap_or_default();
        let stack = planner.stack.name.as_str();
        let against = holds::against(planner.selected, workspace, stack, &values)?;
        // A dry run starts no engine: the modules' states are read by the run itself.
        let interrupt = self.runner.interrupt();
        let states = match self.run.dry_run {
            true => Default::default(),
            false => holds::states(&plan, env, self.run.parallel, interrupt),
        };
        interrupt.checkpoint()?;
        let mut problems = holds::refusals(&plan, &against, &states, before);
        let Some(last) = problems.pop() else {
            return Ok(());
        };
        let dir = (self.run.plans.as_ref()).map(|dir| dir.display().to_string());
        let again = self
            .settings
            .again(&format!("preview --save-plans {}", dir.unwrap_or_default()));
        problems.push(last.hint(format!(
            "nothing was applied; preview what is there now and have it approved (`{again}`)"
        )));
        Err(Error::NotAsApproved(problems))
    }

    /// After `preview --save-plans DIR`: what every project planned against, in DIR's manifest
    /// (`config`: the shared configuration the preview ran with).
    pub(super) fn save_manifest(
        &self,
        planner: &Planner<'_>,
        (plan, reports): (&RunPlan, &[ProjectReport]),
        config: &crate::workspace::stack_config::StackConfigFile,
        judged_by: Result<Option<String>, ()>,
    ) -> Result<()> {
        let Some(dir) = &planner.plans.save_in else {
            return Ok(());
        };
        let written: Vec<&Path> = (plan.projects.iter())
            .flat_map(|p| p.steps.iter().filter_map(|s| s.writes.as_deref()))
            .collect();
        // A preview that failed approves nothing: no manifest, no plans kept; nor does one the
        // policies deny (`judged_by` an error).
        let whole =
            (reports.iter()).all(|r| r.status.is_success() || r.status == ProjectStatus::Waiting);
        let (true, Ok(judged_by)) = (whole, judged_by) else {
            return forget(&written).map_err(|e| Error::write(dir, e));
        };
        let workspace = &planner.deployment.files.workspace;
        let values = (config.config())
            .map(|c| c.values.clone())
            .unwrap_or_default();
        let stack = planner.stack.name.as_str();
        let against = holds::against(planner.selected, workspace, stack, &values)?;
        let manifest = Manifest {
            judged_by,
            ..manifest(
                (stack, &planner.deployment.provider.name, planner.run_id),
                (plan, reports),
                dir,
                &against,
            )
        };
        for file in written.iter().filter(|f| f.is_file()) {
            crate::files::set_mode(file, 0o600).map_err(|e| Error::write(file, e))?;
        }
        let file = dir.join(MANIFEST);
        let text = serde_json::to_string_pretty(&manifest).unwrap_or_default() + "\n";
        crate::files::write_private(&file, &text).map_err(|e| Error::write(&file, e))
    }
}

/// The manifest of a preview's `plan` and `reports` (in the plan's order) on a stack, with a
/// provider, by a run (`made`), its Terraform plans saved in `dir`; `against` what each project
/// was planned against.
pub(super) fn manifest(
    (stack, provider, run_id): (&str, &str, &str),
    (plan, reports): (&RunPlan, &[ProjectReport]),
    dir: &Path,
    against: &std::collections::BTreeMap<String, approval::Against>,
) -> Manifest {
    let projects = (plan.projects.iter().zip(reports))
        .map(|(planned, report)| {
            let previewed = report.status.is_success();
            let saved = (planned.steps.iter()).find_map(|s| s.writes.as_deref());
            let plan = saved
                .filter(|file| previewed && file.is_file())
                .and_then(|file| Some(file.strip_prefix(dir).ok()?.display().to_string()));
            approval::Planned {
                path: report.path.clone(),
                engine: planned.engine,
                state: report.state.clone().filter(|_| plan.is_some()),
                plan,
                planned_with: report.planned_with,
                inputs: report.inputs_taken.clone(),
                changes: report.changes.clone().filter(|_| previewed),
                resources: approval::resources(&report.diff),
                waited: report.status == ProjectStatus::Waiting,
                digest: report.plan_digest.clone().filter(|_| previewed),
                against: against.get(&report.path).cloned().unwrap_or_default(),
            }
        })
        .collect();
    Manifest {
        version: approval::VERSION,
        stack: stack.to_string(),
        provider: provider.to_string(),
        run_id: run_id.to_string(),
        projects,
        judged_by: None,
    }
}

/// What `--save-plans DIR` found in DIR, and may replace: a directory it makes, or the files an
/// earlier preview's manifest there names, its manifest and mara's `.gitignore`.
struct Claimed {
    /// DIR does not exist: it is made, private, with a `.gitignore` holding `*`.
    make: bool,
    /// What an earlier preview left, removed before this one writes.
    replaced: Vec<PathBuf>,
}

impl Claimed {
    /// DIR made, or emptied of what it replaces.
    fn take(&self, dir: &Path) -> Result<()> {
        if self.make {
            crate::files::new_private_dir(dir).map_err(|e| Error::write(dir, e))?;
            let ignore = dir.join(".gitignore");
            return crate::files::write_private(&ignore, IGNORE_ALL)
                .map_err(|e| Error::write(&ignore, e));
        }
        forget(
            &self
                .replaced
                .iter()
                .map(PathBuf::as_path)
                .collect::<Vec<_>>(),
        )
        .map_err(|e| Error::write(dir, e))
    }
}

/// The `.gitignore` of a plans directory mara makes: its plans hold secrets, in clear.
const IGNORE_ALL: &str = "*\n";

/// Where `--save-plans DIR` may write: a new directory, an empty one, or one holding a manifest
/// of mara's and the plans it names (and mara's `.gitignore`); anything else there is someone
/// else's, and refused by name (exit 2) — nothing of it removed, no mode changed.
fn claim(dir: &Path, typed: &Path) -> Result<Claimed> {
    let refuse = |file: &Path, why: &str| {
        Error::usage(
            Problem::new(format!("--save-plans {} {why}", typed.display()))
                .at(crate::error::Location::file(file))
                .hint("give it a new or empty directory (`--save-plans plans/release-43`), or one where `mara preview --save-plans` saved plans before"),
        )
    };
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Claimed {
                make: true,
                replaced: Vec::new(),
            });
        }
        Err(e) => return Err(Error::read(dir, e)),
        Ok(_) if !dir.is_dir() => return Err(refuse(dir, "is not a directory")),
        Ok(_) => {}
    }
    let file = dir.join(MANIFEST);
    let mut ours: Vec<PathBuf> = Vec::new();
    if std::fs::symlink_metadata(&file).is_ok() {
        let manifest = read(dir)
            .map_err(|_| refuse(&file, "holds a file that is not a manifest of saved plans"))?;
        ours.push(file);
        ours.extend((manifest.projects.iter()).filter_map(|p| Some(dir.join(p.plan.as_ref()?))));
    }
    let ignore = dir.join(".gitignore");
    let mara_s_ignore = crate::files::read(&ignore).is_ok_and(|t| t == IGNORE_ALL.as_bytes());
    let mut found = Vec::new();
    foreign(dir, &ours, &mut found).map_err(|e| Error::read(dir, e))?;
    found.retain(|f| !(mara_s_ignore && *f == ignore));
    match found.first() {
        Some(first) => {
            let name = |p: &PathBuf| p.strip_prefix(dir).unwrap_or(p).display().to_string();
            let what = match found.len() {
                1 => "holds an entry that is not one of mara's saved plans".to_string(),
                n => {
                    let named: Vec<String> = found.iter().take(3).map(name).collect();
                    let more = match n > 3 {
                        true => format!(" and {} more", n - 3),
                        false => String::new(),
                    };
                    format!(
                        "holds {n} entries that are not mara's saved plans: {}{more}",
                        named.join(", ")
                    )
                }
            };
            Err(refuse(first, &what))
        }
        None => Ok(Claimed {
            make: false,
            replaced: ours.into_iter().filter(|f| f.is_file()).collect(),
        }),
    }
}

/// The entries under `dir` that are not `ours` (nor directories holding only ours), sorted; a
/// symlink is an entry of its own, never followed.
fn foreign(dir: &Path, ours: &[PathBuf], found: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<std::io::Result<_>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() && ours.iter().any(|o| o.starts_with(&path)) {
            foreign(&path, ours, found)?;
        } else if !(kind.is_file() && ours.contains(&path)) {
            found.push(path);
        }
    }
    Ok(())
}

/// Removes `files` (those that are there).
fn forget(files: &[&Path]) -> std::io::Result<()> {
    for file in files {
        match std::fs::remove_file(file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
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
    if manifest.version != approval::VERSION {
        problems.push(
            Problem::new(format!(
                "{made} by another version of mara (manifest version {}, this one reads {})",
                manifest.version,
                approval::VERSION
            ))
            .hint("save the plans again with this mara (`mara preview --save-plans DIR`)"),
        );
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

/// What is wrong with a project's plan file in the manifest: one outside `dir` (or not a plan
/// of its engine), one gone, or none for a Terraform module that was previewed. A Pulumi
/// project's update plan that is not there is no problem: its approval is then checked by a
/// fresh preview, as its turn says (`run::plan::Approval::unsaved`).
fn plan_file_problem(
    path: &str,
    planned: &approval::Planned,
    engine: crate::engine::EngineKind,
    dir: &Path,
) -> Option<Problem> {
    let saves_files = engine.saves_plan_files();
    let Some(file) = &planned.plan else {
        return (saves_files && !planned.deferred()).then(|| {
            Problem::new(format!(
                "{path}: the manifest names no saved plan for this module"
            ))
        });
    };
    let inside = Path::new(file)
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)));
    let its_plan = engine
        .plan_suffix()
        .is_some_and(|suffix| file.ends_with(suffix));
    if !inside || !its_plan {
        return Some(Problem::new(format!(
            "{path}: the manifest names `{file}`, which is no plan file in {}",
            dir.display()
        )));
    }
    (saves_files && !dir.join(file).is_file()).then(|| {
        Problem::new(format!(
            "{path}: its saved plan {} is gone",
            dir.join(file).display()
        ))
    })
}
