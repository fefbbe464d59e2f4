//! Which kubeconfig reaches a stack's cluster (docs/commands.md, "kubectl"): the one mara writes,
//! `<state_dir>/kube/<stack>.yaml` (with its own current context), else the file and context the
//! stack's configuration names (`kubernetes:kubeconfig`, `kubernetes:context`), as the kubeconfig
//! provider takes an existing cluster. `mara kubectl`, `mara cluster status` and the kubectl
//! engine all take it from here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::Workspace;
use super::stack::StackName;
use super::stack_config::StackConfig;

/// A kubeconfig file, and the context to use in it (`None`: its current context).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub file: PathBuf,
    pub context: Option<String>,
}

/// The stack's kubeconfig: the file mara writes when it exists; else the configured one, when
/// the configuration names another file; else the file mara writes (which does not exist yet).
pub fn choose(
    workspace: &Workspace,
    stack: &StackName,
    config: Option<&StackConfig>,
    env: &BTreeMap<String, String>,
) -> Choice {
    let written = workspace.kubeconfig_file(stack);
    let configured = config.and_then(|c| {
        let file = c.get_text("kubernetes:kubeconfig")?;
        let file = workspace.root.join(expand_home(&file, env));
        Some((file, c.get_text("kubernetes:context")))
    });
    match configured {
        Some((file, context)) if !written.is_file() && file != written => Choice { file, context },
        _ => Choice {
            file: written,
            context: None,
        },
    }
}

/// `~/…` against the environment's HOME (a relative path is then taken from the workspace root).
fn expand_home(path: &str, env: &BTreeMap<String, String>) -> PathBuf {
    match (path.strip_prefix("~/"), env.get("HOME")) {
        (Some(rest), Some(home)) => Path::new(home).join(rest),
        _ => PathBuf::from(path),
    }
}
