//! `stack export`, `stack import` and `stack init`'s secrets on the file backend, held to the real
//! CLI's shapes and messages (`stack_export.go`, `stack_import.go`, `SaveSnapshot`,
//! `CreateStack`, the passphrase secrets manager).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

const SIG: &str = "4dabf18193072939515e22adb298388d";

struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let scratch = Scratch {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir_all(scratch.path().join("a")).unwrap();
        std::fs::write(
            scratch.path().join("a/Pulumi.yaml"),
            "name: proj-a\nruntime: yaml\noutputs:\n  message: hello\n  token: ${token}\nvariables:\n  token:\n    fn::secret: t0k3n-${pulumi.stack}\n",
        )
        .unwrap();
        scratch
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `pulumi args` in project `a`, with `env` on top and `stdin` piped in.
    fn run(&self, args: &[&str], env: &[(&str, &str)], stdin: &str) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pulumi"));
        cmd.args(args)
            .current_dir(self.path().join("a"))
            .env(
                "PULUMI_BACKEND_URL",
                format!("file://{}", self.path().join("state").display()),
            )
            .env("PULUMI_CONFIG_PASSPHRASE", "correct horse")
            .env_remove("PULUMI_STACK")
            .env_remove("PULUMI_STAND_IN_DELAY_MS")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args, &[], "");
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    }

    fn salt(&self, stack: &str) -> String {
        let file = self.path().join(format!("a/Pulumi.{stack}.yaml"));
        let text = std::fs::read_to_string(file).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("encryptionsalt:"))
            .unwrap();
        line.to_string()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const UP: [&str; 6] = [
    "--non-interactive",
    "up",
    "--yes",
    "--skip-preview",
    "-s",
    "dev",
];

#[test]
fn export_prints_the_untyped_deployment_pulumi_prints() {
    let s = Scratch::new();
    s.ok(&["--non-interactive", "stack", "init", "dev"]);
    s.ok(&UP);
    let exported = s.ok(&["stack", "export", "-s", "dev"]);
    assert!(
        exported
            .starts_with("{\n    \"version\": 3,\n    \"deployment\": {\n        \"manifest\": {"),
        "{exported}"
    );
    assert!(exported.ends_with("}\n") && !exported.contains("t0k3n"));
    let deployment: Value = serde_json::from_str(&exported).unwrap();
    let fields: Vec<&String> = deployment["deployment"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(fields, ["manifest", "secrets_providers", "resources"]);
    assert_eq!(
        deployment["deployment"]["secrets_providers"]["type"],
        "passphrase"
    );
    let outputs = &deployment["deployment"]["resources"][0]["outputs"];
    assert_eq!(outputs["message"], "hello");
    assert!(outputs["token"]["ciphertext"].is_string());

    let shown: Value =
        serde_json::from_str(&s.ok(&["stack", "export", "--show-secrets", "-s", "dev"])).unwrap();
    let token = &shown["deployment"]["resources"][0]["outputs"]["token"];
    assert_eq!(
        token,
        &json!({SIG: "1b47061264138c4ac30d75fd1eb44270", "plaintext": "\"t0k3n-dev\""})
    );
    let out = s.run(
        &["stack", "export", "--show-secrets", "-s", "dev"],
        &[("PULUMI_CONFIG_PASSPHRASE", "wrong")],
        "",
    );
    assert_eq!(
        (out.status.code(), text(&out.stderr)),
        (Some(1), "error: could not deserialize deployment: failed to decrypt: incorrect passphrase, please set PULUMI_CONFIG_PASSPHRASE to the correct passphrase or set PULUMI_CONFIG_PASSPHRASE_FILE to a file containing the passphrase\n".to_string())
    );

    let file = s.path().join("dev.json").display().to_string();
    assert_eq!(s.ok(&["stack", "export", "--file", &file, "-s", "dev"]), "");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), exported);
    let out = s.run(
        &[
            "stack",
            "export",
            "--file",
            "/nonexistent/dir/x.json",
            "-s",
            "dev",
        ],
        &[],
        "",
    );
    assert_eq!(
        text(&out.stderr),
        "error: could not open file: open /nonexistent/dir/x.json: no such file or directory\n"
    );
    let out = s.run(&["stack", "export", "--version", "1", "-s", "dev"], &[], "");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .ends_with("does not provide the ability to export previous deployments\n")
    );
    let out = s.run(&["stack", "export", "--yes", "-s", "dev"], &[], "");
    assert_eq!(text(&out.stderr), "error: unknown flag: --yes\n");
    let out = s.run(&["stack", "export", "-s", "prod"], &[], "");
    assert_eq!(
        (out.status.code(), text(&out.stderr)),
        (Some(6), "error: no stack named 'prod' found\n".to_string())
    );
}

#[test]
fn import_writes_the_checkpoint_back_after_checking_its_stack() {
    let s = Scratch::new();
    s.ok(&["--non-interactive", "stack", "init", "dev"]);
    s.ok(&UP);
    let exported = s.ok(&["stack", "export", "-s", "dev"]);
    let outputs = ["stack", "output", "--json", "--show-secrets", "-s", "dev"];
    let before = s.ok(&outputs);
    s.ok(&[
        "--non-interactive",
        "destroy",
        "--yes",
        "--skip-preview",
        "-s",
        "dev",
    ]);
    assert_eq!(s.ok(&outputs), "{}\n");
    // From stdin, into the stack it came from.
    let out = s.run(&["stack", "import", "-s", "dev"], &[], &exported);
    assert_eq!(
        text(&out.stdout),
        "Import complete.\n",
        "{}",
        text(&out.stderr)
    );
    assert_eq!(s.ok(&outputs), before);
    let preview = [
        "--non-interactive",
        "preview",
        "--expect-no-changes",
        "-s",
        "dev",
    ];
    s.ok(&preview);

    // Into another stack: its resources name dev, so it is refused unless --force.
    let out = s.run(&["stack", "import", "-s", "prod"], &[], &exported);
    assert_eq!(
        (out.status.code(), text(&out.stderr)),
        (Some(6), "error: no stack named 'prod' found\n".to_string())
    );
    s.ok(&["--non-interactive", "stack", "init", "prod"]);
    let out = s.run(&["stack", "import", "-s", "prod"], &[], &exported);
    assert_eq!(
        (out.status.code(), text(&out.stderr)),
        (Some(1), "error: 2 errors occurred:\n\t* resource 'urn:pulumi:dev::proj-a::pulumi:pulumi:Stack::proj-a-dev' is from a different stack (dev != prod)\n\t* importing this file could be dangerous; rerun with --force to proceed anyway\n\n".to_string())
    );
    let out = s.run(
        &["stack", "import", "--force", "-s", "prod"],
        &[],
        &exported,
    );
    assert!(out.status.success());
    assert_eq!(
        text(&out.stderr),
        "warning: resource 'urn:pulumi:dev::proj-a::pulumi:pulumi:Stack::proj-a-dev' is from a different stack (dev != prod)\n"
    );
}

#[test]
fn import_refuses_what_it_cannot_read_open_or_lock() {
    let s = Scratch::new();
    s.ok(&["--non-interactive", "stack", "init", "dev"]);
    s.ok(&UP);
    let exported = s.ok(&["stack", "export", "-s", "dev"]);
    let out = s.run(&["stack", "import", "-s", "dev"], &[], "");
    assert_eq!(text(&out.stderr), "error: EOF\n");
    let out = s.run(
        &["stack", "import", "-s", "dev"],
        &[],
        r#"{"deployment": {}}"#,
    );
    assert_eq!(
        text(&out.stderr),
        "error: the stack 'dev' is too old to be used by this version of the Pulumi CLI\n"
    );
    let wrong = [("PULUMI_CONFIG_PASSPHRASE", "wrong")];
    let out = s.run(&["stack", "import", "-s", "dev"], &wrong, &exported);
    assert!(text(&out.stderr).starts_with(
        "error: could not deserialize deployment: failed to decrypt: incorrect passphrase"
    ));
    let orphan = exported.replace("\"urn\": \"urn:pulumi:dev::proj-a::pulumi:pulumi:Stack::proj-a-dev\",", "\"urn\": \"urn:pulumi:dev::proj-a::pulumi:pulumi:Stack::proj-a-dev\", \"parent\": \"urn:pulumi:dev::proj-a::x:y:Z::gone\",");
    let out = s.run(&["stack", "import", "-s", "dev"], &[], &orphan);
    assert!(
        text(&out.stderr).contains("\t* state file contains errors: child resource urn:pulumi:dev::proj-a::pulumi:pulumi:Stack::proj-a-dev refers to missing parent urn:pulumi:dev::proj-a::x:y:Z::gone\n"),
        "{}",
        text(&out.stderr)
    );

    // The import takes the stack's lock.
    let locks = s.path().join("state/.pulumi/locks/organization/proj-a/dev");
    std::fs::create_dir_all(&locks).unwrap();
    std::fs::write(
        locks.join("other.json"),
        r#"{"pid":4242,"username":"u","hostname":"h","timestamp":"2026-08-21T10:00:00Z"}"#,
    )
    .unwrap();
    let out = s.run(&["stack", "import", "-s", "dev"], &[], &exported);
    assert!(
        text(&out.stderr).starts_with(
            "error: could not import deployment: the stack is currently locked by 1 lock(s)."
        ),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn stack_init_reuses_the_salt_its_configuration_file_holds() {
    let s = Scratch::new();
    let init = ["--non-interactive", "stack", "init", "dev"];
    s.ok(&init);
    let salt = s.salt("dev");
    let out = s.run(&init, &[], "");
    assert_eq!(
        text(&out.stderr),
        "error: stack 'organization/proj-a/dev' already exists\n"
    );
    let rm = [
        "--non-interactive",
        "stack",
        "rm",
        "--yes",
        "--preserve-config",
        "dev",
    ];
    s.ok(&rm);
    s.ok(&init);
    assert_eq!(s.salt("dev"), salt);
    s.ok(&rm);
    // The salt proves the passphrase: a wrong one creates no stack.
    let out = s.run(&init, &[("PULUMI_CONFIG_PASSPHRASE", "wrong")], "");
    assert_eq!(
        (out.status.code(), text(&out.stderr)),
        (
            Some(1),
            "error: could not create secrets manager for new stack: incorrect passphrase\n"
                .to_string()
        )
    );
    let out = s.run(&["--non-interactive", "stack", "select", "dev"], &[], "");
    assert_eq!(out.status.code(), Some(6));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pulumi"));
    let out = cmd
        .args(init)
        .current_dir(s.path().join("a"))
        .env(
            "PULUMI_BACKEND_URL",
            format!("file://{}", s.path().join("state").display()),
        )
        .env_remove("PULUMI_CONFIG_PASSPHRASE")
        .env_remove("PULUMI_CONFIG_PASSPHRASE_FILE")
        .output()
        .unwrap();
    assert_eq!(
        text(&out.stderr),
        "error: could not create secrets manager for new stack: passphrase must be set with PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE environment variables\n"
    );
    // A stack of its own salt reads what it wrote.
    s.ok(&init);
    s.ok(&UP);
    let shown = s.ok(&["stack", "output", "token", "--show-secrets", "-s", "dev"]);
    assert_eq!(shown, "t0k3n-dev\n");
}
