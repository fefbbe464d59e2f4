//! `mara validate` through the binary: every problem at once, exit 3, and not one byte changed.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{Workspace, example, stderr, stdout, tree};

/// A directory holding do-nothing `pulumi` and `kubectl` programs, for PATH.
fn fake_tools() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for tool in ["pulumi", "kubectl"] {
        let path = dir.path().join(tool);
        std::fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

fn redact(text: &str, root: &Path) -> String {
    text.replace(&root.display().to_string(), "[WORKSPACE]")
}

fn redact_tools(text: &str, tools: &Path) -> String {
    text.replace(&tools.display().to_string(), "[TOOLS]")
}

#[test]
fn several_problems_are_reported_together_and_nothing_changes() {
    let ws = Workspace::new(&[
        ("mara.toml", "parallel = 2\n"),
        (
            "config/pulumi/environment",
            "# comment\nPULUMI_STACK=dev\nnot a pair\nPULUMI_STACK=dev\n",
        ),
        (
            "config/pulumi/Pulumi.dev.yaml",
            "config:\n  aws:region: us-east-1\n  kubernetes:infra_type: DO\n",
        ),
        ("infrastructure/aws/vpc/Pulumi.yaml", "runtime: yaml\n"),
    ]);
    ws.project("infrastructure/aws/eks", "aws-eks");
    ws.project("infrastructure/aws/ecr", "aws-eks");
    let before = tree(ws.path());
    let output = ws
        .mara()
        .args(["validate", "--provider", "aws", "--stack", "dev"])
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert_eq!(tree(ws.path()), before, "validate changed the workspace");
    assert!(!ws.path().join(".mara").exists());

    let out = stdout(&output);
    for expected in [
        "config/pulumi/environment:3: expected KEY=VALUE",
        "config/pulumi/environment:4: `PULUMI_STACK`: duplicate key (first set on line 2)",
        "infrastructure/aws/vpc/Pulumi.yaml: has no `name:`",
        "infrastructure/aws/eks and infrastructure/aws/ecr are named `aws-eks`",
        "12 projects have no directory in the workspace root: infrastructure/kubeconfig, kubernetes/secrets,",
        "config/pulumi/Pulumi.dev.yaml:3: the stack was built with kubernetes:infra_type `DO`",
        "pulumi: not found on PATH",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    assert!(
        stderr(&output).contains("error: validation found"),
        "{}",
        stderr(&output)
    );
    insta::assert_snapshot!("validate_many_problems", redact(&out, ws.path()));
}

#[test]
fn the_example_workspace_is_valid_with_its_tools_and_secrets() {
    let tools = fake_tools();
    // A copy: the quick start deploys the example in place, and no test depends on its state.
    let copy = tempfile::tempdir().unwrap();
    common::copy_example(&example("mara-local"), copy.path());
    let dir = copy.path().to_path_buf();
    let before = tree(&dir);
    // Its secrets come from its environment file; none of their values is shown.
    let output = common::mara(&dir)
        .arg("validate")
        .env("PATH", tools.path())
        .output()
        .unwrap();
    let out = stdout(&output);
    assert!(output.status.success(), "{out}{}", stderr(&output));
    assert!(out.contains("✓ valid"), "{out}");
    assert!(!out.contains("example-prometheus-admin"));
    assert_eq!(tree(&dir), before);
    insta::assert_snapshot!(
        "validate_example",
        redact(&redact_tools(&out, tools.path()), &dir)
    );
}

#[test]
fn a_missing_secret_fails_without_a_terminal() {
    let tools = fake_tools();
    // The example supplies its secrets in its environment file; take them out.
    let dir = tempfile::tempdir().unwrap();
    common::copy_example(&example("mara-local"), dir.path());
    let env_file = dir.path().join("config/pulumi/environment");
    let text: String = std::fs::read_to_string(&env_file)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("MARA_SECRET_"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&env_file, text).unwrap();
    let output = common::mara(dir.path())
        .arg("validate")
        .env("PATH", tools.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let out = stdout(&output);
    assert!(out.contains("MARA_SECRET_PROMETHEUS_ADMINPASS"), "{out}");
}

#[test]
fn the_first_run_is_reported_with_what_will_be_asked() {
    let ws = Workspace::new(&[("config/pulumi/environment", "")]);
    let output = ws
        .mara()
        .args(["validate", "-p", "aws", "-s", "dev", "--output", "json"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["valid"], false);
    let configuration: Vec<&serde_json::Value> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["area"] == "configuration")
        .collect();
    let message = configuration[0]["message"].as_str().unwrap();
    assert!(
        message.contains("first run")
            && message.contains("aws:region")
            && message.contains("eks:k8s_version"),
        "{message}"
    );
    assert_eq!(
        configuration[0]["status"], "fail",
        "without a terminal nothing can be asked"
    );
}

#[test]
fn the_environment_file_format() {
    let ws = Workspace::new(&[(
        "config/pulumi/environment",
        "# comment\n\nexport PULUMI_STACK='stage.eu-1'\nA=\"quoted # not a comment\"\nB=100%=x\nC=a#b\n",
    )]);
    let output = ws
        .mara()
        .args(["validate", "-p", "kubeconfig"])
        .output()
        .unwrap();
    let out = stdout(&output);
    assert!(
        out.contains("config/pulumi/environment: 4 variables"),
        "{out}"
    );
    assert!(
        out.contains("stage.eu-1 (from PULUMI_STACK in the environment file)"),
        "{out}"
    );
    assert!(
        out.contains("config/pulumi/Pulumi.stage.eu-1.yaml does not exist"),
        "{out}"
    );
}

#[test]
fn a_malformed_environment_file_stops_planning_commands_with_exit_3() {
    let ws = Workspace::new(&[(
        "config/pulumi/environment",
        "PULUMI_STACK=dev\nexport = x\nPULUMI_STACK=prod\n",
    )]);
    let output = ws.mara().args(["show-execution"]).output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    let err = stderr(&output);
    assert!(err.contains("config/pulumi/environment:2:"), "{err}");
    assert!(
        err.contains("config/pulumi/environment:3: `PULUMI_STACK`: duplicate key"),
        "{err}"
    );
}

#[test]
fn a_broken_mara_toml_still_checks_the_rest() {
    let ws = Workspace::new(&[("mara.toml", "parallel = \"many\"\n")]);
    let output = ws
        .mara()
        .args(["validate", "-p", "aws", "-s", "dev"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let out = stdout(&output);
    assert!(out.contains("mara.toml:1:"), "{out}");
    assert!(
        out.contains(
            "15 projects have no directory in the workspace root: infrastructure/aws/vpc,"
        ),
        "the other checks still ran: {out}"
    );

    // mara.toml names the provider: unread, the provider it names is not known, and a stack
    // that records another kind is no mistake of its own.
    let ws = Workspace::new(&[
        ("mara.toml", "provider = \"mine\"\nparallel = \"many\"\n"),
        (
            "providers/mine.toml",
            "description = \"mine\"\n[[project]]\npath = \"a\"\n",
        ),
        (
            "config/pulumi/Pulumi.dev.yaml",
            "config:\n  kubernetes:infra_type: mine\n",
        ),
    ]);
    let output = ws.mara().args(["validate", "-s", "dev"]).output().unwrap();
    let out = stdout(&output);
    assert_eq!(output.status.code(), Some(3), "{out}");
    assert!(out.contains("mara.toml:2:"), "{out}");
    assert!(
        out.contains("- provider       not chosen: mara.toml could not be read, and may name it"),
        "{out}"
    );
    assert!(out.contains("1 problem"), "{out}");
}

#[test]
fn quiet_shows_only_what_went_wrong() {
    let ws = Workspace::new(&[("config/pulumi/environment", "")]);
    let output = ws
        .mara()
        .args(["-q", "validate", "-p", "aws", "-s", "dev"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let out = stdout(&output);
    assert!(
        out.contains("✗ project") && out.contains("problems"),
        "{out}"
    );
    assert!(
        !out.contains("✓ workspace") && !out.contains("✓ graph"),
        "{out}"
    );
}

#[test]
fn a_python_project_without_its_virtualenv_is_reported() {
    let ws = Workspace::new(&[
        (
            "providers/py.toml",
            "description = \"py\"\n[[project]]\npath = \"app\"\n",
        ),
        (
            "app/Pulumi.yaml",
            "name: app\nruntime:\n  name: python\n  options:\n    virtualenv: ../venv\n",
        ),
    ]);
    let output = ws
        .mara()
        .args(["validate", "-p", "py", "-s", "dev"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let out = stdout(&output);
    assert!(
        out.contains(
            "app: its Pulumi.yaml runs Python in the virtualenv venv, which does not exist"
        ),
        "{out}"
    );
    std::fs::create_dir_all(ws.path().join("venv/bin")).unwrap();
    let output = ws
        .mara()
        .args(["validate", "-p", "py", "-s", "dev"])
        .output()
        .unwrap();
    assert!(
        !stdout(&output).contains("virtualenv"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn what_the_original_required_is_required_again() {
    // aws: the region, and the sizes in order (min ≤ desired ≤ max).
    let ws = Workspace::new(&[
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        (
            "config/pulumi/Pulumi.dev.yaml",
            "config:\n  kubernetes:infra_type: AWS\n  eks:min_size: 3\n  eks:max_size: 6\n  eks:desired_capacity: 8\n",
        ),
    ]);
    for (project, name) in [
        ("infrastructure/aws/vpc", "aws-vpc"),
        ("infrastructure/aws/eks", "aws-eks"),
        ("infrastructure/aws/ecr", "aws-ecr"),
    ] {
        ws.project(project, name);
    }
    let tools = fake_tools();
    let validate = |only: &str, env: &[(&str, &str)]| {
        let output = ws
            .mara()
            .args(["validate", "--provider", "aws", "--only", only])
            .env("PATH", tools.path())
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (output.status.code(), stdout(&output))
    };
    let (code, out) = validate("infrastructure/aws/eks", &[]);
    assert_eq!(code, Some(3), "{out}");
    assert!(
        out.contains("`aws:region`: required by infrastructure/aws/eks but not set"),
        "{out}"
    );
    assert!(
        out.contains("config/pulumi/Pulumi.dev.yaml:5: `eks:desired_capacity` is 8, more than `eks:max_size` (6)"),
        "{out}"
    );

    // do: the token, on every run, not only the first.
    ws.write(
        "config/pulumi/Pulumi.dev.yaml",
        "config:\n  kubernetes:infra_type: DO\n  kic-helm:fqdn: demo.example.com\n",
    );
    ws.project("infrastructure/digitalocean/container-registry", "docr");
    let validate = |env: &[(&str, &str)]| {
        let output = ws
            .mara()
            .args([
                "validate",
                "--provider",
                "do",
                "--only",
                "container-registry",
            ])
            .env("PATH", tools.path())
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (output.status.code(), stdout(&output))
    };
    let (code, out) = validate(&[]);
    assert_eq!(code, Some(3), "{out}");
    assert!(
        out.contains("provider do needs `digitalocean:token` (DigitalOcean API token) on every run: DIGITALOCEAN_TOKEN is not set, and it is not stored")
            && out.contains("`mara -p do config set --secret digitalocean:token`"),
        "{out}"
    );
    let (_, out) = validate(&[("DIGITALOCEAN_TOKEN", "dop_v1_x")]);
    assert!(
        out.contains("`digitalocean:token`: from DIGITALOCEAN_TOKEN"),
        "{out}"
    );
}

#[test]
fn refresh_and_destroy_of_aws_without_its_region_stop_before_any_engine_call() {
    let ws = Workspace::new(&[
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        (
            "config/pulumi/Pulumi.dev.yaml",
            "config:\n  kubernetes:infra_type: AWS\n  aws:profile: none\n",
        ),
    ]);
    ws.project("infrastructure/aws/vpc", "aws-vpc");
    let bin = common::stand_in_bin();
    let log = ws.path().join("stand-in.jsonl");
    for operation in ["refresh", "destroy"] {
        let output = ws
            .mara()
            .args(["-p", "aws", operation, "--yes", "--only", "vpc"])
            .env("PATH", common::path_with(bin.path()))
            .env("PULUMI_STAND_IN_LOG", &log)
            .output()
            .unwrap();
        let said = common::stderr(&output);
        assert_eq!(output.status.code(), Some(3), "{operation}: {said}");
        assert!(
            said.contains("`aws:region`: required by infrastructure/aws/vpc but not set"),
            "{operation}: {said}"
        );
        assert!(!log.exists(), "{operation}: an engine was called");
    }
}
