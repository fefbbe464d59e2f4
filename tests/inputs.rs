//! Outputs wired as inputs (docs/formats.md, "Inputs"), with the real `terraform`: a chain of
//! three modules, each taking the one before's outputs through `[project.inputs]`; an output once
//! secret that its code makes nonsensitive, secret still wherever it goes.

mod common;

use serde_json::Value;

use common::{Workspace, project};

const PROVIDER: &str = r#"description = "Three modules in a chain"

[[project]]
path = "base"
stage = "infrastructure"

[[project]]
path = "middle"
stage = "infrastructure"
[project.inputs]
prefix = "base:prefix"
token = "base:token"
stamp = "base:stamp"

[[project]]
path = "top"
[project.inputs]
name = "middle:name"

[[project]]
path = "reader"
up = '''printf '%s\n' "$MARA_INPUT_CREDS" | sed 's/.*"pass":"\([^"]*\)".*/pass=\1/' '''
destroy = "true"
[project.inputs]
creds = "base:creds"
"#;

/// `base` says its prefix from the configuration, a sensitive token, and a stamp known only once
/// applied when its epoch changes; `middle` makes a name of the prefix, checks the token and
/// says the stamp; `top` says the name.
const BASE: &str = r#"terraform {
  backend "local" {}
}
variable "prefix" {
  type = string
}
variable "epoch" {
  type    = string
  default = "1"
}
output "stamp" {
  # Known only once applied after the first epoch (timestamp() is: Terraform 1.0 has no
  # terraform_data, and this needs no provider).
  value = var.epoch == "1" ? "stamp-1" : "stamp-${timestamp()}"
}
output "prefix" {
  value = var.prefix
}
output "token" {
  value     = "t0k3n-${var.prefix}-s3cr3t"
  sensitive = true
}
output "creds" {
  value     = { user = "admin", pass = "p4ss-s3cr3t" }
  sensitive = true
}
"#;

const MIDDLE: &str = r#"terraform {
  backend "local" {}
}
variable "prefix" {
  type = string
}
variable "token" {
  type = string
}
variable "stamp" {
  type = string
}
output "stamp_seen" {
  value = var.stamp
}
output "name" {
  value = "${var.prefix}-middle"
}
output "token_ok" {
  value = var.token == "t0k3n-${var.prefix}-s3cr3t"
}
output "token_echo" {
  value = var.token
}
"#;

const TOP: &str = r#"terraform {
  backend "local" {}
}
variable "name" {
  type = string
}
output "said" {
  value = "top of ${var.name}"
}
"#;

fn chain() -> Option<Workspace> {
    common::terraform()?;
    Some(Workspace::new(&[
        (
            "mara.toml",
            "provider = \"chain\"\nengine = \"terraform\"\n",
        ),
        ("providers/chain.toml", PROVIDER),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        (
            "config/pulumi/Pulumi.dev.yaml",
            "config:\n  kubernetes:infra_type: chain\n  base:prefix: one\n",
        ),
        ("base/main.tf", BASE),
        ("middle/main.tf", MIDDLE),
        ("top/main.tf", TOP),
    ]))
}

fn mara(w: &Workspace) -> assert_cmd::Command {
    let mut cmd = w.mara();
    cmd.env("HOME", w.path().join("home"))
        .env_remove("TF_WORKSPACE")
        .env_remove("TF_DATA_DIR");
    cmd
}

fn run(w: &Workspace, args: &[&str]) -> (i32, Value) {
    common::json_report(mara(w), args)
}

/// A module's outputs, as `terraform output -json` gives them (`{}` when it has none).
fn outputs_of(w: &Workspace, module: &str) -> Value {
    let output = std::process::Command::new(common::terraform().unwrap())
        .args(["output", "-json"])
        .current_dir(w.path().join(module))
        .env("TF_WORKSPACE", "dev")
        .output()
        .unwrap();
    let all: Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    let plain = all.as_object().into_iter().flatten();
    Value::Object(
        plain
            .map(|(k, v)| (k.clone(), v["value"].clone()))
            .collect(),
    )
}

/// Everything mara wrote that a secret must never reach: its ledger, its logs, its reports.
fn written_by_mara(w: &Workspace) -> String {
    let mut text = String::new();
    let mut stack = vec![w.path().join(".mara")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                text.push_str(&String::from_utf8_lossy(&std::fs::read(&path).unwrap()));
            }
        }
    }
    text
}

#[test]
fn each_module_gets_the_outputs_before_it_as_its_up_left_them() {
    let Some(w) = chain() else { return };
    let output = mara(&w).args(["up", "--yes"]).output().unwrap();
    let shown = format!("{}{}", common::stdout(&output), common::stderr(&output));
    assert_eq!(output.status.code(), Some(0), "{shown}");
    assert_eq!(outputs_of(&w, "middle")["name"], "one-middle");
    assert_eq!(outputs_of(&w, "middle")["token_ok"], true);
    assert_eq!(outputs_of(&w, "top")["said"], "top of one-middle");
    // The secret reached middle (its check holds), and nothing mara shows or keeps: its echo
    // in middle's own output is redacted, and the ledger keeps the token's name alone.
    assert!(!shown.contains("s3cr3t"), "{shown}");
    let kept = written_by_mara(&w);
    assert!(
        kept.contains(
            r#"{"values":{"prefix":"one","stamp":"stamp-1"},"secret":["creds","token"]}"#
        )
    );
    // A part of a structured secret is as secret as the whole.
    assert!(shown.contains("[reader] pass=[secret]\n"), "{shown}");
    assert!(!kept.contains("s3cr3t"));

    // A configuration change moves base's output: its dependents get the new value.
    let config = w.path().join("config/pulumi/Pulumi.dev.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("base:prefix: one", "base:prefix: two"),
    )
    .unwrap();
    let (code, report) = run(&w, &["up", "--yes"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(outputs_of(&w, "top")["said"], "top of two-middle");

    // The values come from the ledger, not base's state: with base's state gone, top alone
    // is deployed as it was recorded.
    std::fs::remove_dir_all(w.path().join("base/terraform.tfstate.d")).unwrap();
    let (code, report) = run(&w, &["up", "--yes", "--only", "top"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(project(&report, "top")["status"], "unchanged", "{report:#}");
    // The secret is not in the ledger: middle alone needs it from base's engine, which has
    // none now: it cannot run, and nothing does (exit 3).
    let output = mara(&w)
        .args(["up", "--yes", "--only", "middle"])
        .output()
        .unwrap();
    let said = common::stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{said}");
    assert!(
        said.contains(
            "providers/chain.toml:12: project `middle`, input `token`: takes base:token, which has no value: base keeps `token` secret: the ledger holds no secret, and its engine did not give it"
        ),
        "{said}"
    );
}

#[test]
fn an_input_without_a_value_stops_its_project_and_says_why() {
    let Some(w) = chain() else { return };
    // Nothing deployed: middle alone has nothing to take; nothing runs, nothing is recorded.
    let output = mara(&w)
        .args(["up", "--yes", "--only", "middle"])
        .output()
        .unwrap();
    let said = common::stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{said}");
    assert!(
        said.contains(
            "providers/chain.toml:11: project `middle`, input `prefix`: takes base:prefix, which has no value: base has not been deployed on this stack"
        ),
        "{said}"
    );
    assert!(
        said.contains(
            "hint: deploy base first (`mara up --only base`), or with it (`mara up --only middle --with-dependencies`)"
        ),
        "{said}"
    );
    assert!(!w.path().join("middle/.terraform").exists());
    assert!(
        !w.path().join(".mara/ledger.db").exists() || {
            let history = mara(&w)
                .args(["--output", "json", "history"])
                .output()
                .unwrap();
            !common::stdout(&history).contains("middle")
        }
    );

    // A preview of everything: base's plan knows what middle takes, and middle is previewed
    // with it, and top with middle's, though nothing is deployed yet.
    let (code, report) = run(&w, &["preview"]);
    assert_eq!(code, 0, "{report:#}");
    let middle = project(&report, "middle");
    assert_eq!(middle["status"], "succeeded", "{report:#}");
    assert_eq!(middle["planned_with"], "projected", "{report:#}");
    assert_eq!(
        middle["projected"],
        serde_json::json!(["base:prefix", "base:stamp", "base:token"])
    );
    assert_eq!(project(&report, "top")["planned_with"], "projected");

    // An output its upstream does not have: the upstream applies, the dependent fails before
    // its engine runs, naming what there is; what follows it is skipped.
    let provider = w.path().join("providers/chain.toml");
    let text = std::fs::read_to_string(&provider).unwrap();
    std::fs::write(&provider, text.replace("base:prefix", "base:prefx")).unwrap();
    let (code, report) = run(&w, &["up", "--yes"]);
    assert_eq!(code, 1, "{report:#}");
    let base = project(&report, "base")["status"].as_str().unwrap();
    assert!(matches!(base, "succeeded" | "unchanged"), "{report:#}");
    let middle = project(&report, "middle");
    assert_eq!(middle["status"], "failed", "{report:#}");
    assert_eq!(
        middle["reason"],
        "input base:prefx has no value: base has no output `prefx` after its up (it has creds, prefix, stamp, token)"
    );
    assert_eq!(project(&report, "top")["status"], "skipped");
    // Its engine did not run: no state of its own.
    assert!(
        !w.path()
            .join("middle/terraform.tfstate.d/dev/terraform.tfstate")
            .exists()
    );
}

/// A workspace of provider `provider` (its file `provider_toml`) with a Pulumi project `cluster`
/// (`cluster_yaml`) on the stand-in, and `mara` there with the stand-in first on PATH.
fn on_the_stand_in(
    provider: &str,
    provider_toml: &str,
    cluster_yaml: &str,
) -> (Workspace, tempfile::TempDir) {
    let w = Workspace::new(&[
        ("mara.toml", &format!("provider = \"{provider}\"\n")),
        (&format!("providers/{provider}.toml"), provider_toml),
        ("cluster/Pulumi.yaml", cluster_yaml),
        (
            "config/pulumi/environment",
            "PULUMI_STACK=dev\nPULUMI_BACKEND_URL=file://.mara/pulumi-state\nPULUMI_CONFIG_PASSPHRASE=test\n",
        ),
        (
            "config/pulumi/Pulumi.dev.yaml",
            &format!("config:\n  kubernetes:infra_type: {provider}\n  cluster:node_count: 3\n"),
        ),
    ]);
    (w, common::stand_in_bin())
}

fn mara_on(w: &Workspace, bin: &tempfile::TempDir) -> assert_cmd::Command {
    let mut cmd = w.mara();
    cmd.env("PATH", common::path_with(bin.path()))
        .env("HOME", w.path().join("home"));
    cmd
}

#[test]
fn validate_refuses_inputs_that_cannot_be() {
    let Some(w) = chain() else { return };
    let provider = w.path().join("providers/chain.toml");
    let refused = |text: String, expected: &[&str]| {
        std::fs::write(&provider, &text).unwrap();
        let output = mara(&w).arg("validate").output().unwrap();
        let said = format!("{}{}", common::stdout(&output), common::stderr(&output));
        assert_eq!(output.status.code(), Some(3), "{said}");
        for line in expected {
            assert!(said.contains(line), "{line}\n---\n{said}");
        }
    };
    refused(
        PROVIDER.replace("base:prefix", "bsae:prefix"),
        &[
            "providers/chain.toml:11: project `middle`, input `prefix`: takes `bsae:prefix`, but `bsae` is not a project here",
            "hint: did you mean `base`?",
        ],
    );
    refused(
        PROVIDER
            .replace("prefix = ", "2prefix = ")
            .replace("token = ", "count = "),
        &[
            "input `2prefix` is not an input's name: an ASCII letter or `_`",
            "input `count` is a name Terraform reserves",
        ],
    );
    refused(
        PROVIDER.replace("\"base:prefix\"", "\"prefix\""),
        &["input `prefix` = \"prefix\" is not `project:output`"],
    );
    refused(
        format!("{PROVIDER}net-name = \"middle:name\"\nnet_name = \"middle:name\"\n"),
        &["inputs `net-name` and `net_name` would both be $MARA_INPUT_NET_NAME"],
    );
    // Manifests leave no outputs to take.
    refused(
        format!("{PROVIDER}\n[[project]]\npath = \"manifests\"\nengine = \"kubectl\"\n")
            .replace("name = \"middle:name\"", "name = \"manifests:name\""),
        &[
            "project `top`, input `name` takes manifests:name, but manifests is applied by kubectl, which leaves no outputs",
        ],
    );
    refused(
        PROVIDER
            .replace("\"base:prefix\"", "7")
            .replace("\"base:token\"", "\"base:to ken\""),
        &[
            "providers/chain.toml:11: project `middle`: input `prefix` is integer 7: it is a string, \"project:output\"",
            "input `token` = \"base:to ken\" is not `project:output`",
        ],
    );
    // A cycle through inputs names the inputs that close it.
    let cyclic = PROVIDER.replace(
        "path = \"base\"\nstage = \"infrastructure\"\n",
        "path = \"base\"\nstage = \"infrastructure\"\n[project.inputs]\nback = \"middle:name\"\n",
    );
    refused(
        cyclic,
        &[
            "the projects depend on each other in a cycle: base -> middle -> base",
            "an input takes an output of the project it comes before",
        ],
    );
}

#[test]
fn a_command_project_gets_its_inputs_as_mara_input_variables() {
    let w = Workspace::new(&[
        ("mara.toml", "provider = \"cmds\"\n"),
        (
            "providers/cmds.toml",
            r#"description = "Two commands"

[[project]]
path = "maker"
stage = "infrastructure"
up = "printf '{\"url\": \"https://x.test\", \"port\": 8443}' > \"$MARA_OUTPUTS\""
destroy = "true"

[[project]]
path = "user"
up = "echo \"got $MARA_INPUT_SERVICE_URL:$MARA_INPUT_PORT\""
destroy = "echo \"gone $MARA_INPUT_SERVICE_URL\""
[project.inputs]
service-url = "maker:url"
port = "maker:port"
"#,
        ),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        (
            "config/pulumi/Pulumi.dev.yaml",
            "config:\n  kubernetes:infra_type: cmds\n",
        ),
    ]);
    let output = w.mara().args(["up", "--yes"]).output().unwrap();
    let shown = common::stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
    assert!(
        shown.contains("[user] got https://x.test:8443\n"),
        "{shown}"
    );
    // `--dry-run` says where each input comes from.
    let output = w.mara().args(["up", "--dry-run"]).output().unwrap();
    assert!(
        common::stdout(&output).contains(
            "# user (in .)\n#   MARA_INPUT_PORT from maker:port\n#   MARA_INPUT_SERVICE_URL from maker:url\n"
        ),
        "{}",
        common::stdout(&output)
    );
    // The maker destroyed alone, the user standing on it is destroyed with what it was
    // deployed with; an up of the user alone has nothing to deploy on.
    let output = (w.mara())
        .args(["destroy", "--yes", "--only", "maker", "--orphan-dependents"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
    let output = w
        .mara()
        .args(["up", "--yes", "--only", "user"])
        .output()
        .unwrap();
    let said = common::stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{said}");
    assert!(
        said.contains(
            "takes maker:url, which has no value: maker has not been deployed on this stack"
        ),
        "{said}"
    );
    let output = w
        .mara()
        .args(["destroy", "--yes", "--only", "user"])
        .output()
        .unwrap();
    let shown = common::stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
    assert!(shown.contains("[user] gone https://x.test\n"), "{shown}");

    // A maker whose up no longer writes the output: the user fails on it, never on the value
    // an earlier up recorded.
    let provider = w.path().join("providers/cmds.toml");
    let text = std::fs::read_to_string(&provider).unwrap();
    let (before, after) = text.split_once("up = \"printf").unwrap();
    let after = after.split_once('\n').unwrap().1;
    std::fs::write(
        &provider,
        format!("{before}up = \"echo no outputs now\"\n{after}"),
    )
    .unwrap();
    let (code, report) = common::json_report(w.mara(), &["up", "--yes"]);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(
        project(&report, "user")["reason"],
        "input maker:port has no value: maker has no output `port` after its up (it has none); input maker:url has no value: maker has no output `url` after its up (it has none)"
    );
}

#[test]
fn a_preview_plans_each_module_with_the_values_the_update_before_it_plans() {
    let Some(w) = chain() else { return };
    let (code, report) = run(&w, &["up", "--yes"]);
    assert_eq!(code, 0, "{report:#}");
    let config = w.path().join("config/pulumi/Pulumi.dev.yaml");
    let edit = |from: &str, to: &str| {
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, text.replace(from, to)).unwrap();
    };

    // The prefix changes: middle is previewed with base's planned prefix and token, and top
    // with middle's planned name, which changes with them; neither preview is stale.
    edit("base:prefix: one", "base:prefix: two");
    let (code, report) = run(&w, &["preview"]);
    assert_eq!(code, 0, "{report:#}");
    let middle = project(&report, "middle");
    assert_eq!(middle["planned_with"], "projected", "{report:#}");
    assert_eq!(
        middle["projected"],
        serde_json::json!(["base:prefix", "base:token"])
    );
    assert!(middle.get("stale").is_none(), "{report:#}");
    let top = project(&report, "top");
    assert_eq!(top["planned_with"], "projected", "{report:#}");
    // Terraform before 1.1 names no planned output actions: nothing to go by.
    match top.get("changed_outputs") {
        Some(changed) => assert_eq!(changed, &serde_json::json!(["said"]), "{report:#}"),
        None => eprintln!("skipped: this Terraform names no planned output actions (before 1.1)"),
    }
    let output = mara(&w).arg("preview").output().unwrap();
    let shown = common::stdout(&output);
    let row = |path: &str| {
        shown
            .lines()
            .find(|l| l.starts_with(&format!("{path} ")))
            .unwrap_or("")
    };
    assert!(row("middle").ends_with(" (planned inputs)"), "{shown}");
    assert!(
        shown.contains(
            "Planned inputs: previewed with the values an update before them plans\n  middle was planned with base:prefix, base:token as they will be after base's update\n  top was planned with middle:name as it will be after middle's update\n"
        ),
        "{shown}"
    );
    assert!(!shown.contains("s3cr3t"), "{shown}");
    // The plans it saved to read them are gone with the run.
    let plans = w.path().join(".mara/plans");
    assert!(std::fs::read_dir(plans).unwrap().next().is_none());

    // The epoch changes: base's stamp is known only once applied; middle is not previewed on
    // a guess.
    edit("base:prefix: two", "base:prefix: two\n  base:epoch: \"2\"");
    let (code, report) = run(&w, &["preview"]);
    assert_eq!(code, 0, "{report:#}");
    let middle = project(&report, "middle");
    assert_eq!(middle["planned_with"], "deferred", "{report:#}");
    assert_eq!(middle["reason"], "waits on base:stamp, known after apply");
    assert_eq!(project(&report, "top")["status"], "waiting", "{report:#}");
    // Applied, middle gets the stamp base's apply made.
    let (code, report) = run(&w, &["up", "--yes"]);
    assert_eq!(code, 0, "{report:#}");
    let stamp = outputs_of(&w, "base")["stamp"].clone();
    assert!(stamp.as_str().unwrap().starts_with("stamp-20"), "{stamp}");
    assert_eq!(outputs_of(&w, "middle")["stamp_seen"], stamp);
    assert_eq!(outputs_of(&w, "top")["said"], "top of two-middle");
}

/// A Pulumi project (the stand-in) whose outputs a command project takes: its preview digest's
/// new outputs are what the command is previewed with.
#[test]
fn a_pulumi_preview_s_new_outputs_are_what_its_dependents_are_previewed_with() {
    let (w, bin) = on_the_stand_in(
        "mixed",
        r#"description = "A Pulumi cluster and a command that takes its size"

[[project]]
path = "cluster"
stage = "infrastructure"

[[project]]
path = "app"
up = "echo \"deployed on $MARA_INPUT_NODES nodes\""
preview = "echo \"would deploy on $MARA_INPUT_NODES nodes of $MARA_INPUT_CLUSTER\""
destroy = "true"
[project.inputs]
nodes = "cluster:node_count"
cluster = "cluster:cluster_name"
"#,
        "name: cluster\nruntime: yaml\nconfig:\n  node_count:\n    type: integer\n    default: 3\noutputs:\n  node_count: ${node_count}\n  cluster_name: small\n",
    );
    let mara = || mara_on(&w, &bin);
    // Nothing deployed: the cluster's preview plans both outputs; the app is previewed with them.
    let output = mara().arg("preview").output().unwrap();
    let shown = common::stdout(&output);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{shown}{}",
        common::stderr(&output)
    );
    assert!(
        shown.contains("[app] would deploy on 3 nodes of small\n"),
        "{shown}"
    );
    let output = mara().args(["up", "--yes"]).output().unwrap();
    assert!(
        common::stdout(&output).contains("[app] deployed on 3 nodes\n"),
        "{}",
        common::stdout(&output)
    );
    // The size changes: the app is previewed with the new one, and says it was.
    let config = w.path().join("config/pulumi/Pulumi.dev.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("node_count: 3", "node_count: 5")).unwrap();
    let output = mara().arg("preview").output().unwrap();
    let shown = common::stdout(&output);
    assert!(
        shown.contains("[app] would deploy on 5 nodes of small\n"),
        "{shown}"
    );
    assert!(
        shown.contains(
            "  app was planned with cluster:node_count as it will be after cluster's update\n"
        ),
        "{shown}"
    );
    assert!(!shown.contains("Stale previews"), "{shown}");
}

/// `preview --save-plans DIR` then `up --plans DIR` (docs/commands.md, "Saved plans").
/// The serial of `module`'s state on the stack (0: it has none).
fn serial(w: &Workspace, module: &str) -> u64 {
    let file = w
        .path()
        .join(module)
        .join("terraform.tfstate.d/dev/terraform.tfstate");
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let state: Value = serde_json::from_str(&text).unwrap_or_default();
    state["serial"].as_u64().unwrap_or(0)
}

/// `up --plans` refused before anything ran: exit 4, no module's state changed, what it said.
fn refused_up_front(w: &Workspace, args: &[&str], modules: &[&str]) -> String {
    let before: Vec<u64> = modules.iter().map(|m| serial(w, m)).collect();
    let output = mara(w).args(args).output().unwrap();
    let said = common::stderr(&output);
    assert_eq!(output.status.code(), Some(4), "{said}");
    let after: Vec<u64> = modules.iter().map(|m| serial(w, m)).collect();
    assert_eq!(before, after, "something was applied: {said}");
    said
}

#[test]
fn saved_plans_are_applied_as_approved_or_refused_when_they_no_longer_hold() {
    let Some(w) = chain() else { return };
    let (code, report) = run(&w, &["up", "--yes"]);
    assert_eq!(code, 0, "{report:#}");
    let config = w.path().join("config/pulumi/Pulumi.dev.yaml");
    let edit = |from: &str, to: &str| {
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, text.replace(from, to)).unwrap();
    };
    let plans = w.path().join("plans");
    let save = |dir: &str| {
        let (code, report) = run(&w, &["preview", "--save-plans", dir]);
        assert_eq!(code, 0, "{report:#}");
    };
    let modules = ["base", "middle", "top"];

    // Saved, then applied as approved: each module's own plan, its inputs as planned.
    edit("base:prefix: one", "base:prefix: two");
    save("plans/a");
    let manifest = std::fs::read_to_string(plans.join("a/mara-plans.json")).unwrap();
    let manifest: Value = serde_json::from_str(&manifest).unwrap();
    assert_eq!(manifest["stack"], "dev");
    assert_eq!(manifest["version"], 2);
    let base = &manifest["projects"][0];
    assert_eq!(base["config"], serde_json::json!({"base:prefix": "two"}));
    assert_eq!(base["state"]["serial"], serial(&w, "base"), "{manifest:#}");
    assert!(base["code"].as_str().unwrap().starts_with("sha256:"));
    let middle = &manifest["projects"][1];
    assert_eq!(middle["plan"], "middle.tfplan");
    assert_eq!(middle["planned_with"], "projected");
    assert_eq!(middle["inputs"]["prefix"], "two");
    // A secret input is kept as its digest, never in clear.
    assert!(
        middle["inputs"]["token"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert!(!manifest.to_string().contains("s3cr3t"));
    // The configuration moves on after the preview, outside what the modules read: what runs
    // is what was approved.
    edit("base:prefix: two", "base:prefix: two\n  elsewhere:key: x");
    let (code, report) = run(&w, &["up", "--plans", "plans/a"]);
    assert_eq!(code, 0, "{report:#}");
    for path in modules {
        assert_eq!(
            project(&report, path)["approval"],
            "applied as approved",
            "{report:#}"
        );
    }
    assert_eq!(outputs_of(&w, "top")["said"], "top of two-middle");
    let history = (mara(&w)
        .args(["--output", "json", "history", "--limit", "1"])
        .output())
    .unwrap();
    assert!(
        common::stdout(&history).contains("applied as approved"),
        "{}",
        common::stdout(&history)
    );

    // Saved, then a module's configuration changes: refused before anything is applied, the
    // change said with its values.
    edit("base:prefix: two", "base:prefix: three");
    save("plans/b");
    edit("base:prefix: three", "base:prefix: four");
    let said = refused_up_front(&w, &["up", "--plans", "plans/b"], &modules);
    assert!(
        said.contains("base: the approved plan no longer holds: the configuration changed since it was planned: base:prefix three → four"),
        "{said}"
    );
    assert_eq!(outputs_of(&w, "top")["said"], "top of two-middle");

    // The configuration as planned again, and base applied outside: refused before anything
    // is applied, its state named.
    edit("base:prefix: four", "base:prefix: three");
    let outside = std::process::Command::new(common::terraform().unwrap())
        .args(["apply", "-auto-approve", "-input=false"])
        .current_dir(w.path().join("base"))
        .env("TF_WORKSPACE", "dev")
        .env("TF_VAR_prefix", "outside")
        .output()
        .unwrap();
    assert!(outside.status.success(), "{outside:?}");
    let said = refused_up_front(&w, &["up", "--plans", "plans/b"], &modules);
    let now = serial(&w, "base");
    assert!(
        said.contains(&format!(
            "base: the approved plan no longer holds: its state changed since it was planned (serial {}, now {now}): another apply, or this plan applied already",
            now - 1
        )),
        "{said}"
    );
    assert!(said.contains("hint: nothing was applied"), "{said}");

    // A plan for another stack, or a directory without plans: nothing runs.
    let output = mara(&w)
        .args(["up", "--plans", "plans/b", "--stack", "prod"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(4), "{}", common::stderr(&output));
    assert!(
        common::stderr(&output)
            .contains("were made for stack `dev`, and this run is on stack `prod`"),
        "{}",
        common::stderr(&output)
    );
    let output = mara(&w)
        .args(["up", "--plans", "nowhere"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", common::stderr(&output));
    assert!(
        common::stderr(&output).contains("nowhere/mara-plans.json"),
        "{}",
        common::stderr(&output)
    );

    // An input known only after apply: the dependent was never previewed, and is refused
    // before anything is applied — unless --replan lets the plan made as its turn comes apply.
    let (code, report) = run(&w, &["up", "--yes"]);
    assert_eq!(code, 0, "{report:#}");
    edit(
        "base:prefix: three",
        "base:prefix: three\n  base:epoch: \"2\"",
    );
    save("plans/c");
    let said = refused_up_front(&w, &["up", "--plans", "plans/c"], &modules);
    assert!(
        said.contains("middle: the approved plan no longer holds: it was not previewed (it waited on values known only once applied)"),
        "{said}"
    );
    assert!(
        said.contains("top: the approved plan no longer holds: it was not previewed"),
        "{said}"
    );
    let (code, report) = run(&w, &["up", "--plans", "plans/c", "--replan"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(
        project(&report, "base")["approval"],
        "applied as approved",
        "{report:#}"
    );
    assert_eq!(
        project(&report, "middle")["approval"],
        "applied as changed",
        "{report:#}"
    );
    let stamp = outputs_of(&w, "base")["stamp"].clone();
    assert_eq!(outputs_of(&w, "middle")["stamp_seen"], stamp);
}

/// The issue's release: a chain a → b → c and an unrelated e, saved and reviewed. Anything that
/// moved since — e applied outside, the configuration of a, c's code — refuses the release
/// before any of it is applied.
#[test]
fn up_plans_checks_every_plan_before_it_applies_any() {
    if common::terraform().is_none() {
        return;
    }
    let module = |input: Option<&str>| {
        let variable = match input {
            Some(_) => "variable \"up\" {\n  type = string\n}\n",
            None => "variable \"n\" {\n  type    = string\n  default = \"1\"\n}\n",
        };
        let value = match input {
            Some(_) => "\"${var.up}+\"",
            None => "var.n",
        };
        format!(
            "terraform {{\n  backend \"local\" {{}}\n}}\n{variable}output \"x\" {{\n  value = {value}\n}}\n"
        )
    };
    let w = Workspace::new(&[
        (
            "mara.toml",
            "provider = \"release\"\nengine = \"terraform\"\n",
        ),
        (
            "providers/release.toml",
            "description = \"a → b → c, and e\"\n[[project]]\npath = \"a\"\n[[project]]\npath = \"b\"\n[project.inputs]\nup = \"a:x\"\n[[project]]\npath = \"c\"\n[project.inputs]\nup = \"b:x\"\n[[project]]\npath = \"e\"\n",
        ),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        (
            "config/pulumi/Pulumi.dev.yaml",
            "config:\n  kubernetes:infra_type: release\n  a:n: \"1\"\n",
        ),
        ("a/main.tf", &module(None)),
        ("b/main.tf", &module(Some("a"))),
        ("c/main.tf", &module(Some("b"))),
        ("e/main.tf", &module(None)),
    ]);
    let all = ["a", "b", "c", "e"];
    let (code, report) = run(&w, &["up", "--yes"]);
    assert_eq!(code, 0, "{report:#}");
    let config = w.path().join("config/pulumi/Pulumi.dev.yaml");
    let set_n = |n: &str| {
        let text = std::fs::read_to_string(&config).unwrap();
        let text = (text.lines())
            .map(|l| match l.trim_start().starts_with("a:n:") {
                true => format!("  a:n: \"{n}\""),
                false => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(&config, text + "\n").unwrap();
    };
    set_n("2");
    let (code, report) = run(&w, &["preview", "--save-plans", "release"]);
    assert_eq!(code, 0, "{report:#}");

    // e applied outside after the review: nothing of the release is applied.
    let outside = std::process::Command::new(common::terraform().unwrap())
        .args(["apply", "-auto-approve", "-input=false"])
        .current_dir(w.path().join("e"))
        .env("TF_WORKSPACE", "dev")
        .env("TF_VAR_n", "by hand")
        .output()
        .unwrap();
    assert!(outside.status.success(), "{outside:?}");
    let said = refused_up_front(&w, &["up", "--plans", "release"], &all);
    assert!(
        said.contains(
            "e: the approved plan no longer holds: its state changed since it was planned"
        ),
        "{said}"
    );
    assert_eq!(outputs_of(&w, "c")["x"], "1++");

    // Saved again; then a's configuration changes (2 → 3), and c's code: both said, nothing
    // applied.
    let (code, report) = run(&w, &["preview", "--save-plans", "release"]);
    assert_eq!(code, 0, "{report:#}");
    set_n("3");
    let code_c = w.path().join("c/main.tf");
    let text = std::fs::read_to_string(&code_c).unwrap();
    std::fs::write(&code_c, format!("{text}# reviewed? no\n")).unwrap();
    let said = refused_up_front(&w, &["up", "--plans", "release"], &all);
    assert!(said.contains("a: the approved plan no longer holds: the configuration changed since it was planned: a:n 2 → 3"), "{said}");
    assert!(
        said.contains(
            "c: the approved plan no longer holds: its code changed since it was planned"
        ),
        "{said}"
    );
    assert_eq!(outputs_of(&w, "a")["x"], "1");

    // As reviewed again: applied, all of it, as approved.
    set_n("2");
    std::fs::write(&code_c, &text).unwrap();
    let (code, report) = run(&w, &["up", "--plans", "release"]);
    assert_eq!(code, 0, "{report:#}");
    for path in all {
        assert_eq!(
            project(&report, path)["approval"],
            "applied as approved",
            "{report:#}"
        );
    }
    assert_eq!(outputs_of(&w, "c")["x"], "2++");
}

/// A Pulumi project's saved plan is its preview's changes: `up --plans` checks a fresh preview
/// against them before it runs `up`.
#[test]
fn a_pulumi_project_applies_only_while_a_fresh_preview_shows_what_was_approved() {
    let (w, bin) = on_the_stand_in(
        "one",
        "description = \"One Pulumi project\"\n\n[[project]]\npath = \"cluster\"\nstage = \"infrastructure\"\n",
        "name: cluster\nruntime: yaml\nconfig:\n  node_count:\n    type: integer\n    default: 3\noutputs:\n  node_count: ${node_count}\n",
    );
    let mara = || mara_on(&w, &bin);
    let run = |args: &[&str]| common::json_report(mara(), args);
    let config = w.path().join("config/pulumi/Pulumi.dev.yaml");
    let size = |n: &str| {
        let text = std::fs::read_to_string(&config).unwrap();
        let text = text.replace("node_count: 3", n).replace("node_count: 5", n);
        std::fs::write(&config, text).unwrap();
    };
    assert_eq!(run(&["up", "--yes"]).0, 0);
    size("node_count: 5");
    assert_eq!(run(&["preview", "--save-plans", "plans"]).0, 0);
    let (code, report) = run(&["up", "--plans", "plans"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(
        project(&report, "cluster")["approval"],
        "applied as approved",
        "{report:#}"
    );

    // The configuration of its namespace changes after the preview: refused before anything
    // runs, with the values — and --replan does not change that: nobody reviewed the change.
    size("node_count: 3");
    assert_eq!(run(&["preview", "--save-plans", "plans"]).0, 0);
    size("node_count: 5");
    for args in [
        &["up", "--plans", "plans"][..],
        &["up", "--plans", "plans", "--replan"],
    ] {
        let output = mara().args(args).output().unwrap();
        let said = common::stderr(&output);
        assert_eq!(output.status.code(), Some(4), "{said}");
        assert!(
            said.contains("cluster: the approved plan no longer holds: the configuration changed since it was planned: cluster:node_count 3 → 5"),
            "{said}"
        );
    }

    // The stack moves instead (applied in between): a fresh preview's changes are not the
    // approved ones, and the project is refused as its turn comes — unless --replan.
    size("node_count: 3");
    assert_eq!(run(&["up", "--yes"]).0, 0);
    let (code, report) = run(&["up", "--plans", "plans"]);
    assert_eq!(code, 4, "{report:#}");
    let reason = project(&report, "cluster")["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reason.starts_with("the approved plan no longer holds: its changes are now"),
        "{reason}"
    );
    let (code, report) = run(&["up", "--plans", "plans", "--replan"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(
        project(&report, "cluster")["approval"],
        "applied as changed",
        "{report:#}"
    );
}

/// An interactive `up` applies what its confirmation showed; a project whose new plan, once the
/// projects before it are applied, is not the approved one is shown and asked about again.
#[test]
fn an_interactive_up_asks_again_when_a_new_plan_is_not_the_approved_one() {
    if common::terraform().is_none() {
        return;
    }
    let w = Workspace::new(&[
        ("mara.toml", "provider = \"asked\"\n"),
        (
            "providers/asked.toml",
            r#"description = "A command whose output a module takes"

[[project]]
path = "maker"
stage = "infrastructure"
up = "printf '{\"v\": \"%s\"}' \"$(cat value.txt)\" > \"$MARA_OUTPUTS\""
destroy = "true"

[[project]]
path = "app"
engine = "terraform"
[project.inputs]
v = "maker:v"
"#,
        ),
        ("value.txt", "a"),
        (
            "app/main.tf",
            "terraform {\n  backend \"local\" {}\n}\nvariable \"v\" {\n  type = string\n}\noutput \"seen\" {\n  value = var.v\n}\n",
        ),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        (
            "config/pulumi/Pulumi.dev.yaml",
            "config:\n  kubernetes:infra_type: asked\n",
        ),
    ]);
    let (code, report) = run(&w, &["up", "--yes"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(outputs_of(&w, "app")["seen"], "a");
    // The maker's next up gives another value than the confirmation's preview used.
    std::fs::write(w.path().join("value.txt"), "b").unwrap();
    let bin = tempfile::tempdir().unwrap();
    let up = |answer: &str| {
        let mut terminal = common::Terminal::start(w.path(), bin.path(), "up");
        terminal.wait_for("Do you want to perform this update?");
        terminal.type_keys("\x1b[A\r"); // yes
        terminal.wait_for("Apply app's new plan?");
        terminal.type_keys(answer);
        terminal.finish()
    };
    let (code, screen) = up("\r"); // no, the default
    assert_eq!(code, 4, "{screen}");
    assert!(
        screen.contains("app: its new plan is not the one you approved"),
        "{screen}"
    );
    assert!(
        screen.contains("its changes are now 1 output, approved no changes; new: update outputs"),
        "{screen}"
    );
    assert!(
        screen.contains("the approved plan no longer holds: its inputs changed (v)"),
        "{screen}"
    );
    assert_eq!(outputs_of(&w, "app")["seen"], "a");
    std::fs::write(w.path().join("value.txt"), "c").unwrap();
    let (code, screen) = up("\x1b[A\r"); // yes
    assert_eq!(code, 0, "{screen}");
    assert!(screen.contains("(applied as changed)"), "{screen}");
    assert_eq!(outputs_of(&w, "app")["seen"], "c");
}

/// What a plans directory holds is private, this preview's alone, and a manifest that names what
/// it cannot vouch for is refused.
#[test]
fn saved_plans_are_private_and_a_manifest_names_only_its_own_plans() {
    use std::os::unix::fs::PermissionsExt;
    let Some(w) = chain() else { return };
    let (code, report) = run(&w, &["up", "--yes"]);
    assert_eq!(code, 0, "{report:#}");
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;

    // A directory mara makes: private, ignored by git, its plans 0600 whatever the umask.
    let dir = w.path().join("plans");
    let (code, report) = run(&w, &["preview", "--save-plans", "plans"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(
        std::fs::read_to_string(dir.join(".gitignore")).unwrap(),
        "*\n"
    );
    for plan in [
        "base.tfplan",
        "middle.tfplan",
        "top.tfplan",
        "mara-plans.json",
    ] {
        assert_eq!(mode(&dir.join(plan)), 0o600, "{plan}");
    }
    // Saved again there: its own plans replaced, nothing else.
    let (code, report) = run(&w, &["preview", "--save-plans", "plans"]);
    assert_eq!(code, 0, "{report:#}");

    // A file of someone else's there: refused by name (exit 2), and nothing touched.
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    let before = common::tree(&dir);
    let output = mara(&w)
        .args(["preview", "--save-plans", "plans"])
        .output()
        .unwrap();
    let said = common::stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(said.contains("plans/notes.txt"), "{said}");
    assert!(
        said.contains("holds an entry that is not one of mara's saved plans"),
        "{said}"
    );
    assert_eq!(common::tree(&dir), before);
    std::fs::remove_file(dir.join("notes.txt")).unwrap();

    // A directory of the person's: its mode kept; one that is not empty nor mara's (the
    // workspace itself) refused, its files and modes as they were.
    let theirs = w.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, report) = run(&w, &["preview", "--save-plans", "theirs"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(mode(&theirs), 0o755);
    assert_eq!(mode(&theirs.join("base.tfplan")), 0o600);
    assert!(!theirs.join(".gitignore").exists());
    let root_mode = mode(w.path());
    let output = mara(&w)
        .args(["preview", "--save-plans", "."])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", common::stderr(&output));
    assert_eq!(mode(w.path()), root_mode);
    assert!(w.path().join("base/main.tf").exists());

    // A manifest edited to name a file outside its directory: nothing runs.
    let file = dir.join("mara-plans.json");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replace("\"base.tfplan\"", "\"../base/main.tf\""),
    )
    .unwrap();
    let output = mara(&w).args(["up", "--plans", "plans"]).output().unwrap();
    let said = common::stderr(&output);
    assert_eq!(output.status.code(), Some(4), "{said}");
    assert!(
        said.contains("base: the manifest names `../base/main.tf`, which is no plan file in"),
        "{said}"
    );
    std::fs::write(&file, text).unwrap();

    // A preview that fails approves nothing: no manifest, no plan kept.
    std::fs::write(w.path().join("top/main.tf"), "this is not HCL {").unwrap();
    let (code, report) = run(&w, &["preview", "--save-plans", "plans"]);
    assert_eq!(code, 1, "{report:#}");
    assert!(!file.exists());
    assert!(!dir.join("base.tfplan").exists());
    assert!(dir.join(".gitignore").exists());
}

/// A dependent that takes an output its upstream's plan removes cannot succeed once that
/// upstream is applied: its preview fails (exit 1), where it used to wait.
#[test]
fn a_preview_fails_a_dependent_whose_input_its_upstream_s_plan_removes() {
    let Some(w) = chain() else { return };
    let (code, report) = run(&w, &["up", "--yes"]);
    assert_eq!(code, 0, "{report:#}");
    let base = w.path().join("base/main.tf");
    let text = std::fs::read_to_string(&base).unwrap();
    std::fs::write(
        &base,
        text.replace("output \"prefix\"", "output \"prefix_renamed\""),
    )
    .unwrap();
    let (code, report) = run(&w, &["preview"]);
    assert_eq!(code, 1, "{report:#}");
    let middle = project(&report, "middle");
    assert_eq!(middle["status"], "failed", "{report:#}");
    assert_eq!(
        middle["reason"],
        "takes base:prefix, which base's plan removes"
    );
    assert_eq!(project(&report, "top")["status"], "skipped", "{report:#}");
}

/// `base` says a token, sensitive at first; `middle` takes it and says it back as a plain output.
const ONCE_SECRET: &str = r#"terraform {
  backend "local" {}
}
variable "seed" {
  type      = string
  default   = "N0nS3nsitive"
  sensitive = true
}
output "token" {
  value     = "t0k3n-${var.seed}-s3cr3t"
  sensitive = true
}
"#;

const ECHO: &str = r#"terraform {
  backend "local" {}
}
variable "token" {
  type = string
}
output "token_echo" {
  value = var.token
}
"#;

/// Everything a run showed and wrote that no secret may reach: its terminal, its reports
/// (JSON, JUnit, Markdown, the step summary), the ledger and the logs.
fn shown_by(w: &Workspace, args: &[&str]) -> String {
    let summary = w.path().join("summary.md");
    let output = mara(w)
        .args(args)
        .args([
            "--report",
            "r.json",
            "--junit",
            "r.xml",
            "--markdown",
            "r.md",
        ])
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    let mut shown = format!("{}{}", common::stdout(&output), common::stderr(&output));
    assert_eq!(output.status.code(), Some(0), "{shown}");
    for file in ["r.json", "r.xml", "r.md", "summary.md"] {
        shown.push_str(&std::fs::read_to_string(w.path().join(file)).unwrap());
    }
    shown + &written_by_mara(w)
}

#[test]
fn an_output_once_secret_stays_secret_when_its_code_makes_it_nonsensitive() {
    let Some(_) = common::terraform() else { return };
    let provider = "description = \"A token and its echo\"\n\n[[project]]\npath = \"base\"\n\n[[project]]\npath = \"middle\"\n[project.inputs]\ntoken = \"base:token\"\n";
    let w = Workspace::new(&[
        ("mara.toml", "provider = \"pair\"\nengine = \"terraform\"\n"),
        ("providers/pair.toml", provider),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        (
            "config/pulumi/Pulumi.dev.yaml",
            "config:\n  kubernetes:infra_type: pair\n",
        ),
        ("base/main.tf", ONCE_SECRET),
        ("middle/main.tf", ECHO),
    ]);
    let (old, new) = ("t0k3n-N0nS3nsitive-s3cr3t", "t0k3n-R0tat3d-s3cr3t");
    let shown = shown_by(&w, &["up", "--yes"]);
    assert!(!shown.contains(old), "{shown}");
    // Its code makes it nonsensitive, and that is applied: Terraform no longer marks it, the
    // ledger still does, and keeps its name alone.
    let nonsensitive = ONCE_SECRET.replace(
        "value     = \"t0k3n-${var.seed}-s3cr3t\"\n  sensitive = true",
        "value = nonsensitive(\"t0k3n-${var.seed}-s3cr3t\")",
    );
    assert_ne!(nonsensitive, ONCE_SECRET);
    w.write("base/main.tf", &nonsensitive);
    let shown = shown_by(&w, &["up", "--yes"]);
    assert!(!shown.contains(old), "{shown}");
    assert_eq!(
        outputs_of(&w, "base")["token"],
        old,
        "applied, not sensitive"
    );
    // Its value changes: base's plan says it is not sensitive, the ledger that it is.
    w.write(
        "base/main.tf",
        &nonsensitive.replace("N0nS3nsitive", "R0tat3d"),
    );
    let dir = w.path().join("plans");
    let dir_arg = dir.display().to_string();
    let shown = shown_by(&w, &["preview", "--save-plans", &dir_arg]);
    let manifest = std::fs::read_to_string(dir.join("mara-plans.json")).unwrap();
    let planned: Value = serde_json::from_str(&manifest).unwrap();
    let taken = &project(&planned, "middle")["inputs"]["token"];
    assert!(taken.as_str().unwrap().starts_with("sha256:"), "{manifest}");
    for value in [old, new] {
        assert!(!manifest.contains(value), "{manifest}");
        assert!(!shown.contains(value), "{value}: {shown}");
    }
    // `mara output` says it is secret, in base and wherever it is handed on.
    let output = mara(&w).arg("output").output().unwrap();
    let said = common::stdout(&output);
    assert!(output.status.success(), "{}", common::stderr(&output));
    let outputs: Value = serde_json::from_str(&said).unwrap();
    assert_eq!(outputs["base"]["token"], "[secret]", "{said}");
    assert_eq!(outputs["middle"]["token_echo"], "[secret]", "{said}");
    let output = mara(&w).args(["output", "middle"]).output().unwrap();
    assert_eq!(
        common::stdout(&output),
        "{\n  \"token_echo\": \"[secret]\"\n}\n"
    );
    let output = mara(&w)
        .args(["output", "--show-secrets"])
        .output()
        .unwrap();
    assert!(common::stdout(&output).contains(old), "asked for");
}
