//! `extends` and `remove`: building one provider from another.
//!
//! The result keeps the base's declaration order, which is what breaks ties in the execution order.
//! A project the extending file adds takes the place the original runner inserted its projects at:
//! right after its `insert_after` project when given, else right after the last of its `after`
//! projects of the same stage, else right before the first of its `before` projects of the same
//! stage, else at the end of its stage (infrastructure projects before kubernetes ones). A project
//! with the same path as an inherited one replaces it in place (keeping the inherited `after` and
//! `before` when it declares no order of its own). `remove` drops inherited projects,
//! and with them every `after`/`before` that names them.

use std::collections::HashMap;

use super::schema::{self, ParsedProject};
use super::{ConfigSpec, Origin, Project, Provider, ProviderSource, Registry, Stage};
use crate::error::{Error, Location, Problem, Result, did_you_mean};

/// `chain` holds the sources being resolved, outermost first, by name and whether built in: a
/// workspace `aws.toml` that extends `aws` is a different source from the built-in `aws`.
pub(super) fn resolve(
    registry: &Registry,
    source: &ProviderSource,
    chain: &mut Vec<(String, bool)>,
) -> Result<Provider> {
    let mut parsed = schema::parse(&source.display_path, &source.text).map_err(Error::Problems)?;
    chain.push(identity(source));
    let Some((base_name, base_at)) = parsed.extends.take() else {
        return standalone(source, parsed);
    };
    let base_source = base_source(registry, source, chain, &base_name, base_at)?;
    let base = resolve(registry, base_source, chain)?;
    let mut problems = Vec::new();
    let mut projects = inherited_projects(&base, &parsed.remove, &mut problems);
    add_projects(&mut projects, parsed.projects, &mut problems);
    let config = merged_config(&base.config, parsed.config);
    if !problems.is_empty() {
        return Err(Error::Problems(problems));
    }
    let mut extends = vec![base.name.clone()];
    extends.extend(base.extends.iter().cloned());
    // A pool the file sets comes over its base's.
    let mut pools = base.pools.clone();
    pools.extend(parsed.pools);
    Ok(Provider {
        name: source.name.clone(),
        description: parsed.description.unwrap_or(base.description),
        infra_type: parsed.infra_type.or(base.infra_type),
        origin: source.origin.clone(),
        is_abstract: parsed.is_abstract,
        extends,
        config,
        projects,
        pools,
    })
}

/// A provider that extends none: it has nothing to remove from, and a description of its own.
fn standalone(source: &ProviderSource, parsed: schema::ParsedProvider) -> Result<Provider> {
    let mut problems = Vec::new();
    if !parsed.remove.is_empty() {
        problems.push(
            Problem::new("`remove` needs `extends`: there is nothing to remove from")
                .at(parsed.remove[0].at.clone()),
        );
    }
    let description = parsed.description.unwrap_or_default();
    if description.is_empty() {
        problems
            .push(Problem::new("a provider needs a `description`").in_file(&source.display_path));
    }
    if !problems.is_empty() {
        return Err(Error::Problems(problems));
    }
    Ok(Provider {
        name: source.name.clone(),
        description,
        infra_type: parsed.infra_type,
        origin: source.origin.clone(),
        is_abstract: parsed.is_abstract,
        extends: Vec::new(),
        config: parsed.config,
        projects: parsed.projects.into_iter().map(|p| p.project).collect(),
        pools: parsed.pools,
    })
}

/// The source `extends` names (declared at `base_at`), refused when unknown or when it closes a
/// cycle through `chain`.
fn base_source<'r>(
    registry: &'r Registry,
    source: &ProviderSource,
    chain: &[(String, bool)],
    base_name: &str,
    base_at: Location,
) -> Result<&'r ProviderSource> {
    // A workspace file that extends its own name builds on the built-in provider it replaces.
    let base_source = match (&source.origin, base_name == source.name) {
        (Origin::File(_), true) => registry.builtin.get(base_name),
        _ => registry.source(base_name),
    };
    let Some(base_source) = base_source else {
        let problem = registry.unknown(base_name);
        return Err(Error::config(Problem {
            location: Some(base_at),
            subject: Some("`extends`".into()),
            ..problem
        }));
    };
    if chain.contains(&identity(base_source)) {
        let names = chain
            .iter()
            .map(|(name, _)| name.as_str())
            .chain(std::iter::once(base_name));
        let cycle = names.collect::<Vec<_>>().join(" -> ");
        return Err(Error::config(
            Problem::new(format!("providers extend each other in a cycle: {cycle}"))
                .at(base_at)
                .subject("`extends`"),
        ));
    }
    Ok(base_source)
}

/// The base's projects less those `remove` names (one it does not have is a problem), and every
/// `after`/`before` that names them.
fn inherited_projects(
    base: &Provider,
    remove: &[super::Reference],
    problems: &mut Vec<Problem>,
) -> Vec<Project> {
    let mut projects = base.projects.clone();
    for removed in remove {
        match projects.iter().position(|p| p.path == removed.target) {
            Some(index) => {
                projects.remove(index);
            }
            None => problems.push(
                Problem::new(format!(
                    "`remove` names `{}`, which `{}` does not have",
                    removed.target, base.name
                ))
                .at(removed.at.clone())
                .maybe_hint(
                    did_you_mean(
                        &removed.target,
                        base.projects.iter().map(|p| p.path.as_str()),
                    )
                    .map(|s| format!("did you mean `{s}`?")),
                ),
            ),
        }
    }
    let removed: Vec<&str> = remove.iter().map(|r| r.target.as_str()).collect();
    for project in &mut projects {
        project
            .after
            .retain(|r| !removed.contains(&r.target.as_str()));
        project
            .before
            .retain(|r| !removed.contains(&r.target.as_str()));
    }
    projects
}

/// The file's own projects into the inherited ones: one with an inherited path replaces it in
/// place, a new one goes where `insertion_point` says.
fn add_projects(
    projects: &mut Vec<Project>,
    added: Vec<ParsedProject>,
    problems: &mut Vec<Problem>,
) {
    // How many projects this file has already placed after each anchor, to keep file order.
    let mut placed_after: HashMap<String, usize> = HashMap::new();
    // This file's own entries: a path it declares twice is a mistake, not an override.
    let mut declared_here: HashMap<String, Location> = HashMap::new();
    for ParsedProject {
        project,
        insert_after,
    } in added
    {
        if let Some(first) = declared_here.get(&project.path) {
            let line = first
                .line
                .map(|l| format!("line {l}"))
                .unwrap_or_else(|| first.to_string());
            problems.push(
                Problem::new(format!("duplicate project path (first declared at {line})"))
                    .at(project.declared_at.clone())
                    .subject(format!("`{}`", project.path)),
            );
            continue;
        }
        declared_here.insert(project.path.clone(), project.declared_at.clone());
        if let Some(index) = projects.iter().position(|p| p.path == project.path) {
            projects[index] = redefined(&projects[index], project);
            continue;
        }
        let index =
            match insertion_point(projects, &project, insert_after.as_ref(), &mut placed_after) {
                Ok(index) => index,
                Err(problem) => {
                    problems.push(problem);
                    projects.len()
                }
            };
        projects.insert(index, project);
    }
}

/// `project` in place of the inherited `was`: whole, but a redefinition that says nothing of its
/// order (no `after`, `before` or inputs) keeps the inherited `after` and `before` — one that
/// changes a description or an engine does not cut the project loose from the graph.
fn redefined(was: &Project, mut project: Project) -> Project {
    if project.after.is_empty() && project.before.is_empty() && project.inputs.is_empty() {
        project.after = was.after.clone();
        project.before = was.before.clone();
    }
    project
}

/// The base's `[[config]]` with the file's: an entry of the same key replaces the inherited one.
fn merged_config(base: &[ConfigSpec], added: Vec<ConfigSpec>) -> Vec<ConfigSpec> {
    let mut config = base.to_vec();
    for entry in added {
        match config.iter_mut().find(|c| c.key == entry.key) {
            Some(existing) => *existing = entry,
            None => config.push(entry),
        }
    }
    config
}

fn identity(source: &ProviderSource) -> (String, bool) {
    (source.name.clone(), source.origin == Origin::Builtin)
}

/// Where an added project goes in the inherited declaration order. Only projects of its own
/// stage place it: the original ran `infra_execution_order() + k8s_execution_order()`, so an
/// infrastructure project wired `before` a kubernetes one still belongs with the infrastructure.
#[allow(clippy::result_large_err)] // cold path: a mistyped `insert_after`
fn insertion_point(
    projects: &[Project],
    project: &Project,
    insert_after: Option<&super::Reference>,
    placed_after: &mut HashMap<String, usize>,
) -> std::result::Result<usize, Problem> {
    let index_of = |path: &str| projects.iter().position(|p| p.path == path);
    let same_stage = |path: &str| index_of(path).filter(|&i| projects[i].stage == project.stage);
    let anchor = match insert_after {
        Some(reference) => match index_of(&reference.target) {
            Some(index) => Some((reference.target.clone(), index)),
            None => {
                return Err(Problem::new(format!(
                    "`insert_after` names `{}`, which is not a project here",
                    reference.target
                ))
                .at(reference.at.clone())
                .subject(format!("project `{}`", project.path))
                .maybe_hint(
                    did_you_mean(&reference.target, projects.iter().map(|p| p.path.as_str()))
                        .map(|s| format!("did you mean `{s}`?")),
                ));
            }
        },
        None => project
            .after
            .iter()
            .filter_map(|r| same_stage(&r.target).map(|index| (r.target.clone(), index)))
            .max_by_key(|(_, index)| *index),
    };
    if let Some((anchor, index)) = anchor {
        let count = placed_after.entry(anchor).or_default();
        *count += 1;
        return Ok(index + *count);
    }
    if let Some(first_before) = project
        .before
        .iter()
        .filter_map(|r| same_stage(&r.target))
        .min()
    {
        return Ok(first_before);
    }
    // At the end of its stage: infrastructure projects come before every kubernetes one.
    let end_of_stage = projects
        .iter()
        .rposition(|p| p.stage == project.stage)
        .map(|i| i + 1);
    Ok(end_of_stage.unwrap_or(match project.stage {
        Stage::Infrastructure => 0,
        Stage::Kubernetes => projects.len(),
    }))
}
