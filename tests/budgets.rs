//! Concurrency budgets and retries (docs/formats.md, "Budgets and retries"), on the Pulumi
//! stand-in, which logs each call's start and end: the scheduler is judged by the intervals it
//! recorded, never by wall time. What a retry matches is tried on command projects and the real
//! Terraform, which count their own runs.

mod common;

use common::Workspace;
use serde_json::Value;

/// A workspace of provider `name` (its file `provider`, its Pulumi projects `projects`) on the
/// stand-in, with `toml` added to mara.toml.
fn on_the_stand_in(
    name: &str,
    provider: &str,
    projects: &[&str],
    toml: &str,
) -> (Workspace, tempfile::TempDir) {
    let w = Workspace::new(&[
        ("mara.toml", &format!("provider = \"{name}\"\n{toml}")),
        (&format!("providers/{name}.toml"), provider),
        (
            "config/pulumi/environment",
            "PULUMI_STACK=dev\nPULUMI_BACKEND_URL=file://.mara/pulumi-state\nPULUMI_CONFIG_PASSPHRASE=test\n",
        ),
        (
            "config/pulumi/Pulumi.dev.yaml",
            &format!("config:\n  kubernetes:infra_type: {name}\n"),
        ),
    ]);
    for path in projects {
        w.project(path, &path.replace('/', "-"));
    }
    (w, common::stand_in_bin())
}

/// A workspace of 24 Pulumi projects with no edges between them: `slow/s00`… in pool `slow`
/// (its limit in mara.toml's `[pools]`), `fast/f00`… in none; `toml` is added to mara.toml.
fn wide(toml: &str) -> (Workspace, tempfile::TempDir) {
    let mut provider = String::from("description = \"Wide\"\ninfra_type = \"wide\"\n");
    let mut paths = Vec::new();
    for i in 0..12 {
        for (group, pool) in [("slow/s", "\npool = \"slow\""), ("fast/f", "")] {
            let path = format!("{group}{i:02}");
            provider.push_str(&format!("\n[[project]]\npath = \"{path}\"{pool}\n"));
            paths.push(path);
        }
    }
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    on_the_stand_in("wide", &provider, &paths, toml)
}

fn mara(w: &Workspace, bin: &tempfile::TempDir) -> assert_cmd::Command {
    let mut cmd = w.mara();
    cmd.env("PATH", common::path_with(bin.path()))
        .env("HOME", w.path().join("home"))
        .env("PULUMI_STAND_IN_LOG", w.path().join("calls.jsonl"));
    cmd
}

/// Each `up` the stand-in ran: (project directory, start, end).
fn ups(w: &Workspace) -> Vec<(String, f64, f64)> {
    let log = std::fs::read_to_string(w.path().join("calls.jsonl")).unwrap_or_default();
    log.lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|call| (call["argv"].as_array().unwrap().iter()).any(|a| a == "up"))
        .map(|call| {
            let cwd = call["cwd"].as_str().unwrap();
            let project = cwd.strip_prefix(w.path().to_str().unwrap()).unwrap();
            (
                project.trim_start_matches('/').to_string(),
                call["start"].as_f64().unwrap(),
                call["end"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// The most of `intervals` that overlap at once.
fn most_at_once<'a>(intervals: impl Iterator<Item = &'a (String, f64, f64)>) -> usize {
    let mut edges: Vec<(f64, i32)> = intervals
        .flat_map(|(_, start, end)| [(*start, 1), (*end, -1)])
        .collect();
    // An end before a start at the same moment: touching is not overlapping.
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut most) = (0, 0);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

#[test]
fn a_pool_runs_no_more_than_its_limit_and_the_rest_runs_as_wide_as_parallel() {
    let (w, bin) = wide("[pools]\nslow = 2\n");
    // The plan shows the pools.
    let output = mara(&w, &bin)
        .args(["show-execution", "--format", "json"])
        .output()
        .unwrap();
    let plan: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(plan["pools"], serde_json::json!({"slow": 2}));
    assert_eq!(plan["projects"][0]["pool"], "slow", "{plan:#}");
    assert!(plan["projects"][1].get("pool").is_none(), "{plan:#}");
    let output = mara(&w, &bin)
        .args(["up", "--yes", "--parallel", "8"])
        .env("PULUMI_STAND_IN_DELAY_MS", "300")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let ups = ups(&w);
    assert_eq!(ups.len(), 24, "{ups:?}");
    let slow = most_at_once(ups.iter().filter(|(p, ..)| p.starts_with("slow/")));
    assert_eq!(slow, 2, "the pool's limit, reached and never passed");
    let all = most_at_once(ups.iter());
    assert_eq!(all, 8, "--parallel, reached and never passed");
    // The stream says which project a free slot waited on the pool for, once each.
    let said = common::stdout(&output);
    let waited: Vec<&str> = (said.lines())
        .filter(|l| l.ends_with("waits for pool slow (2 of 2 running)"))
        .collect();
    assert!(!waited.is_empty(), "{said}");
    let mut projects: Vec<&str> = waited
        .iter()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    projects.dedup();
    assert_eq!(projects.len(), waited.len(), "{said}");
    assert!(projects.iter().all(|p| p.starts_with("[slow/")), "{said}");
}

#[test]
fn an_engine_limit_holds_every_project_of_the_engine() {
    let (w, bin) = wide("[pools]\nslow = 12\n[limits]\npulumi = 3\n");
    let output = mara(&w, &bin)
        .args(["up", "--yes", "--parallel", "8"])
        .env("PULUMI_STAND_IN_DELAY_MS", "200")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let ups = ups(&w);
    assert_eq!(ups.len(), 24);
    assert_eq!(most_at_once(ups.iter()), 3);
}

#[test]
fn validate_refuses_an_unknown_pool_and_a_limit_below_one() {
    let (w, bin) = wide("[pools]\nslwo = 2\n");
    let output = mara(&w, &bin).arg("validate").output().unwrap();
    let said = common::stdout(&output) + &common::stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{said}");
    assert!(
        said.contains("providers/wide.toml:6: project `slow/s00`: pool `slow` has no limit (12 projects name it)"),
        "{said}"
    );
    assert_eq!(said.matches("has no limit").count(), 1, "{said}");
    // A run refuses it before anything runs.
    let output = mara(&w, &bin).args(["up", "--yes"]).output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(common::stderr(&output).contains("pool `slow` has no limit"));
    assert!(said.contains("hint: did you mean `slwo`?"), "{said}");
    assert!(ups(&w).is_empty());

    let (w, bin) = wide("[pools]\nslow = 0\n[limits]\nterraform = -1\n");
    let output = mara(&w, &bin).arg("validate").output().unwrap();
    let said = common::stdout(&output) + &common::stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{said}");
    assert!(
        said.contains(
            "mara.toml:3: `pools.slow`: must be at least 1, not 0: a limit of 0 would run nothing"
        ),
        "{said}"
    );
    assert!(
        said.contains("mara.toml:5: `limits.terraform`: must be at least 1, not -1"),
        "{said}"
    );
    let (w, bin) = wide("[limits]\nterrafrom = 2\n");
    let output = mara(&w, &bin).arg("validate").output().unwrap();
    let said = common::stdout(&output) + &common::stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{said}");
    assert!(said.contains("mara.toml:3"), "{said}");
    assert!(said.contains("unknown variant `terrafrom`"), "{said}");
}

/// One Pulumi project `app` whose `up` fails its first `times` times with `message`, and
/// mara.toml's `retry`.
fn flaky(retry: &str) -> (Workspace, tempfile::TempDir) {
    let provider = "description = \"One\"\ninfra_type = \"one\"\n\n[[project]]\npath = \"app\"\n";
    on_the_stand_in("one", provider, &["app"], retry)
}

const RETRY: &str = "[retry]\nerrors = [\"rate exceeded\", \"(?i)tls handshake timeout\"]\nattempts = 3\nbackoff = \"50ms\"\n";

#[test]
fn a_transient_failure_runs_the_operation_again_and_the_report_counts_the_attempts() {
    let (w, bin) = flaky(RETRY);
    let report = w.path().join("report.json");
    let output = mara(&w, &bin)
        .args(["up", "--yes", "--report"])
        .arg(&report)
        .env("PULUMI_STAND_IN_FLAKY", "app=2:Throttling: rate exceeded")
        .output()
        .unwrap();
    let said = common::stdout(&output);
    assert!(output.status.success(), "{said}{}", common::stderr(&output));
    assert_eq!(ups(&w).len(), 3, "two failures, then the success");
    assert!(
        said.contains(
            "[app] attempt 1 of 3 failed (Throttling: rate exceeded): trying again in 0.1s"
        ),
        "{said}"
    );
    assert!(said.contains("[app] attempt 2 of 3 failed"), "{said}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(report["projects"][0]["status"], "succeeded");
    assert_eq!(report["projects"][0]["attempts"], 3, "{report:#}");
    assert!(said.contains("(3 attempts)"), "the table says it: {said}");

    // One failure more than the attempts: the run fails, having tried three times.
    let (w, bin) = flaky(RETRY);
    let output = mara(&w, &bin)
        .args(["up", "--yes"])
        .env("PULUMI_STAND_IN_FLAKY", "app=3:TLS handshake timeout")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(ups(&w).len(), 3);
}

#[test]
fn a_failure_no_pattern_names_and_a_held_lock_are_not_retried() {
    for message in [
        "quota exhausted",
        "Conflict: Another update is currently in progress",
    ] {
        let retry =
            "[retry]\nerrors = [\"rate exceeded\", \"update\", \"quota\"]\nbackoff = \"10ms\"\n";
        let retry = match message.starts_with("quota") {
            true => retry.replace(", \"quota\"", ""),
            false => retry.to_string(),
        };
        let (w, bin) = flaky(&retry);
        let output = mara(&w, &bin)
            .args(["up", "--yes"])
            .env("PULUMI_STAND_IN_FLAKY", format!("app=1:{message}"))
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "{message}");
        assert_eq!(ups(&w).len(), 1, "{message}: not run again");
        assert!(!common::stdout(&output).contains("trying again"));
    }
    // Without [retry], nothing is retried.
    let (w, bin) = flaky("");
    let output = mara(&w, &bin)
        .args(["up", "--yes"])
        .env("PULUMI_STAND_IN_FLAKY", "app=1:rate exceeded")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(ups(&w).len(), 1);
}

#[test]
fn ctrl_c_during_a_backoff_ends_the_wait_at_once() {
    let (w, bin) = flaky("[retry]\nerrors = [\"rate exceeded\"]\nbackoff = \"10m\"\n");
    let mut run = std::process::Command::new(assert_cmd::cargo::cargo_bin("mara"))
        .current_dir(w.path())
        .env("PATH", common::path_with(bin.path()))
        .env("HOME", w.path().join("home"))
        .env("PULUMI_STAND_IN_LOG", w.path().join("calls.jsonl"))
        .env("PULUMI_STAND_IN_FLAKY", "app=1:rate exceeded")
        .args(["up", "--yes"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The first attempt ended: the run waits its backoff (ten minutes).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while ups(&w).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the first attempt never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    unsafe { libc::kill(run.id() as i32, libc::SIGINT) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = run.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still waiting out its backoff"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(130));
    assert_eq!(ups(&w).len(), 1, "not run again");
}

/// A project a budget holds back when its dependencies end is started once, not also prepared
/// beside it (found by review: it ran twice, and its dependents' count went below zero).
#[test]
fn a_project_a_budget_holds_after_its_dependencies_runs_once() {
    let provider = "description = \"Held\"\ninfra_type = \"held\"\n
[[project]]\npath = \"a\"\npool = \"p\"\n
[[project]]\npath = \"x\"\n
[[project]]\npath = \"b\"\npool = \"p\"\nafter = [\"x\"]\n
[[project]]\npath = \"d\"\nafter = [\"b\"]\n";
    let (w, bin) = on_the_stand_in("held", provider, &["a", "x", "b", "d"], "[pools]\np = 1\n");
    let output = mara(&w, &bin)
        .args(["up", "--yes", "--parallel", "2"])
        .env("PULUMI_STAND_IN_DELAY_MS", "a=1500,x=200,*=300")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        common::stdout(&output),
        common::stderr(&output)
    );
    let mut ran: Vec<String> = ups(&w).into_iter().map(|(p, ..)| p).collect();
    ran.sort();
    assert_eq!(ran, ["a", "b", "d", "x"], "each once");
    let said = common::stdout(&output);
    assert_eq!(said.matches("[b] up started").count(), 1, "{said}");
}

#[test]
fn a_retry_that_cannot_be_is_refused_with_its_line() {
    let (w, bin) = flaky("[retry]\nerrors = [\"\", \"(rate\"]\nattempts = 0\nbackoff = \"2h\"\n");
    let output = mara(&w, &bin).arg("validate").output().unwrap();
    let said = common::stdout(&output) + &common::stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{said}");
    for line in [
        "mara.toml:3: `retry.errors`: an empty pattern finds every failure",
        "mara.toml:3: `retry.errors`: `(rate` is not a regular expression: unclosed group",
        "mara.toml:4: `retry.attempts`: must be from 1 to 10",
        "mara.toml:5: `retry.backoff`: `2h` is longer than an hour",
    ] {
        assert!(said.contains(line), "{line}\n---\n{said}");
    }
    // A backoff in any other form: said with its line and key, and what would do.
    let (w, bin) = flaky("[retry]\nerrors = [\"rate\"]\nbackoff = \"2 shakes\"\n");
    let output = mara(&w, &bin).arg("validate").output().unwrap();
    let said = common::stdout(&output) + &common::stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{said}");
    assert!(
        said.contains("mara.toml:4: `retry.backoff`: `2 shakes` is not a duration (unknown time unit \"shakes\"")
            && said.contains("as in \"2s\", \"0.5s\", \"1m30s\", \"1h\" or \"2d\""),
        "{said}"
    );
    // Fractions and compounds are durations.
    for backoff in ["0.5s", "1m30s", "1h"] {
        let (w, bin) = flaky(&format!(
            "[retry]\nerrors = [\"rate\"]\nbackoff = \"{backoff}\"\n"
        ));
        let output = mara(&w, &bin).arg("validate").output().unwrap();
        let said = common::stdout(&output) + &common::stderr(&output);
        assert!(output.status.success(), "{backoff}: {said}");
    }
    // A project's own, naming no error: said where it is, with the project.
    let (w, bin) = flaky("");
    w.write(
        "providers/one.toml",
        "description = \"One\"\ninfra_type = \"one\"\n\n[[project]]\npath = \"app\"\n[project.retry]\nattempts = 2\n",
    );
    let output = mara(&w, &bin).arg("validate").output().unwrap();
    let said = common::stdout(&output) + &common::stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{said}");
    assert!(
        said.contains("providers/one.toml:6: project `app`, `retry.errors`: names no error"),
        "{said}"
    );
}

/// What a retry of `rate exceeded` is mara.toml's.
const RATE_EXCEEDED: &str =
    "[retry]\nerrors = [\"rate exceeded\"]\nattempts = 3\nbackoff = \"10ms\"\n";

/// A workspace of one command project, `app`, whose `up` is `up` (`{runs}` in it is a file in
/// the workspace, a line of which each run adds), with `retry` in mara.toml.
fn one_command(up: &str, retry: &str) -> Workspace {
    let w = Workspace::new(&[
        (
            "mara.toml",
            &format!("provider = \"tools\"\nengine = \"command\"\n{retry}"),
        ),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        ("config/pulumi/Pulumi.dev.yaml", "config: {}\n"),
    ]);
    let up = up.replace("{runs}", &w.path().join("runs").display().to_string());
    w.write(
        "providers/tools.toml",
        &format!(
            "description = \"Tools\"\n\n[[project]]\npath = \"app\"\nup = '''\n{up}\n'''\ndestroy = \"true\"\n"
        ),
    );
    w
}

/// How many times the project ran, by the lines its runs added to `runs`.
fn runs(w: &Workspace) -> usize {
    std::fs::read_to_string(w.path().join("runs"))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

/// A command that printed `rate exceeded` for another resource, then failed for a reason of its
/// own in its last lines, failed for good: it is not run again (it was, when the pattern was
/// searched in all it printed).
#[test]
fn a_pattern_printed_earlier_by_a_command_is_not_why_it_failed() {
    let w = one_command(
        "echo run >> '{runs}'
echo 'aws_s3_bucket.logs: Throttling: rate exceeded, retrying in 1s'
i=0
while [ $i -lt 25 ]; do echo \"aws_iam_role.app: still creating ($i)\"; i=$((i+1)); done
echo 'error: creating IAM role app: AccessDenied: not authorized' >&2
exit 1",
        RATE_EXCEEDED,
    );
    let output = w.mara().args(["up", "--yes"]).output().unwrap();
    let said = common::stdout(&output) + &common::stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{said}");
    assert!(
        said.contains("[app] aws_s3_bucket.logs: Throttling: rate exceeded"),
        "the pattern is in its output: {said}"
    );
    assert_eq!(runs(&w), 1, "run once: {said}");
    assert!(!said.contains("trying again"), "{said}");
    assert!(
        said.contains("creating IAM role app: AccessDenied: not authorized"),
        "{said}"
    );
}

/// A command whose last lines say the pattern is run again, and its report counts the runs.
#[test]
fn a_command_that_fails_saying_the_pattern_runs_again() {
    let w = one_command(
        "echo run >> '{runs}'
i=0
while [ $i -lt 25 ]; do echo \"aws_s3_bucket.data: still creating ($i)\"; i=$((i+1)); done
if [ \"$(wc -l < '{runs}')\" -lt 2 ]; then
  echo 'error: creating bucket data: Throttling: rate exceeded' >&2
  exit 1
fi",
        RATE_EXCEEDED,
    );
    let (code, report) = common::json_report(w.mara(), &["up", "--yes"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(runs(&w), 2, "a failure, then the success");
    assert_eq!(report["projects"][0]["attempts"], 2, "{report:#}");

    // Its last line is not the one the pattern found: the attempt's line says both.
    let w = one_command(
        "echo run >> '{runs}'
if [ \"$(wc -l < '{runs}')\" -lt 2 ]; then
  echo 'creating bucket data: Throttling: rate exceeded' >&2
  echo 'error: giving up on bucket data' >&2
  exit 1
fi",
        RATE_EXCEEDED,
    );
    let output = w.mara().args(["up", "--yes"]).output().unwrap();
    let said = common::stdout(&output) + &common::stderr(&output);
    assert!(output.status.success(), "{said}");
    assert!(
        said.contains("attempt 1 of 3 failed (giving up on bucket data; retried for: creating bucket data: Throttling: rate exceeded): trying again in"),
        "{said}"
    );
}

/// A Terraform module of two resources: `chatty` prints `rate exceeded` as it is made, then
/// `broken` runs `broken.sh` (a line added to `runs` each time, then `broken`, where `{runs}`
/// names that file), both through `local-exec`.
fn two_resources(broken: &str) -> Workspace {
    let module = r#"resource "terraform_data" "chatty" {
  provisioner "local-exec" {
    command = "echo 'aws_s3_bucket.logs: Throttling: rate exceeded, retrying'"
  }
}

resource "terraform_data" "broken" {
  depends_on = [terraform_data.chatty]
  provisioner "local-exec" {
    command = "sh ${path.module}/broken.sh"
  }
}
"#;
    let w = Workspace::new(&[
        (
            "mara.toml",
            &format!("provider = \"tf\"\nengine = \"terraform\"\n{RATE_EXCEEDED}"),
        ),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        ("config/pulumi/Pulumi.dev.yaml", "config: {}\n"),
        (
            "providers/tf.toml",
            "description = \"One module\"\n\n[[project]]\npath = \"module\"\n",
        ),
        ("module/main.tf", module),
    ]);
    let runs = w.path().join("runs").display().to_string();
    w.write(
        "module/broken.sh",
        &format!(
            "echo run >> '{runs}'\n{}\n",
            broken.replace("{runs}", &runs)
        ),
    );
    w
}

/// `mara up --yes` in `w` with Terraform's variables cleared.
fn terraform_up(w: &Workspace) -> assert_cmd::Command {
    let mut cmd = w.mara();
    cmd.env("HOME", w.path().join("home"))
        .env_remove("TF_WORKSPACE")
        .env_remove("TF_DATA_DIR")
        .args(["up", "--yes"]);
    cmd
}

/// Terraform's error diagnostics are what a retry matches: not a resource's output before
/// them, even one that says the pattern; an error diagnostic that says it is retried.
#[test]
fn terraform_is_retried_on_its_error_diagnostics_alone() {
    if common::terraform().is_none() {
        return;
    }
    let w = two_resources("echo 'AccessDenied: not authorized' >&2\nexit 1");
    let output = terraform_up(&w).output().unwrap();
    let said = common::stdout(&output) + &common::stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{said}");
    assert!(
        said.contains("(local-exec): aws_s3_bucket.logs: Throttling: rate exceeded"),
        "the pattern is in its output: {said}"
    );
    assert_eq!(runs(&w), 1, "not run again: {said}");
    assert!(!said.contains("trying again"), "{said}");
    assert!(
        said.contains("Output: AccessDenied: not authorized"),
        "{said}"
    );

    // Its first run fails saying the pattern (in Terraform's diagnostic: `Output: …`); its
    // second succeeds.
    let w = two_resources(
        "if [ \"$(wc -l < '{runs}')\" -lt 2 ]; then\n  echo 'Throttling: rate exceeded' >&2\n  exit 1\nfi",
    );
    let output = terraform_up(&w).output().unwrap();
    let said = common::stdout(&output) + &common::stderr(&output);
    assert!(output.status.success(), "{said}");
    assert_eq!(runs(&w), 2, "a failure, then the success");
    assert!(
        said.contains("[module] attempt 1 of 3 failed (local-exec provisioner error: "),
        "{said}"
    );
    // The reason holds what the pattern found: it is not said twice.
    let line = (said.lines())
        .find(|l| l.contains("attempt 1 of 3 failed"))
        .unwrap_or_default();
    assert!(line.contains("Output: Throttling: rate exceeded"), "{line}");
    assert!(!line.contains("retried for"), "{line}");
    assert!(said.contains("(2 attempts)"), "{said}");
}
