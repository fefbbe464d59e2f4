//! An engine of the test suite's own (docs/ARCHITECTURE.md, "Engines"): what a new engine is —
//! this module and its line in `ENGINES` — run through the plan, the runner, a preview and the
//! reports by `tests` below, with nothing else changed for it.
//!
//! Its projects are shell scripts of one line per resource, `<name>=<value>`, in a file
//! `resources` in the project's directory; its state is the file `state` beside it. `up` makes
//! the state what the resources say, `preview` says what `up` would change, `destroy` empties
//! it; each says `+name`, `~name` or `-name` per change, which its reader counts.

use std::path::Path;

use super::{Changes, Engine, Engines, Operation, OutputReader, Programs, ProjectFiles, Step};
use super::{ResourceDiff, StepKind, Target};

/// The test engine (`engine = "test"`).
pub struct TestEngine;

/// The test engine, as `ENGINES` registers it (in tests only).
pub static TEST: TestEngine = TestEngine;

/// What each operation runs: the difference between `resources` and `state`, said and made.
const SCRIPT: &str = r#"touch state
case "$1" in
  destroy) want=/dev/null ;;
  *) want=resources ;;
esac
while IFS='=' read -r name value; do
  old=$(grep "^$name=" state | cut -d= -f2-)
  if [ -z "$old" ]; then echo "+$name"; elif [ "$old" != "$value" ]; then echo "~$name"; fi
done < "$want"
while IFS='=' read -r name value; do
  grep -q "^$name=" "$want" || echo "-$name"
done < state
case "$1" in
  up) cp resources state ;;
  destroy) : > state ;;
esac
"#;

impl Engine for TestEngine {
    fn name(&self) -> &'static str {
        "test"
    }

    fn program(&self, _programs: &Programs<'_>) -> Option<String> {
        Some("sh".into())
    }

    fn steps(&self, _run: &Engines, target: &Target<'_>, op: Operation) -> Vec<Step> {
        let args = ["-c", SCRIPT, "test-engine", op.as_str()].map(String::from);
        vec![Step::new(
            StepKind::Operation,
            "sh",
            args.to_vec(),
            target.dir,
        )]
    }

    fn reader(&self, _operation: Operation) -> Box<dyn OutputReader> {
        Box::new(Reader::default())
    }

    fn project_files(&self) -> ProjectFiles {
        ProjectFiles::WithExtension(&["resources"])
    }

    fn config_namespace(&self, leaf: &str, _pulumi_name: Option<&str>) -> Option<String> {
        Some(leaf.to_string())
    }
}

/// Counts the changes its script says.
#[derive(Debug, Default)]
struct Reader {
    diffs: Vec<ResourceDiff>,
}

impl OutputReader for Reader {
    fn line(&mut self, line: &str) -> Vec<String> {
        let op = match line.chars().next() {
            Some('+') => "create",
            Some('~') => "update",
            Some('-') => "delete",
            _ => return vec![line.to_string()],
        };
        self.diffs.push(ResourceDiff {
            op: op.into(),
            resource: line[1..].to_string(),
            properties: Vec::new(),
        });
        vec![line.to_string()]
    }

    fn diffs(&self) -> Vec<ResourceDiff> {
        self.diffs.clone()
    }

    fn changes(&mut self) -> Option<Changes> {
        let mut changes = Changes::new();
        for diff in &self.diffs {
            *changes.entry(diff.op.clone()).or_default() += 1;
        }
        Some(changes)
    }
}

/// Whether `dir` holds the test engine's state (for the tests).
pub fn state(dir: &Path) -> String {
    crate::files::read_to_string(&dir.join("state")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use crate::engine::Operation;
    use crate::graph::{ExecutionGraph, Plan, Selection};
    use crate::provider::Registry;
    use crate::run::events::{Event, ProjectReport, Sink};
    use crate::run::interrupt::Interrupt;
    use crate::run::plan::{Budgets, Inputs, Plans, RunPlan, fixtures};
    use crate::run::project::Context;
    use crate::run::runner::{Runner, Schedule};
    use crate::run::scheduler::FailurePolicy;
    use crate::status::{ProjectStatus, RunStatus};
    use crate::style::Style;
    use crate::ui::report::{self, RunSummary};

    /// A provider of two projects of the test engine, `net` before `app`, as a workspace writes
    /// it: the engine is found by its name, as any other.
    const PROVIDER: &str = r#"description = "The test engine's platform"
[[project]]
path = "net"
engine = "test"
[[project]]
path = "app"
engine = "test"
after = ["net"]
"#;

    /// Every line the run said, by project.
    #[derive(Default)]
    struct Lines(Vec<(String, String)>);

    impl Sink for Lines {
        fn handle(&mut self, event: &Event) {
            if let Event::Line { path, text, .. } = event {
                self.0.push((path.clone(), text.clone()));
            }
        }
    }

    /// The run of `operation` on the workspace at `root`, through the run plan and the runner,
    /// as its summary.
    fn run(root: &Path, operation: Operation) -> (RunSummary, Vec<(String, String)>) {
        let registry = Registry::load(&root.join("providers"), |p| p.to_path_buf()).unwrap();
        let graph = ExecutionGraph::build(&registry.resolve("testing").unwrap()).unwrap();
        let selected = Plan::select(&graph, &Selection::default()).unwrap();
        let workspace = crate::workspace::Workspace {
            root: root.to_path_buf(),
            ..fixtures::workspace()
        };
        let plan = RunPlan::build(&Inputs {
            operation,
            selected: &selected,
            engines: &fixtures::engines(),
            workspace: &workspace,
            provider: "testing",
            logs: &root.join(".mara/logs/r1"),
            plans: &root.join(".mara/plans/r1"),
            saved: &Plans::default(),
            fingerprints: &BTreeMap::new(),
            kubeconfig: &root.join(".mara/kube/dev.yaml"),
            is_dir: &|dir| dir.is_dir(),
            is_file: &|file| file.is_file(),
            has_kustomization: &|_| false,
            initialized: &|_| false,
            absent: &BTreeMap::new(),
            blocked: &BTreeMap::new(),
            known_stacks: &Default::default(),
            budgets: &Budgets::default(),
        });
        let context = Context {
            env: [(
                "PATH".to_string(),
                std::env::var("PATH").unwrap_or_default(),
            )]
            .into(),
            redactor: Default::default(),
            kubeconfig: crate::run::kubeconfig::Files {
                stack: root.join(".mara/kube/dev.yaml"),
                root: root.to_path_buf(),
                stack_name: "dev".into(),
                id: None,
            },
            unlock: "mara unlock --engine".into(),
            inputs: Default::default(),
        };
        let schedule = Schedule {
            parallel: 2,
            failure: FailurePolicy::StopAll,
        };
        let mut lines = Lines::default();
        let runner = Runner::new(Interrupt::default()).unwrap();
        let reports: Vec<ProjectReport> =
            runner.execute(&plan, context, schedule, &mut [&mut lines]);
        let summary = RunSummary {
            run_id: "r1".into(),
            operation,
            provider: "testing".into(),
            stack: "dev".into(),
            status: crate::run::events::run_status(&reports, runner.interrupt()),
            started: "t0".into(),
            finished: "t1".into(),
            projects: reports,
            duration: Default::default(),
            logs: None,
            expect_no_changes: false,
            exit_code: None,
            policy: None,
        };
        (summary, lines.0)
    }

    /// A new engine is its module and its line in `ENGINES`: nothing else of mara changed for
    /// this one, and a provider names it, the plan plans it, the runner runs it, a preview
    /// counts what it would change, and every report says so.
    #[test]
    fn a_new_engine_runs_through_the_plan_the_runner_a_preview_and_the_reports() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("providers")).unwrap();
        std::fs::write(root.join("providers/testing.toml"), PROVIDER).unwrap();
        for (project, resources) in [("net", "vpc=10.0.0.0/16\nsubnet=a\n"), ("app", "web=1\n")] {
            std::fs::create_dir_all(root.join(project)).unwrap();
            std::fs::write(root.join(project).join("resources"), resources).unwrap();
        }

        // A preview says what an update would make, and makes nothing.
        let (preview, lines) = run(root, Operation::Preview);
        let statuses: Vec<(&str, ProjectStatus)> = (preview.projects.iter())
            .map(|p| (p.path.as_str(), p.status))
            .collect();
        assert_eq!(
            statuses,
            [
                ("net", ProjectStatus::Succeeded),
                ("app", ProjectStatus::Succeeded)
            ]
        );
        assert!(
            lines.contains(&("net".to_string(), "+vpc".to_string())),
            "{lines:?}"
        );
        assert_eq!(super::state(&root.join("net")), "");
        let table = report::table(&preview, Style::default());
        assert!(
            table.contains("net      preview    succeeded") && table.contains("+2"),
            "{table}"
        );
        let json: serde_json::Value = serde_json::from_str(&preview.to_json()).unwrap();
        assert_eq!(
            json["projects"][0]["changes"],
            serde_json::json!({"create": 2})
        );
        assert_eq!(json["projects"][1]["diff"][0]["resource"], "web");

        // The update makes it, in the graph's order; a preview then finds nothing to change.
        let (up, _) = run(root, Operation::Up);
        assert_eq!(up.status, RunStatus::Succeeded);
        assert_eq!(super::state(&root.join("app")), "web=1\n");
        let junit = report::junit(&up);
        assert!(
            junit.contains("net") && junit.contains("app") && !junit.contains("<failure"),
            "{junit}"
        );
        std::fs::write(root.join("app/resources"), "web=2\n").unwrap();
        let (again, _) = run(root, Operation::Preview);
        let changes: Vec<String> = (again.projects.iter())
            .map(|p| report::changes_with_notes(p, Operation::Preview))
            .collect();
        assert_eq!(changes, ["no changes", "~1"], "{again:#?}");
    }
}
