//! The commands that reach the stack's cluster directly (docs/developer-loop.md): `mara kubectl`
//! (kubectl with the stack's kubeconfig, `kubectl.rs`), `mara cluster start|stop|delete|status`
//! (the k3d provider's local cluster, here) and `mara images import|update|list|forget` (images
//! into it, `images.rs`); and what they share: the stack they act on (`Target`, and `Local` for
//! a k3d stack's cluster), and running k3d, Docker and kubectl.
//!
//! `mara kubectl` hands the terminal to kubectl and exits with its code; mara adds nothing to what
//! it says. The cluster and image commands ask k3d for the cluster's state first (`crate::cluster`)
//! and run only what that state needs.

mod images;
mod kubectl;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::run;
use crate::cluster::{self, CLUSTER_PROJECT, Cluster, State};
use crate::deployment::StackFiles;
use crate::engine::Operation;
use crate::error::{Error, Problem, Result, plural};
use crate::graph::Selection;
use crate::ledger;
use crate::settings::run::RunSettings;
use crate::settings::{OutputFormat, Settings};
use crate::ui;
use crate::workspace::Workspace;
use crate::workspace::stack::ResolvedStack;

pub use images::{forget_images, import_images, list_images, update_images};
pub use kubectl::kubectl;

/// What the commands need: the stack's files, the stack, and the environment of its tools.
struct Target {
    /// How this invocation is typed again (`Settings::again`), for the commands hints name.
    invocation: Settings,
    files: StackFiles,
    workspace: Workspace,
    stack: ResolvedStack,
    config: Option<crate::workspace::stack_config::StackConfigFile>,
    env: BTreeMap<String, String>,
}

fn target(settings: &Settings) -> Result<Target> {
    let files = StackFiles::load(settings)?;
    let stack = files.required_stack()?.clone();
    let env = crate::run::prepare::engine_env_in(&files.workspace, &files.environment(settings));
    Ok(Target {
        invocation: settings.clone(),
        workspace: files.workspace.clone(),
        config: files.config.clone(),
        files,
        stack,
        env,
    })
}

impl Target {
    fn again(&self, args: &str) -> String {
        self.invocation.again(args)
    }
}

/// A stack of the k3d provider (or one that extends it), with its cluster's name.
struct Local {
    target: Target,
    provider: String,
    /// Whether the provider has the project that makes the cluster.
    has_cluster_project: bool,
    name: String,
    /// Every project of the provider, in the order `destroy` takes them.
    destroy_order: Vec<String>,
}

fn local(settings: &Settings, command: &str) -> Result<Local> {
    let target = target(settings)?;
    let deployment = target.files.clone().into_deployment(settings)?;
    let provider = deployment.provider;
    let is_k3d = provider.name == "k3d" || provider.extends.iter().any(|p| p == "k3d");
    if !is_k3d {
        return Err(Error::usage(
            Problem::new(format!(
                "`mara {command}` works on the local k3d cluster of a stack, and the provider of stack `{}` here is {}, not k3d",
                target.stack.name, provider.name
            ))
            .hint(match command.starts_with("images") {
                true => "for a cluster that is not k3d, push the images to a registry it pulls from",
                false => "run it with --provider k3d, or on a stack whose provider is k3d",
            }),
        ));
    }
    let name = cluster::name(target.stack.name.as_str());
    if let Some(problem) = cluster::name_problem(&name) {
        return Err(Error::config(
            Problem::new(format!(
                "stack `{}` cannot have a local cluster: {problem}",
                target.stack.name
            ))
            .hint(cluster::NAME_HINT),
        ));
    }
    let has_cluster_project = deployment.graph.lookup(CLUSTER_PROJECT).is_some();
    let graph = &deployment.graph;
    let destroy_order = graph
        .order()
        .iter()
        .rev()
        .map(|&i| graph.project(i).path.clone())
        .collect();
    Ok(Local {
        name,
        destroy_order,
        provider: provider.name.clone(),
        has_cluster_project,
        target,
    })
}

impl Local {
    /// The workspace's ledger, opened once however the command first needs it (to read, then
    /// to write: one connection to a server).
    fn ledger(&self, settings: &Settings) -> Result<ledger::Opener> {
        Ok(ledger::Opener::new(ledger::place(
            &self.target.workspace,
            &settings.env,
        )?))
    }

    /// A ledger's error, its paths shown from the workspace root.
    fn within(&self, error: Error) -> Error {
        error.relative_to(&self.target.workspace.root)
    }

    /// The cluster as k3d lists it; `None` when it does not exist.
    fn cluster(&self) -> Result<Option<Cluster>> {
        let output = capture("k3d", &cluster::list_args(), &self.target.env)?;
        if output.code != Some(0) {
            return Err(tool_error("k3d", &cluster::list_args(), &output));
        }
        cluster::find(&output.stdout, &self.name).map_err(|e| Error::config(Problem::new(e)))
    }

    /// The cluster, which must be running: images go into a running cluster only.
    fn running_cluster(&self) -> Result<Cluster> {
        let stack = &self.target.stack.name;
        match self.cluster()? {
            Some(cluster) if cluster.state() == State::Running => Ok(cluster),
            Some(cluster) => Err(Error::config(
                Problem::new(format!(
                    "cluster {} of stack `{stack}` is {}",
                    self.name,
                    cluster.state().as_str()
                ))
                .hint(format!(
                    "`{}` starts it",
                    self.target.again("cluster start")
                )),
            )),
            None => Err(Error::config(
                Problem::new(format!(
                    "cluster {} of stack `{stack}` does not exist",
                    self.name
                ))
                .hint(format!(
                    "`{}` creates it",
                    self.target.again("cluster start")
                )),
            )),
        }
    }

    fn say(&self, settings: &Settings, human: String, value: serde_json::Value) -> Result<()> {
        match settings.output {
            OutputFormat::Human => ui::note(settings, &format!("{human}\n")),
            OutputFormat::Json => ui::print(&format!(
                "{}\n",
                serde_json::to_string_pretty(&value).expect("JSON serializes")
            )),
        }
    }
}

/// `mara cluster start`: creates the cluster when it does not exist (the cluster project's `up`,
/// recorded as any run is, its kubeconfig written and merged), starts it when it is stopped, and
/// says so when it runs.
pub fn start(settings: &Settings) -> Result<()> {
    let local = local(settings, "cluster start")?;
    let stack = local.target.stack.name.to_string();
    let written = local
        .target
        .workspace
        .kubeconfig_file(&local.target.stack.name);
    match local.cluster()?.map(|c| c.state()) {
        // Running, but its kubeconfig never written (the cluster project's last `up` failed at
        // its hook, or the file was removed): the project's `up` writes it, or says why not.
        Some(State::Running) if !written.is_file() && local.has_cluster_project => up_cluster(
            settings,
            &local,
            "is running, but its kubeconfig is not written: writing it",
        ),
        Some(State::Running) => local.say(
            settings,
            format!(
                "Cluster {} of stack {stack} is already running.",
                local.name
            ),
            json!({"cluster": local.name, "stack": stack, "state": "running", "done": "nothing"}),
        ),
        Some(State::Stopped | State::Partly) => {
            pass_through("k3d", &cluster::start_args(&local.name), &local.target.env)?;
            local.say(
                settings,
                format!("Cluster {} of stack {stack} started.", local.name),
                json!({"cluster": local.name, "stack": stack, "state": "running", "done": "started"}),
            )
        }
        Some(State::Missing) | None => {
            if !local.has_cluster_project {
                return Err(Error::config(Problem::new(format!(
                    "cluster {} does not exist, and provider {} has no project {CLUSTER_PROJECT} to create it",
                    local.name, local.provider
                ))));
            }
            let stale = deployed_on_cluster(settings, &local)?;
            up_cluster(settings, &local, "does not exist: creating it")?;
            if !stale.is_empty() && settings.output == OutputFormat::Human {
                ui::print(&format!(
                    "{}\n",
                    went_with_the_cluster(
                        &local,
                        &stale,
                        "were deployed on the cluster before it went",
                        true
                    )
                ))?;
            }
            Ok(())
        }
    }
}

/// The cluster project's `up`, as a run of its own (recorded, its kubeconfig written and
/// merged), after saying why (`doing`).
fn up_cluster(settings: &Settings, local: &Local, doing: &str) -> Result<()> {
    let up = format!("up --only {CLUSTER_PROJECT}");
    // Said once the run's checks pass, so that what cannot be done is not said to be under way.
    let announce = (settings.output == OutputFormat::Human).then(|| {
        format!(
            "Cluster {} of stack {} {doing} ({}).\n",
            local.name,
            local.target.stack.name,
            local.target.again(&up)
        )
    });
    let only = Selection {
        only: vec![CLUSTER_PROJECT.to_string()],
        ..Selection::default()
    };
    let workspace = local.target.workspace.clone();
    let mut run = RunSettings::started(Operation::Up, only, true, settings, &workspace.settings);
    run.announce = announce;
    run::start(settings, workspace, &run)
}

/// A run of the stack the cluster commands start, as `mara up` or `destroy` with `--yes` as given
/// would (`RunSettings::started`).
fn started(
    settings: &Settings,
    local: &Local,
    operation: Operation,
    selection: Selection,
    yes: bool,
) -> Result<()> {
    let workspace = local.target.workspace.clone();
    let run = RunSettings::started(operation, selection, yes, settings, &workspace.settings);
    run::start(settings, workspace, &run)
}

/// The projects recorded as deployed on the stack, but the cluster's own: what a cluster that
/// went outside mara took with it.
fn deployed_on_cluster(settings: &Settings, local: &Local) -> Result<Vec<String>> {
    let mut opener = local.ledger(settings)?;
    let Some(ledger) = opener.existing().map_err(|e| local.within(e))? else {
        return Ok(Vec::new());
    };
    Ok(ledger
        .last_fingerprints(local.target.stack.name.as_str())?
        .into_keys()
        .filter(|project| project != CLUSTER_PROJECT)
        .collect())
}

/// What is left of projects deployed on a cluster that is gone, and how to recover (`made`: the
/// cluster was just made again).
fn went_with_the_cluster(local: &Local, projects: &[String], what: &str, made: bool) -> String {
    let n = projects.len();
    let again = |args: &str| local.target.again(args);
    let start = match made {
        true => String::new(),
        false => format!("`{}`, then ", again("cluster start")),
    };
    format!(
        "{n} {} {what} ({}): {} state still describes objects that went with it. To deploy {} again: {start}`PULUMI_K8S_DELETE_UNREACHABLE=true {}` (Pulumi's Kubernetes provider then drops from {} state what it cannot reach), then `{}`.",
        plural(n, "project", "projects"),
        projects.join(", "),
        plural(n, "its", "their"),
        plural(n, "it", "them"),
        again("refresh --yes"),
        plural(n, "its", "their"),
        again("up"),
    )
}

/// `mara cluster stop`: stops a running cluster (its containers, and all deployed on it, stay).
/// Refused while a run holds the stack: the run would lose its cluster mid-operation.
pub fn stop(settings: &Settings) -> Result<()> {
    let local = local(settings, "cluster stop")?;
    let stack = local.target.stack.name.to_string();
    let state = local.cluster()?.map(|c| c.state());
    let done = match state {
        None | Some(State::Missing) => format!(
            "Cluster {} of stack {stack} does not exist: nothing to stop.",
            local.name
        ),
        Some(State::Stopped) => format!(
            "Cluster {} of stack {stack} is already stopped.",
            local.name
        ),
        Some(State::Running | State::Partly) => {
            refuse_while_running(settings, &local, "stopping")?;
            pass_through("k3d", &cluster::stop_args(&local.name), &local.target.env)?;
            format!("Cluster {} of stack {stack} stopped.", local.name)
        }
    };
    let (state, did) = match state {
        None | Some(State::Missing) => ("not created", "nothing"),
        Some(State::Stopped) => ("stopped", "nothing"),
        Some(_) => ("stopped", "stopped"),
    };
    local.say(
        settings,
        done,
        json!({"cluster": local.name, "stack": stack, "state": state, "done": did}),
    )
}

/// `mara cluster delete`: everything deployed on the cluster is destroyed, then the cluster, as
/// `mara destroy` does it (and asks as it does); a stopped cluster is started first, so that what
/// runs on it can be destroyed rather than left in its projects' state (docs/decisions.md).
pub fn delete(settings: &Settings, yes: bool) -> Result<()> {
    let local = local(settings, "cluster delete")?;
    let stack = local.target.stack.name.to_string();
    let state = local.cluster()?.map(|c| c.state());
    let Some(state) = state.filter(|s| *s != State::Missing) else {
        return gone(settings, &local);
    };
    if !yes && !settings.interactive {
        return Err(Error::usage(
            Problem::new(format!(
                "`mara cluster delete` destroys everything on cluster {}, then the cluster, and there is no terminal to confirm on",
                local.name
            ))
            .hint("pass --yes to go ahead without confirmation"),
        ));
    }
    let mut yes = yes;
    if state != State::Running {
        refuse_while_running(settings, &local, "starting")?;
        // Asked before the cluster is started for the destroy: a "no" leaves it as it was.
        if !yes {
            let projects: Vec<&str> = local.destroy_order.iter().map(String::as_str).collect();
            let confirmed = ui::confirm::destroy(
                &mut ui::prompt::TerminalPrompter,
                &stack,
                &projects,
                settings.stderr_style,
            )?;
            if !confirmed {
                return Err(Error::Declined(Box::new(Problem::new(format!(
                    "not confirmed: cluster {} was left as it was ({})",
                    local.name,
                    state.as_str()
                )))));
            }
            yes = true;
        }
        if settings.output == OutputFormat::Human {
            ui::print(&format!(
                "Cluster {} of stack {stack} is {}: starting it, to destroy what is deployed on it.\n",
                local.name,
                state.as_str()
            ))?;
        }
        pass_through("k3d", &cluster::start_args(&local.name), &local.target.env)?;
    }
    started(
        settings,
        &local,
        Operation::Destroy,
        Selection::default(),
        yes,
    )
}

/// `cluster delete` of a cluster that is not there (deleted outside mara, a Docker reset): the
/// stack's kubeconfig is taken out of the user's (its context points nowhere), and what is left
/// of the projects deployed on it is said, with how to recover.
fn gone(settings: &Settings, local: &Local) -> Result<()> {
    let stack = local.target.stack.name.to_string();
    let files =
        crate::run::kubeconfig::Files::of(&local.target.workspace, &local.target.stack.name);
    let removed = crate::run::kubeconfig::remove(&files, &local.target.env)
        .map_err(|e| Error::config(Problem::new(e).subject("the stack's kubeconfig")))?;
    let stale = deployed_on_cluster(settings, local)?;
    let mut text = format!(
        "Cluster {} of stack {stack} does not exist: nothing to delete.",
        local.name
    );
    for line in &removed {
        let mut chars = line.chars();
        let first: String = chars
            .next()
            .into_iter()
            .flat_map(char::to_uppercase)
            .collect();
        text.push_str(&format!("\n{first}{}", chars.as_str()));
    }
    if !stale.is_empty() {
        text.push('\n');
        text.push_str(&went_with_the_cluster(
            local,
            &stale,
            "are recorded as deployed on it",
            false,
        ));
    }
    local.say(
        settings,
        text,
        json!({"cluster": local.name, "stack": stack, "state": "not created", "done": "nothing",
               "kubeconfig_removed": !removed.is_empty(), "deployed": stale}),
    )
}

/// `mara cluster status`: the cluster's state and nodes, and the kubeconfig mara uses for it.
pub fn status(settings: &Settings) -> Result<()> {
    let local = local(settings, "cluster status")?;
    let stack = local.target.stack.name.to_string();
    let cluster = local.cluster()?;
    let state = cluster.as_ref().map_or(State::Missing, Cluster::state);
    let nodes = cluster
        .as_ref()
        .map(|c| c.nodes.clone())
        .unwrap_or_default();
    let choice = crate::workspace::kubeconfig::choose(
        &local.target.workspace,
        &local.target.stack.name,
        local.target.config.as_ref().and_then(|c| c.config()),
        &local.target.env,
    );
    let exists = choice.file.is_file();
    let files =
        crate::run::kubeconfig::Files::of(&local.target.workspace, &local.target.stack.name);
    let merged = crate::run::kubeconfig::merged_for(&files, &local.target.env);
    if settings.output == OutputFormat::Json {
        return local.say(
            settings,
            String::new(),
            json!({
                "cluster": local.name,
                "stack": stack,
                "state": state.as_str(),
                "nodes": nodes,
                "kubeconfig": {
                    "file": choice.file,
                    "context": choice.context,
                    "exists": exists,
                },
                "merged": merged.as_ref().map(|m| json!({"file": m.target, "context": m.context})),
            }),
        );
    }
    let mut text = format!(
        "Cluster {} of stack {stack}: {}\n",
        local.name,
        state.as_str()
    );
    if !nodes.is_empty() {
        text.push_str(&nodes_table(&nodes));
    }
    text.push_str(&kubeconfig_lines(
        &local,
        state,
        &choice,
        exists,
        merged.as_ref(),
    ));
    if state == State::Missing {
        let stale = deployed_on_cluster(settings, &local)?;
        if !stale.is_empty() {
            text.push_str(&went_with_the_cluster(
                &local,
                &stale,
                "are recorded as deployed on it",
                false,
            ));
            text.push('\n');
        }
    }
    ui::print(&text)
}

/// `cluster status`'s table of the cluster's nodes.
fn nodes_table(nodes: &[cluster::Node]) -> String {
    let rows: Vec<[String; 3]> = nodes
        .iter()
        .map(|n| {
            let status = match (n.running, n.status.is_empty()) {
                (true, _) => "running".to_string(),
                (false, true) => "stopped".to_string(),
                (false, false) => n.status.clone(),
            };
            [n.name.clone(), n.role.clone(), status]
        })
        .collect();
    ui::table("  ", ["NODE", "ROLE", "STATE"], &rows)
}

/// `cluster status`'s lines of the kubeconfig mara uses for the cluster (`choice`; whether it
/// `exists`), or what writes it, and of the user's kubeconfig it is merged into.
fn kubeconfig_lines(
    local: &Local,
    state: State,
    choice: &crate::workspace::kubeconfig::Choice,
    exists: bool,
    merged: Option<&crate::run::kubeconfig::Merged>,
) -> String {
    let mut text = String::new();
    let shown = local.target.workspace.display(&choice.file);
    let context = match &choice.context {
        Some(context) => format!("context {context}"),
        None => "its current context".to_string(),
    };
    match exists {
        true => text.push_str(&format!("Kubeconfig: {} ({context})\n", shown.display())),
        false if state == State::Missing => text.push_str(&format!(
            "Kubeconfig: none yet (`{}` creates the cluster and writes {})\n",
            local.target.again("cluster start"),
            shown.display()
        )),
        false => text.push_str(&format!(
            "Kubeconfig: {} does not exist (`{}` writes it)\n",
            shown.display(),
            local.target.again(&format!("up --only {CLUSTER_PROJECT}"))
        )),
    }
    if let Some(merged) = merged {
        text.push_str(&format!(
            "Merged into: {} (context {})\n",
            merged.target.display(),
            merged.context.as_deref().unwrap_or("none")
        ));
    }
    text
}

/// Refuses while a run of this machine holds the stack: stopping its cluster would pull it from
/// under that run. (A run of another machine, on a team's ledger, deploys to its own cluster.)
fn refuse_while_running(settings: &Settings, local: &Local, doing: &str) -> Result<()> {
    let mut opener = local.ledger(settings)?;
    let Some(ledger) = opener.existing().map_err(|e| local.within(e))? else {
        return Ok(());
    };
    let stack = local.target.stack.name.to_string();
    if let Some(holder) = ledger.holder(&stack)?
        && holder.alive_on_this_host()
    {
        return Err(Error::Locked(Box::new(
            Problem::new(format!(
                "stack `{stack}` is locked by {holder}: {doing} its cluster would pull it from under that run"
            ))
            .hint(format!("wait for the run to end, or stop it with `{}`", settings.again("cancel"))),
        )));
    }
    Ok(())
}

/// What a tool printed and how it ended.
struct Captured {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `program` to its end, reading what it prints.
fn capture(program: &str, args: &[String], env: &BTreeMap<String, String>) -> Result<Captured> {
    let output = command(program, args, env, &here())?
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| Error::Spawn {
            program: program.to_string(),
            source,
        })?;
    Ok(Captured {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// A tool's failure, with the last thing it said.
fn tool_error(program: &str, args: &[String], output: &Captured) -> Error {
    let said = output
        .stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(str::trim)
        .unwrap_or("it printed nothing on stderr");
    let code = output.code.map_or("ended by a signal".to_string(), |c| {
        format!("exit code {c}")
    });
    Error::config(Problem::new(format!(
        "`{program} {}` failed ({code}): {said}",
        args.join(" ")
    )))
}

/// Runs `program` with what it prints going to mara's stderr (mara's own output stays apart),
/// and fails as it does.
fn pass_through(program: &str, args: &[String], env: &BTreeMap<String, String>) -> Result<()> {
    let mut command = command(program, args, env, &here())?;
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::io::stderr());
    finish(program, args, command)
}

/// mara's own working directory.
fn here() -> PathBuf {
    std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"))
}

/// `program` with `args`, in `cwd`, found on the environment's `PATH` (from `cwd`), with that
/// environment only.
fn command(
    program: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    cwd: &Path,
) -> Result<std::process::Command> {
    let path = crate::run::process::resolve_program(program, env, cwd).map_err(|error| {
        let hint = crate::deployment::checks::install_hint(program);
        Error::config(Problem::new(error.to_string()).maybe_hint(hint))
    })?;
    let mut command = std::process::Command::new(path);
    command.args(args).current_dir(cwd).env_clear().envs(env);
    Ok(command)
}

/// Runs `program` with the terminal, in `cwd`, and exits as it does.
fn hand_over(
    program: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    cwd: &Path,
) -> Result<()> {
    finish(program, args, command(program, args, env, cwd)?)
}

/// Runs `command` to its end, and fails as it does.
fn finish(program: &str, args: &[String], mut command: std::process::Command) -> Result<()> {
    tracing::info!("running {program} {}", args.join(" "));
    let status = command.status().map_err(|source| Error::Spawn {
        program: program.to_string(),
        source,
    })?;
    exited(program, status)
}

/// A tool's exit as mara's: its code, or 128 + the signal that ended it (the shell's convention).
fn exited(program: &str, status: std::process::ExitStatus) -> Result<()> {
    match status.code() {
        Some(0) => Ok(()),
        Some(code) => Err(Error::ToolFailed {
            program: program.to_string(),
            code,
        }),
        None => Err(Error::ToolFailed {
            program: program.to_string(),
            code: 128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0),
        }),
    }
}
