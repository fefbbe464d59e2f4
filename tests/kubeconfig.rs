//! Whose the entries of a user's kubeconfig are (issue 42), through the real binary, the Pulumi
//! stand-in and the real kubectl: mara's mark travels with the kubeconfig, so a cleaned
//! workspace and a second copy of it recognise what mara merged, an entry the user wrote stays
//! untouchable, and kubectl's own rewrites of the file keep the mark and change nothing mara
//! compares.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

use serde_json::Value;

use common::Deployment;

/// The example workspace, its cluster project's hook merging into the user's kubeconfig; with
/// `id` in mara.toml when given.
fn merging(id: Option<&str>) -> Deployment {
    let d = Deployment::of("mara-local");
    let provider = d.root().join("providers/local.toml");
    let text = std::fs::read_to_string(&provider).unwrap();
    std::fs::write(&provider, text.replace("merge = false", "merge = true")).unwrap();
    if let Some(id) = id {
        let toml = d.root().join("mara.toml");
        let text = std::fs::read_to_string(&toml).unwrap();
        std::fs::write(&toml, format!("id = \"{id}\"\n{text}")).unwrap();
    }
    d
}

/// The user's kubeconfig in the deployment's HOME, with their own cluster, user and context.
fn users_kubeconfig(d: &Deployment) -> PathBuf {
    let kube = d.root().join("home/.kube/config");
    std::fs::create_dir_all(kube.parent().unwrap()).unwrap();
    let own = "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster:\n    server: https://prod.example.com\nusers:\n- name: prod-admin\n  user:\n    token: keep-me\ncontexts:\n- name: prod\n  context:\n    cluster: prod\n    user: prod-admin\ncurrent-context: prod\n";
    std::fs::write(&kube, own).unwrap();
    kube
}

/// `mara ARGS… --only cluster` in `root`, with the deployment's tools and HOME (whichever copy of
/// the workspace `root` is).
fn mara_in(d: &Deployment, root: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = common::mara(root);
    cmd.envs(d.environment())
        .args(args)
        .args(["--only", "cluster"])
        .output()
        .unwrap()
}

fn succeeds(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "{}\n{}",
        common::stdout(output),
        common::stderr(output)
    );
    common::stdout(output)
}

/// kubectl on the user's kubeconfig: what it printed (it must succeed).
fn kubectl(kube: &Path, args: &[&str]) -> String {
    let output = StdCommand::new("kubectl")
        .args(args)
        .arg("--kubeconfig")
        .arg(kube)
        .output()
        .expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

/// The file as kubectl reads it, as JSON.
fn view(kube: &Path) -> Value {
    serde_json::from_str(&kubectl(kube, &["config", "view", "--raw", "-o", "json"])).unwrap()
}

/// The entry `name` of `section` in kubectl's view.
fn entry<'a>(view: &'a Value, section: &str, name: &str) -> Option<&'a Value> {
    view[section].as_array()?.iter().find(|e| e["name"] == name)
}

/// mara's mark on an entry, as kubectl reads it.
fn mark<'a>(view: &'a Value, section: &str, name: &str) -> Option<&'a Value> {
    let body = section.trim_end_matches('s');
    entry(view, section, name)?[body]["extensions"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == "mara")
        .map(|e| &e["extension"])
}

#[test]
fn a_cleaned_workspace_and_a_second_copy_recognise_mara_s_entries_and_only_them() {
    if common::tools::tool("kubectl", "it reads the merged kubeconfig").is_none() {
        return;
    }
    let d = merging(Some("shop"));
    let kube = users_kubeconfig(&d);
    succeeds(&mara_in(&d, d.root(), &["up", "--yes"]));
    let merged = view(&kube);
    assert_eq!(
        mark(&merged, "clusters", "mara-dev").unwrap()["workspace"],
        "shop"
    );
    assert_eq!(
        mark(&merged, "contexts", "mara-dev").unwrap()["stack"],
        "dev"
    );
    assert_eq!(merged["current-context"], "mara-dev");

    // `git clean -fdx`: the workspace's state is gone, the user's kubeconfig is not.
    std::fs::remove_dir_all(d.root().join(".mara")).unwrap();
    let out = succeeds(&mara_in(&d, d.root(), &["up", "--yes"]));
    assert!(out.contains("merged into"), "{out}");
    assert_eq!(
        kubectl(&kube, &["config", "get-contexts", "-o", "name"]),
        "mara-dev\nprod"
    );
    let token = "jsonpath={.users[?(@.name==\"prod-admin\")].user.token}";
    assert_eq!(
        kubectl(&kube, &["config", "view", "--raw", "-o", token]),
        "keep-me"
    );

    // An entry the user wrote, of the name mara would give stack `stage`'s: refused, untouched.
    kubectl(
        &kube,
        &[
            "config",
            "set-cluster",
            "mara-stage",
            "--server=https://mine",
        ],
    );
    let config = d.root().join("config/pulumi");
    std::fs::copy(
        config.join("Pulumi.dev.yaml"),
        config.join("Pulumi.stage.yaml"),
    )
    .unwrap();
    let before = std::fs::read_to_string(&kube).unwrap();
    // Said before anything runs (exit 3), not after the cluster project is applied.
    let calls = d.calls().len();
    let output = mara_in(&d, d.root(), &["up", "--yes", "-s", "stage"]);
    assert_eq!(output.status.code(), Some(3), "{}", common::stderr(&output));
    assert_eq!(
        common::stderr(&output),
        format!(
            "error: hooks: cannot merge the cluster's kubeconfig into {}: it already has a cluster `mara-stage` that mara did not write: mara never replaces it; rename or remove it, then run `mara up` again\n",
            kube.display()
        )
    );
    assert_eq!(d.calls().len(), calls, "no engine ran");
    assert_eq!(std::fs::read_to_string(&kube).unwrap(), before);

    // A second copy of the workspace, with the same `id`: the entries are its own.
    let copy = tempfile::tempdir().unwrap();
    common::copy_example(d.root(), copy.path());
    let out = succeeds(&mara_in(&d, copy.path(), &["up", "--yes"]));
    assert!(!out.contains("did not write"), "{out}");
    // A copy without it is another workspace (its directory): refused, told whose, and of `id`.
    let other = tempfile::tempdir().unwrap();
    common::copy_example(d.root(), other.path());
    let toml = other.path().join("mara.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, text.replace("id = \"shop\"\n", "")).unwrap();
    let output = mara_in(&d, other.path(), &["up", "--yes"]);
    let said = common::stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{said}");
    assert!(
        said.contains(
            "that mara did not write for this workspace: it is stack `dev`'s of workspace `shop`"
        ) && said.contains("set `id = \"…\"` in mara.toml"),
        "{said}"
    );

    // The second copy's destroy takes them out and gives the user back their context.
    succeeds(&mara_in(&d, copy.path(), &["destroy", "--yes"]));
    assert_eq!(
        kubectl(&kube, &["config", "get-contexts", "-o", "name"]),
        "prod"
    );
    assert_eq!(kubectl(&kube, &["config", "current-context"]), "prod");
    // kubectl lists clusters from a map: in no fixed order.
    let mut clusters: Vec<String> = kubectl(&kube, &["config", "get-clusters"])
        .lines()
        .skip(1)
        .map(str::to_owned)
        .collect();
    clusters.sort();
    assert_eq!(
        clusters,
        ["mara-stage", "prod"],
        "the user's own `mara-stage` stays"
    );
    let chain = kube.with_file_name(".config.mara-contexts.json");
    assert!(!chain.exists(), "no link left beside the file");
}

#[test]
fn kubectl_keeps_mara_s_mark_and_its_rewrites_change_nothing_mara_compares() {
    if common::tools::tool("kubectl", "it rewrites the merged kubeconfig").is_none() {
        return;
    }
    let d = merging(None);
    // An exec credential, as EKS's: kubectl writes its defaults into it when it rewrites the file.
    let project = d.root().join("infrastructure/local/cluster/Pulumi.yaml");
    let text = std::fs::read_to_string(&project).unwrap();
    let exec = "exec:\n            apiVersion: client.authentication.k8s.io/v1beta1\n            command: aws\n            args: [eks, get-token]";
    std::fs::write(&project, text.replace("token: simulated", exec)).unwrap();
    let kube = users_kubeconfig(&d);
    succeeds(&mara_in(&d, d.root(), &["up", "--yes"]));
    // kubectl rewrites the whole file at each change: mara's mark stays on every entry.
    kubectl(&kube, &["config", "use-context", "prod"]);
    let rewritten = std::fs::read_to_string(&kube).unwrap();
    assert!(
        rewritten.contains("provideClusterInfo: false"),
        "{rewritten}"
    );
    let merged = view(&kube);
    for section in ["clusters", "users", "contexts"] {
        let mark =
            mark(&merged, section, "mara-dev").unwrap_or_else(|| panic!("{section}: {merged:#}"));
        assert_eq!(mark["stack"], "dev");
        assert!(mark["digest"].as_str().unwrap().starts_with("sha256:"));
    }
    kubectl(&kube, &["config", "use-context", "mara-dev"]);
    kubectl(
        &kube,
        &["config", "set-context", "--current", "--namespace=x"],
    );
    let merged = view(&kube);
    assert_eq!(
        entry(&merged, "contexts", "mara-dev").unwrap()["context"]["namespace"],
        "x"
    );
    assert!(
        mark(&merged, "contexts", "mara-dev").is_some(),
        "{merged:#}"
    );

    // mara's again: its `up` replaces it, saying so; the cluster and user kubectl rewrote are
    // unchanged to it.
    let out = succeeds(&mara_in(&d, d.root(), &["up", "--yes"]));
    assert!(
        out.contains("replaced context `mara-dev`") && !out.contains("replaced user"),
        "{out}"
    );
    kubectl(
        &kube,
        &["config", "set-context", "--current", "--namespace=x"],
    );
    kubectl(&kube, &["config", "use-context", "prod"]);
    // Its destroy leaves the changed context, and removes what kubectl only rewrote.
    let out = succeeds(&mara_in(&d, d.root(), &["destroy", "--yes"]));
    assert!(
        out.contains("left context `mara-dev`") && out.contains("it changed since mara wrote it"),
        "{out}"
    );
    assert_eq!(
        kubectl(&kube, &["config", "get-contexts", "-o", "name"]),
        "mara-dev\nprod"
    );
    assert_eq!(kubectl(&kube, &["config", "get-clusters"]), "NAME\nprod");
    assert_eq!(kubectl(&kube, &["config", "get-users"]), "NAME\nprod-admin");
    assert_eq!(kubectl(&kube, &["config", "current-context"]), "prod");
}

/// `KUBECONFIG` pointed at another file whose `mara-dev` is the user's own: the merge there is
/// refused, and the entries stay in the file they were merged into (they used to be taken out
/// first, leaving the user with neither).
#[test]
fn a_merge_refused_in_a_new_kubeconfig_leaves_the_entries_in_the_old_one() {
    let d = merging(Some("shop"));
    let kube = users_kubeconfig(&d);
    succeeds(&mara_in(&d, d.root(), &["up", "--yes"]));
    let before = std::fs::read_to_string(&kube).unwrap();
    assert!(before.contains("name: mara-dev"), "{before}");

    let other = d.root().join("home/other-config");
    let own = "apiVersion: v1\nkind: Config\nclusters:\n- name: mara-dev\n  cluster:\n    server: https://mine.example.com\nusers: []\ncontexts: []\n";
    std::fs::write(&other, own).unwrap();
    let mut cmd = common::mara(d.root());
    let output = cmd
        .envs(d.environment())
        .env("KUBECONFIG", &other)
        .args(["up", "--yes", "--only", "cluster"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", common::stdout(&output));
    assert!(
        common::stderr(&output).contains("a cluster `mara-dev` that mara did not write"),
        "{}",
        common::stderr(&output)
    );
    assert_eq!(std::fs::read_to_string(&other).unwrap(), own);
    assert_eq!(std::fs::read_to_string(&kube).unwrap(), before);
}

/// A read-only kubeconfig is refused as a read-only stack configuration is (issue 45): before
/// anything runs, not rewritten 0600 behind the user's back; one mara may write keeps its mode.
#[test]
fn a_read_only_kubeconfig_is_refused_before_anything_runs_and_a_writable_one_keeps_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let d = merging(Some("shop"));
    let kube = users_kubeconfig(&d);
    let mode = |m| std::fs::set_permissions(&kube, std::fs::Permissions::from_mode(m)).unwrap();
    mode(0o444);
    let before = std::fs::read_to_string(&kube).unwrap();
    let output = mara_in(&d, d.root(), &["up", "--yes"]);
    assert_eq!(output.status.code(), Some(3), "{}", common::stdout(&output));
    let said = common::stderr(&output);
    assert!(
        said.contains(&format!("cannot write {}: it is read-only", kube.display())),
        "{said}"
    );
    assert!(d.calls().is_empty(), "no engine ran: {:?}", d.calls());
    assert_eq!(std::fs::read_to_string(&kube).unwrap(), before);
    let kept = std::fs::metadata(&kube).unwrap().permissions().mode() & 0o777;
    assert_eq!(kept, 0o444);

    // Writable, it is merged into and keeps the mode its user gave it.
    mode(0o640);
    succeeds(&mara_in(&d, d.root(), &["up", "--yes"]));
    let merged = std::fs::read_to_string(&kube).unwrap();
    assert!(merged.contains("name: mara-dev"), "{merged}");
    let kept = std::fs::metadata(&kube).unwrap().permissions().mode() & 0o777;
    assert_eq!(kept, 0o640);
}
