//! Hooks (docs/formats.md, "Providers"): what runs after a project's successful `up`
//! (`on_success`) or `destroy` (`on_destroy`).
//!
//! A `kubeconfig` hook is file work, done here (`run::kubeconfig`); a `command` hook is a process,
//! returned as a step for the project's task to run like its engine's steps, its lines shown and
//! logged the same way.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::kubeconfig;
use crate::engine::command::{self, Context};
use crate::engine::{Operation, Step};
use crate::provider::Hook;

/// What a hook comes to.
#[derive(Debug)]
pub enum Work {
    /// Done: the lines to show.
    Done(Vec<String>),
    /// A process to run; `what` names it when it fails.
    Process { step: Box<Step>, what: String },
}

/// Runs (or prepares) one hook of a project after `operation`, with the project's stack
/// `outputs`; `Err` says why the project fails.
pub fn run(
    hook: &Hook,
    operation: Operation,
    outputs: &Value,
    cwd: &Path,
    context: &Context,
    files: &kubeconfig::Files,
    env: &BTreeMap<String, String>,
) -> Result<Work, String> {
    match (hook, operation) {
        (Hook::Kubeconfig { output, merge }, Operation::Up) => {
            kubeconfig::write(files, env, outputs, output, *merge).map(Work::Done)
        }
        (Hook::Kubeconfig { .. }, _) => kubeconfig::remove(files, env).map(Work::Done),
        (Hook::Command { run }, _) => Ok(Work::Process {
            step: Box::new(command::hook_step(run, cwd, context, outputs)),
            what: format!("the hook `{run}`"),
        }),
    }
}
