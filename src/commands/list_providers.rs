//! `mara list-providers`: every provider, sorted, with its description and where it is defined.

use serde_json::json;

use crate::cli::ListProvidersArgs;
use crate::deployment;
use crate::error::Result;
use crate::provider::{Origin, Provider};
use crate::settings::{OutputFormat, Settings};
use crate::ui;

pub fn run(settings: &Settings, args: ListProvidersArgs) -> Result<()> {
    let workspace = deployment::discover(settings)?;
    let registry = deployment::registry(&workspace).map_err(|e| e.relative_to(&workspace.root))?;
    let providers: Vec<Provider> = registry
        .resolve_all()?
        .into_iter()
        .filter(|p| args.all || !p.is_abstract)
        .collect();
    let source = |p: &Provider, absolute: bool| match &p.origin {
        Origin::Builtin => "builtin".to_string(),
        Origin::File(path) if absolute => path.display().to_string(),
        Origin::File(path) => workspace.display(path).display().to_string(),
    };
    let text = match settings.output {
        OutputFormat::Json => {
            let list: Vec<_> = providers
                .iter()
                .map(|p| {
                    let mut entry = json!({
                        "name": p.name,
                        "description": p.description,
                        "infra_type": p.infra_type,
                        "source": source(p, true),
                    });
                    if p.is_abstract {
                        entry["abstract"] = json!(true);
                    }
                    entry
                })
                .collect();
            format!(
                "{}\n",
                serde_json::to_string_pretty(&list).expect("JSON values serialize")
            )
        }
        OutputFormat::Human => {
            let style = settings.stdout_style;
            let rows: Vec<[String; 4]> = providers
                .iter()
                .map(|p| {
                    let description = if p.is_abstract {
                        format!("{} (abstract)", p.description)
                    } else {
                        p.description.clone()
                    };
                    [
                        p.name.clone(),
                        p.infra_type.clone().unwrap_or_else(|| "-".into()),
                        source(p, false),
                        description,
                    ]
                })
                .collect();
            let headers = ["PROVIDER", "INFRA_TYPE", "SOURCE", "DESCRIPTION"];
            let widths = ui::column_widths(headers, &rows);
            let line = |cells: [&str; 4]| {
                let padded: Vec<String> = cells
                    .iter()
                    .zip(widths)
                    .take(3)
                    .map(|(cell, w)| ui::pad(cell, w))
                    .collect();
                format!("{}  {}", padded.join("  "), cells[3])
            };
            let mut out = format!("{}\n", style.bold(&line(headers)));
            for row in &rows {
                out.push_str(&line([&row[0], &row[1], &row[2], &row[3]]));
                out.push('\n');
            }
            out
        }
    };
    ui::print(&text)
}
