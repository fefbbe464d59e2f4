//! The commands: each loads what it needs through the layers below, then prints.

pub mod cluster;
pub mod config;
pub mod ledger;
pub mod list_providers;
pub mod output;
pub mod run;
pub mod show_execution;
pub mod validate;

use crate::error::{Error, Problem, Result};
use crate::provider::{Provider, Registry};
use crate::settings::{ProviderSource, Settings};
use crate::workspace::Workspace;
use crate::workspace::envfile::EnvFile;
use crate::workspace::stack::{self, ResolvedStack};
use crate::workspace::stack_config::{INFRA_TYPE_KEY, StackConfigFile};

pub fn workspace(settings: &Settings) -> Result<Workspace> {
    let start = std::path::absolute(&settings.start_dir)
        .map_err(|e| Error::read(&settings.start_dir, e))?;
    Workspace::discover(&start).map_err(|e| match crate::workspace::find_root(&start) {
        Some(root) => e.relative_to(&root),
        None => e,
    })
}

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
    let Some(recorded) = config.config().and_then(|c| c.get_text(INFRA_TYPE_KEY)) else {
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
                .unwrap_or_else(|| crate::error::Location::file(config.path())))
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

/// The environment file, the stack and its configuration, as far as each can be read.
pub struct StackContext {
    pub env_file: Option<EnvFile>,
    pub stack: Option<ResolvedStack>,
    pub config: Option<StackConfigFile>,
}

impl StackContext {
    /// The stack, for a command that cannot do without one.
    pub fn required_stack(&self, workspace: &Workspace) -> Result<ResolvedStack> {
        self.stack.clone().ok_or_else(|| {
            Error::usage(stack::missing_stack_problem(
                &workspace.display(&workspace.env_file()),
            ))
        })
    }
}

pub fn stack_context(settings: &Settings, workspace: &Workspace) -> Result<StackContext> {
    let env_file = EnvFile::load(&workspace.env_file())?;
    let stack = stack::resolve(settings.stack.as_deref(), &settings.env, env_file.as_ref())?;
    let config = match &stack {
        Some(stack) => Some(StackConfigFile::load(
            &workspace.stack_config_file(&stack.name),
        )?),
        None => None,
    };
    Ok(StackContext {
        env_file,
        stack,
        config,
    })
}

/// The provider of a command that plans: explicit, else the one the stack records.
pub fn choose_provider(
    settings: &Settings,
    workspace: &Workspace,
    registry: &Registry,
) -> Result<(Provider, ProviderChoice)> {
    if let Some((name, choice)) = explicit_provider(settings, workspace) {
        tracing::info!(provider = %name, "provider {choice}");
        return Ok((resolve_runnable(registry, &name)?, choice));
    }
    let context = stack_context(settings, workspace)?;
    if let Some(config) = &context.config
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
