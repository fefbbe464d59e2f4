//! `mara ci generate github|gitlab`: the pipeline of a fanned-out run (docs/commands.md, "ci").
//! A job opens the run, one job per project runs it within the run (its `needs:` the graph's
//! edges, reversed for destroy), and a job that always runs closes it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::cli::{CiCommand, CiOperation, CiSystem, GenerateArgs, SelectionArgs};
use crate::deployment::Deployment;
use crate::error::{Error, Problem, Result};
use crate::graph::{Plan, Selection};
use crate::settings::Settings;

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

/// What the pipeline runs, and where every project job comes in.
/// The most jobs GitHub Actions runs in one workflow run.
const GITHUB_MAX_JOBS: usize = 256;

/// The largest workflow file GitHub Actions starts a run of.
const GITHUB_MAX_FILE: usize = 500 * 1024;

struct Pipeline {
    system: CiSystem,
    operation: CiOperation,
    provider: String,
    stack: String,
    /// The selection's own flags, given to `ci open` and `ci close` (`--skip X`, …).
    selection: String,
    /// The projects in the run's order, each with its job's id and the ids it needs.
    jobs: Vec<Job>,
    /// The `MARA_SECRET_*` (and engine) variables the jobs take from the CI's secret store:
    /// the open job all of them (its checks need what a first run needs), a project's job only
    /// its own (`Job::secrets`) and the engines'.
    secrets: BTreeSet<String>,
    /// The engines' secrets every project job gets (`PULUMI_CONFIG_PASSPHRASE`).
    engine_secrets: BTreeSet<String>,
    /// The workspace's directory in the repository (`-C` for every job), empty at its root.
    workspace_dir: String,
    /// `--setup`: what every job runs first.
    setup: Option<String>,
    /// `--file`, as given.
    file: Option<PathBuf>,
    /// `--env`, `--var`: secrets and plain variables for mara's steps.
    env: Vec<String>,
    vars: Vec<String>,
    /// `--oidc`.
    oidc: bool,
    /// `--config-secret NAME`.
    config_secret: Option<String>,
}

struct Job {
    id: String,
    path: String,
    needs: Vec<String>,
    /// The `MARA_SECRET_*` its project declares (the secrets project's job: every one it
    /// stores).
    secrets: BTreeSet<String>,
}

/// What `mara ci generate` is asked for, besides where the file goes: what the file's header
/// records, so that `--check` alone checks the file as it was written.
pub struct Asked {
    pub system: CiSystem,
    pub operation: CiOperation,
    pub setup: Option<String>,
    /// `--env NAME`: secrets of the CI's store for mara's steps.
    pub env: Vec<String>,
    /// `--var NAME`: plain variables for mara's steps.
    pub vars: Vec<String>,
    /// `--oidc`: GitHub's `id-token: write`.
    pub oidc: bool,
    /// `--config-secret NAME`: the stack configuration from a CI secret.
    pub config_secret: Option<String>,
    pub selection: SelectionArgs,
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

impl Asked {
    /// What `ci generate` is asked, and where the file is (`--file`, `--check`): from the
    /// command line, or the command a file's header records.
    pub fn of(args: GenerateArgs) -> (Asked, (Option<PathBuf>, bool)) {
        let GenerateArgs {
            system,
            operation,
            file,
            check,
            setup,
            env,
            vars,
            oidc,
            config_secret,
            selection,
        } = args;
        let asked = Asked {
            system,
            operation,
            setup,
            env,
            vars,
            oidc,
            config_secret,
            selection,
        };
        (asked, (file, check))
    }

    /// What cannot be written: a setup on more than one line or with a backquote (it would break
    /// the file, or its header's record of it), OIDC on GitLab.
    fn refused(&self) -> Result<()> {
        if let Some(setup) = &self.setup
            && setup.contains(['\n', '\r', '`'])
        {
            return Err(Error::usage(
                Problem::new("--setup is one line without a backquote: it is written into the file and its header")
                    .hint("put the commands in a script of the repository and give `--setup 'sh ./ci/setup.sh'`, or join them with `&&` and use $(…)"),
            ));
        }
        if self.oidc && self.system == CiSystem::Gitlab {
            return Err(Error::usage(
                Problem::new(
                    "--oidc is GitHub's: a GitLab job gets its OIDC token from `id_tokens:`",
                )
                .hint("leave it out for GitLab"),
            ));
        }
        Ok(())
    }

    /// Nothing asked but the system (and where the file is): `--check` takes the rest from
    /// the file's header.
    fn is_bare(&self) -> bool {
        self.operation == CiOperation::default()
            && self.setup.is_none()
            && self.env.is_empty()
            && self.vars.is_empty()
            && !self.oidc
            && self.config_secret.is_none()
            && selection_flags(&self.selection).is_empty()
    }
}

/// Where the file is: the `--file` its header records, the file written or checked (`None`:
/// the default one), and whether it is only checked.
struct Where {
    recorded: Option<PathBuf>,
    path: Option<PathBuf>,
    check: bool,
}

pub fn generate(
    settings: &Settings,
    asked: Asked,
    (file, check): (Option<PathBuf>, bool),
) -> Result<()> {
    // `--check` alone: the file is checked against what its header says it was written with.
    if check && asked.is_bare() {
        let here = std::env::current_dir().map_err(|e| Error::read(Path::new("."), e))?;
        let path = match &file {
            Some(file) => Some(here.join(file)),
            None => default_path(settings, asked.system).ok(),
        };
        let written = path.and_then(|p| crate::workspace::read_input(&p).ok());
        if let Some((then, settings_then, recorded)) =
            written.as_deref().and_then(|t| header_asked(t, settings))
            && then.system == asked.system
        {
            let at = Where {
                recorded,
                path: file,
                check,
            };
            return write_or_check(&settings_then, then, at);
        }
    }
    let at = Where {
        recorded: file.clone(),
        path: file,
        check,
    };
    write_or_check(settings, asked, at)
}

/// The file `ci generate` writes by default for `system`, with the operation `up`.
fn default_path(settings: &Settings, system: CiSystem) -> Result<PathBuf> {
    let deployment = Deployment::load(settings)?;
    let stack = deployment.files.required_stack()?;
    let repository = repository_root(&deployment.files.workspace.root);
    Ok(repository.join(default_file(
        system,
        CiOperation::default(),
        stack.name.as_str(),
    )))
}

/// The options the header of a file mara wrote records (its first line's command), the settings
/// with its workspace, stack and provider where this invocation names none, and its `--file`;
/// `None` when the text has no such header.
fn header_asked(text: &str, settings: &Settings) -> Option<(Asked, Settings, Option<PathBuf>)> {
    let line = text.lines().next()?;
    let command = line.strip_prefix("# Written by `")?.split('`').next()?;
    let words = shell_words(command)?;
    let cli = <crate::cli::Cli as clap::Parser>::try_parse_from(words).ok()?;
    let crate::cli::Command::Ci(CiCommand::Generate(args)) = cli.command else {
        return None;
    };
    let (asked, (file, _)) = Asked::of(args);
    let mut settings = settings.clone();
    // The header's `-C` is from the repository's root, where the check runs.
    if let Some(dir) = cli
        .global
        .cwd
        .filter(|_| settings.start_dir == Path::new("."))
    {
        settings.start_dir = dir;
    }
    if settings.stack.is_none() {
        settings.stack = cli.global.stack;
    }
    if let (None, Some(provider)) = (&settings.provider, cli.global.provider) {
        settings.provider = Some((provider, crate::settings::ProviderSource::Flag));
    }
    Some((asked, settings, file))
}

/// A command line as `shell_quoted` writes it, split into its words (single quotes, `'\''`
/// for a quote); `None` for one it does not write.
fn shell_words(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let (mut quoted, mut started) = (false, false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                quoted = !quoted;
                started = true;
            }
            '\\' if !quoted && chars.peek() == Some(&'\'') => {
                word.push('\'');
                chars.next();
            }
            ' ' if !quoted => {
                if started || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                started = false;
            }
            c => word.push(c),
        }
    }
    if quoted {
        return None;
    }
    if started || !word.is_empty() {
        words.push(word);
    }
    Some(words)
}

fn write_or_check(settings: &Settings, asked: Asked, at: Where) -> Result<()> {
    asked.refused()?;
    let Asked {
        system,
        operation,
        setup,
        env,
        vars,
        oidc,
        config_secret,
        selection,
    } = asked;
    let deployment = Deployment::load(settings)?;
    let files = &deployment.files;
    let workspace = &files.workspace;
    let stack = files.required_stack()?;
    let flags = selection_flags(&selection);
    let selection = Selection::from(selection);
    let plan = Plan::select(&deployment.graph, &selection)?;
    // The jobs start at the repository's root: the workspace may be a directory of it.
    let repository = repository_root(&workspace.root);
    let workspace_dir = (workspace.root.strip_prefix(&repository))
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let mut pipeline = pipeline(
        &deployment,
        &plan,
        (system, operation),
        stack.name.as_str(),
        flags,
    );
    // GitHub runs at most 256 jobs per workflow run: the projects, and the open and close jobs.
    if system == CiSystem::Github && pipeline.jobs.len() + 2 > GITHUB_MAX_JOBS {
        return Err(Error::usage(
            Problem::new(format!(
                "a GitHub workflow runs at most {GITHUB_MAX_JOBS} jobs, and this one would have {} ({} projects, and the jobs that open and close the run)",
                pipeline.jobs.len() + 2,
                pipeline.jobs.len()
            ))
            .hint("split the deployment: one workflow per selection (--only, --skip, --from), or use GitLab"),
        ));
    }
    pipeline.workspace_dir = workspace_dir;
    pipeline.setup = setup;
    pipeline.file = at.recorded.clone();
    (pipeline.env, pipeline.vars, pipeline.oidc) = (env, vars, oidc);
    pipeline.config_secret = config_secret;
    let text = match system {
        CiSystem::Github => github(&pipeline),
        CiSystem::Gitlab => gitlab(&pipeline),
    };
    if system == CiSystem::Github && text.len() > GITHUB_MAX_FILE {
        return Err(Error::usage(
            Problem::new(format!(
                "GitHub starts no run of a workflow file over 500 KB, and this one would be {} KB",
                text.len().div_ceil(1024)
            ))
            .hint("split the deployment: one workflow per selection (--only, --skip, --from)"),
        ));
    }
    // A file named on the command line is where mara runs, as `--report` is (`-C` names the
    // workspace, not the file); the default one is in the repository's root, where CI looks.
    let here = std::env::current_dir().map_err(|e| Error::read(std::path::Path::new("."), e))?;
    let path = match &at.path {
        Some(file) => here.join(file),
        None => repository.join(default_file(system, operation, stack.name.as_str())),
    };
    let shown = path
        .strip_prefix(&here)
        .unwrap_or(&path)
        .display()
        .to_string();
    if at.check {
        return checked(&path, &shown, &text, &pipeline, settings.output);
    }
    pipeline.refused_names()?;
    for warning in ignored_inputs(files, &repository, pipeline.config_secret.is_some()) {
        eprintln!("{warning}");
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::write(dir, e))?;
    }
    crate::files::write_atomic(&path, &text, 0o644).map_err(|e| Error::write(&path, e))?;
    wrote(&pipeline, &shown, settings.output)
}

/// What `ci generate` says of the file it wrote (`shown`), for people or as JSON.
fn wrote(pipeline: &Pipeline, shown: &str, output: crate::settings::OutputFormat) -> Result<()> {
    let projects = pipeline.jobs.len();
    if output == crate::settings::OutputFormat::Json {
        let wrote = serde_json::json!({
            "file": shown,
            "system": system_word(pipeline.system),
            "operation": operation_word(pipeline.operation),
            "stack": pipeline.stack,
            "projects": projects,
            "jobs": projects + 2,
            "command": regenerate(pipeline),
        });
        return crate::ui::print(&format!("{wrote:#}\n"));
    }
    crate::ui::print(&format!(
        "Wrote {shown}: {projects} {} of stack {} as {} jobs.\n",
        crate::error::plural(projects, "project", "projects"),
        pipeline.stack,
        projects + 2,
    ))
}

/// `--check`: whether the file at `path` (`shown`) is `text`, what would be written now.
fn checked(
    path: &std::path::Path,
    shown: &str,
    text: &str,
    pipeline: &Pipeline,
    output: crate::settings::OutputFormat,
) -> Result<()> {
    let current = crate::workspace::read_input(path).ok();
    match current.as_deref() == Some(text) {
        true => crate::ui::print(&match output {
            crate::settings::OutputFormat::Json => format!(
                "{:#}\n",
                serde_json::json!({"file": shown, "up_to_date": true, "command": regenerate(pipeline)})
            ),
            crate::settings::OutputFormat::Human => format!("{shown} is up to date.\n"),
        }),
        false => Err(Error::OutOfDate(Box::new(
            Problem::new(match current {
                Some(_) => format!("{shown} no longer matches the provider and its graph"),
                None => format!("{shown} does not exist"),
            })
            .hint(format!("write it again: {}", regenerate(pipeline))),
        ))),
    }
}

/// What the runners' checkouts will lack: the stack configuration or the environment file, when
/// git ignores them (as many Pulumi repositories do), said with how the pipeline gets them.
fn ignored_inputs(
    files: &crate::deployment::StackFiles,
    repository: &std::path::Path,
    config_secret: bool,
) -> Vec<String> {
    let workspace = &files.workspace;
    let mut found = Vec::new();
    let stack = files.stack.as_ref();
    // With `--config-secret`, the pipeline has its own way to the stack configuration.
    let config = (stack.filter(|_| !config_secret)).map(|s| workspace.stack_config_file(&s.name));
    for (file, what, how) in [
        (
            config,
            "the stack configuration",
            "keep it in a CI secret (a GitLab file variable, a GitHub secret) and generate with `--config-secret NAME`: the open job gives it to `mara ci open --config`, and the run carries it to every job",
        ),
        (
            Some(workspace.env_file()),
            "the environment file",
            "set what it holds as the pipeline's variables (`--var NAME`, `--env NAME` for a secret): the run carries what the opening runner's has",
        ),
    ] {
        let Some(file) = file else { continue };
        let ignored = std::process::Command::new("git")
            .args(["check-ignore", "-q"])
            .arg(&file)
            .current_dir(repository)
            .status()
            .is_ok_and(|s| s.success());
        if ignored {
            found.push(format!(
                "warning: {} ({what}) is ignored by git: the runners' checkouts will not have it; {how}",
                workspace.display(&file).display()
            ));
        }
    }
    found
}

/// The repository `dir` is in (the nearest directory above it with `.git`), else `dir`.
fn repository_root(dir: &std::path::Path) -> PathBuf {
    dir.ancestors()
        .find(|d| d.join(".git").exists())
        .unwrap_or(dir)
        .to_path_buf()
}

/// `.github/workflows/mara-dev-up.yml`, `mara-dev-up.gitlab-ci.yml` (for a parent pipeline to
/// include, or to be the project's `.gitlab-ci.yml`).
fn default_file(system: CiSystem, operation: CiOperation, stack: &str) -> PathBuf {
    let operation = operation_word(operation);
    match system {
        CiSystem::Github => {
            PathBuf::from(format!(".github/workflows/mara-{stack}-{operation}.yml"))
        }
        CiSystem::Gitlab => PathBuf::from(format!("mara-{stack}-{operation}.gitlab-ci.yml")),
    }
}

fn operation_word(operation: CiOperation) -> &'static str {
    match operation {
        CiOperation::Up => "up",
        CiOperation::Preview => "preview",
        CiOperation::Refresh => "refresh",
        CiOperation::Destroy => "destroy",
    }
}

fn system_word(system: CiSystem) -> &'static str {
    match system {
        CiSystem::Github => "github",
        CiSystem::Gitlab => "gitlab",
    }
}

/// The selection as flags, for the open and close commands and the file's header.
fn selection_flags(selection: &SelectionArgs) -> String {
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
fn command_args(pipeline: &Pipeline) -> String {
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
    args.extend(pipeline.env.iter().map(|name| format!("--env {name}")));
    args.extend(pipeline.vars.iter().map(|name| format!("--var {name}")));
    if pipeline.oidc {
        args.push("--oidc".into());
    }
    if let Some(name) = &pipeline.config_secret {
        args.push(format!("--config-secret {name}"));
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
fn regenerate(pipeline: &Pipeline) -> String {
    format!("{} ci generate {}", mara(pipeline), command_args(pipeline))
}

/// `text` as one shell word, quoted only when it needs it.
fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && (text.chars()).all(|c| c.is_ascii_alphanumeric() || "-_./:=@,+%".contains(c));
    match plain {
        true => text.to_string(),
        false => shell_quoted(text),
    }
}

/// `text` as one shell word.
fn shell_quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// The engines' own secrets the jobs of `order` need: Pulumi's passphrase, with the passphrase
/// secrets provider.
fn engine_secrets(deployment: &Deployment, order: &[usize]) -> BTreeSet<String> {
    let settings = &deployment.files.workspace.settings;
    let graph = &deployment.graph;
    let pulumi = (order.iter())
        .any(|&i| graph.project(i).engine_or(settings.engine) == crate::engine::EngineKind::Pulumi);
    let passphrase = settings
        .pulumi
        .secrets_provider
        .as_deref()
        .unwrap_or("passphrase")
        == "passphrase";
    match pulumi && passphrase {
        true => BTreeSet::from(["PULUMI_CONFIG_PASSPHRASE".to_string()]),
        false => BTreeSet::new(),
    }
}

fn pipeline(
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
    // Job ids: the path, in the characters both systems take, unique.
    let mut ids: BTreeMap<usize, String> = BTreeMap::new();
    let mut taken = BTreeSet::from(["mara-open".to_string(), "mara-close".to_string()]);
    for &i in &order {
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
    let settings = &deployment.files.workspace.settings;
    let secrets_project = &settings.secrets_project;
    // The secrets project stores every project's secrets, selected or not: the open job's checks
    // and its job need them all.
    let all_secrets: BTreeSet<String> = (0..graph.len())
        .flat_map(|i| graph.project(i).secrets.iter().map(|s| s.env_var()))
        .collect();
    let jobs = order
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
            let secrets = match &project.path == secrets_project {
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
        .collect();
    let engine_secrets = engine_secrets(deployment, &order);
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
        workspace_dir: String::new(),
        setup: None,
        file: None,
        env: Vec::new(),
        vars: Vec::new(),
        oidc: false,
        config_secret: None,
    }
}

fn header(pipeline: &Pipeline) -> String {
    format!(
        "# Written by `{}` (from the repository's root):\n\
         # one job per project of provider {}, stack {}.\n\
         # Do not edit it: write it again when the provider changes (`mara ci generate … --check`\n\
         # fails while it is out of date). The ledger's URL and the secrets come from the CI's\n\
         # secret store; mara, and the engines, must be on the runners' PATH.\n",
        regenerate(pipeline),
        pipeline.provider,
        pipeline.stack,
    )
}

/// `mara`, in the workspace's directory of the repository.
fn mara(pipeline: &Pipeline) -> String {
    match pipeline.workspace_dir.is_empty() {
        true => "mara".into(),
        false => format!("mara -C {}", shell_quoted(&pipeline.workspace_dir)),
    }
}

/// The `mara` command lines of the three kinds of job.
fn open_command(pipeline: &Pipeline) -> String {
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

fn project_command(pipeline: &Pipeline, path: &str) -> String {
    // Only what changes something is confirmed.
    let yes = match pipeline.operation {
        CiOperation::Up | CiOperation::Destroy => " --yes",
        CiOperation::Preview | CiOperation::Refresh => "",
    };
    format!(
        "{} {} --only {path} --run \"$MARA_RUN\"{yes}",
        mara(pipeline),
        operation_word(pipeline.operation)
    )
}

fn close_command(pipeline: &Pipeline, extra: &str) -> String {
    format!("{} ci close --run \"$MARA_RUN\"{extra}", mara(pipeline))
}

fn with_selection(command: String, pipeline: &Pipeline) -> String {
    match pipeline.selection.is_empty() {
        true => command,
        false => format!("{command} {}", pipeline.selection),
    }
}

/// A YAML double-quoted string.
fn quoted(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

/// A workflow's header, trigger, permissions, concurrency and variables.
fn github_head(pipeline: &Pipeline) -> String {
    let mut out = header(pipeline);
    let operation = operation_word(pipeline.operation);
    // `--oidc`: the token a cloud login action asks GitHub for, and nothing more.
    let id_token = match pipeline.oidc {
        true => "  id-token: write\n",
        false => "",
    };
    out.push_str(&format!(
        "name: mara {operation} {}\n\non:\n  workflow_dispatch: {{}}\n\npermissions:\n  contents: read\n{id_token}\n",
        pipeline.stack
    ));
    out.push_str(&format!(
        "# One fanned-out run of the stack at a time; mara's lease guards it across workflows too.\nconcurrency:\n  group: mara-{}\n  cancel-in-progress: false\n\n",
        pipeline.stack
    ));
    out.push_str("env:\n");
    out.push_str(&format!(
        "  MARA_PROVIDER: {}\n",
        quoted(&pipeline.provider)
    ));
    out.push_str(&format!("  MARA_STACK: {}\n", quoted(&pipeline.stack)));
    // A workflow run's id is unique across GitHub.
    out.push_str("  MARA_RUN: gh-${{ github.run_id }}-${{ github.run_attempt }}\n");
    out
}

fn github(pipeline: &Pipeline) -> String {
    let mut out = github_head(pipeline);
    // The secrets reach mara's own step only: not the checkout, not the setup; and each job's
    // only those it needs.
    // The engines' credentials (`--env`, `--var`) go to the jobs that run engines, not the close.
    let secrets = |names: &BTreeSet<String>, credentials: bool| {
        let mut env = String::from(
            "        env:\n          MARA_LEDGER_URL: ${{ secrets.MARA_LEDGER_URL }}\n",
        );
        let (env_names, var_names): (&[String], &[String]) = match credentials {
            true => (&pipeline.env, &pipeline.vars),
            false => (&[], &[]),
        };
        for secret in names.iter().chain(env_names) {
            env.push_str(&format!(
                "          {secret}: ${{{{ secrets.{secret} }}}}\n"
            ));
        }
        for var in var_names {
            env.push_str(&format!("          {var}: ${{{{ vars.{var} }}}}\n"));
        }
        env
    };
    out.push_str("\njobs:\n");
    let job = |out: &mut String,
               (id, name): (&str, &str),
               needs: &[String],
               always: bool,
               run: &str,
               names: &BTreeSet<String>| {
        out.push_str(&format!("  {id}:\n    name: {}\n", quoted(name)));
        if !needs.is_empty() {
            out.push_str(&format!("    needs: [{}]\n", needs.join(", ")));
        }
        if always {
            out.push_str("    if: ${{ always() }}\n");
        }
        out.push_str("    runs-on: ubuntu-latest\n    steps:\n      - uses: actions/checkout@v4\n");
        if let Some(setup) = &pipeline.setup {
            out.push_str(&format!("      - run: {}\n", quoted(setup)));
        }
        out.push_str(&format!(
            "      - run: {}\n{}",
            quoted(run),
            secrets(names, id != "mara-close")
        ));
    };
    let open = ("mara-open", "open the run");
    let mut open_secrets = pipeline.secrets.clone();
    open_secrets.extend(pipeline.config_secret.clone());
    job(
        &mut out,
        open,
        &[],
        false,
        &open_command(pipeline),
        &open_secrets,
    );
    for j in &pipeline.jobs {
        out.push('\n');
        let run = project_command(pipeline, &j.path);
        job(
            &mut out,
            (&j.id, &j.path),
            &j.needs,
            false,
            &run,
            &pipeline.job_secrets(j),
        );
    }
    out.push('\n');
    let mut all: Vec<String> = vec!["mara-open".into()];
    all.extend(pipeline.jobs.iter().map(|j| j.id.clone()));
    let close = ("mara-close", "close the run");
    job(
        &mut out,
        close,
        &all,
        true,
        &close_command(pipeline, ""),
        &BTreeSet::new(),
    );
    out
}

impl Pipeline {
    /// `--env` and `--var` names each given once, and none mara gives the jobs itself.
    fn refused_names(&self) -> Result<()> {
        let mut seen = BTreeSet::new();
        let mut problems = Vec::new();
        for name in self.env.iter().chain(&self.vars) {
            if !seen.insert(name) {
                problems.push(Problem::new(format!(
                    "{name} is given twice (--env, --var)"
                )));
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
    fn job_secrets(&self, j: &Job) -> BTreeSet<String> {
        j.secrets.union(&self.engine_secrets).cloned().collect()
    }

    /// The secrets the job `j` must not see, which GitLab gives every job: unset first.
    fn withheld(&self, j: &Job) -> Vec<String> {
        self.secrets
            .difference(&self.job_secrets(j))
            .cloned()
            .collect()
    }
}

fn gitlab(pipeline: &Pipeline) -> String {
    let mut out = header(pipeline);
    out.push_str("\nstages: [mara-open, mara-projects, mara-close]\n\n");
    out.push_str("variables:\n");
    out.push_str(&format!(
        "  MARA_PROVIDER: {}\n",
        quoted(&pipeline.provider)
    ));
    out.push_str(&format!("  MARA_STACK: {}\n", quoted(&pipeline.stack)));
    // Project and pipeline ids are an instance's own: two GitLabs sharing a ledger have both.
    out.push_str("  MARA_RUN: gl-$CI_SERVER_HOST-$CI_PROJECT_ID-$CI_PIPELINE_ID\n");
    let names: Vec<&str> = (pipeline
        .secrets
        .iter()
        .chain(&pipeline.env)
        .chain(&pipeline.vars))
    .map(String::as_str)
    .collect();
    out.push_str(&format!(
        "# MARA_LEDGER_URL{} are the project's CI/CD variables (protected; masked where GitLab\n# can mask them).\n",
        names.iter().map(|n| format!(", {n}")).collect::<String>()
    ));
    if let Some(setup) = &pipeline.setup {
        out.push_str(&format!(
            "\ndefault:\n  before_script:\n    - {}\n",
            quoted(setup)
        ));
    }
    out.push_str(&format!(
        "\nmara-open:\n  stage: mara-open\n  script:\n    - {}\n",
        quoted(&open_command(pipeline))
    ));
    // Every project job runs, even after a failure: mara skips a project whose dependency did not
    // succeed, recording why, and ends at once in a cancelled run; so each job ends, and the
    // close job after them records the run as it went. A job that skipped its project exits 7,
    // which GitLab shows as a warning, not as a success (docs/commands.md, "ci").
    // GitLab gives every job every CI/CD variable: a project's job unsets the secrets that are
    // not its own before anything runs — its own setup included, which then comes after.
    for j in &pipeline.jobs {
        let withheld = pipeline.withheld(j);
        let unset = match withheld.is_empty() {
            true => String::new(),
            false => format!(
                "    - {}\n",
                quoted(&format!("unset {}", withheld.join(" ")))
            ),
        };
        let first = match (&pipeline.setup, unset.is_empty()) {
            (Some(setup), false) => format!("  before_script:\n{unset}    - {}\n", quoted(setup)),
            _ => String::new(),
        };
        let unset = if first.is_empty() {
            unset
        } else {
            String::new()
        };
        out.push_str(&format!(
            "\n{}:\n  stage: mara-projects\n  needs: [{}]\n  when: always\n  allow_failure:\n    exit_codes: [7]\n{first}  script:\n{unset}    - {}\n",
            j.id,
            j.needs.join(", "),
            quoted(&project_command(pipeline, &j.path))
        ));
    }
    let withheld: Vec<&str> = pipeline.secrets.iter().map(String::as_str).collect();
    let unset = match withheld.is_empty() {
        true => String::new(),
        false => format!(
            "    - {}\n",
            quoted(&format!("unset {}", withheld.join(" ")))
        ),
    };
    out.push_str(&format!(
        "\nmara-close:\n  stage: mara-close\n  when: always\n  script:\n{unset}    - {}\n  artifacts:\n    when: always\n    paths: [mara-report.json]\n    reports:\n      junit: mara-junit.xml\n",
        quoted(&close_command(pipeline, " --report mara-report.json --junit mara-junit.xml"))
    ));
    out
}
