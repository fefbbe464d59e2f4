//! The kubectl engine (docs/commands.md, "The kubectl engine"): its commands checked by the real
//! kubectl's own flag parsing (against a kubeconfig whose server is a closed loopback port, so
//! that a command kubectl accepts fails on the connection, and one it does not fails on the
//! flag), and its behaviour through a recording stand-in that keeps the objects it was given
//! (tests/stand-ins/kubectl).

mod common;

use std::path::{Path, PathBuf};

use assert_cmd::Command;

use common::project;

/// A cluster nobody serves: port 1 on the loopback is closed.
const CLOSED_CLUSTER: &str = "apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster: {server: 'https://127.0.0.1:1'}
contexts:
- name: k3d-mara-dev
  context: {cluster: nowhere, user: nobody}
- name: users-own
  context: {cluster: nowhere, user: nobody}
current-context: users-own
users:
- name: nobody
  user: {token: not-a-token}
";

/// A workspace of two kubectl projects — namespaces (manifest files) and the application (a
/// kustomization) — on the cluster the configuration names.
struct Manifests {
    dir: tempfile::TempDir,
    bin: tempfile::TempDir,
}

impl Manifests {
    /// `after`: the application follows the namespaces (else they are independent).
    fn new(after: bool) -> Manifests {
        let dir = tempfile::tempdir().unwrap();
        let after = if after {
            "after = [\"bootstrap/namespaces\"]\n"
        } else {
            ""
        };
        let files = [
            ("mara.toml", "provider = \"manifests\"\n".to_string()),
            (
                "providers/manifests.toml",
                format!(
                    "description = \"Manifests on an existing cluster\"
infra_type = \"manifests\"

[[project]]
path = \"bootstrap/namespaces\"
description = \"Namespaces\"
engine = \"kubectl\"

[[project]]
path = \"bootstrap/app\"
description = \"The application\"
engine = \"kubectl\"
{after}"
                ),
            ),
            (
                "config/pulumi/environment",
                "PULUMI_STACK=dev\nPULUMI_BACKEND_URL=file://.mara/pulumi-state\n".into(),
            ),
            (
                "config/pulumi/Pulumi.dev.yaml",
                "config:\n  kubernetes:infra_type: manifests\n  kubernetes:kubeconfig: cluster.yaml\n  kubernetes:context: k3d-mara-dev\n".into(),
            ),
            ("cluster.yaml", CLOSED_CLUSTER.into()),
            (
                "bootstrap/namespaces/demo.yaml",
                "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n".into(),
            ),
            (
                "bootstrap/app/kustomization.yaml",
                "resources:\n- config.yaml\n".into(),
            ),
            (
                "bootstrap/app/config.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: demo\ndata:\n  a: b\n".into(),
            ),
        ];
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        Manifests {
            dir,
            bin: tempfile::tempdir().unwrap(),
        }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    /// mara with the real kubectl, and a KUBECONFIG of the user's that must not be used.
    fn mara(&self) -> Command {
        let mut cmd = common::mara(self.root());
        cmd.env("HOME", self.root().join("home"))
            .env("KUBECONFIG", self.root().join("users-own.yaml"));
        cmd
    }

    /// mara with the stand-in kubectl first on PATH.
    fn mara_stand_in(&self) -> Command {
        let stand_in = self.bin.path().join("kubectl");
        if !stand_in.exists() {
            std::os::unix::fs::symlink(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stand-ins/kubectl"),
                &stand_in,
            )
            .unwrap();
        }
        let mut cmd = self.mara();
        cmd.env("PATH", common::path_with(self.bin.path()))
            .env("KUBECTL_STAND_IN_LOG", self.root().join("kubectl.log"))
            .env("KUBECTL_STAND_IN_STATE", self.root().join("objects"));
        cmd
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.root().join("kubectl.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| l.replace(&self.root().display().to_string(), "<root>"))
            .collect()
    }

    fn objects(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.root().join("objects"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    fn write(&self, path: &str, text: &str) {
        std::fs::write(self.root().join(path), text).unwrap();
    }

    /// Every log line of the stack's last run, with the projects' logs.
    fn last_logs(&self) -> String {
        let logs: PathBuf = self.root().join(".mara/logs");
        let mut runs: Vec<PathBuf> = std::fs::read_dir(&logs)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        runs.sort();
        let mut text = String::new();
        for project in ["bootstrap/namespaces.log", "bootstrap/app.log"] {
            text.push_str(
                &std::fs::read_to_string(runs.last().unwrap().join(project)).unwrap_or_default(),
            );
        }
        text
    }
}

#[test]
fn every_command_of_the_engine_passes_the_real_kubectl_s_flag_parsing() {
    if common::tools::tool(
        "kubectl",
        "it parses flags and kubeconfigs here; no cluster is needed",
    )
    .is_none()
    {
        return;
    }
    let ws = Manifests::new(false);
    // The calibration: a flag kubectl lacks is told apart from a cluster it cannot reach.
    let bogus = std::process::Command::new("kubectl")
        .args([
            "apply",
            "--server-side",
            "--no-such-flag",
            "--filename=bootstrap/namespaces",
        ])
        .arg(format!(
            "--kubeconfig={}",
            ws.root().join("cluster.yaml").display()
        ))
        .current_dir(ws.root())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bogus.stderr).contains("unknown flag: --no-such-flag"));

    for operation in ["up", "preview", "refresh", "destroy"] {
        let (code, report) = common::json_report(ws.mara(), &[operation, "--yes", "--keep-going"]);
        assert_eq!(code, 1, "{operation}: {report:#}");
        let logs = ws.last_logs();
        for path in ["bootstrap/namespaces", "bootstrap/app"] {
            let entry = project(&report, path);
            assert_eq!(entry["status"], "failed", "{operation} {path}: {report:#}");
            let reason = entry["reason"].as_str().unwrap();
            assert!(
                // "connection refused" (kubectl 1.2x and later), "was refused" (Debian's 1.20).
                reason.contains("127.0.0.1:1") && reason.contains("refused"),
                "{operation} {path}: kubectl took every flag and went for the cluster: {reason}"
            );
        }
        assert!(!logs.contains("unknown flag"), "{operation}: {logs}");
        // The configured context, never the user's current one.
        assert!(logs.contains("--context=k3d-mara-dev"), "{logs}");
        assert!(!logs.contains("users-own"), "{logs}");
    }
}

#[test]
fn manifests_are_applied_previewed_and_deleted_as_the_other_engines_projects_are() {
    let ws = Manifests::new(true);
    let output = ws.mara_stand_in().args(["up", "--yes"]).output().unwrap();
    assert!(output.status.success(), "{}", common::stdout(&output));
    let out = common::stdout(&output);
    assert!(
        out.contains("[bootstrap/namespaces] namespace/demo serverside-applied\n"),
        "{out}"
    );
    assert!(
        out.contains("[bootstrap/app] configmap/web serverside-applied\n"),
        "{out}"
    );
    assert_eq!(
        ws.calls(),
        [
            "apply --server-side --field-manager=mara --filename=<root>/bootstrap/namespaces --recursive --kubeconfig=<root>/cluster.yaml --context=k3d-mara-dev",
            "apply --server-side --field-manager=mara --kustomize=<root>/bootstrap/app --kubeconfig=<root>/cluster.yaml --context=k3d-mara-dev",
        ]
    );
    assert_eq!(ws.objects(), ["ConfigMap.web", "Namespace.demo"]);

    // Nothing changed: the preview says so, and --expect-no-changes passes.
    let (code, report) =
        common::json_report(ws.mara_stand_in(), &["preview", "--expect-no-changes"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(project(&report, "bootstrap/app")["status"], "unchanged");

    // A changed object and a new one: counted, named, and exit 4 under --expect-no-changes.
    ws.write(
        "bootstrap/app/config.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: demo\ndata:\n  a: c\n",
    );
    ws.write(
        "bootstrap/namespaces/jobs.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: jobs\n",
    );
    let (code, report) = common::json_report(
        ws.mara_stand_in(),
        &["preview", "--expect-no-changes", "--diff"],
    );
    assert_eq!(code, 4, "{report:#}");
    assert_eq!(
        project(&report, "bootstrap/namespaces")["changes"],
        serde_json::json!({"create": 1})
    );
    assert_eq!(
        project(&report, "bootstrap/app")["changes"],
        serde_json::json!({"update": 1})
    );
    let output = ws.mara_stand_in().args(["preview"]).output().unwrap();
    let out = common::stdout(&output);
    assert!(
        out.contains("[bootstrap/app] -  a: b\n[bootstrap/app] +  a: c\n"),
        "{out}"
    );
    let row = |path: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("{path}  ")))
            .unwrap_or_default()
            .trim_end()
            .to_string()
    };
    assert!(row("bootstrap/namespaces").ends_with(" +1"), "{out}");
    assert!(row("bootstrap/app").ends_with(" ~1"), "{out}");

    // A field another manager owns: the project fails with kubectl's own words.
    ws.write(
        "bootstrap/app/config.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: demo\ndata:\n  a: d\n  mara-test: conflict\n",
    );
    let (code, report) = common::json_report(ws.mara_stand_in(), &["up", "--yes"]);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(
        project(&report, "bootstrap/app")["reason"],
        "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using v1: .data.a"
    );
    assert_eq!(
        project(&report, "bootstrap/namespaces")["status"],
        "succeeded"
    );

    // Destroy: the application first, then its namespaces; each deletion counted.
    let (code, report) = common::json_report(ws.mara_stand_in(), &["destroy", "--yes"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(
        project(&report, "bootstrap/namespaces")["changes"],
        serde_json::json!({"delete": 2})
    );
    assert_eq!(ws.objects(), Vec::<String>::new());
    let calls = ws.calls();
    let deletes: Vec<&String> = calls.iter().filter(|c| c.starts_with("delete")).collect();
    assert_eq!(
        deletes,
        [
            "delete --ignore-not-found --wait --kustomize=<root>/bootstrap/app --kubeconfig=<root>/cluster.yaml --context=k3d-mara-dev",
            "delete --ignore-not-found --wait --filename=<root>/bootstrap/namespaces --recursive --kubeconfig=<root>/cluster.yaml --context=k3d-mara-dev",
        ]
    );
}

#[test]
fn a_kustomization_below_manifest_files_is_stopped_before_anything_runs() {
    let ws = Manifests::new(true);
    let sub = ws.root().join("bootstrap/namespaces/extra");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(sub.join("kustomization.yaml"), "resources: []\n").unwrap();
    let output = ws.mara_stand_in().args(["up", "--yes"]).output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    insta::assert_snapshot!(common::stderr(&output), @r"
    error: bootstrap/namespaces: bootstrap/namespaces/extra/kustomization.yaml would be applied as a manifest: kubectl reads every .yaml below bootstrap/namespaces when the project has no kustomization of its own
      hint: make that directory a project of its own, or put a kustomization.yaml at the project's top that names what to apply
    ");
    assert!(ws.calls().is_empty());
}

#[test]
fn a_kubectl_project_without_manifests_is_stopped_before_anything_runs() {
    let ws = Manifests::new(true);
    std::fs::remove_file(ws.root().join("bootstrap/namespaces/demo.yaml")).unwrap();
    let output = ws.mara_stand_in().args(["up", "--yes"]).output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    insta::assert_snapshot!(common::stderr(&output), @"error: bootstrap/namespaces: no Kubernetes manifests (.yaml, .yml, .json) and no kustomization.yaml in bootstrap/namespaces");
    assert!(ws.calls().is_empty());
}

#[test]
fn a_kubeconfig_that_is_not_there_stops_an_up_and_leaves_the_manifests_untouched_otherwise() {
    let ws = Manifests::new(true);
    std::fs::remove_file(ws.root().join("cluster.yaml")).unwrap();
    let output = ws.mara_stand_in().args(["up", "--yes"]).output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    insta::assert_snapshot!(common::stderr(&output), @r"
    error: bootstrap/namespaces: the kubectl engine reaches the cluster through the kubeconfig the configuration names (kubernetes:kubeconfig), cluster.yaml, which does not exist
      hint: point kubernetes:kubeconfig at the cluster's kubeconfig file
    ");
    // A preview waits for the cluster: its changes are not known, and --expect-no-changes fails.
    let (code, report) =
        common::json_report(ws.mara_stand_in(), &["preview", "--expect-no-changes"]);
    assert_eq!(code, 4, "{report:#}");
    assert_eq!(project(&report, "bootstrap/app")["status"], "waiting");
    assert_eq!(
        project(&report, "bootstrap/app")["reason"],
        "the kubeconfig of its cluster, cluster.yaml, does not exist: waits for its cluster (not previewed)"
    );
    // Destroy and refresh (a cluster gone already): nothing to reach, nothing touched, no error.
    for operation in ["destroy", "refresh"] {
        let (code, report) = common::json_report(ws.mara_stand_in(), &[operation, "--yes"]);
        assert_eq!(code, 0, "{operation}: {report:#}");
        for path in ["bootstrap/namespaces", "bootstrap/app"] {
            assert_eq!(
                project(&report, path)["reason"],
                "the kubeconfig of its cluster, cluster.yaml, does not exist: not touched"
            );
        }
    }
    assert!(ws.calls().is_empty());
}
