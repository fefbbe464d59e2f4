//! `mara ci generate github|gitlab`: the pipeline of a fanned-out run (docs/commands.md, "ci").
//! A job opens the run, one job per project runs it within the run (its `needs:` the graph's
//! edges, reversed for destroy), and a job that always runs closes it.

mod github;
mod gitlab;
mod install;
mod pipeline;

use std::path::{Path, PathBuf};

use crate::cli::{CiCommand, CiOperation, CiSystem, CiTrigger, GenerateArgs, SelectionArgs};
use crate::deployment::Deployment;
use crate::error::{Error, Problem, Result};
use crate::graph::{Plan, Selection};
use crate::settings::Settings;
use github::{GITHUB_MAX_FILE, GITHUB_MAX_JOBS};
use pipeline::{Pipeline, operation_word, regenerate, selection_flags, system_word};

/// What `mara ci generate` is asked for, besides where the file goes: what the file's header
/// records, so that `--check` alone checks the file as it was written.
pub struct Asked {
    pub system: CiSystem,
    pub operation: CiOperation,
    pub setup: Option<String>,
    /// `--install VERSION`, `--install-from URL`: every job installs mara first.
    pub install: (Option<String>, Option<String>),
    /// `--env NAME`: secrets of the CI's store for mara's steps.
    pub env: Vec<String>,
    /// `--var NAME`: plain variables for mara's steps.
    pub vars: Vec<String>,
    /// `--oidc`: GitHub's `id-token: write`.
    pub oidc: bool,
    /// `--config-secret NAME`: the stack configuration from a CI secret.
    pub config_secret: Option<String>,
    /// `--on pull-request`.
    pub on: Option<CiTrigger>,
    /// `--schedule CRON`.
    pub schedule: Option<String>,
    pub selection: SelectionArgs,
}

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
            install,
            install_from,
            env,
            vars,
            oidc,
            config_secret,
            on,
            schedule,
            selection,
        } = args;
        let asked = Asked {
            system,
            operation,
            setup,
            install: (install, install_from),
            env,
            vars,
            oidc,
            config_secret,
            on,
            schedule,
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
        install::Install::asked(self.install.0.clone(), self.install.1.clone())?;
        if self.on == Some(CiTrigger::PullRequest) && self.operation != CiOperation::Preview {
            return Err(Error::usage(
                Problem::new(format!(
                    "--on pull-request is for a preview: {} of a pull request's code would change the stack before the code is reviewed and merged",
                    match self.operation {
                        CiOperation::Up => "an up",
                        CiOperation::Refresh => "a refresh",
                        CiOperation::Drift => "a drift check",
                        _ => "a destroy",
                    }
                ))
                .hint(format!("generate `--operation preview --on pull-request` for pull requests, and the {} on its own (run by hand, or from the default branch's pipeline)", operation_word(self.operation))),
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
            && self.install.0.is_none()
            && self.env.is_empty()
            && self.vars.is_empty()
            && !self.oidc
            && self.config_secret.is_none()
            && self.on.is_none()
            && self.schedule.is_none()
            && selection_flags(&self.selection).is_empty()
    }
}

/// Where the file is: the `--file` its header records, from the repository's root (`Some`: the
/// options are the header's), the file written or checked, as given on the command line or found
/// (`None`: the default one), and whether it is only checked.
struct Where {
    recorded: Option<Option<PathBuf>>,
    path: Option<PathBuf>,
    check: bool,
}

pub fn generate(
    settings: &Settings,
    asked: Asked,
    (file, check): (Option<PathBuf>, bool),
) -> Result<()> {
    // A check takes the workspace, stack and provider from the file's header where this
    // invocation names none; `--check` alone, every option too.
    if check && (file.is_some() || asked.is_bare()) {
        let here = std::env::current_dir().map_err(|e| Error::read(Path::new("."), e))?;
        let path = match &file {
            Some(file) => here.join(file),
            None => match default_path(settings, asked.system) {
                Ok(path) => path,
                // No workspace here (the repository's root, above it): the one pipeline of
                // this system mara wrote at the root, by its default name.
                Err(error) => written_default(&here, asked.system, error)?,
            },
        };
        let written = crate::workspace::read_input(&path).ok();
        if let Some((then, settings_then, recorded)) =
            (written.as_deref()).and_then(|t| header_asked(t, settings, &anchor(&here)))
            && then.system == asked.system
        {
            let (asked, recorded) = match asked.is_bare() {
                true => (then, Some(recorded)),
                false => (asked, None),
            };
            let at = Where {
                recorded,
                path: Some(path),
                check,
            };
            return write_or_check(&settings_then, asked, at);
        }
    }
    let at = Where {
        recorded: None,
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

/// Where a check without a workspace finds the default file: the one file of `system` at the
/// root of the repository `here` is in that has mara's header and the default name; else
/// `error`, why the workspace could not be loaded, or the files to choose from.
fn written_default(here: &Path, system: CiSystem, error: Error) -> Result<PathBuf> {
    let root = anchor(here);
    let (dir, suffix) = match system {
        CiSystem::Github => (root.join(".github/workflows"), "-up.yml"),
        CiSystem::Gitlab => (root.clone(), "-up.gitlab-ci.yml"),
    };
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            (path.file_name().and_then(|n| n.to_str()))
                .is_some_and(|n| n.starts_with("mara-") && n.ends_with(suffix))
        })
        .filter(|path| {
            crate::workspace::read_input(path)
                .is_ok_and(|text| text.starts_with("# Written by `mara "))
        })
        .collect();
    found.sort();
    match found.len() {
        0 => Err(error),
        1 => Ok(found.remove(0)),
        _ => {
            let shown: Vec<String> = (found.iter())
                .map(|p| p.strip_prefix(here).unwrap_or(p).display().to_string())
                .collect();
            Err(Error::usage(
                Problem::new(format!(
                    "--check found {} pipelines mara wrote here: {}",
                    found.len(),
                    shown.join(", ")
                ))
                .hint("name the one to check: `--check --file FILE`"),
            ))
        }
    }
}

/// What the paths a file's header records are relative to, seen from `here`: the root of the
/// repository `here` is in, else of the workspace, else `here`.
fn anchor(here: &Path) -> PathBuf {
    let found = (here.ancestors()).find(|d| d.join(".git").exists());
    found
        .map(Path::to_path_buf)
        .or_else(|| crate::workspace::find_root(here))
        .unwrap_or_else(|| here.to_path_buf())
}

/// The options the header of a file mara wrote records (its first line's command), the settings
/// with its workspace, stack and provider where this invocation names none, and its `--file`;
/// `None` when the text has no such header. Its paths are from the repository's root, `root`,
/// wherever the check runs.
fn header_asked(
    text: &str,
    settings: &Settings,
    root: &Path,
) -> Option<(Asked, Settings, Option<PathBuf>)> {
    let line = text.lines().next()?;
    let command = line.strip_prefix("# Written by `")?.split('`').next()?;
    let words = shell_words(command)?;
    let cli = <crate::cli::Cli as clap::Parser>::try_parse_from(words).ok()?;
    let crate::cli::Command::Ci(CiCommand::Generate(args)) = cli.command else {
        return None;
    };
    let (asked, (file, _)) = Asked::of(args);
    let mut settings = settings.clone();
    // The workspace is the header's `-C` from the repository's root (the root itself without
    // one), unless this invocation names its own.
    if settings.start_dir == Path::new(".") {
        settings.start_dir = match cli.global.cwd {
            Some(dir) => root.join(dir),
            None => root.to_path_buf(),
        };
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
    let deployment = Deployment::load(settings)?;
    let files = &deployment.files;
    // The jobs start at the repository's root: the workspace may be a directory of it.
    let repository = repository_root(&files.workspace.root);
    let (pipeline, path) = planned(&deployment, asked, &at, &repository)?;
    let text = match pipeline.system {
        CiSystem::Github => github::github(&pipeline),
        CiSystem::Gitlab => gitlab::gitlab(&pipeline),
    };
    github_takes(&pipeline, &text)?;
    let here = std::env::current_dir().map_err(|e| Error::read(Path::new("."), e))?;
    let shown = path
        .strip_prefix(&here)
        .unwrap_or(&path)
        .display()
        .to_string();
    if at.check {
        return checked(&path, &shown, &text, &pipeline, settings);
    }
    pipeline.refused_names()?;
    for warning in ignored_inputs(files, &repository, pipeline.config_secret.is_some()) {
        crate::ui::errln!("{warning}");
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::write(dir, e))?;
    }
    crate::files::write_atomic(&path, &text, 0o644).map_err(|e| Error::write(&path, e))?;
    wrote(&pipeline, &shown, settings)
}

/// The pipeline `asked` for, and where its file goes: a file named on the command line is where
/// mara runs, as `--report` is (`-C` names the workspace, not the file); the default one is in
/// the repository's root, where CI looks.
fn planned(
    deployment: &Deployment,
    asked: Asked,
    at: &Where,
    repository: &Path,
) -> Result<(Pipeline, PathBuf)> {
    let (system, operation) = (asked.system, asked.operation);
    let workspace = &deployment.files.workspace;
    let stack = deployment.files.required_stack()?;
    let flags = selection_flags(&asked.selection);
    let plan = Plan::select(&deployment.graph, &Selection::from(asked.selection))?;
    let mut pipeline = pipeline::pipeline(
        deployment,
        &plan,
        (system, operation),
        stack.name.as_str(),
        flags,
    );
    pipeline.workspace_dir = (workspace.root.strip_prefix(repository))
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    pipeline.setup = asked.setup;
    pipeline.install = install::Install::asked(asked.install.0, asked.install.1)?;
    (pipeline.env, pipeline.vars, pipeline.oidc) = (asked.env, asked.vars, asked.oidc);
    pipeline.config_secret = asked.config_secret;
    (pipeline.on, pipeline.schedule) = (asked.on, asked.schedule);
    let here = std::env::current_dir().map_err(|e| Error::read(Path::new("."), e))?;
    let path = match &at.path {
        Some(file) => here.join(file),
        None => repository.join(default_file(system, operation, stack.name.as_str())),
    };
    let in_repository = path.strip_prefix(repository).ok().map(Path::to_path_buf);
    // The header records a `--file` from the repository's root, as its `-C`: the file is the
    // same wherever it is written from, and a check finds it from anywhere in the repository.
    pipeline.file = match &at.recorded {
        Some(recorded) => recorded.clone(),
        None => (at.path.as_ref()).map(|_| in_repository.clone().unwrap_or_else(|| path.clone())),
    };
    pipeline.in_repository = in_repository
        .unwrap_or_else(|| path.clone())
        .display()
        .to_string();
    Ok((pipeline, path))
}

/// What GitHub would not run: more than 256 jobs in a workflow run (the projects, and the open
/// and close jobs), or a file over 500 KB.
fn github_takes(pipeline: &Pipeline, text: &str) -> Result<()> {
    if pipeline.system != CiSystem::Github {
        return Ok(());
    }
    let jobs = pipeline.jobs.len();
    if jobs + 2 > GITHUB_MAX_JOBS {
        return Err(Error::usage(
            Problem::new(format!(
                "a GitHub workflow runs at most {GITHUB_MAX_JOBS} jobs, and this one would have {} ({jobs} projects, and the jobs that open and close the run)",
                jobs + 2,
            ))
            .hint("split the deployment: one workflow per selection (--only, --skip, --from), or use GitLab"),
        ));
    }
    if text.len() > GITHUB_MAX_FILE {
        return Err(Error::usage(
            Problem::new(format!(
                "GitHub starts no run of a workflow file over 500 KB, and this one would be {} KB",
                text.len().div_ceil(1024)
            ))
            .hint("split the deployment: one workflow per selection (--only, --skip, --from)"),
        ));
    }
    Ok(())
}

/// What `ci generate` says of the file it wrote (`shown`), for people or as JSON.
fn wrote(pipeline: &Pipeline, shown: &str, settings: &Settings) -> Result<()> {
    let projects = pipeline.jobs.len();
    if settings.output == crate::settings::OutputFormat::Json {
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
    crate::ui::note(
        settings,
        &format!(
            "Wrote {shown}: {projects} {} of stack {} as {} jobs.\n",
            crate::error::plural(projects, "project", "projects"),
            pipeline.stack,
            projects + 2,
        ),
    )
}

/// `--check`: whether the file at `path` (`shown`) is `text`, what would be written now.
fn checked(
    path: &std::path::Path,
    shown: &str,
    text: &str,
    pipeline: &Pipeline,
    settings: &Settings,
) -> Result<()> {
    let current = crate::workspace::read_input(path).ok();
    match current.as_deref() == Some(text) {
        true => match settings.output {
            crate::settings::OutputFormat::Json => crate::ui::print(&format!(
                "{:#}\n",
                serde_json::json!({"file": shown, "up_to_date": true, "command": regenerate(pipeline)})
            )),
            crate::settings::OutputFormat::Human => {
                crate::ui::note(settings, &format!("{shown} is up to date.\n"))
            }
        },
        false => Err(Error::OutOfDate(Box::new(out_of_date(
            shown,
            current.as_deref(),
            pipeline,
        )))),
    }
}

/// Why the file at `shown` (holding `current`) is not what would be written: it is missing,
/// it was written with other options than this check gives, or the provider, its graph or a
/// hand changed it.
fn out_of_date(shown: &str, current: Option<&str>, pipeline: &Pipeline) -> Problem {
    let now = regenerate(pipeline);
    let Some(current) = current else {
        return Problem::new(format!("{shown} does not exist")).hint(format!("write it: {now}"));
    };
    let written_by = (current.lines().next())
        .and_then(|line| line.strip_prefix("# Written by `"))
        .and_then(|rest| rest.split('`').next());
    match written_by {
        Some(then) if then != now => Problem::new(format!(
            "{shown} was written by `{then}`, and this check asks for `{now}`"
        ))
        .hint(format!(
            "check it as it was written with `--check` and no other options (`mara ci generate {} --check{}`), or write it again as asked: {now}",
            system_word(pipeline.system),
            // From here, as a `--file` on the command line is.
            match &pipeline.file {
                Some(_) => format!(" --file {}", pipeline::shell_word(shown)),
                None => String::new(),
            }
        )),
        _ => Problem::new(format!(
            "{shown} no longer matches the provider and its graph, or was edited by hand"
        ))
        .hint(format!("write it again: {now}")),
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
        // git's own words (`fatal: not a git repository` outside one) are not mara's to show:
        // its answer is its exit status alone.
        let ignored = std::process::Command::new("git")
            .args(["check-ignore", "-q"])
            .arg(&file)
            .current_dir(repository)
            .stdin(std::process::Stdio::null())
            .output()
            .is_ok_and(|o| o.status.success());
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
