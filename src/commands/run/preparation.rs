//! Preparing the stack for a run (docs/ARCHITECTURE.md, "How a run goes", step 6): the first
//! run's answers and the secrets, asked on the terminal, and what the run's processes are given.

use super::declined::Stored;
use std::collections::BTreeMap;

use super::{Invocation, Loaded, Prepared, Ready};
use crate::configure::Prompter;
use crate::engine::Operation;
use crate::error::Result;
use crate::run::plan::Planner;
use crate::run::project::Context;
use crate::run::redact::Redactor;
use crate::run::{fanout, kubeconfig, narrow, prepare};
use crate::ui::prompt::TerminalPrompter;
use crate::workspace::stack_config::StackConfigFile;

impl Invocation<'_> {
    /// The stack prepared for the run: for `up`, the first run's answers and the secrets not
    /// stored yet (asked on a terminal, else from `MARA_SECRET_*`), stored; for every run, what
    /// Pulumi stores read back for the redactor; for a job of a fanned-out run, the kubeconfigs
    /// of the projects it follows written again.
    pub(super) fn prepare(
        &self,
        planner: &Planner<'_>,
        prepared: &Prepared<'_>,
        ran: &mut bool,
    ) -> Result<Ready> {
        let (run, settings, loaded) = (self.run, self.settings, prepared.loaded);
        let workspace = &planner.deployment.files.workspace;
        let pulumi = planner.pulumi(&loaded.config);
        let mara = settings.invoked();
        let preparing = prepare::Stack {
            deployment: planner.deployment,
            selected: planner.selected,
            stack: planner.stack,
            config: &loaded.config,
            stored: &loaded.stored,
            pulumi: &pulumi,
            interrupt: self.runner.interrupt(),
            mara: &mara,
            joined: run.join.is_some(),
        };
        let (config, mut secrets) = match run.operation {
            Operation::Up => {
                let mut terminal = TerminalPrompter;
                let prompter = (settings.interactive).then_some(&mut terminal as &mut dyn Prompter);
                preparing.prepare(&loaded.with_secrets, prompter, ran)?
            }
            _ => (loaded.config.clone(), Default::default()),
        };
        let stored = Stored::of(run.operation, loaded, workspace, &config, &secrets);
        let mut env = prepared.env.clone();
        // The engines' copy of the configuration as it now is (a first run has just written it).
        prepare::write_for_engines(&config, workspace)?;
        let mut known = prepare::stored_secrets(
            &planner.pulumi(&config),
            self.runner.interrupt(),
            &env,
            &preparing.secrets_dir(),
            &loaded.stored,
            &config,
            preparing.first_dir().as_deref(),
        );
        known.append(&mut secrets);
        // A first run's tokens reach the engines as the variables their questions name.
        prepare::token_variables(&planner.deployment.provider, &known, &mut env);
        let redactor = redactor(&known, prepared, &env, settings);
        let context = Context {
            redactor,
            env,
            kubeconfig: kubeconfig::Files::of(workspace, &planner.stack.name),
            unlock: settings.again("unlock --engine"),
            inputs: std::sync::Arc::new(crate::run::inputs::Values::new(prepared.inputs.clone())),
        };
        // A job of a fanned-out run starts on a runner where no hook of its dependencies ran.
        if run.join.is_some() {
            let engines = planner.engines(&loaded.config);
            let lines =
                fanout::rebuild_kubeconfigs(planner, &engines, &context.env, &context.kubeconfig)?;
            let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
            crate::ui::print(&text)?;
        }
        let selected = match stored.secrets.is_empty() {
            true => Vec::new(),
            false => vec![workspace.settings.secrets_project.clone()],
        };
        Ok(Ready {
            config,
            context,
            stored,
            selected,
            taken_back: Default::default(),
        })
    }

    /// The fingerprints a real `up` records, when they are not those loaded: a first run's
    /// answers were just written to the shared configuration, or the run writes the environment
    /// file (`first_env`), and a fingerprint hashes both as the run leaves them — the next
    /// `--changed` then finds nothing changed.
    pub(super) fn fingerprints_now(
        &self,
        planner: &Planner<'_>,
        loaded: &Loaded<'_>,
        config: &StackConfigFile,
    ) -> Result<Option<BTreeMap<usize, String>>> {
        let files = &planner.deployment.files;
        let shared = config.fingerprinted();
        let written = (self.run.operation == Operation::Up && files.env_file.is_none())
            .then(|| super::first_env(planner.stack));
        if loaded.fingerprints.is_empty()
            || (shared == loaded.config.fingerprinted() && written.is_none())
        {
            return Ok(None);
        }
        let env_file = (files.env_file.as_ref()).map(|f| f.text.clone());
        let env_file = written.or(env_file).unwrap_or_default();
        narrow::fingerprints_of(
            planner.selected,
            &files.workspace,
            planner.stack,
            &shared,
            &env_file,
        )
        .map(Some)
    }
}

/// The run's redactor: every secret it handles — stored or answered (`known`), given as
/// `MARA_SECRET_*` (stored or not: what Pulumi gives back may differ), a module's `TF_VAR_*`
/// secrets in the engines' `env`, and mara's own (the ledger's password, the serve token).
fn redactor(
    known: &prepare::Secrets,
    prepared: &Prepared<'_>,
    env: &BTreeMap<String, String>,
    settings: &crate::settings::Settings,
) -> Redactor {
    let place = prepared.ledger.place();
    let given = (prepared.loaded.with_secrets.iter())
        .filter(|(key, _)| key.starts_with(crate::configure::SECRET_PREFIX))
        .map(|(_, value)| value.clone());
    Redactor::new(
        (known.values().cloned())
            .chain(given)
            .chain(crate::workspace::envfile::terraform_secrets(env))
            .chain(place.password(&settings.env))
            .chain(crate::configure::serve_token(&settings.env)),
    )
}
