//! Helpers shared by the integration tests: the binary with a clean environment, and scratch
//! workspaces.

#![allow(dead_code)]

use std::io::{Read, Write};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use assert_cmd::Command;

pub mod postgres;
pub mod proxy;
pub mod tools;
pub mod web;

/// The repository's example workspace.
pub fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name)
}

/// `mara` run in `dir`, with no colour and none of the variables that change its choices.
pub fn mara(dir: &Path) -> Command {
    let mut cmd = Command::cargo_bin("mara").expect("the mara binary is built");
    cmd.current_dir(dir).env("NO_COLOR", "1");
    for var in [
        "MARA_STACK",
        "MARA_PROVIDER",
        "PULUMI_STACK",
        "CI",
        "MARA_LOG",
        "KUBECONFIG",
        "MARA_LEDGER_URL",
        "PGPASSWORD",
    ] {
        cmd.env_remove(var);
    }
    for (key, _) in std::env::vars() {
        if key.starts_with("MARA_SECRET_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// A scratch workspace: a temporary directory with the given files.
pub struct Workspace {
    pub dir: tempfile::TempDir,
}

impl Workspace {
    pub fn new(files: &[(&str, &str)]) -> Workspace {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let workspace = Workspace { dir };
        for (path, text) in files {
            workspace.write(path, text);
        }
        workspace
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn write(&self, path: &str, text: &str) {
        let path = self.dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create the directory");
        std::fs::write(path, text).expect("write the file");
    }

    /// A Pulumi YAML project at `path` named `name`.
    pub fn project(&self, path: &str, name: &str) {
        self.write(
            &format!("{path}/Pulumi.yaml"),
            &format!("name: {name}\nruntime: yaml\n"),
        );
    }

    pub fn mara(&self) -> Command {
        mara(self.path())
    }
}

/// Every file and directory under `root` with its content (directories map to `None`), to show
/// that a command changed nothing.
pub fn tree(root: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut found = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read the directory") {
            let path = entry.expect("an entry").path();
            let relative = path.strip_prefix(root).expect("under root").to_path_buf();
            if path.is_dir() {
                found.insert(relative, None);
                stack.push(path);
            } else {
                found.insert(relative, Some(std::fs::read(&path).expect("read the file")));
            }
        }
    }
    found
}

pub fn stdout(output: &std::process::Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("UTF-8 output")
}

pub fn stderr(output: &std::process::Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("UTF-8 output")
}

/// `<cmd> --output json <args>`: its exit code and the JSON report on stdout.
pub fn json_report(mut cmd: Command, args: &[&str]) -> (i32, serde_json::Value) {
    let output = cmd.arg("--output").arg("json").args(args).output().unwrap();
    let report = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}\nstdout: {}\nstderr: {}",
            stdout(&output),
            stderr(&output)
        )
    });
    (output.status.code().unwrap(), report)
}

/// Copies an example workspace, leaving out what a local run of it may have left behind: mara's
/// state, the stack files Pulumi writes into each project (the shared configuration stays), and
/// Terraform's working directories and local state — and its policies (`policy/`), which would
/// make every `up` preview first: the tests of what they gate copy them
/// (`copy_example_with_policies`).
pub fn copy_example(from: &Path, to: &Path) {
    copy_example_with_policies(from, to);
    let _ = std::fs::remove_dir_all(to.join("policy"));
}

/// Copies an example workspace as `copy_example` does, its policies included.
pub fn copy_example_with_policies(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("read the example").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let stack_file = name.starts_with("Pulumi.")
            && name != "Pulumi.yaml"
            && !from.ends_with("config/pulumi");
        let terraform_state = name == ".terraform"
            || name == ".terraform.lock.hcl"
            || name.starts_with("terraform.tfstate")
            || name == "mara_state_override.tf";
        if name == ".mara" || stack_file || terraform_state {
            continue;
        }
        let target = to.join(&name);
        if entry.path().is_dir() {
            std::fs::create_dir_all(&target).expect("create the directory");
            copy_example_with_policies(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy the file");
        }
    }
}

/// A directory holding `pulumi` → the stand-in (built beside mara by `cargo test`), for PATH.
pub fn stand_in_bin() -> tempfile::TempDir {
    let stand_in = stand_in();
    let bin = tempfile::tempdir().expect("a temporary directory");
    std::os::unix::fs::symlink(&stand_in, bin.path().join("pulumi")).expect("link the stand-in");
    bin
}

/// Fails unless the real Pulumi CLI would take `argv` (the stand-in checks it against
/// pulumi-flags.json without running it).
pub fn assert_valid_for_the_real_cli(argv: &[&str]) {
    let status = std::process::Command::new(stand_in())
        .args(argv)
        .env("PULUMI_STAND_IN_CHECK_ONLY", "1")
        .status()
        .unwrap();
    assert!(
        status.success(),
        "the real CLI would reject: pulumi {}",
        argv.join(" ")
    );
}

/// A copy of an example workspace with the stand-in installed as `pulumi` (first on PATH), a
/// private HOME, and the stand-in's log of every call it received.
pub struct Deployment {
    pub dir: tempfile::TempDir,
    pub bin: tempfile::TempDir,
}

impl Deployment {
    pub fn of(example_name: &str) -> Deployment {
        let dir = tempfile::tempdir().expect("a temporary directory");
        copy_example(&example(example_name), dir.path());
        Deployment {
            dir,
            bin: stand_in_bin(),
        }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// The stand-in's log: one JSON line per invocation.
    pub fn log(&self) -> PathBuf {
        self.root().join("stand-in.jsonl")
    }

    /// The variables every process of this deployment runs with (PATH, HOME, the stand-in's log).
    pub fn environment(&self) -> [(&'static str, String); 3] {
        [
            ("PATH", path_with(self.bin.path())),
            ("HOME", self.root().join("home").display().to_string()),
            ("PULUMI_STAND_IN_LOG", self.log().display().to_string()),
        ]
    }

    /// `mara` in the deployment, as `mara()` sets it up, with `environment()`.
    pub fn mara(&self) -> Command {
        let mut cmd = mara(self.root());
        cmd.envs(self.environment());
        cmd
    }

    /// Every call the stand-in logged so far.
    pub fn calls(&self) -> Vec<serde_json::Value> {
        calls_in(&self.log())
    }
}

/// Every call a stand-in logged in `log` (`PULUMI_STAND_IN_LOG`).
pub fn calls_in(log: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

/// The Pulumi command a logged call ran, as its words say it: `preview`, `up`, `stack select`,
/// `config set`.
pub fn command_of(call: &serde_json::Value) -> String {
    let words: Vec<&str> = (call["argv"].as_array().unwrap().iter())
        .map(|w| w.as_str().unwrap())
        .filter(|w| *w != "--non-interactive")
        .collect();
    match words.as_slice() {
        [group @ ("stack" | "config"), command, ..] if !command.starts_with('-') => {
            format!("{group} {command}")
        }
        [command, ..] => command.to_string(),
        [] => String::new(),
    }
}

/// How many calls of each command `calls` holds.
pub fn counted(calls: &[serde_json::Value]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for call in calls {
        *counts.entry(command_of(call)).or_default() += 1;
    }
    counts
}

/// `PATH` with `dir` first: how the tests put stand-ins before the real tools.
pub fn path_with(dir: &Path) -> String {
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// The stand-in binary.
pub fn stand_in() -> PathBuf {
    let path = assert_cmd::cargo::cargo_bin("mara").with_file_name("pulumi");
    assert!(
        path.is_file(),
        "{} is missing: `cargo test` builds the stand-in (or `cargo build -p pulumi-stand-in`)",
        path.display()
    );
    path
}

/// mara running on a pseudo-terminal, its screen collected as it comes.
pub struct Terminal {
    child: std::process::Child,
    pub screen: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Terminal {
    /// Starts `mara <args>` on a pseudo-terminal in `workspace`, with `bin` first on PATH and `env` set.
    pub fn start(workspace: &Path, bin: &Path, args: &str) -> Terminal {
        Terminal::start_with(workspace, bin, args, &[])
    }

    pub fn start_with(workspace: &Path, bin: &Path, args: &str, env: &[(&str, &str)]) -> Terminal {
        Terminal::run(workspace, bin, &Terminal::mara(args), env)
    }

    /// The command line that runs `mara <args>` on the terminal.
    pub fn mara(args: &str) -> String {
        let mara = assert_cmd::cargo::cargo_bin("mara");
        format!("{} --color never {args}", mara.display())
    }

    /// Runs `command`, a shell command line, on a pseudo-terminal.
    pub fn run(workspace: &Path, bin: &Path, command: &str, env: &[(&str, &str)]) -> Terminal {
        let mut child = std::process::Command::new("script")
            .args(["-qfec", command, "/dev/null"])
            .current_dir(workspace)
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    bin.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .env("HOME", workspace.join("home"))
            .env("TERM", "xterm")
            .env_remove("CI")
            .env_remove("KUBECONFIG")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .envs(env.iter().copied())
            .spawn()
            .expect("script (util-linux) runs");
        let screen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut stdout = child.stdout.take().unwrap();
        let collected = screen.clone();
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                collected
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buffer[..n]));
            }
        });
        Terminal { child, screen }
    }

    /// Waits until `text` is on the screen, then a moment more: the prompt is printed before the
    /// terminal is switched to raw mode, which discards keys typed in between.
    pub fn wait_for(&self, text: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !self.screen.lock().unwrap().contains(text) {
            assert!(
                std::time::Instant::now() < deadline,
                "never saw {text:?} in:\n{}",
                self.screen.lock().unwrap()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        std::thread::sleep(std::time::Duration::from_millis(400));
    }

    pub fn type_keys(&mut self, keys: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(keys.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    pub fn finish(mut self) -> (i32, String) {
        drop(self.child.stdin.take());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("mara did not finish:\n{}", self.screen.lock().unwrap());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while std::time::Instant::now() < deadline
            && !self.screen.lock().unwrap().contains("Script done")
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        (
            status.code().unwrap_or(-1),
            self.screen.lock().unwrap().clone(),
        )
    }
}

/// `mara` in `dir` for Terraform modules: its own HOME (`dir/home`), and none of the person's
/// `TF_WORKSPACE` or `TF_DATA_DIR`, which would choose the workspace and working directory.
pub fn terraform_mara(dir: &Path) -> Command {
    let mut cmd = mara(dir);
    cmd.env("HOME", dir.join("home"))
        .env_remove("TF_WORKSPACE")
        .env_remove("TF_DATA_DIR");
    cmd
}

/// The `terraform` on PATH. Without one a Terraform test is skipped, and counted, under a plain
/// `cargo test`, and fails under `.ci/test`, which installs it (`tools.rs`).
pub fn terraform() -> Option<PathBuf> {
    tools::tool("terraform", "the Terraform tests run the real one")
}

/// Whether no process runs with its working directory under `root`: the engines a run started
/// there have all ended.
pub fn no_process_in(root: &Path) -> bool {
    processes_in(root).is_empty()
}

/// The processes whose working directory is under `root`: pid and command line.
pub fn processes_in(root: &Path) -> Vec<String> {
    let root = root.canonicalize().unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|entry| {
            std::fs::read_link(entry.path().join("cwd")).is_ok_and(|c| c.starts_with(&root))
        })
        .map(|entry| {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            format!("{} {}", entry.file_name().to_string_lossy(), cmdline.trim())
        })
        .collect()
}

/// Waits (at most 20 s) until no process runs under `root`; whether that happened.
pub fn wait_for_no_process_in(root: &Path) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !no_process_in(root) {
        if std::time::Instant::now() > deadline {
            eprintln!(
                "still running under {}: {:?}",
                root.display(),
                processes_in(root)
            );
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    true
}

/// Waits (20 s at most) for a process under `root` whose command line holds `text`; its pid.
pub fn wait_for_process(root: &Path, text: &str, mara: &mut std::process::Child) -> i32 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if let Some(found) = processes_in(root).iter().find(|p| p.contains(text)) {
            return found.split(' ').next().unwrap().parse().unwrap();
        }
        if let Ok(Some(status)) = mara.try_wait() {
            let mut err = String::new();
            std::io::Read::read_to_string(mara.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("mara ended ({status}) before `{text}` started: {err}");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "`{text}` never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A JSON report's entry for the project at `path`.
pub fn project<'a>(report: &'a serde_json::Value, path: &str) -> &'a serde_json::Value {
    report["projects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["path"] == path)
        .unwrap_or_else(|| panic!("{path} is not in {report:#}"))
}

/// `mara` run in `copy` as a machine of a team would run it: with its ledger on the server at
/// `url` (or its own, with `None`), no colour, no stack or provider from this environment, and
/// standard input closed.
pub fn mara_on(copy: &Deployment, url: Option<&str>, args: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new(assert_cmd::cargo::cargo_bin("mara"));
    command
        .current_dir(copy.root())
        .env("NO_COLOR", "1")
        .envs(copy.environment())
        .args(args)
        .stdin(std::process::Stdio::null());
    for var in [
        "MARA_STACK",
        "MARA_PROVIDER",
        "PULUMI_STACK",
        "CI",
        "PGPASSWORD",
        "MARA_LEDGER_URL",
    ] {
        command.env_remove(var);
    }
    if let Some(url) = url {
        command.env("MARA_LEDGER_URL", url);
    }
    command
}
