//! The stand-in held to the Pulumi CLI contract (tests/pulumi-stand-in/pulumi-cli.md): flags, exit
//! codes, messages, the DIY backend layout, secrets, and state flowing through stack references.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let scratch = Scratch {
            dir: tempfile::tempdir().unwrap(),
        };
        scratch.project("a", "name: proj-a\nruntime: yaml\nconfig:\n  greeting:\n    type: string\n    default: hello\n  count:\n    type: integer\noutputs:\n  message: ${greeting} world\n  count: ${count}\n  token: ${token}\nvariables:\n  token:\n    fn::secret: t0k3n-${pulumi.stack}\n");
        scratch.project("b", "name: proj-b\nruntime: yaml\nresources:\n  a:\n    type: pulumi:pulumi:StackReference\n    properties:\n      name: organization/proj-a/${pulumi.stack}\noutputs:\n  copied: ${a.outputs[\"message\"]}\n  doubled: ${a.outputs[\"count\"]}${a.outputs[\"count\"]}\n  token: ${a.outputs[\"token\"]}\n");
        std::fs::write(
            scratch.path().join("shared.yaml"),
            "config:\n  proj-a:count: 2\n",
        )
        .unwrap();
        scratch
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn project(&self, dir: &str, text: &str) {
        std::fs::create_dir_all(self.path().join(dir)).unwrap();
        std::fs::write(self.path().join(dir).join("Pulumi.yaml"), text).unwrap();
    }

    fn pulumi(&self, dir: &str, args: &[&str]) -> Output {
        self.pulumi_with(dir, args, None)
    }

    fn pulumi_with(&self, dir: &str, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pulumi"));
        cmd.args(args)
            .current_dir(self.path().join(dir))
            .env(
                "PULUMI_BACKEND_URL",
                format!("file://{}", self.path().join("state").display()),
            )
            .env("PULUMI_CONFIG_PASSPHRASE", "correct horse")
            .env_remove("PULUMI_STACK")
            .env_remove("PULUMI_STAND_IN_FAIL")
            .env_remove("PULUMI_STAND_IN_DELAY_MS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.unwrap_or("").as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    fn shared(&self) -> String {
        self.path().join("shared.yaml").display().to_string()
    }

    fn up(&self, dir: &str) -> Output {
        let shared = self.shared();
        self.pulumi(
            dir,
            &[
                "--non-interactive",
                "up",
                "--yes",
                "--skip-preview",
                "--stack",
                "dev",
                "--config-file",
                &shared,
            ],
        )
    }

    fn create(&self, dir: &str) {
        let out = self.pulumi(
            dir,
            &[
                "--non-interactive",
                "stack",
                "select",
                "--create",
                "--stack",
                "dev",
            ],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn unknown_flags_exit_1_with_cobras_message() {
    let s = Scratch::new();
    let out = s.pulumi("a", &["up", "--yes", "--frobnicate"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), "error: unknown flag: --frobnicate\n");
    let out = s.pulumi("a", &["destroy", "--exclude-dependents", "--yes"]);
    assert_eq!(
        text(&out.stderr),
        "error: unknown flag: --exclude-dependents\n"
    );
    let out = s.pulumi("a", &["preview", "--yes"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_project_file_is_required() {
    let s = Scratch::new();
    std::fs::create_dir_all(s.path().join("empty")).unwrap();
    let out = s.pulumi("empty", &["stack", "select", "--stack", "dev"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no Pulumi.yaml project file found"));
}

#[test]
fn exit_codes_follow_the_taxonomy() {
    let s = Scratch::new();
    // 6: no such stack.
    let out = s.pulumi(
        "a",
        &["--non-interactive", "stack", "select", "--stack", "dev"],
    );
    assert_eq!(
        (out.status.code(), text(&out.stderr)),
        (Some(6), "error: no stack named 'dev' found\n".into())
    );
    s.create("a");
    // 2: no confirmation in non-interactive mode (up and destroy); refresh says the same with 1.
    let out = s.pulumi("a", &["--non-interactive", "up", "--stack", "dev"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--yes or --skip-preview"));
    assert_eq!(
        s.pulumi("a", &["--non-interactive", "destroy", "--stack", "dev"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        s.pulumi("a", &["--non-interactive", "refresh", "--stack", "dev"])
            .status
            .code(),
        Some(1)
    );
    // 7: --expect-no-changes with changes.
    let shared = s.shared();
    let out = s.pulumi(
        "a",
        &[
            "--non-interactive",
            "preview",
            "--expect-no-changes",
            "--stack",
            "dev",
            "--config-file",
            &shared,
        ],
    );
    assert_eq!(out.status.code(), Some(7));
    assert!(
        text(&out.stderr)
            .contains("no changes were expected for preview but changes were proposed")
    );
    assert!(s.up("a").status.success());
    let out = s.pulumi(
        "a",
        &[
            "--non-interactive",
            "preview",
            "--expect-no-changes",
            "--stack",
            "dev",
            "--config-file",
            &shared,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn state_flows_through_stack_references_and_secrets_stay_secret() {
    let s = Scratch::new();
    s.create("a");
    s.create("b");
    let out = s.up("a");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = s.up("b");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = s.pulumi(
        "b",
        &[
            "--non-interactive",
            "stack",
            "output",
            "--json",
            "--stack",
            "dev",
        ],
    );
    let outputs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outputs["copied"], "hello world");
    assert_eq!(outputs["doubled"], "22");
    assert_eq!(outputs["token"], "[secret]");
    let out = s.pulumi(
        "b",
        &[
            "--non-interactive",
            "stack",
            "output",
            "--json",
            "--show-secrets",
            "--stack",
            "dev",
        ],
    );
    let outputs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outputs["token"], "t0k3n-dev");
    // The DIY layout, and no plaintext secret in any state file.
    let checkpoint = s.path().join("state/.pulumi/stacks/proj-b/dev.json");
    assert!(checkpoint.is_file());
    assert!(s.path().join("state/.pulumi/meta.yaml").is_file());
    for file in walk(&s.path().join("state")) {
        assert!(
            !std::fs::read_to_string(&file)
                .unwrap_or_default()
                .contains("t0k3n"),
            "{}",
            file.display()
        );
    }
}

/// `preview --save-plan` writes Pulumi's update plan; `up --plan` applies it, and refuses an
/// update that leaves it (exit 1, nothing written), with Pulumi's words.
#[test]
fn an_update_plan_is_applied_and_an_update_that_leaves_it_refused() {
    let s = Scratch::new();
    s.create("a");
    assert!(s.up("a").status.success());
    let shared = s.shared();
    let plan = s.path().join("a.plan.json").display().to_string();
    let operation = |command: &str, flag: &str| {
        let args = [
            "--non-interactive",
            command,
            "--stack",
            "dev",
            "--config-file",
            &shared,
        ];
        let mut args = args.to_vec();
        if command == "up" {
            args.extend(["--yes", "--skip-preview", "--json"]);
        }
        args.extend([flag, &plan]);
        s.pulumi("a", &args)
    };
    let count =
        |n: &str| std::fs::write(&shared, format!("config:\n  proj-a:count: {n}\n")).unwrap();
    let state =
        || std::fs::read_to_string(s.path().join("state/.pulumi/stacks/proj-a/dev.json")).unwrap();
    count("3");
    let out = operation("preview", "--save-plan");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let saved = std::fs::read_to_string(&plan).unwrap();
    assert!(saved.contains("\"resourcePlans\""), "{saved}");
    assert!(!saved.contains("t0k3n"), "secrets stay encrypted: {saved}");
    // The configuration moved after the preview: refused, nothing written.
    count("4");
    let before = state();
    let out = operation("up", "--plan");
    assert_eq!(out.status.code(), Some(1));
    let said = text(&out.stdout);
    assert!(
        said.contains("resource violates plan: properties changed: ~~count[{3}!={4}]"),
        "{said}"
    );
    assert_eq!(state(), before);
    // As planned: applied.
    count("3");
    let out = operation("up", "--plan");
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert!(state().contains("\"count\":3"), "{}", state());
}

#[test]
fn config_set_secret_reads_stdin_and_config_get_decrypts() {
    let s = Scratch::new();
    s.create("a");
    let out = s.pulumi_with(
        "a",
        &[
            "--non-interactive",
            "config",
            "set",
            "--secret",
            "db:password",
            "--stack",
            "dev",
        ],
        Some("s3cr3t-value\n"),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let file = std::fs::read_to_string(s.path().join("a/Pulumi.dev.yaml")).unwrap();
    assert!(
        file.contains("db:password") && file.contains("secure:") && !file.contains("s3cr3t"),
        "{file}"
    );
    let out = s.pulumi(
        "a",
        &[
            "--non-interactive",
            "config",
            "get",
            "db:password",
            "--json",
            "--stack",
            "dev",
        ],
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        got,
        serde_json::json!({"value": "s3cr3t-value", "secret": true})
    );
    // A secret-looking value without --secret or --plaintext is refused.
    let out = s.pulumi(
        "a",
        &[
            "--non-interactive",
            "config",
            "set",
            "api:token",
            "Zx9-Qp2-Lm7-Wv4",
            "--stack",
            "dev",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("looks like a secret"));
    // A missing key.
    let out = s.pulumi(
        "a",
        &[
            "--non-interactive",
            "config",
            "get",
            "nope",
            "--stack",
            "dev",
        ],
    );
    assert!(
        text(&out.stderr).contains("configuration key 'proj-a:nope' not found for stack 'dev'")
    );
}

#[test]
fn a_held_lock_is_reported_as_pulumi_reports_it() {
    let s = Scratch::new();
    s.create("a");
    let locks = s.path().join("state/.pulumi/locks/organization/proj-a/dev");
    std::fs::create_dir_all(&locks).unwrap();
    std::fs::write(
        locks.join("other.json"),
        r#"{"pid":4242,"username":"u","hostname":"h","timestamp":"2026-08-21T10:00:00Z"}"#,
    )
    .unwrap();
    let out = s.up("a");
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("the stack is currently locked by 1 lock(s)")
            && err.contains("created by u@h (pid 4242)"),
        "{err}"
    );
    let out = s.pulumi(
        "a",
        &["--non-interactive", "cancel", "--yes", "--stack", "dev"],
    );
    assert!(out.status.success());
    assert!(s.up("a").status.success());
}

#[test]
fn destroy_removes_resources_and_remove_the_stack() {
    let s = Scratch::new();
    s.create("a");
    assert!(s.up("a").status.success());
    let shared = s.shared();
    let out = s.pulumi(
        "a",
        &[
            "--non-interactive",
            "destroy",
            "--yes",
            "--skip-preview",
            "--remove",
            "--json",
            "--stack",
            "dev",
            "--config-file",
            &shared,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let summary = text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e.get("summaryEvent").is_some())
        .unwrap();
    assert_eq!(summary["summaryEvent"]["resourceChanges"]["delete"], 1);
    assert!(
        !s.path()
            .join("state/.pulumi/stacks/proj-a/dev.json")
            .exists()
    );
    assert!(
        s.path().join("shared.yaml").exists(),
        "the shared configuration is not the stack's own file"
    );
}

#[test]
fn missing_configuration_and_a_wrong_passphrase_fail() {
    let s = Scratch::new();
    s.create("a");
    let out = s.pulumi("a", &["--non-interactive", "up", "--yes", "--stack", "dev"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("Missing required configuration variable 'proj-a:count'"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pulumi"));
    let out = cmd
        .args(["--non-interactive", "up", "--yes", "--stack", "dev"])
        .current_dir(s.path().join("a"))
        .env(
            "PULUMI_BACKEND_URL",
            format!("file://{}", s.path().join("state").display()),
        )
        .env("PULUMI_CONFIG_PASSPHRASE", "wrong")
        .output()
        .unwrap();
    assert!(text(&out.stderr).contains("incorrect passphrase"));
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path)
            } else {
                files.push(path)
            }
        }
    }
    files
}

/// A scratch workspace whose project `b` reads `a`'s stack (deployed), and a pack of Pulumi's
/// OPA bridge (`pack/`, version 1.2.0) that warns of every stack reference and of a stack of
/// more than one resource.
fn pack_scratch() -> (Scratch, String) {
    let s = Scratch::new();
    let pack = s.path().join("pack");
    std::fs::create_dir_all(&pack).unwrap();
    std::fs::write(
        pack.join("PulumiPolicy.yaml"),
        "description: refs\nruntime: opa\nversion: 1.2.0\n",
    )
    .unwrap();
    std::fs::write(
        pack.join("refs.rego"),
        "package refs\n\nwarn_any[msg] {\n    input.type == \"pulumi:pulumi:StackReference\"\n    msg := sprintf(\"%s reads %s\", [input.__name, input.name])\n}\n\nstack_warn_count[msg] {\n    count(input.resources) > 1\n    msg := sprintf(\"%d resources\", [count(input.resources)])\n}\n",
    )
    .unwrap();
    let pack = pack.display().to_string();
    s.create("a");
    s.create("b");
    assert!(s.up("a").status.success());
    (s, pack)
}

/// `preview --json --policy-pack PACK` of `b`, streamed or not.
fn preview_with_pack(s: &Scratch, pack: &str, stream: bool) -> Output {
    preview_json(s, "b", &["--policy-pack", pack], stream, &[])
}

/// `preview --json` of the project in `dir`, with `more` arguments and variables, streamed
/// (`PULUMI_ENABLE_STREAMING_JSON_PREVIEW`) or not.
fn preview_json(
    s: &Scratch,
    dir: &str,
    more: &[&str],
    stream: bool,
    variables: &[(&str, &str)],
) -> Output {
    let shared = s.shared();
    let args = [
        "--non-interactive",
        "preview",
        "--stack",
        "dev",
        "--config-file",
        &shared,
        "--json",
    ];
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pulumi"));
    cmd.args(args)
        .args(more)
        .current_dir(s.path().join(dir))
        .env(
            "PULUMI_BACKEND_URL",
            format!("file://{}", s.path().join("state").display()),
        )
        .env("PULUMI_CONFIG_PASSPHRASE", "correct horse")
        .env_remove("PULUMI_ENABLE_STREAMING_JSON_PREVIEW")
        .envs(variables.iter().copied());
    if stream {
        cmd.env("PULUMI_ENABLE_STREAMING_JSON_PREVIEW", "true");
    }
    cmd.output().unwrap()
}

/// `--policy-pack DIR` on a preview: a pack of Pulumi's OPA bridge judges each resource and the
/// stack; with `PULUMI_ENABLE_STREAMING_JSON_PREVIEW` the preview is the event stream, a
/// `policyEvent` per violation; the digest leaves them out, as Pulumi's does. An advisory
/// violation is said and the preview goes on.
#[test]
fn a_pack_says_its_violations_in_the_stream_and_not_in_the_digest() {
    let (s, pack) = pack_scratch();
    // Advisory only: said in the stream, the preview succeeds.
    let out = preview_with_pack(&s, &pack, true);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let events: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let policy: Vec<&serde_json::Value> =
        events.iter().filter_map(|e| e.get("policyEvent")).collect();
    assert_eq!(policy.len(), 2, "{events:?}");
    assert_eq!(policy[0]["policyName"], "warn_any");
    assert_eq!(policy[0]["enforcementLevel"], "advisory");
    assert_eq!(
        policy[0]["message"],
        "<{%reset%}>a reads organization/proj-a/dev<{%reset%}>\n"
    );
    assert_eq!(policy[0]["policyPackName"], "pack");
    assert_eq!(
        policy[0]["resourceUrn"],
        "urn:pulumi:dev::proj-b::pulumi:pulumi:StackReference::a"
    );
    assert_eq!(policy[1]["policyName"], "stack_warn_count");
    // The summary, then the cancel event that ends every stream.
    let summary = &events[events.len() - 2]["summaryEvent"];
    assert_eq!(events.last().unwrap()["cancelEvent"], serde_json::json!({}));
    assert_eq!(summary["PolicyPacks"]["pack"], "v1.2.0");
    assert_eq!(summary["isPreview"], true);
    let pre = events
        .iter()
        .find_map(|e| e.get("resourcePreEvent"))
        .unwrap();
    assert_eq!(pre["planning"], true);
    assert_eq!(pre["metadata"]["op"], "create");
    // The digest has no place for them.
    let out = preview_with_pack(&s, &pack, false);
    assert!(out.status.success());
    assert!(
        !text(&out.stdout).contains("warn_any"),
        "{}",
        text(&out.stdout)
    );
}

/// A mandatory violation fails the operation (exit 1, no message: a bail), nothing written.
#[test]
fn a_mandatory_violation_fails_the_operation_and_applies_nothing() {
    let (s, pack) = pack_scratch();
    let shared = s.shared();
    // Mandatory: the preview fails (a bail: exit 1, no error line), the update applies nothing.
    std::fs::write(
        s.path().join("pack/refs.rego"),
        "package refs\n\ndeny_cross_project[msg] {\n    input.type == \"pulumi:pulumi:StackReference\"\n    contains(input.name, \"proj-a\")\n    msg := sprintf(\"%s reads proj-a\", [input.__name])\n}\n",
    )
    .unwrap();
    let out = preview_with_pack(&s, &pack, true);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), "");
    let said = text(&out.stdout);
    assert!(
        said.contains("\"enforcementLevel\":\"mandatory\""),
        "{said}"
    );
    assert!(said.contains("\"result\":\"failed\""), "{said}");
    let out = s.pulumi(
        "b",
        &[
            "--non-interactive",
            "up",
            "--yes",
            "--skip-preview",
            "--stack",
            "dev",
            "--config-file",
            &shared,
            "--json",
            "--policy-pack",
            &pack,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("a reads proj-a"),
        "{}",
        text(&out.stdout)
    );
    let state =
        std::fs::read_to_string(s.path().join("state/.pulumi/stacks/proj-b/dev.json")).unwrap();
    assert!(
        !state.contains("StackReference"),
        "nothing applied: {state}"
    );
}

/// A directory without `PulumiPolicy.yaml` fails as Pulumi fails, and destroy takes no
/// `--policy-pack`.
#[test]
fn a_directory_without_its_project_file_is_no_pack() {
    let (s, pack) = pack_scratch();
    // Not a pack; and destroy takes none.
    let empty = s.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = s.pulumi(
        "b",
        &[
            "--non-interactive",
            "preview",
            "--stack",
            "dev",
            "--policy-pack",
            &empty.display().to_string(),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(&format!("error: failed to load Pulumi policy project located at {:?}: open {}/PulumiPolicy.yaml: no such file or directory", empty.display().to_string(), empty.display())),
        "{}",
        text(&out.stderr)
    );
    let out = s.pulumi(
        "b",
        &[
            "--non-interactive",
            "destroy",
            "--yes",
            "--stack",
            "dev",
            "--policy-pack",
            &pack,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("unknown flag: --policy-pack"),
        "{}",
        text(&out.stderr)
    );
}

/// `preview --refresh --json` on a stack whose cloud changed (`PULUMI_STAND_IN_DRIFT`), as
/// Pulumi's `ShowPreviewDigest` builds its digest from the steps' `resourcePreEvent`s only: a
/// refresh step there holds its resource as recorded on both sides, no diff, one for each
/// resource read; what the refresh read is in the stream alone, in the step's
/// `resOutputsEvent`. The update the changed output calls for is in both.
#[test]
fn a_refresh_step_says_what_it_read_only_in_the_stream() {
    let s = Scratch::new();
    s.create("a");
    assert!(s.up("a").status.success());
    let preview = |stream: bool| {
        let drift = [("PULUMI_STAND_IN_DRIFT", "proj-a:message=changed by hand")];
        let out = preview_json(&s, "a", &["--refresh"], stream, &drift);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let digest: serde_json::Value = serde_json::from_str(&preview(false)).unwrap();
    let steps = digest["steps"].as_array().unwrap();
    let refreshes: Vec<&serde_json::Value> =
        steps.iter().filter(|s| s["op"] == "refresh").collect();
    assert_eq!(refreshes.len(), 1, "{digest:#}");
    assert_eq!(refreshes[0]["oldState"], refreshes[0]["newState"]);
    assert_eq!(
        refreshes[0]["oldState"]["outputs"]["message"],
        "hello world"
    );
    assert!(refreshes[0].get("detailedDiff").is_none(), "{digest:#}");
    assert!(
        steps.iter().any(|s| s["op"] == "update"),
        "the program's output differs from the cloud's: {digest:#}"
    );

    let events: Vec<serde_json::Value> = preview(true)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let refresh = |kind: &str| {
        let found = events.iter().filter_map(|e| e.get(kind));
        let found: Vec<&serde_json::Value> =
            found.filter(|e| e["metadata"]["op"] == "refresh").collect();
        assert_eq!(found.len(), 1, "{kind}: {events:#?}");
        found[0]["metadata"].clone()
    };
    let pre = refresh("resourcePreEvent");
    assert_eq!(pre["old"], pre["new"]);
    let read = refresh("resOutputsEvent");
    assert_eq!(read["new"]["outputs"]["message"], "changed by hand");
    assert_eq!(read["old"]["outputs"]["message"], "hello world");
    assert_eq!(read["diffs"], serde_json::json!(["message"]));
}
