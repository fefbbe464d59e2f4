//! Loading and checking a run (docs/ARCHITECTURE.md, "How a run goes", steps 2 to 4): what it
//! reads of its deployment, the ledger it keeps, what it checks before anything is asked,
//! written or run, and which selected projects it leaves untouched.

use std::collections::{BTreeMap, BTreeSet};

use super::{Invocation, Loaded, Survey};
use crate::deployment::checks::{RunChecks, dependents, fanout};
use crate::deployment::{self, Deployment};
use crate::engine::Operation;
use crate::error::{Error, Problem, Result};
use crate::graph::Plan;
use crate::ledger::{self, Opener, RunRecord};
use crate::run;
use crate::run::stacks::{self, Found};
use crate::settings::run::{Confirmation, Mode};
use crate::workspace::kubeconfig::Choice;
use crate::workspace::stack_config::StackConfigFile;

impl Invocation<'_> {
    /// The stack, its configuration, the selection, the environment, the stored secrets and (for
    /// `--changed` and a real `up`) the selected projects' fingerprints.
    pub(super) fn loaded<'d>(&self, deployment: &'d Deployment) -> Result<Loaded<'d>> {
        let run = self.run;
        let files = &deployment.files;
        let stack = files.required_stack()?;
        let config = files.config.clone().unwrap_or_else(|| {
            StackConfigFile::Missing(files.workspace.stack_config_file(&stack.name))
        });
        let selected = Plan::select(&deployment.graph, &run.selection)?;
        let stored = match files.secrets_config(stack) {
            Ok(stored) => stored,
            // Only `up` stores secrets there; any other run only reads back what Pulumi stores.
            Err(error) if run.operation != Operation::Up => {
                tracing::warn!("{error}: the secrets it stores are not read back");
                StackConfigFile::Missing(files.workspace.secrets_config_file(&stack.name))
            }
            Err(error) => return Err(error),
        };
        // A dry run of all the projects needs no fingerprint.
        let fingerprinted =
            run.mode == Mode::Changed || (run.operation == Operation::Up && !run.dry_run);
        let fingerprints = match fingerprinted {
            true => run::narrow::fingerprints(&selected, files, stack)?,
            false => BTreeMap::new(),
        };
        Ok(Loaded {
            stack,
            config,
            selected,
            with_secrets: files.environment(self.settings),
            stored,
            fingerprints,
            state: None,
            policies: super::policies::of(run.operation, &files.workspace)?,
            judged: Default::default(),
        })
    }

    /// Everything that can be checked of what runs, before anything is asked, written or run:
    /// the configuration, the projects' files and the tools (exit 3; a dry run runs nothing, and
    /// checks only the configuration), that a confirmation can be given (exit 2), what `up`
    /// needs to ask for (exit 3).
    pub(super) fn check(
        &self,
        deployment: &Deployment,
        loaded: &Loaded<'_>,
        ledger: &mut Opener,
    ) -> Result<()> {
        let run = self.run;
        self.configuration_elsewhere(deployment, loaded, ledger)?;
        let orphaned = self.orphaned(loaded, ledger)?;
        let mara = self.settings.invoked();
        let checks = RunChecks {
            deployment,
            selected: &loaded.selected,
            stack: &loaded.stack.name,
            config: &loaded.config,
            stored: &loaded.stored,
            env: &loaded.with_secrets,
            interactive: self.settings.interactive,
            joined: run.join.is_some(),
            mara: &mara,
        };
        let asks = run.operation == Operation::Up && !run.dry_run;
        let found = match run.dry_run {
            true => checks.configuration(run.operation),
            false => checks.preflight(run.operation),
        };
        let mut problems: Vec<Problem> = orphaned.into_iter().collect();
        match found {
            Ok(()) => {}
            Err(Error::Problems(more)) => problems.extend(more),
            Err(error) => return Err(error),
        }
        if asks {
            problems.extend(self.refused_merge(deployment, loaded));
        }
        if !problems.is_empty() {
            // Said at once with what `up` would need asked, so that one run shows every problem.
            if let (true, Err(Error::Problems(more))) = (asks, checks.needs()) {
                problems.extend(more);
            }
            return Err(Error::Problems(problems));
        }
        if run.confirmation == Confirmation::Refused {
            return Err(Confirmation::refusal(run.operation));
        }
        match asks {
            true => checks.needs(),
            false => Ok(()),
        }
    }

    /// An `up` whose kubeconfig hook merges into the user's kubeconfig, where an entry of the
    /// stack's name is not the stack's: the merge would fail after the cluster project ran
    /// (docs/commands.md, "Your kubeconfig").
    fn refused_merge(&self, deployment: &Deployment, loaded: &Loaded<'_>) -> Option<Problem> {
        let selected = &loaded.selected;
        let merges = selected.order().iter().any(|&i| {
            (selected.graph.project(i).on_success.iter())
                .any(|h| matches!(h, crate::provider::Hook::Kubeconfig { merge: true, .. }))
        });
        if !merges {
            return None;
        }
        let workspace = &deployment.files.workspace;
        let files = crate::run::kubeconfig::Files::of(workspace, &loaded.stack.name);
        let why = crate::run::kubeconfig::refused_merge(&files, &loaded.with_secrets).err()?;
        Some(
            Problem::new(format!("cannot merge the cluster's kubeconfig into {why}"))
                .subject("hooks"),
        )
    }

    /// A checkout without the stack's configuration, for a stack the ledger has runs of: not the
    /// stack's first run, but a machine that lacks the file (git ignores it, a clean CI runner),
    /// which a first run's questions would write anew. Refused (exit 3), saying where it comes
    /// from for a run fanned out over CI jobs.
    fn configuration_elsewhere(
        &self,
        deployment: &Deployment,
        loaded: &Loaded<'_>,
        ledger: &mut Opener,
    ) -> Result<()> {
        let stack = loaded.stack.name.as_str();
        let asks = self.run.operation.runs_programs();
        if !asks || !loaded.config.is_missing() || self.run.join.is_some() {
            return Ok(());
        }
        let Some(known) = ledger.existing()? else {
            return Ok(());
        };
        let Some(last) = known.runs(Some(stack), 1)?.into_iter().next() else {
            return Ok(());
        };
        let workspace = &deployment.files.workspace;
        let file = workspace
            .display(loaded.config.path())
            .display()
            .to_string();
        let hint = match self.run.open.is_some() {
            true => format!(
                "give the run the stack's configuration: `{}` with FILE a CI secret file, or write the pipeline that way with `mara ci generate … --config-secret NAME`",
                self.settings.again(&format!(
                    "ci open --run {} --config FILE",
                    self.run.open.as_ref().map_or("ID", |o| o.run_id.as_str())
                ))
            ),
            false => format!(
                "put the stack's configuration back in {file} (from where the team keeps it: git ignores it in many repositories)"
            ),
        };
        Err(Error::config(
            Problem::new(format!(
                "{file} is not here, but stack {stack} is not new: the ledger has its runs (the last, {}, on {}); this checkout lacks the stack's configuration, and a first run's questions would write it anew",
                last.run_id, last.host
            ))
            .hint(hint),
        ))
    }

    /// Why a destroy may not run: it would leave deployed projects standing on what it destroys
    /// (`dependents::orphaned`; a job of a fanned-out run is a part of a destroy `ci open`
    /// checked whole).
    fn orphaned(&self, loaded: &Loaded<'_>, ledger: &mut Opener) -> Result<Option<Problem>> {
        let run = self.run;
        if run.operation != Operation::Destroy || run.orphan_dependents || run.join.is_some() {
            return Ok(None);
        }
        let stack = loaded.stack.name.as_str();
        let deployed = match ledger.existing()? {
            Some(ledger) => ledger.last_fingerprints(stack)?,
            None => BTreeMap::new(),
        };
        let skipping = !run.selection.skip.is_empty();
        Ok(dependents::orphaned(
            &loaded.selected,
            &deployed,
            stack,
            skipping,
        ))
    }

    /// What the run finds of the stack before it is planned: the stacks the ledger knows, the
    /// kubeconfig the kubectl engine names, the projects it leaves untouched and, for a job of a
    /// fanned-out run, those it skips because a project they follow failed on another runner.
    /// `None` when there is nothing to do (`untouched`).
    pub(super) fn survey(
        &self,
        deployment: &Deployment,
        loaded: &Loaded<'_>,
        ledger: &mut Opener,
        env: &BTreeMap<String, String>,
    ) -> Result<Option<Survey>> {
        let run = self.run;
        let backend = stacks::backend_of(&loaded.with_secrets, loaded.state.as_ref());
        let known_stacks = stacks::known(ledger.existing(), &backend, loaded.stack);
        if matches!(run.operation, Operation::Up | Operation::Preview) && !run.dry_run {
            let (workspace, state) = (&deployment.files.workspace, loaded.state.as_ref());
            let on = (&loaded.selected, workspace);
            let stack = loaded.stack.name.as_str();
            stacks::moved_away(
                (ledger.existing()?, None),
                on,
                (state, &backend),
                &known_stacks,
                stack,
            )?;
            // Switched to `state = "ledger"` on a server that knows nothing yet: what the
            // workspace's own ledger recorded before the switch still tells where the stacks are.
            let own = crate::ledger::path(workspace);
            if state.is_some() && own.exists() {
                let local = crate::ledger::open_existing(&crate::ledger::Place::File(own.clone()))?;
                let shown = workspace.display(&own).display().to_string();
                let whose = (local.as_deref(), Some(shown.as_str()));
                stacks::moved_away(whose, on, (state, &backend), &known_stacks, stack)?;
            }
        }
        let kubeconfig = crate::workspace::kubeconfig::choose(
            &deployment.files.workspace,
            &loaded.stack.name,
            loaded.config.config(),
            &self.settings.env,
        );
        let destroyed = match run.operation {
            Operation::Destroy => {
                let selected = loaded.selected.order().iter();
                let paths = selected.map(|&i| loaded.selected.graph.project(i).path.as_str());
                stacks::destroyed_by(ledger.existing()?, loaded.stack.name.as_str(), paths)?
            }
            _ => None,
        };
        let earlier = destroyed.as_ref();
        let untouched =
            self.untouched(deployment, loaded, env, &known_stacks, &kubeconfig, earlier);
        let Some(absent) = untouched? else {
            return Ok(None);
        };
        let joined = match &run.join {
            Some(id) => {
                run::fanout::joined(ledger.existing()?, id, &loaded.selected, run.operation)?
            }
            None => run::fanout::Joined::default(),
        };
        // What the run does not touch, or skips, needs no input.
        let mut untouched = absent.clone();
        untouched.extend((joined.blocked.iter()).map(|(&i, why)| (i, why.reason().to_string())));
        let inputs = self.inputs_before(deployment, loaded, ledger, env, &untouched, &joined)?;
        let blocked = joined.blocked;
        Ok(Some(Survey {
            backend,
            known_stacks,
            kubeconfig,
            absent,
            blocked,
            destroyed,
            inputs,
        }))
    }

    /// The outputs the selected projects' inputs take from projects this run does not apply
    /// (`run::inputs::before`): recorded in the ledger, else read from their engines; an input
    /// with no value fails the run here, exit 3, before anything is recorded or run.
    fn inputs_before(
        &self,
        deployment: &Deployment,
        loaded: &Loaded<'_>,
        ledger: &mut Opener,
        env: &BTreeMap<String, String>,
        absent: &BTreeMap<usize, String>,
        joined: &run::fanout::Joined,
    ) -> Result<BTreeMap<String, run::inputs::Known>> {
        let selected = &loaded.selected;
        let graph = selected.graph;
        let mut upstreams: Vec<String> = (selected.order().iter())
            .filter(|i| !absent.contains_key(i))
            .flat_map(|&i| graph.project(i).inputs.iter())
            .map(|input| input.from.target.clone())
            .collect();
        // An `up` records the outputs others take of the projects it applies: what the ledger
        // says is secret of them stays so (`Values::secret_of`).
        if self.run.operation == Operation::Up {
            let taken = |i: usize| {
                let path = &graph.project(i).path;
                (graph.successors(i).into_iter())
                    .any(|(j, _)| (graph.project(j).inputs.iter()).any(|x| &x.from.target == path))
            };
            upstreams.extend(
                (selected.order().iter())
                    .filter(|&&i| taken(i))
                    .map(|&i| graph.project(i).path.clone()),
            );
        }
        if self.run.dry_run || upstreams.is_empty() {
            return Ok(BTreeMap::new());
        }
        upstreams.sort_unstable();
        upstreams.dedup();
        let stack = loaded.stack.name.as_str();
        let recorded = match ledger.existing()? {
            Some(ledger) => ledger.outputs(stack, &upstreams)?,
            None => BTreeMap::new(),
        };
        let engines = run::plan::engines(
            deployment,
            loaded.stack,
            &loaded.config,
            (env, loaded.state.as_ref()),
        );
        let interrupt = self.runner.interrupt();
        let mut read = |j: usize| run::outputs::with_secrets(deployment, &engines, j, env);
        let operation = self.run.operation;
        // A joined preview's upstream of the run is previewed by its own job: an input it will
        // have only once applied makes this project's preview wait, as in one `preview`.
        let elsewhere = |j: usize| joined.in_run.contains(&graph.project(j).path);
        let (known, problems) =
            run::inputs::before(selected, operation, absent, recorded, &mut read, &elsewhere);
        interrupt.checkpoint()?;
        match problems.is_empty() {
            true => Ok(known),
            false => Err(Error::Problems(problems)),
        }
    }

    /// The selected projects the run leaves untouched, with why (`stacks::untouched`): for
    /// `destroy` and `refresh`, which never create a stack, the engines are asked first which
    /// projects have it.
    ///
    /// A destroy of a stack that mara destroyed already (`destroyed`), with nothing deployed
    /// since, has nothing to do: it says so, and the run stops there (`None`), exit 0.
    pub(super) fn untouched(
        &self,
        deployment: &Deployment,
        loaded: &Loaded<'_>,
        env: &BTreeMap<String, String>,
        known: &BTreeSet<String>,
        kubeconfig: &Choice,
        destroyed: Option<&RunRecord>,
    ) -> Result<Option<BTreeMap<usize, String>>> {
        let run = self.run;
        if run.dry_run {
            return Ok(Some(BTreeMap::new()));
        }
        let workspace = &deployment.files.workspace;
        let found: Option<Found> = match run.operation {
            // Which projects have the stack, asked first by what never creates one: a drift
            // check of a stack nothing has fails before any check runs, as refresh does.
            Operation::Destroy | Operation::Refresh | Operation::Drift => {
                let engines = run::plan::engines(
                    deployment,
                    loaded.stack,
                    &loaded.config,
                    (env, loaded.state.as_ref()),
                );
                let interrupt = self.runner.interrupt();
                let selected = &loaded.selected;
                let found = stacks::find(
                    selected,
                    workspace,
                    &engines,
                    env,
                    run.parallel,
                    interrupt,
                    known,
                );
                interrupt.checkpoint()?;
                Some(found)
            }
            _ => None,
        };
        let none_has_it = |f: &Found| f.none_has_it(loaded.selected.len());
        if let (Some(by), true) = (destroyed, found.as_ref().is_some_and(none_has_it)) {
            crate::ui::print(&stacks::already_destroyed(loaded.stack.name.as_str(), by))?;
            return Ok(None);
        }
        stacks::untouched(
            run.operation,
            &loaded.selected,
            workspace,
            loaded.stack,
            found,
            &kubeconfig.file,
        )
        .map(Some)
    }

    /// The run's one ledger (one connection to a server), once what a fanned-out run needs of it
    /// and of where state is kept was checked, and a server reached; `None` when `ci open` finds
    /// its run open already (a retried job), which it says.
    pub(super) fn ledger(
        &self,
        deployment: &Deployment,
        loaded: &mut Loaded<'_>,
    ) -> Result<Option<Opener>> {
        let run = self.run;
        let place = ledger::place(&deployment.files.workspace, &self.settings.env)?;
        // A Ctrl-C reaches a run whose server stopped answering at once.
        let interrupt = self.runner.interrupt().clone();
        let escalation = ledger::Escalation::new(move || interrupt.level() as u8);
        // What an earlier run could not write there is made first.
        let journal = ledger::journal::Journal::of(&deployment.files.workspace, &place);
        let mut ledger = Opener::new(place)
            .interruptible(escalation)
            .replaying(journal);
        if let Some(open) = &run.open {
            let selected = &loaded.selected;
            fanout::open(ledger.place(), &loaded.with_secrets, deployment, selected)?;
            let this = (run.operation, loaded.stack.name.as_str());
            if run::fanout::open_already(ledger.existing()?, &open.run_id, this)? {
                let said = match self.settings.output {
                    crate::settings::OutputFormat::Json => format!(
                        "{:#}\n",
                        serde_json::json!({"run_id": open.run_id, "opened": false, "open_already": true})
                    ),
                    crate::settings::OutputFormat::Human => {
                        format!("Run {} is open already.\n", open.run_id)
                    }
                };
                crate::ui::print(&said)?;
                return Ok(None);
            }
        } else if run.join.is_some() {
            fanout::team_ledger(ledger.place(), None)?;
        }
        // A server is reached before anything runs: one that cannot be (down, a wrong password,
        // a bad lease) fails the run here, exit 3, not after engine calls; so is the one the
        // engines keep their state in (`state = "ledger"`).
        let workspace = &deployment.files.workspace;
        loaded.state = match run.dry_run {
            true => deployment::state::check(workspace, ledger.place()).map(|_| None)?,
            false => {
                if matches!(ledger.place(), ledger::Place::Server(_)) {
                    ledger.existing()?;
                }
                let env = &loaded.with_secrets;
                let selected = &loaded.selected;
                let mut engines: Vec<_> = (selected.order().iter())
                    .map(|&i| {
                        selected
                            .graph
                            .project(i)
                            .engine_or(workspace.settings.engine)
                    })
                    .collect();
                engines.sort();
                engines.dedup();
                let on = (workspace, &engines[..]);
                let server = deployment::state::server(on, &mut ledger, &self.settings.env, env)?;
                self.warn_kept_elsewhere(workspace, selected, server.as_ref());
                server
            }
        };
        Ok(Some(ledger))
    }

    /// With `state = "ledger"`, the selected projects whose state the run's environment sends
    /// elsewhere (`PULUMI_BACKEND_URL` left in the environment file after a switch): said on
    /// every run, as `validate` says it, since they keep using the old backend.
    fn warn_kept_elsewhere(
        &self,
        workspace: &crate::workspace::Workspace,
        selected: &crate::graph::Plan<'_>,
        server: Option<&crate::engine::state::StateServer>,
    ) {
        let Some(server) = server else {
            return;
        };
        let unset = crate::engine::state::StateServer {
            set: Default::default(),
            ..server.clone()
        };
        let elsewhere: Vec<&str> = (selected.order().iter())
            .map(|&i| selected.graph.project(i))
            .filter(|p| {
                let (engine, dir) = (
                    p.engine_or(workspace.settings.engine),
                    workspace.project_dir(&p.path),
                );
                engine.state_in(server, &p.path, &dir).is_none()
                    && engine.state_in(&unset, &p.path, &dir).is_some()
            })
            .map(|p| p.path.as_str())
            .collect();
        if elsewhere.is_empty() {
            return;
        }
        let warning = format!(
            "warning: `state = \"ledger\"`, but the run's environment names another backend for {} project{} ({}{}): they keep their state there; take the variable (PULUMI_BACKEND_URL) out of the environment file once `mara state migrate` moved them",
            elsewhere.len(),
            if elsewhere.len() == 1 { "" } else { "s" },
            elsewhere
                .iter()
                .take(3)
                .copied()
                .collect::<Vec<_>>()
                .join(", "),
            if elsewhere.len() > 3 { ", …" } else { "" },
        );
        crate::ui::errln!("{}", self.settings.stderr_style.yellow(&warning));
    }
}
