//! `mara policy test` and `mara policy eval` (docs/commands.md, "Policies"): the workspace's
//! policies on their own, without a run — their `test_` rules, or their decision over a file.

use std::path::Path;

use crate::cli::PolicyCommand;
use crate::deployment;
use crate::error::{Error, Location, Problem, Result};
use crate::policy::test::Outcome;
use crate::policy::{Decision, Kind, Policies};
use crate::settings::{OutputFormat, Settings};
use crate::ui;

pub fn run(settings: &Settings, command: PolicyCommand) -> Result<()> {
    let workspace = deployment::workspace(settings)?;
    let root = workspace.root.clone();
    let policies = Policies::load(&root, &workspace.settings.policy)
        .map_err(|e| e.relative_to(&root))?
        .ok_or_else(|| {
            Error::config(
                Problem::new("the workspace has no policies: no `policy/` directory, and no `paths` in `[policy]`")
                    .at(Location::file(root.join("mara.toml")))
                    .hint("write Rego files in policy/ (conftest's directory), or name them in mara.toml's [policy] paths"),
            )
        })?;
    match command {
        PolicyCommand::Test => test(settings, policies),
        PolicyCommand::Eval { input, deployment } => {
            let kind = match deployment {
                true => Kind::Deployment,
                false => Kind::Project,
            };
            eval(settings, policies, &input, kind)
        }
    }
}

/// Every test, said as `opa test` says them: PASS, FAIL or ERROR, then how many passed.
fn test(settings: &Settings, mut policies: Policies) -> Result<()> {
    let tested = policies.test();
    let failed = tested.iter().filter(|t| t.outcome != Outcome::Pass).count();
    match settings.output {
        OutputFormat::Json => ui::print(&format!(
            "{}\n",
            serde_json::to_string_pretty(&tested).expect("test results serialize")
        ))?,
        OutputFormat::Human => {
            let style = settings.stdout_style;
            let mut text = String::new();
            for t in &tested {
                let word = match t.outcome {
                    Outcome::Pass => style.green("PASS"),
                    Outcome::Fail => style.red("FAIL"),
                    Outcome::Error => style.red("ERROR"),
                };
                text.push_str(&format!("{word}: {}", t.test));
                if let Some(error) = &t.error {
                    text.push_str(&format!(" ({error})"));
                }
                text.push('\n');
            }
            if tested.is_empty() {
                text.push_str("no tests: a test is a rule whose name starts with test_\n");
            } else {
                text.push_str(&format!(
                    "{}/{} passed\n",
                    tested.len() - failed,
                    tested.len()
                ));
            }
            ui::print(&text)?;
        }
    }
    match failed {
        0 => Ok(()),
        failed => Err(Error::PolicyTestsFailed {
            failed,
            tests: tested.len(),
        }),
    }
}

/// The decision of the packages of `kind` over the JSON in `file` (`-`: standard input).
fn eval(settings: &Settings, mut policies: Policies, file: &Path, kind: Kind) -> Result<()> {
    let (shown, text) = match file == Path::new("-") {
        true => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .map_err(|e| Error::read(Path::new("(standard input)"), e))?;
            ("(standard input)".to_string(), text)
        }
        false => {
            let bytes = crate::files::read(file).map_err(|e| Error::read(file, e))?;
            (
                file.display().to_string(),
                String::from_utf8_lossy(&bytes).into_owned(),
            )
        }
    };
    let input: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        Error::config(
            Problem::new(format!("is not JSON: {e}"))
                .at(Location::line(shown.clone(), e.line().max(1)))
                .hint("a saved plan is not JSON: show it as JSON first (`terraform show -json plan.tfplan > plan.json`)"),
        )
    })?;
    if !policies.has(kind) {
        let which = match kind {
            Kind::Project => "per-project packages (`[policy] packages`)",
            Kind::Deployment => "deployment packages (`[policy] deployment_packages`)",
        };
        ui::errln!(
            "note: no deny, violation or warn rule in the {which}: nothing judges this input"
        );
    }
    let decision = (policies.evaluate(kind, &input, None)).map_err(|failed| {
        let problem = failed.problem();
        match problem.location {
            Some(_) => Error::config(problem),
            None => Error::config(problem.at(Location::file(shown))),
        }
    })?;
    match settings.output {
        OutputFormat::Json => ui::print(&format!(
            "{}\n",
            serde_json::to_string_pretty(&decision).expect("decisions serialize")
        ))?,
        OutputFormat::Human => ui::print(&said(&decision, settings.stdout_style))?,
    }
    match decision.denied().count() {
        0 => Ok(()),
        denied => Err(Error::PolicyDenied {
            denied,
            what: "the input",
            then: "",
        }),
    }
}

/// A decision as people read it: each message on a line, its level first and its rule last.
fn said(decision: &Decision, style: crate::style::Style) -> String {
    if decision.is_empty() {
        return "The policies say nothing against it.\n".to_string();
    }
    let lines = ui::report::decision_lines(decision, style);
    lines.iter().map(|l| format!("{l}\n")).collect()
}
