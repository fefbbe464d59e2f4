//! The stack's local k3d cluster (docs/developer-loop.md): its name, its state as k3d reports it,
//! and the argv of each k3d command mara runs on it. Pure: `commands::cluster` runs them.
//!
//! The k3d provider names the cluster of stack `dev` `mara-dev` (providers/k3d.toml); k3d names
//! its nodes `k3d-mara-dev-server-0`, … and its kubeconfig context `k3d-mara-dev`.

use serde_json::Value;

/// The k3d cluster of `stack`.
pub fn name(stack: &str) -> String {
    format!("mara-{stack}")
}

/// The k3d provider's project that makes the cluster (providers/k3d.toml).
pub const CLUSTER_PROJECT: &str = "infrastructure/k3d";

/// What to do about a stack whose cluster's name k3d refuses.
pub const NAME_HINT: &str = "the cluster is `mara-<stack>`: use a stack name of letters, digits and `-`, at most 27 characters";

/// The longest cluster name k3d v5 takes (its node names are built from it).
pub const NAME_MAX: usize = 32;

/// Why k3d would refuse `name` as a cluster's name: it must be a host name (RFC 1123: labels of
/// letters, digits and `-`, not starting or ending with `-`, joined by `.`) of at most 32
/// characters.
pub fn name_problem(name: &str) -> Option<String> {
    if name.len() > NAME_MAX {
        return Some(format!(
            "k3d takes cluster names of at most {NAME_MAX} characters, and `{name}` has {}",
            name.len()
        ));
    }
    let label_ok = |label: &str| {
        !label.is_empty()
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    match name.split('.').all(label_ok) {
        true => None,
        false => Some(format!(
            "k3d takes a host name as a cluster's name (letters, digits and `-`, in labels joined by `.`), and `{name}` is not one"
        )),
    }
}

/// Where a cluster is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// k3d does not list it.
    Missing,
    /// Every node runs.
    Running,
    /// Some nodes run and some do not (a start cut short, a node stopped by hand): `k3d cluster
    /// start` starts the others.
    Partly,
    /// No node runs.
    Stopped,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Missing => "not created",
            State::Running => "running",
            State::Partly => "partly running",
            State::Stopped => "stopped",
        }
    }
}

/// One node of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Node {
    pub name: String,
    /// `server`, `agent`, `loadbalancer`, …
    pub role: String,
    pub running: bool,
    /// As the container runtime says (`running`, `exited`, …).
    pub status: String,
}

/// A cluster as `k3d cluster list -o json` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    pub name: String,
    pub nodes: Vec<Node>,
    /// When its first server node was created: a cluster deleted and made again under the same
    /// name has another (`images update` then imports every image again).
    pub created: Option<String>,
}

impl Cluster {
    pub fn state(&self) -> State {
        let running = self.nodes.iter().filter(|n| n.running).count();
        match running {
            0 => State::Stopped,
            n if n == self.nodes.len() => State::Running,
            _ => State::Partly,
        }
    }
}

/// The cluster `name` in what `k3d cluster list -o json` printed: `Ok(None)` when it is not
/// listed, an error when the output is not k3d's list.
pub fn find(list: &str, name: &str) -> Result<Option<Cluster>, String> {
    let value: Value = serde_json::from_str(list.trim())
        .map_err(|e| format!("`k3d cluster list -o json` printed what is not JSON: {e}"))?;
    let Value::Array(clusters) = value else {
        return Err("`k3d cluster list -o json` printed JSON that is not a list".into());
    };
    let Some(cluster) = clusters
        .iter()
        .find(|c| c.get("name").and_then(Value::as_str) == Some(name))
    else {
        return Ok(None);
    };
    let text = |value: &Value, key: &str| {
        value
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let mut nodes: Vec<(Node, String)> = cluster
        .get("nodes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|node| {
            let state = node.get("State").cloned().unwrap_or_default();
            let node_of = Node {
                name: text(node, "name"),
                role: text(node, "role"),
                running: state.get("Running").and_then(Value::as_bool) == Some(true),
                status: text(&state, "Status"),
            };
            (node_of, text(node, "created"))
        })
        .collect();
    nodes.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    let created = nodes
        .iter()
        .find(|(node, created)| node.role == "server" && !created.is_empty())
        .map(|(_, created)| created.clone());
    Ok(Some(Cluster {
        name: name.to_string(),
        nodes: nodes.into_iter().map(|(node, _)| node).collect(),
        created,
    }))
}

/// An image as Docker names it in full: `nginx` is `nginx:latest` (a digest, `@sha256:…`, is kept
/// as it is), so that one image is never recorded, or imported, twice.
pub fn image_ref(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    match image.contains('@') || last.contains(':') {
        true => image.to_string(),
        false => format!("{image}:latest"),
    }
}

/// `k3d cluster list -o json`: every cluster, so that a missing one is told from k3d failing.
pub fn list_args() -> Vec<String> {
    words(&["cluster", "list", "-o", "json"])
}

/// `k3d cluster start NAME --wait`: starts the nodes that do not run, and waits for them.
pub fn start_args(name: &str) -> Vec<String> {
    words(&["cluster", "start", name, "--wait"])
}

/// `k3d cluster stop NAME`.
pub fn stop_args(name: &str) -> Vec<String> {
    words(&["cluster", "stop", name])
}

/// `k3d image import IMAGE… --cluster NAME`.
pub fn import_args(name: &str, images: &[String]) -> Vec<String> {
    let mut args = words(&["image", "import"]);
    args.extend(images.iter().cloned());
    args.extend(words(&["--cluster", name]));
    args
}

/// `docker image inspect --format {{.Id}} IMAGE`: the local image's id.
pub fn image_id_args(image: &str) -> Vec<String> {
    words(&["image", "inspect", "--format", "{{.Id}}", image])
}

fn words(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As k3d v5.8 prints it (trimmed to the fields read; the others are ignored).
    const LIST: &str = r#"[{"name":"other","nodes":[]},
      {"name":"mara-dev","nodes":[
        {"name":"k3d-mara-dev-serverlb","role":"loadbalancer","created":"2026-11-23T10:00:05Z","State":{"Running":false,"Status":"exited","Started":""}},
        {"name":"k3d-mara-dev-server-0","role":"server","created":"2026-11-23T10:00:01Z","State":{"Running":true,"Status":"running","Started":"x"}}],
       "serversRunning":1,"serversCount":1,"agentsRunning":0,"agentsCount":0,"hasLoadbalancer":true}]"#;

    #[test]
    fn a_cluster_is_found_with_its_nodes_and_state() {
        let cluster = find(LIST, "mara-dev").unwrap().unwrap();
        assert_eq!(cluster.state(), State::Partly);
        assert_eq!(cluster.created.as_deref(), Some("2026-11-23T10:00:01Z"));
        assert_eq!(
            cluster
                .nodes
                .iter()
                .map(|n| &n.name[..])
                .collect::<Vec<_>>(),
            ["k3d-mara-dev-server-0", "k3d-mara-dev-serverlb"]
        );
        assert_eq!(find(LIST, "mara-prod").unwrap(), None);
        assert_eq!(find("[]", "mara-dev").unwrap(), None);
        let stopped = find(&LIST.replace("true", "false"), "mara-dev").unwrap();
        assert_eq!(stopped.unwrap().state(), State::Stopped);
    }

    #[test]
    fn an_image_is_named_in_full() {
        assert_eq!(image_ref("nginx"), "nginx:latest");
        assert_eq!(image_ref("nginx:1.27"), "nginx:1.27");
        assert_eq!(image_ref("localhost:5000/app"), "localhost:5000/app:latest");
        assert_eq!(image_ref("ghcr.io/a/b:dev"), "ghcr.io/a/b:dev");
        assert_eq!(image_ref("app@sha256:abc"), "app@sha256:abc");
    }

    #[test]
    fn a_name_k3d_refuses_is_told_before_k3d_is_asked() {
        assert_eq!(name_problem(&name("dev")), None);
        assert_eq!(name_problem(&name("team.dev-2")), None);
        for stack in [
            "my_stack",
            "dev-",
            "a..b",
            "x.",
            "twenty-eight-characters-long",
        ] {
            assert!(name_problem(&name(stack)).is_some(), "{stack}");
        }
        assert_eq!(name_problem(&name("twenty-seven-characters-ok")), None);
    }

    #[test]
    fn what_is_not_k3d_s_list_is_an_error_not_a_missing_cluster() {
        assert!(find("", "mara-dev").is_err());
        assert!(find("FATA[0000] docker is not running", "mara-dev").is_err());
        assert!(find(r#"{"name":"mara-dev"}"#, "mara-dev").is_err());
        // Nodes without the fields read are neither running nor a panic.
        let odd = find(
            r#"[{"name":"mara-dev","nodes":[{"State":7},3]}]"#,
            "mara-dev",
        );
        assert_eq!(odd.unwrap().unwrap().state(), State::Stopped);
    }
}
