//! Before `up` runs its projects (docs/commands.md, "First run" and "Secrets"): the first run's
//! answers written to the shared configuration, the secrets — the projects' and a first run's
//! tokens — stored encrypted in the secrets project through Pulumi (the value on standard input,
//! never on a command line); and before any run, the secrets Pulumi already stores read back, so
//! that the redactor can keep them out of every line and a token reaches the engines as the
//! variable its question names.

use std::collections::BTreeMap;
use std::path::Path;

use crate::configure::{self, Answers, FirstRun, Prompter, Secret};
use crate::deployment::Deployment;
use crate::deployment::checks::RunChecks;
use crate::engine::pulumi::{self, Pulumi};
use crate::error::{Error, Problem, Result};
use crate::graph::Plan;
use crate::run::interrupt::Interrupt;
use crate::run::process::{self, run_step};
use crate::run::redact::Redactor;
use crate::workspace::stack::ResolvedStack;
use crate::workspace::stack_config::StackConfigFile;

/// What `up` prepares for: the stack, its configuration, and what the secrets project stores.
pub struct Stack<'a> {
    pub deployment: &'a Deployment,
    pub selected: &'a Plan<'a>,
    pub stack: &'a ResolvedStack,
    pub config: &'a StackConfigFile,
    /// The secrets project's own stack configuration.
    pub stored: &'a StackConfigFile,
    pub pulumi: &'a Pulumi,
    /// The run's: the processes started here are known to it, and stop on it.
    pub interrupt: &'a Interrupt,
    /// `mara` as this invocation was typed (`Settings::invoked`), for hints.
    pub mara: &'a str,
    /// A job of a fanned-out run (`--run`), on a runner of its own.
    pub joined: bool,
}

impl Stack<'_> {
    /// The project through which the shared configuration is read and written (the first of
    /// the plan).
    pub fn first_dir(&self) -> Option<std::path::PathBuf> {
        let workspace = &self.deployment.files.workspace;
        self.selected
            .order()
            .first()
            .map(|&i| workspace.project_dir(&self.selected.graph.project(i).path))
    }

    pub fn secrets_dir(&self) -> std::path::PathBuf {
        let workspace = &self.deployment.files.workspace;
        workspace.project_dir(&workspace.settings.secrets_project)
    }

    /// Gets what the stack still needs — asked through `prompter` on a terminal, else taken from
    /// the environment — writes a first run's answers to the shared configuration and stores the
    /// secrets through Pulumi. `env` still holds `MARA_SECRET_*`; no process started here gets
    /// it. Returns the configuration as it now is, and the secrets stored; `wrote` says, whatever
    /// the result, whether anything was written (the first run's file, a secret stored). An
    /// interruption stops it after the process it reached (`Error::Interrupted`).
    pub fn prepare(
        &self,
        env: &BTreeMap<String, String>,
        prompter: Option<&mut dyn Prompter>,
        wrote: &mut bool,
    ) -> Result<(StackConfigFile, Secrets)> {
        let files = &self.deployment.files;
        let provider = &self.deployment.provider;
        let needs = self.needs();
        let interactive = prompter.is_some();
        let answers = match prompter {
            _ if needs.is_empty() => Answers::default(),
            Some(prompter) => {
                // Relative to the workspace, so that the shared file says the same on every
                // machine (the engines get it made absolute: `StackConfigFile::for_engines`).
                let written = files.workspace.kubeconfig_file(&self.stack.name);
                let kubeconfig = files.workspace.display(&written);
                let example = configure::example_defaults(&files.workspace.config_dir());
                configure::ask(
                    &needs,
                    env,
                    (&self.stack.name, &kubeconfig.display().to_string()),
                    &example,
                    provider,
                    prompter,
                )?
            }
            None => configure::from_environment(&needs, env),
        };
        self.interrupt.checkpoint()?;
        let config = if self.config.is_first_run() {
            *wrote = true;
            let written = write_first_run(
                self.config,
                &answers.first_run,
                provider.infra_type.as_deref(),
            )?;
            // An optional question left empty may leave a key unset that a project requires.
            let recheck = RunChecks {
                deployment: self.deployment,
                selected: self.selected,
                stack: &self.stack.name,
                config: &written,
                stored: self.stored,
                env,
                interactive,
                joined: false,
                mara: self.mara,
            };
            recheck.answered()?;
            written
        } else {
            self.config.clone()
        };
        let mut without_secrets = env.clone();
        configure::strip_secret_variables(&mut without_secrets);
        let mut stored = Secrets::new();
        for (n, (key, value)) in (answers.first_run.secrets.iter())
            .chain(&answers.secrets)
            .enumerate()
        {
            *wrote = true;
            self.store(&without_secrets, key, value, n == 0)?;
            stored.insert(key.clone(), value.expose().to_string());
        }
        Ok((config, stored))
    }

    /// What the run must ask or take from the environment. A job of a fanned-out run stores
    /// only the secrets its own projects read: the secrets project's program reads them from
    /// its configuration, the others read its outputs, and what a job stores stays on its
    /// runner. Only the secrets project's job stores them.
    fn needs(&self) -> configure::Needs<'_> {
        let secrets_project = &self.deployment.files.workspace.settings.secrets_project;
        let mut needs = configure::needs(
            &self.deployment.provider,
            self.selected,
            secrets_project,
            self.config,
            self.stored,
        );
        let graph = self.selected.graph;
        let reads_them = (graph.lookup(secrets_project)).is_some_and(|i| self.selected.contains(i));
        if self.joined && !reads_them {
            needs.secrets.clear();
        }
        if matches!(self.config, StackConfigFile::Missing(_)) {
            let config_dir = self.deployment.files.workspace.config_dir();
            needs.near_stack =
                crate::workspace::stack::near_stack(&config_dir, self.stack.name.as_str());
        }
        needs
    }

    /// `config set --secret KEY` with the value on standard input, in the secrets project — after
    /// `stack select --create` for the `first` one of a run. Every secret answer — a first-run
    /// `kind = "secret"` answer and the projects' secrets — is stored there, never in the shared
    /// configuration: Pulumi's default secrets provider encrypts with a key of each project's
    /// stack, so a secret encrypted into the shared file through one project could not be read
    /// by the others.
    fn store(
        &self,
        env: &BTreeMap<String, String>,
        key: &str,
        value: &Secret,
        first: bool,
    ) -> Result<()> {
        let dir = self.secrets_dir();
        let select = first.then(|| (self.pulumi.select_step(&dir), None));
        let set = (
            self.pulumi.set_secret_step(&dir, key, is_path(key), false),
            Some(value.expose()),
        );
        for (step, stdin) in select.into_iter().chain([set]) {
            let finished =
                run_step(&step, env, stdin, self.interrupt).map_err(|source| Error::Spawn {
                    program: step.program.clone(),
                    source,
                })?;
            self.interrupt.checkpoint()?;
            if finished.code != Some(0) {
                let redactor = Redactor::new([value.expose().to_string()]);
                let reason = process::last_error(&finished.stderr).unwrap_or("pulumi failed");
                return Err(Error::config(
                    Problem::new(format!(
                        "storing `{key}` failed: {}",
                        redactor.redact(reason)
                    ))
                    .subject(dir.display().to_string()),
                ));
            }
        }
        Ok(())
    }
}

/// A `kind = "secret"` key that is a path into a value (`aip:config.env.URL`), stored with
/// `config set --path`.
fn is_path(key: &str) -> bool {
    crate::workspace::config_path::ConfigPath::parse(key).is_ok_and(|p| p.is_nested())
}

/// Writes the first run's answers (with `kubernetes:infra_type`) to the shared configuration,
/// atomically, and returns the file as written.
pub fn write_first_run(
    config: &StackConfigFile,
    first_run: &FirstRun,
    infra_type: Option<&str>,
) -> Result<StackConfigFile> {
    let text = configure::first_run_document(&first_run.values, infra_type);
    let path = config.path();
    // Under the file's lock: a `config set` made meanwhile (while the questions were asked) is
    // not overwritten, and the run stops, saying so.
    let written = StackConfigFile::edit(path, |now| match now.is_first_run() {
        true => Ok(Some(text.clone())),
        false => Err(Error::config(
            Problem::new("it was written while the first run's questions were asked")
                .at(crate::error::Location::file(path))
                .hint("run `mara up` again: it reads the file as it is now"),
        )),
    })?;
    Ok(written.expect("the first run's answers are written"))
}

/// After a stack's first successful `up`: `kubernetes:infra_type` added to a shared configuration
/// that lacks it (a file written by hand, or copied), atomically, keeping the file's mode and
/// everything else in it. `Ok(false)` when the file is not laid out so that this is certain.
pub fn record_infra_type(config: &StackConfigFile, infra_type: &str) -> Result<bool> {
    use crate::workspace::stack_config::INFRA_TYPE_KEY;
    // Read again under the file's lock: another run may have recorded it meanwhile.
    let mut there = false;
    let written = StackConfigFile::edit(config.path(), |now| {
        let values = now.config();
        there = values.is_some_and(|v| v.values.contains_key(INFRA_TYPE_KEY));
        Ok(values
            .filter(|_| !there)
            .and_then(|values| values.with_key(INFRA_TYPE_KEY, infra_type)))
    })?;
    Ok(there || written.is_some())
}

/// Writes the copy of the shared configuration the engines get when it holds a path relative to
/// the workspace (`StackConfigFile::for_engines`), with the path made absolute; atomically, and
/// only readable by this user, as the configuration may hold secrets (encrypted).
pub fn write_for_engines(
    config: &StackConfigFile,
    workspace: &crate::workspace::Workspace,
) -> Result<()> {
    // A configuration a fanned-out run carries is kept in the state directory, for its engines.
    let path = config.path();
    if path.starts_with(workspace.state_dir()) && !config.text().is_empty() {
        let dir = path.parent().unwrap_or(path);
        crate::files::private_dir(dir).map_err(|e| Error::write(dir, e))?;
        crate::files::write_atomic(path, config.text(), 0o600)
            .map_err(|e| Error::write(path, e))?;
    }
    let Some(copy) = config.for_engines(&workspace.root, &workspace.state_dir()) else {
        return Ok(());
    };
    let path = copy.path();
    crate::files::write_atomic(path, copy.text(), 0o600).map_err(|e| Error::write(path, e))
}

/// The environment every engine and hook process of a run gets, made once per run: the run's
/// (`with_secrets`, which mara alone reads) less `MARA_SECRET_*`, `MARA_LEDGER_URL` and the
/// ledger's password.
pub fn engine_env(
    with_secrets: &BTreeMap<String, String>,
    ledger: &crate::ledger::Place,
) -> BTreeMap<String, String> {
    let mut env = with_secrets.clone();
    configure::strip_secret_variables(&mut env);
    ledger.keep_from_engines(&mut env);
    env
}

/// `engine_env` for the engines a command starts outside a run (`output`, `config`, `cluster`,
/// `unlock --engine`): the ledger is found in the environment as given, before
/// `MARA_LEDGER_URL` is taken out of it; a ledger that cannot be found keeps no password.
pub fn engine_env_in(
    workspace: &crate::workspace::Workspace,
    with_secrets: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    match crate::ledger::place(workspace, with_secrets) {
        Ok(place) => engine_env(with_secrets, &place),
        Err(_) => {
            let mut env = with_secrets.clone();
            configure::strip_secret_variables(&mut env);
            env.remove(crate::ledger::PASSWORD_VARIABLE);
            env
        }
    }
}

/// The secrets a run knows, by key: stored, read back or just answered.
pub type Secrets = BTreeMap<String, String>;

/// The secret values Pulumi already stores for the stack — in the secrets project (`stored`, its
/// own stack file, read through `secrets_dir`) and in the shared configuration (`shared`, read
/// through the project in `first_dir`). A file without a `secure:` value is not asked about.
pub fn stored_secrets(
    pulumi: &Pulumi,
    interrupt: &Interrupt,
    env: &BTreeMap<String, String>,
    secrets_dir: &Path,
    stored: &StackConfigFile,
    shared: &StackConfigFile,
    first_dir: Option<&Path>,
) -> Secrets {
    let holds_secrets = |file: &StackConfigFile| file.text().contains("secure:");
    let mut reads = Vec::new();
    if holds_secrets(stored) {
        reads.push((pulumi.read_config_step(secrets_dir, false), stored));
    }
    if holds_secrets(shared)
        && let Some(dir) = first_dir
    {
        reads.push((pulumi.read_config_step(dir, true), shared));
    }
    let mut secrets = Secrets::new();
    for (step, file) in &reads {
        if interrupt.is_interrupted() {
            break;
        }
        match run_step(step, env, None, interrupt) {
            Ok(finished) if finished.code == Some(0) => {
                let values = file.config().map(|c| &c.values);
                secrets.extend(pulumi::secret_values(&finished.stdout, values));
            }
            // A stack that does not exist yet stores nothing: nothing to keep out of the output.
            Ok(finished) if pulumi::is_missing_stack(finished.code, &finished.stderr) => {}
            Ok(finished) => tracing::warn!(
                "the secrets stored in {} could not be read back ({}): they are not kept out of the output",
                step.cwd.display(),
                process::last_error(&finished.stderr).unwrap_or("pulumi config failed")
            ),
            Err(error) => tracing::warn!("cannot start `{}`: {error}", step.program),
        }
    }
    secrets
}

/// The engines' environment gets each first-run token (a `kind = "secret"` question with an
/// `env` variable: DIGITALOCEAN_TOKEN, LINODE_TOKEN) from the secrets mara knows, unless the
/// variable is set already.
pub fn token_variables(
    provider: &crate::provider::Provider,
    secrets: &Secrets,
    env: &mut BTreeMap<String, String>,
) {
    for (variable, spec) in provider.tokens() {
        if env.get(variable).is_some_and(|v| !v.is_empty()) {
            continue;
        }
        if let Some(value) = secrets.get(&spec.key) {
            env.insert(variable.to_string(), value.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Place;

    #[test]
    fn the_engines_get_nothing_that_is_mara_s_alone() {
        let with_secrets = BTreeMap::from(
            [
                ("PATH", "/bin"),
                ("MARA_SECRET_PROMETHEUS_ADMINPASS", "hunter2"),
                ("MARA_LEDGER_URL", "postgres://mara@db/mara"),
                ("PGPASSWORD", "ledger"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        let server = Place::Server("postgres://mara@db/mara".into());
        let env = engine_env(&with_secrets, &server);
        assert_eq!(env.keys().collect::<Vec<_>>(), ["PATH"]);
        // A workspace's own ledger has no password: a program of the user's may need theirs.
        let file = Place::File("/w/.mara/ledger.db".into());
        let env = engine_env(&with_secrets, &file);
        assert_eq!(env.keys().collect::<Vec<_>>(), ["PATH", "PGPASSWORD"]);
    }
}
