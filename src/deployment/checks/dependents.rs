//! A `destroy` leaves nothing deployed standing on what it destroys (docs/commands.md, "destroy"):
//! the projects outside the selection that depend on it, however far back, and that the ledger
//! records as deployed on the stack, refuse it — they would be left pointing at a cluster, a
//! network or a registry that is gone — unless they are selected too (`--with-dependents`) or the
//! person says so (`--orphan-dependents`).

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{Error, Problem, Result, plural};
use crate::graph::Plan;

/// The projects outside `selected` that depend on it and are `deployed` (paths, as the ledger
/// keys what is deployed), in execution order.
pub fn orphans(selected: &Plan<'_>, deployed: &BTreeSet<&str>) -> Vec<String> {
    let graph = selected.graph;
    let mut standing = vec![false; graph.len()];
    // In execution order, a project stands on the selection when one of its predecessors is
    // selected or stands on it.
    for &i in graph.order() {
        standing[i] = !selected.contains(i)
            && (graph.predecessors(i).into_iter())
                .any(|(d, _)| selected.contains(d) || standing[d]);
    }
    (graph.order().iter())
        .filter(|&&i| standing[i])
        .map(|&i| graph.project(i).path.clone())
        .filter(|path| deployed.contains(path.as_str()))
        .collect()
}

/// Refuses (exit 3) a destroy of `selected` that would leave `deployed` projects depending on
/// it, naming them.
pub fn no_orphans(
    selected: &Plan<'_>,
    deployed: &BTreeMap<String, String>,
    stack: &str,
) -> Result<()> {
    let deployed: BTreeSet<&str> = deployed.keys().map(String::as_str).collect();
    let left = orphans(selected, &deployed);
    if left.is_empty() {
        return Ok(());
    }
    let what = match selected.order() {
        [only] => selected.graph.project(*only).path.clone(),
        order => format!("these {} projects", order.len()),
    };
    Err(Error::config(
        Problem::new(format!(
            "destroying {what} would leave {} deployed {} on stack {stack} that {} on it: {}",
            left.len(),
            plural(left.len(), "project", "projects"),
            plural(left.len(), "depends", "depend"),
            left.join(", ")
        ))
        .hint("destroy them too (--with-dependents), or destroy only the selection and leave them as they are (--orphan-dependents)"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{ExecutionGraph, Selection};
    use crate::provider::Registry;

    fn aws() -> ExecutionGraph {
        ExecutionGraph::build(&Registry::builtin().resolve("aws").unwrap()).unwrap()
    }

    fn select<'g>(graph: &'g ExecutionGraph, only: &[&str], dependents: bool) -> Plan<'g> {
        let selection = Selection {
            only: only.iter().map(|s| s.to_string()).collect(),
            with_dependents: dependents,
            ..Selection::default()
        };
        Plan::select(graph, &selection).unwrap()
    }

    #[test]
    fn what_stands_on_a_destroyed_project_however_far_is_an_orphan_when_deployed() {
        let graph = aws();
        let deployed: BTreeSet<&str> = [
            "infrastructure/aws/eks",
            "kubernetes/logagent",
            "infrastructure/aws/ecr",
        ]
        .into();
        let vpc = select(&graph, &["infrastructure/aws/vpc"], false);
        // eks stands on the vpc; logagent on it through kubeconfig and logstore (not deployed
        // themselves); ecr does not.
        assert_eq!(
            orphans(&vpc, &deployed),
            ["infrastructure/aws/eks", "kubernetes/logagent"]
        );
        let all = select(&graph, &["infrastructure/aws/vpc"], true);
        assert!(orphans(&all, &deployed).is_empty(), "selected too");
        let leaf = select(&graph, &["kubernetes/logagent"], false);
        assert!(orphans(&leaf, &deployed).is_empty(), "nothing stands on it");
    }

    #[test]
    fn the_refusal_names_them_and_the_way_out() {
        let graph = aws();
        let deployed = BTreeMap::from([("infrastructure/aws/eks".to_string(), "f".to_string())]);
        let refused = no_orphans(
            &select(&graph, &["infrastructure/aws/vpc"], false),
            &deployed,
            "dev",
        )
        .unwrap_err();
        assert_eq!(refused.exit_code(), crate::error::exit::CONFIG);
        assert_eq!(
            refused.to_string(),
            "destroying infrastructure/aws/vpc would leave 1 deployed project on stack dev that depends on it: infrastructure/aws/eks"
        );
        assert!(
            refused.problems()[0]
                .hint
                .as_deref()
                .unwrap()
                .contains("--orphan-dependents")
        );
        assert!(
            no_orphans(
                &select(&graph, &["infrastructure/aws/vpc"], false),
                &BTreeMap::new(),
                "dev"
            )
            .is_ok()
        );
    }
}
