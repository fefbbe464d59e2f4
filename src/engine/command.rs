//! The command engine (docs/commands.md, "up, preview, refresh, destroy"): a project whose
//! operations are shell commands, run with `sh -c` in its directory (the workspace root when it
//! has none), leaving its outputs as one JSON object in the file `$MARA_OUTPUTS`.
//!
//! This is also the one place that names the `MARA_*` variables mara gives the processes it starts
//! for a project: command steps and command hooks get the same ones.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{Operation, Step, StepKind};

/// The variable that names where a command step leaves its outputs.
pub const OUTPUTS_VARIABLE: &str = "MARA_OUTPUTS";

/// The shell commands of an `engine = "command"` project, one per operation (`up` and `destroy`
/// are required, `preview`, `refresh` and `drift` optional).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Commands {
    pub up: Option<String>,
    pub preview: Option<String>,
    pub refresh: Option<String>,
    pub destroy: Option<String>,
    /// `mara drift`'s check: exit 0 when nothing drifted, 2 when something did.
    pub drift: Option<String>,
}

impl Commands {
    pub fn any(&self) -> bool {
        self.all().next().is_some()
    }

    pub fn all(&self) -> impl Iterator<Item = &str> {
        [
            &self.up,
            &self.preview,
            &self.refresh,
            &self.destroy,
            &self.drift,
        ]
        .into_iter()
        .flatten()
        .map(String::as_str)
    }

    pub fn of(&self, operation: Operation) -> Option<&str> {
        match operation {
            Operation::Up => self.up.as_deref(),
            Operation::Preview => self.preview.as_deref(),
            Operation::Refresh => self.refresh.as_deref(),
            Operation::Destroy => self.destroy.as_deref(),
            Operation::Drift => self.drift.as_deref(),
        }
    }
}

/// What mara tells every process it starts for a project about the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    pub stack: String,
    pub project: String,
    pub provider: String,
    /// `<state_dir>/kube/<stack>.yaml`.
    pub kubeconfig: PathBuf,
}

impl Context {
    /// `MARA_STACK`, `MARA_PROJECT`, `MARA_PROVIDER` and `MARA_KUBECONFIG`.
    pub fn variables(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("MARA_STACK".to_string(), self.stack.clone()),
            ("MARA_PROJECT".to_string(), self.project.clone()),
            ("MARA_PROVIDER".to_string(), self.provider.clone()),
            (
                "MARA_KUBECONFIG".to_string(),
                self.kubeconfig.display().to_string(),
            ),
        ])
    }
}

/// The step of `operation` for a command project (none when it has no command for it):
/// `sh -c <command>` in `cwd`, with the context's variables, `MARA_OPERATION`, and
/// `MARA_OUTPUTS` naming `outputs`.
pub fn steps(
    command: Option<&str>,
    cwd: &Path,
    operation: Operation,
    context: &Context,
    outputs: &Path,
) -> Vec<Step> {
    let Some(command) = command else {
        return Vec::new();
    };
    let mut step = shell(StepKind::Operation, command, cwd);
    step.env = context.variables();
    step.env
        .insert(OUTPUTS_VARIABLE.to_string(), outputs.display().to_string());
    step.env
        .insert("MARA_OPERATION".to_string(), operation.to_string());
    // A drift check says it found drift as `terraform plan -detailed-exitcode` does: exit 2.
    if operation == Operation::Drift {
        step.ok_codes = vec![0, 2];
        step.changes_code = Some(2);
    }
    vec![step]
}

/// A `command` hook: `sh -c <run>` in `cwd` with the context's variables and every stack output
/// as `MARA_OUTPUT_<NAME>` (objects and lists as JSON).
pub fn hook_step(run: &str, cwd: &Path, context: &Context, outputs: &Value) -> Step {
    let mut step = shell(StepKind::Operation, run, cwd);
    step.env = context.variables();
    for (name, value) in outputs.as_object().into_iter().flatten() {
        let text = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        step.env.insert(output_variable(name), text);
    }
    step
}

fn shell(kind: StepKind, command: &str, cwd: &Path) -> Step {
    Step::new(kind, "sh", vec!["-c".into(), command.to_string()], cwd)
}

/// The file a command step leaves its outputs in, if it is one.
pub fn outputs_file(step: &Step) -> Option<&Path> {
    step.env.get(OUTPUTS_VARIABLE).map(Path::new)
}

/// What a command step left in its outputs file: `Ok(None)` when it wrote none, an error when
/// what it wrote is not one JSON object.
pub fn read_outputs(file: &Path) -> Result<Option<Value>, String> {
    // Only a regular file: the command may have left a FIFO there, which would wait forever.
    let Ok(text) = crate::files::read_to_string(file) else {
        return Ok(None);
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(value @ Value::Object(_)) => Ok(Some(value)),
        _ => Err(format!(
            "the command wrote outputs that are not a JSON object to ${OUTPUTS_VARIABLE}"
        )),
    }
}

/// `cluster-name` → `MARA_OUTPUT_CLUSTER_NAME`.
pub fn output_variable(name: &str) -> String {
    env_var_name("MARA_OUTPUT_", name)
}

/// `prefix` + `name` upper-cased, every character that is not a letter or digit an underscore:
/// how mara names the variables it derives from keys and outputs.
/// The variable that gives a command, kubectl or Pulumi project its input `name`:
/// `subnet-id` → `MARA_INPUT_SUBNET_ID`.
pub fn input_var(name: &str) -> String {
    env_var_name("MARA_INPUT_", name)
}

pub fn env_var_name(prefix: &str, name: &str) -> String {
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("{prefix}{name}")
}

/// How many of a command's last lines of output are what its failure said, for `[retry]`
/// (docs/formats.md, "Budgets and retries"; docs/decisions.md, "What a retry matches"): a
/// command has no diagnostics, and a failing program says why at its end.
pub const LAST_LINES: usize = 20;

/// Reads a command step's output: every line shown as it is, and its last lines that are not
/// blank kept — stdout and stderr together, in the order they came.
#[derive(Debug, Default)]
pub struct Reader {
    last: std::collections::VecDeque<String>,
}

impl Reader {
    /// The lines to show for one line of stdout.
    pub fn line(&mut self, line: &str) -> Vec<String> {
        self.keep(line);
        vec![line.to_string()]
    }

    /// A line of stderr (shown by the caller).
    pub fn stderr(&mut self, line: &str) {
        self.keep(line);
    }

    fn keep(&mut self, line: &str) {
        if line.trim().is_empty() {
            return;
        }
        if self.last.len() == LAST_LINES {
            self.last.pop_front();
        }
        self.last.push_back(line.to_string());
    }

    /// Its last `LAST_LINES` lines that are not blank, oldest first.
    pub fn last_lines(&self) -> impl Iterator<Item = &str> {
        self.last.iter().map(String::as_str)
    }
}

/// The command engine (`engine = "command"`): the shell commands a provider entry gives.
pub struct CommandEngine;

/// The command engine, as `engine::ENGINES` registers it.
pub static COMMAND: CommandEngine = CommandEngine;

impl super::Engine for CommandEngine {
    fn name(&self) -> &'static str {
        "command"
    }

    fn program(&self, _programs: &super::Programs<'_>) -> Option<String> {
        None
    }

    /// Its command runs in its directory, the workspace root when it has none.
    fn steps(&self, _run: &super::Engines, target: &super::Target<'_>, op: Operation) -> Vec<Step> {
        let cwd = match target.has_dir {
            true => target.dir,
            false => target.root,
        };
        steps(
            target.commands.of(op),
            cwd,
            op,
            target.context,
            target.outputs,
        )
    }

    fn reader(&self, _operation: Operation) -> Box<dyn super::OutputReader> {
        Box::new(Reader::default())
    }

    fn outputs_source(
        &self,
        _run: &super::Engines,
        _dir: &Path,
        kept: &Path,
        _show_secrets: bool,
    ) -> super::OutputsSource {
        super::OutputsSource::Kept(kept.to_path_buf())
    }

    /// A drift check says it found drift as `terraform plan -detailed-exitcode` does: exit 2.
    fn drift_by_exit_code(&self, code: Option<i32>) -> bool {
        code == Some(2)
    }

    fn project_files(&self) -> super::ProjectFiles {
        super::ProjectFiles::Nothing
    }

    fn runs_commands(&self) -> bool {
        true
    }
}

impl super::OutputReader for Reader {
    fn line(&mut self, line: &str) -> Vec<String> {
        Reader::line(self, line)
    }

    fn stderr(&mut self, line: &str) {
        Reader::stderr(self, line);
    }

    fn errors(&self) -> Vec<&str> {
        self.last_lines().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> Context {
        Context {
            stack: "dev".into(),
            project: "utility/dns".into(),
            provider: "local".into(),
            kubeconfig: "/w/.mara/kube/dev.yaml".into(),
        }
    }

    #[test]
    fn a_command_keeps_its_last_lines_of_both_streams_in_order() {
        let mut reader = Reader::default();
        assert_eq!(reader.line("creating a"), ["creating a"]);
        reader.stderr("warning: rate exceeded, waiting");
        for i in 0..LAST_LINES - 1 {
            reader.line(&format!("step {i}"));
            reader.line("   ");
        }
        reader.stderr("error: permission denied");
        let last: Vec<&str> = reader.last_lines().collect();
        assert_eq!(last.len(), LAST_LINES, "blank lines are not counted");
        assert_eq!(last[0], "step 0", "the first two lines are gone");
        assert!(!last.iter().any(|l| l.contains("rate exceeded")));
        assert_eq!(last[LAST_LINES - 1], "error: permission denied");
        let mut short = Reader::default();
        short.line("one");
        short.stderr("two");
        assert_eq!(short.last_lines().collect::<Vec<_>>(), ["one", "two"]);
    }

    #[test]
    fn a_command_step_gets_every_variable() {
        let steps = steps(
            Some("./apply.sh"),
            Path::new("/w/utility/dns"),
            Operation::Up,
            &context(),
            Path::new("/w/.mara/outputs/dev/utility/dns.json"),
        );
        let [step] = &steps[..] else {
            panic!("one step: {steps:?}")
        };
        assert_eq!(step.display(), "sh -c ./apply.sh");
        let names: Vec<&str> = step.env.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "MARA_KUBECONFIG",
                "MARA_OPERATION",
                "MARA_OUTPUTS",
                "MARA_PROJECT",
                "MARA_PROVIDER",
                "MARA_STACK"
            ]
        );
        assert_eq!(step.env["MARA_OPERATION"], "up");
        assert_eq!(
            outputs_file(step),
            Some(Path::new("/w/.mara/outputs/dev/utility/dns.json"))
        );
        assert!(
            super::steps(
                None,
                Path::new("/w"),
                Operation::Preview,
                &context(),
                Path::new("/o")
            )
            .is_empty()
        );
    }

    #[test]
    fn a_hook_gets_the_same_variables_and_the_outputs() {
        let outputs = serde_json::json!({"cluster-name": "c1", "ports": [80, 443]});
        let step = hook_step("echo hi", Path::new("/w"), &context(), &outputs);
        assert_eq!(step.env["MARA_STACK"], "dev");
        assert_eq!(step.env["MARA_OUTPUT_CLUSTER_NAME"], "c1");
        assert_eq!(step.env["MARA_OUTPUT_PORTS"], "[80,443]");
        assert!(!step.env.contains_key("MARA_OUTPUTS"));
    }

    #[test]
    fn outputs_must_be_one_object() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("out.json");
        assert_eq!(read_outputs(&file), Ok(None));
        std::fs::write(&file, "[1]").unwrap();
        assert!(read_outputs(&file).is_err());
        std::fs::write(&file, r#"{"a": 1}"#).unwrap();
        assert_eq!(read_outputs(&file), Ok(Some(serde_json::json!({"a": 1}))));
        assert_eq!(
            output_variable("lb-ingress.ip"),
            "MARA_OUTPUT_LB_INGRESS_IP"
        );
    }
}
