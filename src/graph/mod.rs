//! The execution graph (docs/formats.md, "Ordering"): projects as nodes, an edge A → B meaning B runs after A.
//!
//! Edges come from `after` and `before`, and from the stage rule: every kubernetes project runs
//! after every infrastructure project. The rule is added as edges from each infrastructure *sink*
//! (no infrastructure successor) to each kubernetes *source* (no kubernetes predecessor), which
//! orders every pair exactly as the full rule would while keeping the graph small and each
//! project's direct predecessors meaningful.
//!
//! The graph is built once and checked — duplicate paths, names that match no project (with a
//! suggestion), cycles (printed as `a -> b -> a`) — all problems at once. The execution order is
//! Kahn's topological order with ties broken by declaration order, so that a provider whose
//! declaration order is already valid (every built-in) runs in exactly that order with
//! `--parallel 1`.

pub mod render;
mod select;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use petgraph::Direction;
use petgraph::graph::{DiGraph, NodeIndex};

use crate::error::{Error, Problem, Result, did_you_mean};
use crate::provider::{Project, Provider, Stage};
pub use select::{Plan, Selection};

/// Why an edge exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgeKind {
    /// From an `after` or `before` in the provider.
    Declared,
    /// From the stage rule: infrastructure before kubernetes.
    Stage,
    /// From an input (`[project.inputs]`): it takes an output of the other.
    Input,
}

/// A checked, acyclic execution graph. Node `i` is `projects[i]`, in declaration order.
#[derive(Debug, Clone)]
pub struct ExecutionGraph {
    projects: Vec<Project>,
    graph: DiGraph<(), EdgeKind, u32>,
    /// Project indices in execution order.
    order: Vec<usize>,
    /// For each project, its place in `order`.
    position: Vec<usize>,
}

impl ExecutionGraph {
    /// Builds and checks the graph of `provider`'s projects.
    pub fn build(provider: &Provider) -> Result<ExecutionGraph> {
        Self::from_projects(provider.projects.clone())
    }

    /// Builds and checks the graph of `projects`, in their declaration order.
    pub fn from_projects(projects: Vec<Project>) -> Result<ExecutionGraph> {
        let index = index_paths(&projects)?;
        let mut problems = Vec::new();
        let mut graph =
            DiGraph::<(), EdgeKind, u32>::with_capacity(projects.len(), projects.len() * 2);
        for _ in &projects {
            graph.add_node(());
        }
        add_declared_edges(&projects, &index, &mut graph, &mut problems);
        add_input_edges(&projects, &index, &mut graph, &mut problems);
        if !problems.is_empty() {
            return Err(Error::Problems(problems));
        }
        add_stage_edges(&projects, &mut graph);

        let order = topological_order(&graph)
            .map_err(|cycle| Error::config(cycle_problem(&projects, &graph, &cycle)))?;
        let mut position = vec![0; projects.len()];
        for (place, &i) in order.iter().enumerate() {
            position[i] = place;
        }
        Ok(ExecutionGraph {
            projects,
            graph,
            order,
            position,
        })
    }

    pub fn len(&self) -> usize {
        self.projects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.projects.is_empty()
    }

    pub fn project(&self, i: usize) -> &Project {
        &self.projects[i]
    }

    /// Project indices in execution order.
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// Where project `i` comes in the execution order.
    pub fn position(&self, i: usize) -> usize {
        self.position[i]
    }

    /// Direct predecessors of project `i`, in execution order, with why each edge exists.
    pub fn predecessors(&self, i: usize) -> Vec<(usize, EdgeKind)> {
        self.neighbours(i, Direction::Incoming)
    }

    /// Direct successors of project `i`, in execution order.
    pub fn successors(&self, i: usize) -> Vec<(usize, EdgeKind)> {
        self.neighbours(i, Direction::Outgoing)
    }

    /// The edges between the projects `among` marks (`among[i]` for project `i`): each
    /// (needed, needing) pair where the second needs the first directly or through projects
    /// not among them, whose order still holds; in execution order of the needed. What a run
    /// of a selection records as its graph, and what its page draws.
    pub fn edges_among(&self, among: &[bool]) -> Vec<(usize, usize)> {
        let mut edges = std::collections::BTreeSet::new();
        for &i in self.order.iter().filter(|&&i| among[i]) {
            let mut seen = std::collections::BTreeSet::new();
            let mut next: Vec<usize> = self.successors(i).into_iter().map(|(j, _)| j).collect();
            while let Some(j) = next.pop() {
                if !seen.insert(j) {
                    continue;
                }
                match among[j] {
                    true => {
                        edges.insert((self.position[i], self.position[j]));
                    }
                    false => next.extend(self.successors(j).into_iter().map(|(n, _)| n)),
                }
            }
        }
        (edges.into_iter())
            .map(|(a, b)| (self.order[a], self.order[b]))
            .collect()
    }

    fn neighbours(&self, i: usize, direction: Direction) -> Vec<(usize, EdgeKind)> {
        let mut found: Vec<(usize, EdgeKind)> = self
            .graph
            .edges_directed(NodeIndex::new(i), direction)
            .map(|edge| {
                let other = match direction {
                    Direction::Incoming => petgraph::visit::EdgeRef::source(&edge),
                    Direction::Outgoing => petgraph::visit::EdgeRef::target(&edge),
                };
                (other.index(), *edge.weight())
            })
            .collect();
        found.sort_by_key(|(j, _)| self.position[*j]);
        found
    }

    /// The project `find` finds, without the words that say why there is none (which weigh
    /// on a plan of thousands: they compare the name with every path).
    pub fn lookup(&self, name: &str) -> Option<usize> {
        let name = name.trim_end_matches('/');
        if let Some(i) = self.projects.iter().position(|p| p.path == name) {
            return Some(i);
        }
        let suffix = format!("/{name}");
        let mut matches = (self.projects.iter().enumerate())
            .filter(|(_, p)| p.path.ends_with(&suffix))
            .map(|(i, _)| i);
        match (matches.next(), matches.next()) {
            (Some(one), None) => Some(one),
            _ => None,
        }
    }

    /// The project a command-line name refers to: its exact path, or the one path ending in
    /// `/<name>` (`eks` for `infrastructure/aws/eks`).
    // A problem is returned only on the (cold) path of a mistyped name; boxing it buys nothing.
    #[allow(clippy::result_large_err)]
    pub fn find(&self, name: &str) -> std::result::Result<usize, Problem> {
        if let Some(i) = self.lookup(name) {
            return Ok(i);
        }
        let name = name.trim_end_matches('/');
        let suffix = format!("/{name}");
        let matches: Vec<usize> = self
            .order
            .iter()
            .copied()
            .filter(|&i| self.projects[i].path.ends_with(&suffix))
            .collect();
        match matches.as_slice() {
            [one] => Ok(*one),
            [] => Err(
                Problem::new(format!("no project `{name}` in this plan")).hint(match did_you_mean(
                    name,
                    self.projects.iter().map(|p| p.path.as_str()),
                ) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => "`mara show-execution --format list` lists the projects".to_string(),
                }),
            ),
            many => Err(
                Problem::new(format!("`{name}` matches {} projects", many.len())).hint(format!(
                    "name one by its path: {}",
                    many.iter()
                        .map(|&i| format!("`{}`", self.projects[i].path))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            ),
        }
    }
}

/// Each project's index by its path; a path declared twice is a problem.
fn index_paths(projects: &[Project]) -> Result<HashMap<&str, usize>> {
    let mut problems = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(projects.len());
    for (i, project) in projects.iter().enumerate() {
        if let Some(&first) = index.get(project.path.as_str()) {
            let first_at = &projects[first].declared_at;
            let first_place = match first_at.line {
                Some(line) if first_at.file == project.declared_at.file => {
                    format!("line {line}")
                }
                _ => first_at.to_string(),
            };
            problems.push(
                Problem::new(format!(
                    "duplicate project path (first declared at {first_place})"
                ))
                .at(project.declared_at.clone())
                .subject(format!("`{}`", project.path)),
            );
        } else {
            index.insert(project.path.as_str(), i);
        }
    }
    match problems.is_empty() {
        true => Ok(index),
        false => Err(Error::Problems(problems)),
    }
}

/// An edge for each `after` and `before`; one naming the project itself, or no project, is a
/// problem.
fn add_declared_edges(
    projects: &[Project],
    index: &HashMap<&str, usize>,
    graph: &mut DiGraph<(), EdgeKind, u32>,
    problems: &mut Vec<Problem>,
) {
    let node = |i: usize| NodeIndex::new(i);
    for (i, project) in projects.iter().enumerate() {
        let references = project
            .after
            .iter()
            .map(|r| ("after", r))
            .chain(project.before.iter().map(|r| ("before", r)));
        for (field, reference) in references {
            match index.get(reference.target.as_str()) {
                Some(&j) if j == i => problems.push(
                    Problem::new(format!("`{field}` names the project itself"))
                        .at(reference.at.clone())
                        .subject(format!("project `{}`", project.path)),
                ),
                Some(&j) => {
                    let (from, to) = if field == "after" { (j, i) } else { (i, j) };
                    graph.update_edge(node(from), node(to), EdgeKind::Declared);
                }
                None => problems.push(
                    Problem::new(format!(
                        "`{field}` names `{}`, which is not a project here",
                        reference.target
                    ))
                    .at(reference.at.clone())
                    .subject(format!("project `{}`", project.path))
                    .maybe_hint(
                        did_you_mean(&reference.target, projects.iter().map(|p| p.path.as_str()))
                            .map(|s| format!("did you mean `{s}`?")),
                    ),
                ),
            }
        }
    }
}

/// An edge from each project an input takes an output of (`[project.inputs]`), unless one is
/// declared already; an input naming the project itself, or no project, is a problem.
fn add_input_edges(
    projects: &[Project],
    index: &HashMap<&str, usize>,
    graph: &mut DiGraph<(), EdgeKind, u32>,
    problems: &mut Vec<Problem>,
) {
    for (i, project) in projects.iter().enumerate() {
        for input in &project.inputs {
            let subject = format!("project `{}`, input `{}`", project.path, input.name);
            match index.get(input.from.target.as_str()) {
                Some(&j) if j == i => problems.push(
                    Problem::new("takes an output of the project itself")
                        .at(input.from.at.clone())
                        .subject(subject),
                ),
                // A declared edge says more than an implied one: it is kept.
                Some(&j) => {
                    if graph
                        .find_edge(NodeIndex::new(j), NodeIndex::new(i))
                        .is_none()
                    {
                        graph.add_edge(NodeIndex::new(j), NodeIndex::new(i), EdgeKind::Input);
                    }
                }
                None => problems.push(
                    Problem::new(format!(
                        "takes `{}:{}`, but `{}` is not a project here",
                        input.from.target, input.output, input.from.target
                    ))
                    .at(input.from.at.clone())
                    .subject(subject)
                    .maybe_hint(
                        did_you_mean(&input.from.target, projects.iter().map(|p| p.path.as_str()))
                            .map(|s| format!("did you mean `{s}`?")),
                    ),
                ),
            }
        }
    }
}

/// Infrastructure sinks → kubernetes sources, for every pair not already joined.
fn add_stage_edges(projects: &[Project], graph: &mut DiGraph<(), EdgeKind, u32>) {
    let stage = |n: NodeIndex| projects[n.index()].stage;
    let sinks: Vec<NodeIndex> = graph
        .node_indices()
        .filter(|&n| stage(n) == Stage::Infrastructure)
        .filter(|&n| {
            graph
                .neighbors_directed(n, Direction::Outgoing)
                .all(|m| stage(m) != Stage::Infrastructure)
        })
        .collect();
    let sources: Vec<NodeIndex> = graph
        .node_indices()
        .filter(|&n| stage(n) == Stage::Kubernetes)
        .filter(|&n| {
            graph
                .neighbors_directed(n, Direction::Incoming)
                .all(|m| stage(m) != Stage::Kubernetes)
        })
        .collect();
    for &sink in &sinks {
        for &source in &sources {
            if graph.find_edge(sink, source).is_none() {
                graph.add_edge(sink, source, EdgeKind::Stage);
            }
        }
    }
}

/// Kahn's algorithm, always taking the ready project declared first. On a cycle, the projects
/// that could not be ordered.
fn topological_order(
    graph: &DiGraph<(), EdgeKind, u32>,
) -> std::result::Result<Vec<usize>, Vec<usize>> {
    let mut in_degree: Vec<usize> = graph
        .node_indices()
        .map(|n| graph.neighbors_directed(n, Direction::Incoming).count())
        .collect();
    let mut ready: BinaryHeap<Reverse<usize>> = in_degree
        .iter()
        .enumerate()
        .filter(|(_, d)| **d == 0)
        .map(|(i, _)| Reverse(i))
        .collect();
    let mut order = Vec::with_capacity(in_degree.len());
    let mut visits = 0usize;
    while let Some(Reverse(i)) = ready.pop() {
        order.push(i);
        visits += 1;
        for next in graph.neighbors_directed(NodeIndex::new(i), Direction::Outgoing) {
            visits += 1;
            let degree = &mut in_degree[next.index()];
            *degree -= 1;
            if *degree == 0 {
                ready.push(Reverse(next.index()));
            }
        }
    }
    // Counted by the tests: each project and each edge once.
    tracing::debug!(
        target: "mara::graph",
        nodes = graph.node_count(),
        edges = graph.edge_count(),
        visits,
        "topological order"
    );
    if order.len() == in_degree.len() {
        Ok(order)
    } else {
        Err((0..in_degree.len()).filter(|&i| in_degree[i] > 0).collect())
    }
}

/// One cycle among `stuck` (projects Kahn's algorithm could not order), printed in edge
/// direction and starting from the project declared first.
fn cycle_problem(
    projects: &[Project],
    graph: &DiGraph<(), EdgeKind, u32>,
    stuck: &[usize],
) -> Problem {
    let is_stuck = |i: usize| stuck.binary_search(&i).is_ok();
    // Every stuck project has a stuck predecessor: walking back from one must revisit a project.
    let mut walk = vec![stuck[0]];
    let cycle = loop {
        let current = *walk.last().expect("walk starts non-empty");
        let previous = graph
            .neighbors_directed(NodeIndex::new(current), Direction::Incoming)
            .map(NodeIndex::index)
            .filter(|&j| is_stuck(j))
            .min()
            .expect("a project left by Kahn's algorithm has a predecessor left too");
        if let Some(start) = walk.iter().position(|&i| i == previous) {
            let mut cycle: Vec<usize> = walk[start..].to_vec();
            cycle.reverse();
            break cycle;
        }
        walk.push(previous);
    };
    let first = (0..cycle.len()).min_by_key(|&k| cycle[k]).unwrap_or(0);
    let cycle: Vec<usize> = cycle[first..]
        .iter()
        .chain(&cycle[..first])
        .copied()
        .collect();
    let through_stage_rule = cycle
        .iter()
        .zip(cycle.iter().cycle().skip(1))
        .any(|(&a, &b)| {
            graph
                .find_edge(NodeIndex::new(a), NodeIndex::new(b))
                .is_some_and(|e| graph[e] == EdgeKind::Stage)
        });
    let names: Vec<&str> = cycle
        .iter()
        .chain(std::iter::once(&cycle[0]))
        .map(|&i| projects[i].path.as_str())
        .collect();
    let problem = Problem::new(format!(
        "the projects depend on each other in a cycle: {}",
        names.join(" -> ")
    ))
    .at(projects[cycle[0]].declared_at.clone());
    let inputs: Vec<String> = cycle
        .iter()
        .zip(cycle.iter().cycle().skip(1))
        .filter(|&(&a, &b)| {
            graph
                .find_edge(NodeIndex::new(a), NodeIndex::new(b))
                .is_some_and(|e| graph[e] == EdgeKind::Input)
        })
        .flat_map(|(&a, &b)| {
            projects[b]
                .inputs
                .iter()
                .filter(move |input| input.from.target == projects[a].path)
                .map(move |input| format!("`{}` of `{}`", input.name, projects[b].path))
        })
        .collect();
    if !inputs.is_empty() {
        problem.hint(format!(
            "an input takes an output of the project it comes before: {}; drop it, or what else closes the cycle (an `after`/`before`, a `stage`)",
            inputs.join(", ")
        ))
    } else if through_stage_rule {
        problem.hint(
            "every kubernetes project runs after every infrastructure project, so an infrastructure \
             project cannot come after a kubernetes one: change a `stage`, or drop the `after`/`before` that closes the cycle",
        )
    } else {
        problem.hint("drop one of the `after`/`before` entries that close the cycle")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::command::Commands;
    use crate::error::Location;
    use crate::provider::Reference;

    fn project(path: &str, stage: Stage, after: &[&str]) -> Project {
        Project {
            path: path.into(),
            description: String::new(),
            stage,
            after: after
                .iter()
                .map(|t| Reference {
                    target: t.to_string(),
                    at: Location::line("p.toml", 1),
                })
                .collect(),
            before: Vec::new(),
            engine: None,
            required_config: Vec::new(),
            secrets: Vec::new(),
            on_success: Vec::new(),
            on_destroy: Vec::new(),
            commands: Commands::default(),
            inputs: Vec::new(),
            pool: None,
            retry: None,
            declared_at: Location::line("p.toml", 1),
        }
    }

    fn paths(graph: &ExecutionGraph) -> Vec<&str> {
        graph
            .order()
            .iter()
            .map(|&i| graph.project(i).path.as_str())
            .collect()
    }

    #[test]
    fn ties_follow_declaration_order_and_stages_come_first() {
        let graph = ExecutionGraph::from_projects(vec![
            project("k/a", Stage::Kubernetes, &[]),
            project("k/b", Stage::Kubernetes, &["k/c"]),
            project("k/c", Stage::Kubernetes, &[]),
            project("i/x", Stage::Infrastructure, &[]),
        ])
        .unwrap();
        assert_eq!(paths(&graph), ["i/x", "k/a", "k/c", "k/b"]);
        // The stage rule reaches the kubernetes sources only.
        assert_eq!(graph.predecessors(0), vec![(3, EdgeKind::Stage)]);
        assert_eq!(graph.predecessors(1), vec![(2, EdgeKind::Declared)]);
    }

    #[test]
    fn the_edges_among_some_projects_go_through_those_left_out() {
        // a → b → c → d, a → e; among a, c, d, e: a → c (through b), c → d, a → e.
        let graph = ExecutionGraph::from_projects(vec![
            project("a", Stage::Kubernetes, &[]),
            project("b", Stage::Kubernetes, &["a"]),
            project("c", Stage::Kubernetes, &["b"]),
            project("d", Stage::Kubernetes, &["c"]),
            project("e", Stage::Kubernetes, &["a"]),
        ])
        .unwrap();
        let named = |edges: Vec<(usize, usize)>| -> Vec<(String, String)> {
            (edges.into_iter())
                .map(|(x, y)| (graph.project(x).path.clone(), graph.project(y).path.clone()))
                .collect()
        };
        let pair = |x: &str, y: &str| (x.to_string(), y.to_string());
        let among = [true, false, true, true, true];
        assert_eq!(
            named(graph.edges_among(&among)),
            [pair("a", "c"), pair("a", "e"), pair("c", "d")]
        );
        // Nothing left out: the graph's own edges.
        assert_eq!(named(graph.edges_among(&[true; 5])).len(), 4);
        // One project alone has none.
        assert!(
            graph
                .edges_among(&[false, false, true, false, false])
                .is_empty()
        );
    }

    #[test]
    fn cycles_are_printed_in_edge_direction() {
        let err = ExecutionGraph::from_projects(vec![
            project("a", Stage::Kubernetes, &["c"]),
            project("b", Stage::Kubernetes, &["a"]),
            project("c", Stage::Kubernetes, &["b"]),
            project("d", Stage::Kubernetes, &[]),
        ])
        .unwrap_err();
        assert!(err.to_string().contains("cycle: a -> b -> c -> a"), "{err}");
    }

    #[test]
    fn a_cycle_through_the_stage_rule_says_so() {
        let err = ExecutionGraph::from_projects(vec![
            project("infra", Stage::Infrastructure, &["app"]),
            project("app", Stage::Kubernetes, &[]),
        ])
        .unwrap_err();
        assert!(err.to_string().contains("infra -> app -> infra"), "{err}");
        assert!(err.problems()[0].hint.as_ref().unwrap().contains("stage"));
    }

    #[test]
    fn unknown_names_get_a_suggestion_and_duplicates_are_refused() {
        let err = ExecutionGraph::from_projects(vec![
            project("kubernetes/logstore", Stage::Kubernetes, &[]),
            project(
                "kubernetes/logagent",
                Stage::Kubernetes,
                &["kubernetes/logstor"],
            ),
        ])
        .unwrap_err();
        assert_eq!(
            err.problems()[0].hint.as_deref(),
            Some("did you mean `kubernetes/logstore`?")
        );
        let err = ExecutionGraph::from_projects(vec![
            project("a", Stage::Kubernetes, &[]),
            project("a", Stage::Kubernetes, &[]),
        ])
        .unwrap_err();
        assert!(err.to_string().contains("duplicate project path"), "{err}");
    }

    #[test]
    fn names_resolve_by_path_or_unique_tail() {
        let graph = ExecutionGraph::from_projects(vec![
            project("infrastructure/aws/eks", Stage::Infrastructure, &[]),
            project("do/registry", Stage::Kubernetes, &[]),
            project("linode/registry", Stage::Kubernetes, &[]),
        ])
        .unwrap();
        assert_eq!(graph.find("eks"), Ok(0));
        assert_eq!(graph.find("aws/eks"), Ok(0));
        assert!(
            graph
                .find("registry")
                .unwrap_err()
                .message
                .contains("matches 2 projects")
        );
        assert!(graph.find("ek").is_err());
    }
}
