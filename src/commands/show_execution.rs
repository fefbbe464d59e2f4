//! `mara show-execution`: the plan of one provider (or of all, with `--all`), in the chosen format.

use crate::cli::{PlanFormat, ShowExecutionArgs};
use crate::deployment::{self, Deployment};
use crate::error::Result;
use crate::graph::render::{self, View};
use crate::graph::{ExecutionGraph, Plan, Selection};
use crate::provider::Provider;
use crate::run::narrow;
use crate::settings::{OutputFormat, Settings};
use crate::ui;
use crate::workspace::Workspace;
use crate::workspace::pulumi_project::PulumiProject;

pub fn run(settings: &Settings, args: ShowExecutionArgs) -> Result<()> {
    let format = args.format.unwrap_or(match settings.output {
        OutputFormat::Json => PlanFormat::Json,
        OutputFormat::Human => PlanFormat::Tree,
    });
    let selection = Selection::from(args.selection);
    if args.changed {
        return changed(settings, &selection);
    }
    let (workspace, providers, graphs) = if args.all {
        let workspace = deployment::discover(settings)?;
        let within = |e: crate::error::Error| e.relative_to(&workspace.root);
        let registry = deployment::registry(&workspace).map_err(within)?;
        let providers: Vec<Provider> = registry
            .resolve_all()
            .map_err(within)?
            .into_iter()
            .filter(|p| !p.is_abstract)
            .collect();
        let graphs = providers
            .iter()
            .map(ExecutionGraph::build)
            .collect::<Result<_>>()
            .map_err(within)?;
        (workspace, providers, graphs)
    } else {
        let deployment = Deployment::load_for_planning(settings)?;
        let files = deployment.files;
        (
            files.workspace,
            vec![deployment.provider],
            vec![deployment.graph],
        )
    };
    plan(
        settings, &workspace, &providers, &graphs, &selection, format, args.all,
    )
    .map_err(|e| e.relative_to(&workspace.root))
}

/// `--changed`: for every selected project, whether `mara up --changed` would run it, and why.
fn changed(settings: &Settings, selection: &Selection) -> Result<()> {
    let deployment = Deployment::load(settings)?;
    let files = &deployment.files;
    let stack = files.required_stack()?;
    let selected = Plan::select(&deployment.graph, selection)?;
    let fingerprints = narrow::fingerprints(&selected, files, stack)?;
    let ledger =
        crate::ledger::open_existing(&crate::ledger::place(&files.workspace, &settings.env)?)?;
    let changes = narrow::changes(&selected, &fingerprints, ledger.as_deref(), stack)?;
    ui::print(&ui::report::changes(&changes, settings.stdout_style))
}

fn plan(
    settings: &Settings,
    workspace: &Workspace,
    providers: &[Provider],
    graphs: &[ExecutionGraph],
    selection: &Selection,
    format: PlanFormat,
    all: bool,
) -> Result<()> {
    let plans: Vec<Plan<'_>> = graphs
        .iter()
        .map(|g| Plan::select(g, selection))
        .collect::<Result<_>>()?;
    // Only the JSON plan names each project's Pulumi project: reading every Pulumi.yaml is the
    // largest cost of a big plan, so the other formats do not.
    let names: Vec<Vec<Option<String>>> = graphs
        .iter()
        .map(|g| match format {
            PlanFormat::Json => pulumi_names(workspace, g),
            _ => Vec::new(),
        })
        .collect();
    let budgets: Vec<crate::workspace::budgets::Budgets> = (providers.iter())
        .map(|provider| {
            let mut pools = provider.pools.clone();
            pools.extend(workspace.settings.pools.clone());
            crate::workspace::budgets::Budgets {
                pools,
                engines: workspace.settings.limits.clone(),
            }
        })
        .collect();
    let views: Vec<View<'_>> = providers
        .iter()
        .zip(&plans)
        .zip(&names)
        .zip(&budgets)
        .map(|(((provider, plan), names), budgets)| View {
            provider,
            plan,
            names,
            default_engine: workspace.settings.engine,
            style: settings.stdout_style,
            budgets,
            heading: all || settings.verbosity >= 0,
        })
        .collect();
    ui::print(&render_all(&views, format, all))
}

fn render_all(views: &[View<'_>], format: PlanFormat, all: bool) -> String {
    match format {
        PlanFormat::Tree => views
            .iter()
            .map(render::tree)
            .collect::<Vec<_>>()
            .join("\n"),
        PlanFormat::List if all => views
            .iter()
            .flat_map(|v| {
                v.plan.order().iter().map(move |&i| {
                    format!("{} {}\n", v.provider.name, v.plan.graph.project(i).path)
                })
            })
            .collect(),
        PlanFormat::List => views.iter().map(|v| render::list(v.plan)).collect(),
        PlanFormat::Dot => views.iter().map(render::dot).collect::<Vec<_>>().join("\n"),
        PlanFormat::Mermaid => {
            let mut out = String::from("flowchart LR\n");
            if let [view] = views {
                render::mermaid(view, "", &mut out, "  ");
            } else {
                for view in views {
                    let id = view
                        .provider
                        .name
                        .replace(|c: char| !c.is_ascii_alphanumeric(), "_");
                    out.push_str(&format!("  subgraph {id}[\"{}\"]\n", view.provider.name));
                    render::mermaid(view, &format!("{id}_"), &mut out, "    ");
                    out.push_str("  end\n");
                }
            }
            out
        }
        PlanFormat::Json => {
            let text = match views {
                [view] if !all => serde_json::to_string_pretty(&render::json(view)),
                _ => serde_json::to_string_pretty(
                    &views.iter().map(render::json).collect::<Vec<_>>(),
                ),
            };
            format!("{}\n", text.expect("a plan serializes"))
        }
    }
}

/// The Pulumi name of each project whose `Pulumi.yaml` can be read; `None` for the others.
fn pulumi_names(workspace: &Workspace, graph: &ExecutionGraph) -> Vec<Option<String>> {
    let dirs: Vec<_> = (0..graph.len())
        .map(|i| workspace.project_dir(&graph.project(i).path))
        .collect();
    PulumiProject::load_each(&dirs)
        .into_iter()
        .map(|found| found.and_then(|p| p.ok()).map(|p| p.name))
        .collect()
}
