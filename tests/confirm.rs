//! Confirmation on a real terminal: `mara up` previews and asks yes / no / details, `mara destroy`
//! asks for the stack name. Driven through a pseudo-terminal made by `script` (util-linux), answering
//! each prompt once it appears.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// mara running on a pseudo-terminal, its screen collected as it comes.
struct Terminal {
    child: Child,
    screen: Arc<Mutex<String>>,
}

impl Terminal {
    fn start(workspace: &Path, bin: &Path, args: &str) -> Terminal {
        let mara = assert_cmd::cargo::cargo_bin("mara");
        let command = format!("{} --color never {args}", mara.display());
        let mut child = Command::new("script")
            .args(["-qfec", &command, "/dev/null"])
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
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("script (util-linux) runs");
        let screen = Arc::new(Mutex::new(String::new()));
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
    fn wait_for(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.screen.lock().unwrap().contains(text) {
            assert!(
                Instant::now() < deadline,
                "never saw {text:?} in:\n{}",
                self.screen.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(400));
    }

    fn type_keys(&mut self, keys: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(keys.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    fn finish(mut self) -> (i32, String) {
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("mara did not finish:\n{}", self.screen.lock().unwrap());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && !self.screen.lock().unwrap().contains("Script done") {
            std::thread::sleep(Duration::from_millis(20));
        }
        (
            status.code().unwrap_or(-1),
            self.screen.lock().unwrap().clone(),
        )
    }
}

fn workspace() -> (tempfile::TempDir, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    common::copy_example(&common::example("mara-local"), dir.path());
    (dir, common::stand_in_bin())
}

fn deployed(workspace: &Path, project: &str) -> bool {
    workspace
        .join(format!(
            ".mara/pulumi-state/.pulumi/stacks/{project}/dev.json"
        ))
        .is_file()
        && std::fs::read_to_string(workspace.join(format!(
            ".mara/pulumi-state/.pulumi/stacks/{project}/dev.json"
        )))
        .unwrap()
        .contains("pulumi:pulumi:Stack")
}

#[test]
fn up_previews_shows_the_changes_and_asks() {
    let (dir, bin) = workspace();
    // "no" is the default: Enter changes nothing.
    let mut terminal = Terminal::start(dir.path(), bin.path(), "up --only cluster --only registry");
    terminal.wait_for("Do you want to perform this update?");
    let screen = terminal.screen.lock().unwrap().clone();
    assert!(
        screen.contains("Previewing 2 projects on stack dev"),
        "{screen}"
    );
    assert!(
        screen.contains("infrastructure/local/cluster") && screen.contains("+1"),
        "{screen}"
    );
    terminal.type_keys("\r");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 2, "{screen}");
    assert!(
        screen.contains("not confirmed: nothing was changed"),
        "{screen}"
    );
    assert!(!deployed(dir.path(), "local-cluster"));

    // details, then yes.
    let mut terminal = Terminal::start(dir.path(), bin.path(), "up --only cluster --only registry");
    terminal.wait_for("Do you want to perform this update?");
    terminal.type_keys("\x1b[B\r"); // down: details
    terminal.wait_for("── infrastructure/local/registry");
    terminal.type_keys("\x1b[A\r"); // the menu is back at \"no\": up once is yes
    let (code, screen) = terminal.finish();
    assert_eq!(code, 0, "{screen}");
    assert!(
        screen.contains("create pulumi:pulumi:Stack"),
        "details show each project's preview: {screen}"
    );
    assert!(deployed(dir.path(), "local-cluster") && deployed(dir.path(), "local-registry"));
}

#[test]
fn destroy_asks_for_the_stack_name() {
    let (dir, bin) = workspace();
    common::mara(dir.path())
        .args(["up", "--yes", "--only", "cluster"])
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin.path().display(),
                std::env::var("PATH").unwrap()
            ),
        )
        .env("HOME", dir.path().join("home"))
        .assert()
        .success();
    let mut terminal = Terminal::start(dir.path(), bin.path(), "destroy --only cluster");
    terminal.wait_for("Type the stack name (dev) to confirm");
    terminal.type_keys("prod\r");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 2, "{screen}");
    assert!(
        screen.contains("infrastructure/local/cluster"),
        "it lists what it would destroy: {screen}"
    );
    assert!(
        deployed(dir.path(), "local-cluster"),
        "a wrong name destroys nothing"
    );

    let mut terminal = Terminal::start(dir.path(), bin.path(), "destroy --only cluster");
    terminal.wait_for("Type the stack name (dev) to confirm");
    terminal.type_keys("dev\r");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 0, "{screen}");
    assert!(!deployed(dir.path(), "local-cluster"));
}
