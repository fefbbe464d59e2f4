//! The k3d provider and the local cluster's commands through a stand-in k3d that records its
//! calls and keeps its clusters' state (tests/stand-ins/k3d), a stand-in Docker that knows the
//! local images' ids (tests/stand-ins/docker), the Pulumi stand-in for the Kubernetes stage, and
//! the real kubectl for `mara kubectl`.

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
        for tool in ["k3d", "docker"] {
            std::os::unix::fs::symlink(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/stand-ins")
                    .join(tool),
                bin.path().join(tool),
            )
            .unwrap();
        }
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
            // As a first run writes it: the kubeconfig relative to the workspace.
            "config:
  kubernetes:infra_type: k3d
  kubernetes:kubeconfig: .mara/kube/dev.yaml
  kubernetes:context: k3d-mara-dev
  kubernetes:cluster_name: k3d-mara-dev
  kic-helm:fqdn: mara.localhost
",
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
            .env("PULUMI_STAND_IN_LOG", self.root().join("pulumi.log"))
            .env("K3D_STAND_IN_LOG", self.root().join("k3d.log"))
            .env("K3D_STAND_IN_STATE", self.root().join("k3d-clusters"))
            .env("DOCKER_STAND_IN_IMAGES", self.root().join("docker-images"))
            .env("DOCKER_STAND_IN_LOG", self.root().join("docker.log"));
        cmd
    }

    /// The local Docker's images, as `IMAGE ID` lines.
    fn docker_has(&self, images: &str) {
        std::fs::write(self.root().join("docker-images"), images).unwrap();
    }

    /// The cluster's state as the stand-in keeps it: `running`, `stopped`, or `None` (missing).
    fn cluster_state(&self) -> Option<String> {
        std::fs::read_to_string(self.root().join("k3d-clusters/mara-dev/state"))
            .ok()
            .map(|s| s.trim().to_string())
    }

    /// The images the stand-in's cluster received, in order.
    fn cluster_images(&self) -> Vec<String> {
        std::fs::read_to_string(self.root().join("k3d-clusters/mara-dev/images"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The k3d calls made since the first `from`.
    fn k3d_calls_from(&self, from: usize) -> Vec<String> {
        self.k3d_calls().get(from..).unwrap_or_default().to_vec()
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
            "cluster list mara-dev -o json",
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

    // The shared file names the kubeconfig relative to the workspace, the same on every machine;
    // the engines, which run in each project's directory, get a copy with it made absolute.
    let shared =
        std::fs::read_to_string(local.root().join("config/pulumi/Pulumi.dev.yaml")).unwrap();
    assert!(
        shared.contains("kubernetes:kubeconfig: .mara/kube/dev.yaml\n"),
        "{shared}"
    );
    let copy = local.root().join(".mara/config/Pulumi.dev.yaml");
    let given = std::fs::read_to_string(&copy).unwrap();
    let absolute = local.root().join(".mara/kube/dev.yaml");
    assert!(
        given.contains(&format!("kubernetes:kubeconfig: {}\n", absolute.display())),
        "{given}"
    );
    let calls = std::fs::read_to_string(local.root().join("pulumi.log")).unwrap();
    let up = calls
        .lines()
        .find(|l| l.contains("\"up\"") && l.contains("kubernetes/logstore"))
        .expect(&calls);
    assert!(up.contains(&copy.display().to_string()), "{up}");

    // Again: the cluster exists, so it is not created twice.
    let output = local.mara().args(["up", "--yes"]).output().unwrap();
    assert!(output.status.success(), "{}", common::stdout(&output));
    assert_eq!(
        local.k3d_calls()[3..],
        ["cluster list mara-dev -o json", "kubeconfig get mara-dev"]
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
fn the_cluster_is_started_stopped_and_deleted_by_command_each_idempotent() {
    let local = Local::new();
    let run = |args: &[&str]| local.mara().args(args).output().unwrap();

    let output = run(&["cluster", "status"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    insta::assert_snapshot!(common::stdout(&output), @r"
    Cluster mara-dev of stack dev: not created
    Kubeconfig: none yet (`mara cluster start` creates the cluster and writes .mara/kube/dev.yaml)
    ");

    // Missing: created by the cluster project's `up`, recorded as a run, its kubeconfig written.
    let output = run(&["cluster", "start"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    let out = common::stdout(&output);
    assert!(
        out.starts_with("Cluster mara-dev of stack dev does not exist: creating it (mara up --only infrastructure/k3d).\n"),
        "{out}"
    );
    assert!(out.contains("[infrastructure/k3d] succeeded"), "{out}");
    assert_eq!(local.cluster_state().as_deref(), Some("running"));
    assert!(local.root().join(".mara/kube/dev.yaml").is_file());
    let history = run(&["history"]);
    assert!(
        common::stdout(&history).contains("up"),
        "{}",
        common::stdout(&history)
    );

    // Running: nothing to do, and said so; k3d is only asked.
    let calls = local.k3d_calls().len();
    let output = run(&["cluster", "start"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert_eq!(
        common::stdout(&output),
        "Cluster mara-dev of stack dev is already running.\n"
    );
    assert_eq!(local.k3d_calls_from(calls), ["cluster list -o json"]);

    // Running without its kubeconfig (a hook that failed, a file removed): written again.
    std::fs::remove_file(local.root().join(".mara/kube/dev.yaml")).unwrap();
    let output = run(&["cluster", "start"]);
    assert!(output.status.success(), "{}", common::stdout(&output));
    assert!(
        common::stdout(&output).starts_with("Cluster mara-dev of stack dev is running, but its kubeconfig is not written: writing it (mara up --only infrastructure/k3d).\n"),
        "{}",
        common::stdout(&output)
    );
    assert!(local.root().join(".mara/kube/dev.yaml").is_file());

    let output = run(&["cluster", "stop"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert_eq!(
        common::stdout(&output),
        "Cluster mara-dev of stack dev stopped.\n"
    );
    assert_eq!(local.cluster_state().as_deref(), Some("stopped"));
    let output = run(&["cluster", "stop"]);
    assert_eq!(
        common::stdout(&output),
        "Cluster mara-dev of stack dev is already stopped.\n"
    );

    let output = run(&["cluster", "status"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    insta::assert_snapshot!(common::stdout(&output).replace(&local.root().display().to_string(), "<root>"), @r"
    Cluster mara-dev of stack dev: stopped
      NODE                   ROLE          STATE
      k3d-mara-dev-server-0  server        exited
      k3d-mara-dev-serverlb  loadbalancer  exited
    Kubeconfig: .mara/kube/dev.yaml (its current context)
    Merged into: <root>/home/.kube/config (context mara-dev)
    ");
    let json = run(&["cluster", "status", "--output", "json"]);
    let status: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(status["state"], "stopped");
    assert_eq!(status["nodes"][0]["role"], "server");
    assert_eq!(status["kubeconfig"]["exists"], true);

    // `up` starts a stopped cluster rather than failing on it or making it again.
    let calls = local.k3d_calls().len();
    let output = run(&["up", "--yes", "--only", "infrastructure/k3d"]);
    assert!(output.status.success(), "{}", common::stdout(&output));
    assert_eq!(
        local.k3d_calls_from(calls),
        [
            "cluster list mara-dev -o json",
            "cluster start mara-dev --wait",
            "kubeconfig get mara-dev"
        ]
    );
    assert_eq!(local.cluster_state().as_deref(), Some("running"));

    // A stopped cluster is started by `cluster start`.
    run(&["cluster", "stop"]);
    let calls = local.k3d_calls().len();
    let output = run(&["cluster", "start"]);
    assert_eq!(
        common::stdout(&output),
        "Cluster mara-dev of stack dev started.\n"
    );
    assert_eq!(
        local.k3d_calls_from(calls),
        ["cluster list -o json", "cluster start mara-dev --wait"]
    );

    // A cluster whose load balancer stopped is partly running: `up` and `start` start it.
    std::fs::write(local.root().join("k3d-clusters/mara-dev/state"), "partly\n").unwrap();
    let status = run(&["cluster", "status"]);
    assert!(common::stdout(&status).starts_with("Cluster mara-dev of stack dev: partly running\n"));
    let calls = local.k3d_calls().len();
    let output = run(&["up", "--yes", "--only", "infrastructure/k3d"]);
    assert!(output.status.success(), "{}", common::stdout(&output));
    assert_eq!(
        local.k3d_calls_from(calls)[..2],
        [
            "cluster list mara-dev -o json",
            "cluster start mara-dev --wait"
        ]
    );
    assert_eq!(local.cluster_state().as_deref(), Some("running"));

    // mara's context became current once, when the cluster was made; the user's own choice
    // since stands through another `up`.
    let user = local.user_kubeconfig();
    let text = std::fs::read_to_string(&user).unwrap();
    assert!(text.contains("current-context: mara-dev"), "{text}");
    std::fs::write(
        &user,
        text.replace("current-context: mara-dev", "current-context: work"),
    )
    .unwrap();
    let output = run(&["up", "--yes", "--only", "infrastructure/k3d"]);
    assert!(output.status.success(), "{}", common::stdout(&output));
    let text = std::fs::read_to_string(&user).unwrap();
    assert!(
        text.contains("current-context: work") && text.contains("name: mara-dev"),
        "{text}"
    );
    std::fs::write(
        &user,
        text.replace("current-context: work", "current-context: mara-dev"),
    )
    .unwrap();

    // Delete asks as destroy does: without a terminal and without --yes, nothing is touched.
    let calls = local.k3d_calls().len();
    let output = run(&["cluster", "delete"]);
    assert_eq!(output.status.code(), Some(2));
    insta::assert_snapshot!(common::stderr(&output), @r"
    error: `mara cluster delete` destroys everything on cluster mara-dev, then the cluster, and there is no terminal to confirm on
      hint: pass --yes to go ahead without confirmation
    ");
    assert_eq!(local.k3d_calls_from(calls), ["cluster list -o json"]);
    assert_eq!(local.cluster_state().as_deref(), Some("running"));

    // With --yes, on a stopped cluster: started, then what runs on it destroyed, then the
    // cluster; the user's kubeconfig gets back the context it had.
    run(&["cluster", "stop"]);
    let output = run(&["cluster", "delete", "--yes"]);
    assert!(output.status.success(), "{}", common::stdout(&output));
    let out = common::stdout(&output);
    assert!(
        out.starts_with("Cluster mara-dev of stack dev is stopped: starting it, to destroy what is deployed on it.\n"),
        "{out}"
    );
    assert_eq!(local.cluster_state(), None);
    assert!(!local.root().join(".mara/kube/dev.yaml").exists());
    let user = std::fs::read_to_string(local.user_kubeconfig()).unwrap();
    assert!(user.contains("current-context: work"), "{user}");
    assert!(!user.contains("mara-dev"), "{user}");
    let output = run(&["cluster", "delete", "--yes"]);
    assert_eq!(
        common::stdout(&output),
        "Cluster mara-dev of stack dev does not exist: nothing to delete.\n"
    );
    let output = run(&["cluster", "stop", "--output", "json"]);
    let said: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(said["done"], "nothing");
}

#[test]
fn a_cluster_gone_outside_mara_is_cleaned_up_after_and_the_way_back_is_said() {
    let local = Local::new();
    let run = |args: &[&str]| local.mara().args(args).output().unwrap();
    let output = run(&["up", "--yes"]);
    assert!(output.status.success(), "{}", common::stdout(&output));
    // A Docker reset: the cluster is gone, the records and the user's kubeconfig are not.
    std::fs::remove_dir_all(local.root().join("k3d-clusters/mara-dev")).unwrap();
    // The way back names the stack it was asked about.
    let output = run(&["-s", "dev", "cluster", "status"]);
    let out = common::stdout(&output);
    assert!(
        out.starts_with("Cluster mara-dev of stack dev: not created\n"),
        "{out}"
    );
    assert!(
        out.contains("9 projects are recorded as deployed on it")
            && out.contains("`mara -s dev cluster start`, then `PULUMI_K8S_DELETE_UNREACHABLE=true mara -s dev refresh --yes`"),
        "{out}"
    );

    let output = run(&["cluster", "delete"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    let root = local.root().display().to_string();
    insta::assert_snapshot!(common::stdout(&output).replace(&root, "<root>"), @r"
    Cluster mara-dev of stack dev does not exist: nothing to delete.
    Removed the stack's entries from <root>/home/.kube/config
    Removed .mara/kube/dev.yaml
    9 projects are recorded as deployed on it (infrastructure/kubeconfig, kubernetes/applications/sirius, kubernetes/certmgr, kubernetes/logagent, kubernetes/logstore, kubernetes/nginx/ingress-controller-repo-only, kubernetes/observability, kubernetes/prometheus, kubernetes/secrets): their state still describes objects that went with it. To deploy them again: `mara cluster start`, then `PULUMI_K8S_DELETE_UNREACHABLE=true mara refresh --yes` (Pulumi's Kubernetes provider then drops from their state what it cannot reach), then `mara up`.
    ");
    let user = std::fs::read_to_string(local.user_kubeconfig()).unwrap();
    assert!(
        user.contains("current-context: work") && !user.contains("mara-dev"),
        "{user}"
    );

    let output = run(&["cluster", "start"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert!(
        common::stdout(&output).ends_with("9 projects were deployed on the cluster before it went (infrastructure/kubeconfig, kubernetes/applications/sirius, kubernetes/certmgr, kubernetes/logagent, kubernetes/logstore, kubernetes/nginx/ingress-controller-repo-only, kubernetes/observability, kubernetes/prometheus, kubernetes/secrets): their state still describes objects that went with it. To deploy them again: `PULUMI_K8S_DELETE_UNREACHABLE=true mara refresh --yes` (Pulumi's Kubernetes provider then drops from their state what it cannot reach), then `mara up`.\n"),
        "{}",
        common::stdout(&output)
    );
}

#[test]
fn a_stack_name_k3d_would_refuse_is_told_before_k3d_is_asked() {
    let local = Local::new();
    for args in [
        &["-s", "my_stack", "cluster", "start"][..],
        &["-s", "my_stack", "images", "update"],
    ] {
        let output = local.mara().args(args).output().unwrap();
        assert_eq!(output.status.code(), Some(3));
        insta::allow_duplicates! {
            insta::assert_snapshot!(common::stderr(&output), @r"
            error: stack `my_stack` cannot have a local cluster: k3d takes a host name as a cluster's name (letters, digits and `-`, in labels joined by `.`), and `mara-my_stack` is not one
              hint: the cluster is `mara-<stack>`: use a stack name of letters, digits and `-`, at most 27 characters
            ");
        }
    }
    for args in [
        &["-s", "my_stack", "validate"][..],
        &["-s", "my_stack", "up", "--yes"],
    ] {
        let output = local.mara().args(args).output().unwrap();
        assert_eq!(output.status.code(), Some(3), "{args:?}");
        let said = common::stdout(&output) + &common::stderr(&output);
        assert!(
            said.contains("stack `my_stack` cannot have a local cluster: k3d takes a host name"),
            "{said}"
        );
    }
    assert!(local.k3d_calls().is_empty());
}

#[test]
fn the_cluster_commands_need_a_k3d_stack_and_k3d_answering() {
    let ws = common::Workspace::new(&[
        ("mara.toml", "provider = \"kubeconfig\"\n"),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
    ]);
    let output = ws.mara().args(["cluster", "start"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    insta::assert_snapshot!(common::stderr(&output), @r"
    error: `mara cluster start` works on the local k3d cluster of a stack, and the provider of stack `dev` here is kubeconfig, not k3d
      hint: run it with --provider k3d, or on a stack whose provider is k3d
    ");
    let output = ws
        .mara()
        .args(["images", "import", "nginx"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    insta::assert_snapshot!(common::stderr(&output), @r"
    error: `mara images import` works on the local k3d cluster of a stack, and the provider of stack `dev` here is kubeconfig, not k3d
      hint: for a cluster that is not k3d, push the images to a registry it pulls from
    ");

    // k3d failing (Docker not running) is not taken for a missing cluster.
    let local = Local::new();
    let output = local
        .mara()
        .env("K3D_STAND_IN_DOCKER_DOWN", "1")
        .args(["cluster", "start"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let stderr = common::stderr(&output);
    insta::assert_snapshot!(stderr, @"error: `k3d cluster list -o json` failed (exit code 1): FATA[0000] runtime failed to list nodes: docker failed to get containers: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?");
    assert!(local.cluster_state().is_none());

    // k3d missing gets the hint validate gives.
    let output = local
        .mara()
        .env("PATH", "/nonexistent")
        .args(["cluster", "start"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(
        common::stderr(&output).contains("hint: install k3d (https://k3d.io) and Docker"),
        "{}",
        common::stderr(&output)
    );
}

#[test]
fn cluster_start_checks_the_run_before_it_says_it_creates_the_cluster() {
    let local = Local::new();
    // The stack's first run, without a terminal to ask its questions on: nothing can be created.
    let config = local.root().join("config/pulumi/Pulumi.dev.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::remove_file(&config).unwrap();
    let output = local
        .mara()
        .args(["cluster", "start", "-p", "k3d"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", common::stderr(&output));
    assert!(
        !common::stdout(&output).contains("creating it"),
        "{}",
        common::stdout(&output)
    );
    assert!(local.cluster_state().is_none());
    // Once the run can go, it says what it does, then does it.
    std::fs::write(&config, text).unwrap();
    let output = local.mara().args(["cluster", "start"]).output().unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert!(
        common::stdout(&output).contains("does not exist: creating it"),
        "{}",
        common::stdout(&output)
    );
}

#[test]
fn images_are_imported_recorded_and_updated_when_their_local_image_changes() {
    let local = Local::new();
    let run = |args: &[&str]| local.mara().args(args).output().unwrap();
    local.docker_has(
        "nginx:1.27 sha256:aaaaaaaaaaaa1111\nsirius/frontend:dev sha256:bbbbbbbbbbbb2222\n",
    );

    // No cluster yet: said, with what makes one; nothing imported.
    let output = run(&["images", "import", "nginx:1.27"]);
    assert_eq!(output.status.code(), Some(3));
    insta::assert_snapshot!(common::stderr(&output), @r"
    error: cluster mara-dev of stack `dev` does not exist
      hint: `mara cluster start` creates it
    ");

    local.make_cluster();
    // An image the local Docker lacks stops the import before k3d is called.
    let calls = local.k3d_calls().len();
    let output = run(&["images", "import", "nginx:1.27", "missing:latest"]);
    assert_eq!(output.status.code(), Some(3));
    insta::assert_snapshot!(common::stderr(&output), @r"
    error: image `missing:latest` is not in the local Docker
      hint: build it, or `docker pull missing:latest`, then import it
    ");
    assert_eq!(local.k3d_calls_from(calls), ["cluster list -o json"]);

    // `redis` is `redis:latest`: named twice, imported once.
    local.docker_has("nginx:1.27 sha256:aaaaaaaaaaaa1111\nsirius/frontend:dev sha256:bbbbbbbbbbbb2222\nredis:latest sha256:eeeeeeeeeeee5555\n");
    let output = run(&["images", "import", "redis", "redis:latest"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert_eq!(
        local.k3d_calls().last().unwrap(),
        "image import redis:latest --cluster mara-dev"
    );
    let output = run(&["images", "forget", "redis"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    local.docker_has(
        "nginx:1.27 sha256:aaaaaaaaaaaa1111\nsirius/frontend:dev sha256:bbbbbbbbbbbb2222\n",
    );
    std::fs::write(local.root().join("k3d-clusters/mara-dev/images"), "").unwrap();

    let output = run(&["images", "import", "nginx:1.27", "sirius/frontend:dev"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    insta::assert_snapshot!(common::stdout(&output), @r"
    Imported nginx:1.27 (sha256:aaaaaaaaaaaa)
    Imported sirius/frontend:dev (sha256:bbbbbbbbbbbb)
    `mara images update` imports them again when their local image changes.
    ");
    assert!(common::stderr(&output).contains("Successfully imported 2 image(s)"));
    assert_eq!(
        local.k3d_calls().last().unwrap(),
        "image import nginx:1.27 sirius/frontend:dev --cluster mara-dev"
    );

    // Nothing changed: nothing imported, and said which are current.
    let calls = local.k3d_calls().len();
    let output = run(&["images", "update"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert_eq!(
        common::stdout(&output),
        "Current: nginx:1.27\nCurrent: sirius/frontend:dev\n"
    );
    assert_eq!(local.k3d_calls_from(calls), ["cluster list -o json"]);

    // A rebuilt image is imported again, alone; one gone from Docker is left as it is.
    local.docker_has("sirius/frontend:dev sha256:cccccccccccc3333\n");
    let output = run(&["images", "update"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    insta::assert_snapshot!(common::stdout(&output), @r"
    Imported sirius/frontend:dev (sha256:cccccccccccc): its local image changed
    Not in the local Docker any more: nginx:1.27 (the cluster keeps the one it has)
    ");
    assert_eq!(
        local.cluster_images(),
        ["nginx:1.27", "sirius/frontend:dev", "sirius/frontend:dev"]
    );
    let output = run(&["images", "update", "--output", "json"]);
    let said: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(said["current"], serde_json::json!(["sirius/frontend:dev"]));
    assert_eq!(said["missing"], serde_json::json!(["nginx:1.27"]));

    // A cluster made again holds none of them: every image still in Docker goes in again.
    local.docker_has(
        "nginx:1.27 sha256:aaaaaaaaaaaa1111\nsirius/frontend:dev sha256:cccccccccccc3333\n",
    );
    std::fs::remove_dir_all(local.root().join("k3d-clusters/mara-dev")).unwrap();
    local.make_cluster();
    let output = run(&["images", "update"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    insta::assert_snapshot!(common::stdout(&output), @r"
    Imported nginx:1.27 (sha256:aaaaaaaaaaaa): the cluster was made again since
    Imported sirius/frontend:dev (sha256:cccccccccccc): the cluster was made again since
    ");
    assert_eq!(
        local.cluster_images(),
        ["nginx:1.27", "sirius/frontend:dev"]
    );

    // Recorded, listed, and forgotten on request.
    let output = run(&["images", "list"]);
    let listed = common::stdout(&output);
    assert!(
        listed.starts_with("IMAGE                ID                   IMPORTED\n"),
        "{listed}"
    );
    assert!(
        listed.contains("\nnginx:1.27           sha256:aaaaaaaaaaaa  "),
        "{listed}"
    );
    let output = run(&["images", "forget", "nginx:1.27", "redis:7"]);
    assert_eq!(output.status.code(), Some(3));
    insta::assert_snapshot!(common::stderr(&output), @r"
    error: image `redis:7` is not recorded for cluster mara-dev
      hint: recorded: nginx:1.27, sirius/frontend:dev
    ");
    // An image gone from Docker, on a cluster made again, is in neither: said so.
    local.docker_has("sirius/frontend:dev sha256:cccccccccccc3333\n");
    std::fs::remove_dir_all(local.root().join("k3d-clusters/mara-dev")).unwrap();
    local.make_cluster();
    let output = run(&["images", "update"]);
    insta::assert_snapshot!(common::stdout(&output), @r"
    Imported sirius/frontend:dev (sha256:cccccccccccc): the cluster was made again since
    Not in the local Docker any more: nginx:1.27, nor in the cluster, made again since (`mara images forget nginx:1.27` stops asking)
    ");
    let output = run(&["images", "forget", "nginx:1.27"]);
    assert_eq!(
        common::stdout(&output),
        "Forgot 1 image: `mara images update` no longer imports it.\n"
    );
    let output = run(&["images", "update"]);
    assert_eq!(common::stdout(&output), "Current: sirius/frontend:dev\n");

    // A stopped cluster takes no images.
    run(&["cluster", "stop"]);
    let output = run(&["images", "update"]);
    assert_eq!(output.status.code(), Some(3));
    insta::assert_snapshot!(common::stderr(&output), @r"
    error: cluster mara-dev of stack `dev` is stopped
      hint: `mara cluster start` starts it
    ");
}

#[test]
fn mara_kubectl_uses_the_stack_s_kubeconfig_and_never_the_user_s() {
    let Some(kubectl) = common::tools::tool("kubectl", "it only reads kubeconfig files here")
    else {
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
    if common::tools::tool("kubectl", "it only reads kubeconfig files here").is_none() {
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

#[test]
fn imported_images_move_to_a_team_ledger_and_are_updated_there() {
    let Some(server) = common::postgres::Server::start() else {
        return;
    };
    let url = server.url("images");
    let local = Local::new();
    local.docker_has(
        "nginx:1.27 sha256:aaaaaaaaaaaa1111\nsirius/frontend:dev sha256:bbbbbbbbbbbb2222\n",
    );
    local.make_cluster();
    let output = local
        .mara()
        .args(["images", "import", "nginx:1.27", "sirius/frontend:dev"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let output = local
        .mara()
        .args(["ledger", "migrate", "--to", &url])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert!(
        common::stdout(&output).contains("the stacks known and 2 imported images were added"),
        "{}",
        common::stdout(&output)
    );
    assert_eq!(
        server.sql(
            "images",
            "SELECT image, image_id FROM mara_images ORDER BY image"
        ),
        "nginx:1.27|sha256:aaaaaaaaaaaa1111\nsirius/frontend:dev|sha256:bbbbbbbbbbbb2222\n"
    );

    local.docker_has(
        "nginx:1.27 sha256:aaaaaaaaaaaa1111\nsirius/frontend:dev sha256:dddddddddddd4444\n",
    );
    let on_server = || {
        let mut command = local.mara();
        command.env("MARA_LEDGER_URL", &url);
        command
    };
    let output = on_server().args(["images", "update"]).output().unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert_eq!(
        common::stdout(&output),
        "Imported sirius/frontend:dev (sha256:dddddddddddd): its local image changed\nCurrent: nginx:1.27\n"
    );
    assert_eq!(
        server.sql(
            "images",
            "SELECT image_id FROM mara_images WHERE image = 'sirius/frontend:dev'"
        ),
        "sha256:dddddddddddd4444\n"
    );
    let output = on_server().args(["images", "update"]).output().unwrap();
    assert_eq!(
        common::stdout(&output),
        "Current: nginx:1.27\nCurrent: sirius/frontend:dev\n"
    );
}

/// The block of `docs/providers.md` that starts with `first_line`.
fn documented(first_line: &str) -> String {
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/providers.md"))
            .unwrap();
    let start = docs.find(first_line).expect(first_line);
    let end = start + docs[start..].find("```").unwrap();
    docs[start..end].to_string()
}

#[test]
fn the_documented_bootstrapping_of_a_third_party_component_runs_where_it_says() {
    let local = Local::new();
    let provider = documented("# providers/dev.toml\n");
    std::fs::create_dir_all(local.root().join("providers")).unwrap();
    std::fs::write(local.root().join("providers/dev.toml"), provider).unwrap();
    std::fs::write(local.root().join("mara.toml"), "provider = \"dev\"\n").unwrap();
    let kustomization = documented("# bootstrap/sealed-secrets/kustomization.yaml\n");
    let dir = local.root().join("bootstrap/sealed-secrets");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("kustomization.yaml"), kustomization).unwrap();

    let output = local
        .mara()
        .args(["show-execution", "--format", "list"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let order: Vec<String> = common::stdout(&output)
        .lines()
        .map(str::to_string)
        .collect();
    let at = |path: &str| order.iter().position(|p| p == path).expect(path);
    assert!(at("infrastructure/kubeconfig") < at("bootstrap/sealed-secrets"));
    assert!(at("bootstrap/sealed-secrets") < at("kubernetes/secrets"));

    // Without the cluster's kubeconfig, and without the cluster project to write it first: the
    // run stops before anything runs. With it selected, the order provides it.
    let output = local
        .mara()
        .args(["up", "--yes", "--only", "bootstrap/sealed-secrets"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    insta::assert_snapshot!(common::stderr(&output), @r"
    error: bootstrap/sealed-secrets: the kubectl engine reaches the cluster through the stack's kubeconfig, .mara/kube/dev.yaml, which does not exist
      hint: the cluster project's kubeconfig hook writes it on `up`: deploy that project first, or select it too (`--with-dependencies`)
    ");
    assert!(local.k3d_calls().is_empty());
    // With the cluster project selected too, the order provides it: k3d's cluster, its
    // kubeconfig, then kubectl (a stand-in here) on it.
    let kubectl = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stand-ins/kubectl"),
        kubectl.path().join("kubectl"),
    )
    .unwrap();
    let output = local
        .mara()
        .env(
            "PATH",
            format!(
                "{}:{}",
                kubectl.path().display(),
                common::path_with(local.bin.path())
            ),
        )
        .env("KUBECTL_STAND_IN_LOG", local.root().join("kubectl.log"))
        .env("KUBECTL_STAND_IN_STATE", local.root().join("objects"))
        .args([
            "up",
            "--yes",
            "--only",
            "bootstrap/sealed-secrets",
            "--with-dependencies",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stdout(&output));
    let root = local.root().display().to_string();
    let calls = std::fs::read_to_string(local.root().join("kubectl.log")).unwrap();
    assert_eq!(
        calls.replace(&root, "<root>"),
        "apply --server-side --field-manager=mara --kustomize=<root>/bootstrap/sealed-secrets --kubeconfig=<root>/.mara/kube/dev.yaml\n"
    );
    assert!(local.has_cluster());
}

#[test]
fn a_stopped_cluster_is_started_for_its_delete_only_once_confirmed() {
    let local = Local::new();
    local.make_cluster();
    let stop = local.mara().args(["cluster", "stop"]).output().unwrap();
    assert!(stop.status.success(), "{}", common::stderr(&stop));
    let root = local.root().to_path_buf();
    let log = root.join("k3d.log").display().to_string();
    let state = root.join("k3d-clusters").display().to_string();
    let env = [
        ("K3D_STAND_IN_LOG", log.as_str()),
        ("K3D_STAND_IN_STATE", state.as_str()),
    ];
    let calls = local.k3d_calls().len();
    let mut terminal =
        common::Terminal::start_with(&root, local.bin.path(), "cluster delete", &env);
    terminal.wait_for("Type the stack name (dev) to confirm");
    terminal.type_keys("prod\r");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 6, "{screen}");
    assert!(
        screen.contains("not confirmed: cluster mara-dev was left as it was (stopped)"),
        "{screen}"
    );
    assert_eq!(local.k3d_calls_from(calls), ["cluster list -o json"]);
    assert_eq!(local.cluster_state().as_deref(), Some("stopped"));

    let mut terminal =
        common::Terminal::start_with(&root, local.bin.path(), "cluster delete", &env);
    terminal.wait_for("Type the stack name (dev) to confirm");
    terminal.type_keys("dev\r");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 0, "{screen}");
    assert_eq!(local.cluster_state(), None, "{screen}");
}
