//! The built-in providers through the binary: they load, they run in exactly the original
//! runner's order, and their plans look as recorded.

mod common;

use common::{Workspace, stdout};
use serde_json::Value;

/// `show-execution --format list` for a built-in provider, from an empty workspace.
fn order(provider: &str) -> Vec<String> {
    let ws = Workspace::new(&[]);
    let output = ws
        .mara()
        .args(["show-execution", "--provider", provider, "--format", "list"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    stdout(&output).lines().map(str::to_string).collect()
}

const KUBERNETES_BASE: [&str; 12] = [
    "infrastructure/kubeconfig",
    "kubernetes/secrets",
    "utility/kic-image-build",
    "utility/kic-image-push",
    "kubernetes/nginx/ingress-controller-namespace",
    "kubernetes/nginx/ingress-controller",
    "kubernetes/logstore",
    "kubernetes/logagent",
    "kubernetes/certmgr",
    "kubernetes/prometheus",
    "kubernetes/observability",
    "kubernetes/applications/sirius",
];

#[test]
fn aws_runs_in_the_original_order() {
    let mut expected = vec![
        "infrastructure/aws/vpc",
        "infrastructure/aws/eks",
        "infrastructure/aws/ecr",
    ];
    expected.extend(KUBERNETES_BASE);
    assert_eq!(order("aws"), expected);
    assert_eq!(expected.len(), 15);
}

#[test]
fn do_runs_in_the_original_order() {
    let expected = [
        "infrastructure/digitalocean/container-registry",
        "infrastructure/digitalocean/domk8s",
        "infrastructure/kubeconfig",
        "kubernetes/secrets",
        "utility/kic-image-build",
        "utility/kic-image-push",
        "kubernetes/nginx/ingress-controller-namespace",
        "infrastructure/digitalocean/container-registry-credentials",
        "kubernetes/nginx/ingress-controller",
        "infrastructure/digitalocean/dns-record",
        "kubernetes/logstore",
        "kubernetes/logagent",
        "kubernetes/certmgr",
        "kubernetes/prometheus",
        "kubernetes/observability",
        "kubernetes/applications/sirius",
    ];
    assert_eq!(order("do"), expected);
}

#[test]
fn linode_runs_in_the_original_order() {
    let expected = [
        "infrastructure/linode/lke",
        "infrastructure/kubeconfig",
        "kubernetes/secrets",
        "infrastructure/linode/harbor",
        "utility/kic-image-build",
        "infrastructure/linode/harbor-configuration",
        "utility/kic-image-push",
        "kubernetes/nginx/ingress-controller-namespace",
        "infrastructure/linode/container-registry-credentials",
        "kubernetes/nginx/ingress-controller",
        "kubernetes/logstore",
        "kubernetes/logagent",
        "kubernetes/certmgr",
        "kubernetes/prometheus",
        "kubernetes/observability",
        "kubernetes/applications/sirius",
    ];
    assert_eq!(order("linode"), expected);
}

#[test]
fn kubeconfig_runs_in_start_kube_order_and_k3d_adds_its_cluster() {
    let expected = [
        "infrastructure/kubeconfig",
        "kubernetes/secrets",
        "kubernetes/nginx/ingress-controller-repo-only",
        "kubernetes/logstore",
        "kubernetes/logagent",
        "kubernetes/certmgr",
        "kubernetes/prometheus",
        "kubernetes/observability",
        "kubernetes/applications/sirius",
    ];
    assert_eq!(order("kubeconfig"), expected);
    let k3d = order("k3d");
    assert_eq!(k3d[0], "infrastructure/k3d");
    assert_eq!(k3d[1..], expected);
}

/// `after` of every project in the JSON plan, as `dependency -> project` lines.
fn edges(provider: &str) -> Vec<String> {
    let ws = Workspace::new(&[]);
    let output = ws
        .mara()
        .args(["show-execution", "-p", provider, "--format", "json"])
        .output()
        .unwrap();
    let plan: Value = serde_json::from_slice(&output.stdout).unwrap();
    let mut edges = Vec::new();
    for project in plan["projects"].as_array().unwrap() {
        for dependency in project["after"].as_array().unwrap() {
            edges.push(format!(
                "{} -> {}",
                dependency.as_str().unwrap(),
                project["path"].as_str().unwrap()
            ));
        }
    }
    edges
}

#[test]
fn the_real_dependency_edges_are_in_the_graph() {
    // The appendix's minimal StackReference edges plus the implicit ones, for aws.
    let aws = edges("aws");
    for edge in [
        "infrastructure/aws/vpc -> infrastructure/aws/eks",
        "infrastructure/aws/eks -> infrastructure/kubeconfig",
        "infrastructure/aws/ecr -> utility/kic-image-push",
        "utility/kic-image-build -> utility/kic-image-push",
        "infrastructure/kubeconfig -> kubernetes/secrets",
        "kubernetes/nginx/ingress-controller-namespace -> kubernetes/nginx/ingress-controller",
        "utility/kic-image-push -> kubernetes/nginx/ingress-controller",
        "kubernetes/logstore -> kubernetes/logagent",
        "kubernetes/secrets -> kubernetes/prometheus",
        "kubernetes/nginx/ingress-controller -> kubernetes/applications/sirius",
        "kubernetes/certmgr -> kubernetes/observability",
        "kubernetes/prometheus -> kubernetes/applications/sirius",
        "kubernetes/nginx/ingress-controller-namespace -> kubernetes/prometheus",
    ] {
        assert!(
            aws.contains(&edge.to_string()),
            "aws lacks {edge}: {aws:#?}"
        );
    }
    // No false dependency: the image build needs no cluster project.
    assert!(
        !aws.iter()
            .any(|e| e.ends_with("-> utility/kic-image-build") && e.contains("kubeconfig"))
    );

    let linode = edges("linode");
    for edge in [
        "kubernetes/secrets -> infrastructure/linode/harbor",
        "infrastructure/linode/harbor -> infrastructure/linode/harbor-configuration",
        "infrastructure/linode/harbor-configuration -> utility/kic-image-push",
        "infrastructure/linode/container-registry-credentials -> kubernetes/nginx/ingress-controller",
    ] {
        assert!(linode.contains(&edge.to_string()), "linode lacks {edge}");
    }
    // harbor-configuration is placed after the image build without waiting for it.
    assert!(!linode.contains(
        &"utility/kic-image-build -> infrastructure/linode/harbor-configuration".to_string()
    ));

    let digitalocean = edges("do");
    assert!(
        digitalocean.contains(
            &"kubernetes/nginx/ingress-controller -> infrastructure/digitalocean/dns-record"
                .to_string()
        )
    );
}

#[test]
fn list_providers_shows_the_built_ins_sorted() {
    let ws = Workspace::new(&[]);
    let output = ws
        .mara()
        .args(["list-providers", "--output", "json"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let list: Value = serde_json::from_slice(&output.stdout).unwrap();
    let rows: Vec<(String, String, String)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            assert!(!p["description"].as_str().unwrap().is_empty());
            (
                p["name"].as_str().unwrap().to_string(),
                p["infra_type"].as_str().unwrap().to_string(),
                p["source"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected: Vec<(String, String, String)> = [
        ("aws", "AWS"),
        ("do", "DO"),
        ("k3d", "k3d"),
        ("kubeconfig", "kubeconfig"),
        ("linode", "LKE"),
    ]
    .iter()
    .map(|(n, t)| (n.to_string(), t.to_string(), "builtin".to_string()))
    .collect();
    assert_eq!(rows, expected);

    let output = ws
        .mara()
        .args(["list-providers", "--all"])
        .output()
        .unwrap();
    insta::assert_snapshot!("list_providers_all", stdout(&output));
}

#[test]
fn tree_snapshots() {
    let ws = Workspace::new(&[]);
    for provider in ["aws", "do", "linode", "kubeconfig", "k3d"] {
        let output = ws
            .mara()
            .args(["show-execution", "--provider", provider])
            .output()
            .unwrap();
        assert!(output.status.success());
        insta::assert_snapshot!(format!("tree_{provider}"), stdout(&output));
    }
}

#[test]
fn json_snapshots() {
    let ws = Workspace::new(&[]);
    for provider in ["aws", "do", "linode", "kubeconfig", "k3d"] {
        let output = ws
            .mara()
            .args(["--output", "json", "show-execution", "--provider", provider])
            .output()
            .unwrap();
        assert!(output.status.success());
        let plan: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(plan["provider"], provider);
        insta::assert_json_snapshot!(format!("json_{provider}"), plan);
    }
}

#[test]
fn dot_and_mermaid_snapshots() {
    let ws = Workspace::new(&[]);
    let dot = ws
        .mara()
        .args(["show-execution", "-p", "aws", "--format", "dot"])
        .output()
        .unwrap();
    insta::assert_snapshot!("dot_aws", stdout(&dot));
    let mermaid = ws
        .mara()
        .args(["show-execution", "-p", "do", "--format", "mermaid"])
        .output()
        .unwrap();
    insta::assert_snapshot!("mermaid_do", stdout(&mermaid));
}

#[test]
fn all_providers_at_once() {
    let ws = Workspace::new(&[]);
    let output = ws
        .mara()
        .args(["show-execution", "--all", "--format", "json"])
        .output()
        .unwrap();
    let plans: Value = serde_json::from_slice(&output.stdout).unwrap();
    let names: Vec<&str> = plans
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["provider"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["aws", "do", "k3d", "kubeconfig", "linode"]);
    let list = ws
        .mara()
        .args(["show-execution", "--all", "--format", "list"])
        .output()
        .unwrap();
    let text = stdout(&list);
    assert!(
        text.lines()
            .any(|l| l == "linode infrastructure/linode/lke"),
        "{text}"
    );
}

#[test]
fn selection_narrows_the_plan() {
    let ws = Workspace::new(&[]);
    let output = ws
        .mara()
        .args([
            "show-execution",
            "-p",
            "aws",
            "--format",
            "list",
            "--only",
            "sirius",
            "--with-dependencies",
            "--skip",
            "vpc",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let lines: Vec<String> = stdout(&output).lines().map(str::to_string).collect();
    assert_eq!(
        lines.first().map(String::as_str),
        Some("infrastructure/aws/eks")
    );
    assert_eq!(
        lines.last().map(String::as_str),
        Some("kubernetes/applications/sirius")
    );
    assert!(
        !lines.contains(&"kubernetes/logagent".to_string()),
        "{lines:?}"
    );
    assert!(!lines.contains(&"infrastructure/aws/vpc".to_string()));

    let output = ws
        .mara()
        .args(["show-execution", "-p", "aws", "--only", "siruis"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    insta::assert_snapshot!("selection_unknown_name", common::stderr(&output));
}

#[test]
fn the_example_stack_configuration_documents_every_key_the_built_ins_use() {
    let example = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("config/pulumi/Pulumi.stackname.yaml.example"),
    )
    .unwrap();
    let registry = mara::provider::Registry::builtin();
    for provider in registry.resolve_all().unwrap() {
        let asked = provider.config.iter().map(|c| c.key.as_str());
        let required = provider
            .projects
            .iter()
            .flat_map(|p| p.required_config.iter().map(String::as_str));
        for key in asked.chain(required) {
            assert!(
                example.contains(&format!("{key}:")),
                "{} uses {key}, which the example does not document",
                provider.name
            );
        }
    }
}
