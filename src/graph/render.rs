//! Showing a plan: the tree (the original's layout, with branches closed properly, split by
//! stage, marking hooks, secrets and engines), a plain list, Graphviz dot, Mermaid, and JSON
//! (docs/commands.md, "show-execution"). Everything here is pure: text in, text out.

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::{EdgeKind, Plan};
use crate::engine::EngineKind;
use crate::provider::{Hook, Project, Provider, Stage};
use crate::style::Style;

/// What a rendering needs besides the plan.
pub struct View<'a> {
    pub provider: &'a Provider,
    pub plan: &'a Plan<'a>,
    /// The Pulumi project name of each project (by graph index), where its `Pulumi.yaml` was read.
    pub names: &'a [Option<String>],
    /// The workspace's engine, for projects that do not name one.
    pub default_engine: EngineKind,
    pub style: Style,
    /// How many projects of each pool, and of each engine, run at once (the provider's
    /// `[pools]`, mara.toml's over them, and mara.toml's `[limits]`).
    pub budgets: &'a crate::workspace::budgets::Budgets,
    /// Whether the tree opens with the provider and its count (not with `-q`, unless several
    /// trees follow each other: then each names its provider).
    pub heading: bool,
}

impl View<'_> {
    fn projects(&self) -> impl Iterator<Item = (usize, &Project)> {
        self.plan
            .order()
            .iter()
            .map(|&i| (i, self.plan.graph.project(i)))
    }

    /// Direct predecessors within the plan.
    fn after(&self, i: usize) -> Vec<(usize, EdgeKind)> {
        self.plan
            .graph
            .predecessors(i)
            .into_iter()
            .filter(|(j, _)| self.plan.contains(*j))
            .collect()
    }
}

/// `show-execution --format list`: one path per line, in execution order, nothing else.
pub fn list(plan: &Plan<'_>) -> String {
    plan.order()
        .iter()
        .map(|&i| format!("{}\n", plan.graph.project(i).path))
        .collect()
}

/// The tree: a header, then one tree per stage whose groups are consecutive runs of projects
/// sharing a parent directory, as the original printed them.
pub fn tree(view: &View<'_>) -> String {
    let style = view.style;
    // Without its heading (`-q`), the tree starts at its first stage.
    let mut out = match view.heading {
        true => heading(view),
        false => String::new(),
    };
    for stage in [Stage::Infrastructure, Stage::Kubernetes] {
        let projects: Vec<&Project> = view
            .projects()
            .map(|(_, p)| p)
            .filter(|p| p.stage == stage)
            .collect();
        if projects.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "\n{}",
            style.bold(&format!("{} stage", stage.as_str()))
        );
        let groups = consecutive_groups(&projects);
        for (g, group) in groups.iter().enumerate() {
            let last_group = g + 1 == groups.len();
            let branch = match (g, last_group) {
                (0, true) => "───",
                (0, false) => "┌──",
                (_, false) => "├──",
                (_, true) => "└──",
            };
            let _ = writeln!(out, " {branch} {}", style.cyan(group[0].group()));
            let rail = if last_group { "    " } else { "│   " };
            for (k, project) in group.iter().enumerate() {
                let twig = if k + 1 == group.len() {
                    "└──"
                } else {
                    "├──"
                };
                let description = if project.description.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", project.description)
                };
                let notes = notes(project, view.default_engine);
                let notes = if notes.is_empty() {
                    String::new()
                } else {
                    style.dim(&format!(" · {}", notes.join(" · ")))
                };
                let _ = writeln!(out, " {rail}{twig} {}{description}{notes}", project.leaf());
            }
        }
    }
    match view.heading {
        true => out,
        false => out.trim_start_matches('\n').to_string(),
    }
}

/// The provider, what it is, and how many of its projects the tree shows.
fn heading(view: &View<'_>) -> String {
    let (style, provider) = (view.style, view.provider);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} {}: {}",
        style.dim("Provider"),
        style.bold(&provider.name),
        provider.description
    );
    let total = view.plan.graph.len();
    let count = if view.plan.is_everything() {
        format!(
            "{total} {}",
            if total == 1 { "project" } else { "projects" }
        )
    } else {
        format!("{} of {total} projects selected", view.plan.len())
    };
    let infra = match &provider.infra_type {
        Some(t) => format!(", recorded as kubernetes:infra_type {t}"),
        None => String::new(),
    };
    let _ = writeln!(
        out,
        "{}",
        style.dim(&format!("{count}, in execution order{infra}"))
    );
    out
}

/// Consecutive runs of projects with the same parent directory.
fn consecutive_groups<'p>(projects: &[&'p Project]) -> Vec<Vec<&'p Project>> {
    let mut groups: Vec<Vec<&Project>> = Vec::new();
    for &project in projects {
        match groups.last_mut() {
            Some(group) if group[0].group() == project.group() => group.push(project),
            _ => groups.push(vec![project]),
        }
    }
    groups
}

/// The marks after a project in the tree: its engine (when not the default), hooks, secrets.
fn notes(project: &Project, default_engine: EngineKind) -> Vec<String> {
    let mut notes = Vec::new();
    let engine = project.engine_or(default_engine);
    if engine != default_engine {
        notes.push(format!("engine: {engine}"));
    }
    for (when, hooks) in [
        ("after up", &project.on_success),
        ("after destroy", &project.on_destroy),
    ] {
        if !hooks.is_empty() {
            let hooks: Vec<String> = hooks.iter().map(hook_summary).collect();
            notes.push(format!("{when}: {}", hooks.join(", ")));
        }
    }
    if !project.secrets.is_empty() {
        let keys: Vec<&str> = project.secrets.iter().map(|s| s.key.as_str()).collect();
        notes.push(format!("secrets: {}", keys.join(", ")));
    }
    if !project.inputs.is_empty() {
        let inputs: Vec<String> = (project.inputs.iter())
            .map(|i| format!("{} = {}:{}", i.name, i.from.target, i.output))
            .collect();
        notes.push(format!("inputs: {}", inputs.join(", ")));
    }
    notes
}

fn hook_summary(hook: &Hook) -> String {
    match hook {
        Hook::Kubeconfig { merge: true, .. } => "kubeconfig (merge)".into(),
        Hook::Kubeconfig { merge: false, .. } => "kubeconfig".into(),
        Hook::Command { run } => {
            let program = run.split_whitespace().next().unwrap_or_default();
            format!("command `{program} …`")
        }
    }
}

fn hook_json(when: &str, hook: &Hook) -> Value {
    match hook {
        Hook::Kubeconfig { output, merge } => {
            json!({"when": when, "kind": "kubeconfig", "output": output, "merge": merge})
        }
        Hook::Command { run } => json!({"when": when, "kind": "command", "run": run}),
    }
}

/// `show-execution --format json` for one provider (docs/commands.md, "show-execution").
pub fn json<'a>(view: &'a View<'_>) -> JsonPlan<'a> {
    let projects = view
        .projects()
        .map(|(i, p)| JsonProject {
            path: &p.path,
            name: view.names.get(i).and_then(Option::as_deref),
            description: &p.description,
            stage: p.stage.as_str(),
            engine: p.engine_or(view.default_engine).as_str(),
            after: (view.after(i).iter())
                .map(|&(j, _)| view.plan.graph.project(j).path.as_str())
                .collect(),
            hooks: (p.on_success.iter())
                .map(|h| hook_json("up", h))
                .chain(p.on_destroy.iter().map(|h| hook_json("destroy", h)))
                .collect(),
            secrets: p.secrets.iter().map(|s| s.key.as_str()).collect(),
            inputs: (p.inputs.iter())
                .map(|i| (i.name.as_str(), format!("{}:{}", i.from.target, i.output)))
                .collect(),
            pool: p.pool.as_ref().map(|pool| pool.target.as_str()),
        })
        .collect();
    JsonPlan {
        provider: &view.provider.name,
        infra_type: view.provider.infra_type.as_deref(),
        pools: &view.budgets.pools,
        limits: (view.budgets.engines.iter())
            .map(|(engine, n)| (engine.as_str(), *n))
            .collect(),
        projects,
    }
}

/// The JSON plan of one provider, serialized as it is built (a plan of 10,000 projects is no
/// tree of values first).
#[derive(serde::Serialize)]
pub struct JsonPlan<'a> {
    provider: &'a str,
    infra_type: Option<&'a str>,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pools: &'a std::collections::BTreeMap<String, usize>,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    limits: std::collections::BTreeMap<&'static str, usize>,
    projects: Vec<JsonProject<'a>>,
}

#[derive(serde::Serialize)]
struct JsonProject<'a> {
    path: &'a str,
    name: Option<&'a str>,
    description: &'a str,
    stage: &'static str,
    engine: &'static str,
    after: Vec<&'a str>,
    hooks: Vec<Value>,
    secrets: Vec<&'a str>,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    inputs: std::collections::BTreeMap<&'a str, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pool: Option<&'a str>,
}

/// Graphviz: one cluster per stage; stage-rule edges dashed. Nodes are named by path, which is
/// unique within a provider; with `--all` each provider is its own graph.
pub fn dot(view: &View<'_>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph {} {{", dot_id(&view.provider.name));
    let _ = writeln!(
        out,
        "  label={};",
        dot_id(&format!(
            "{}: {}",
            view.provider.name, view.provider.description
        ))
    );
    let _ = writeln!(
        out,
        "  labelloc=t;\n  rankdir=LR;\n  node [shape=box, style=rounded];"
    );
    for stage in [Stage::Infrastructure, Stage::Kubernetes] {
        let members: Vec<(usize, &Project)> =
            view.projects().filter(|(_, p)| p.stage == stage).collect();
        if members.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "  subgraph {} {{",
            dot_id(&format!("cluster_{}", stage.as_str()))
        );
        let _ = writeln!(out, "    label={};", dot_id(stage.as_str()));
        for (_, p) in members {
            let label = if p.description.is_empty() {
                p.path.clone()
            } else {
                format!("{}\n{}", p.path, p.description)
            };
            let _ = writeln!(out, "    {} [label={}];", dot_id(&p.path), dot_id(&label));
        }
        let _ = writeln!(out, "  }}");
    }
    for (i, p) in view.projects() {
        for (j, kind) in view.after(i) {
            let attributes = match kind {
                EdgeKind::Stage => " [style=dashed]".to_string(),
                EdgeKind::Input => format!(" [label={}]", dot_id(&input_names(p, view, j))),
                EdgeKind::Declared => String::new(),
            };
            let _ = writeln!(
                out,
                "  {} -> {}{attributes};",
                dot_id(&view.plan.graph.project(j).path),
                dot_id(&p.path)
            );
        }
    }
    out.push_str("}\n");
    out
}

/// The inputs project `p` takes from project `j`, as an edge's label: `subnet_id, vpc_id`.
fn input_names(p: &Project, view: &View<'_>, j: usize) -> String {
    let from = &view.plan.graph.project(j).path;
    p.inputs
        .iter()
        .filter(|input| &input.from.target == from)
        .map(|input| input.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn dot_id(text: &str) -> String {
    format!(
        "\"{}\"",
        text.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    )
}

/// Mermaid flowchart: one subgraph per stage; stage-rule edges dotted. Node ids are `<prefix>n<k>`
/// with `k` the place in the execution order.
pub fn mermaid(view: &View<'_>, prefix: &str, out: &mut String, indent: &str) {
    let id = |i: usize| format!("{prefix}n{}", view.plan.graph.position(i));
    for stage in [Stage::Infrastructure, Stage::Kubernetes] {
        let members: Vec<(usize, &Project)> =
            view.projects().filter(|(_, p)| p.stage == stage).collect();
        if members.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "{indent}subgraph {prefix}{}[\"{} stage\"]",
            stage.as_str(),
            stage.as_str()
        );
        for (i, p) in members {
            let label = if p.description.is_empty() {
                mermaid_text(&p.path)
            } else {
                format!(
                    "{}<br/>{}",
                    mermaid_text(&p.path),
                    mermaid_text(&p.description)
                )
            };
            let _ = writeln!(out, "{indent}  {}[\"{label}\"]", id(i));
        }
        let _ = writeln!(out, "{indent}end");
    }
    for (i, _) in view.projects() {
        for (j, kind) in view.after(i) {
            let arrow = match kind {
                EdgeKind::Stage => "-.->".to_string(),
                EdgeKind::Input => format!(
                    "-->|\"{}\"|",
                    mermaid_text(&input_names(view.plan.graph.project(i), view, j))
                ),
                EdgeKind::Declared => "-->".to_string(),
            };
            let _ = writeln!(out, "{indent}{} {arrow} {}", id(j), id(i));
        }
    }
}

fn mermaid_text(text: &str) -> String {
    text.replace('"', "#quot;")
        .replace('<', "#lt;")
        .replace('>', "#gt;")
}
