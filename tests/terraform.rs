//! Terraform and command projects, run by mara against the real `terraform` (offline: the example
//! modules need no provider download) and `sh`.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use assert_cmd::Command;
use serde_json::Value;

use common::project;

/// A copy of `examples/terraform-local`, with its own HOME.
struct Modules {
    dir: tempfile::TempDir,
}

impl Modules {
    fn new(example: &str) -> Modules {
        let dir = tempfile::tempdir().unwrap();
        common::copy_example(&common::example(example), dir.path());
        Modules { dir }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn mara(&self) -> Command {
        common::terraform_mara(self.root())
    }

    /// `mara --output json <args>`: its exit code and report.
    fn run(&self, args: &[&str]) -> (i32, Value) {
        common::json_report(self.mara(), args)
    }

    /// `mara --output json <args>` with `PATH` set: its exit code and report.
    fn run_on(&self, path: &str, args: &[&str]) -> (i32, Value) {
        let mut cmd = self.mara();
        cmd.env("PATH", path);
        common::json_report(cmd, args)
    }

    fn outputs(&self) -> Value {
        let output = self.mara().arg("output").output().unwrap();
        assert!(output.status.success(), "{}", common::stderr(&output));
        serde_json::from_slice(&output.stdout).unwrap()
    }

    fn edit_config(&self, from: &str, to: &str) {
        let file = self.root().join("config/pulumi/Pulumi.dev.yaml");
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains(from), "{text}");
        std::fs::write(file, text.replace(from, to)).unwrap();
    }
}

/// The projects' paths in the order they started (RFC 3339 times with milliseconds sort as text).
fn started_order(report: &Value) -> Vec<String> {
    let mut projects: Vec<&Value> = report["projects"].as_array().unwrap().iter().collect();
    projects.sort_by_key(|p| p["started"].as_str().unwrap().to_string());
    projects
        .iter()
        .map(|p| p["path"].as_str().unwrap().to_string())
        .collect()
}

/// `later` started only after `earlier` finished.
fn ran_after(report: &Value, earlier: &str, later: &str) -> bool {
    project(report, later)["started"].as_str() >= project(report, earlier)["finished"].as_str()
}

#[test]
fn terraform_modules_deploy_preview_and_destroy_as_one_stack() {
    if common::terraform().is_none() {
        return;
    }
    let m = Modules::new("terraform-local");

    let (code, report) = m.run(&["up", "--yes"]);
    assert_eq!(code, 0, "{report:#}");
    assert!(ran_after(&report, "network", "app"), "{report:#}");

    // The shared configuration reached the network as TF_VAR_cidr, and the network's outputs
    // reached the app through its state.
    let outputs = m.outputs();
    assert_eq!(outputs["network"]["cidr"], "10.20.0.0/16");
    assert_eq!(outputs["network"]["network_name"], "mara-dev");
    assert_eq!(outputs["app"]["subnet"], "10.20.0.0/24");
    assert_eq!(outputs["app"]["url"], "https://app.mara-dev.localhost");
    assert_eq!(outputs["app"]["replicas"], 2);
    assert!(
        m.root().join("network/terraform.tfstate.d/dev").is_dir(),
        "the stack is a Terraform workspace"
    );

    let (code, report) = m.run(&["preview", "--expect-no-changes"]);
    assert_eq!(code, 0, "nothing changed after up: {report:#}");
    assert_eq!(project(&report, "app")["status"], "unchanged");

    m.edit_config("app:replicas: 2", "app:replicas: 3");
    let (code, report) = m.run(&["preview", "--expect-no-changes"]);
    assert_eq!(code, 4, "a changed variable is a change: {report:#}");
    assert_eq!(project(&report, "network")["status"], "unchanged");
    assert_eq!(project(&report, "app")["status"], "succeeded");
    // Terraform 1.1+ names the changed output; older ones only exit 2, which counts as one.
    assert_eq!(project(&report, "app")["changes"]["output"], 1);

    let (code, report) = m.run(&["destroy", "--yes"]);
    assert_eq!(code, 0, "{report:#}");
    assert!(
        ran_after(&report, "app", "network"),
        "reverse order: {report:#}"
    );
    assert_eq!(
        m.outputs(),
        serde_json::json!({"network": {}, "app": {}}),
        "nothing is left"
    );
}

#[test]
fn a_failing_module_names_terraform_s_error_and_skips_its_dependents() {
    if common::terraform().is_none() {
        return;
    }
    let m = Modules::new("terraform-local");
    m.edit_config("network:cidr: 10.20.0.0/16", "network:cidr: not-a-cidr");
    let (code, report) = m.run(&["up", "--yes"]);
    assert_eq!(code, 1, "{report:#}");
    let network = project(&report, "network");
    assert_eq!(network["status"], "failed");
    assert!(
        network["reason"].as_str().unwrap().contains("cidrsubnet"),
        "Terraform's own error: {network:#}"
    );
    assert_eq!(project(&report, "app")["status"], "skipped");
}

/// One stack of a Pulumi project, a Terraform module and a command, each reading the one before.
const MIXED_PROVIDER: &str = r#"
description = "A Terraform network, a Pulumi cluster on it, a command that checks both"
infra_type = "mixed"

[[project]]
path = "network"
stage = "infrastructure"
engine = "terraform"

[[project]]
path = "cluster"
stage = "infrastructure"
after = ["network"]
engine = "pulumi"

[[project]]
path = "smoke"
after = ["cluster"]
engine = "command"
up = '''
printf '{"checked": "%s", "operation": "%s"}' "$MARA_STACK" "$MARA_OPERATION" > "$MARA_OUTPUTS"
echo "smoke test passed on $MARA_PROJECT"
'''
destroy = "echo nothing to remove"
"#;

const CLUSTER: &str = r#"name: mixed-cluster
runtime: yaml
outputs:
  cluster_name: mara-${pulumi.stack}
"#;

#[test]
fn pulumi_terraform_and_command_projects_run_in_one_graph() {
    if common::terraform().is_none() {
        return;
    }
    let m = Modules::new("terraform-local");
    let bin = common::stand_in_bin();
    std::fs::remove_dir_all(m.root().join("app")).unwrap();
    std::fs::write(m.root().join("providers/mixed.toml"), MIXED_PROVIDER).unwrap();
    std::fs::create_dir_all(m.root().join("cluster")).unwrap();
    std::fs::write(m.root().join("cluster/Pulumi.yaml"), CLUSTER).unwrap();
    m.edit_config("infra_type: local-tf", "infra_type: mixed");
    std::fs::write(
        m.root().join("mara.toml"),
        "provider = \"mixed\"\nengine = \"terraform\"\n",
    )
    .unwrap();
    std::fs::write(
        m.root().join("config/pulumi/environment"),
        "PULUMI_STACK=dev\nPULUMI_BACKEND_URL=file://.mara/pulumi-state\nPULUMI_CONFIG_PASSPHRASE=mixed\n",
    )
    .unwrap();
    let path = common::path_with(bin.path());
    let run = |args: &[&str]| m.run_on(&path, args);

    let (code, report) = run(&["up", "--yes"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(started_order(&report), ["network", "cluster", "smoke"]);
    assert!(ran_after(&report, "network", "cluster") && ran_after(&report, "cluster", "smoke"));

    let output = m.mara().env("PATH", &path).arg("output").output().unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let outputs: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(outputs["network"]["network_name"], "mara-dev");
    assert_eq!(outputs["cluster"]["cluster_name"], "mara-dev");
    assert_eq!(
        outputs["smoke"],
        serde_json::json!({"checked": "dev", "operation": "up"})
    );

    // A command without a preview is not run by preview; the others report no changes.
    let (code, report) = run(&["preview", "--expect-no-changes"]);
    assert_eq!(code, 0, "{report:#}");

    let (code, report) = run(&["destroy", "--yes"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(started_order(&report), ["smoke", "cluster", "network"]);
    let output = m.mara().env("PATH", &path).arg("output").output().unwrap();
    let outputs: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        outputs["smoke"],
        Value::Null,
        "a destroyed command keeps no outputs"
    );
    assert_eq!(outputs["network"], serde_json::json!({}));
}

#[test]
fn a_command_that_writes_no_json_object_fails_clearly() {
    let ws = common::Workspace::new(&[
        ("mara.toml", "provider = \"cmd\"\nengine = \"command\"\n"),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        ("config/pulumi/Pulumi.dev.yaml", "config: {}\n"),
        (
            "providers/cmd.toml",
            "description = \"One command\"\n\n[[project]]\npath = \"tool\"\nup = \"echo '[1, 2]' > \\\"$MARA_OUTPUTS\\\"\"\ndestroy = \"true\"\n",
        ),
    ]);
    let output = ws.mara().args(["up", "--yes"]).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let out = common::stdout(&output);
    assert!(
        out.contains("wrote outputs that are not a JSON object to $MARA_OUTPUTS"),
        "{out}"
    );
}

/// A command's program is found where the command runs (its project's directory), read with
/// the shell's quoting; one that is not there is refused before anything runs.
#[test]
fn a_command_s_program_is_found_where_it_runs() {
    let provider = r##"description = "Commands"

[[project]]
path = "deploy"
up = """GREETING="hello there" ./deploy.sh 2>/dev/null"""
destroy = "true"

[[project]]
path = "missing"
after = ["deploy"]
up = "TARGET='a b' ./scripts/missing.sh"
destroy = "true"

# No directory: it runs in the workspace root, where its script is.
[[project]]
path = "nodir"
up = """# a comment first
./at-root.sh"""
destroy = "true"
"##;
    let ws = common::Workspace::new(&[
        ("mara.toml", "provider = \"cmd\"\nengine = \"command\"\n"),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        ("config/pulumi/Pulumi.dev.yaml", "config: {}\n"),
        ("providers/cmd.toml", provider),
        (
            "deploy/deploy.sh",
            "#!/bin/sh\nprintf '{\"said\": \"%s\"}' \"$GREETING\" > \"$MARA_OUTPUTS\"\n",
        ),
        ("missing/.keep", ""),
        ("at-root.sh", "#!/bin/sh\necho '{}' > \"$MARA_OUTPUTS\"\n"),
    ]);
    for script in ["deploy/deploy.sh", "at-root.sh"] {
        let script = ws.path().join(script);
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    let output = ws.mara().args(["up", "--yes"]).output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    let err = common::stderr(&output);
    assert!(
        err.contains("missing/scripts/missing.sh: no such program (the command steps of missing)"),
        "{err}"
    );
    assert!(
        !err.contains("deploy.sh") && !err.contains("at-root.sh"),
        "found where it runs: {err}"
    );
    ws.write(
        "missing/scripts/missing.sh",
        "#!/bin/sh\necho '{}' > \"$MARA_OUTPUTS\"\n",
    );
    let script = ws.path().join("missing/scripts/missing.sh");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let output = ws.mara().args(["up", "--yes"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
    let output = ws.mara().args(["output", "deploy"]).output().unwrap();
    assert!(
        common::stdout(&output).contains("hello there"),
        "{}",
        common::stdout(&output)
    );
}

#[test]
fn a_held_state_lock_is_reported_as_such() {
    if common::terraform().is_none() {
        return;
    }
    let Some(python) = common::tools::tool("python3", "it holds the lock here") else {
        return;
    };
    let m = Modules::new("terraform-local");
    let (code, report) = m.run(&["up", "--yes", "--only", "network"]);
    assert_eq!(code, 0, "{report:#}");
    // Terraform's local backend locks the state file with fcntl, as this holder does.
    let state = m
        .root()
        .join("network/terraform.tfstate.d/dev/terraform.tfstate");
    let mut holder = std::process::Command::new(python)
        .args([
            "-c",
            "import fcntl, sys; f = open(sys.argv[1], 'r+'); fcntl.lockf(f, fcntl.LOCK_EX); print('locked', flush=True); sys.stdin.read()",
        ])
        .arg(&state)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");

    m.edit_config("network:name: mara", "network:name: other");
    let (code, report) = m.run(&["up", "--yes", "--only", "network"]);
    drop(holder.stdin.take());
    holder.wait().unwrap();
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(
        project(&report, "network")["reason"],
        "the stack is locked by another update (see the log)"
    );
}

/// OpenTofu takes the same commands; `tofu` here is the real terraform under that name, which
/// checks that mara runs the binary the engine names with the same arguments.
#[test]
fn a_tofu_module_runs_the_tofu_binary() {
    let Some(terraform) = common::terraform() else {
        return;
    };
    let m = Modules::new("terraform-local");
    let provider = m.root().join("providers/local-tf.toml");
    let text = std::fs::read_to_string(&provider).unwrap();
    std::fs::write(
        &provider,
        text.replace("engine = \"terraform\"", "engine = \"tofu\""),
    )
    .unwrap();
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&terraform, bin.path().join("tofu")).unwrap();
    // Only `tofu` on PATH: a call to `terraform` would fail.
    let path = format!("{}:/usr/bin:/bin", bin.path().display());
    let output = m
        .mara()
        .env("PATH", &path)
        .args(["up", "--yes"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stdout(&output));
    let output = m
        .mara()
        .env("PATH", &path)
        .args(["output", "app"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let outputs: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(outputs["url"], "https://app.mara-dev.localhost");
}

#[test]
fn destroy_and_refresh_never_make_a_workspace() {
    if common::terraform().is_none() {
        return;
    }
    let m = Modules::new("terraform-local");
    // Nothing deployed: no module has the stack's workspace, and neither run makes one.
    for operation in ["refresh", "destroy"] {
        let output = m
            .mara()
            .args([operation, "--yes", "--stack", "prdo"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(3), "{}", common::stderr(&output));
        assert!(
            common::stderr(&output).contains("stack `prdo` does not exist in any selected project"),
            "{}",
            common::stderr(&output)
        );
    }
    assert!(!m.root().join("network/terraform.tfstate.d/prdo").exists());
    let history = m
        .mara()
        .args(["--output", "json", "history", "--all-stacks"])
        .output()
        .unwrap();
    assert_eq!(
        common::stdout(&history).trim(),
        "[]",
        "a run that found nothing to do is not in the history"
    );
    // Deployed on dev, `network` only: destroying dev leaves `app` untouched and says why.
    let (code, report) = m.run(&["up", "--yes", "--only", "network"]);
    assert_eq!(code, 0, "{report:#}");
    let (code, report) = m.run(&["destroy", "--yes"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(project(&report, "app")["status"], "skipped");
    assert!(
        project(&report, "app")["reason"]
            .as_str()
            .unwrap()
            .contains("does not exist here"),
        "{report:#}"
    );
    assert!(destroyed(project(&report, "network")), "{report:#}");
    assert!(!m.root().join("app/terraform.tfstate.d/dev").exists());
}

/// A module of outputs only, destroyed: Terraform from 1.1 counts its outputs' removal as a
/// change, 1.0 (CI's pinned build) counts none.
fn destroyed(project: &Value) -> bool {
    project["status"] == "succeeded" || project["status"] == "unchanged"
}

/// A `terraform` on PATH that logs each call (`<module> <TF_WORKSPACE> <args>`) and runs the real
/// one.
fn logging_terraform(real: &Path) -> (tempfile::TempDir, std::path::PathBuf) {
    let bin = tempfile::tempdir().unwrap();
    let log = bin.path().join("calls.log");
    let script = format!(
        "#!/bin/sh\necho \"$(basename \"$PWD\") ${{TF_WORKSPACE:--}} $*\" >> '{}'\nexec '{}' \"$@\"\n",
        log.display(),
        real.display()
    );
    let wrapper = bin.path().join("terraform");
    std::fs::write(&wrapper, script).unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    (bin, log)
}

/// The calls logged since the last look, without `-no-color`, by module in the order each
/// module's came (modules run side by side).
fn calls_since(log: &Path, seen: &mut usize) -> BTreeMap<String, Vec<String>> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<String> = text
        .lines()
        .skip(*seen)
        .map(|l| l.replace(" -no-color", ""))
        .collect();
    *seen += lines.len();
    let mut calls: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in lines {
        let (module, call) = line.split_once(' ').unwrap();
        calls
            .entry(module.to_string())
            .or_default()
            .push(call.to_string());
    }
    calls
}

/// `{module: [call, …]}`.
fn by_module(calls: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
    calls
        .iter()
        .map(|(module, calls)| {
            (
                module.to_string(),
                calls.iter().map(|c| c.to_string()).collect(),
            )
        })
        .collect()
}

#[test]
fn a_deployed_module_costs_one_terraform_process_per_run() {
    let Some(terraform) = common::terraform() else {
        return;
    };
    let m = Modules::new("terraform-local");
    let (bin, log) = logging_terraform(&terraform);
    let path = common::path_with(bin.path());
    let mut seen = 0;
    let run = |args: &[&str]| {
        let (code, report) = m.run_on(&path, args);
        let calls = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(code, 0, "{report:#}\n{calls}");
        report
    };
    let apply = "dev apply -auto-approve -input=false -json";

    // First up: each module is initialized, then applied in the stack's workspace; no
    // `workspace select`, no `workspace new` (the local backend makes it as it writes).
    run(&["up", "--yes"]);
    let init = "- init -input=false";
    assert_eq!(
        calls_since(&log, &mut seen),
        by_module(&[("network", &[init, apply]), ("app", &[init, apply])])
    );
    // Steady state: one process per module and operation.
    run(&["up", "--yes"]);
    assert_eq!(
        calls_since(&log, &mut seen),
        by_module(&[("network", &[apply]), ("app", &[apply])])
    );
    // A preview: one process for the app; the network, whose outputs the app takes, saves its
    // plan and reads its planned outputs from it (docs/commands.md, "Previews with planned
    // values").
    let report = run(&["preview"]);
    let plan = "dev plan -detailed-exitcode -input=false -json";
    let plans = m
        .root()
        .join(".mara/plans")
        .join(report["run_id"].as_str().unwrap());
    let saved = plans.join("network.tfplan").display().to_string();
    let (saving, show) = (
        format!("{plan} -out={saved}"),
        format!("- show -json {saved}"),
    );
    assert_eq!(
        calls_since(&log, &mut seen),
        by_module(&[("network", &[&saving, &show]), ("app", &[plan])])
    );
    run(&["refresh", "--yes"]);
    // The ledger knows the workspaces exist: not selected first.
    let refresh = "dev apply -refresh-only -auto-approve -input=false -json";
    assert_eq!(
        calls_since(&log, &mut seen),
        by_module(&[("network", &[refresh]), ("app", &[refresh])])
    );
    // mara chose the workspace for its own processes: the one a person selected is theirs.
    let shown = std::process::Command::new(&terraform)
        .args(["workspace", "show"])
        .current_dir(m.root().join("network"))
        .env_remove("TF_WORKSPACE")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&shown.stdout).trim(), "default");

    // A module call added to the module: its files changed, so `init` runs first.
    std::fs::create_dir(m.root().join("app/extra")).unwrap();
    std::fs::write(
        m.root().join("app/extra/main.tf"),
        "output \"n\" { value = 1 }\n",
    )
    .unwrap();
    let main = m.root().join("app/main.tf");
    let text = std::fs::read_to_string(&main).unwrap();
    std::fs::write(
        &main,
        format!("{text}\nmodule \"extra\" {{\n  source = \"./extra\"\n}}\n"),
    )
    .unwrap();
    run(&["up", "--yes", "--only", "app"]);
    assert_eq!(
        calls_since(&log, &mut seen),
        by_module(&[("app", &[init, apply])])
    );
    // A module call deeper down, which mara does not look at: Terraform asks for `init`, which
    // runs, and the apply again.
    std::fs::create_dir(m.root().join("app/extra/inner")).unwrap();
    std::fs::write(m.root().join("app/extra/inner/main.tf"), "").unwrap();
    std::fs::write(
        m.root().join("app/extra/main.tf"),
        "output \"n\" { value = 1 }\nmodule \"inner\" {\n  source = \"./inner\"\n}\n",
    )
    .unwrap();
    run(&["up", "--yes", "--only", "app"]);
    assert_eq!(
        calls_since(&log, &mut seen),
        by_module(&[("app", &[apply, init, apply])])
    );
    let report = run(&["destroy", "--yes"]);
    assert!(destroyed(project(&report, "app")), "{report:#}");
    // A destroy looks for the workspace first (`TF_WORKSPACE` would make it again, empty).
    let destroy = "dev destroy -auto-approve -input=false -json";
    let list = "- workspace list";
    assert_eq!(
        calls_since(&log, &mut seen),
        by_module(&[("network", &[list, destroy]), ("app", &[list, destroy])])
    );
    // A workspace deleted outside mara is found missing, not made again.
    run(&["up", "--yes"]);
    calls_since(&log, &mut seen);
    for module in ["network", "app"] {
        let deleted = std::process::Command::new(&terraform)
            .args(["workspace", "delete", "-force", "dev"])
            .current_dir(m.root().join(module))
            .env_remove("TF_WORKSPACE")
            .output()
            .unwrap();
        assert!(deleted.status.success(), "{deleted:?}");
    }
    // Under a `TF_WORKSPACE` of the person's own, which `terraform workspace` refuses.
    let output = m
        .mara()
        .env("PATH", &path)
        .env("TF_WORKSPACE", "theirs")
        .args(["--output", "json", "destroy", "--yes"])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(project(&report, "app")["status"], "skipped", "{report:#}");
    assert!(
        project(&report, "app")["reason"]
            .as_str()
            .unwrap()
            .contains("does not exist here")
    );
    assert!(!m.root().join("app/terraform.tfstate.d/dev").exists());
}

#[test]
fn a_module_preview_says_which_outputs_change_and_plans_the_app_with_them() {
    if common::terraform().is_none() {
        return;
    }
    let m = Modules::new("terraform-local");
    // Nothing deployed: the network's plan knows the outputs the app takes, and the app is
    // previewed with them rather than waiting.
    let (code, report) = m.run(&["preview"]);
    let network = project(&report, "network");
    // Terraform before 1.1 names no planned output actions: nothing to go by.
    if network.get("changed_outputs").is_none() {
        eprintln!(
            "skipped: this Terraform names no planned output actions (before 1.1): {report:#}"
        );
        return;
    }
    assert_eq!(code, 0, "{report:#}");
    let app = project(&report, "app");
    assert_eq!(app["status"], "succeeded", "{report:#}");
    assert_eq!(app["planned_with"], "projected", "{report:#}");
    assert_eq!(
        app["projected"],
        serde_json::json!(["network:network_name", "network:subnets"])
    );

    let (code, report) = m.run(&["up", "--yes"]);
    assert_eq!(code, 0, "{report:#}");
    m.edit_config("network:name: mara", "network:name: other");
    let (code, report) = m.run(&["preview"]);
    assert_eq!(code, 0, "{report:#}");
    let network = project(&report, "network");
    let changed: Vec<&str> = network["changed_outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap())
        .collect();
    assert!(changed.contains(&"network_name"), "{report:#}");
    assert!(!changed.contains(&"cidr"), "{report:#}");
    // The app is previewed with the name the network plans: its own url changes with it, and
    // its preview is not stale.
    let app = project(&report, "app");
    assert_eq!(
        app["projected"],
        serde_json::json!(["network:network_name"])
    );
    assert_eq!(
        app["changed_outputs"],
        serde_json::json!(["url"]),
        "{report:#}"
    );
    assert!(app.get("stale").is_none(), "{report:#}");
    // --diff names each output that changes, under Terraform's own count.
    let output = m.mara().args(["preview", "--diff"]).output().unwrap();
    let text = common::stdout(&output);
    assert!(
        text.contains("[network] Outputs: 1 to change\n[network]     ~ network_name\n"),
        "{text}"
    );
}

#[test]
fn a_destroy_of_modules_destroyed_already_is_done_once_the_run_finds_none() {
    // Terraform modules are not asked before the run: it finds out as it goes, and then knows
    // the stack's last destroy was an earlier run, not itself.
    if common::terraform().is_none() {
        return;
    }
    let m = Modules::new("terraform-local");
    for args in [&["up", "--yes"][..], &["destroy", "--yes"]] {
        let (code, report) = m.run(args);
        assert_eq!(code, 0, "{args:?}: {report:#}");
    }
    // The workspaces deleted by hand (`terraform workspace delete`): no module has the stack.
    for module in ["network", "app"] {
        std::fs::remove_dir_all(m.root().join(module).join("terraform.tfstate.d/dev")).unwrap();
    }
    let again = m.mara().args(["destroy", "--yes"]).output().unwrap();
    assert!(again.status.success(), "{}", common::stderr(&again));
    assert!(
        common::stdout(&again).contains("Stack dev was destroyed already, by run "),
        "{}",
        common::stdout(&again)
    );
}

/// A module that prints its password as it provisions (a careless script) and hands it on in an
/// output, the password given as `TF_VAR_db_password` in the environment file.
const DB: &str = r#"terraform {
  backend "local" {}
}
variable "db_password" {
  type = string
}
variable "db_user" {
  type = string
}
resource "terraform_data" "db" {
  input = var.db_user
  provisioner "local-exec" {
    command = "echo \"connecting as $USER_NAME with $PASSWORD\""
    environment = {
      USER_NAME = var.db_user
      PASSWORD  = var.db_password
    }
  }
}
output "dsn" {
  value = "postgres://${var.db_user}:${var.db_password}@db/app"
}
output "user" {
  value = var.db_user
}
"#;

#[test]
fn a_module_s_secret_in_the_environment_file_is_redacted() {
    let Some(_) = common::terraform() else { return };
    let password = "Zq7-db-password-leak-check";
    let w = common::Workspace::new(&[
        ("mara.toml", "provider = \"db\"\nengine = \"terraform\"\n"),
        (
            "providers/db.toml",
            "description = \"A database\"\n\n[[project]]\npath = \"db\"\n",
        ),
        (
            "config/pulumi/environment",
            &format!("PULUMI_STACK=dev\nTF_VAR_db_password={password}\nTF_VAR_db_user=app-owner\n"),
        ),
        (
            "config/pulumi/Pulumi.dev.yaml",
            "config:\n  kubernetes:infra_type: db\n",
        ),
        ("db/main.tf", DB),
    ]);
    let mara = || {
        let mut cmd = w.mara();
        cmd.env("HOME", w.path().join("home"))
            .env_remove("TF_WORKSPACE")
            .env_remove("TF_DATA_DIR");
        cmd
    };
    let output = mara()
        .args(["up", "--yes", "--report", "r.json", "--junit", "r.xml"])
        .output()
        .unwrap();
    let said = common::stdout(&output) + &common::stderr(&output);
    assert!(output.status.success(), "{said}");
    // Provisioned, and said: with the password hidden, and the user (no secret) shown.
    assert!(
        said.contains("connecting as app-owner with [secret]"),
        "{said}"
    );
    let mut places = vec![("the terminal".to_string(), said)];
    for (path, text) in common::tree(w.path()) {
        let path = path.display().to_string();
        // Terraform's own state holds the module's values, as it always does.
        if path.starts_with(".mara/") || path.starts_with("r.") {
            places.push((
                path,
                String::from_utf8_lossy(&text.unwrap_or_default()).into_owned(),
            ));
        }
    }
    assert!(places.iter().any(|(p, _)| p.ends_with("db.log")), "a log");
    for (place, text) in &places {
        assert!(!text.contains(password), "in {place}: {text}");
    }
    let output = mara().args(["output", "db"]).output().unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let shown: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(shown["dsn"], "postgres://app-owner:[secret]@db/app");
    assert_eq!(shown["user"], "app-owner");
}
