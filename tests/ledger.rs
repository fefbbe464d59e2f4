//! The run ledger through the binary: one run per stack at a time, a killed run taken over and
//! recorded abandoned, cancel from another process, resume, only what changed, and reading the
//! ledger while a run writes it.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Deployment as Ws;
use serde_json::Value;

impl Ws {
    fn new() -> Ws {
        Ws::of("mara-local")
    }

    /// `mara <args>` in the background, with `delay_ms` per engine operation.
    fn spawn(&self, args: &[&str], delay_ms: u64) -> Child {
        Command::new(assert_cmd::cargo::cargo_bin("mara"))
            .args(args)
            .current_dir(self.root())
            .envs(self.environment())
            .env("NO_COLOR", "1")
            .env("PULUMI_STAND_IN_DELAY_MS", delay_ms.to_string())
            .env_remove("CI")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Waits until the ledger says `stack` is held by a running run with a running project.
    fn wait_until_running(&self, run: &mut Child) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let output = self
                .mara()
                .args(["--output", "json", "status"])
                .output()
                .unwrap();
            let last = format!("{}{}", common::stdout(&output), common::stderr(&output));
            if let Ok(Value::Array(runs)) = serde_json::from_slice::<Value>(&output.stdout)
                && let Some(run) = runs.into_iter().next()
                && run["status"] == "running"
                && run["projects"]
                    .as_array()
                    .is_some_and(|p| p.iter().any(|p| p["status"] == "running"))
            {
                return run;
            }
            if let Some(status) = run.try_wait().unwrap() {
                let mut err = String::new();
                std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut err).unwrap();
                panic!(
                    "the run ended ({status}) before it was seen running: {err}\nstatus said:\n{last}"
                );
            }
            assert!(
                Instant::now() < deadline,
                "the run never started; status said:\n{last}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn history(&self) -> Vec<Value> {
        let output = self
            .mara()
            .args(["--output", "json", "history"])
            .output()
            .unwrap();
        serde_json::from_slice::<Value>(&output.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }

    /// The projects the stand-in ran `operation` for.
    fn operations(&self, operation: &str) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter(|c| c["argv"].as_array().unwrap().iter().any(|a| a == operation))
            .map(|c| c["project"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

#[test]
fn a_second_run_on_the_same_stack_exits_5_naming_the_first() {
    let ws = Ws::new();
    // Long enough to be seen running under any load; cancelled once the point is made.
    let mut first = ws.spawn(&["up", "--yes", "--only", "cluster"], 60_000);
    let running = ws.wait_until_running(&mut first);
    let output = ws.mara().args(["up", "--yes"]).output().unwrap();
    assert_eq!(output.status.code(), Some(5));
    let err = common::stderr(&output);
    assert!(err.contains(&format!("(pid {})", first.id())), "{err}");
    // unlock --force refuses a holder that is alive on this host; so does unlock --engine: its
    // engines' locks are its own.
    for clear in ["--force", "--engine"] {
        let output = ws.mara().args(["unlock", clear]).output().unwrap();
        assert_eq!(output.status.code(), Some(5), "{clear}");
        assert!(
            common::stderr(&output).contains("which is alive on this host"),
            "{}",
            common::stderr(&output)
        );
    }
    assert!(
        err.contains(running["run_id"].as_str().unwrap())
            && err.contains("mara up --yes --only cluster"),
        "{err}"
    );
    // Its hints are typed as this invocation was: with its stack.
    let output = ws
        .mara()
        .args(["-s", "dev", "up", "--yes"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(5));
    assert!(
        common::stderr(&output).contains(
            "wait for it, stop it with `mara -s dev cancel`, or clear a lock whose run is gone with `mara -s dev unlock --force`"
        ),
        "{}",
        common::stderr(&output)
    );
    // A preview takes no lock.
    ws.mara()
        .args(["preview", "--only", "cluster"])
        .assert()
        .success();
    ws.mara().arg("cancel").assert().success();
    assert_eq!(first.wait_with_output().unwrap().status.code(), Some(130));
    // After the run, the stack is free again.
    ws.mara()
        .args(["up", "--yes", "--only", "cluster"])
        .assert()
        .success();
}

#[test]
fn status_and_history_read_while_a_run_writes() {
    let ws = Ws::new();
    let mut run = ws.spawn(
        &["up", "--yes", "--only", "cluster", "--only", "registry"],
        5000,
    );
    let status = ws.wait_until_running(&mut run);
    assert_eq!(status["stack"], "dev");
    let history = ws.history();
    assert_eq!(history[0]["status"], "running");
    let text = common::stdout(&ws.mara().arg("status").output().unwrap());
    assert!(
        text.contains("running") && text.contains("infrastructure/local/cluster"),
        "{text}"
    );
    assert!(run.wait_with_output().unwrap().status.success());
    assert_eq!(ws.history()[0]["status"], "succeeded");
}

#[test]
fn a_killed_run_is_taken_over_and_recorded_abandoned() {
    let ws = Ws::new();
    let mut killed = ws.spawn(&["up", "--yes", "--only", "cluster"], 60_000);
    let running = ws.wait_until_running(&mut killed);
    // Killed while its engine runs, the moment its `up` process exists: the engine is in the
    // watchdog's process group from its first instruction.
    common::wait_for_process(ws.root(), "/pulumi --non-interactive up ", &mut killed);
    killed.kill().unwrap(); // SIGKILL: no chance to clean up
    killed.wait().unwrap();
    // The watchdog interrupts the engine the killed run left; it releases its own lock as it ends.
    assert!(
        common::wait_for_no_process_in(ws.root()),
        "the killed run's engine outlived it"
    );
    let output = ws
        .mara()
        .args(["up", "--yes", "--only", "cluster"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert!(
        common::stderr(&output).contains("took over the lock"),
        "{}",
        common::stderr(&output)
    );
    let history = ws.history();
    let old = history
        .iter()
        .find(|r| r["run_id"] == running["run_id"])
        .unwrap();
    assert_eq!(old["status"], "abandoned");
    assert_eq!(history[0]["status"], "succeeded");
}

#[test]
fn unlock_checks_what_it_clears_before_it_clears_mara_s_lock() {
    let ws = Ws::new();
    let mut killed = ws.spawn(&["up", "--yes", "--only", "cluster"], 60_000);
    let running = ws.wait_until_running(&mut killed);
    common::wait_for_process(ws.root(), "/pulumi --non-interactive up ", &mut killed);
    killed.kill().unwrap();
    killed.wait().unwrap();
    assert!(common::wait_for_no_process_in(ws.root()));
    // The engines' locks cannot be cleared (the provider no longer loads): mara's lock stays.
    let toml = ws.root().join("mara.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, "provider = \"nowhere\"\n").unwrap();
    let output = ws
        .mara()
        .args(["unlock", "--force", "--engine"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", common::stderr(&output));
    assert!(
        common::stderr(&output).contains("nowhere"),
        "{}",
        common::stderr(&output)
    );
    assert!(!common::stdout(&output).contains("Cleared"));
    let held = ws.mara().arg("unlock").output().unwrap();
    assert!(
        common::stderr(&held).contains(&format!(
            "is locked by run {}",
            running["run_id"].as_str().unwrap()
        )),
        "the lock was not cleared: {}",
        common::stderr(&held)
    );
    // Once it loads, both are cleared.
    std::fs::write(&toml, text).unwrap();
    let output = ws
        .mara()
        .args(["unlock", "--force", "--engine"])
        .output()
        .unwrap();
    let out = common::stdout(&output);
    assert!(output.status.success(), "{out}{}", common::stderr(&output));
    assert!(
        out.contains("Cleared the lock of") && out.contains("[infrastructure/local/cluster]"),
        "{out}"
    );
    let free = ws.mara().arg("unlock").output().unwrap();
    assert!(common::stdout(&free).contains("is not locked by mara"));
}

#[test]
fn cancel_from_another_process_stops_the_run() {
    let ws = Ws::new();
    let mut run = ws.spawn(&["up", "--yes", "--only", "cluster"], 60_000);
    let running = ws.wait_until_running(&mut run);
    let started = Instant::now();
    let output = ws.mara().arg("cancel").output().unwrap();
    assert!(output.status.success());
    assert!(common::stdout(&output).contains(running["run_id"].as_str().unwrap()));
    // Asked twice, the run still only cancels: its engines are never killed.
    ws.mara().arg("cancel").output().unwrap();
    let output = run.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130));
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(ws.history()[0]["status"], "cancelled");
    let stderr = common::stderr(&output);
    assert!(
        stderr.contains(
            "a cancel was asked (`mara cancel` or the web page; `mara status` says by whom)"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("killing"), "{stderr}");
    // unlock on a free stack says so, with or without --force.
    assert!(common::stdout(&ws.mara().arg("unlock").output().unwrap()).contains("not locked"));
    assert!(
        common::stdout(&ws.mara().args(["unlock", "--force"]).output().unwrap())
            .contains("not locked")
    );
}

#[test]
fn resume_runs_only_the_failed_and_skipped_projects() {
    let ws = Ws::new();
    let output = ws
        .mara()
        .args(["up", "--yes", "--parallel", "1"])
        .env("PULUMI_STAND_IN_FAIL", "up:certmgr")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let first: Vec<String> = ws.operations("up");
    std::fs::remove_file(ws.log()).unwrap();
    let output = ws
        .mara()
        .args(["up", "--yes", "--resume"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let mut resumed = ws.operations("up");
    resumed.sort();
    assert_eq!(
        resumed,
        ["certmgr", "observability", "prometheus", "sirius-deploy"],
        "first run: {first:?}"
    );
    let output = ws
        .mara()
        .args(["up", "--yes", "--resume"])
        .output()
        .unwrap();
    assert!(common::stdout(&output).contains("Nothing to resume"));
}

#[test]
fn changed_runs_only_what_changed_and_its_dependents() {
    let ws = Ws::new();
    ws.mara().args(["up", "--yes"]).assert().success();
    std::fs::remove_file(ws.log()).unwrap();
    let output = ws
        .mara()
        .args(["up", "--yes", "--changed"])
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(common::stdout(&output).contains("Nothing changed"));
    assert!(
        ws.operations("up").is_empty() && ws.operations("select").is_empty(),
        "no engine call"
    );

    let file = ws.root().join("kubernetes/logstore/Pulumi.yaml");
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("A simulated log store.", "A simulated log store, edited.");
    std::fs::write(&file, text).unwrap();
    let output = ws
        .mara()
        .args(["up", "--yes", "--changed"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let out = common::stdout(&output);
    assert!(
        out.contains("run  kubernetes/logstore: its inputs changed"),
        "{out}"
    );
    assert!(
        out.contains("run  kubernetes/logagent: a project it depends on changed"),
        "{out}"
    );
    assert!(out.contains("skip kubernetes/certmgr: unchanged"), "{out}");
    assert_eq!(ws.operations("up"), ["logstore", "logagent"]);

    // Files git would ignore, and mara's own state, are not inputs.
    std::fs::write(
        ws.root().join("kubernetes/logstore/Pulumi.scratch.yaml"),
        "x",
    )
    .unwrap();
    std::fs::remove_file(ws.log()).unwrap();
    let output = ws
        .mara()
        .args(["up", "--yes", "--changed"])
        .output()
        .unwrap();
    assert!(
        common::stdout(&output).contains("Nothing changed"),
        "{}",
        common::stdout(&output)
    );

    // A project destroyed since its last up is not deployed, whatever its inputs.
    ws.mara()
        .args(["destroy", "--yes", "--only", "sirius"])
        .assert()
        .success();
    let output = ws
        .mara()
        .args(["up", "--yes", "--changed"])
        .output()
        .unwrap();
    let out = common::stdout(&output);
    assert!(
        out.contains(
            "run  kubernetes/applications/sirius: not deployed (never, or destroyed since)"
        ),
        "{out}"
    );
    assert!(out.contains("skip kubernetes/certmgr: unchanged"), "{out}");

    // A project destroyed alone, its dependents left standing (--orphan-dependents): deployed
    // anew, what stands on it is too.
    ws.mara()
        .args([
            "destroy",
            "--yes",
            "--only",
            "certmgr",
            "--orphan-dependents",
        ])
        .assert()
        .success();
    let output = ws
        .mara()
        .args(["up", "--yes", "--changed"])
        .output()
        .unwrap();
    let out = common::stdout(&output);
    assert!(output.status.success(), "{out}");
    assert!(
        out.contains("run  kubernetes/certmgr: not deployed")
            && out.contains(
                "run  kubernetes/observability: a project it depends on is deployed anew"
            )
            && out.contains("skip kubernetes/secrets: unchanged"),
        "{out}"
    );
}

#[test]
fn show_execution_changed_says_the_same_without_running() {
    let ws = Ws::new();
    ws.mara().args(["up", "--yes"]).assert().success();
    std::fs::write(
        ws.root().join("kubernetes/certmgr/values.yaml"),
        "replicas: 2\n",
    )
    .unwrap();
    std::fs::remove_file(ws.log()).unwrap();
    let shown = common::stdout(
        &ws.mara()
            .args(["show-execution", "--changed"])
            .output()
            .unwrap(),
    );
    let runs: Vec<&str> = shown.lines().filter(|l| l.starts_with("run")).collect();
    assert_eq!(
        runs,
        [
            "run  kubernetes/certmgr: its inputs changed since its last successful up",
            "run  kubernetes/observability: a project it depends on changed",
            "run  kubernetes/applications/sirius: a project it depends on changed",
        ]
    );
    assert!(!ws.log().exists(), "show-execution runs no engine");
    let up = common::stdout(
        &ws.mara()
            .args(["up", "--yes", "--changed"])
            .output()
            .unwrap(),
    );
    assert!(runs.iter().all(|line| up.contains(line)), "{up}");
}

#[test]
fn logs_follow_a_running_run_to_its_end() {
    let ws = Ws::new();
    // `infrastructure/kubeconfig` starts only once the cluster is up: after `--follow` began.
    let mut run = ws.spawn(
        &[
            "up",
            "--yes",
            "--only",
            "cluster",
            "--only",
            "registry",
            "--only",
            "infrastructure/kubeconfig",
        ],
        2000,
    );
    ws.wait_until_running(&mut run);
    let followed = ws.mara().args(["logs", "--follow"]).output().unwrap();
    assert!(run.wait().unwrap().success());
    let text = common::stdout(&followed);
    assert!(
        text.contains("[infrastructure/local/cluster] $ pulumi --non-interactive up"),
        "{text}"
    );
    assert!(
        text.contains("[infrastructure/local/registry] Resources: +1"),
        "followed to the end: {text}"
    );
    assert!(
        text.contains("[infrastructure/kubeconfig] Resources: +"),
        "a project that started later is followed too: {text}"
    );
    let history = ws.history();
    let id = history[0]["run_id"].as_str().unwrap();
    let one = common::stdout(&ws.mara().args(["logs", id, "registry"]).output().unwrap());
    assert!(
        one.starts_with("# mara up infrastructure/local/registry"),
        "{one}"
    );
    // One word that is not a run: a project of the last run.
    let last = common::stdout(&ws.mara().args(["logs", "registry"]).output().unwrap());
    assert_eq!(last, one);
    let output = ws.mara().args(["logs", "nope"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn logs_follow_ends_when_its_reader_does() {
    use std::io::BufRead;
    let ws = Ws::new();
    // A run that goes on for a minute.
    let mut run = ws.spawn(&["up", "--yes", "--only", "cluster"], 60_000);
    ws.wait_until_running(&mut run);
    let mut follow = Command::new(assert_cmd::cargo::cargo_bin("mara"))
        .args(["logs", "--follow"])
        .current_dir(ws.root())
        .envs(ws.environment())
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // `| head -1`: one line read, then the pipe closed.
    let mut first = String::new();
    std::io::BufReader::new(follow.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(
        first.starts_with("[infrastructure/local/cluster]"),
        "{first}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let ended = loop {
        if let Some(status) = follow.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = follow.kill();
    let _ = run.kill();
    let _ = run.wait();
    let status = ended.expect("logs --follow went on after its reader was gone");
    assert!(status.success(), "{status:?}");
}

/// A workspace of command projects: `a` requires `demo:a`; `b` (after `a`) succeeds only once the
/// file `ok` exists at the root.
fn commands_workspace() -> common::Workspace {
    common::Workspace::new(&[
        ("mara.toml", "provider = \"p\"\n"),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        (
            "config/pulumi/Pulumi.dev.yaml",
            "config:\n  demo:a: 1\n  demo:b: 2\n",
        ),
        (
            "providers/p.toml",
            "description = \"p\"\n\
             [[project]]\npath = \"a\"\nrequired_config = [\"demo:a\"]\nup = \"true\"\ndestroy = \"true\"\n\
             [[project]]\npath = \"b\"\nafter = [\"a\"]\nup = \"test -f ok\"\ndestroy = \"true\"\n",
        ),
    ])
}

#[test]
fn resume_checks_only_the_projects_it_runs() {
    let ws = commands_workspace();
    let output = ws.mara().args(["up", "--yes"]).output().unwrap();
    assert_eq!(output.status.code(), Some(1), "b fails the first time");
    // `a` succeeded and is done; the key only it requires is gone; `b` can succeed now.
    ws.write("config/pulumi/Pulumi.dev.yaml", "config:\n  demo:b: 2\n");
    ws.write("ok", "");
    let output = ws
        .mara()
        .args(["up", "--yes", "--resume"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let history: Value = serde_json::from_slice(
        &ws.mara()
            .args(["--output", "json", "history"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(history[0]["status"], "succeeded");
}

#[test]
fn what_is_refused_before_it_starts_leaves_the_ledger_alone() {
    let ws = commands_workspace();
    let ledger = ws.path().join(".mara/ledger.db");
    // A preview and a dry run are not recorded: they do not even open the ledger.
    ws.mara().arg("preview").assert().success();
    ws.mara().args(["up", "--dry-run"]).assert().success();
    assert!(!ledger.exists(), "the ledger was created");
    // A run refused by its checks (exit 3) or for want of a confirmation (exit 2) is no run.
    ws.write("config/pulumi/Pulumi.dev.yaml", "config:\n  demo:b: 2\n");
    let output = ws.mara().args(["up", "--yes"]).output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(
        common::stderr(&output).contains("`demo:a`: required by a but not set"),
        "{}",
        common::stderr(&output)
    );
    assert_eq!(ws.mara().arg("up").output().unwrap().status.code(), Some(3));
    ws.write("config/pulumi/Pulumi.dev.yaml", "config:\n  demo:a: 1\n");
    assert_eq!(ws.mara().arg("up").output().unwrap().status.code(), Some(2));
    assert!(!ledger.exists(), "a refused run was recorded");
}

/// `command` as a user other than root when the tests run as root (`setpriv`, util-linux):
/// file modes bind every other user. `None` where that cannot be arranged.
fn as_unprivileged(program: &std::path::Path, dirs: &[&std::path::Path]) -> Option<Command> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some(Command::new(program));
    }
    for dir in dirs {
        let chowned = Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        if !chowned {
            return None;
        }
    }
    let mut command = Command::new("setpriv");
    command
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(program);
    Some(command)
}

#[test]
fn a_read_only_ledger_is_read_without_leaving_files_and_refused_for_a_run() {
    let ws = Ws::new();
    let mara = assert_cmd::cargo::cargo_bin("mara");
    let dirs = [ws.root(), ws.bin.path()];
    let Some(_) = as_unprivileged(&mara, &dirs) else {
        common::tools::skip("cannot run as another user here");
        return;
    };
    let run = |args: &[&str]| {
        let mut command = as_unprivileged(&mara, &[]).unwrap();
        command
            .args(args)
            .current_dir(ws.root())
            .envs(ws.environment())
            .env("NO_COLOR", "1")
            .env_remove("CI")
            .output()
            .unwrap()
    };
    let output = run(&["up", "--yes", "--only", "cluster"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    let ledger = ws.root().join(".mara/ledger.db");
    let mode = |mode: u32| {
        std::fs::set_permissions(&ledger, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .unwrap()
    };
    mode(0o444);
    let beside = || {
        let mut names: Vec<String> = std::fs::read_dir(ws.root().join(".mara"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("ledger.db"))
            .collect();
        names.sort();
        names
    };
    let output = run(&["history"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert!(common::stdout(&output).contains("succeeded"));
    assert_eq!(beside(), ["ledger.db"], "reading created nothing beside it");
    let output = run(&["up", "--yes", "--only", "cluster"]);
    assert_eq!(output.status.code(), Some(3), "{}", common::stderr(&output));
    assert!(
        common::stderr(&output).contains(".mara/ledger.db: the run ledger cannot be written"),
        "{}",
        common::stderr(&output)
    );
    assert_eq!(beside(), ["ledger.db"]);
    // Writable again, it works as before.
    mode(0o644);
    let output = run(&["up", "--yes", "--only", "cluster"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
}

#[test]
fn prune_keeps_what_the_retention_says_and_takes_the_logs_too() {
    let ws = common::Workspace::new(&[
        ("mara.toml", "provider = \"p\"\n"),
        (
            "providers/p.toml",
            "description = \"p\"\ninfra_type = \"p\"\n\n[[project]]\npath = \"app\"\nup = \"echo up\"\ndestroy = \"true\"\n",
        ),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
    ]);
    for _ in 0..3 {
        let up = ws.mara().args(["up", "--yes"]).output().unwrap();
        assert!(up.status.success(), "{}", common::stderr(&up));
    }
    let logs = || {
        std::fs::read_dir(ws.path().join(".mara/logs"))
            .unwrap()
            .count()
    };
    assert_eq!(logs(), 3);
    ws.write("mara.toml", "provider = \"p\"\n\n[retention]\nruns = 1\n");
    let said = |args: &[&str]| {
        let output = ws.mara().args(args).output().unwrap();
        (
            output.status.code(),
            common::stdout(&output) + &common::stderr(&output),
        )
    };
    let (code, out) = said(&["ledger", "prune", "--dry-run"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("Would remove 2 runs"), "{out}");
    assert_eq!(logs(), 3, "a dry run removes nothing");
    let (code, out) = said(&["ledger", "prune"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("Removed 2 runs from the ledger, and 2 log directories"),
        "{out}"
    );
    assert_eq!(logs(), 1);
    let (_, history) = said(&["--output", "json", "history"]);
    let runs: serde_json::Value = serde_json::from_str(history.trim()).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 1);
    // Nothing to keep by: said; a retention that makes no sense: its line.
    ws.write("mara.toml", "provider = \"p\"\n");
    assert_eq!(said(&["ledger", "prune"]).0, Some(2));
    ws.write("mara.toml", "provider = \"p\"\n[retention]\nruns = 0\n");
    let (code, out) = said(&["ledger", "prune"]);
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("mara.toml:3: `retention.runs`"), "{out}");
}

#[test]
fn every_recorded_run_applies_the_retention_so_the_ledger_and_its_logs_stay_bounded() {
    let ws = common::Workspace::new(&[
        ("mara.toml", "provider = \"p\"\n\n[retention]\nruns = 3\n"),
        (
            "providers/p.toml",
            "description = \"p\"\ninfra_type = \"p\"\n\n[[project]]\npath = \"app\"\nup = \"echo up\"\npreview = \"echo preview\"\ndestroy = \"true\"\n",
        ),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
    ]);
    let run = |args: &[&str]| {
        let output = ws.mara().args(args).output().unwrap();
        assert!(output.status.success(), "{}", common::stderr(&output));
    };
    let logs = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(ws.path().join(".mara/logs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let runs = || -> Vec<String> {
        let output = (ws.mara())
            .args(["--output", "json", "history", "--limit", "100"])
            .output()
            .unwrap();
        let runs: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
        let mut ids: Vec<String> = (runs.iter())
            .map(|r| r["run_id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    // Many more runs than it keeps: after each, the newest three, their logs and no more.
    for n in 1..=8 {
        run(&["up", "--yes"]);
        let (runs, logs) = (runs(), logs());
        assert_eq!(runs.len(), n.min(3), "{runs:?}");
        assert_eq!(logs, runs, "the logs are the runs kept");
    }
    // A preview records no run: its logs are kept as the newest three directories are (and
    // those of the runs the ledger keeps); an older one's go with the next recorded run.
    let ups = runs();
    run(&["preview"]);
    let first_preview: Vec<String> = (logs().into_iter()).filter(|l| !ups.contains(l)).collect();
    assert_eq!(first_preview.len(), 1, "{:?}", logs());
    for _ in 0..3 {
        run(&["preview"]);
    }
    run(&["up", "--yes"]);
    let (runs, logs) = (runs(), logs());
    assert_eq!(runs.len(), 3);
    assert!(
        !logs.contains(&first_preview[0]),
        "an old preview's logs go: {logs:?}"
    );
    assert!(logs.len() <= 6, "{logs:?}");
    assert!(runs.iter().all(|r| logs.contains(r)), "{runs:?} {logs:?}");
    // `mara ledger prune` says there is nothing more to remove.
    let output = ws.mara().args(["ledger", "prune"]).output().unwrap();
    assert!(
        common::stdout(&output).starts_with("Nothing to remove"),
        "{}",
        common::stdout(&output)
    );
}
