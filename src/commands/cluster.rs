//! The commands that reach the stack's cluster directly: `mara kubectl` (kubectl with the stack's
//! kubeconfig) and `mara images import` (images into the stack's k3d cluster).
//!
//! Both hand the terminal to the tool and exit with its code; mara adds nothing to what it says.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::configure;
use crate::deployment::StackFiles;
use crate::error::{Error, Problem, Result};
use crate::settings::Settings;
use crate::workspace::Workspace;
use crate::workspace::stack::ResolvedStack;

/// What both commands need: the stack's files, the stack, and the environment of its tools.
struct Target {
    files: StackFiles,
    workspace: Workspace,
    stack: ResolvedStack,
    config: Option<crate::workspace::stack_config::StackConfigFile>,
    env: BTreeMap<String, String>,
}

fn target(settings: &Settings) -> Result<Target> {
    let files = StackFiles::load(settings)?;
    let stack = files.required_stack()?.clone();
    let mut env = files.environment(settings);
    crate::ledger::keep_from_engines(&files.workspace, &mut env);
    configure::strip_secret_variables(&mut env);
    Ok(Target {
        workspace: files.workspace.clone(),
        config: files.config.clone(),
        files,
        stack,
        env,
    })
}

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

/// The stack's kubeconfig: the one mara wrote (`.mara/kube/<stack>.yaml`, with its own current
/// context), else the cluster the stack's configuration names (`kubernetes:kubeconfig` and
/// `kubernetes:context`, as the kubeconfig provider takes an existing cluster).
fn stack_kubeconfig(target: &Target) -> Result<(PathBuf, Option<String>)> {
    let written = target.workspace.kubeconfig_file(&target.stack.name);
    if written.is_file() {
        return Ok((written, None));
    }
    let configured = target
        .config
        .as_ref()
        .and_then(|c| c.config())
        .and_then(|c| {
            let file = c.get_text("kubernetes:kubeconfig")?;
            let file = target.workspace.root.join(expand_home(&file, &target.env));
            Some((file, c.get_text("kubernetes:context")))
        });
    // k3d's configuration names the file mara writes: not written yet is the message then.
    if let Some((file, context)) = configured.filter(|(file, _)| *file != written) {
        if file.is_file() {
            return Ok((file, context));
        }
        return Err(Error::config(Problem::new(format!(
            "the kubeconfig of stack `{}` does not exist: {} (kubernetes:kubeconfig)",
            target.stack.name,
            file.display()
        ))));
    }
    Err(Error::config(
        Problem::new(format!(
            "stack `{}` has no kubeconfig yet",
            target.stack.name
        ))
        .hint(format!(
            "`mara up` writes {} when the stack's cluster is up",
            target.workspace.display(&written).display()
        )),
    ))
}

/// `~/…` against the environment's HOME (a relative path is then taken from the workspace root).
fn expand_home(path: &str, env: &BTreeMap<String, String>) -> PathBuf {
    match (path.strip_prefix("~/"), env.get("HOME")) {
        (Some(rest), Some(home)) => Path::new(home).join(rest),
        _ => PathBuf::from(path),
    }
}

/// `mara images import IMAGE…`: `k3d image import IMAGE… -c mara-<stack>`, for stacks whose
/// provider is k3d (or extends it).
pub fn import_images(settings: &Settings, images: Vec<String>) -> Result<()> {
    let target = target(settings)?;
    let provider = target.files.clone().into_deployment(settings)?.provider;
    let is_k3d = provider.name == "k3d" || provider.extends.iter().any(|p| p == "k3d");
    if !is_k3d {
        return Err(Error::usage(
            Problem::new(format!(
                "`mara images import` loads images into a local k3d cluster, and stack `{}` uses provider {}",
                target.stack.name, provider.name
            ))
            .hint("push the images to the cluster's registry instead"),
        ));
    }
    let cluster = format!("mara-{}", target.stack.name);
    let mut args = vec!["image".to_string(), "import".to_string()];
    args.extend(images);
    args.extend(["-c".to_string(), cluster]);
    hand_over("k3d", &args, &target.env, &settings.start_dir)
}

/// Runs `program` with the terminal, in `cwd`, and exits as it does.
fn hand_over(
    program: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    cwd: &Path,
) -> Result<()> {
    let path = crate::run::process::resolve_program(program, env, cwd)
        .map_err(|error| Error::config(Problem::new(error.to_string())))?;
    tracing::info!("running {program} {}", args.join(" "));
    let status = std::process::Command::new(path)
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env)
        .status()
        .map_err(|source| Error::Spawn {
            program: program.to_string(),
            source,
        })?;
    match status.code() {
        Some(0) => Ok(()),
        Some(code) => Err(Error::ToolFailed {
            program: program.to_string(),
            code,
        }),
        // Ended by a signal: the shell's convention, 128 + its number.
        None => Err(Error::ToolFailed {
            program: program.to_string(),
            code: 128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0),
        }),
    }
}
