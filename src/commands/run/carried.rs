//! What a fanned-out run carries to its jobs (docs/commands.md, "ci"): `ci open` records the
//! stack configuration and the environment file's lines that hold no secret, as the opening
//! runner has them (or the stack configuration from `--config FILE`, a CI secret file); each job
//! of the run deploys with those, not its checkout's, which may have moved on or not hold them
//! at all (a repository that git-ignores them).

use super::Invocation;
use crate::deployment::StackFiles;
use crate::error::{Error, Problem, Result};
use crate::ledger::{self, RunInputs};
use crate::workspace::envfile;
use crate::workspace::stack_config::StackConfigFile;

impl Invocation<'_> {
    /// The stack's files as the run has them: `ci open --config FILE`'s stack configuration; a
    /// job's, what its run was opened with.
    pub(super) fn carried(&self, mut files: StackFiles) -> Result<StackFiles> {
        let run = self.run;
        if let Some(file) = run.open.as_ref().and_then(|o| o.config.as_ref()) {
            let stack = files.required_stack()?;
            let text = crate::workspace::read_input(file).map_err(|e| Error::read(file, e))?;
            // Read as itself first: what is wrong in it is said of it.
            if let StackConfigFile::Empty { .. } = StackConfigFile::from_text(file, text.clone())? {
                return Err(Error::config(
                    Problem::new("holds no configuration")
                        .in_file(file.clone())
                        .hint("--config names the stack configuration the run carries to its jobs"),
                ));
            }
            let path = files.workspace.stack_config_file(&stack.name);
            files.config = Some(StackConfigFile::from_text(&path, text)?);
        }
        let Some(run_id) = &run.join else {
            return Ok(files);
        };
        let place = ledger::place(&files.workspace, &self.settings.env)?;
        let found = match ledger::open_existing(&place)? {
            Some(ledger) => ledger.run_inputs(run_id)?,
            None => None,
        };
        let Some(inputs) = found else {
            return Ok(files);
        };
        self.use_inputs(&mut files, run_id, inputs)?;
        Ok(files)
    }

    /// `files` with the run's stack configuration and environment file, saying where the
    /// checkout's differ.
    fn use_inputs(&self, files: &mut StackFiles, run_id: &str, inputs: RunInputs) -> Result<()> {
        let workspace = &files.workspace;
        if let (Some(text), Some(stack)) = (inputs.config, files.stack.as_ref()) {
            let path = workspace.stack_config_file(&stack.name);
            let checkout = files
                .config
                .as_ref()
                .map(StackConfigFile::text)
                .unwrap_or("");
            if !checkout.is_empty() && checkout != text {
                crate::ui::errln!(
                    "{} differs from the stack configuration run {run_id} was opened with: the run's is used.",
                    workspace.display(&path).display()
                );
            }
            // The engines read it from the state directory (`prepare::write_for_engines` writes
            // it there): the checkout's file, if any, is left as it is.
            let name = path
                .file_name()
                .map(|n| n.to_os_string())
                .unwrap_or_default();
            let carried = workspace.state_dir().join("runs").join(run_id).join(name);
            files.config = Some(StackConfigFile::from_text(&carried, text)?);
        }
        if let Some(text) = inputs.environment {
            let path = workspace.env_file();
            let checkout = files.env_file.as_ref().map(|f| without_secrets(&f.text));
            if checkout
                .as_ref()
                .is_some_and(|c| !c.is_empty() && *c != text)
            {
                crate::ui::errln!(
                    "{} differs from the environment file run {run_id} was opened with: the run's is used (its secrets still come from this runner).",
                    workspace.display(&path).display()
                );
            }
            // The runner's own secrets stay: the run carries none.
            let secrets: String = (files.env_file.as_ref())
                .map(|f| {
                    f.text
                        .lines()
                        .filter(|l| is_secret_line(l))
                        .map(|l| format!("{l}\n"))
                        .collect()
                })
                .unwrap_or_default();
            files.env_file = Some(envfile::parse(&path, &format!("{text}{secrets}"))?);
        }
        Ok(())
    }

    /// What `ci open` records for its jobs (`files`: the stack's files as the run checked them).
    pub(super) fn inputs_to_carry(files: &StackFiles) -> RunInputs {
        RunInputs {
            config: (files.config.as_ref())
                .map(|c| c.text().to_string())
                .filter(|t| !t.is_empty()),
            environment: files.env_file.as_ref().map(|f| without_secrets(&f.text)),
        }
    }
}

/// An environment file's text without its comments and the lines of secrets.
fn without_secrets(text: &str) -> String {
    (text.lines())
        .filter(|line| {
            let line = line.trim_start();
            !line.is_empty() && !line.starts_with('#') && !is_secret_line(line)
        })
        .map(|line| format!("{line}\n"))
        .collect()
}

/// Whether an environment file's line sets a secret (`envfile::says_secret`).
fn is_secret_line(line: &str) -> bool {
    let line = line.trim_start();
    let line = line.strip_prefix("export ").unwrap_or(line);
    line.split_once('=')
        .is_some_and(|(name, value)| envfile::says_secret(name, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_run_carries_of_the_environment_file_holds_no_secret() {
        let text = "# the stack\nPULUMI_STACK=dev\nexport AWS_REGION=eu-west-1\nPULUMI_CONFIG_PASSPHRASE=x\nMARA_SECRET_DB_PWD=y\nAWS_SECRET_ACCESS_KEY=z\nAWS_ACCESS_KEY_ID=k\nGITHUB_TOKEN=t\nMARA_LEDGER_URL=postgres://u:p@h/d\nPGPASSWORD=p\nDATABASE_URL=postgres://admin:hunter2@db/app\nPGPASS=p\nTF_VAR_db_pass=p\nAPIKEY=k\nDD_API_KEY_ID=k\nPULUMI_BACKEND_URL=s3://bucket/state\n";
        assert_eq!(
            without_secrets(text),
            "PULUMI_STACK=dev\nexport AWS_REGION=eu-west-1\nPULUMI_BACKEND_URL=s3://bucket/state\n"
        );
    }
}
