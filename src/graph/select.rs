//! Selection (docs/commands.md, "Selection"): narrowing a run to some projects, and widening it along the graph.
//!
//! `--only` and `--from` choose the starting set (everything when neither is given; their union
//! when both are), `--with-dependencies` / `--with-dependents` add every project it transitively
//! needs / that transitively needs it, and `--skip` takes projects out last. Projects left out are
//! not touched.

use super::ExecutionGraph;
use crate::error::{Error, Problem, Result};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    pub only: Vec<String>,
    pub skip: Vec<String>,
    pub from: Option<String>,
    pub with_dependencies: bool,
    pub with_dependents: bool,
}

impl Selection {
    pub fn is_everything(&self) -> bool {
        self.only.is_empty() && self.skip.is_empty() && self.from.is_none()
    }
}

/// The projects one run touches, in execution order.
#[derive(Debug, Clone)]
pub struct Plan<'g> {
    pub graph: &'g ExecutionGraph,
    selected: Vec<bool>,
    order: Vec<usize>,
}

impl<'g> Plan<'g> {
    /// Every project of the graph.
    pub fn everything(graph: &'g ExecutionGraph) -> Plan<'g> {
        Plan {
            graph,
            selected: vec![true; graph.len()],
            order: graph.order().to_vec(),
        }
    }

    /// The projects `selection` chooses; every name that matches no project is reported at once.
    pub fn select(graph: &'g ExecutionGraph, selection: &Selection) -> Result<Plan<'g>> {
        if selection.is_everything() {
            return Ok(Self::everything(graph));
        }
        let mut problems = Vec::new();
        let mut find = |flag: &str, name: &str| match graph.find(name) {
            Ok(i) => Some(i),
            Err(problem) => {
                problems.push(Problem {
                    subject: Some(format!("--{flag} {name}")),
                    ..problem
                });
                None
            }
        };
        let only: Vec<usize> = selection
            .only
            .iter()
            .filter_map(|n| find("only", n))
            .collect();
        let skip: Vec<usize> = selection
            .skip
            .iter()
            .filter_map(|n| find("skip", n))
            .collect();
        let from = selection.from.as_deref().and_then(|n| find("from", n));
        if !problems.is_empty() {
            return Err(Error::Problems(problems).into_usage());
        }

        let mut selected = vec![only.is_empty() && from.is_none(); graph.len()];
        for &i in &only {
            selected[i] = true;
        }
        if let Some(from) = from {
            for &i in &graph.order()[graph.position(from)..] {
                selected[i] = true;
            }
        }
        if selection.with_dependencies {
            widen(graph, &mut selected, |i| {
                graph.predecessors(i).into_iter().map(|(j, _)| j).collect()
            });
        }
        if selection.with_dependents {
            widen(graph, &mut selected, |i| {
                graph.successors(i).into_iter().map(|(j, _)| j).collect()
            });
        }
        for &i in &skip {
            selected[i] = false;
        }
        let order: Vec<usize> = graph
            .order()
            .iter()
            .copied()
            .filter(|&i| selected[i])
            .collect();
        if order.is_empty() {
            return Err(Error::usage(
                Problem::new("the selection leaves no project to run").hint(
                    "check --only, --from and --skip against `mara show-execution --format list`",
                ),
            ));
        }
        Ok(Plan {
            graph,
            selected,
            order,
        })
    }

    /// Selected project indices in execution order.
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// Selected project indices in reverse execution order (how `destroy` walks).
    pub fn reverse_order(&self) -> impl Iterator<Item = usize> + '_ {
        self.order.iter().rev().copied()
    }

    /// The selected projects' edges, through those left out (`ExecutionGraph::edges_among`).
    pub fn edges(&self) -> Vec<(usize, usize)> {
        self.graph.edges_among(&self.selected)
    }

    pub fn contains(&self, i: usize) -> bool {
        self.selected[i]
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    pub fn is_everything(&self) -> bool {
        self.order.len() == self.graph.len()
    }
}

/// Adds to `selected` everything reachable from it through `next`.
fn widen(graph: &ExecutionGraph, selected: &mut [bool], next: impl Fn(usize) -> Vec<usize>) {
    let mut stack: Vec<usize> = (0..graph.len()).filter(|&i| selected[i]).collect();
    while let Some(i) = stack.pop() {
        for j in next(i) {
            if !selected[j] {
                selected[j] = true;
                stack.push(j);
            }
        }
    }
}

impl Error {
    /// The same problems, reported as a usage error (they came from the command line).
    fn into_usage(self) -> Error {
        match self {
            Error::Problems(mut problems) if problems.len() == 1 => {
                Error::usage(problems.remove(0))
            }
            // Several bad names: each on its line, with its own "did you mean".
            Error::Problems(problems) => Error::UsageProblems(problems),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Registry;

    fn aws() -> ExecutionGraph {
        let registry = Registry::builtin();
        ExecutionGraph::build(&registry.resolve("aws").unwrap()).unwrap()
    }

    fn select(graph: &ExecutionGraph, selection: Selection) -> Vec<String> {
        let plan = Plan::select(graph, &selection).unwrap();
        plan.order()
            .iter()
            .map(|&i| graph.project(i).leaf().to_string())
            .collect()
    }

    #[test]
    fn only_with_dependencies_takes_the_closure_in_order() {
        let graph = aws();
        let picked = select(
            &graph,
            Selection {
                only: vec!["logagent".into()],
                with_dependencies: true,
                ..Selection::default()
            },
        );
        assert_eq!(
            picked,
            ["vpc", "eks", "ecr", "kubeconfig", "logstore", "logagent"]
        );
    }

    #[test]
    fn from_skip_and_dependents() {
        let graph = aws();
        let picked = select(
            &graph,
            Selection {
                from: Some("certmgr".into()),
                skip: vec!["observability".into()],
                ..Selection::default()
            },
        );
        assert_eq!(picked, ["certmgr", "prometheus", "sirius"]);
        let picked = select(
            &graph,
            Selection {
                only: vec!["logstore".into()],
                with_dependents: true,
                ..Selection::default()
            },
        );
        assert_eq!(picked, ["logstore", "logagent"]);
    }

    #[test]
    fn every_unknown_name_is_reported() {
        let graph = aws();
        let err = Plan::select(
            &graph,
            &Selection {
                only: vec!["nope".into()],
                skip: vec!["logstor".into()],
                ..Selection::default()
            },
        )
        .unwrap_err();
        let problems: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [
                "--only nope: no project `nope` in this plan",
                "--skip logstor: no project `logstor` in this plan"
            ]
        );
        assert_eq!(
            err.problems()[1].hint.as_deref(),
            Some("did you mean `kubernetes/logstore`?"),
            "each with its own suggestion"
        );
        assert_eq!(err.exit_code(), crate::error::exit::USAGE);
    }
}
