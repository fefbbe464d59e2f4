//! Runs through the real binary and the pulumi stand-in: the example workspace deployed and
//! destroyed, failures, parallelism measured on the stand-in's recorded times, interruption,
//! kubeconfig merging checked with the real kubectl, and every argv the stand-in saw re-checked
//! against the real CLI's flag table.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

use serde_json::Value;

use common::Deployment;

impl Deployment {
    fn new() -> Deployment {
        Deployment::of("mara-local")
    }

    /// The calls of `operation` (`up`, `destroy`, …), as (project directory, entry).
    fn operations(&self, operation: &str) -> Vec<(String, Value)> {
        self.calls()
            .into_iter()
            .filter(|c| c["argv"].as_array().unwrap().iter().any(|a| a == operation))
            .map(|c| {
                let cwd = PathBuf::from(c["cwd"].as_str().unwrap());
                let project = cwd
                    .strip_prefix(self.root().canonicalize().unwrap())
                    .or_else(|_| cwd.strip_prefix(self.root()))
                    .unwrap()
                    .display()
                    .to_string();
                (project, c)
            })
            .collect()
    }

    /// Every argv recorded so far, re-checked by the stand-in against pulumi-flags.json.
    fn assert_every_argv_valid(&self) {
        let calls = self.calls();
        assert!(!calls.is_empty());
        for call in calls {
            let argv: Vec<String> = call["argv"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string())
                .collect();
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            common::assert_valid_for_the_real_cli(&argv);
        }
    }

    fn plan_edges(&self) -> Vec<(String, String)> {
        let output = self
            .mara()
            .args(["show-execution", "--format", "json"])
            .output()
            .unwrap();
        let plan: Value = serde_json::from_slice(&output.stdout).unwrap();
        let mut edges = Vec::new();
        for project in plan["projects"].as_array().unwrap() {
            for before in project["after"].as_array().unwrap() {
                edges.push((
                    before.as_str().unwrap().to_string(),
                    project["path"].as_str().unwrap().to_string(),
                ));
            }
        }
        edges
    }

    fn order(&self) -> Vec<String> {
        let output = self
            .mara()
            .args(["show-execution", "--format", "list"])
            .output()
            .unwrap();
        common::stdout(&output)
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// Times, sizes and paths that differ between runs, for snapshots.
fn stable(text: &str, root: &Path) -> String {
    let text = text.replace(&root.display().to_string(), "[WORKSPACE]");
    let mut out = String::new();
    for line in text.lines() {
        let words: Vec<String> = line
            .split(' ')
            .map(|w| {
                let trimmed = w.trim_end_matches([',', ':']);
                let is_duration = trimmed.ends_with('s')
                    && trimmed[..trimmed.len() - 1]
                        .chars()
                        .all(|c| c.is_ascii_digit() || c == '.' || c == 'm')
                    && trimmed.len() > 1;
                if is_duration {
                    w.replace(trimmed, "[T]")
                } else {
                    w.to_string()
                }
            })
            .collect();
        let line = words.join(" ");
        let line = match line.find(".mara/logs/") {
            Some(at) => format!("{}.mara/logs/[RUN]", &line[..at]),
            None => line,
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[test]
fn up_deploys_the_example_in_a_valid_order_and_reports_it() {
    let d = Deployment::new();
    let output = d
        .mara()
        .args([
            "up",
            "--yes",
            "--report",
            "report.json",
            "--junit",
            "junit.xml",
        ])
        .output()
        .unwrap();
    let out = common::stdout(&output);
    assert!(
        output.status.success(),
        "{out}\n{}",
        common::stderr(&output)
    );

    // Every dependency finished its up before the dependent started.
    let ups = d.operations("up");
    assert_eq!(ups.len(), 14);
    let time = |project: &str, key: &str| {
        ups.iter()
            .find(|(p, _)| p == project)
            .map(|(_, c)| c[key].as_f64().unwrap())
            .unwrap_or_else(|| panic!("{project} did not run"))
    };
    for (before, after) in d.plan_edges() {
        assert!(
            time(&before, "end") <= time(&after, "start"),
            "{after} started before {before} ended"
        );
    }

    // State flowed through the stack references.
    let output = d
        .mara()
        .args(["output", "kubernetes/applications/sirius"])
        .output()
        .unwrap();
    let outputs: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        outputs["application_url"],
        "https://ingress.mara-dev.localhost"
    );

    // The kubeconfig hook wrote the stack's kubeconfig, private.
    use std::os::unix::fs::PermissionsExt;
    let kube = d.root().join(".mara/kube/dev.yaml");
    assert_eq!(
        std::fs::metadata(&kube).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(std::fs::read_to_string(&kube).unwrap().contains("mara-dev"));

    // The JSON report.
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(d.root().join("report.json")).unwrap())
            .unwrap();
    assert_eq!(report["operation"], "up");
    assert_eq!(report["status"], "succeeded");
    assert_eq!(report["stack"], "dev");
    assert_eq!(report["provider"], "local");
    for key in ["run_id", "started", "finished"] {
        assert!(report[key].is_string(), "{key}");
    }
    let projects = report["projects"].as_array().unwrap();
    assert_eq!(projects.len(), 14);
    for project in projects {
        assert_eq!(project["status"], "succeeded", "{project}");
        assert_eq!(project["exit_code"], 0);
        assert!(
            project["duration_ms"].is_u64() && project["changes"]["create"].as_u64().unwrap() >= 1,
            "{project}"
        );
    }

    // The JUnit file, read by a JUnit parser.
    let junit = std::fs::File::open(d.root().join("junit.xml")).unwrap();
    let suites = junit_parser::from_reader(std::io::BufReader::new(junit)).unwrap();
    assert_eq!(suites.tests, 14);
    assert_eq!(suites.failures, 0);
    assert_eq!(suites.suites[0].cases.len(), 14);

    // A log per project.
    let logs = d.root().join(".mara/logs");
    let run = std::fs::read_dir(&logs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert!(run.join("kubernetes/applications/sirius.log").is_file());

    let summary = &out[out.find("PROJECT").unwrap()..];
    insta::assert_snapshot!("up_summary", stable(summary, d.root()));
    d.assert_every_argv_valid();
}

#[test]
fn destroy_walks_the_exact_reverse_order() {
    let d = Deployment::new();
    assert!(
        d.mara()
            .args(["up", "--yes"])
            .output()
            .unwrap()
            .status
            .success()
    );
    let output = d
        .mara()
        .args(["destroy", "--yes", "--parallel", "1"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let destroyed: Vec<String> = d
        .operations("destroy")
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let mut reversed = d.order();
    reversed.reverse();
    assert_eq!(destroyed, reversed);
    assert!(
        !d.root().join(".mara/kube/dev.yaml").exists(),
        "the destroy hook removes the kubeconfig"
    );
    // Nothing is left in the stacks.
    let output = d.mara().args(["output"]).output().unwrap();
    let outputs: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        outputs
            .as_object()
            .unwrap()
            .values()
            .all(|v| v.as_object().is_none_or(|o| o.is_empty())),
        "{outputs}"
    );
    d.assert_every_argv_valid();
}

#[test]
fn a_failing_project_skips_its_dependents_and_keep_going_finishes_the_rest() {
    let d = Deployment::new();
    let output = d
        .mara()
        .args(["up", "--yes", "--parallel", "1", "--output", "json"])
        .env("PULUMI_STAND_IN_FAIL", "up:logstore")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    let status = |path: &str| {
        summary["projects"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["path"] == path)
            .unwrap()
            .clone()
    };
    assert_eq!(status("kubernetes/logstore")["status"], "failed");
    // Why: the engine's own error, not its exit code.
    assert_eq!(
        status("kubernetes/logstore")["reason"],
        "the stand-in was told to fail up of logstore (PULUMI_STAND_IN_FAIL)"
    );
    assert_eq!(status("kubernetes/logagent")["status"], "skipped");
    assert_eq!(
        status("kubernetes/logagent")["reason"],
        "depends on kubernetes/logstore, which did not succeed"
    );
    assert_eq!(summary["status"], "failed");
    let started: Vec<String> = d.operations("up").into_iter().map(|(p, _)| p).collect();
    assert!(
        !started.contains(&"kubernetes/logagent".to_string()),
        "a dependent was started: {started:?}"
    );
    assert!(
        !started.contains(&"kubernetes/applications/sirius".to_string()),
        "fail-fast starts nothing new"
    );

    let output = d
        .mara()
        .args(["up", "--yes", "--keep-going", "--output", "json"])
        .env("PULUMI_STAND_IN_FAIL", "up:logstore")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    let statuses: Vec<(String, String)> = summary["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["path"].as_str().unwrap().to_string(),
                p["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        statuses.contains(&("kubernetes/applications/sirius".into(), "unchanged".into()))
            || statuses.contains(&("kubernetes/applications/sirius".into(), "succeeded".into())),
        "{statuses:?}"
    );
    assert!(statuses.contains(&("kubernetes/logagent".into(), "skipped".into())));
    d.assert_every_argv_valid();

    // The reason reaches every report, and `-q` says only what went wrong.
    let github = d.root().join("step-summary.md");
    let output = d
        .mara()
        .args([
            "-q",
            "up",
            "--yes",
            "--only",
            "logstore",
            "--junit",
            "junit.xml",
        ])
        .env("PULUMI_STAND_IN_FAIL", "up:logstore")
        .env("GITHUB_STEP_SUMMARY", &github)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let reason = "the stand-in was told to fail up of logstore (PULUMI_STAND_IN_FAIL)";
    let junit = std::fs::read_to_string(d.root().join("junit.xml")).unwrap();
    assert!(
        junit.contains(&format!("<failure message=\"{reason}\">")),
        "{junit}"
    );
    let markdown = std::fs::read_to_string(&github).unwrap();
    assert!(markdown.contains(reason), "{markdown}");
    let out = stable(&common::stdout(&output), d.root());
    assert_eq!(
        out,
        format!(
            "[kubernetes/logstore] failed in [T]: {reason}\n\
             ✗ up on stack dev failed: 1 failed; logs in .mara/logs/[RUN]\n"
        ),
    );
    let output = d
        .mara()
        .args(["-q", "up", "--yes", "--only", "logstore"])
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(common::stdout(&output), "", "all went well: nothing to say");
    assert_eq!(common::stderr(&output), "", "all went well: nothing to say");
}

#[test]
fn parallel_projects_overlap_and_dependents_wait() {
    let d = Deployment::new();
    let output = d
        .mara()
        .args([
            "up",
            "--yes",
            "--parallel",
            "4",
            "--only",
            "kubeconfig",
            "--with-dependencies",
        ])
        .env("PULUMI_STAND_IN_DELAY_MS", "400")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let ups = d.operations("up");
    let get = |project: &str| {
        ups.iter()
            .find(|(p, _)| p == project)
            .map(|(_, c)| (c["start"].as_f64().unwrap(), c["end"].as_f64().unwrap()))
            .unwrap()
    };
    let cluster = get("infrastructure/local/cluster");
    let registry = get("infrastructure/local/registry");
    let kubeconfig = get("infrastructure/kubeconfig");
    assert!(
        cluster.0 < registry.1 && registry.0 < cluster.1,
        "the two infrastructure projects ran at the same time: {cluster:?} {registry:?}"
    );
    assert!(
        kubeconfig.0 >= cluster.1 && kubeconfig.0 >= registry.1,
        "kubeconfig waited for both: {kubeconfig:?}"
    );

    // With --parallel 1 nothing overlaps.
    let d = Deployment::new();
    d.mara()
        .args([
            "up",
            "--yes",
            "--parallel",
            "1",
            "--only",
            "cluster",
            "--only",
            "registry",
        ])
        .env("PULUMI_STAND_IN_DELAY_MS", "200")
        .assert()
        .success();
    let ups = d.operations("up");
    let (a, b) = (&ups[0].1, &ups[1].1);
    assert!(a["end"].as_f64().unwrap() <= b["start"].as_f64().unwrap());
}

impl Deployment {
    /// Starts `mara <args>` with `env`, and returns once `engines` engine processes hold their
    /// stack locks (that is, are running their operation).
    fn start_until_locked(
        &self,
        args: &[&str],
        env: &[(&str, &str)],
        engines: usize,
    ) -> std::process::Child {
        let mut cmd = StdCommand::new(assert_cmd::cargo::cargo_bin("mara"));
        cmd.args(args)
            .current_dir(self.root())
            .env("NO_COLOR", "1")
            .envs(self.environment())
            .env_remove("KUBECONFIG");
        for (key, value) in env {
            cmd.env(key, value);
        }
        let child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while count_files(&self.locks()) < engines {
            assert!(
                std::time::Instant::now() < deadline,
                "the engines never started"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        child
    }

    fn locks(&self) -> PathBuf {
        self.root()
            .join(".mara/pulumi-state/.pulumi/locks/organization")
    }
}

#[test]
fn sigint_cancels_the_running_engines_and_exits_130() {
    let d = Deployment::new();
    // The two infrastructure projects run at once.
    let child = d.start_until_locked(
        &["up", "--yes"],
        &[("PULUMI_STAND_IN_DELAY_MS", "20000")],
        2,
    );
    let locks = d.locks();
    // SAFETY: sending a signal to our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(130),
        "{}",
        common::stderr(&output)
    );
    let ups = d.operations("up");
    assert_eq!(ups.len(), 2, "only the running projects had started");
    for (project, call) in &ups {
        assert_eq!(call["sigint"], true, "{project} did not get SIGINT");
        assert_eq!(call["exit"], 8, "{project} cancelled as Pulumi does");
    }
    assert_eq!(count_files(&locks), 0, "the engines released their locks");
    assert!(
        common::no_process_in(d.root()),
        "an engine process was left behind"
    );
    let out = common::stdout(&output);
    assert!(
        out.contains("cancelled") && out.contains("was interrupted"),
        "{out}"
    );
}

#[test]
fn a_stack_locked_by_another_update_is_reported_as_such() {
    let d = Deployment::new();
    let locks = d
        .root()
        .join(".mara/pulumi-state/.pulumi/locks/organization/local-registry/dev");
    std::fs::create_dir_all(&locks).unwrap();
    std::fs::write(
        locks.join("x.json"),
        r#"{"pid":1,"username":"ci","hostname":"runner","timestamp":"2026-11-21T00:00:00Z"}"#,
    )
    .unwrap();
    let output = d
        .mara()
        .args(["up", "--yes", "--only", "registry"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let out = common::stdout(&output);
    assert!(
        out.contains("the stack is locked by another update"),
        "{out}"
    );
    assert_eq!(d.operations("up").len(), 1, "no retry loop");
}

#[test]
fn merging_into_an_existing_kubeconfig_keeps_its_contexts() {
    let d = Deployment::new();
    let provider = d.root().join("providers/local.toml");
    let text = std::fs::read_to_string(&provider)
        .unwrap()
        .replace("merge = false", "merge = true");
    std::fs::write(&provider, text).unwrap();
    let kube = d.root().join("home/.kube/config");
    std::fs::create_dir_all(kube.parent().unwrap()).unwrap();
    let existing = "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster:\n    server: https://prod.example.com\nusers:\n- name: prod-admin\n  user:\n    token: keep-me\ncontexts:\n- name: prod\n  context:\n    cluster: prod\n    user: prod-admin\ncurrent-context: prod\n";
    std::fs::write(&kube, existing).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&kube, std::fs::Permissions::from_mode(0o640)).unwrap();
    d.mara()
        .args(["up", "--yes", "--only", "cluster"])
        .assert()
        .success();

    // The user's file keeps the mode they gave it, as kubectl keeps it (issue 45).
    assert_eq!(
        std::fs::metadata(&kube).unwrap().permissions().mode() & 0o777,
        0o640
    );
    assert_eq!(
        std::fs::read_to_string(kube.with_file_name("config.mara.bak")).unwrap(),
        existing
    );
    let merged = std::fs::read_to_string(&kube).unwrap();
    assert!(
        merged.contains("keep-me") && merged.contains("mara-dev"),
        "{merged}"
    );
    if let Some(kubectl) = common::tools::tool("kubectl", "it reads the merged kubeconfig") {
        let contexts = StdCommand::new(&kubectl)
            .args(["config", "get-contexts", "-o", "name", "--kubeconfig"])
            .arg(&kube)
            .output()
            .unwrap();
        let names = String::from_utf8(contexts.stdout).unwrap();
        assert_eq!(
            names.lines().collect::<Vec<_>>(),
            ["mara-dev", "prod"],
            "kubectl sees both contexts"
        );
        let current = StdCommand::new(&kubectl)
            .args(["config", "current-context", "--kubeconfig"])
            .arg(&kube)
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8(current.stdout).unwrap().trim(),
            "mara-dev"
        );
    }
    d.mara()
        .args(["destroy", "--yes", "--only", "cluster"])
        .assert()
        .success();
    let cleaned = std::fs::read_to_string(&kube).unwrap();
    assert!(
        cleaned.contains("prod") && !cleaned.contains("mara-dev"),
        "{cleaned}"
    );
}

#[test]
fn dry_run_prints_every_command_and_runs_none() {
    let d = Deployment::new();
    let output = d
        .mara()
        .args([
            "destroy",
            "--dry-run",
            "--only",
            "sirius",
            "--with-dependencies",
        ])
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(d.calls().is_empty(), "nothing ran");
    insta::assert_snapshot!(
        "destroy_dry_run",
        stable(&common::stdout(&output), d.root())
    );
}

#[test]
fn without_a_terminal_a_change_needs_yes() {
    let d = Deployment::new();
    let output = d.mara().args(["up"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(common::stderr(&output).contains("pass --yes"));
    let output = d.mara().args(["destroy"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(d.calls().is_empty());
}

#[test]
fn preview_expect_no_changes_is_exit_4_when_something_changes() {
    let d = Deployment::new();
    // Before anything is deployed, the first projects have changes (their dependents cannot be
    // previewed yet: the stacks they reference have no outputs, as with Pulumi itself).
    let output = d
        .mara()
        .args([
            "preview",
            "--expect-no-changes",
            "--only",
            "cluster",
            "--only",
            "registry",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(4), "{}", common::stdout(&output));
    assert!(
        common::stdout(&output).contains(
            "✗ preview on stack dev: 2 projects would change, where no change was expected"
        ),
        "the verdict is not a success: {}",
        common::stdout(&output)
    );
    d.mara().args(["up", "--yes"]).assert().success();
    d.mara()
        .args(["preview", "--expect-no-changes"])
        .assert()
        .success();
    let config = d.root().join("config/pulumi/Pulumi.dev.yaml");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("mara-dev", "mara-renamed");
    std::fs::write(&config, text).unwrap();
    let junit = d.root().join("junit.xml");
    let output = d
        .mara()
        .args([
            "--output",
            "json",
            "preview",
            "--expect-no-changes",
            "--junit",
        ])
        .arg(&junit)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(4));
    // The JSON and the JUnit file say so too: the run went well, the expectation did not.
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["exit_code"], 4, "{summary:#}");
    let last = summary.as_object().unwrap().keys().next_back().unwrap();
    assert_eq!(last, "exit_code", "the summary ends with it");
    assert_eq!(summary["status"], "succeeded");
    assert!(
        summary["unexpected_changes"].as_u64().unwrap() >= 1,
        "{summary:#}"
    );
    let junit = std::fs::read_to_string(junit).unwrap();
    assert!(
        junit.contains("<failure message=\"would change, where no change was expected: ")
            && !junit.contains("failures=\"0\""),
        "{junit}"
    );
    d.assert_every_argv_valid();
}

fn count_files(dir: &Path) -> usize {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(d).into_iter().flatten().flatten() {
            if entry.path().is_dir() {
                stack.push(entry.path());
            } else {
                n += 1;
            }
        }
    }
    n
}

#[test]
fn grouped_output_keeps_each_projects_lines_together_and_github_gets_a_summary() {
    let d = Deployment::new();
    let summary = d.root().join("step-summary.md");
    let output = d
        .mara()
        .args([
            "up",
            "--yes",
            "--log-order",
            "grouped",
            "--only",
            "cluster",
            "--only",
            "registry",
        ])
        .env("GITHUB_STEP_SUMMARY", &summary)
        .env("PULUMI_STAND_IN_DELAY_MS", "200")
        .output()
        .unwrap();
    assert!(output.status.success());
    let out = common::stdout(&output);
    // Each project's lines form one uninterrupted block.
    let owners: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with('['))
        .map(|l| &l[..l.find(']').unwrap() + 1])
        .collect();
    let mut blocks = owners.clone();
    blocks.dedup();
    let mut seen = std::collections::BTreeSet::new();
    for block in &blocks {
        assert!(seen.insert(*block), "{block} appears in two blocks:\n{out}");
    }
    assert_eq!(seen.len(), 2, "{out}");
    let markdown = std::fs::read_to_string(&summary).unwrap();
    assert!(
        markdown.starts_with("### mara up on stack `dev` (local): succeeded"),
        "{markdown}"
    );
    assert!(
        markdown.contains("| `infrastructure/local/cluster` | succeeded |"),
        "{markdown}"
    );
}

#[test]
fn command_hooks_get_the_stack_and_its_outputs() {
    let d = Deployment::new();
    let provider = d.root().join("providers/local.toml");
    // The registry's entry gets a command hook (added under its own entry: a path declared twice
    // is an error).
    let entry = "before = [\"utility/kic-image-push\"]\n";
    let text = std::fs::read_to_string(&provider).unwrap().replacen(
        entry,
        &format!("{entry}\n[[project.on_success]]\nkind = \"command\"\nrun = 'echo \"$MARA_STACK $MARA_PROJECT $MARA_PROVIDER $MARA_OUTPUT_REGISTRY_URL\" > hook.out'\n"),
        1,
    );
    assert!(text.contains("hook.out"), "the registry's entry was found");
    std::fs::write(&provider, text).unwrap();
    d.mara()
        .args(["up", "--yes", "--only", "registry"])
        .assert()
        .success();
    let written =
        std::fs::read_to_string(d.root().join("infrastructure/local/registry/hook.out")).unwrap();
    assert_eq!(
        written.trim(),
        "dev infrastructure/local/registry local localhost:5000/dev"
    );

    // A failing hook fails its project.
    let text = std::fs::read_to_string(&provider)
        .unwrap()
        .replace("> hook.out'", "> hook.out; exit 3'");
    std::fs::write(&provider, text).unwrap();
    let output = d
        .mara()
        .args(["up", "--yes", "--only", "registry"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(
        common::stdout(&output).contains("exit code 3"),
        "{}",
        common::stdout(&output)
    );
}

#[test]
fn a_second_sigint_kills_engines_that_ignore_the_first() {
    let d = Deployment::new();
    let env = [
        ("PULUMI_STAND_IN_DELAY_MS", "60000"),
        ("PULUMI_STAND_IN_IGNORE_SIGINT", "1"),
    ];
    let child = d.start_until_locked(&["up", "--yes", "--only", "cluster"], &env, 1);
    let started = std::time::Instant::now();
    for _ in 0..2 {
        // SAFETY: signalling our own child.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGINT);
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "it did not wait for the engine's minute"
    );
    assert!(common::no_process_in(d.root()), "the killed engine is gone");
    let err = common::stderr(&output);
    assert!(
        err.contains("killing the running engine processes"),
        "{err}"
    );
    // It says which engine was killed, and how to clear the lock it may have left; so does unlock.
    let clear = "clear it with `mara unlock --engine`";
    assert!(
        err.contains("1 project was killed")
            && err.contains("infrastructure/local/cluster: killed")
            && err.contains(clear),
        "{err}"
    );
    let unlock = d.mara().arg("unlock").output().unwrap();
    let out = common::stdout(&unlock);
    assert!(unlock.status.success(), "{out}");
    assert!(
        out.contains("is not locked by mara")
            && out.contains("infrastructure/local/cluster")
            && out.contains("Clear them with `mara unlock --engine`"),
        "{out}"
    );
    // The engine's lock is there: the next run of the project meets it.
    let locked = d
        .mara()
        .args(["up", "--yes", "--only", "cluster"])
        .output()
        .unwrap();
    assert_eq!(locked.status.code(), Some(1), "{}", common::stderr(&locked));
    assert!(
        common::stdout(&locked).contains("the stack is locked by another update"),
        "{}",
        common::stdout(&locked)
    );
    // `unlock --engine` runs Pulumi's own cancel in the project, with the environment file's
    // backend (which a `pulumi cancel` typed in the shell would not have).
    let unlock = d.mara().args(["unlock", "--engine"]).output().unwrap();
    let out = common::stdout(&unlock);
    assert!(unlock.status.success(), "{out}{}", common::stderr(&unlock));
    assert!(
        out.contains("[infrastructure/local/cluster] The currently running update for 'dev' has been canceled!"),
        "{out}"
    );
    let cancels: Vec<(String, Value)> = d.operations("cancel");
    assert_eq!(cancels.len(), 1, "{cancels:?}");
    assert_eq!(cancels[0].0, "infrastructure/local/cluster");
    d.assert_every_argv_valid();
    let output = d
        .mara()
        .args(["up", "--yes", "--only", "cluster"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    // Nothing is left to clear: the last run succeeded.
    let unlock = d.mara().args(["unlock", "--engine"]).output().unwrap();
    assert!(
        common::stdout(&unlock).contains("left no engine lock to clear"),
        "{}",
        common::stdout(&unlock)
    );
}

#[test]
fn a_project_whose_task_panics_is_failed_and_leaves_no_process() {
    // Command projects: `slow` prints a line and would run for a minute; `after` depends on it;
    // `beside` does not.
    let ws = common::Workspace::new(&[
        ("mara.toml", "provider = \"p\"\n"),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        (
            "providers/p.toml",
            "description = \"p\"\n\
             [[project]]\npath = \"slow\"\nup = \"echo started; sleep 60\"\ndestroy = \"true\"\n\
             [[project]]\npath = \"after\"\nafter = [\"slow\"]\nup = \"true\"\ndestroy = \"true\"\n\
             [[project]]\npath = \"beside\"\nup = \"true\"\ndestroy = \"true\"\n",
        ),
    ]);
    std::fs::create_dir_all(ws.path().join("slow")).unwrap();
    let output = ws
        .mara()
        .args(["up", "--yes", "--keep-going", "--output", "json"])
        // A fault for the tests, honoured by debug builds only (docs/testing.md): the task of
        // `slow` panics on the line it prints, while its process runs.
        .env("MARA_TEST_PANIC_IN", "slow")
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", common::stderr(&output));
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    let project = |path: &str| {
        summary["projects"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["path"] == path)
            .unwrap()
            .clone()
    };
    let slow = project("slow");
    assert_eq!(slow["status"], "failed");
    let reason = slow["reason"].as_str().unwrap();
    assert!(
        reason.contains("a bug in mara") && reason.contains("MARA_TEST_PANIC_IN"),
        "{reason}"
    );
    assert_eq!(project("after")["status"], "skipped");
    assert_eq!(project("beside")["status"], "succeeded");
    assert_eq!(summary["status"], "failed");
    assert!(
        common::wait_for_no_process_in(ws.path()),
        "the panicking task's process was left running"
    );
    let history = ws
        .mara()
        .args(["--output", "json", "history"])
        .output()
        .unwrap();
    let history: Value = serde_json::from_slice(&history.stdout).unwrap();
    assert_eq!(history[0]["status"], "failed", "the ledger says so too");
}

#[test]
fn the_stack_on_the_command_line_reaches_every_process() {
    // The environment file names `dev`; `--stack prod` wins, and no process sees `dev`.
    let ws = common::Workspace::new(&[
        ("mara.toml", "provider = \"p\"\n"),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        (
            "providers/p.toml",
            "description = \"p\"\n\
             [[project]]\npath = \"a\"\nup = \"echo \\\"stack=$PULUMI_STACK/$MARA_STACK\\\"\"\ndestroy = \"true\"\n\
             [[project.on_success]]\nkind = \"command\"\nrun = \"echo \\\"hook=$PULUMI_STACK/$MARA_STACK\\\"\"\n",
        ),
    ]);
    let output = ws
        .mara()
        .args(["up", "--yes", "--stack", "prod"])
        .output()
        .unwrap();
    let out = common::stdout(&output);
    assert!(output.status.success(), "{out}{}", common::stderr(&output));
    assert!(
        out.contains("stack=prod/prod") && out.contains("hook=prod/prod"),
        "{out}"
    );
    assert!(out.contains("up on stack prod"), "{out}");
    assert!(
        ws.path().join("config/pulumi/Pulumi.prod.yaml").is_file(),
        "the first run wrote prod's configuration"
    );
}

#[test]
fn a_run_that_cannot_start_stops_before_anything_is_asked_written_or_run() {
    let d = Deployment::new();
    // A first run (no configuration yet), a project directory gone, and no kubectl or pulumi:
    // every problem at once, exit 3, and nothing touched.
    std::fs::remove_file(d.root().join("config/pulumi/Pulumi.dev.yaml")).unwrap();
    std::fs::remove_dir_all(d.root().join("kubernetes/certmgr")).unwrap();
    std::fs::remove_file(d.root().join("kubernetes/logstore/Pulumi.yaml")).unwrap();
    let before = common::tree(d.root());
    let output = d
        .mara()
        .args(["up", "--yes"])
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let err = common::stderr(&output);
    for expected in [
        "kubernetes/certmgr: no directory kubernetes/certmgr",
        "kubernetes/logstore: no Pulumi.yaml in kubernetes/logstore",
        "pulumi: not found on PATH",
        "this is the stack's first run",
    ] {
        assert!(err.contains(expected), "{expected} missing from:\n{err}");
    }
    assert!(d.calls().is_empty(), "an engine was called");
    assert_eq!(common::tree(d.root()), before, "something was written");
}

#[test]
fn a_project_file_pulumi_would_refuse_stops_the_run_before_it_starts() {
    let d = Deployment::new();
    let write = |path: &str, text: &str| std::fs::write(d.root().join(path), text).unwrap();
    let append = |path: &str, text: &str| {
        let file = d.root().join(path);
        let old = std::fs::read_to_string(&file).unwrap();
        std::fs::write(file, old + text).unwrap();
    };
    write("kubernetes/logstore/Pulumi.yaml", "runtime: yaml\n");
    write("kubernetes/logagent/Pulumi.yaml", "name: logagent\n");
    write(
        "kubernetes/secrets/Pulumi.yaml",
        "name: secrets\nruntime: [yaml\n",
    );
    // Two projects of one name would deploy over one stack.
    let prometheus = d.root().join("kubernetes/prometheus/Pulumi.yaml");
    let prometheus = std::fs::read_to_string(prometheus).unwrap();
    write("kubernetes/observability/Pulumi.yaml", &prometheus);
    // A project path that is a file, not a directory.
    std::fs::remove_dir_all(d.root().join("kubernetes/certmgr")).unwrap();
    write("kubernetes/certmgr", "");
    // Read as Pulumi reads it: its first document.
    append(
        "infrastructure/kubeconfig/Pulumi.yaml",
        "---\nname: other\n",
    );
    let before = common::tree(d.root());
    let output = d.mara().args(["up", "--yes"]).output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    let err = common::stderr(&output);
    for expected in [
        "kubernetes/logstore/Pulumi.yaml: has no `name:`",
        "kubernetes/logagent/Pulumi.yaml: has no `runtime:`",
        "kubernetes/secrets/Pulumi.yaml:2:",
        "are named `prometheus` in their Pulumi.yaml",
        "kubernetes/certmgr: kubernetes/certmgr is not a directory",
    ] {
        assert!(err.contains(expected), "{expected} missing from:\n{err}");
    }
    let named = err
        .lines()
        .find(|l| l.contains("are named `prometheus`"))
        .unwrap();
    assert!(
        named.contains("kubernetes/prometheus") && named.contains("kubernetes/observability"),
        "{named}"
    );
    assert!(!err.contains("kubeconfig"), "{err}");
    assert!(d.calls().is_empty(), "an engine was called");
    assert_eq!(common::tree(d.root()), before, "something was written");
    // validate says the same, and reads the file of two documents for its first.
    let output = d.mara().arg("validate").output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    let out = common::stdout(&output);
    assert!(
        out.contains("infrastructure/kubeconfig: Pulumi project `kubeconfig`, runtime yaml"),
        "{out}"
    );
    assert!(out.contains("has no `runtime:`"), "{out}");
}

#[test]
fn a_project_of_the_same_name_is_found_outside_the_selection_and_a_runtime_is_needed_to_run() {
    let d = Deployment::new();
    d.mara().args(["up", "--yes"]).assert().success();
    // A copy of prometheus's file in observability: a run of either alone would deploy over
    // the other's stack.
    let prometheus = std::fs::read_to_string(d.root().join("kubernetes/prometheus/Pulumi.yaml"));
    let observability = d.root().join("kubernetes/observability/Pulumi.yaml");
    std::fs::write(&observability, prometheus.unwrap()).unwrap();
    let calls = d.calls().len();
    let output = d
        .mara()
        .args(["up", "--yes", "--only", "kubernetes/observability"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let err = common::stderr(&output);
    assert!(
        err.contains("kubernetes/observability and kubernetes/prometheus are named `prometheus`"),
        "{err}"
    );
    assert_eq!(d.calls().len(), calls, "an engine was called");
    d.mara()
        .arg("validate")
        .args(["--only", "kubernetes/prometheus"])
        .assert()
        .code(3);
    // Without a runtime, Pulumi cannot run a program, but can destroy what it made.
    let logagent = d.root().join("kubernetes/logagent/Pulumi.yaml");
    let text = std::fs::read_to_string(&logagent).unwrap();
    let text: String = text
        .lines()
        .filter(|l| !l.starts_with("runtime:"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&logagent, text).unwrap();
    let output = d
        .mara()
        .args(["preview", "--only", "kubernetes/logagent"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(
        common::stderr(&output).contains("kubernetes/logagent/Pulumi.yaml: has no `runtime:`"),
        "{}",
        common::stderr(&output)
    );
    d.mara()
        .args(["destroy", "--yes", "--only", "kubernetes/logagent"])
        .assert()
        .success();
}

#[test]
fn destroy_and_refresh_never_create_a_stack() {
    let d = Deployment::new();
    let created = |d: &Deployment| {
        d.calls()
            .iter()
            .filter(|c| {
                let argv = c["argv"].as_array().unwrap();
                argv.iter().any(|a| a == "--create") || argv.iter().any(|a| a == "init")
            })
            .count()
    };
    // A typo of a stack that was never deployed anywhere: exit 3 naming it, only read-only
    // calls, nothing recorded.
    d.mara()
        .args(["up", "--yes", "--only", "cluster", "--only", "registry"])
        .assert()
        .success();
    let created_by_up = created(&d);
    for operation in ["destroy", "refresh"] {
        let output = d
            .mara()
            .args([operation, "--yes", "-s", "prdo"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(3));
        let err = common::stderr(&output);
        assert!(
            err.contains(
                "stack `prdo` does not exist in any selected project (the stacks that exist: dev)"
            ),
            "{err}"
        );
    }
    assert_eq!(created(&d), created_by_up, "a stack was created");
    assert!(d.operations("destroy").is_empty() && d.operations("refresh").is_empty());

    // dev exists for two projects only: the others are reported as such and not touched.
    let output = d
        .mara()
        .args(["destroy", "--yes", "--output", "json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    let status = |path: &str| {
        summary["projects"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["path"] == path)
            .unwrap()["status"]
            .clone()
    };
    assert_eq!(status("infrastructure/local/cluster"), "succeeded");
    assert_eq!(status("kubernetes/logstore"), "skipped");
    let mut destroyed: Vec<String> = d
        .operations("destroy")
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    destroyed.sort();
    assert_eq!(
        destroyed,
        [
            "infrastructure/local/cluster",
            "infrastructure/local/registry"
        ],
        "only the deployed projects"
    );
    assert_eq!(created(&d), created_by_up, "a stack was created");
    // Never deployed: `mara output` says null.
    let output = d
        .mara()
        .args(["output", "kubernetes/logstore"])
        .output()
        .unwrap();
    assert_eq!(common::stdout(&output).trim(), "null");
}

#[test]
fn a_report_that_cannot_be_written_is_a_warning_and_the_exit_stays_the_deployment_s() {
    let d = Deployment::new();
    let nowhere = d.root().join("no/such/dir");
    let output = d
        .mara()
        .args(["up", "--yes", "--only", "cluster", "--report"])
        .arg(nowhere.join("report.json"))
        .arg("--junit")
        .arg(nowhere.join("junit.xml"))
        .env("GITHUB_STEP_SUMMARY", nowhere.join("summary.md"))
        .output()
        .unwrap();
    let stderr = common::stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    for file in ["report.json", "junit.xml", "summary.md"] {
        assert!(
            stderr.contains(&format!(
                "warning: the report was not written: cannot write {}",
                nowhere.join(file).display()
            )),
            "{file}: {stderr}"
        );
    }
    let history = d
        .mara()
        .args(["--output", "json", "history"])
        .output()
        .unwrap();
    let history: Value = serde_json::from_slice(&history.stdout).unwrap();
    assert_eq!(history[0]["status"], "succeeded");
}

#[test]
fn a_list_valued_infra_type_is_an_error_that_says_so() {
    let d = Deployment::new();
    let config = d.root().join("config/pulumi/Pulumi.dev.yaml");
    let text =
        "config:\n  kubernetes:infra_type:\n    - local\n  local-cluster:cluster_name: mara-dev\n";
    std::fs::write(&config, text).unwrap();
    // Chosen by the configuration (mara.toml names no provider), and checked when named.
    std::fs::write(d.root().join("mara.toml"), "parallel = 4\n").unwrap();
    for args in [&["up", "--yes"][..], &["validate", "--provider", "local"]] {
        let output = d.mara().args(args).output().unwrap();
        assert_eq!(output.status.code(), Some(3), "{args:?}");
        let said = format!("{}{}", common::stdout(&output), common::stderr(&output));
        assert!(
            said.contains("Pulumi.dev.yaml:2")
                && said.contains("kubernetes:infra_type is not a plain value"),
            "{args:?}: {said}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        text,
        "left as it was"
    );
}

#[test]
fn a_configuration_without_infra_type_records_it_on_the_first_successful_up() {
    let d = Deployment::new();
    // A hand-written configuration (no kubernetes:infra_type), and no provider in mara.toml.
    let config = d.root().join("config/pulumi/Pulumi.dev.yaml");
    let text = "# written by hand\nconfig:\n  local-cluster:cluster_name: mara-dev # ours\n  local-cluster:node_count: 3\n";
    std::fs::write(&config, text).unwrap();
    std::fs::write(d.root().join("mara.toml"), "parallel = 4\n").unwrap();
    let output = d
        .mara()
        .args(["up", "--yes", "--provider", "local"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert!(
        common::stderr(&output)
            .contains("kubernetes:infra_type `local` recorded in config/pulumi/Pulumi.dev.yaml"),
        "{}",
        common::stderr(&output)
    );
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "# written by hand\nconfig:\n  kubernetes:infra_type: local\n  local-cluster:cluster_name: mara-dev # ours\n  local-cluster:node_count: 3\n",
        "only the key was added"
    );
    // mara's own bookkeeping is no change: the next `up --changed` runs nothing.
    let output = d
        .mara()
        .args(["up", "--yes", "--changed"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert!(
        common::stdout(&output).contains("Nothing changed since the last successful up"),
        "{}",
        common::stdout(&output)
    );
    // Afterwards the stack names its provider: destroy needs no --provider.
    let output = d.mara().args(["destroy", "--yes"]).output().unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
}

#[test]
fn merged_kubeconfigs_never_clobber_and_two_stacks_coexist() {
    let d = Deployment::new();
    let provider = d.root().join("providers/local.toml");
    let text = std::fs::read_to_string(&provider)
        .unwrap()
        .replace("merge = false", "merge = true");
    std::fs::write(&provider, text).unwrap();
    // The stack outputs generic names, as pulumi-eks does (its cluster is `kubernetes`)…
    let config = d.root().join("config/pulumi/Pulumi.dev.yaml");
    let dev = std::fs::read_to_string(&config)
        .unwrap()
        .replace("cluster_name: mara-dev", "cluster_name: kubernetes");
    std::fs::write(&config, &dev).unwrap();
    std::fs::write(d.root().join("config/pulumi/Pulumi.prod.yaml"), &dev).unwrap();
    // …and the user has a kubeadm cluster named `kubernetes` too.
    let kube = d.root().join("home/.kube/config");
    std::fs::create_dir_all(kube.parent().unwrap()).unwrap();
    let users_own = "apiVersion: v1\nkind: Config\nclusters:\n- name: kubernetes\n  cluster:\n    server: https://kubeadm.example:6443\nusers:\n- name: kubernetes-admin\n  user:\n    token: keep-me\ncontexts:\n- name: kubernetes-admin@kubernetes\n  context:\n    cluster: kubernetes\n    user: kubernetes-admin\ncurrent-context: kubernetes-admin@kubernetes\n";
    std::fs::write(&kube, users_own).unwrap();
    let kubectl = |args: &[&str]| {
        let output = StdCommand::new("kubectl")
            .args(args)
            .arg("--kubeconfig")
            .arg(&kube)
            .output()
            .expect("kubectl runs");
        String::from_utf8(output.stdout).unwrap().trim().to_string()
    };
    for stack in ["dev", "prod"] {
        let output = d
            .mara()
            .args(["up", "--yes", "--only", "cluster", "-s", stack])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", common::stderr(&output));
    }
    assert_eq!(
        kubectl(&["config", "get-contexts", "-o", "name"]),
        "kubernetes-admin@kubernetes\nmara-dev\nmara-prod"
    );
    assert_eq!(
        kubectl(&[
            "config",
            "view",
            "-o",
            "jsonpath={.clusters[?(@.name==\"kubernetes\")].cluster.server}"
        ]),
        "https://kubeadm.example:6443",
        "the user's `kubernetes` cluster still points at their own"
    );
    assert_eq!(kubectl(&["config", "current-context"]), "mara-prod");
    // The backup is the user's file as it was before mara first touched it.
    assert_eq!(
        std::fs::read_to_string(kube.with_file_name("config.mara.bak")).unwrap(),
        users_own
    );
    // An entry of mara's name that mara did not write for the stack is never replaced: here,
    // prod's renamed, its mark naming prod still.
    let foreign = std::fs::read_to_string(&kube)
        .unwrap()
        .replace("mara-prod", "mara-stage");
    std::fs::write(&kube, &foreign).unwrap();
    std::fs::copy(
        d.root().join("config/pulumi/Pulumi.dev.yaml"),
        d.root().join("config/pulumi/Pulumi.stage.yaml"),
    )
    .unwrap();
    let output = d
        .mara()
        .args(["up", "--yes", "--only", "cluster", "-s", "stage"])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(3),
        "refused before anything runs"
    );
    assert!(
        common::stderr(&output)
            .contains("already has a cluster `mara-stage` that mara did not write for this stack: it is stack `prod`'s, of this workspace"),
        "{}",
        common::stderr(&output)
    );
    assert_eq!(
        std::fs::read_to_string(&kube).unwrap(),
        foreign,
        "left as it was"
    );
    // Destroying dev removes dev's entries only, and gives back the context it found.
    let output = d
        .mara()
        .args(["destroy", "--yes", "--only", "cluster", "-s", "dev"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert_eq!(
        kubectl(&["config", "get-contexts", "-o", "name"]),
        "kubernetes-admin@kubernetes\nmara-stage"
    );
    assert_eq!(
        kubectl(&["config", "current-context"]),
        "mara-stage",
        "the current context was not dev's: it stays"
    );
}

#[test]
fn two_projects_writing_the_stacks_kubeconfig_are_refused_before_anything_runs() {
    let d = Deployment::new();
    let second = d.root().join("infrastructure/local/cluster2");
    std::fs::create_dir_all(&second).unwrap();
    common::copy_example(&d.root().join("infrastructure/local/cluster"), &second);
    let program = std::fs::read_to_string(second.join("Pulumi.yaml")).unwrap();
    std::fs::write(
        second.join("Pulumi.yaml"),
        program.replace("name: local-cluster", "name: local-cluster2"),
    )
    .unwrap();
    std::fs::write(
        d.root().join("providers/two.toml"),
        "description = \"Two clusters\"\nextends = \"local\"\n\n[[project]]\npath = \"infrastructure/local/cluster2\"\nstage = \"infrastructure\"\n\n[[project.on_success]]\nkind = \"kubeconfig\"\noutput = \"kubeconfig\"\n",
    )
    .unwrap();
    let said = "2 projects write the stack's kubeconfig, .mara/kube/dev.yaml: infrastructure/local/cluster (providers/local.toml:21), infrastructure/local/cluster2 (providers/two.toml:5); each would replace the one before it, there and in your kubeconfig";
    let output = d.mara().args(["validate", "-p", "two"]).output().unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", common::stdout(&output));
    assert!(
        common::stdout(&output).contains(said),
        "{}",
        common::stdout(&output)
    );
    // An update, and a preview of one (a drift check), alike.
    for args in [&["up", "--yes", "-p", "two"][..], &["preview", "-p", "two"]] {
        let output = d.mara().args(args).output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(3),
            "{args:?}: {}",
            common::stderr(&output)
        );
        assert!(
            common::stderr(&output).contains(said),
            "{}",
            common::stderr(&output)
        );
    }
    assert!(d.calls().is_empty(), "no engine ran");
    assert!(
        !d.root().join(".mara/kube").exists(),
        "no kubeconfig written"
    );
    // One project that writes it is the rule: the example's own provider passes.
    let output = d.mara().args(["validate"]).output().unwrap();
    assert!(!common::stdout(&output).contains("write the stack's kubeconfig"));
}

#[test]
fn a_destroy_that_would_leave_deployed_dependents_is_refused_unless_asked() {
    let d = Deployment::new();
    let output = d.mara().args(["up", "--yes"]).output().unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let destroys = || d.operations("destroy").len();
    let output = d
        .mara()
        .args(["destroy", "--only", "cluster", "--yes"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", common::stderr(&output));
    let said = common::stderr(&output);
    assert!(
        said.contains("destroying infrastructure/local/cluster would leave 12 deployed projects on stack dev that depend on it: infrastructure/kubeconfig, kubernetes/secrets,"),
        "{said}"
    );
    assert!(
        said.contains("--with-dependents") && said.contains("--orphan-dependents"),
        "{said}"
    );
    assert_eq!(destroys(), 0, "nothing destroyed");
    // Its dry run says the same.
    let output = d
        .mara()
        .args(["destroy", "--only", "cluster", "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", common::stderr(&output));
    // It is said with the run's other problems, in one go.
    let output = d
        .mara()
        .args(["destroy", "--only", "cluster", "--yes"])
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let said = common::stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{said}");
    assert!(
        said.contains("would leave 12 deployed projects")
            && said.contains("pulumi: not found on PATH"),
        "{said}"
    );

    // A leaf has nothing standing on it.
    let output = d
        .mara()
        .args(["destroy", "--only", "sirius", "--yes"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert_eq!(destroys(), 1);
    // Said so: the cluster alone goes.
    let output = d
        .mara()
        .args([
            "destroy",
            "--only",
            "cluster",
            "--orphan-dependents",
            "--yes",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert_eq!(destroys(), 2);
    // The cluster is destroyed already: destroying it again leaves no one an orphan.
    let output = d
        .mara()
        .args(["destroy", "--only", "cluster", "--yes"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    // What is left depends on nothing deployed any more: the rest goes as a whole.
    let output = d
        .mara()
        .args([
            "destroy",
            "--only",
            "kubeconfig",
            "--with-dependents",
            "--yes",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
}

#[test]
fn destroying_a_stack_mara_destroyed_already_is_done_and_a_typo_is_still_caught() {
    let d = Deployment::new();
    let run = |args: &[&str]| d.mara().args(args).output().unwrap();
    let output = run(&["up", "--yes"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    let typo = run(&["destroy", "--yes", "--stack", "dve"]);
    assert_eq!(typo.status.code(), Some(3), "{}", common::stderr(&typo));
    assert!(
        common::stderr(&typo).contains(
            "stack `dve` does not exist in any selected project (the stacks that exist: dev)"
        ),
        "{}",
        common::stderr(&typo)
    );
    let output = run(&["destroy", "--remove", "--yes"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    let destroys = d.operations("destroy").len();
    // A teardown job run twice: nothing to do, exit 0, no engine destroy, no record.
    let again = run(&["destroy", "--yes"]);
    assert!(again.status.success(), "{}", common::stderr(&again));
    assert!(
        common::stdout(&again).contains("Stack dev was destroyed already, by run "),
        "{}",
        common::stdout(&again)
    );
    assert_eq!(d.operations("destroy").len(), destroys);
    let history = run(&["--output", "json", "history"]);
    let runs: Value = serde_json::from_slice(&history.stdout).unwrap();
    assert_eq!(
        runs.as_array().unwrap().len(),
        2,
        "up and destroy: {runs:#}"
    );
    // A name mara never saw is still a mistake.
    let typo = run(&["destroy", "--yes", "--stack", "dve"]);
    assert_eq!(typo.status.code(), Some(3), "{}", common::stderr(&typo));
    assert!(
        common::stderr(&typo).contains("no stack exists yet"),
        "{}",
        common::stderr(&typo)
    );
}

#[test]
fn a_destroy_that_finds_no_stack_while_projects_are_deployed_is_a_mistake() {
    let d = Deployment::new();
    let run = |args: &[&str]| d.mara().args(args).output().unwrap();
    let output = run(&["up", "--yes"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    // A part destroyed: the last destroy succeeded, and the rest is still deployed.
    let output = run(&["destroy", "--yes", "--only", "sirius"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    // The same stack looked for on another backend, where nothing is: not "destroyed already".
    std::fs::create_dir(d.root().join("elsewhere")).unwrap();
    let env_file = d.root().join("config/pulumi/environment");
    let text = std::fs::read_to_string(&env_file).unwrap();
    let moved = text.replace("file://.mara/pulumi-state", "file://elsewhere");
    assert_ne!(moved, text, "the example's environment names its backend");
    std::fs::write(&env_file, moved).unwrap();
    let wrong = run(&["destroy", "--yes"]);
    assert_eq!(wrong.status.code(), Some(3), "{}", common::stdout(&wrong));
    assert!(
        common::stderr(&wrong).contains("stack `dev` does not exist in any selected project"),
        "{}",
        common::stderr(&wrong)
    );
    assert!(!common::stdout(&wrong).contains("destroyed already"));
}

#[test]
fn an_engine_that_crashes_without_an_error_line_still_says_why() {
    let d = Deployment::new();
    let report = d.root().join("report.json");
    let output = d
        .mara()
        .args(["up", "--yes", "--only", "cluster", "--report"])
        .arg(&report)
        .env("PULUMI_STAND_IN_CRASH", "local-cluster")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", common::stderr(&output));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let cluster = common::project(&report, "infrastructure/local/cluster");
    assert_eq!(cluster["status"], "failed");
    assert_eq!(cluster["reason"], "KeyError: 'aws:profile'", "{report:#}");
    assert!(
        common::stdout(&output).contains("KeyError: 'aws:profile'"),
        "the summary says it: {}",
        common::stdout(&output)
    );
}

#[test]
fn the_users_context_comes_back_whatever_order_workspaces_are_destroyed_in() {
    let shared = tempfile::tempdir().unwrap();
    let kube = shared.path().join("config");
    let existing = "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster:\n    server: https://prod.example.com\n    namespace: \"0123\"\nusers:\n- name: prod-admin\n  user:\n    token: \"1e3\"\ncontexts:\n- name: prod\n  context:\n    cluster: prod\n    user: prod-admin\ncurrent-context: prod\n";
    let workspaces: Vec<Deployment> = (0..3)
        .map(|i| {
            let d = Deployment::new();
            let provider = d.root().join("providers/local.toml");
            let text = std::fs::read_to_string(&provider).unwrap();
            std::fs::write(&provider, text.replace("merge = false", "merge = true")).unwrap();
            let config = d.root().join("config/pulumi");
            let dev = std::fs::read_to_string(config.join("Pulumi.dev.yaml")).unwrap();
            std::fs::write(config.join(format!("Pulumi.w{i}.yaml")), dev).unwrap();
            d
        })
        .collect();
    let run = |i: usize, args: &[&str]| {
        let output = workspaces[i]
            .mara()
            .args(args)
            .args(["--only", "cluster", "-s", &format!("w{i}")])
            .env("KUBECONFIG", &kube)
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", common::stderr(&output));
    };
    for order in [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ] {
        std::fs::write(&kube, existing).unwrap();
        for i in 0..3 {
            run(i, &["up", "--yes"]);
        }
        let merged = std::fs::read_to_string(&kube).unwrap();
        assert!(merged.contains("current-context: mara-w2"), "{merged}");
        for i in order {
            run(i, &["destroy", "--yes"]);
        }
        let back = std::fs::read_to_string(&kube).unwrap();
        assert!(
            back.contains("current-context: prod") && !back.contains("mara-w"),
            "{order:?}:\n{back}"
        );
        // The user's strings that look like numbers stay strings.
        assert!(
            back.contains("\"0123\"") && back.contains("\"1e3\""),
            "{back}"
        );
    }
}

#[test]
fn a_kubeconfig_mara_cannot_merge_into_is_refused_and_left_as_it_is() {
    let d = Deployment::new();
    let provider = d.root().join("providers/local.toml");
    let text = std::fs::read_to_string(&provider).unwrap();
    std::fs::write(&provider, text.replace("merge = false", "merge = true")).unwrap();
    let kube = d.root().join("home/.kube/config");
    std::fs::create_dir_all(kube.parent().unwrap()).unwrap();
    for (bad, said) in [
        (
            "apiVersion: v1\nclusters:\n  prod: {}\n",
            "config:2: `clusters` is a mapping",
        ),
        ("- a\n- b\n", "config:1: a kubeconfig is a mapping"),
        ("just text\n", "config:1: a kubeconfig is a mapping"),
    ] {
        std::fs::write(&kube, bad).unwrap();
        let output = d
            .mara()
            .args(["up", "--yes", "--only", "cluster"])
            .output()
            .unwrap();
        // Checked before anything runs: exit 3, no engine call.
        assert_eq!(output.status.code(), Some(3), "{}", common::stderr(&output));
        assert!(
            common::stderr(&output).contains(said),
            "{}",
            common::stderr(&output)
        );
        assert!(d.calls().is_empty(), "nothing ran");
        assert_eq!(
            std::fs::read_to_string(&kube).unwrap(),
            bad,
            "left as it is"
        );
    }
}

#[test]
fn a_kubeconfig_as_large_as_kubectl_reads_is_merged_into() {
    let d = Deployment::new();
    let provider = d.root().join("providers/local.toml");
    let text = std::fs::read_to_string(&provider).unwrap();
    std::fs::write(&provider, text.replace("merge = false", "merge = true")).unwrap();
    let kube = d.root().join("home/.kube/config");
    std::fs::create_dir_all(kube.parent().unwrap()).unwrap();
    // 3 MiB and more: thousands of clusters, users and contexts.
    let mut big = String::from("apiVersion: v1\nkind: Config\nclusters:\n");
    for i in 0..9000 {
        big.push_str(&format!(
            "- name: c{i}\n  cluster:\n    server: https://c{i}.example.com:6443\n    certificate-authority-data: {}\n",
            "QUJD".repeat(40)
        ));
    }
    big.push_str("users:\n");
    for i in 0..9000 {
        big.push_str(&format!("- name: u{i}\n  user:\n    token: t{i}\n"));
    }
    big.push_str("contexts:\n");
    for i in 0..9000 {
        big.push_str(&format!(
            "- name: x{i}\n  context:\n    cluster: c{i}\n    user: u{i}\n"
        ));
    }
    assert!(big.len() > 3 << 20);
    std::fs::write(&kube, &big).unwrap();
    let output = d
        .mara()
        .args(["up", "--yes", "--only", "cluster"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stdout(&output));
    let merged = std::fs::read_to_string(&kube).unwrap();
    assert!(merged.contains("mara-dev") && merged.contains("name: x8999"));
}

/// What mara keeps of its own (kubeconfigs, the ledger, logs) is ignored by git wherever it
/// makes its directory: a `.gitignore` holding `*`, written once and never rewritten.
#[test]
fn the_state_directory_is_ignored_by_git_and_its_ignore_file_left_alone() {
    let d = Deployment::new();
    let git = |args: &[&str]| {
        let output = std::process::Command::new("git")
            .args(args)
            .current_dir(d.root())
            .output()
            .expect("git runs");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    git(&["init", "-q"]);
    let output = d
        .mara()
        .args(["up", "--yes", "--only", "cluster"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let ignore = d.root().join(".mara/.gitignore");
    assert!(std::fs::read_to_string(&ignore).unwrap().ends_with("\n*\n"));
    assert!(d.root().join(".mara/kube/dev.yaml").is_file());
    let untracked = git(&["status", "--porcelain", "--untracked-files=all"]);
    assert!(!untracked.contains(".mara/"), "{untracked}");
    // A person's own ignore file stays theirs.
    std::fs::write(&ignore, "ledger.db\n").unwrap();
    let output = d
        .mara()
        .args(["up", "--yes", "--only", "cluster"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert_eq!(std::fs::read_to_string(&ignore).unwrap(), "ledger.db\n");
}

/// A state directory set to the workspace's own root is no directory of mara's: no ignore file
/// there would hide the repository.
#[test]
fn a_state_directory_that_is_the_workspace_gets_no_ignore_file() {
    let d = Deployment::new();
    let toml = d.root().join("mara.toml");
    let text = std::fs::read_to_string(&toml).unwrap_or_default();
    std::fs::write(&toml, format!("state_dir = \".\"\n{text}")).unwrap();
    // Without an ignore file of the repository's own.
    let _ = std::fs::remove_file(d.root().join(".gitignore"));
    let output = d
        .mara()
        .args(["up", "--yes", "--only", "cluster"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert!(d.root().join("ledger.db").exists() || d.root().join("kube").exists());
    assert!(!d.root().join(".gitignore").exists());
}
