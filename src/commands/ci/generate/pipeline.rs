//! The pipeline of a fanned-out run as data (`Pipeline`): its jobs in the run's order, what each
//! needs and which secrets it gets, and the `mara` command line each runs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::cli::{CiOperation, CiSystem, CiTrigger, SelectionArgs};
use crate::deployment::Deployment;
use crate::error::{Error, Problem, Result};
use crate::graph::{ExecutionGraph, Plan};

/// What a GitLab pipeline's top level means by itself, and GitLab's Pages job.
const RESERVED: &[&str] = &[
    "default",
    "include",
    "stages",
    "variables",
    "workflow",
    "image",
    "services",
    "cache",
    "before_script",
    "after_script",
    "types",
    "pages",
];

pub(super) struct Pipeline {
    pub(super) system: CiSystem,
    pub(super) operation: CiOperation,
    pub(super) provider: String,
    pub(super) stack: String,
    /// The selection's own flags, given to `ci open` and `ci close` (`--skip X`, …).
    pub(super) selection: String,
    /// The projects in the run's order, each with its job's id and the ids it needs.
    pub(super) jobs: Vec<Job>,
    /// The `MARA_SECRET_*` (and engine) variables the jobs take from the CI's secret store:
    /// the open job all of them (its checks need what a first run needs), a project's job only
    /// its own (`Job::secrets`) and the engines'.
    pub(super) secrets: BTreeSet<String>,
    /// The engines' secrets every project job gets (`PULUMI_CONFIG_PASSPHRASE`, the provider's
    /// tokens).
    pub(super) engine_secrets: BTreeSet<String>,
    /// The provider's tokens (`DIGITALOCEAN_TOKEN`): each variable with the key whose question
    /// names it. Its engines read it on every run, so the pipeline maps it from the CI's secret
    /// store into the open and project jobs, as it does the passphrase (docs/decisions.md,
    /// "Generated pipelines").
    pub(super) tokens: Vec<(String, String)>,
    /// The workspace's directory in the repository (`-C` for every job), empty at its root.
    pub(super) workspace_dir: String,
    /// `--setup`: what every job runs first.
    pub(super) setup: Option<String>,
    /// `--install`: the release of mara every job installs, before its setup.
    pub(super) install: Option<super::install::Install>,
    /// The engines the selected projects use (`pulumi`, `terraform`): what the runners need.
    pub(super) engines: Vec<String>,
    /// `--file`, as given.
    pub(super) file: Option<PathBuf>,
    /// `--env`, `--var`: secrets and plain variables for mara's steps.
    pub(super) env: Vec<String>,
    pub(super) vars: Vec<String>,
    /// `--oidc`.
    pub(super) oidc: bool,
    /// `--config-secret NAME`.
    pub(super) config_secret: Option<String>,
    /// `--on pull-request`: a preview of each pull request, its summary posted on it.
    pub(super) on: Option<CiTrigger>,
    /// `--schedule CRON`: run on a schedule too.
    pub(super) schedule: Option<String>,
    /// Where the file is in the repository: what tells its pull-request comment from another
    /// workflow's.
    pub(super) in_repository: String,
}

pub(super) struct Job {
    pub(super) id: String,
    pub(super) path: String,
    pub(super) needs: Vec<String>,
    /// The `MARA_SECRET_*` its project declares (the secrets project's job: every one it
    /// stores).
    pub(super) secrets: BTreeSet<String>,
}

/// Variables mara itself gives the jobs: not for `--env` or `--var`.
const MARAS_OWN: [&str; 6] = [
    "MARA_LEDGER_URL",
    "MARA_RUN",
    "MARA_STACK",
    "MARA_PROVIDER",
    "PATH",
    "HOME",
];

pub(super) fn operation_word(operation: CiOperation) -> &'static str {
    match operation {
        CiOperation::Up => "up",
        CiOperation::Preview => "preview",
        CiOperation::Refresh => "refresh",
        CiOperation::Destroy => "destroy",
        CiOperation::Drift => "drift",
    }
}

pub(super) fn system_word(system: CiSystem) -> &'static str {
    match system {
        CiSystem::Github => "github",
        CiSystem::Gitlab => "gitlab",
    }
}

/// The selection as flags, for the open and close commands and the file's header.
pub(super) fn selection_flags(selection: &SelectionArgs) -> String {
    let mut flags = Vec::new();
    for only in &selection.only {
        flags.push(format!("--only {only}"));
    }
    for skip in &selection.skip {
        flags.push(format!("--skip {skip}"));
    }
    if let Some(from) = &selection.from {
        flags.push(format!("--from {from}"));
    }
    if selection.with_dependencies {
        flags.push("--with-dependencies".into());
    }
    if selection.with_dependents {
        flags.push("--with-dependents".into());
    }
    flags.join(" ")
}

/// The arguments of `mara ci generate` that write this pipeline again.
pub(super) fn command_args(pipeline: &Pipeline) -> String {
    let mut args = vec![
        system_word(pipeline.system).to_string(),
        format!("--operation {}", operation_word(pipeline.operation)),
        format!("--provider {}", pipeline.provider),
        format!("--stack {}", pipeline.stack),
    ];
    if !pipeline.selection.is_empty() {
        args.push(pipeline.selection.clone());
    }
    if let Some(setup) = &pipeline.setup {
        args.push(format!("--setup {}", shell_quoted(setup)));
    }
    if let Some(install) = &pipeline.install {
        let flags = install.flags().into_iter();
        args.extend(flags.map(|(flag, value)| format!("{flag} {}", shell_word(value))));
    }
    args.extend(pipeline.env.iter().map(|name| format!("--env {name}")));
    args.extend(pipeline.vars.iter().map(|name| format!("--var {name}")));
    if pipeline.oidc {
        args.push("--oidc".into());
    }
    if let Some(name) = &pipeline.config_secret {
        args.push(format!("--config-secret {name}"));
    }
    if let Some(schedule) = &pipeline.schedule {
        args.push(format!("--schedule {}", shell_quoted(schedule)));
    }
    if pipeline.on == Some(CiTrigger::PullRequest) {
        args.push(match pipeline.system {
            CiSystem::Github => "--on pull-request".into(),
            CiSystem::Gitlab => "--on merge-request".into(),
        });
    }
    if let Some(file) = &pipeline.file {
        args.push(format!(
            "--file {}",
            shell_word(&file.display().to_string())
        ));
    }
    args.join(" ")
}

/// The command that writes the pipeline again, from the repository's root.
pub(super) fn regenerate(pipeline: &Pipeline) -> String {
    format!("{} ci generate {}", mara(pipeline), command_args(pipeline))
}

/// `text` as one shell word, quoted only when it needs it.
pub(super) fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && (text.chars()).all(|c| c.is_ascii_alphanumeric() || "-_./:=@,+%".contains(c));
    match plain {
        true => text.to_string(),
        false => shell_quoted(text),
    }
}

/// `text` as one shell word.
pub(super) fn shell_quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// The engines' own secrets the jobs of `order` need: Pulumi's passphrase, with the passphrase
/// secrets provider.
pub(super) fn engine_secrets(deployment: &Deployment, order: &[usize]) -> BTreeSet<String> {
    let settings = &deployment.files.workspace.settings;
    let graph = &deployment.graph;
    let provider = settings.pulumi.secrets_provider.as_deref();
    let passphrase = (order.iter())
        .any(|&i| (graph.project(i).engine_or(settings.engine)).needs_passphrase(provider));
    match passphrase {
        true => BTreeSet::from(["PULUMI_CONFIG_PASSPHRASE".to_string()]),
        false => BTreeSet::new(),
    }
}

/// Each project's job id: its path, in the characters both systems take, unique.
fn job_ids(graph: &crate::graph::ExecutionGraph, order: &[usize]) -> BTreeMap<usize, String> {
    let mut ids: BTreeMap<usize, String> = BTreeMap::new();
    let mut taken = BTreeSet::from(["mara-open".to_string(), "mara-close".to_string()]);
    for &i in order {
        let base: String = graph
            .project(i)
            .path
            .chars()
            .map(|c| match c {
                'a'..='z' | 'A'..='Z' | '0'..='9' | '_' | '-' => c.to_ascii_lowercase(),
                _ => '-',
            })
            .collect();
        // GitHub's job ids start with a letter or `_`; GitLab's top-level keywords and its
        // `pages` job are not project jobs.
        let base = match base.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && !RESERVED.contains(&base.as_str())
        {
            true => base,
            false => format!("project-{base}"),
        };
        let mut id = base.clone();
        let mut n = 2;
        while !taken.insert(id.clone()) {
            id = format!("{base}-{n}");
            n += 1;
        }
        ids.insert(i, id);
    }
    ids
}

/// One job per project of `order`, each needing the jobs of the projects it comes after (before,
/// for a destroy) — the open job when none —, with the secrets it gets (the secrets project all).
fn jobs(
    graph: &ExecutionGraph,
    (order, ids): (&[usize], &BTreeMap<usize, String>),
    destroy: bool,
    (secrets_project, all_secrets): (&str, &BTreeSet<String>),
) -> Vec<Job> {
    order
        .iter()
        .map(|&i| {
            let first = match destroy {
                true => graph.successors(i),
                false => graph.predecessors(i),
            };
            let mut needs: Vec<String> = first
                .into_iter()
                .filter_map(|(d, _)| ids.get(&d).cloned())
                .collect();
            needs.sort();
            needs.dedup();
            if needs.is_empty() {
                needs.push("mara-open".into());
            }
            let project = graph.project(i);
            let secrets = match project.path == secrets_project {
                true => all_secrets.clone(),
                false => project.secrets.iter().map(|s| s.env_var()).collect(),
            };
            Job {
                id: ids[&i].clone(),
                path: project.path.clone(),
                needs,
                secrets,
            }
        })
        .collect()
}

pub(super) fn pipeline(
    deployment: &Deployment,
    plan: &Plan<'_>,
    (system, operation): (CiSystem, CiOperation),
    stack: &str,
    selection: String,
) -> Pipeline {
    let graph = &deployment.graph;
    let destroy = operation == CiOperation::Destroy;
    let order: Vec<usize> = match destroy {
        true => plan.reverse_order().collect(),
        false => plan.order().to_vec(),
    };
    let ids = job_ids(graph, &order);
    let settings = &deployment.files.workspace.settings;
    let secrets_project = &settings.secrets_project;
    // The secrets project stores every project's secrets, selected or not: the open job's checks
    // and its job need them all.
    let all_secrets: BTreeSet<String> = (0..graph.len())
        .flat_map(|i| graph.project(i).secrets.iter().map(|s| s.env_var()))
        .collect();
    let jobs = jobs(
        graph,
        (&order, &ids),
        destroy,
        (secrets_project, &all_secrets),
    );
    let tokens: Vec<(String, String)> = (deployment.provider.tokens())
        .map(|(variable, spec)| (variable.to_string(), spec.key.clone()))
        .collect();
    let mut engine_secrets = engine_secrets(deployment, &order);
    engine_secrets.extend(tokens.iter().map(|(variable, _)| variable.clone()));
    let mut secrets = all_secrets;
    secrets.extend(engine_secrets.iter().cloned());
    Pipeline {
        system,
        operation,
        provider: deployment.provider.name.clone(),
        stack: stack.to_string(),
        selection,
        jobs,
        secrets,
        engine_secrets,
        tokens,
        workspace_dir: String::new(),
        setup: None,
        install: None,
        engines: engines(deployment, &order),
        file: None,
        env: Vec::new(),
        vars: Vec::new(),
        oidc: false,
        config_secret: None,
        on: None,
        schedule: None,
        in_repository: String::new(),
    }
}

pub(super) fn header(pipeline: &Pipeline) -> String {
    let mut header = format!(
        "# Written by `{}` (from the repository's root):\n\
         # one job per project of provider {}, stack {}.\n\
         # Do not edit it: write it again when the provider changes (`mara ci generate … --check`\n\
         # fails while it is out of date). The ledger's URL and the secrets come from the CI's\n\
         # secret store.\n",
        regenerate(pipeline),
        pipeline.provider,
        pipeline.stack,
    );
    header.push_str(&runners_need(pipeline));
    // The provider's tokens are in the file without being asked for: say so.
    for (variable, key) in &pipeline.tokens {
        header.push_str(&format!(
            "# Provider {}'s engines read {variable} (`{key}`) on every run:\n\
             # the open and project jobs take it from the CI's secret store too.\n",
            pipeline.provider
        ));
    }
    header
}

/// What the runners must have: mara (unless the jobs install it) and the selected projects'
/// engines, on `PATH`.
fn runners_need(pipeline: &Pipeline) -> String {
    let engines = match pipeline.engines.as_slice() {
        [] => String::new(),
        names => format!(" and {}", names.join(", ")),
    };
    match &pipeline.install {
        Some(install) => format!(
            "# {}; the runners must have{} on PATH{}.\n",
            install.said(),
            match engines.is_empty() {
                true => " nothing else".to_string(),
                false => engines.trim_start_matches(" and").to_string(),
            },
            match install.from.is_some() {
                true => ", and curl, sha256sum and tar",
                false => "",
            },
        ),
        None => format!(
            "# The runners must have on PATH: mara {} or newer (`--install VERSION` installs it){engines}.\n",
            env!("CARGO_PKG_VERSION")
        ),
    }
}

/// The engines the projects in `order` use, by the program each runs (none for a shell step).
fn engines(deployment: &Deployment, order: &[usize]) -> Vec<String> {
    let settings = &deployment.files.workspace.settings;
    let programs = crate::engine::Programs {
        pulumi: &settings.pulumi.binary,
    };
    let mut names: Vec<String> = (order.iter())
        .filter_map(|&i| {
            let engine = deployment.graph.project(i).engine_or(settings.engine);
            engine.program(&programs)
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// What every job runs before mara: the install, then the setup (`--install`, `--setup`).
pub(super) fn setup_line(pipeline: &Pipeline) -> Option<String> {
    let install = pipeline.install.as_ref().map(super::install::Install::line);
    match (install, &pipeline.setup) {
        (Some(install), Some(setup)) => Some(format!("{install} && {setup}")),
        (Some(install), None) => Some(install),
        (None, setup) => setup.clone(),
    }
}

/// `mara`, in the workspace's directory of the repository.
pub(super) fn mara(pipeline: &Pipeline) -> String {
    match pipeline.workspace_dir.is_empty() {
        true => "mara".into(),
        false => format!("mara -C {}", shell_quoted(&pipeline.workspace_dir)),
    }
}

/// The `mara` command lines of the three kinds of job.
pub(super) fn open_command(pipeline: &Pipeline) -> String {
    // The stack configuration from a CI secret: a GitLab file variable is a path; a GitHub
    // secret is the file's text, written to the runner's temporary directory first.
    let (before, config) = match (&pipeline.config_secret, pipeline.system) {
        (None, _) => (String::new(), String::new()),
        (Some(name), CiSystem::Gitlab) => (String::new(), format!(" --config \"${name}\"")),
        (Some(name), CiSystem::Github) => (
            format!("printf '%s\\n' \"${name}\" > \"$RUNNER_TEMP/mara-stack-config.yaml\" && "),
            " --config \"$RUNNER_TEMP/mara-stack-config.yaml\"".to_string(),
        ),
    };
    with_selection(
        format!(
            "{before}{} ci open --run \"$MARA_RUN\" --operation {}{config}",
            mara(pipeline),
            operation_word(pipeline.operation)
        ),
        pipeline,
    )
}

pub(super) fn project_command(pipeline: &Pipeline, path: &str) -> String {
    // Only what changes something is confirmed; a preview shows the properties that change,
    // for the run's summary.
    let yes = match pipeline.operation {
        CiOperation::Up | CiOperation::Destroy => " --yes",
        CiOperation::Preview | CiOperation::Drift => " --diff",
        CiOperation::Refresh => "",
    };
    format!(
        "{} {} --only {path} --run \"$MARA_RUN\"{yes}",
        mara(pipeline),
        operation_word(pipeline.operation)
    )
}

/// The close job's command, with `reports` (`--report FILE`, …); a preview's summary is written
/// for a pull request's comment too.
pub(super) fn close_command(pipeline: &Pipeline, reports: &str) -> String {
    let markdown = match pipeline.operation {
        CiOperation::Preview => format!(" --markdown {PREVIEW_FILE}"),
        _ => String::new(),
    };
    format!(
        "{} ci close --run \"$MARA_RUN\"{reports}{markdown}",
        mara(pipeline)
    )
}

/// Where the close job of a preview writes its summary as Markdown.
pub(super) const PREVIEW_FILE: &str = "mara-preview.md";

pub(super) fn with_selection(command: String, pipeline: &Pipeline) -> String {
    match pipeline.selection.is_empty() {
        true => command,
        false => format!("{command} {}", pipeline.selection),
    }
}

/// A YAML double-quoted string.
pub(super) fn quoted(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

impl Pipeline {
    /// `--env` and `--var` names each given once, and none mara gives the jobs itself.
    pub(super) fn refused_names(&self) -> Result<()> {
        let mut seen = BTreeSet::new();
        let mut problems = Vec::new();
        for name in self.env.iter().chain(&self.vars) {
            if !seen.insert(name) {
                problems.push(Problem::new(format!(
                    "{name} is given twice (--env, --var)"
                )));
            } else if let Some((_, key)) = self.tokens.iter().find(|(v, _)| v == name) {
                problems.push(
                    Problem::new(format!(
                        "{name} is provider {}'s token (`{key}`): the pipeline gives it to the jobs already",
                        self.provider
                    ))
                    .hint(format!("leave out --env {name}: the open and project jobs take it from the CI's secret store")),
                );
            } else if MARAS_OWN.contains(&name.as_str()) || self.secrets.contains(name) {
                problems.push(
                    Problem::new(format!("{name} is one mara gives the jobs itself"))
                        .hint("leave it out: the pipeline takes it from the CI's store already"),
                );
            }
        }
        match problems.is_empty() {
            true => Ok(()),
            false => Err(Error::UsageProblems(problems)),
        }
    }

    /// The secrets the job `j` gets: its project's, and the engines'.
    pub(super) fn job_secrets(&self, j: &Job) -> BTreeSet<String> {
        j.secrets.union(&self.engine_secrets).cloned().collect()
    }

    /// The secrets the job `j` must not see, which GitLab gives every job: unset first.
    pub(super) fn withheld(&self, j: &Job) -> Vec<String> {
        self.secrets
            .difference(&self.job_secrets(j))
            .cloned()
            .collect()
    }
}
