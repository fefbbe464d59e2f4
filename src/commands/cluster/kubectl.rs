//! `mara kubectl ARGS…` (docs/developer-loop.md): kubectl with the stack's kubeconfig and
//! context, handed the terminal; it exits with kubectl's code, and mara adds nothing to what
//! kubectl says.

use std::path::PathBuf;

use super::{Target, hand_over, target};
use crate::error::{Error, Problem, Result};
use crate::settings::Settings;

/// `mara kubectl ARGS…`: kubectl with `KUBECONFIG` set to the stack's kubeconfig, so that it never
/// acts on whatever context the user's own kubeconfig has selected.
pub fn kubectl(settings: &Settings, args: Vec<String>) -> Result<()> {
    let target = target(settings)?;
    let (kubeconfig, context) = stack_kubeconfig(&target)?;
    let mut full = Vec::new();
    if let Some(context) = context {
        full.push(format!("--context={context}"));
    }
    full.extend(args);
    let mut env = target.env;
    env.insert("KUBECONFIG".into(), kubeconfig.display().to_string());
    hand_over("kubectl", &full, &env, &settings.start_dir)
}

/// The stack's kubeconfig, as the kubectl engine also takes it (`stack_kubeconfig_choice`), with
/// an error when it does not exist.
fn stack_kubeconfig(target: &Target) -> Result<(PathBuf, Option<String>)> {
    let written = target.workspace.kubeconfig_file(&target.stack.name);
    let choice = crate::workspace::kubeconfig::choose(
        &target.workspace,
        &target.stack.name,
        target.config.as_ref().and_then(|c| c.config()),
        &target.env,
    );
    if choice.file.is_file() {
        return Ok((choice.file, choice.context));
    }
    if choice.file != written {
        return Err(Error::config(Problem::new(format!(
            "the kubeconfig of stack `{}` does not exist: {} (kubernetes:kubeconfig)",
            target.stack.name,
            choice.file.display()
        ))));
    }
    Err(Error::config(
        Problem::new(format!(
            "stack `{}` has no kubeconfig yet",
            target.stack.name
        ))
        .hint(format!(
            "`{}` writes {} when the stack's cluster is up",
            target.again("up"),
            target.workspace.display(&written).display()
        )),
    ))
}
