//! The kubectl engine (docs/commands.md, "The kubectl engine"): a project of Kubernetes
//! manifests, applied with the stack's kubeconfig. Its directory holds the manifests (`.yaml`,
//! `.yml`, `.json`, in subdirectories too), or a `kustomization.yaml`, which is then built with
//! kubectl's own kustomize (and may name a third party's released manifests by URL).
//!
//! - up: `kubectl apply --server-side --field-manager=mara`: the server merges, and records mara
//!   as the owner of the fields it set; a field another manager owns is a conflict, reported,
//!   never forced.
//! - preview: `kubectl diff --server-side --field-manager=mara` (exit 1: differences).
//! - refresh: `kubectl get --ignore-not-found`: what of it exists, as it is now.
//! - destroy: `kubectl delete --ignore-not-found --wait`.
//!
//! Every command names the kubeconfig and context (`--kubeconfig`, `--context`), never the
//! user's current context.

use std::path::{Path, PathBuf};

use super::{Changes, Operation, ResourceDiff, Step, StepKind};

/// The field manager mara applies as: what `kubectl get --show-managed-fields` names.
pub const FIELD_MANAGER: &str = "mara";

/// The variable naming `kubectl diff`'s diff program.
pub const EXTERNAL_DIFF: &str = "KUBECTL_EXTERNAL_DIFF";

/// The files kubectl builds with kustomize when a directory has one.
pub const KUSTOMIZATIONS: [&str; 3] = ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// How kubectl reaches the stack's cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kubectl {
    /// The kubeconfig file (`workspace::kubeconfig::choose`).
    pub kubeconfig: PathBuf,
    /// The context in it; `None`: its current context.
    pub context: Option<String>,
}

/// What a project's directory holds for kubectl.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A kustomization (`--kustomize DIR`).
    Kustomization,
    /// Manifest files (`--filename DIR --recursive`).
    Files,
}

/// The kustomization file of `dir`, if it has one.
pub fn kustomization(dir: &Path) -> Option<PathBuf> {
    KUSTOMIZATIONS
        .iter()
        .map(|name| dir.join(name))
        .find(|file| file.is_file())
}

/// A kustomization below `dir` (not in it): `--filename DIR --recursive` would read it as a
/// manifest, which it is not.
pub fn nested_kustomization(dir: &Path) -> Option<PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    let mut subdirs: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    subdirs.sort();
    subdirs
        .iter()
        .find_map(|sub| kustomization(sub).or_else(|| nested_kustomization(sub)))
}

/// The manifest files kubectl reads in `dir` and its subdirectories (`--recursive`).
pub fn manifest_files(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| {
            let path = entry.path();
            // As kubectl's walk: a link to a directory is not followed, a link to a file is read.
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                manifest_files(&path)
            } else {
                let manifest = path
                    .extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"));
                usize::from(manifest)
            }
        })
        .sum()
}

impl Kubectl {
    /// The steps of `operation` on the manifests in `dir`.
    pub fn steps(&self, dir: &Path, source: Source, operation: Operation) -> Vec<Step> {
        let (verb, flags): (&str, &[&str]) = match operation {
            Operation::Up => ("apply", &["--server-side", "--field-manager=mara"]),
            // Drift: the live objects against the manifests, as a preview sees them.
            Operation::Preview | Operation::Drift => {
                ("diff", &["--server-side", "--field-manager=mara"])
            }
            Operation::Refresh => ("get", &["--ignore-not-found"]),
            Operation::Destroy => ("delete", &["--ignore-not-found", "--wait"]),
        };
        let mut args = vec![verb.to_string()];
        args.extend(flags.iter().map(|f| f.to_string()));
        match source {
            Source::Kustomization => args.push(format!("--kustomize={}", dir.display())),
            Source::Files => {
                args.push(format!("--filename={}", dir.display()));
                args.push("--recursive".into());
            }
        }
        args.push(format!("--kubeconfig={}", self.kubeconfig.display()));
        if let Some(context) = &self.context {
            args.push(format!("--context={context}"));
        }
        let mut step = Step::new(StepKind::Operation, "kubectl", args, dir);
        if matches!(operation, Operation::Preview | Operation::Drift) {
            // `kubectl diff` exits 1 when it found differences, above 1 when it failed. Its diff
            // program is the one it defaults to whatever the user set: the reader reads its
            // headers.
            step.ok_codes = vec![0, 1];
            step.changes_code = Some(1);
            step.env
                .insert(EXTERNAL_DIFF.to_string(), "diff -u -N".to_string());
        }
        vec![step]
    }
}

/// Reads kubectl's output: its lines as they are, and what changes.
#[derive(Debug)]
pub struct Reader {
    operation: Operation,
    /// Each object of a diff: its `diff -u -N` header's name, and what its first hunk says.
    objects: Vec<(String, Option<&'static str>)>,
    /// Objects deleted.
    deleted: u64,
}

impl Reader {
    pub fn new(operation: Operation) -> Reader {
        Reader {
            operation,
            objects: Vec::new(),
            deleted: 0,
        }
    }

    pub fn line(&mut self, line: &str) -> Vec<String> {
        match self.operation {
            Operation::Preview | Operation::Drift => {
                // `diff -u -N /tmp/LIVE-1/apps.v1.Deployment.demo.web /tmp/MERGED-1/…`
                if let Some(rest) = line.strip_prefix("diff -u -N ") {
                    let name = rest
                        .split_whitespace()
                        .next()
                        .and_then(|live| live.rsplit('/').next())
                        .unwrap_or_default();
                    self.objects.push((name.to_string(), None));
                } else if let Some(hunk) = line.strip_prefix("@@ ")
                    && let Some((_, op)) = self.objects.last_mut().filter(|(_, op)| op.is_none())
                {
                    *op = Some(if hunk.starts_with("-0,0 ") {
                        "create"
                    } else if hunk.contains(" +0,0 @@") {
                        "delete"
                    } else {
                        "update"
                    });
                }
            }
            Operation::Destroy => {
                if is_deletion(line) {
                    self.deleted += 1;
                }
            }
            Operation::Up | Operation::Refresh => {}
        }
        vec![line.to_string()]
    }

    /// What changes: a diff's objects by what happens to them; the objects deleted. An apply
    /// says what it applied, not what changed: it reports no counts.
    pub fn changes(&mut self) -> Option<Changes> {
        match self.operation {
            Operation::Preview | Operation::Drift => {
                let mut changes = Changes::new();
                for (_, op) in &self.objects {
                    *changes
                        .entry(op.unwrap_or("update").to_string())
                        .or_default() += 1;
                }
                Some(changes)
            }
            Operation::Destroy => Some(Changes::from([("delete".to_string(), self.deleted)])),
            Operation::Up | Operation::Refresh => None,
        }
    }

    /// A diff's objects, as `Kind namespace/name`.
    pub fn diffs(&self) -> Vec<ResourceDiff> {
        self.objects
            .iter()
            .map(|(name, op)| ResourceDiff {
                op: op.unwrap_or("update").to_string(),
                resource: object_name(name),
                properties: Vec::new(),
            })
            .collect()
    }
}

/// `deployment.apps "web" deleted`, and since kubectl 1.34 `… deleted from demo namespace`;
/// `force deleted` with `--force`.
fn is_deletion(line: &str) -> bool {
    let Some((object, rest)) = line.trim_end().rsplit_once('"') else {
        return false;
    };
    let rest = rest.strip_prefix(" force").unwrap_or(rest);
    object.contains(" \"")
        && (rest == " deleted"
            || rest
                .strip_prefix(" deleted from ")
                .is_some_and(|ns| ns.ends_with(" namespace")))
}

/// kubectl diff's file name of an object, `[group.]version.Kind.namespace.name` (the name may
/// hold dots, the others do not; a group is lower case, a kind starts upper case), as `Kind
/// namespace/name`, or `Kind name` for an object of no namespace.
fn object_name(file: &str) -> String {
    let parts: Vec<&str> = file.split('.').collect();
    let Some(kind) = parts
        .iter()
        .position(|p| p.starts_with(|c: char| c.is_ascii_uppercase()))
    else {
        return file.to_string();
    };
    let namespace = parts.get(kind + 1).copied().unwrap_or_default();
    let name = parts
        .get(kind + 2..)
        .map(|p| p.join("."))
        .unwrap_or_default();
    match namespace {
        "" => format!("{} {name}", parts[kind]),
        namespace => format!("{} {namespace}/{name}", parts[kind]),
    }
}

/// The kubectl engine (`engine = "kubectl"`): a directory of manifests, or a kustomization.
pub struct KubectlEngine;

/// The kubectl engine, as `engine::ENGINES` registers it.
pub static KUBECTL: KubectlEngine = KubectlEngine;

impl super::Engine for KubectlEngine {
    fn name(&self) -> &'static str {
        "kubectl"
    }

    fn program(&self, _programs: &super::Programs<'_>) -> Option<String> {
        Some("kubectl".into())
    }

    fn steps(&self, run: &super::Engines, target: &super::Target<'_>, op: Operation) -> Vec<Step> {
        run.kubectl.steps(target.dir, target.manifests, op)
    }

    fn reader(&self, operation: Operation) -> Box<dyn super::OutputReader> {
        Box::new(Reader::new(operation))
    }

    fn project_files(&self) -> super::ProjectFiles {
        super::ProjectFiles::Manifests
    }

    fn needs_cluster(&self) -> bool {
        true
    }

    fn has_outputs(&self) -> bool {
        false
    }
}

impl super::OutputReader for Reader {
    fn line(&mut self, line: &str) -> Vec<String> {
        Reader::line(self, line)
    }

    fn diffs(&self) -> Vec<ResourceDiff> {
        Reader::diffs(self)
    }

    fn changes(&mut self) -> Option<Changes> {
        Reader::changes(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubectl() -> Kubectl {
        Kubectl {
            kubeconfig: "/w/.mara/kube/dev.yaml".into(),
            context: Some("k3d-mara-dev".into()),
        }
    }

    #[test]
    fn each_operation_names_the_kubeconfig_the_context_and_mara_as_field_manager() {
        let dir = Path::new("/w/bootstrap/cert-manager");
        let shown = |operation, source| {
            kubectl()
                .steps(dir, source, operation)
                .iter()
                .map(Step::display)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            shown(Operation::Up, Source::Files),
            [
                "kubectl apply --server-side --field-manager=mara --filename=/w/bootstrap/cert-manager --recursive --kubeconfig=/w/.mara/kube/dev.yaml --context=k3d-mara-dev"
            ]
        );
        assert_eq!(
            shown(Operation::Preview, Source::Kustomization),
            [
                "kubectl diff --server-side --field-manager=mara --kustomize=/w/bootstrap/cert-manager --kubeconfig=/w/.mara/kube/dev.yaml --context=k3d-mara-dev"
            ]
        );
        assert_eq!(
            shown(Operation::Destroy, Source::Files),
            [
                "kubectl delete --ignore-not-found --wait --filename=/w/bootstrap/cert-manager --recursive --kubeconfig=/w/.mara/kube/dev.yaml --context=k3d-mara-dev"
            ]
        );
        let preview = &kubectl().steps(dir, Source::Files, Operation::Preview)[0];
        assert!(preview.succeeded(Some(1)) && !preview.succeeded(Some(2)));
        assert_eq!(preview.changes_code, Some(1));
    }

    #[test]
    fn a_diff_counts_its_objects_by_what_happens_to_them() {
        let mut reader = Reader::new(Operation::Preview);
        let diff = "\
diff -u -N /tmp/LIVE-1/v1.Namespace..demo /tmp/MERGED-1/v1.Namespace..demo
--- /tmp/LIVE-1/v1.Namespace..demo\t2026-11-23 10:00:00
+++ /tmp/MERGED-1/v1.Namespace..demo\t2026-11-23 10:00:00
@@ -0,0 +1,6 @@
+apiVersion: v1
diff -u -N /tmp/LIVE-1/apps.v1.Deployment.demo.web /tmp/MERGED-1/apps.v1.Deployment.demo.web
@@ -6,7 +6,7 @@
-  replicas: 1
+  replicas: 2
@@ -20,1 +20,1 @@
diff -u -N /tmp/LIVE-1/apiextensions.k8s.io.v1.CustomResourceDefinition..certificates.cert-manager.io /tmp/MERGED-1/x
@@ -0,0 +1,9 @@";
        for line in diff.lines() {
            assert_eq!(reader.line(line), [line]);
        }
        assert_eq!(
            reader.changes(),
            Some(Changes::from([("create".into(), 2), ("update".into(), 1)]))
        );
        let resources: Vec<String> = reader.diffs().into_iter().map(|d| d.resource).collect();
        assert_eq!(
            resources,
            [
                "Namespace demo",
                "Deployment demo/web",
                "CustomResourceDefinition certificates.cert-manager.io"
            ]
        );
        assert_eq!(
            Reader::new(Operation::Preview).changes(),
            Some(Changes::new())
        );
    }

    #[test]
    fn deletions_are_counted_as_each_kubectl_version_says_them() {
        let mut reader = Reader::new(Operation::Destroy);
        for line in [
            "namespace \"demo\" deleted",
            "deployment.apps \"web\" deleted",
            "deployment.apps \"api\" deleted from demo namespace",
            "pod \"x\" force deleted",
            "warning: deleting cluster-scoped resources, not scoped to the provided namespace",
            "configmap \"was deleted\" not found",
        ] {
            reader.line(line);
        }
        assert_eq!(
            reader.changes(),
            Some(Changes::from([("delete".into(), 4)]))
        );
    }
}
