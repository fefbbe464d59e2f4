//! `--resume` after a crash (docs/commands.md, "Resume"): a run records every project it
//! selected as it starts, so that one killed with SIGKILL — before its first project ends, in
//! the middle, during its last — leaves none unaccounted for, and `--resume` deploys (or
//! destroys) every one it did not complete, started or not.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Six Pulumi YAML projects: a → b → d → f, a → c → e → f.
const PROVIDER: &str = r#"
description = "six projects"
[[project]]
path = "a"
[[project]]
path = "b"
after = ["a"]
[[project]]
path = "c"
after = ["a"]
[[project]]
path = "d"
after = ["b"]
[[project]]
path = "e"
after = ["c"]
[[project]]
path = "f"
after = ["d", "e"]
"#;

const PROJECTS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];

struct Six {
    ws: common::Workspace,
    bin: tempfile::TempDir,
}

impl Six {
    fn new() -> Six {
        let ws = common::Workspace::new(&[
            ("mara.toml", "provider = \"six\"\nparallel = 2\n"),
            ("providers/six.toml", PROVIDER),
            (
                "config/pulumi/environment",
                "PULUMI_STACK=dev\nPULUMI_BACKEND_URL=file://.mara/pulumi-state\nPULUMI_CONFIG_PASSPHRASE=six\n",
            ),
            ("config/pulumi/Pulumi.dev.yaml", "config: {}\n"),
        ]);
        for project in PROJECTS {
            ws.write(
                &format!("{project}/Pulumi.yaml"),
                &format!("name: six-{project}\nruntime: yaml\noutputs:\n  name: {project}\n"),
            );
        }
        Six {
            ws,
            bin: common::stand_in_bin(),
        }
    }

    fn root(&self) -> &Path {
        self.ws.path()
    }

    fn environment(&self) -> [(&'static str, String); 2] {
        [
            ("PATH", common::path_with(self.bin.path())),
            ("HOME", self.root().join("home").display().to_string()),
        ]
    }

    fn mara(&self) -> assert_cmd::Command {
        let mut cmd = self.ws.mara();
        cmd.envs(self.environment());
        cmd
    }

    /// `mara <args>` in the background, `slow`'s operation taking a minute and the others'
    /// a tenth of a second.
    fn spawn(&self, args: &[&str], slow: &str) -> Child {
        Command::new(assert_cmd::cargo::cargo_bin("mara"))
            .args(args)
            .current_dir(self.root())
            .envs(self.environment())
            .env("NO_COLOR", "1")
            .env("PULUMI_STAND_IN_DELAY_MS", format!("{slow}=60000,*=100"))
            .env_remove("CI")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Whether the stand-in's state holds `project`'s stack with resources: deployed.
    fn deployed(&self, project: &str) -> bool {
        let file = self.root().join(format!(
            ".mara/pulumi-state/.pulumi/stacks/six-{project}/dev.json"
        ));
        let Ok(text) = std::fs::read_to_string(&file) else {
            return false;
        };
        let checkpoint: Value = serde_json::from_str(&text).unwrap();
        checkpoint["checkpoint"]["latest"]["resources"]
            .as_array()
            .is_some_and(|r| !r.is_empty())
    }

    fn deployed_ones(&self) -> Vec<&'static str> {
        PROJECTS.into_iter().filter(|p| self.deployed(p)).collect()
    }

    /// Starts `args`, and SIGKILLs mara once `slow`'s operation (`operation`) runs; waits for
    /// the engine it left to end (its watchdog stops it).
    fn killed_during(&self, args: &[&str], operation: &str, slow: &str) {
        let mut run = self.spawn(args, slow);
        wait_for_engine(&self.root().join(slow), operation, &mut run);
        run.kill().unwrap(); // SIGKILL: mara records nothing more
        run.wait().unwrap();
        assert!(
            common::wait_for_no_process_in(self.root()),
            "the killed run's engine outlived it"
        );
    }

    /// The last run as `mara status` shows it.
    fn last_run(&self) -> Value {
        let output = self
            .mara()
            .args(["--output", "json", "status"])
            .output()
            .unwrap();
        let runs: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: {}{}",
                common::stdout(&output),
                common::stderr(&output)
            )
        });
        runs[0].clone()
    }
}

/// Waits (20 s at most) until a `pulumi … <operation>` runs in `dir`.
fn wait_for_engine(dir: &Path, operation: &str, mara: &mut Child) {
    let dir: PathBuf = dir.canonicalize().unwrap();
    let text = format!("--non-interactive {operation} ");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found = std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
            let cwd = std::fs::read_link(entry.path().join("cwd"));
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cwd.is_ok_and(|c| c == dir) && cmdline.contains(&text)
        });
        if found {
            return;
        }
        if let Ok(Some(status)) = mara.try_wait() {
            let mut err = String::new();
            std::io::Read::read_to_string(mara.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("mara ended ({status}) before `{operation}` ran in {dir:?}: {err}");
        }
        assert!(
            Instant::now() < deadline,
            "`{operation}` never ran in {dir:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The killed run, as the ledger shows it: every project it selected, none unaccounted for;
/// how many of them did not succeed.
fn every_project_accounted_for(six: &Six, operation: &str) -> usize {
    let run = six.last_run();
    assert_eq!(run["operation"], operation, "{run:#}");
    let mut recorded: Vec<&str> = (run["projects"].as_array().unwrap().iter())
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    recorded.sort();
    assert_eq!(recorded, PROJECTS, "{run:#}");
    (run["projects"].as_array().unwrap().iter())
        .filter(|p| !matches!(p["status"].as_str(), Some("succeeded" | "unchanged")))
        .count()
}

#[test]
fn a_killed_up_resumes_every_project_it_did_not_deploy() {
    // Before its first project ends, in the middle (d runs beside e), during its last.
    for slow in ["a", "d", "f"] {
        let six = Six::new();
        six.killed_during(&["up", "--yes"], "up", slow);
        let before = six.deployed_ones();
        assert!(before.len() < 6, "{slow}: all deployed before the resume");
        let resumed = every_project_accounted_for(&six, "up");
        // What it recorded deployed is not deployed again (one whose end it did not record yet
        // is: the ledger cannot know it ended).
        assert!(resumed >= 6 - before.len(), "{slow}: {before:?}");
        let output = six
            .mara()
            .args(["up", "--yes", "--resume"])
            .output()
            .unwrap();
        let err = common::stderr(&output);
        assert!(output.status.success(), "{slow}: {err}");
        assert_eq!(six.deployed_ones(), PROJECTS, "{slow}: {err}");
        assert!(
            err.contains(&format!("{resumed} of its projects did not complete")),
            "{slow} (deployed before: {before:?}): {err}"
        );
        let again = six
            .mara()
            .args(["up", "--yes", "--resume"])
            .output()
            .unwrap();
        assert!(
            common::stdout(&again).contains("Nothing to resume"),
            "{slow}: {}",
            common::stderr(&again)
        );
    }
}

#[test]
fn a_killed_destroy_resumes_every_project_it_did_not_destroy() {
    // Destroyed in reverse: f first, a last.
    for slow in ["f", "c", "a"] {
        let six = Six::new();
        let output = six.mara().args(["up", "--yes"]).output().unwrap();
        assert!(output.status.success(), "{}", common::stderr(&output));
        assert_eq!(six.deployed_ones(), PROJECTS);
        six.killed_during(&["destroy", "--yes"], "destroy", slow);
        assert!(!six.deployed_ones().is_empty(), "{slow}: all destroyed");
        let _ = every_project_accounted_for(&six, "destroy");
        let output = six
            .mara()
            .args(["destroy", "--yes", "--resume"])
            .output()
            .unwrap();
        let err = common::stderr(&output);
        assert!(output.status.success(), "{slow}: {err}");
        assert!(
            six.deployed_ones().is_empty(),
            "{slow}: {:?} {err}",
            six.deployed_ones()
        );
    }
}

#[test]
fn a_resume_that_cannot_run_every_project_says_which_and_runs_none() {
    let six = Six::new();
    six.killed_during(&["up", "--yes"], "up", "b");
    // The provider no longer has f: the resume would leave it undeployed.
    let provider = PROVIDER.replace("[[project]]\npath = \"f\"\nafter = [\"d\", \"e\"]\n", "");
    six.ws.write("providers/six.toml", &provider);
    let deployed = six.deployed_ones();
    let output = six
        .mara()
        .args(["up", "--yes", "--resume"])
        .output()
        .unwrap();
    let err = common::stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{err}");
    assert!(
        err.contains("f, which provider `six` does not have"),
        "{err}"
    );
    assert_eq!(six.deployed_ones(), deployed, "something ran");
}

#[test]
fn a_dead_run_recorded_by_an_older_mara_is_not_resumed_as_if_complete() {
    let six = Six::new();
    six.killed_during(&["up", "--yes"], "up", "d");
    // As a mara that recorded a project only as it started left it: no count, no waiting rows.
    let ledger = rusqlite::Connection::open(six.root().join(".mara/ledger.db")).unwrap();
    ledger
        .execute_batch(
            "UPDATE runs SET selected = NULL; DELETE FROM projects WHERE status = 'waiting';",
        )
        .unwrap();
    drop(ledger);
    let deployed = six.deployed_ones();
    let output = six
        .mara()
        .args(["up", "--yes", "--resume"])
        .output()
        .unwrap();
    let err = common::stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{err}");
    assert!(
        err.contains("its record holds only the projects it started"),
        "{err}"
    );
    assert_eq!(six.deployed_ones(), deployed, "something ran");
}

#[test]
fn a_resume_that_would_undo_a_later_run_or_join_a_live_one_is_refused() {
    let six = Six::new();
    // An up that failed, then a destroy of the stack: resuming the up would deploy on a stack
    // torn down since.
    let failed = six
        .mara()
        .args(["up", "--yes"])
        .env("PULUMI_STAND_IN_FAIL", "up:six-d")
        .output()
        .unwrap();
    assert_eq!(failed.status.code(), Some(1), "{}", common::stderr(&failed));
    let destroyed = six.mara().args(["destroy", "--yes"]).output().unwrap();
    assert!(destroyed.status.success(), "{}", common::stderr(&destroyed));
    let output = six
        .mara()
        .args(["up", "--yes", "--resume"])
        .output()
        .unwrap();
    let err = common::stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{err}");
    assert!(
        err.contains("(up failed) was followed by run") && err.contains("(destroy succeeded"),
        "{err}"
    );
    assert!(six.deployed_ones().is_empty(), "something ran: {err}");

    // A run still running is not resumed: there is nothing to resume yet.
    let mut running = six.spawn(&["up", "--yes"], "c");
    wait_for_engine(&six.root().join("c"), "up", &mut running);
    let output = six
        .mara()
        .args(["up", "--yes", "--resume"])
        .output()
        .unwrap();
    let err = common::stderr(&output);
    assert_eq!(output.status.code(), Some(5), "{err}");
    assert!(err.contains("is still running"), "{err}");
    assert!(!err.contains("Resuming"), "{err}");
    running.kill().unwrap();
    running.wait().unwrap();
    assert!(common::wait_for_no_process_in(six.root()));
}
