//! `mara drift` (docs/commands.md, "drift"): read-only, whether every selected deployed project
//! still matches the cloud and its code — with the real `terraform`, through the Pulumi
//! stand-in (whose `preview --refresh` finds what `PULUMI_STAND_IN_DRIFT` says the cloud holds),
//! and a command project's own check.

mod common;

use std::path::Path;

use common::{Deployment, Workspace, project};
use serde_json::Value;

/// Terraform's version, when it is one with `terraform_data` (1.4 and later).
fn terraform_with_data() -> Option<std::path::PathBuf> {
    let terraform = common::terraform()?;
    let output = std::process::Command::new(&terraform)
        .args(["version", "-json"])
        .output()
        .unwrap();
    let version: Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    let said = version["terraform_version"].as_str().unwrap_or("0.0.0");
    let mut parts = said.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    match (major, minor) >= (1, 4) {
        true => Some(terraform),
        false => common::tools::missing(&format!(
            "terraform {said} has no terraform_data (1.4 and later)"
        )),
    }
}

/// `mara --output json <args>` in `dir`: its exit code and report.
fn report(dir: &Path, args: &[&str]) -> (i32, Value) {
    let mut cmd = common::mara(dir);
    cmd.env("HOME", dir.join("home"))
        .env_remove("TF_WORKSPACE")
        .env_remove("TF_DATA_DIR");
    common::json_report(cmd, args)
}

#[test]
fn terraform_drift_is_found_recorded_and_leaves_the_state_as_it_found_it() {
    let Some(terraform) = terraform_with_data() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    common::copy_example(&common::example("terraform-local"), dir.path());
    let network = dir.path().join("network/main.tf");
    let mut module = std::fs::read_to_string(&network).unwrap();
    module.push_str("\nresource \"terraform_data\" \"marker\" {\n  input = var.name\n}\n");
    std::fs::write(&network, module).unwrap();
    let (code, up) = report(dir.path(), &["up", "--yes"]);
    assert_eq!(code, 0, "{up:#}");

    // Nothing changed: nothing drifted, exit 0.
    let (code, drift) = report(dir.path(), &["drift"]);
    assert_eq!(code, 0, "{drift:#}");
    assert_eq!(drift["operation"], "drift");
    assert_eq!(project(&drift, "network")["status"], "unchanged");

    // Applied outside mara with another value: found, exit 4, and the state is left as it was.
    let outside = std::process::Command::new(&terraform)
        .args(["apply", "-auto-approve", "-input=false"])
        .args(["-var", "cidr=10.20.0.0/16", "-var", "name=outside"])
        .env("TF_WORKSPACE", "dev")
        .current_dir(dir.path().join("network"))
        .output()
        .unwrap();
    assert!(outside.status.success(), "{}", common::stderr(&outside));
    let state = || {
        let file = dir
            .path()
            .join("network/terraform.tfstate.d/dev/terraform.tfstate");
        std::fs::read_to_string(file).unwrap()
    };
    let before = state();
    let (code, drift) = report(dir.path(), &["drift"]);
    assert_eq!(code, 4, "{drift:#}");
    let network = project(&drift, "network");
    assert_eq!(network["changes"]["update"], 1, "{drift:#}");
    assert_eq!(network["diff"][0]["resource"], "terraform_data.marker");
    // Its dependent reads an output applying would change back.
    assert_eq!(
        project(&drift, "app")["stale"][0]["reads"],
        "network",
        "{drift:#}"
    );
    assert_eq!(state(), before, "a drift check writes no state");
    assert!(state().contains("outside"));

    // Recorded as a drift run, which status shows as the last check.
    let (_, history) = report(dir.path(), &["history"]);
    assert_eq!(history[0]["operation"], "drift", "{history:#}");
    assert_eq!(
        history[0]["status"], "succeeded",
        "a check that found drift ran well"
    );
    let output = common::mara(dir.path())
        .env("HOME", dir.path().join("home"))
        .arg("status")
        .output()
        .unwrap();
    let said = common::stdout(&output);
    assert!(said.contains("Last drift check"), "{said}");
    assert!(said.contains(": 1 of 2 drifted: network"), "{said}");
}

#[test]
fn pulumi_drift_finds_what_the_cloud_changed_and_changes_nothing() {
    let d = Deployment::of("mara-local");
    // Not deployed yet: a check of nothing is no pass (a mistyped stack would stay green
    // forever), said before any check runs, as refresh says it; no stack made.
    let output = d
        .mara()
        .args(["drift", "--only", "cluster"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(
        common::stderr(&output).contains("stack `dev` does not exist in any selected project"),
        "{}",
        common::stderr(&output)
    );
    assert!(
        !(d.calls().iter()).any(|c| c["argv"][1] == "preview"),
        "no check ran"
    );
    let output = d.mara().args(["up", "--yes"]).output().unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let calls_before = d.calls().len();
    let (code, drift) = common::json_report(d.mara(), &["drift"]);
    assert_eq!(code, 0, "{drift:#}");
    let junit = d.root().join("drift.xml");
    let (code, drift) = common::json_report(
        {
            let mut cmd = d.mara();
            cmd.env("PULUMI_STAND_IN_DRIFT", "local-cluster:node_count=7");
            cmd
        },
        &[
            "drift",
            "--diff",
            "--junit",
            junit.to_str().unwrap(),
            "--markdown",
            "drift.md",
        ],
    );
    assert_eq!(code, 4, "{drift:#}");
    // The comment's row says what the table's says.
    let markdown = std::fs::read_to_string(d.root().join("drift.md")).unwrap();
    let row = (markdown.lines())
        .find(|l| l.starts_with("| `infrastructure/local/cluster` | succeeded |"))
        .unwrap_or_else(|| panic!("{markdown}"));
    assert!(
        row.ends_with("| 1 drifted; applying would change ~1 |"),
        "{row}"
    );
    // CI's test reports show the drifted project as a failure.
    let junit = std::fs::read_to_string(&junit).unwrap();
    assert!(
        junit.contains("<failure message=\"drifted: 1 drifted; applying would change ~1\">"),
        "{junit}"
    );
    assert!(junit.contains("failures=\"1\""), "{junit}");
    let cluster = project(&drift, "infrastructure/local/cluster");
    assert_eq!(
        cluster["drifted"][0]["properties"][0],
        serde_json::json!({"path": "outputs.node_count", "kind": "update", "old": "3", "new": "\"7\""}),
        "{cluster:#}"
    );
    assert_eq!(
        cluster["changed_outputs"],
        serde_json::json!(["node_count"])
    );
    // Read-only: a preview with its refresh on the stack it names (and the stored secrets read
    // for redaction), never an update or a refresh that writes, nor a stack made.
    let calls = &d.calls()[calls_before..];
    let previews = calls.iter().filter(|c| c["argv"][1] == "preview").count();
    assert_eq!(previews, 28, "each project, twice");
    for call in calls {
        let argv: Vec<&str> = (call["argv"].as_array().unwrap().iter())
            .map(|a| a.as_str().unwrap())
            .collect();
        match argv[1] {
            "preview" => assert_eq!(argv[2], "--refresh", "{argv:?}"),
            "config" => assert!(!argv.contains(&"set"), "{argv:?}"),
            _ => panic!("a drift check ran {argv:?}"),
        }
        assert!(argv.contains(&"--stack"), "{argv:?}");
        assert!(!argv.contains(&"--create"), "{argv:?}");
    }
}

#[test]
fn a_command_project_is_checked_by_its_drift_command_or_said_unchecked() {
    let provider = "description = \"Tools\"\n
[[project]]\npath = \"checked\"\nup = \"true\"\ndestroy = \"true\"\ndrift = \"echo 'the bucket policy differs'; exit 2\"\n
[[project]]\npath = \"fine\"\nup = \"true\"\ndestroy = \"true\"\ndrift = \"true\"\n
[[project]]\npath = \"unchecked\"\nup = \"true\"\ndestroy = \"true\"\n";
    let w = Workspace::new(&[
        ("mara.toml", "provider = \"tools\"\nengine = \"command\"\n"),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        ("config/pulumi/Pulumi.dev.yaml", "config: {}\n"),
        ("providers/tools.toml", provider),
    ]);
    let (code, drift) = common::json_report(w.mara(), &["drift"]);
    assert_eq!(code, 4, "{drift:#}");
    assert_eq!(project(&drift, "checked")["status"], "succeeded");
    assert_eq!(
        project(&drift, "checked")["drifted"][0]["resource"],
        "(what its drift command checks)"
    );
    assert_eq!(project(&drift, "fine")["status"], "succeeded");
    assert!(project(&drift, "fine").get("drifted").is_none());
    let unchecked = project(&drift, "unchecked");
    assert_eq!(unchecked["status"], "skipped", "{drift:#}");
    assert_eq!(
        unchecked["reason"],
        "not checked: it has no `drift` command"
    );
    // Its output is the check's.
    let output = w.mara().arg("drift").output().unwrap();
    assert!(common::stdout(&output).contains("[checked] the bucket policy differs"));
    assert!(
        common::stdout(&output).contains("✗ drift on stack dev: 1 project drifted"),
        "{}",
        common::stdout(&output)
    );

    // A check that fails (an expired token) holds back no other, nor what follows it.
    w.write(
        "providers/tools.toml",
        "description = \"Tools\"\n
[[project]]\npath = \"probe\"\nstage = \"infrastructure\"\nup = \"true\"\ndestroy = \"true\"\ndrift = \"echo 'AccessDenied: token expired'; exit 1\"\n
[[project]]\npath = \"app\"\nup = \"true\"\ndestroy = \"true\"\ndrift = \"true\"\n",
    );
    let (code, drift) = common::json_report(w.mara(), &["drift"]);
    assert_eq!(code, 1, "{drift:#}");
    assert_eq!(project(&drift, "probe")["status"], "failed");
    assert_eq!(project(&drift, "app")["status"], "succeeded", "{drift:#}");
}

/// A drift check does not read a stack a live run is changing (exit 5), and `status` keeps
/// showing the last deployment, with the last check under it.
#[test]
fn a_drift_check_waits_for_a_deployment_and_status_keeps_showing_it() {
    let d = Deployment::of("mara-local");
    let output = d.mara().args(["up", "--yes"]).output().unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let mut up = std::process::Command::new(assert_cmd::cargo::cargo_bin("mara"))
        .current_dir(d.root())
        .envs(d.environment())
        .env("PULUMI_STAND_IN_DELAY_MS", "3000")
        .args(["up", "--yes", "--only", "cluster"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, status) = common::json_report(d.mara(), &["status"]);
        if status[0]["status"] == "running" && status[0]["operation"] == "up" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the up never started: {status:#}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let output = d.mara().arg("drift").output().unwrap();
    assert_eq!(output.status.code(), Some(5), "{}", common::stderr(&output));
    assert!(
        common::stderr(&output).contains("a drift check now would read it mid-change"),
        "{}",
        common::stderr(&output)
    );
    assert!(up.wait().unwrap().success());
    let output = d.mara().arg("drift").output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", common::stdout(&output));
    let output = d.mara().arg("status").output().unwrap();
    let said = common::stdout(&output);
    assert!(
        said.contains(" up on stack dev"),
        "the last deployment: {said}"
    );
    assert!(
        said.contains("Last drift check") && said.contains("nothing drifted in 14 checked"),
        "{said}"
    );
}
