//! `mara output [PROJECT]` (docs/commands.md, "output"): the stack outputs of every project of the
//! plan (or one), as JSON, read by `run::outputs`; secrets stay `[secret]` unless
//! `--show-secrets`.

use serde_json::{Map, Value};

use crate::cli::OutputArgs;
use crate::deployment::Deployment;
use crate::engine::pulumi::Pulumi;
use crate::error::{Error, Result};
use crate::run::outputs::outputs_of;
use crate::settings::Settings;

pub fn run(settings: &Settings, args: OutputArgs) -> Result<()> {
    let OutputArgs {
        project,
        show_secrets,
    } = args;
    let deployment = Deployment::load(settings)?;
    let files = &deployment.files;
    let workspace = &files.workspace;
    let result = (|| {
        let stack = files.required_stack()?;
        let graph = &deployment.graph;
        let env = crate::run::prepare::engine_env_in(workspace, &files.environment(settings));
        let pulumi = Pulumi {
            binary: workspace.settings.pulumi.binary.clone(),
            stack: stack.name.to_string(),
            shared_config: workspace.stack_config_file(&stack.name),
            secrets_project: workspace.settings.secrets_project.clone(),
            secrets_provider: workspace.settings.pulumi.secrets_provider.clone(),
            color: false,
        };
        let chosen: Vec<usize> = match &project {
            Some(name) => vec![graph.find(name).map_err(Error::usage)?],
            None => graph.order().to_vec(),
        };
        let mut all = Map::new();
        for &i in &chosen {
            let outputs = outputs_of(&deployment, &pulumi, i, &env, show_secrets)?;
            all.insert(graph.project(i).path.clone(), outputs);
        }
        let value = match (&project, chosen.as_slice()) {
            (Some(_), [i]) => all.remove(&graph.project(*i).path).unwrap_or(Value::Null),
            _ => Value::Object(all),
        };
        crate::ui::print(&format!(
            "{}\n",
            serde_json::to_string_pretty(&value).expect("JSON values serialize")
        ))
    })();
    result.map_err(|e| e.relative_to(&workspace.root))
}
