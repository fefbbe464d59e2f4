//! The k3d provider through a stand-in k3d that records its calls (tests/stand-ins/k3d), the
//! Pulumi stand-in for the Kubernetes stage, and the real kubectl for `mara kubectl`.

mod common;

use std::path::{Path, PathBuf};

use assert_cmd::Command;

/// A workspace of the k3d provider's projects (each a minimal Pulumi YAML project), with the
/// stand-ins on PATH and a user kubeconfig of its own.
struct Local {
    dir: tempfile::TempDir,
    bin: tempfile::TempDir,
}

const USER_KUBECONFIG: &str = "apiVersion: v1
kind: Config
clusters:
- name: work
  cluster: {server: 'https://work.example:6443'}
contexts:
- name: work
  context: {cluster: work, user: work}
current-context: work
users:
- name: work
  user: {token: not-a-real-token}
";

impl Local {
    fn new() -> Local {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let bin = common::stand_in_bin();
        std::os::unix::fs::symlink(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stand-ins/k3d"),
            bin.path().join("k3d"),
        )
        .unwrap();
        let write = |path: &str, text: &str| {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write("mara.toml", "provider = \"k3d\"\n");
        write(
            "config/pulumi/environment",
            "PULUMI_STACK=dev
PULUMI_BACKEND_URL=file://.mara/pulumi-state
PULUMI_CONFIG_PASSPHRASE=k3d-test
MARA_SECRET_PROMETHEUS_ADMINPASS=prometheus-test
MARA_SECRET_SIRIUS_ACCOUNTS_PWD=accounts-test
MARA_SECRET_SIRIUS_LEDGER_PWD=ledger-test
MARA_SECRET_SIRIUS_DEMO_LOGIN_USER=demo
MARA_SECRET_SIRIUS_DEMO_LOGIN_PWD=demo-test
",
        );
        write(
            "config/pulumi/Pulumi.dev.yaml",
            &format!(
                "config:
  kubernetes:infra_type: k3d
  kubernetes:kubeconfig: {}
  kubernetes:context: k3d-mara-dev
  kubernetes:cluster_name: k3d-mara-dev
  kic-helm:fqdn: mara.localhost
",
                root.join(".mara/kube/dev.yaml").display()
            ),
        );
        write("home/.kube/config", USER_KUBECONFIG);
        let local = Local { dir, bin };
        let list = local
            .mara()
            .args(["show-execution", "--format", "list"])
            .output()
            .unwrap();
        assert!(list.status.success(), "{}", common::stderr(&list));
        for path in common::stdout(&list).lines() {
            if path != "infrastructure/k3d" {
                let name = path.replace('/', "-");
                write(
                    &format!("{path}/Pulumi.yaml"),
                    &format!("name: {name}\nruntime: yaml\n"),
                );
            }
        }
        local
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn user_kubeconfig(&self) -> PathBuf {
        self.root().join("home/.kube/config")
    }

    fn mara(&self) -> Command {
        let mut cmd = common::mara(self.root());
        cmd.env("PATH", common::path_with(self.bin.path()))
            .env("HOME", self.root().join("home"))
            .env("K3D_STAND_IN_LOG", self.root().join("k3d.log"))
            .env("K3D_STAND_IN_STATE", self.root().join("k3d-clusters"));
        cmd
    }

    /// Every call the stand-in k3d received, one line of arguments each.
    fn k3d_calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.root().join("k3d.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// `mara up` of the cluster project alone.
    fn make_cluster(&self) {
        let output = self
            .mara()
            .args(["up", "--yes", "--only", "infrastructure/k3d"])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", common::stdout(&output));
    }

    fn has_cluster(&self) -> bool {
        self.root().join("k3d-clusters/mara-dev").is_dir()
    }
}

#[test]
fn the_k3d_cluster_comes_first_and_its_kubeconfig_reaches_the_kubernetes_stage() {
    let local = Local::new();
    let output = local.mara().args(["up", "--yes"]).output().unwrap();
    assert!(output.status.success(), "{}", common::stdout(&output));
    assert_eq!(
        local.k3d_calls(),
        [
            "cluster list mara-dev",
            "cluster create mara-dev --wait --kubeconfig-update-default=false --kubeconfig-switch-context=false",
            "kubeconfig get mara-dev",
        ]
    );
    assert!(local.has_cluster());
    let out = common::stdout(&output);
    let k3d_done = out.find("[infrastructure/k3d] succeeded").expect(&out);
    let kubeconfig_started = out
        .find("[infrastructure/kubeconfig] up started")
        .expect(&out);
    assert!(k3d_done < kubeconfig_started, "{out}");

    // mara wrote the stack's kubeconfig, and merged it into the user's beside their own context.
    let written = std::fs::read_to_string(local.root().join(".mara/kube/dev.yaml")).unwrap();
    assert!(
        written.contains("current-context: k3d-mara-dev"),
        "{written}"
    );
    // Merged under the stack's own name: k3d's `k3d-mara-dev` becomes `mara-dev`.
    let user = std::fs::read_to_string(local.user_kubeconfig()).unwrap();
    assert!(
        user.contains("name: work") && user.contains("name: mara-dev"),
        "{user}"
    );

    // Again: the cluster exists, so it is not created twice.
    let output = local.mara().args(["up", "--yes"]).output().unwrap();
    assert!(output.status.success(), "{}", common::stdout(&output));
    assert_eq!(
        local.k3d_calls()[3..],
        ["cluster list mara-dev", "kubeconfig get mara-dev"]
    );

    let output = local.mara().args(["destroy", "--yes"]).output().unwrap();
    assert!(output.status.success(), "{}", common::stdout(&output));
    assert_eq!(local.k3d_calls().last().unwrap(), "cluster delete mara-dev");
    assert!(!local.has_cluster());
    let out = common::stdout(&output);
    let sirius_done = out
        .find("[kubernetes/applications/sirius] succeeded")
        .expect(&out);
    let k3d_started = out
        .find("[infrastructure/k3d] destroy started")
        .expect(&out);
    assert!(sirius_done < k3d_started, "the cluster goes last: {out}");
    assert!(!local.root().join(".mara/kube/dev.yaml").exists());
    let user = std::fs::read_to_string(local.user_kubeconfig()).unwrap();
    assert!(
        user.contains("name: work") && !user.contains("mara-dev"),
        "{user}"
    );
    assert!(
        user.contains("current-context: work"),
        "the context the user had is current again: {user}"
    );
}

#[test]
fn images_are_imported_into_the_stack_s_cluster() {
    let local = Local::new();
    let import = || {
        local
            .mara()
            .args(["images", "import", "nginx:1.27", "sirius/frontend:dev"])
            .output()
            .unwrap()
    };
    // No cluster yet: k3d's own failure is passed on, its message and exit code, nothing added.
    let output = import();
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        common::stderr(&output),
        "FATA[0000] failed to get cluster mara-dev\n"
    );

    local.make_cluster();
    let output = import();
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert!(common::stdout(&output).contains("Successfully imported 2 image(s)"));
    assert_eq!(
        local.k3d_calls().last().unwrap(),
        "image import nginx:1.27 sirius/frontend:dev -c mara-dev"
    );
}

#[test]
fn images_import_needs_a_k3d_stack() {
    let ws = common::Workspace::new(&[
        ("mara.toml", "provider = \"kubeconfig\"\n"),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
    ]);
    let output = ws
        .mara()
        .args(["images", "import", "nginx"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    insta::assert_snapshot!(common::stderr(&output), @r"
    error: `mara images import` loads images into a local k3d cluster, and stack `dev` uses provider kubeconfig
      hint: push the images to the cluster's registry instead
    ");
}

#[test]
fn mara_kubectl_uses_the_stack_s_kubeconfig_and_never_the_user_s() {
    let Ok(kubectl) = which::which("kubectl") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "kubectl is not on PATH (it only reads kubeconfig files here; no cluster is needed)"
        );
        eprintln!("skipped: kubectl is not on PATH");
        return;
    };
    assert!(kubectl.is_file());
    let local = Local::new();

    let output = local
        .mara()
        .args(["kubectl", "config", "get-contexts"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    insta::assert_snapshot!(common::stderr(&output), @r"
    error: stack `dev` has no kubeconfig yet
      hint: `mara up` writes .mara/kube/dev.yaml when the stack's cluster is up
    ");

    local.make_cluster();
    let before = std::fs::read(local.user_kubeconfig()).unwrap();

    // KUBECONFIG pointing at the user's file is overridden, not merged with.
    let output = local
        .mara()
        .env("KUBECONFIG", local.user_kubeconfig())
        .args(["kubectl", "--", "config", "get-contexts", "-o", "name"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert_eq!(common::stdout(&output), "k3d-mara-dev\n");
    assert_eq!(std::fs::read(local.user_kubeconfig()).unwrap(), before);

    // kubectl's exit code is mara's; its message is the only one.
    let output = local
        .mara()
        .args(["kubectl", "config", "use-context", "nowhere"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = common::stderr(&output);
    assert!(
        stderr.contains("no context exists with the name: \"nowhere\""),
        "{stderr}"
    );
    assert!(!stderr.contains("mara"), "{stderr}");
}

#[test]
fn mara_kubectl_reaches_an_existing_cluster_through_the_configured_context() {
    if which::which("kubectl").is_err() {
        eprintln!("skipped: kubectl is not on PATH");
        return;
    }
    let two_contexts = USER_KUBECONFIG.replace(
        "current-context: work",
        "- name: staging\n  context: {cluster: work, user: work}\ncurrent-context: work",
    );
    let ws = common::Workspace::new(&[
        ("mara.toml", "provider = \"kubeconfig\"\n"),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        ("clusters/team.yaml", &two_contexts),
        (
            "config/pulumi/Pulumi.dev.yaml",
            "config:\n  kubernetes:infra_type: kubeconfig\n  kubernetes:kubeconfig: clusters/team.yaml\n  kubernetes:context: staging\n",
        ),
    ]);
    let output = ws
        .mara()
        .args([
            "kubectl",
            "config",
            "view",
            "--minify",
            "-o",
            "jsonpath={.contexts[0].name}",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert_eq!(common::stdout(&output), "staging");
}
