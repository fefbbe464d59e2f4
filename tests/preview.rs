//! Previews across stacks (docs/commands.md, "Previews across stacks"), through the real binary
//! and the Pulumi stand-in, whose preview digest carries each step's old and new state: which
//! outputs a project's preview changes, the dependents whose previews read them (stale), and the
//! projects that wait on a dependency not deployed yet.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use common::Deployment;

/// `mara --output json <args>`: its exit code and report.
fn report(d: &Deployment, args: &[&str]) -> (i32, Value) {
    common::json_report(d.mara(), args)
}

/// Each project's direct dependencies, from the plan.
fn dependencies(d: &Deployment) -> BTreeMap<String, Vec<String>> {
    let output = d
        .mara()
        .args(["show-execution", "--format", "json"])
        .output()
        .unwrap();
    let plan: Value = serde_json::from_slice(&output.stdout).unwrap();
    plan["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let after = p["after"].as_array().unwrap();
            let after = after.iter().map(|a| a.as_str().unwrap().to_string());
            (p["path"].as_str().unwrap().to_string(), after.collect())
        })
        .collect()
}

fn by_path(report: &Value) -> BTreeMap<String, Value> {
    report["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["path"].as_str().unwrap().to_string(), p.clone()))
        .collect()
}

const CLUSTER: &str = "infrastructure/local/cluster";

#[test]
fn a_preview_of_a_new_stack_waits_on_what_is_not_deployed_yet() {
    let d = Deployment::new_local();
    let needs = dependencies(&d);
    let (code, preview) = report(&d, &["preview"]);
    assert_eq!(code, 0, "waiting is not failing: {preview:#}");
    let projects = by_path(&preview);
    // The projects that depend on nothing are previewed: they create their stacks.
    let roots: BTreeSet<&String> = needs
        .iter()
        .filter(|(_, after)| after.is_empty())
        .map(|(p, _)| p)
        .collect();
    for root in &roots {
        assert_eq!(projects[*root]["status"], "succeeded", "{preview:#}");
    }
    // Every other one waits, on exactly the roots it reads through its dependencies.
    for (path, project) in &projects {
        if roots.contains(path) {
            continue;
        }
        assert_eq!(project["status"], "waiting", "{path}: {preview:#}");
        let mut upstream = BTreeSet::new();
        let mut stack = vec![path.clone()];
        while let Some(p) = stack.pop() {
            for dependency in &needs[&p] {
                match roots.contains(dependency) {
                    true => {
                        upstream.insert(dependency.clone());
                    }
                    false => stack.push(dependency.clone()),
                }
            }
        }
        let waits: BTreeSet<String> = project["waits_on"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap().to_string())
            .collect();
        assert_eq!(waits, upstream, "{path}");
        // The reason names what the project itself reads: a root not deployed yet, or a
        // dependency that waits.
        let reason = project["reason"].as_str().unwrap();
        for dependency in &needs[path] {
            assert!(reason.contains(dependency.as_str()), "{path}: {reason}");
        }
        let (direct, through) = needs[path]
            .iter()
            .partition::<Vec<_>, _>(|n| roots.contains(n));
        assert_eq!(
            reason.contains("(not deployed yet)"),
            !direct.is_empty(),
            "{reason}"
        );
        assert_eq!(
            reason.ends_with("waiting)"),
            !through.is_empty(),
            "{reason}"
        );
    }
    // A waiting project is not previewed at all: no engine call for it.
    let previewed: BTreeSet<String> = d
        .calls()
        .iter()
        .filter(|c| c["argv"].as_array().unwrap().iter().any(|a| a == "preview"))
        .map(|c| c["cwd"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(previewed.len(), roots.len(), "{previewed:?}");
    // Nor was its stack made.
    let stacks: BTreeSet<String> = d
        .calls()
        .iter()
        .filter(|c| {
            c["argv"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a == "--create")
        })
        .map(|c| c["cwd"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        stacks, previewed,
        "only the previewed projects' stacks are created"
    );
    // Changes are certain.
    let summary = d.root().join("step-summary.md");
    let output = d
        .mara()
        .args(["preview", "--expect-no-changes"])
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(4), "{}", common::stdout(&output));
    let markdown = std::fs::read_to_string(&summary).unwrap();
    assert!(
        markdown.starts_with(&format!(
            "### mara preview on stack `dev` (local): {} projects would change, where no change was expected\n",
            needs.len()
        )),
        "{markdown}"
    );
    let table = common::stdout(&output);
    assert!(table.contains("waiting"), "{table}");
    // The reports say what the drift check found, not only that the run went well.
    let (code, json) = report(&d, &["preview", "--expect-no-changes"]);
    assert_eq!(code, 4);
    assert_eq!(json["expect_no_changes"], true);
    // Every project: the roots create their stacks, the others wait.
    assert_eq!(json["unexpected_changes"], needs.len());
}

#[test]
fn an_upstream_output_change_marks_exactly_its_dependents() {
    let d = Deployment::new_local();
    let needs = dependencies(&d);
    let output = d.mara().args(["up", "--yes"]).output().unwrap();
    assert!(output.status.success(), "{}", common::stdout(&output));
    let (code, preview) = report(&d, &["preview"]);
    assert_eq!(code, 0);
    assert!(
        preview["projects"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p.get("stale").is_none()),
        "nothing changes, nothing is stale: {preview:#}"
    );

    let output = d
        .mara()
        .args(["config", "set", "local-cluster:node_count", "5"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let (code, preview) = report(&d, &["preview"]);
    assert_eq!(code, 0, "{preview:#}");
    let projects = by_path(&preview);
    assert_eq!(
        projects[CLUSTER]["changed_outputs"],
        serde_json::json!(["node_count"])
    );
    // Its direct dependents read the changing output; their dependents, stale previews.
    let mut stale_by_way_of = BTreeSet::new();
    for (path, project) in &projects {
        let reads_cluster = needs[path].iter().any(|n| n == CLUSTER);
        let stale = project.get("stale").and_then(Value::as_array);
        if reads_cluster {
            let stale = stale.unwrap_or_else(|| panic!("{path} reads the cluster: {project:#}"));
            assert!(
                stale.contains(&serde_json::json!({"reads": CLUSTER, "outputs": ["node_count"]}))
            );
        } else if let Some(stale) = stale {
            stale_by_way_of.insert(path.clone());
            for entry in stale {
                assert_eq!(entry["outputs"], serde_json::json!([]), "{path}: {entry}");
                let read = entry["reads"].as_str().unwrap();
                assert!(projects[read].get("stale").is_some(), "{path} reads {read}");
            }
        }
    }
    // Nothing that does not depend on the cluster, even indirectly, is marked.
    for path in projects.keys() {
        let mut upstream = BTreeSet::new();
        let mut stack = vec![path.clone()];
        while let Some(p) = stack.pop() {
            for n in &needs[&p] {
                if upstream.insert(n.clone()) {
                    stack.push(n.clone());
                }
            }
        }
        let marked = projects[path].get("stale").is_some();
        assert_eq!(marked, upstream.contains(CLUSTER), "{path}");
    }
    assert!(!stale_by_way_of.is_empty());
    // People read one line per changing output read, then the count of the others.
    let output = d.mara().arg("preview").output().unwrap();
    let text = common::stdout(&output);
    assert!(
        text.contains("reads infrastructure/local/cluster, whose output `node_count` changes: this preview used its current value"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "and {} projects after them, whose previews read those (marked stale)",
            stale_by_way_of.len()
        )),
        "{text}"
    );

    // On a pull request: the same in the GitHub step summary, each project's diff collapsed
    // under its name, without --diff.
    let summary = d.root().join("step-summary.md");
    let output = d
        .mara()
        .arg("preview")
        .env("CI", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    assert!(output.status.success());
    let markdown = std::fs::read_to_string(&summary).unwrap();
    let kubeconfig_row = markdown
        .lines()
        .find(|l| l.starts_with("| `infrastructure/kubeconfig` |"))
        .unwrap_or_else(|| panic!("{markdown}"));
    assert!(kubeconfig_row.contains("(stale)"), "{kubeconfig_row}");
    assert!(
        markdown.contains("**Stale previews.**")
            && markdown.contains("- `infrastructure/kubeconfig` reads `infrastructure/local/cluster`, whose output `node_count` changes"),
        "{markdown}"
    );
    let details = format!("<details><summary><code>{CLUSTER}</code>: ~1</summary>\n\n```diff\n");
    let at = markdown
        .find(&details)
        .unwrap_or_else(|| panic!("{markdown}"));
    let block = &markdown[at..at + markdown[at..].find("</details>").unwrap()];
    assert!(
        block.contains("\n    ~ outputs.node_count: 3 => 5\n```\n"),
        "{block}"
    );
    assert_eq!(
        markdown.matches("<details>").count(),
        1,
        "only the project that changes has a diff: {markdown}"
    );
}

#[test]
fn diff_shows_the_properties_that_change_and_never_a_secret() {
    let d = Deployment::new_local();
    // The cluster gets a secret output that follows its node count.
    let program = d.root().join("infrastructure/local/cluster/Pulumi.yaml");
    let text = std::fs::read_to_string(&program).unwrap();
    let text = text.replace(
        "outputs:\n",
        "variables:\n  token:\n    fn::secret: Qx9-token-${node_count}\noutputs:\n  token: ${token}\n",
    );
    std::fs::write(&program, text).unwrap();
    let only = ["--only", CLUSTER];
    let output = d.mara().args(["up", "--yes"]).args(only).output().unwrap();
    assert!(output.status.success(), "{}", common::stdout(&output));
    let output = d
        .mara()
        .args(["config", "set", "local-cluster:node_count", "5"])
        .output()
        .unwrap();
    assert!(output.status.success());

    let summary = d.root().join("step-summary.md");
    let output = d
        .mara()
        .args(["preview", "--diff"])
        .args(only)
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    let (text, errors) = (common::stdout(&output), common::stderr(&output));
    let markdown = std::fs::read_to_string(&summary).unwrap();
    assert!(
        markdown.contains("    ~ outputs.token: [secret] => [secret]\n"),
        "{markdown}"
    );
    assert!(output.status.success(), "{text}{errors}");
    assert!(
        text.contains("~ outputs.node_count: 3 => 5"),
        "the property, old and new: {text}"
    );
    assert!(
        text.contains("~ outputs.token: [secret] => [secret]"),
        "{text}"
    );
    // Without --diff, the resource alone.
    let plain = d.mara().arg("preview").args(only).output().unwrap();
    assert!(!common::stdout(&plain).contains("outputs.node_count"));

    let (_, report) = report(&d, &["preview", "--diff", "--only", CLUSTER]);
    let diff = &by_path(&report)[CLUSTER]["diff"];
    assert_eq!(
        diff[0]["properties"],
        serde_json::json!([
            {"path": "outputs.node_count", "kind": "update", "old": "3", "new": "5"},
            {"path": "outputs.token", "kind": "update", "old": "[secret]", "new": "[secret]"},
        ]),
        "{report:#}"
    );
    // The secret, old or new, is nowhere: not in what was shown, the report or the logs.
    for secret in ["Qx9-token-3", "Qx9-token-5"] {
        assert!(!text.contains(secret) && !errors.contains(secret) && !markdown.contains(secret));
        assert!(!report.to_string().contains(secret));
        for (path, content) in common::tree(&d.root().join(".mara/logs")) {
            let content = String::from_utf8_lossy(&content.unwrap_or_default()).into_owned();
            assert!(!content.contains(secret), "{}", path.display());
        }
    }
}

impl Deployment {
    fn new_local() -> Deployment {
        Deployment::of("mara-local")
    }
}
