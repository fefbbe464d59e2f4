//! A deployment, loaded once (docs/ARCHITECTURE.md, "How a plan is made"): the workspace, its
//! environment file, the stack and its shared configuration (`StackFiles`), then the provider and
//! its execution graph (`Deployment`). Each file is read once, in that order — each needs the one
//! before — and every command that needs them takes them from here.
//!
//! `checks` holds what can be checked of a deployment before anything runs; `run` turns the
//! failed checks into an error, `validate` into its list, with the same words.

pub mod checks;
pub mod known_keys;
pub mod state;

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Location, Problem, Result};
use crate::graph::ExecutionGraph;
use crate::provider::{Provider, Registry};
use crate::settings::{ProviderSource, Settings};
use crate::workspace::Workspace;
use crate::workspace::envfile::{self, EnvFile};
use crate::workspace::stack::{self, ResolvedStack};
use crate::workspace::stack_config::{INFRA_TYPE_KEY, StackConfigFile};

/// The stack's side of a deployment: what every command that acts on a stack reads.
#[derive(Debug, Clone)]
pub struct StackFiles {
    pub workspace: Workspace,
    pub env_file: Option<EnvFile>,
    /// `None` when nothing names a stack (some commands do without one).
    pub stack: Option<ResolvedStack>,
    /// The stack's shared configuration, when there is a stack.
    pub config: Option<StackConfigFile>,
}

impl StackFiles {
    /// Finds the workspace and reads its environment file and the stack's configuration.
    pub fn load(settings: &Settings) -> Result<StackFiles> {
        // A team's ledger is reached from anywhere (`status` in a CI job with no checkout).
        let (workspace, _) = ledger_workspace(settings)?;
        StackFiles::load_in(settings, workspace)
    }

    /// The workspace alone, for a command that plans with a provider named explicitly: nothing of
    /// the stack is read.
    pub fn unread(workspace: Workspace) -> StackFiles {
        StackFiles {
            workspace,
            env_file: None,
            stack: None,
            config: None,
        }
    }

    /// As `load`, in a workspace already found.
    pub fn load_in(settings: &Settings, workspace: Workspace) -> Result<StackFiles> {
        let within = |e: Error| e.relative_to(&workspace.root);
        let env_file = EnvFile::load(&workspace.env_file()).map_err(within)?;
        let stack = stack::resolve(settings.stack.as_deref(), &settings.env, env_file.as_ref())
            .map_err(within)?;
        let config = match &stack {
            Some(stack) => Some(
                StackConfigFile::load(&workspace.stack_config_file(&stack.name)).map_err(within)?,
            ),
            None => None,
        };
        Ok(StackFiles {
            workspace,
            env_file,
            stack,
            config,
        })
    }

    /// The stack, for a command that cannot do without one.
    pub fn required_stack(&self) -> Result<&ResolvedStack> {
        self.stack.as_ref().ok_or_else(|| {
            Error::usage(stack::missing_stack_problem(
                &self.workspace.display(&self.workspace.env_file()),
            ))
        })
    }

    /// The environment of every process mara starts for the stack: the process environment
    /// overlaid by the environment file, mara's defaults, a relative `file://` backend URL made
    /// absolute, and `PULUMI_STACK` the stack chosen. `MARA_SECRET_*` is still in it: `configure::strip_secret_variables` takes
    /// it out before any engine or hook sees it.
    pub fn environment(&self, settings: &Settings) -> BTreeMap<String, String> {
        let mut env = envfile::merged_environment(&settings.env, self.env_file.as_ref());
        resolve_backend_url(&mut env, &self.workspace.root);
        // The stack of this invocation, whatever the environment file says.
        if let Some(stack) = &self.stack {
            env.insert("PULUMI_STACK".into(), stack.name.to_string());
        }
        env
    }

    /// Reads the secrets project's own stack configuration (docs/commands.md, "Secrets").
    pub fn secrets_config(&self, stack: &ResolvedStack) -> Result<StackConfigFile> {
        let file = self.workspace.secrets_config_file(&stack.name);
        StackConfigFile::load(&file).map_err(|e| e.relative_to(&self.workspace.root))
    }

    /// Adds the provider and its graph.
    pub fn into_deployment(self, settings: &Settings) -> Result<Deployment> {
        let root = self.workspace.root.clone();
        let within = |e: Error| e.relative_to(&root);
        let registry = registry(&self.workspace).map_err(within)?;
        let (provider, choice) =
            choose_provider(settings, &self.workspace, &registry, self.config.as_ref())
                .map_err(within)?;
        let graph = ExecutionGraph::build(&provider).map_err(within)?;
        let pools = pools(&provider, &self.workspace.settings.pools).map_err(within)?;
        Ok(Deployment {
            files: self,
            registry,
            provider,
            choice,
            graph,
            pools,
        })
    }
}

/// Each pool's limit: the provider's `[pools]`, mara.toml's over them; a project whose pool has
/// none is refused, with where it names it.
pub fn pools(
    provider: &Provider,
    set: &BTreeMap<String, usize>,
) -> Result<BTreeMap<String, usize>> {
    let mut pools = provider.pools.clone();
    pools.extend(set.iter().map(|(name, limit)| (name.clone(), *limit)));
    // Said once a pool, where its first project names it.
    let mut said = std::collections::BTreeSet::new();
    let problems: Vec<Problem> = (provider.projects.iter())
        .filter_map(|project| {
            let pool = project.pool.as_ref()?;
            if pools.contains_key(&pool.target) || !said.insert(pool.target.clone()) {
                return None;
            }
            let hint =
                match crate::error::did_you_mean(&pool.target, pools.keys().map(String::as_str)) {
                    Some(near) => format!("did you mean `{near}`?"),
                    None => format!(
                        "set its limit in mara.toml's [pools] (`{} = 2`), or in the provider's",
                        pool.target
                    ),
                };
            let naming = (provider.projects.iter())
                .filter(|p| p.pool.as_ref().is_some_and(|p| p.target == pool.target))
                .count();
            let others = match naming {
                1 => String::new(),
                n => format!(" ({n} projects name it)"),
            };
            Some(
                Problem::new(format!("pool `{}` has no limit{others}", pool.target))
                    .at(pool.at.clone())
                    .subject(format!("project `{}`", project.path))
                    .hint(hint),
            )
        })
        .collect();
    match problems.is_empty() {
        true => Ok(pools),
        false => Err(Error::Problems(problems)),
    }
}

/// Everything a command that plans works from: the stack's files, the provider and its graph.
#[derive(Debug)]
pub struct Deployment {
    pub files: StackFiles,
    pub registry: Registry,
    pub provider: Provider,
    pub choice: ProviderChoice,
    pub graph: ExecutionGraph,
    /// Each pool's limit (`[pools]` of the provider, then mara.toml's).
    pub pools: BTreeMap<String, usize>,
}

impl Deployment {
    /// Loads the deployment of this invocation: every file once, in dependency order.
    pub fn load(settings: &Settings) -> Result<Deployment> {
        StackFiles::load(settings)?.into_deployment(settings)
    }

    /// For a command that only shows the plan: the stack's files are read only when the provider
    /// has to come from the stack's configuration (a provider named explicitly is shown anywhere,
    /// in a workspace or not).
    pub fn load_for_planning(settings: &Settings) -> Result<Deployment> {
        let workspace = discover(settings)?;
        let files = if explicit_provider(settings, &workspace).is_some() {
            StackFiles::unread(workspace)
        } else {
            StackFiles::load_in(settings, workspace.require()?)?
        };
        files.into_deployment(settings)
    }

    pub fn workspace(&self) -> &Workspace {
        &self.files.workspace
    }
}

/// Finds the workspace of this invocation (`-C DIR`, else the current directory).
pub fn discover(settings: &Settings) -> Result<Workspace> {
    let start = std::path::absolute(&settings.start_dir)
        .map_err(|e| Error::read(&settings.start_dir, e))?;
    Workspace::discover(&start).map_err(|e| match crate::workspace::find_root(&start) {
        Some(root) => e.relative_to(&root),
        None => e,
    })
}

/// The workspace of a command that needs one (`discover`, then `Workspace::require`): outside
/// one, the one error that says so.
pub fn workspace(settings: &Settings) -> Result<Workspace> {
    discover(settings)?.require()
}

/// The workspace of a command that reads the ledger (`serve`, `serve token`): any directory
/// when the ledger is a team's server; the workspace's own file only in a workspace (outside
/// one, `Workspace::require`'s error, rather than a ledger made where nothing ran).
pub fn ledger_workspace(settings: &Settings) -> Result<(Workspace, crate::ledger::Place)> {
    let workspace = discover(settings)?;
    let place = crate::ledger::place(&workspace, &settings.env)?;
    match place {
        crate::ledger::Place::File(_) => Ok((workspace.require()?, place)),
        _ => Ok((workspace, place)),
    }
}

/// The graph of provider `name` as `workspace` defines it now.
pub fn graph_of(workspace: &Workspace, name: &str) -> Result<ExecutionGraph> {
    let registry = registry(workspace)?;
    ExecutionGraph::build(&resolve_runnable(&registry, name)?)
}

/// Whether a project of provider `name` keeps a lock of its engine's on its stack, by path
/// (`Engine::lock_clearing`): one whose engine keeps none (a command's) need not be cleared. A
/// project the provider no longer has, or a provider that does not read, may.
pub fn keeps_engine_lock(workspace: &Workspace, name: &str) -> impl Fn(&str) -> bool + use<> {
    let graph = graph_of(workspace, name).ok();
    let default = workspace.settings.engine;
    let lockless: std::collections::BTreeSet<String> = (graph.iter())
        .flat_map(|g| (0..g.len()).map(move |i| g.project(i)))
        .filter(|p| {
            let engine = p.engine_or(default);
            engine.lock_clearing(Path::new(""), "") == crate::engine::LockClearing::NoLock
        })
        .map(|p| p.path.clone())
        .collect();
    move |path: &str| !lockless.contains(path)
}

/// The built-in providers and the workspace's own.
pub fn registry(workspace: &Workspace) -> Result<Registry> {
    Registry::load(&workspace.providers_dir(), |path| {
        workspace.display(path).into_owned()
    })
}

/// How the provider of this invocation was chosen, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderChoice {
    Flag,
    MaraProvider,
    MaraToml,
    /// The stack configuration records this `kubernetes:infra_type`.
    InfraType(String),
}

impl std::fmt::Display for ProviderChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProviderChoice::Flag => f.write_str("from --provider"),
            ProviderChoice::MaraProvider => f.write_str("from MARA_PROVIDER"),
            ProviderChoice::MaraToml => f.write_str("from mara.toml"),
            ProviderChoice::InfraType(t) => {
                write!(f, "the stack records kubernetes:infra_type {t}")
            }
        }
    }
}

/// The provider of a command that plans: `--provider`, `MARA_PROVIDER`, `provider` in mara.toml,
/// else the one whose `infra_type` the stack's configuration records.
pub fn choose_provider(
    settings: &Settings,
    workspace: &Workspace,
    registry: &Registry,
    config: Option<&StackConfigFile>,
) -> Result<(Provider, ProviderChoice)> {
    if let Some((name, choice)) = explicit_provider(settings, workspace) {
        tracing::info!(provider = %name, "provider {choice}");
        return Ok((resolve_runnable(registry, &name)?, choice));
    }
    if let Some(config) = config
        && let Some(found) = provider_for_stack(registry, config)?
    {
        tracing::info!(provider = %found.0.name, "provider chosen because {}", found.1);
        return Ok(found);
    }
    let names: Vec<&str> = registry
        .names()
        .into_iter()
        .filter(|n| registry.resolve(n).is_ok_and(|p| !p.is_abstract))
        .collect();
    Err(Error::usage(Problem::new("no provider given").hint(
        format!(
            "pass --provider NAME (one of: {}), set MARA_PROVIDER, or set `provider` in mara.toml",
            names.join(", ")
        ),
    )))
}

/// The provider name given explicitly: `--provider`, `MARA_PROVIDER`, then `provider` in mara.toml.
pub fn explicit_provider(
    settings: &Settings,
    workspace: &Workspace,
) -> Option<(String, ProviderChoice)> {
    match &settings.provider {
        Some((name, ProviderSource::Flag)) => Some((name.clone(), ProviderChoice::Flag)),
        Some((name, ProviderSource::MaraProviderVariable)) => {
            Some((name.clone(), ProviderChoice::MaraProvider))
        }
        None => workspace
            .settings
            .provider
            .clone()
            .map(|name| (name, ProviderChoice::MaraToml)),
    }
}

/// The provider whose `infra_type` the stack configuration records.
pub fn provider_for_stack(
    registry: &Registry,
    config: &StackConfigFile,
) -> Result<Option<(Provider, ProviderChoice)>> {
    let Some(values) = config.config() else {
        return Ok(None);
    };
    let Some(recorded) = values.infra_type().map_err(|p| Error::config(*p))? else {
        return Ok(None);
    };
    let matching: Vec<Provider> = registry
        .resolve_all()?
        .into_iter()
        .filter(|p| !p.is_abstract && p.infra_type.as_deref() == Some(recorded.as_str()))
        .collect();
    match <[Provider; 1]>::try_from(matching) {
        Ok([provider]) => Ok(Some((provider, ProviderChoice::InfraType(recorded)))),
        Err(matching) if matching.is_empty() => Err(Error::config(
            Problem::new(format!(
                "the stack records kubernetes:infra_type `{recorded}`, which no provider has"
            ))
            .at(config
                .config()
                .map(|c| c.location_of(INFRA_TYPE_KEY))
                .unwrap_or_else(|| Location::file(config.path())))
            .hint("pass --provider NAME"),
        )),
        Err(matching) => {
            let names: Vec<&str> = matching.iter().map(|p| p.name.as_str()).collect();
            Err(Error::usage(
                Problem::new(format!(
                    "the stack records kubernetes:infra_type `{recorded}`, which several providers have: {}",
                    names.join(", ")
                ))
                .hint("pass --provider NAME"),
            ))
        }
    }
}

/// Resolves a provider that can be run: abstract ones only exist to be extended.
pub fn resolve_runnable(registry: &Registry, name: &str) -> Result<Provider> {
    let provider = registry.resolve(name)?;
    if provider.is_abstract {
        return Err(Error::usage(
            Problem::new(format!(
                "provider `{name}` is abstract: it exists only to be extended"
            ))
            .hint(format!(
                "write a provider with `extends = \"{name}\"`, or use one that does"
            )),
        ));
    }
    Ok(provider)
}

/// A relative `file://` backend URL names a directory under the workspace root: every engine
/// process runs in its own project directory, so a relative path would mean a different backend
/// to each.
pub fn resolve_backend_url(env: &mut BTreeMap<String, String>, root: &Path) {
    if let Some(url) = env.get_mut("PULUMI_BACKEND_URL") {
        *url = absolute_backend_url(url, root);
    }
}

/// `url` with a relative `file://` path made absolute under `root`; any other URL as it is.
pub fn absolute_backend_url(url: &str, root: &Path) -> String {
    let Some(path) = url.strip_prefix("file://") else {
        return url.to_string();
    };
    if path.is_empty() || path.starts_with('/') || path.starts_with('~') {
        return url.to_string();
    }
    let absolute = root.join(path.trim_start_matches("./"));
    format!("file://{}", absolute.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relative_file_backend_is_made_absolute() {
        let mut env = BTreeMap::from([(
            "PULUMI_BACKEND_URL".to_string(),
            "file://./.mara/state".to_string(),
        )]);
        resolve_backend_url(&mut env, Path::new("/w"));
        assert_eq!(env["PULUMI_BACKEND_URL"], "file:///w/.mara/state");
        for kept in ["file:///abs", "file://~/x", "s3://bucket"] {
            let mut env = BTreeMap::from([("PULUMI_BACKEND_URL".to_string(), kept.to_string())]);
            resolve_backend_url(&mut env, Path::new("/w"));
            assert_eq!(env["PULUMI_BACKEND_URL"], kept);
        }
    }
}
