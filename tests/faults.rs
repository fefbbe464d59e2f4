//! Faults from outside: a signal before the first engine, while a secret is being stored, at a
//! hidden question; mara killed outright while its engine ignores SIGINT. Each ends with exit
//! 130 or the engine gone, the ledger truthful, the lock free and the terminal as it was.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Deployment as Case;
use serde_json::Value;

impl Case {
    /// `mara <args>` in the background with the deployment's environment and `env` added.
    fn spawn(&self, args: &[&str], env: &[(&str, &str)]) -> Child {
        let deployment = self.environment();
        let mut all: Vec<(&str, &str)> = deployment.iter().map(|(k, v)| (*k, v.as_str())).collect();
        all.extend(env);
        spawn_at(self.root(), args, &all)
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
}

/// Waits (30 s at most) for `child` to end; its exit code and standard error.
fn wait(child: Child) -> (Option<i32>, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut child = child;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("mara did not end after the signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    (output.status.code(), common::stderr(&output))
}

fn signal(pid: i32, signal: i32) {
    // SAFETY: kill only sends a signal to the process the test started.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// A `/proc/<pid>/stat` field after the command name (0 = the state).
fn stat_field(pid: i32, field: usize) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(field)?
        .parse()
        .ok()
}

#[test]
fn sigterm_while_a_secret_is_stored_ends_the_run_cancelled_with_nothing_left() {
    let case = Case::of("mara-local");
    let mut mara = case.spawn(
        &["up", "--yes"],
        &[
            ("PULUMI_STAND_IN_STEP_DELAY_MS", "config set=60000"),
            ("MARA_SECRET_FROM_CI", "Zq7-ci-only-value"),
        ],
    );
    let storing = common::wait_for_process(case.root(), " config set ", &mut mara);
    // A moment for the step to install its own SIGINT handler (and log that it was reached).
    std::thread::sleep(Duration::from_millis(300));

    // The step is in the run's group, led by the watchdog, whose environment is empty.
    let group = stat_field(storing, 2).expect("the step's group");
    assert_ne!(
        Some(group),
        stat_field(mara.id() as i32, 2),
        "not mara's group"
    );
    assert_eq!(
        stat_field(group, 1),
        Some(mara.id() as i32),
        "led by mara's child"
    );
    let cmdline = std::fs::read(format!("/proc/{group}/cmdline")).unwrap();
    assert!(String::from_utf8_lossy(&cmdline).contains("__watchdog"));
    let environ = std::fs::read(format!("/proc/{group}/environ")).unwrap();
    assert!(
        environ.is_empty(),
        "the watchdog's environment: {}",
        String::from_utf8_lossy(&environ)
    );

    signal(mara.id() as i32, libc::SIGTERM);
    let (code, err) = wait(mara);
    assert_eq!(code, Some(130), "{err}");
    assert!(
        !err.contains("storing"),
        "an interruption, not a failure: {err}"
    );
    assert!(
        common::wait_for_no_process_in(case.root()),
        "the step outlived the run"
    );
    let step = case
        .calls()
        .into_iter()
        .find(|c| c["argv"].to_string().contains("\"set\""))
        .unwrap();
    assert_eq!(step["sigint"], true, "the step was interrupted: {step}");

    // A secret was being stored: the run is recorded, cancelled, and its lock is free.
    let history = case.history();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0]["status"], "cancelled");
    let output = case.mara().args(["up", "--yes"]).output().unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert!(!common::stderr(&output).contains("took over"));
}

#[test]
fn a_signal_before_anything_ran_leaves_no_record() {
    let case = Case::of("mara-local");
    // A destroy asks every project whose stack the ledger does not know which stacks it has,
    // before it records anything: here a stack made outside mara.
    let made = Command::new(common::stand_in())
        .args(["--non-interactive", "stack", "init", "dev"])
        .current_dir(case.root().join("infrastructure/local/cluster"))
        .env(
            "PULUMI_BACKEND_URL",
            format!(
                "file://{}",
                case.root().join(".mara/pulumi-state").display()
            ),
        )
        .env("PULUMI_CONFIG_PASSPHRASE", "mara-local-example")
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", common::stderr(&made));
    let mut mara = case.spawn(
        &["destroy", "--yes"],
        &[("PULUMI_STAND_IN_STEP_DELAY_MS", "stack ls=60000")],
    );
    let asking = common::wait_for_process(case.root(), " stack ls ", &mut mara);
    assert!(asking > 0);
    signal(mara.id() as i32, libc::SIGINT);
    let (code, err) = wait(mara);
    assert_eq!(code, Some(130), "{err}");
    assert!(common::wait_for_no_process_in(case.root()));
    assert_eq!(case.history(), Vec::<Value>::new(), "nothing recorded");
}

#[test]
fn sigterm_at_a_hidden_question_leaves_the_terminal_echoing_under_dash() {
    let case = Case::of("mara-local");
    let env_file = case.root().join("config/pulumi/environment");
    let text = std::fs::read_to_string(&env_file).unwrap();
    let kept: String = text
        .lines()
        .filter(|l| !l.starts_with("MARA_SECRET_"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&env_file, kept).unwrap();
    // dash restores nothing after its child: what mara leaves is what the next command sees.
    let command = format!(
        "sh -c '{}; code=$?; stty -a; exit $code'",
        common::Terminal::mara("up --yes")
    );
    let mut terminal = common::Terminal::run(case.root(), case.bin.path(), &command, &[]);
    terminal.wait_for("Prometheus administrator password");
    terminal.type_keys("Zq7-half");
    std::thread::sleep(Duration::from_millis(200));
    let mara = common::processes_in(case.root())
        .into_iter()
        .find(|p| p.contains("--color never up --yes") && !p.contains("sh -c"))
        .expect("mara runs");
    let pid: i32 = mara.split(' ').next().unwrap().parse().unwrap();
    signal(pid, libc::SIGTERM);
    let (code, screen) = terminal.finish();
    assert_eq!(code, 130, "{screen}");
    let settings = screen
        .rsplit_once("speed")
        .map(|(_, s)| s.to_string())
        .unwrap_or_default();
    let flags: Vec<&str> = settings.split_whitespace().collect();
    assert!(
        flags.contains(&"echo") && !flags.contains(&"-echo"),
        "echo is on again: {screen}"
    );
    assert!(!screen.contains("Zq7-half"), "{screen}");
    assert_eq!(case.history(), Vec::<Value>::new(), "nothing recorded");
}

#[test]
fn kill_9_of_mara_leaves_no_engine_even_one_that_ignores_sigint() {
    let case = Case::of("mara-local");
    case.mara()
        .args(["up", "--yes", "--only", "cluster"])
        .assert()
        .success();
    let mut mara = case.spawn(
        &["up", "--yes", "--only", "cluster"],
        &[
            ("PULUMI_STAND_IN_DELAY_MS", "60000"),
            ("PULUMI_STAND_IN_IGNORE_SIGINT", "1"),
            ("MARA_WATCHDOG_GRACE", "1"),
        ],
    );
    // Killed once its engine holds the stack's own lock (the engine is in the watchdog's group
    // from its first instruction; the lock is what the next run must be told about).
    common::wait_for_process(case.root(), "/pulumi --non-interactive up ", &mut mara);
    let locks = case.root().join(".mara/pulumi-state/.pulumi/locks");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(locks.is_dir() && common::tree(&locks).values().any(Option::is_some)) {
        assert!(Instant::now() < deadline, "the engine never took its lock");
        std::thread::sleep(Duration::from_millis(10));
    }
    mara.kill().unwrap();
    mara.wait().unwrap();
    assert!(
        common::wait_for_no_process_in(case.root()),
        "the engine outlived the killed run"
    );
    // Killed, the engine left Pulumi's own lock: the next run says which project and how to
    // clear it, when it takes the run over and when the project fails on it.
    let output = case
        .mara()
        .args(["up", "--yes", "--only", "cluster"])
        .output()
        .unwrap();
    let err = common::stderr(&output);
    let clear = "`mara unlock --engine`";
    assert!(
        err.contains("took over the lock")
            && err.contains("It was running 1 project then (as the ledger last heard):\n  infrastructure/local/cluster\n")
            && err.contains("the engine's own lock on its stack (Pulumi's lock, Terraform's state lock)")
            && err.contains(clear),
        "{err}"
    );
    assert_eq!(output.status.code(), Some(1), "{err}");
    let out = common::stdout(&output);
    assert!(
        out.contains("locked by another update") && out.contains(clear),
        "{out}"
    );
}

/// A run killed while one project runs, after another had ended stopped by its engine's lock:
/// the run that takes its lock over names the one it was running, not the one that had ended
/// (it was named too, its reason saying it met a lock: `mara unlock --engine` still clears
/// both, `ui::ledger`'s tests).
#[test]
fn a_takeover_names_the_projects_that_were_running_not_those_that_ended() {
    let case = Case::of("mara-local");
    let (cluster, registry) = (
        "infrastructure/local/cluster",
        "infrastructure/local/registry",
    );
    let args = [
        "up",
        "--yes",
        "--parallel",
        "2",
        "--only",
        cluster,
        "--only",
        registry,
    ];
    let mut mara = case.spawn(
        &args,
        &[
            ("PULUMI_STAND_IN_DELAY_MS", "local-cluster=60000"),
            (
                "PULUMI_STAND_IN_FLAKY",
                "local-registry=1:Conflict: Another update is currently in progress",
            ),
        ],
    );
    // Killed once the registry's end is recorded and the cluster's engine runs.
    let deadline = Instant::now() + Duration::from_secs(30);
    let killed = loop {
        let output = case
            .mara()
            .args(["--output", "json", "status"])
            .output()
            .unwrap();
        let runs: Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
        let status = |path: &str| {
            (runs[0]["projects"].as_array().into_iter().flatten())
                .find(|p| p["path"] == path)
                .map(|p| p["status"].clone())
        };
        if status(registry) == Some("failed".into()) && status(cluster) == Some("running".into()) {
            break runs[0]["run_id"].as_str().unwrap().to_string();
        }
        assert!(mara.try_wait().unwrap().is_none(), "mara ended early");
        assert!(Instant::now() < deadline, "never seen so: {runs:#}");
        std::thread::sleep(Duration::from_millis(50));
    };
    common::wait_for_process(case.root(), "/pulumi --non-interactive up ", &mut mara);
    mara.kill().unwrap();
    mara.wait().unwrap();
    assert!(common::wait_for_no_process_in(case.root()));
    let output = case
        .mara()
        .args(["up", "--yes", "--only", cluster])
        .output()
        .unwrap();
    let err = common::stderr(&output);
    assert!(output.status.success(), "{err}");
    assert!(
        err.contains(&format!("took over the lock of run {killed}"))
            && err.contains(&format!(
                "It was running 1 project then (as the ledger last heard):\n  {cluster}\nAn engine it started may still finish after this takeover"
            )),
        "{err}"
    );
    // Its command line, in the first line, names both; what follows names the cluster alone.
    let (_, note) = err.split_once("recorded abandoned\n").unwrap();
    assert!(!note.contains(registry), "it had ended: {err}");
}

/// Whether this machine lets a test mount a file system of its own (a user and mount namespace,
/// `unshare` from util-linux).
fn namespaces() -> bool {
    let works = Command::new("unshare")
        .args(["-rm", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !works {
        common::tools::skip("no user namespaces here (`unshare -rm` failed)");
    }
    works
}

#[test]
fn a_full_disk_when_the_run_ends_does_not_outrank_its_result() {
    if !namespaces() {
        return;
    }
    // One command project that fills the disk of the state directory (a 1 MiB tmpfs) as it ends.
    let ws = common::Workspace::new(&[
        ("mara.toml", "provider = \"p\"\n"),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        (
            "providers/p.toml",
            "description = \"p\"\n\
             [[project]]\npath = \"fill\"\n\
             up = \"dd if=/dev/zero of=../.mara/filler bs=4096 2>/dev/null; echo filled\"\n\
             destroy = \"true\"\n",
        ),
    ]);
    std::fs::create_dir_all(ws.path().join("fill")).unwrap();
    std::fs::create_dir_all(ws.path().join(".mara")).unwrap();
    let mara = assert_cmd::cargo::cargo_bin("mara");
    let mara = mara.display();
    let script = format!(
        "mount -t tmpfs -o size=1m tmpfs .mara || exit 97\n\
         {mara} up --yes; echo \"exit=$?\" >&2\n\
         {mara} --output json status > status.json\n\
         rm .mara/filler\n\
         {mara} --output json history > history.json\n"
    );
    let output = Command::new("unshare")
        .args(["-rm", "sh", "-c", &script])
        .current_dir(ws.path())
        .env("NO_COLOR", "1")
        .env_remove("CI")
        .output()
        .unwrap();
    let err = common::stderr(&output);
    assert!(err.contains("exit=0"), "the project succeeded: {err}");
    assert!(
        err.contains("warning: the run's end was not recorded")
            && err.to_lowercase().contains("full"),
        "{err}"
    );
    let read = |file: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(ws.path().join(file)).unwrap())
            .unwrap_or_else(|e| panic!("{file}: {e}\n{err}"))
    };
    let status = read("status.json");
    assert_eq!(
        status[0]["status"], "abandoned",
        "not left running: {status}"
    );
    let history = read("history.json");
    assert_eq!(history[0]["status"], "abandoned", "{history}");
}

#[test]
fn six_stacks_merging_into_one_kubeconfig_at_once_lose_nothing() {
    let case = Case::of("mara-local");
    let provider = case.root().join("providers/local.toml");
    let text = std::fs::read_to_string(&provider)
        .unwrap()
        .replace("merge = false", "merge = true");
    std::fs::write(&provider, text).unwrap();
    let dev = std::fs::read_to_string(case.root().join("config/pulumi/Pulumi.dev.yaml")).unwrap();
    let stacks = ["s1", "s2", "s3", "s4", "s5", "s6"];
    for stack in stacks {
        std::fs::write(
            case.root()
                .join(format!("config/pulumi/Pulumi.{stack}.yaml")),
            &dev,
        )
        .unwrap();
    }
    let kube = case.root().join("home/.kube/config");
    std::fs::create_dir_all(kube.parent().unwrap()).unwrap();
    let users_own = "apiVersion: v1\nkind: Config\nclusters:\n- name: own\n  cluster:\n    server: https://own.example\nusers:\n- name: own\n  user:\n    token: keep-me\ncontexts:\n- name: own\n  context:\n    cluster: own\n    user: own\ncurrent-context: own\n";
    std::fs::write(&kube, users_own).unwrap();
    // Up and destroy, six at once, three times over: every merge and unmerge under the lock.
    for round in 0..3 {
        for operation in ["up", "destroy"] {
            let runs: Vec<Child> = stacks
                .iter()
                .map(|stack| {
                    case.spawn(&[operation, "--yes", "--only", "cluster", "-s", stack], &[])
                })
                .collect();
            for run in runs {
                let (code, err) = wait(run);
                assert_eq!(code, Some(0), "round {round}, {operation}: {err}");
            }
            let Some(kubectl) = common::tools::tool("kubectl", "it reads the merged kubeconfig")
            else {
                return;
            };
            let contexts = Command::new(kubectl)
                .args(["config", "get-contexts", "-o", "name", "--kubeconfig"])
                .arg(&kube)
                .output()
                .expect("kubectl runs");
            let contexts = String::from_utf8(contexts.stdout).unwrap();
            let expected = match operation {
                "up" => "mara-s1\nmara-s2\nmara-s3\nmara-s4\nmara-s5\nmara-s6\nown\n",
                _ => "own\n",
            };
            assert_eq!(contexts, expected, "round {round}, after {operation}");
        }
    }
    // The user's own entries and context are as they were.
    let view = Command::new("kubectl")
        .args([
            "config",
            "view",
            "--raw",
            "-o",
            "jsonpath={.current-context} {.users[0].user.token}",
            "--kubeconfig",
        ])
        .arg(&kube)
        .output()
        .expect("kubectl runs");
    assert_eq!(String::from_utf8(view.stdout).unwrap(), "own keep-me");
}

#[test]
fn a_closed_terminal_is_an_interruption() {
    let case = Case::of("mara-local");
    let mut mara = case.spawn(
        &["up", "--yes", "--only", "cluster"],
        &[("PULUMI_STAND_IN_DELAY_MS", "60000")],
    );
    common::wait_for_process(case.root(), "/pulumi --non-interactive up ", &mut mara);
    std::thread::sleep(Duration::from_millis(300));
    // A closing session may send it twice: still only a cancel, never a kill.
    signal(mara.id() as i32, libc::SIGHUP);
    std::thread::sleep(Duration::from_millis(50));
    signal(mara.id() as i32, libc::SIGHUP);
    let (code, err) = wait(mara);
    assert_eq!(code, Some(130), "{err}");
    // Said, as a pipe is not the terminal that went away; and nothing was killed.
    assert!(
        err.contains("interrupted: the running projects are cancelling"),
        "{err}"
    );
    assert!(!err.contains("killing") && !err.contains("killed"), "{err}");
    assert!(
        case.calls()
            .iter()
            .all(|c| c["exit"] != serde_json::Value::Null),
        "every engine ended by itself"
    );
    assert!(common::wait_for_no_process_in(case.root()));
    let history = case.history();
    assert_eq!(history[0]["status"], "cancelled", "{history:?}");
    case.mara()
        .args(["up", "--yes", "--only", "cluster"])
        .assert()
        .success();
}

/// A workspace of one command project whose `up` counts the SIGINTs it gets in `ints` (in the
/// workspace) and goes on until killed, or until its SIGINT when `stop_on_int`.
fn counting(stop_on_int: bool) -> common::Workspace {
    let on_int = match stop_on_int {
        true => "echo INT >> ../ints; exit 9",
        false => "echo INT >> ../ints",
    };
    let provider = format!(
        "description = \"p\"\n[[project]]\npath = \"count\"\n\
         up = \"trap '{on_int}' INT; echo started; while true; do sleep 0.05; done\"\n\
         destroy = \"true\"\n"
    );
    let ws = common::Workspace::new(&[
        ("mara.toml", "provider = \"p\"\n"),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        ("providers/p.toml", &provider),
    ]);
    std::fs::create_dir_all(ws.path().join("count")).unwrap();
    ws
}

fn spawn_in(ws: &common::Workspace, args: &[&str], env: &[(&str, &str)]) -> Child {
    spawn_at(ws.path(), args, env)
}

/// `mara <args>` in the background in `root`, with `env` added.
fn spawn_at(root: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Child {
    Command::new(assert_cmd::cargo::cargo_bin("mara"))
        .args(args)
        .current_dir(root)
        .envs(env.iter().copied())
        .env("NO_COLOR", "1")
        .env_remove("CI")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until the project's engine — the shell with the trap — runs and has said so.
fn wait_started(ws: &common::Workspace, mara: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let log = ws.path().join(".mara/logs");
    let said = || {
        log.is_dir()
            && common::tree(&log)
                .into_values()
                .flatten()
                .any(|c| String::from_utf8_lossy(&c).lines().any(|l| l == "started"))
    };
    while !said() {
        assert!(mara.try_wait().unwrap().is_none(), "mara ended early");
        assert!(Instant::now() < deadline, "the project never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_engine_gets_one_sigint_when_mara_dies_after_sending_it() {
    let ws = counting(false);
    let mut mara = spawn_in(&ws, &["up", "--yes"], &[("MARA_WATCHDOG_GRACE", "1")]);
    wait_started(&ws, &mut mara);
    signal(mara.id() as i32, libc::SIGINT);
    let ints = ws.path().join("ints");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ints.exists() {
        assert!(Instant::now() < deadline, "the SIGINT never arrived");
        std::thread::sleep(Duration::from_millis(20));
    }
    // mara dies while its engine cancels: the watchdog must not send SIGINT again (a second
    // Ctrl-C to Pulumi), only SIGKILL after its grace period.
    mara.kill().unwrap();
    mara.wait().unwrap();
    assert!(
        common::wait_for_no_process_in(ws.path()),
        "the engine outlived mara"
    );
    assert_eq!(std::fs::read_to_string(&ints).unwrap(), "INT\n");
}

#[test]
fn with_its_watchdog_gone_a_run_still_reaches_its_engines() {
    let ws = counting(true);
    let mut mara = spawn_in(&ws, &["up", "--yes"], &[]);
    wait_started(&ws, &mut mara);
    // The watchdog: mara's child that leads the engine's process group.
    let engine = common::processes_in(ws.path())
        .into_iter()
        .find(|p| p.contains("trap"))
        .expect("the engine runs");
    let engine: i32 = engine.split(' ').next().unwrap().parse().unwrap();
    let group = stat_field(engine, 2).unwrap();
    assert_ne!(group, engine, "the engine is in the run's group");
    signal(group, libc::SIGKILL);
    std::thread::sleep(Duration::from_millis(200));
    signal(mara.id() as i32, libc::SIGINT);
    let (code, err) = wait(mara);
    assert_eq!(code, Some(130), "{err}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("ints")).unwrap(),
        "INT\n"
    );
    assert!(common::wait_for_no_process_in(ws.path()));
}
