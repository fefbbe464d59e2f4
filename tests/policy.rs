//! Policies on every plan (docs/commands.md, "Policies"), with the real Terraform: a
//! conftest-style policy over a module's own plan (`terraform show -json`) blocks `up` before
//! anything is applied and shows in `preview`; a warning shows and blocks nothing; a deployment
//! policy sees the values an input is planned with; a policy that does not compile stops the
//! run before any engine call; `mara policy test` and `[policy]`'s mistakes.

mod common;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

/// A copy of `examples/terraform-local` whose network module has a resource (Terraform's own
/// `terraform_data`: no provider to download), with its own HOME and the policies given.
struct Modules {
    dir: tempfile::TempDir,
}

impl Modules {
    fn new(policies: &[(&str, &str)]) -> Option<Modules> {
        common::terraform()?;
        let dir = tempfile::tempdir().unwrap();
        common::copy_example(&common::example("terraform-local"), dir.path());
        let network = dir.path().join("network/main.tf");
        let mut text = std::fs::read_to_string(&network).unwrap();
        text.push_str("\nresource \"terraform_data\" \"route\" {\n  input = var.cidr\n}\n");
        std::fs::write(&network, text).unwrap();
        for (name, text) in policies {
            let file = dir.path().join(name);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        }
        Some(Modules { dir })
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn mara(&self) -> Command {
        common::terraform_mara(self.root())
    }

    fn run(&self, args: &[&str]) -> (i32, Value) {
        common::json_report(self.mara(), args)
    }

    fn set_cidr(&self, cidr: &str) {
        let output = self
            .mara()
            .args(["config", "set", "network:cidr", cidr])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", common::stderr(&output));
    }

    /// The network module's state of the stack, as the local backend keeps it.
    fn network_state(&self) -> PathBuf {
        self.root()
            .join("network/terraform.tfstate.d/dev/terraform.tfstate")
    }
}

/// As conftest's documentation writes a policy for Terraform plans.
const DENY_EVERYWHERE: &str = r#"package main

import rego.v1

deny contains msg if {
	resource := input.resource_changes[_]
	resource.type == "terraform_data"
	"create" in resource.change.actions
	resource.change.after.input == "0.0.0.0/0"
	msg := sprintf("%s: a route to everywhere (%s on %s)", [resource.address, input.mara.project, input.mara.stack])
}
"#;

const WARN_CREATES: &str = r#"package main

import rego.v1

warn contains msg if {
	some resource in input.resource_changes
	"create" in resource.change.actions
	msg := sprintf("%s is created", [resource.address])
}
"#;

fn messages(report: &Value) -> Vec<(String, String, Option<String>)> {
    (report["policy"]["messages"]
        .as_array()
        .into_iter()
        .flatten())
    .map(|m| {
        (
            m["level"].as_str().unwrap().to_string(),
            m["text"].as_str().unwrap().to_string(),
            m["project"].as_str().map(str::to_string),
        )
    })
    .collect()
}

#[test]
fn a_denying_policy_shows_in_preview_and_blocks_up_before_anything_is_applied() {
    let Some(modules) = Modules::new(&[("policy/routes.rego", DENY_EVERYWHERE)]) else {
        return;
    };
    modules.set_cidr("0.0.0.0/0");

    let (code, report) = modules.run(&["preview"]);
    assert_eq!(code, 4, "{report}");
    assert_eq!(
        messages(&report),
        [(
            "deny".to_string(),
            "terraform_data.route: a route to everywhere (network on dev)".to_string(),
            Some("network".to_string()),
        )]
    );
    assert_eq!(report["projects"][0]["policy"][0]["rule"], "data.main.deny");
    assert_eq!(report["exit_code"], 4);

    // The table says it too.
    let output = modules.mara().arg("preview").output().unwrap();
    let shown = common::stdout(&output);
    assert!(
        shown.contains("Policies\n  deny  network: terraform_data.route: a route to everywhere"),
        "{shown}"
    );
    assert!(shown.contains("(denied by policy)"), "{shown}");
    assert!(common::stderr(&output).contains("the policies deny the plan (1 denial)"));

    let output = modules.mara().args(["up", "--yes"]).output().unwrap();
    assert_eq!(output.status.code(), Some(4), "{}", common::stderr(&output));
    let said = common::stderr(&output);
    assert!(
        said.contains("deny  network: terraform_data.route: a route to everywhere"),
        "{said}"
    );
    assert!(
        said.contains("the policies deny the plan (1 denial): nothing was applied"),
        "{said}"
    );
    assert!(!modules.network_state().exists(), "nothing was applied");

    // Fixed, it goes: planned once, judged, and that plan applied.
    modules.set_cidr("10.30.0.0/16");
    let (code, report) = modules.run(&["up", "--yes"]);
    assert_eq!(code, 0, "{report}");
    assert!(messages(&report).is_empty(), "{report}");
    let state = std::fs::read_to_string(modules.network_state()).unwrap();
    assert!(state.contains("10.30.0.0/16"), "{state}");
}

#[test]
fn a_warning_shows_and_blocks_nothing() {
    let Some(modules) = Modules::new(&[("policy/creates.rego", WARN_CREATES)]) else {
        return;
    };
    let (code, report) = modules.run(&["up", "--yes"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(
        messages(&report),
        [(
            "warn".to_string(),
            "terraform_data.route is created".to_string(),
            Some("network".to_string())
        )]
    );
    assert!(modules.network_state().exists(), "applied");
    let output = modules.mara().arg("preview").output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
    // `-q`: nothing went wrong, nothing is said — not even the gate's preview.
    let output = modules.mara().args(["up", "--yes", "-q"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
    assert_eq!(
        (common::stdout(&output), common::stderr(&output)),
        (String::new(), String::new())
    );

    // A drift check is judged too, each module with its own plan.
    let drift = "package main\n\nimport rego.v1\n\nwarn contains sprintf(\"%s: %d resources checked\", [input.mara.project, count(input.resource_changes)]) if input.mara.operation == \"drift\"\n";
    std::fs::write(modules.root().join("policy/drift.rego"), drift).unwrap();
    let (code, report) = modules.run(&["drift"]);
    assert_eq!(code, 0, "{report}");
    let said: Vec<String> = messages(&report)
        .into_iter()
        .map(|(_, text, _)| text)
        .collect();
    assert!(
        said.contains(&"network: 1 resources checked".to_string()),
        "{said:?}"
    );
}

#[test]
fn a_deployment_policy_sees_the_values_an_input_is_planned_with() {
    // The app takes the network's subnets as inputs; previewed before the network is
    // deployed, it is planned with the values the network's plan projects.
    let policy = r#"package deployment

import rego.v1

deny contains msg if {
	some p in input.projects
	some name in p.projected
	some subnet in p.inputs.subnets
	startswith(subnet, "10.99.")
	msg := sprintf("%s would take %s = %s (%s), planned by %s", [p.path, name, subnet, p.planned_with, concat(", ", p.after)])
}

# A module's resources with their values, from its own plan.
warn contains sprintf("%s: %s %s %s -> %v", [p.path, r.action, r.resource, prop.path, prop.new]) if {
	some p in input.projects
	some r in p.resources
	some prop in r.properties
	prop.path == "input"
}
"#;
    let Some(modules) = Modules::new(&[("policy/deployment.rego", policy)]) else {
        return;
    };
    modules.set_cidr("10.99.0.0/16");
    let (code, report) = modules.run(&["preview"]);
    assert_eq!(code, 4, "{report}");
    let said: Vec<String> = messages(&report)
        .into_iter()
        .map(|(_, text, _)| text)
        .collect();
    assert!(
        said.contains(
            &"app would take network:subnets = 10.99.0.0/24 (projected), planned by network"
                .to_string()
        ),
        "{said:?}"
    );
    assert!(
        report["policy"]["messages"][0].get("project").is_none(),
        "a deployment's message is the run's"
    );
    assert!(
        said.contains(&"network: create terraform_data.route input -> 10.99.0.0/16".to_string()),
        "{said:?}"
    );
}

#[test]
fn a_policy_that_does_not_compile_stops_the_run_before_any_engine_call() {
    let broken = "package main\n\nimport rego.v1\n\ndeny contains msg if {\n\tmsg := undefined_function(input)\n}\n";
    let Some(modules) = Modules::new(&[("policy/broken.rego", broken)]) else {
        return;
    };
    for args in [&["preview"][..], &["up", "--yes"]] {
        let output = modules.mara().args(args).output().unwrap();
        assert_eq!(output.status.code(), Some(3), "{}", common::stderr(&output));
        let said = common::stderr(&output);
        assert!(
            said.contains("policy/broken.rego:6: data.main.deny failed: could not find function undefined_function"),
            "{said}"
        );
    }
    assert!(
        !modules.root().join("network/.terraform").exists(),
        "no engine ran"
    );
    assert!(
        !modules.root().join(".mara/ledger.db").exists(),
        "nothing was recorded"
    );
}

#[test]
fn policy_test_runs_the_test_rules_and_fails_on_one_that_fails() {
    let tests = r#"package main

import rego.v1

test_a_route_everywhere_is_denied if {
	count(deny) == 1 with input as {"mara": {"project": "p", "stack": "s"}, "resource_changes": [{"address": "a", "type": "terraform_data", "change": {"actions": ["create"], "after": {"input": "0.0.0.0/0"}}}]}
}
"#;
    let Some(modules) = Modules::new(&[
        ("policy/routes.rego", DENY_EVERYWHERE),
        ("policy/routes_test.rego", tests),
    ]) else {
        return;
    };
    let output = modules.mara().args(["policy", "test"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
    assert_eq!(
        common::stdout(&output),
        "PASS: data.main.test_a_route_everywhere_is_denied\n1/1 passed\n"
    );
    // Tests alone gate nothing: an `up --yes` does not preview for them.
    let alone = tempfile::tempdir().unwrap();
    common::copy_example(&common::example("terraform-local"), alone.path());
    std::fs::create_dir_all(alone.path().join("policy")).unwrap();
    std::fs::write(
        alone.path().join("policy/only_test.rego"),
        "package main\n\nimport rego.v1\n\ntest_nothing if true\n",
    )
    .unwrap();
    let output = common::terraform_mara(alone.path())
        .args(["up", "--yes"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
    assert!(
        !common::stderr(&output).contains("Previewing"),
        "{}",
        common::stderr(&output)
    );
    let failing = tests.replace("count(deny) == 1", "count(deny) == 2");
    std::fs::write(modules.root().join("policy/routes_test.rego"), failing).unwrap();
    let output = modules.mara().args(["policy", "test"]).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(
        common::stdout(&output)
            .starts_with("FAIL: data.main.test_a_route_everywhere_is_denied\n0/1 passed")
    );
    assert!(common::stderr(&output).contains("1 of 1 policy test failed"));
}

#[test]
fn policy_settings_are_checked_with_their_line_and_key() {
    let ws = common::Workspace::new(&[(
        "mara.toml",
        "provider = \"p\"\n[policy]\npaths = [\"rules\", \"../outside\"]\ndeployment_packages = [\"not-a-package\"]\n",
    )]);
    let output = ws.mara().args(["policy", "test"]).output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    let said = common::stderr(&output);
    assert!(
        said.contains(
            "mara.toml:3: `policy.paths`: `../outside` must stay inside the workspace (no `..`)"
        ),
        "{said}"
    );
    assert!(said.contains("mara.toml:4: `policy.deployment_packages`: \"not-a-package\" is not a Rego package name"), "{said}");

    // A path it names that is not there.
    std::fs::write(
        ws.path().join("mara.toml"),
        "[policy]\npaths = [\"rules\"]\n",
    )
    .unwrap();
    let output = ws.mara().args(["policy", "test"]).output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(
        common::stderr(&output).contains("mara.toml:2: `policy.paths`: rules is not there"),
        "{}",
        common::stderr(&output)
    );

    // A package it names that no policy declares: a typo would turn the gate off.
    std::fs::create_dir_all(ws.path().join("rules")).unwrap();
    std::fs::write(
        ws.path().join("rules/a.rego"),
        "package main\nimport rego.v1\nwarn contains \"w\" if input.a\n",
    )
    .unwrap();
    std::fs::write(
        ws.path().join("mara.toml"),
        "[policy]\npaths = [\"rules\"]\npackages = [\"mian\"]\n",
    )
    .unwrap();
    let output = ws.mara().args(["policy", "test"]).output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(
        common::stderr(&output).contains(
            "mara.toml: `policy.packages`: no policy declares package `mian` (they declare: main)"
        ),
        "{}",
        common::stderr(&output)
    );
    // A Pulumi policy pack must be one.
    std::fs::write(
        ws.path().join("mara.toml"),
        "[policy]\npaths = [\"rules\"]\npulumi_packs = [\"packs\"]\n",
    )
    .unwrap();
    let output = ws.mara().args(["policy", "test"]).output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(
        common::stderr(&output).contains(
            "mara.toml:3: `policy.pulumi_packs`: `packs` is not a Pulumi policy pack: it has no PulumiPolicy.yaml"
        ),
        "{}",
        common::stderr(&output)
    );
    // Rego v0, as conftest's older examples write it: said, with the v1 form.
    std::fs::write(
        ws.path().join("mara.toml"),
        "[policy]\npaths = [\"rules\"]\n",
    )
    .unwrap();
    std::fs::write(
        ws.path().join("rules/b.rego"),
        "package main\n\ndeny[msg] {\n  msg := \"x\"\n}\n",
    )
    .unwrap();
    let output = ws.mara().args(["policy", "test"]).output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    let said = common::stderr(&output);
    assert!(
        said.contains("rules/b.rego:3: the policy does not compile:"),
        "{said}"
    );
    assert!(
        said.contains(
            "hint: mara reads Rego v1, as OPA 1.0 does: write `deny contains msg if { … }`"
        ),
        "{said}"
    );
    std::fs::remove_file(ws.path().join("rules/b.rego")).unwrap();

    // An input that is not JSON, at its line.
    std::fs::create_dir_all(ws.path().join("rules")).unwrap();
    std::fs::write(
        ws.path().join("rules/a.rego"),
        "package main\nimport rego.v1\nwarn contains \"w\" if input.a\n",
    )
    .unwrap();
    std::fs::write(ws.path().join("in.json"), "{\n  \"a\": 1,\n}\n").unwrap();
    let output = ws
        .mara()
        .args(["policy", "eval", "in.json"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(
        common::stderr(&output).contains("in.json:3: is not JSON"),
        "{}",
        common::stderr(&output)
    );
}

#[test]
fn a_deployment_policy_denies_a_destroy_that_would_orphan_deployed_projects() {
    let policy = r#"package deployment

import rego.v1

deny contains msg if {
	input.operation == "destroy"
	some orphan in input.orphans
	msg := sprintf("destroying %s would orphan %s", [concat(", ", orphan.depends_on), orphan.path])
}
"#;
    let Some(modules) = Modules::new(&[("policy/deployment.rego", policy)]) else {
        return;
    };
    let (code, report) = modules.run(&["up", "--yes"]);
    assert_eq!(code, 0, "{report}");
    // mara itself refuses to orphan (exit 3) unless told to; told to, the policy refuses.
    let output = (modules.mara())
        .args([
            "destroy",
            "--yes",
            "--only",
            "network",
            "--orphan-dependents",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(4), "{}", common::stderr(&output));
    let said = common::stderr(&output);
    assert!(
        said.contains("deny  destroying network would orphan app (data.deployment.deny)"),
        "{said}"
    );
    assert!(
        said.contains("the policies deny the destroy (1 denial): nothing was destroyed"),
        "{said}"
    );
    let state = std::fs::read_to_string(modules.network_state()).unwrap();
    assert!(
        state.contains("terraform_data"),
        "nothing was destroyed: {state}"
    );
    // The whole stack orphans nothing: it goes.
    let (code, report) = modules.run(&["destroy", "--yes"]);
    assert_eq!(code, 0, "{report}");
}

#[test]
fn the_examples_carry_a_policy_that_passes_its_tests_and_gates_their_runs() {
    // The Pulumi example: its deployment policy's tests pass; its `up --yes` previews every
    // project first (the gate), then applies what was judged.
    let pulumi = common::Deployment::of("mara-local");
    common::copy_example_with_policies(&common::example("mara-local"), pulumi.root());
    let output = pulumi.mara().args(["policy", "test"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
    assert!(
        common::stdout(&output).ends_with("2/2 passed\n"),
        "{}",
        common::stdout(&output)
    );
    let (code, report) = common::json_report(pulumi.mara(), &["up", "--yes"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(
        report["policy"]["messages"],
        serde_json::json!([]),
        "judged, nothing said"
    );
    let calls = pulumi.calls();
    let first_up = (calls.iter())
        .position(|c| c["argv"].as_array().unwrap().iter().any(|a| a == "up"))
        .unwrap();
    let previews = (calls[..first_up].iter())
        .filter(|c| c["argv"].as_array().unwrap().iter().any(|a| a == "preview"))
        .count();
    assert!(
        previews > 0,
        "previewed before anything was applied: {calls:?}"
    );

    // The Terraform example: its conftest-style policy over each module's plan.
    if common::terraform().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    common::copy_example_with_policies(&common::example("terraform-local"), dir.path());
    let mara = || common::terraform_mara(dir.path());
    let output = mara().args(["policy", "test"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
    // As it comes, it passes: the README deploys it.
    let output = mara().arg("preview").output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
    let output = mara()
        .args(["config", "set", "app:replicas", "1"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let (code, report) = common::json_report(mara(), &["up", "--yes"]);
    assert_eq!(code, 4, "{report}");
    assert_eq!(
        report["policy"]["messages"][0]["text"],
        "1 replicas: between 2 and 20, please"
    );
    assert_eq!(report["policy"]["messages"][0]["project"], "app");
    assert_eq!(report["status"], "denied");
    let state = dir
        .path()
        .join("network/terraform.tfstate.d/dev/terraform.tfstate");
    assert!(!state.exists(), "nothing was applied");
}

#[test]
fn saved_plans_are_applied_only_under_the_policies_that_judged_them() {
    let Some(modules) = Modules::new(&[("policy/creates.rego", WARN_CREATES)]) else {
        return;
    };
    let root = modules.root();
    let run = |args: &[&str]| {
        let output = modules.mara().args(args).output().unwrap();
        (output.status.code().unwrap(), common::stderr(&output))
    };

    // Judged and passed: the manifest says by which policies; `up --plans` applies them.
    assert_eq!(run(&["preview", "--save-plans", "judged"]).0, 0);
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(root.join("judged/mara-plans.json")).unwrap())
            .unwrap();
    assert!(
        manifest["judged_by"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"),
        "{manifest}"
    );

    // Saved without policies: not applied under them.
    std::fs::rename(root.join("policy"), root.join("policy.off")).unwrap();
    assert_eq!(run(&["preview", "--save-plans", "unjudged"]).0, 0);
    std::fs::rename(root.join("policy.off"), root.join("policy")).unwrap();
    let (code, said) = run(&["up", "--plans", "unjudged"]);
    assert_eq!(code, 4, "{said}");
    assert!(said.contains("the approved plans were saved without the workspace's policies judging them: nothing ran"), "{said}");
    assert!(!modules.network_state().exists(), "nothing was applied");

    // The policies changed since: not applied; as they were, applied.
    let file = root.join("policy/creates.rego");
    std::fs::write(&file, WARN_CREATES.replace("is created", "is new")).unwrap();
    let (code, said) = run(&["up", "--plans", "judged"]);
    assert_eq!(code, 4, "{said}");
    assert!(
        said.contains("the approved plans were judged by other policies than the workspace's now"),
        "{said}"
    );
    assert!(!modules.network_state().exists(), "nothing was applied");
    std::fs::write(&file, WARN_CREATES).unwrap();
    let (code, said) = run(&["up", "--plans", "judged"]);
    assert_eq!(code, 0, "{said}");
    assert!(modules.network_state().exists());

    // Denied: no plan is kept to approve.
    let frozen = "package main\n\nimport rego.v1\n\ndeny contains r.address if {\n\tsome r in input.resource_changes\n\tr.change.actions != [\"no-op\"]\n}\n";
    std::fs::write(root.join("policy/frozen.rego"), frozen).unwrap();
    modules.set_cidr("10.40.0.0/16");
    assert_eq!(run(&["preview", "--save-plans", "denied"]).0, 4);
    assert!(
        !root.join("denied/mara-plans.json").exists(),
        "a denied preview approves nothing"
    );
}

#[test]
fn what_the_policies_said_is_recorded_with_the_run_and_shown_on_its_page() {
    // Command projects: each judged with mara's context, the run by the deployment's policy,
    // whose message carries what an engine or a policy may say (HTML).
    let w = common::web::workspace();
    w.write(
        "policy/deployment.rego",
        "package deployment\n\nimport rego.v1\n\nwarn contains sprintf(\"<b>%d projects</b> on %s\", [count(input.projects), input.stack]) if input.operation == \"up\"\n",
    );
    let output = w
        .mara()
        .args(["up", "--yes"])
        .env("MARA_TEST_SLEEP", "0")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
    let history = w
        .mara()
        .args(["--output", "json", "history"])
        .output()
        .unwrap();
    let history: Value = serde_json::from_slice(&history.stdout).unwrap();
    let run = &history[0];
    assert_eq!(
        run["policy"]["messages"][0]["text"], "<b>3 projects</b> on dev",
        "{run}"
    );
    assert_eq!(run["policy"]["messages"][0]["level"], "warn");

    let serve = common::web::Serve::start(w.path(), &[]);
    let page = serve.get(&format!("/runs/{}", run["run_id"].as_str().unwrap()));
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<h2>Policies</h2>"), "{}", page.body);
    assert!(
        page.body.contains("&lt;b&gt;3 projects&lt;/b&gt; on dev"),
        "the message is text, never markup: {}",
        page.body
    );
    assert!(!page.body.contains("<b>3 projects"), "{}", page.body);
    serve.stop();
}
