//! The selected projects' directories and project files (docs/commands.md, "validate"): a
//! directory for each, a `Pulumi.yaml` with a name for a Pulumi project (no two with the same
//! name), `.tf` files for a Terraform module, and where each Pulumi project says its stack
//! configuration lives.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::Checks;
use crate::engine::{EngineKind, ProjectFiles, kubectl};
use crate::error::plural;
use crate::files::normalize;
use crate::graph::Plan;
use crate::workspace::Workspace;
use crate::workspace::pulumi_project::PulumiProject;

/// Each selected project's directory and project files (docs/commands.md, "validate").
pub fn projects(checks: &mut Checks, workspace: &Workspace, plan: &Plan<'_>) {
    let default_engine = workspace.settings.engine;
    let mut names: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let mut missing = Missing::default();
    let mut venvs = Venvs::default();
    let mut pulumi_projects = pulumi_projects(workspace, plan).into_iter();
    for &i in plan.order() {
        let project = plan.graph.project(i);
        let path = project.path.as_str();
        let dir = workspace.project_dir(path);
        let engine = project.engine_or(default_engine);
        let files = engine.project_files();
        let found =
            (files == ProjectFiles::PulumiProject).then(|| pulumi_projects.next().flatten());
        if files == ProjectFiles::Nothing {
            let place = if dir.is_dir() {
                workspace.display(&dir).display().to_string()
            } else {
                "the workspace root".into()
            };
            checks.pass("project", format!("{path}: command steps, run in {place}"));
            continue;
        }
        // A project file read means its directory is there (no look at it per project).
        if !matches!(found, Some(Some(Ok(_)))) && !dir.is_dir() {
            missing.add(path, &dir);
            continue;
        }
        match files {
            ProjectFiles::PulumiProject => match found.flatten() {
                Some(Ok(pulumi)) => {
                    venvs.add(path, &dir, &pulumi);
                    pulumi_project(checks, workspace, path, pulumi, &mut names)
                }
                Some(Err(error)) => checks.fail_with("project", error),
                None => checks.fail(
                    "project",
                    format!(
                        "{path}: no Pulumi.yaml in {}",
                        workspace.display(&dir).display()
                    ),
                    None,
                ),
            },
            ProjectFiles::WithExtension(extensions) => {
                module(checks, workspace, (path, engine), &dir, extensions)
            }
            ProjectFiles::Manifests => manifests(checks, workspace, path, &dir),
            ProjectFiles::Nothing => unreachable!("handled above"),
        }
    }
    missing.said(checks, workspace);
    venvs.said(checks, workspace);
    named_once(checks, workspace, plan, names);
}

/// A Pulumi project whose file was read: its runtime, where it says its stack configuration
/// lives; its name is kept in `names` (no two alike). Its virtualenv is `Venvs`'.
fn pulumi_project<'a>(
    checks: &mut Checks,
    workspace: &Workspace,
    path: &'a str,
    pulumi: PulumiProject,
    names: &mut BTreeMap<String, Vec<&'a str>>,
) {
    let dir = workspace.project_dir(path);
    let shared_config_dir = normalize(&workspace.config_dir());
    match &pulumi.runtime {
        Some(runtime) => checks.pass(
            "project",
            format!(
                "{path}: Pulumi project `{}`, runtime {runtime}",
                pulumi.name
            ),
        ),
        None => no_runtime(checks, workspace, &pulumi),
    }
    if let Some(config_dir) = &pulumi.stack_config_dir {
        let points_at = normalize(&dir.join(config_dir));
        let is_secrets = path == workspace.settings.secrets_project;
        if is_secrets && points_at == shared_config_dir {
            checks.warn(
                "project",
                format!("{path}: its Pulumi.yaml points its stack configuration at the shared one"),
                Some("the secrets project keeps its own: remove `stackConfigDir`/`config:` from its Pulumi.yaml".into()),
            );
        } else if !is_secrets && points_at != shared_config_dir {
            checks.warn(
                "project",
                format!(
                    "{path}: its Pulumi.yaml reads stack configuration from {}, but mara passes {} (`--config-file`)",
                    workspace.display(&points_at).display(),
                    workspace.display(&shared_config_dir).display()
                ),
                Some("a plain `pulumi up` in that directory would read other configuration".into()),
            );
        }
    }
    names.entry(pulumi.name).or_default().push(path);
}

/// A root module (a Terraform or OpenTofu one): its files of `extensions` (`.tf`, `.tf.json`).
fn module(
    checks: &mut Checks,
    workspace: &Workspace,
    (path, engine): (&str, EngineKind),
    dir: &Path,
    extensions: &[&str],
) {
    let modules = files_with(dir, extensions);
    let first = extensions.first().copied().unwrap_or_default();
    if modules == 0 {
        checks.fail(
            "project",
            format!(
                "{path}: no {first} files in {}",
                workspace.display(dir).display()
            ),
            None,
        );
    } else {
        checks.pass(
            "project",
            format!(
                "{path}: {engine} root module ({modules} {first} {})",
                plural(modules, "file", "files")
            ),
        );
    }
}

/// A project of Kubernetes manifests: a kustomization, or manifest files.
fn manifests(checks: &mut Checks, workspace: &Workspace, path: &str, dir: &Path) {
    match kubectl::kustomization(dir) {
        Some(file) => checks.pass(
            "project",
            format!(
                "{path}: Kubernetes manifests, built by kustomize from {}",
                workspace.display(&file).display()
            ),
        ),
        None if kubectl::nested_kustomization(dir).is_some() => checks.fail(
            "project",
            nested_kustomization(path, workspace, dir),
            Some(KUSTOMIZATION_HINT.into()),
        ),
        None => match kubectl::manifest_files(dir) {
            0 => checks.fail(
                "project",
                no_manifests(path, &workspace.display(dir).display().to_string()),
                None,
            ),
            files => checks.pass(
                "project",
                format!(
                    "{path}: Kubernetes manifests ({files} {})",
                    plural(files, "file", "files")
                ),
            ),
        },
    }
}

/// Every selected Pulumi project's file, in the plan's order, read on every core before the
/// checks walk them (`None`: there is none).
fn pulumi_projects(
    workspace: &Workspace,
    plan: &Plan<'_>,
) -> Vec<Option<crate::error::Result<PulumiProject>>> {
    let selected = plan.order().iter().copied();
    let (_, read) = pulumi_files(workspace, plan, selected);
    read
}

/// The Pulumi projects among `projects` (graph indexes), by path, and each one's file, read on
/// every core (`None`: there is none).
fn pulumi_files<'a>(
    workspace: &Workspace,
    plan: &Plan<'a>,
    projects: impl Iterator<Item = usize>,
) -> (
    Vec<&'a str>,
    Vec<Option<crate::error::Result<PulumiProject>>>,
) {
    let default_engine = workspace.settings.engine;
    let paths: Vec<&'a str> = projects
        .map(|i| plan.graph.project(i))
        .filter(|p| p.engine_or(default_engine).project_files() == ProjectFiles::PulumiProject)
        .map(|p| p.path.as_str())
        .collect();
    let dirs: Vec<PathBuf> = paths.iter().map(|p| workspace.project_dir(p)).collect();
    (paths, PulumiProject::load_each(&dirs))
}

/// A Pulumi project without a runtime: Pulumi reads it (a refresh or destroy runs no program),
/// but cannot run its program.
fn no_runtime(checks: &mut Checks, workspace: &Workspace, pulumi: &PulumiProject) {
    checks.fail(
        "project",
        format!(
            "{}: has no `runtime:`; Pulumi runs the project's program (`up`, `preview`) in the language it names",
            workspace.display(&pulumi.file).display()
        ),
        Some("add `runtime: <language>` (yaml, nodejs, python, go, dotnet or java)".into()),
    );
}

/// No two projects share a Pulumi name where one of them is selected (the selected `names`,
/// with the paths of theirs): a stack is the project's name and the stack's, so the two would
/// deploy over one stack, and a stack reference could not tell them apart. The projects left
/// out of the selection are read for their names alone (a mistake in one is theirs to say).
fn named_once<'a>(
    checks: &mut Checks,
    workspace: &Workspace,
    plan: &Plan<'a>,
    mut names: BTreeMap<String, Vec<&'a str>>,
) {
    let others = (0..plan.graph.len()).filter(|&i| !plan.contains(i));
    let (others, read) = pulumi_files(workspace, plan, others);
    for (path, read) in others.into_iter().zip(read) {
        if let Some(Ok(pulumi)) = read
            && let Some(paths) = names.get_mut(&pulumi.name)
        {
            paths.push(path);
        }
    }
    for (name, paths) in names.iter().filter(|(_, paths)| paths.len() > 1) {
        checks.fail(
            "project",
            format!(
                "{} are named `{name}` in their Pulumi.yaml",
                paths.join(" and ")
            ),
            Some("Pulumi keeps one stack per project name, and stack references address projects by name: give each its own".into()),
        );
    }
}

/// Before a run (docs/commands.md, "up, preview, refresh, destroy"): every selected project's
/// directory and entry file exists — a `Pulumi.yaml` read for what Pulumi refuses before it runs
/// anything (no name, no runtime, not YAML, two projects of one name), other engines' files looked
/// for, not read — and, when the run stores secrets, the secrets project. Command projects may
/// have no directory.
pub fn preflight(
    checks: &mut Checks,
    workspace: &Workspace,
    plan: &Plan<'_>,
    secrets_needed: bool,
    runs_programs: bool,
) {
    let default_engine = workspace.settings.engine;
    let mut missing = Missing::default();
    let mut names: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let mut pulumi_projects = pulumi_projects(workspace, plan).into_iter();
    for &i in plan.order() {
        let project = plan.graph.project(i);
        let path = project.path.as_str();
        let dir = workspace.project_dir(path);
        let shown = workspace.display(&dir).display().to_string();
        let files = project.engine_or(default_engine).project_files();
        if files == ProjectFiles::Nothing {
            continue;
        }
        // A Pulumi project without a file goes on to say why: no directory, or no file in it.
        if files == ProjectFiles::PulumiProject
            && let Some(read) = pulumi_projects.next().flatten()
        {
            match read {
                Ok(pulumi) => {
                    if runs_programs && pulumi.runtime.is_none() {
                        no_runtime(checks, workspace, &pulumi);
                    }
                    names.entry(pulumi.name).or_default().push(path)
                }
                Err(error) => checks.fail_with("project", error),
            }
            continue;
        }
        if !dir.is_dir() {
            missing.add(path, &dir);
            continue;
        }
        if files == ProjectFiles::Manifests
            && kubectl::kustomization(&dir).is_none()
            && kubectl::nested_kustomization(&dir).is_some()
        {
            checks.fail(
                "project",
                nested_kustomization(path, workspace, &dir),
                Some(KUSTOMIZATION_HINT.into()),
            );
            continue;
        }
        let what = match files {
            // Its file was looked for above.
            ProjectFiles::PulumiProject => "no Pulumi.yaml in".to_string(),
            ProjectFiles::Manifests
                if kubectl::kustomization(&dir).is_some() || kubectl::manifest_files(&dir) > 0 =>
            {
                continue;
            }
            ProjectFiles::Manifests => {
                checks.fail("project", no_manifests(path, &shown), None);
                continue;
            }
            ProjectFiles::WithExtension(extensions) if files_with(&dir, extensions) > 0 => continue,
            ProjectFiles::WithExtension(extensions) => {
                format!(
                    "no {} files in",
                    extensions.first().copied().unwrap_or_default()
                )
            }
            ProjectFiles::Nothing => continue,
        };
        checks.fail("project", format!("{path}: {what} {shown}"), None);
    }
    if secrets_needed {
        secrets_project_dir(checks, workspace, plan);
    }
    missing.said(checks, workspace);
    named_once(checks, workspace, plan, names);
}

/// The secrets project, where a run stores the selected projects' secrets, has its directory.
fn secrets_project_dir(checks: &mut Checks, workspace: &Workspace, plan: &Plan<'_>) {
    let secrets_project = &workspace.settings.secrets_project;
    let dir = workspace.project_dir(secrets_project);
    if plan.graph.lookup(secrets_project).is_some() && !dir.is_dir() {
        checks.fail(
            "secrets",
            format!(
                "the secrets project {secrets_project} has no directory {}",
                workspace.display(&dir).display()
            ),
            Some("the selected projects' secrets are stored there: create it, or set `secrets_project` in mara.toml".into()),
        );
    }
}

/// Before an `up` of manifests: the kubeconfig the kubectl engine will name exists, or a project
/// the kubectl project follows (however far back) writes it with its hook first.
pub fn kubeconfig_for_kubectl(
    checks: &mut Checks,
    workspace: &Workspace,
    plan: &Plan<'_>,
    stack: &crate::workspace::stack::StackName,
    config: &crate::workspace::stack_config::StackConfigFile,
    env: &BTreeMap<String, String>,
) {
    let default_engine = workspace.settings.engine;
    let graph = plan.graph;
    let kubectl: Vec<usize> = (plan.order().iter().copied())
        .filter(|&i| graph.project(i).engine_or(default_engine).needs_cluster())
        .collect();
    if kubectl.is_empty() {
        return;
    }
    let choice = crate::workspace::kubeconfig::choose(workspace, stack, config.config(), env);
    if choice.file.is_file() {
        return;
    }
    let writes = |i: usize| {
        plan.contains(i)
            && (graph.project(i).on_success.iter())
                .any(|h| matches!(h, crate::provider::Hook::Kubeconfig { .. }))
    };
    let written_before = |i: usize| {
        let mut seen = std::collections::BTreeSet::new();
        let mut todo = vec![i];
        while let Some(j) = todo.pop() {
            for (d, _) in graph.predecessors(j) {
                if seen.insert(d) {
                    if writes(d) {
                        return true;
                    }
                    todo.push(d);
                }
            }
        }
        false
    };
    let stacks_own = choice.file == workspace.kubeconfig_file(stack);
    let Some(first) = kubectl
        .into_iter()
        .find(|&i| !(stacks_own && written_before(i)))
    else {
        return;
    };
    let shown = workspace.display(&choice.file).display().to_string();
    let (whose, hint) = match stacks_own {
        true => (
            "the stack's kubeconfig".to_string(),
            "the cluster project's kubeconfig hook writes it on `up`: deploy that project first, or select it too (`--with-dependencies`)".to_string(),
        ),
        false => (
            "the kubeconfig the configuration names (kubernetes:kubeconfig)".to_string(),
            "point kubernetes:kubeconfig at the cluster's kubeconfig file".to_string(),
        ),
    };
    checks.fail(
        "project",
        format!(
            "{}: the kubectl engine reaches the cluster through {whose}, {shown}, which does not exist",
            graph.project(first).path
        ),
        Some(hint),
    );
}

/// A stack of the k3d provider (or one extending it) whose cluster project runs: the cluster's
/// name, `mara-<stack>`, must be one k3d takes.
pub fn local_cluster(
    checks: &mut Checks,
    provider: &crate::provider::Provider,
    plan: &Plan<'_>,
    stack: &crate::workspace::stack::StackName,
) {
    let is_k3d = provider.name == "k3d" || provider.extends.iter().any(|p| p == "k3d");
    let makes_it = plan
        .graph
        .find(crate::cluster::CLUSTER_PROJECT)
        .is_ok_and(|i| plan.contains(i));
    if !is_k3d || !makes_it {
        return;
    }
    if let Some(problem) = crate::cluster::name_problem(&crate::cluster::name(stack.as_str())) {
        checks.fail(
            "stack",
            format!("stack `{stack}` cannot have a local cluster: {problem}"),
            Some(crate::cluster::NAME_HINT.into()),
        );
    }
}

/// A kubectl project of manifest files with a kustomization below them.
fn nested_kustomization(path: &str, workspace: &Workspace, dir: &Path) -> String {
    let file = kubectl::nested_kustomization(dir).unwrap_or_default();
    format!(
        "{path}: {} would be applied as a manifest: kubectl reads every .yaml below {} when the project has no kustomization of its own",
        workspace.display(&file).display(),
        workspace.display(dir).display()
    )
}

const KUSTOMIZATION_HINT: &str = "make that directory a project of its own, or put a kustomization.yaml at the project's top that names what to apply";

/// A kubectl project's directory with nothing for kubectl in it.
fn no_manifests(path: &str, shown: &str) -> String {
    format!(
        "{path}: no Kubernetes manifests (.yaml, .yml, .json) and no kustomization.yaml in {shown}"
    )
}

/// The selected projects without their directory, said together once every project was looked
/// at (`said`): one problem for them all, not one a project, with where they are when the
/// workspace holds them elsewhere (`survey::projects_dir_of`).
#[derive(Default)]
struct Missing {
    /// Each one's path and directory, in the run's order.
    projects: Vec<(String, PathBuf)>,
}

impl Missing {
    fn add(&mut self, path: &str, dir: &Path) {
        self.projects.push((path.to_string(), dir.to_path_buf()));
    }

    fn said(self, checks: &mut Checks, workspace: &Workspace) {
        // A file where a project's directory should be is its own problem.
        let (files, absent): (Vec<_>, Vec<_>) =
            (self.projects.into_iter()).partition(|(_, dir)| dir.exists());
        for (path, dir) in &files {
            let shown = workspace.display(dir);
            checks.fail(
                "project",
                format!("{path}: {} is not a directory", shown.display()),
                None,
            );
        }
        let Some((first, dir)) = absent.first() else {
            return;
        };
        let paths: Vec<&str> = absent.iter().map(|(p, _)| p.as_str()).collect();
        let hint = match crate::workspace::survey::projects_dir_of(&workspace.root, &paths) {
            Some((found, n)) => format!(
                "{} under {found}: set `projects_dir = \"{found}\"` in mara.toml",
                match n == paths.len() {
                    true => "they are".to_string(),
                    false => format!("{n} of them are"),
                }
            ),
            None => format!(
                "create the projects there, or point `projects_dir` in mara.toml (now \"{}\") at the directory that holds them",
                workspace.settings.projects_dir
            ),
        };
        let message = match paths.len() {
            1 => format!("{first}: no directory {}", workspace.display(dir).display()),
            n => {
                let under = workspace.projects_dir();
                let place = match under == workspace.root {
                    true => "the workspace root".to_string(),
                    false => workspace.display(&under).display().to_string(),
                };
                format!(
                    "{n} projects have no directory in {place}: {}",
                    listed(&paths)
                )
            }
        };
        checks.fail("project", message, Some(hint));
    }
}

/// The Pulumi projects whose `Pulumi.yaml` runs Python in a virtualenv that is not there, by
/// virtualenv: one problem a virtualenv (the original MARA's projects share one), not a project.
#[derive(Default)]
struct Venvs {
    missing: BTreeMap<PathBuf, Vec<String>>,
}

impl Venvs {
    fn add(&mut self, path: &str, dir: &Path, pulumi: &PulumiProject) {
        let missing = (pulumi.virtualenv.as_deref())
            .and_then(|venv| crate::workspace::pulumi_project::missing_virtualenv(dir, venv));
        if let Some(venv) = missing {
            self.missing.entry(venv).or_default().push(path.to_string());
        }
    }

    fn said(self, checks: &mut Checks, workspace: &Workspace) {
        for (venv, paths) in self.missing {
            let shown = workspace.display(&venv).display().to_string();
            let whose = match paths.as_slice() {
                [one] => format!("{one}: its Pulumi.yaml runs"),
                many => format!(
                    "{} projects' Pulumi.yaml files run ({})",
                    many.len(),
                    listed(&many.iter().map(String::as_str).collect::<Vec<_>>())
                ),
            };
            let place = match paths.as_slice() {
                [one] => workspace
                    .display(&workspace.project_dir(one))
                    .display()
                    .to_string(),
                _ => "each project's directory".into(),
            };
            checks.fail(
                "project",
                format!("{whose} Python in the virtualenv {shown}, which does not exist"),
                Some(format!(
                    "create it: `python3 -m venv {shown}` and install the projects' requirements into it (or `pulumi install` in {place})"
                )),
            );
        }
    }
}

/// Up to five of `paths`, and how many more.
fn listed(paths: &[&str]) -> String {
    let shown = paths.iter().take(5).copied().collect::<Vec<_>>().join(", ");
    match paths.len() {
        n if n > 5 => format!("{shown} and {} more", n - 5),
        _ => shown,
    }
}

/// The user's kubeconfig, when a selected project's hook merges into it (`merge = true`): one
/// mara cannot merge into (not YAML, not a mapping of lists) or cannot replace and keep what it
/// is (read-only, hard-linked) fails the run before anything runs, rather than its hook after
/// the engine deployed.
pub fn mergeable_kubeconfig(
    checks: &mut Checks,
    plan: &Plan<'_>,
    env: &std::collections::BTreeMap<String, String>,
) {
    let merges = plan.order().iter().any(|&i| {
        (plan.graph.project(i).on_success.iter())
            .any(|h| matches!(h, crate::provider::Hook::Kubeconfig { merge: true, .. }))
    });
    let Some(target) = merges
        .then(|| crate::workspace::kubeconfig::user_kubeconfig(env))
        .flatten()
    else {
        return;
    };
    if let Err(why) = crate::workspace::kubeconfig::read_user(&target) {
        checks.fail(
            "hooks",
            why,
            Some("mara merges the stack's cluster into it: fix the file, or point KUBECONFIG at another".into()),
        );
    } else if let Err(why) = crate::files::replaceable(&target) {
        // Refused as a read-only stack configuration is (`files::rewrite`), and before the
        // engine deploys rather than by the hook after it.
        checks.fail(
            "hooks",
            format!("cannot write {}: {why}", target.display()),
            Some("mara merges the stack's cluster into it: make it writable, or point KUBECONFIG at another file".into()),
        );
    }
}

/// At most one project of the provider writes the stack's kubeconfig (a `kubeconfig` hook after
/// `up`): a second would replace the first's in `.mara/kube/<stack>.yaml` and, merged, in the
/// user's kubeconfig, where both are `mara-<stack>` (docs/commands.md, "Hooks").
pub fn one_kubeconfig(
    checks: &mut Checks,
    workspace: &Workspace,
    graph: &crate::graph::ExecutionGraph,
    stack: &crate::workspace::stack::StackName,
) {
    let writers: Vec<String> = (graph.order().iter())
        .map(|&i| graph.project(i))
        .filter(|p| {
            (p.on_success.iter()).any(|h| matches!(h, crate::provider::Hook::Kubeconfig { .. }))
        })
        .map(|p| {
            let at = &p.declared_at;
            let file = workspace.display(&at.file).display().to_string();
            match at.line {
                Some(line) => format!("{} ({file}:{line})", p.path),
                None => format!("{} ({file})", p.path),
            }
        })
        .collect();
    if writers.len() < 2 {
        return;
    }
    let file = workspace
        .display(&workspace.kubeconfig_file(stack))
        .display()
        .to_string();
    checks.fail(
        "hooks",
        format!(
            "{} projects write the stack's kubeconfig, {file}: {}; each would replace the one before it, there and in your kubeconfig",
            writers.len(),
            writers.join(", ")
        ),
        Some("a stack has one cluster's kubeconfig: keep the `kubeconfig` hook on the project that makes the cluster, or give each cluster a stack of its own".into()),
    );
}

/// Every input takes an output of a project that has outputs: a kubectl project (manifests) has
/// none (docs/formats.md, "Inputs").
pub fn inputs_have_outputs(checks: &mut Checks, workspace: &Workspace, plan: &Plan<'_>) {
    let default_engine = workspace.settings.engine;
    let graph = plan.graph;
    for &i in plan.order() {
        let project = graph.project(i);
        for input in &project.inputs {
            let Ok(j) = graph.find(&input.from.target) else {
                continue;
            };
            if graph.project(j).engine_or(default_engine).has_outputs() {
                continue;
            }
            let at = &input.from.at;
            let file = workspace.display(&at.file).display().to_string();
            let place = at
                .line
                .map_or(file.clone(), |line| format!("{file}:{line}"));
            checks.fail(
                "inputs",
                format!(
                    "{place}: project `{}`, input `{}` takes {}:{}, but {} is applied by kubectl, which leaves no outputs",
                    project.path, input.name, input.from.target, input.output, input.from.target
                ),
                Some("take the value from the project that makes it, or give it as configuration".into()),
            );
        }
    }
}

/// How many files `dir` holds whose names end in one of `extensions` (`.tf`, `.tf.json`).
fn files_with(dir: &Path, extensions: &[&str]) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    extensions.iter().any(|ext| name.ends_with(ext))
                })
                .count()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_is_lexical() {
        assert_eq!(
            normalize(Path::new("/w/a/b/../../config/./pulumi")),
            PathBuf::from("/w/config/pulumi")
        );
    }
}
