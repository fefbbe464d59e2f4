//! One preview per approval for Pulumi (`[pulumi] update_plans`, docs/commands.md "Saved plans"):
//! `preview --save-plans DIR` keeps each Pulumi project's update plan beside the manifest, and
//! `up --plans DIR` applies it (`up --plan`) instead of previewing again; the stand-in holds the
//! update to the plan as Pulumi does. Counted on the stand-in's log of every call it received.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use common::{Deployment, Workspace};

/// `[pulumi] update_plans = true` added to the workspace's mara.toml.
fn with_update_plans(root: &Path) {
    let file = root.join("mara.toml");
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    std::fs::write(&file, format!("{text}\n[pulumi]\nupdate_plans = true\n")).unwrap();
}

/// The shared configuration's `local-cluster:node_count` set to `n`.
fn node_count(d: &Deployment, n: u32) {
    let file = d.root().join("config/pulumi/Pulumi.dev.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<String> = (text.lines())
        .map(
            |line| match line.trim_start().starts_with("local-cluster:node_count:") {
                true => format!("  local-cluster:node_count: {n}"),
                false => line.to_string(),
            },
        )
        .collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
}

/// `mara --output json <args>` in `d`, which must succeed: its report.
fn ran(d: &Deployment, args: &[&str]) -> Value {
    let (code, report) = common::json_report(d.mara(), args);
    assert_eq!(code, 0, "{args:?}: {report:#}");
    report
}

/// Of `calls`, how many of `command` each project's directory received.
fn per_project(calls: &[Value], command: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for call in calls.iter().filter(|c| common::command_of(c) == command) {
        *counts
            .entry(call["cwd"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    counts
}

/// `preview --save-plans DIR`, then `up --plans DIR`: the calls each made.
fn saved_then_applied(d: &Deployment, dir: &str) -> (Vec<Value>, Vec<Value>) {
    let start = d.calls().len();
    ran(d, &["preview", "--save-plans", dir]);
    let saved = d.calls().len();
    let report = ran(d, &["up", "--plans", dir]);
    for project in report["projects"].as_array().unwrap() {
        assert_eq!(project["approval"], "applied as approved", "{project:#}");
    }
    let calls = d.calls();
    (calls[start..saved].to_vec(), calls[saved..].to_vec())
}

#[test]
fn saved_update_plans_make_one_preview_and_one_up_per_pulumi_project() {
    let d = Deployment::of("mara-local");
    ran(&d, &["up", "--yes"]);
    let projects = per_project(&d.calls(), "up").len();
    assert_eq!(projects, 14);
    let each = |n: usize| (1..=projects).map(|_| n).collect::<Vec<_>>();

    // Today: the preview, then a preview again before each up, to check its approval holds.
    node_count(&d, 5);
    let (preview, up) = saved_then_applied(&d, "plans/checked");
    let counts = |calls: &[Value]| common::counted(calls).into_iter().collect::<Vec<_>>();
    let said = |calls: &[Value]| format!("{:?}", counts(calls));
    assert_eq!(preview.len(), 15, "{}", said(&preview));
    assert_eq!(up.len(), 30, "{}", said(&up));
    let both: Vec<Value> = preview.iter().chain(&up).cloned().collect();
    let previews = per_project(&both, "preview");
    assert_eq!(previews.values().copied().collect::<Vec<_>>(), each(2));
    let plan_flags = |calls: &[Value]| {
        (calls.iter().flat_map(|c| c["argv"].as_array().unwrap()))
            .filter(|w| *w == "--plan" || *w == "--save-plan")
            .count()
    };
    assert_eq!(plan_flags(&both), 0);

    // With update plans: each project previewed once, its update held to that preview's plan.
    with_update_plans(d.root());
    node_count(&d, 7);
    let (preview, up) = saved_then_applied(&d, "plans/held");
    assert_eq!(preview.len(), 15, "{}", said(&preview));
    assert_eq!(up.len(), 16, "{}", said(&up));
    let both: Vec<Value> = preview.iter().chain(&up).cloned().collect();
    assert_eq!(
        per_project(&both, "preview")
            .values()
            .copied()
            .collect::<Vec<_>>(),
        each(1)
    );
    assert_eq!(
        per_project(&both, "up")
            .values()
            .copied()
            .collect::<Vec<_>>(),
        each(1)
    );
    // Each up applies the plan its preview saved, beside the manifest, private.
    let dir = d.root().join("plans/held");
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("mara-plans.json")).unwrap())
            .unwrap();
    let cluster = (manifest["projects"].as_array().unwrap().iter())
        .find(|p| p["path"] == "infrastructure/local/cluster")
        .unwrap();
    assert_eq!(cluster["plan"], "infrastructure/local/cluster.plan.json");
    let plan = dir.join("infrastructure/local/cluster.plan.json");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&plan).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    for call in up.iter().filter(|c| common::command_of(c) == "up") {
        let argv: Vec<&str> = (call["argv"].as_array().unwrap().iter())
            .map(|w| w.as_str().unwrap())
            .collect();
        let at = argv.iter().position(|w| *w == "--plan").expect("--plan");
        let file = Path::new(argv[at + 1]);
        assert!(
            file.starts_with(&dir) && file.is_file(),
            "{}",
            file.display()
        );
    }
    let outputs = d
        .mara()
        .args(["output", "infrastructure/local/cluster"])
        .output()
        .unwrap();
    let outputs: Value = serde_json::from_slice(&outputs.stdout).unwrap();
    assert_eq!(outputs["node_count"], 7);

    // A project whose plan file is gone is checked as without one, which it says.
    node_count(&d, 9);
    ran(&d, &["preview", "--save-plans", "plans/gone"]);
    std::fs::remove_file(
        d.root()
            .join("plans/gone/infrastructure/local/cluster.plan.json"),
    )
    .unwrap();
    let start = d.calls().len();
    let output = d
        .mara()
        .args(["up", "--plans", "plans/gone"])
        .output()
        .unwrap();
    let shown = common::stdout(&output) + &common::stderr(&output);
    assert!(output.status.success(), "{shown}");
    assert!(
        shown.contains("[infrastructure/local/cluster] its saved plan ")
            && shown.contains("cluster.plan.json is gone: planned again and compared with the approved plan instead"),
        "{shown}"
    );
    let calls = &d.calls()[start..];
    let previews = per_project(calls, "preview");
    assert_eq!(previews.len(), 1, "{previews:?}");
    assert!(
        previews
            .keys()
            .all(|dir| dir.ends_with("infrastructure/local/cluster"))
    );
    every_argv_valid(&d.calls());
}

/// Every argv in `calls`, checked again by the stand-in against the real CLI's flag table.
fn every_argv_valid(calls: &[Value]) {
    for call in calls {
        let argv: Vec<&str> = (call["argv"].as_array().unwrap().iter())
            .map(|w| w.as_str().unwrap())
            .collect();
        common::assert_valid_for_the_real_cli(&argv);
    }
}

/// Three Pulumi projects in a row (`network` → `cluster` → `app`) on the stand-in, with update
/// plans; `network` reads `aws:region`, a key of no project's namespace.
fn chain() -> (Workspace, tempfile::TempDir) {
    let project = |name: &str, body: &str| format!("name: {name}\nruntime: yaml\n{body}");
    let w = Workspace::new(&[
        (
            "mara.toml",
            "provider = \"chain\"\n\n[pulumi]\nupdate_plans = true\n",
        ),
        (
            "providers/chain.toml",
            "description = \"Three in a row\"\n\n[[project]]\npath = \"network\"\nstage = \"infrastructure\"\n\n[[project]]\npath = \"cluster\"\nstage = \"infrastructure\"\nafter = [\"network\"]\n\n[[project]]\npath = \"app\"\nstage = \"infrastructure\"\nafter = [\"cluster\"]\n",
        ),
        (
            "network/Pulumi.yaml",
            &project(
                "network",
                "config:\n  aws:region:\n    type: string\n  cidr:\n    type: string\n    default: 10.0.0.0/16\noutputs:\n  region: ${region}\n  cidr: ${cidr}\n",
            ),
        ),
        (
            "cluster/Pulumi.yaml",
            &project("cluster", "outputs:\n  name: c1\n"),
        ),
        (
            "app/Pulumi.yaml",
            &project("app", "outputs:\n  url: https://app\n"),
        ),
        (
            "config/pulumi/environment",
            "PULUMI_STACK=dev\nPULUMI_BACKEND_URL=file://.mara/pulumi-state\nPULUMI_CONFIG_PASSPHRASE=test\n",
        ),
        (
            "config/pulumi/Pulumi.dev.yaml",
            "config:\n  kubernetes:infra_type: chain\n  aws:region: us-east-1\n",
        ),
    ]);
    (w, common::stand_in_bin())
}

/// A configuration change between the approval and the update that mara's own check before the
/// run does not see (a key outside every project's namespace): Pulumi refuses the update that
/// leaves the plan, and nothing after it runs.
#[test]
fn an_update_that_leaves_its_saved_plan_is_refused_by_pulumi_and_nothing_after_it_runs() {
    let (w, bin) = chain();
    let log = w.path().join("stand-in.jsonl");
    let mara = || {
        let mut cmd = w.mara();
        cmd.env("PATH", common::path_with(bin.path()))
            .env("HOME", w.path().join("home"))
            .env("PULUMI_STAND_IN_LOG", &log);
        cmd
    };
    let (code, report) = common::json_report(mara(), &["up", "--yes"]);
    assert_eq!(code, 0, "{report:#}");
    let (code, report) = common::json_report(mara(), &["preview", "--save-plans", "release"]);
    assert_eq!(code, 0, "{report:#}");
    let config = w.path().join("config/pulumi/Pulumi.dev.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("us-east-1", "eu-west-1")).unwrap();
    let start = common::calls_in(&log).len();
    let (code, report) = common::json_report(mara(), &["up", "--plans", "release"]);
    assert_eq!(code, 1, "{report:#}");
    let network = common::project(&report, "network");
    assert_eq!(network["status"], "failed", "{report:#}");
    assert_eq!(
        network["reason"], "resource violates plan: properties changed: =~region[{eu-west-1}]",
        "{report:#}"
    );
    for after in ["cluster", "app"] {
        assert_eq!(
            common::project(&report, after)["status"],
            "skipped",
            "{report:#}"
        );
    }
    // One call to Pulumi: the refused update; nothing applied, nothing after it started.
    let calls = &common::calls_in(&log)[start..];
    let commands: Vec<String> = calls.iter().map(common::command_of).collect();
    assert_eq!(commands, ["up"], "{calls:#?}");
    let output = mara().args(["output", "network"]).output().unwrap();
    let outputs: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(outputs["region"], "us-east-1");
}
