//! A `destroy` leaves nothing deployed standing on what it destroys (docs/commands.md, "destroy"):
//! the projects outside the selection that depend on it, however far back, and that the ledger
//! records as deployed on the stack, refuse it — they would be left pointing at a cluster, a
//! network or a registry that is gone — unless they are selected too (`--with-dependents`) or the
//! person says so (`--orphan-dependents`).

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{Problem, plural};
use crate::graph::Plan;

/// The projects outside `selected` that depend on a selected project the ledger records as
/// `deployed` (paths, as the ledger keys them), however far back, and are deployed themselves,
/// in execution order. A selected project that is not deployed (destroyed already) leaves no
/// orphan: destroying it again changes nothing under its dependents.
pub fn orphans(selected: &Plan<'_>, deployed: &BTreeSet<&str>) -> Vec<String> {
    (orphans_standing_on(selected, deployed).into_iter())
        .map(|(path, _)| path)
        .collect()
}

/// Each of `orphans`, with the selected, deployed projects it stands on (however far back), in
/// execution order: what a policy over a destroy reads (`run::gate::Orphan`).
pub fn orphans_standing_on(
    selected: &Plan<'_>,
    deployed: &BTreeSet<&str>,
) -> Vec<(String, Vec<String>)> {
    let graph = selected.graph;
    let is_deployed = |i: usize| deployed.contains(graph.project(i).path.as_str());
    // In execution order, a project stands on the selection when one of its predecessors is
    // selected and deployed, or stands on it; what it stands on is theirs.
    let mut on: Vec<Option<BTreeSet<usize>>> = vec![None; graph.len()];
    for &i in graph.order() {
        if selected.contains(i) {
            continue;
        }
        let mut roots = BTreeSet::new();
        let mut standing = false;
        for (d, _) in graph.predecessors(i) {
            if selected.contains(d) && is_deployed(d) {
                roots.insert(d);
                standing = true;
            }
            if let Some(theirs) = &on[d] {
                roots.extend(theirs.iter().copied());
                standing = true;
            }
        }
        on[i] = standing.then_some(roots);
    }
    let position: BTreeMap<usize, usize> = (graph.order().iter().enumerate())
        .map(|(k, &i)| (i, k))
        .collect();
    (graph.order().iter())
        .filter(|&&i| on[i].is_some() && is_deployed(i))
        .map(|&i| {
            let mut roots: Vec<usize> = on[i].iter().flatten().copied().collect();
            roots.sort_by_key(|r| position[r]);
            let paths = roots
                .iter()
                .map(|&r| graph.project(r).path.clone())
                .collect();
            (graph.project(i).path.clone(), paths)
        })
        .collect()
}

/// Why a destroy of `selected` may not run (exit 3, said with the run's other problems): it
/// would leave `deployed` projects depending on it, which it names. `skipping`: the selection
/// has a `--skip`, which is then what leaves them.
pub fn orphaned(
    selected: &Plan<'_>,
    deployed: &BTreeMap<String, String>,
    stack: &str,
    skipping: bool,
) -> Option<Problem> {
    let deployed: BTreeSet<&str> = deployed.keys().map(String::as_str).collect();
    let left = orphans(selected, &deployed);
    if left.is_empty() {
        return None;
    }
    let (what, it) = match selected.order() {
        [only] => (selected.graph.project(*only).path.clone(), "it"),
        order => (format!("these {} projects", order.len()), "them"),
    };
    // Skipped from a selection that took its dependents: the skip is what leaves them.
    let hint = match skipping {
        true => {
            "destroy them too (leave out the --skip that keeps them), or destroy only the selection and leave them as they are (--orphan-dependents)"
        }
        false => {
            "destroy them too (--with-dependents), or destroy only the selection and leave them as they are (--orphan-dependents)"
        }
    };
    Some(
        Problem::new(format!(
            "destroying {what} would leave {} deployed {} on stack {stack} that {} on {it}: {}",
            left.len(),
            plural(left.len(), "project", "projects"),
            plural(left.len(), "depends", "depend"),
            left.join(", ")
        ))
        .hint(hint),
    )
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
            "infrastructure/aws/vpc",
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
        // A vpc destroyed already (with --orphan-dependents): destroying it again orphans none.
        let mut gone = deployed.clone();
        gone.remove("infrastructure/aws/vpc");
        assert!(orphans(&vpc, &gone).is_empty());
    }

    #[test]
    fn the_refusal_names_them_and_the_way_out() {
        let graph = aws();
        let deployed = BTreeMap::from(
            ["infrastructure/aws/vpc", "infrastructure/aws/eks"]
                .map(|p| (p.to_string(), "f".to_string())),
        );
        let refused = orphaned(
            &select(&graph, &["infrastructure/aws/vpc"], false),
            &deployed,
            "dev",
            false,
        )
        .unwrap();
        assert_eq!(
            refused.message,
            "destroying infrastructure/aws/vpc would leave 1 deployed project on stack dev that depends on it: infrastructure/aws/eks"
        );
        assert!(
            refused
                .hint
                .as_deref()
                .unwrap()
                .contains("--orphan-dependents")
        );
        assert!(
            orphaned(
                &select(&graph, &["infrastructure/aws/vpc"], false),
                &BTreeMap::new(),
                "dev",
                false
            )
            .is_none()
        );
    }

    #[test]
    fn each_orphan_says_what_it_stands_on() {
        let graph = aws();
        let plan = select(&graph, &["infrastructure/aws/vpc"], false);
        let deployed: BTreeSet<&str> = (0..graph.len())
            .map(|i| graph.project(i).path.as_str())
            .collect();
        let found = orphans_standing_on(&plan, &deployed);
        assert!(!found.is_empty());
        for (path, on) in &found {
            assert_eq!(on, &["infrastructure/aws/vpc".to_string()], "{path}");
        }
        assert_eq!(
            found.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(),
            orphans(&plan, &deployed)
        );
        // One not deployed leaves no orphan.
        let none: BTreeSet<&str> = BTreeSet::new();
        assert!(orphans_standing_on(&plan, &none).is_empty());
    }
}
