//! Before `up` runs its projects (docs/commands.md, "First run" and "Secrets"): the first run's
//! answers written to the shared configuration, the secrets stored encrypted through Pulumi (the
//! value on standard input, never on a command line); and before any run, the secret values Pulumi
//! already stores read back, so that the redactor can keep them out of every line.

use std::collections::BTreeMap;
use std::path::Path;

use crate::configure::{self, Answers, FirstRun, Secret};
use crate::engine::pulumi::{self, Pulumi};
use crate::error::{Error, Problem, Result};
use crate::run::process::{self, run_blocking};
use crate::run::redact::Redactor;
use crate::workspace::stack_config::StackConfigFile;

/// Writes the first run's answers (with `kubernetes:infra_type`) to the shared configuration,
/// atomically, and returns the file as written.
pub fn write_first_run(
    config: &StackConfigFile,
    first_run: &FirstRun,
    infra_type: Option<&str>,
) -> Result<StackConfigFile> {
    let text = configure::first_run_document(&first_run.values, infra_type);
    let path = config.path();
    crate::files::write_atomic(path, &text, 0o644).map_err(|e| Error::write(path, e))?;
    StackConfigFile::from_text(path, text)
}

/// Stores every secret answer: a first-run `kind = "secret"` answer in the shared configuration
/// (through the project in `first_dir`), the projects' secrets in the secrets project (in
/// `secrets_dir`). Returns the values stored, for the redactor.
pub fn store_secrets(
    pulumi: &Pulumi,
    env: &BTreeMap<String, String>,
    first_dir: Option<&Path>,
    secrets_dir: &Path,
    answers: &Answers,
) -> Result<Vec<String>> {
    let mut values = Vec::new();
    if let Some(dir) = first_dir {
        for (key, value) in &answers.first_run.secrets {
            store(pulumi, env, dir, key, value, true)?;
            values.push(value.expose().to_string());
        }
    }
    for (key, value) in &answers.secrets {
        store(pulumi, env, secrets_dir, key, value, false)?;
        values.push(value.expose().to_string());
    }
    Ok(values)
}

/// `stack select --create`, then `config set --secret KEY` with the value on standard input.
fn store(
    pulumi: &Pulumi,
    env: &BTreeMap<String, String>,
    dir: &Path,
    key: &str,
    value: &Secret,
    shared: bool,
) -> Result<()> {
    for (step, stdin) in [
        (pulumi.select_step(dir), None),
        (
            pulumi.set_secret_step(dir, key, shared),
            Some(value.expose()),
        ),
    ] {
        let finished = run_blocking(&step, env, stdin).map_err(|source| Error::Spawn {
            program: step.program.clone(),
            source,
        })?;
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

/// The secret values Pulumi already stores for the stack — in the secrets project (`stored`, its
/// own stack file, read through `secrets_dir`) and in the shared configuration (`shared`, read
/// through the project in `first_dir`). A file without a `secure:` value is not asked about.
pub fn stored_secrets(
    pulumi: &Pulumi,
    env: &BTreeMap<String, String>,
    secrets_dir: &Path,
    stored: &StackConfigFile,
    shared: &StackConfigFile,
    first_dir: Option<&Path>,
) -> Vec<String> {
    let holds_secrets = |file: &StackConfigFile| file.text().contains("secure:");
    let mut reads = Vec::new();
    if holds_secrets(stored) {
        reads.push(pulumi.read_config_step(secrets_dir, false));
    }
    if holds_secrets(shared)
        && let Some(dir) = first_dir
    {
        reads.push(pulumi.read_config_step(dir, true));
    }
    reads
        .iter()
        .filter_map(|step| run_blocking(step, env, None).ok())
        .filter(|finished| finished.code == Some(0))
        .flat_map(|finished| pulumi::secret_values(&finished.stdout))
        .collect()
}
