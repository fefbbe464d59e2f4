//! A run's graph as the run's page draws it (docs/commands.md, "serve"): its projects in columns
//! by how many projects come before them, each coloured by its status, and the edges of the
//! provider's graph between them — through the projects the run left out, so that a run of a
//! selection still shows what waited on what.

use std::collections::{BTreeMap, BTreeSet};

use maud::{Markup, html};
use serde::Serialize;

use crate::graph::ExecutionGraph;

const COLUMN: u32 = 210;
const ROW: u32 = 46;
const NODE_WIDTH: u32 = 180;
const NODE_HEIGHT: u32 = 30;
const MARGIN: u32 = 10;

/// A project as drawn: its box's place and what it says.
#[derive(Debug, Clone, Serialize)]
pub struct Node {
    pub path: String,
    /// Its status as the page shows it (`views::ProjectRow::shown`).
    pub status: String,
    pub column: u32,
    pub row: u32,
    pub x: u32,
    pub y: u32,
    pub label: String,
}

/// The graph of a run: its projects, the edges between them as indices into `nodes`, and how
/// each edge is drawn (an SVG path, for the page's script to draw the graph again when a
/// running run starts a project).
#[derive(Debug, Clone, Serialize)]
pub struct Drawing {
    pub nodes: Vec<Node>,
    pub edges: Vec<(usize, usize)>,
    pub curves: Vec<String>,
    pub width: u32,
    pub height: u32,
    /// Why no edge is drawn, when the provider's graph could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Drawing {
    /// `projects` (path and status as shown, in the run's order) placed on `graph`, the graph of the
    /// run's provider as the workspace defines it now (else why it has none).
    pub fn of(projects: &[(String, String)], graph: Result<&ExecutionGraph, &str>) -> Drawing {
        let graph = match graph {
            Ok(graph) => graph,
            Err(why) => {
                let nodes = (projects.iter().enumerate())
                    .map(|(row, (path, status))| node(path, status, 0, row as u32))
                    .collect();
                let note = format!("The edges are not drawn: {why}");
                return Drawing::laid(nodes, Vec::new(), Some(note));
            }
        };
        let at: BTreeMap<usize, usize> = (projects.iter().enumerate())
            .filter_map(|(k, (path, _))| graph.lookup(path).map(|i| (i, k)))
            .collect();
        let edges = edges(graph, &at);
        // In the graph's order (a destroy lists its projects the other way round), each one
        // column past the furthest of the projects it comes after.
        let mut order: Vec<usize> = (0..projects.len()).collect();
        let position =
            |k: &usize| (graph.lookup(&projects[*k].0)).map_or(usize::MAX, |i| graph.position(i));
        order.sort_by_key(position);
        let mut column = vec![0u32; projects.len()];
        for &k in &order {
            for &(from, to) in &edges {
                if to == k {
                    column[k] = column[k].max(column[from] + 1);
                }
            }
        }
        let mut rows: BTreeMap<u32, u32> = BTreeMap::new();
        let mut nodes: Vec<Option<Node>> = vec![None; projects.len()];
        for &k in &order {
            let row = rows.entry(column[k]).or_default();
            nodes[k] = Some(node(&projects[k].0, &projects[k].1, column[k], *row));
            *row += 1;
        }
        Drawing::laid(nodes.into_iter().flatten().collect(), edges, None)
    }

    fn laid(nodes: Vec<Node>, edges: Vec<(usize, usize)>, note: Option<String>) -> Drawing {
        let columns = nodes.iter().map(|n| n.column + 1).max().unwrap_or(1);
        let rows = nodes.iter().map(|n| n.row + 1).max().unwrap_or(1);
        let curves = (edges.iter())
            .map(|&(from, to)| {
                let (a, b) = (&nodes[from], &nodes[to]);
                let (x1, y1) = (a.x + NODE_WIDTH, a.y + NODE_HEIGHT / 2);
                let (x2, y2) = (b.x, b.y + NODE_HEIGHT / 2);
                format!(
                    "M {x1} {y1} C {} {y1}, {} {y2}, {x2} {y2}",
                    x1 + 20,
                    x2.saturating_sub(20)
                )
            })
            .collect();
        Drawing {
            nodes,
            edges,
            curves,
            width: columns * COLUMN - (COLUMN - NODE_WIDTH) + 2 * MARGIN,
            height: rows * ROW - (ROW - NODE_HEIGHT) + 2 * MARGIN,
            note,
        }
    }

    /// The drawing as SVG: each project a box (its path in full on hover) whose class names its
    /// status, for the stylesheet and for the page's script to change as the run goes.
    pub fn svg(&self) -> Markup {
        let (width, height) = (self.width, self.height);
        html! {
            svg class="graph" xmlns="http://www.w3.org/2000/svg" role="img"
                width=(width) height=(height) viewBox={"0 0 " (width) " " (height)} {
                title { "The run's projects and the order between them" }
                defs {
                    marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7"
                        markerHeight="7" orient="auto-start-reverse" {
                        path d="M 0 0 L 10 5 L 0 10 z" class="arrowhead" {}
                    }
                }
                @for curve in &self.curves {
                    path class="edge" marker-end="url(#arrow)" d=(curve) {}
                }
                @for node in &self.nodes {
                    g class={"node " (node.status)} data-project=(node.path) {
                        title { (node.path) " — " (node.status) }
                        rect x=(node.x) y=(node.y) width=(NODE_WIDTH) height=(NODE_HEIGHT) rx="5" {}
                        text x=(node.x + 10) y=(node.y + 19) { (node.label) }
                    }
                }
            }
        }
    }
}

fn node(path: &str, status: &str, column: u32, row: u32) -> Node {
    Node {
        path: path.to_string(),
        status: status.to_string(),
        column,
        row,
        x: MARGIN + column * COLUMN,
        y: MARGIN + row * ROW,
        label: label(path),
    }
}

/// What a box says: the path's end when the whole does not fit.
fn label(path: &str) -> String {
    const FITS: usize = 22;
    if path.chars().count() <= FITS {
        return path.to_string();
    }
    let end: String = (path.rsplit('/').next().unwrap_or(path).chars()).collect();
    match end.chars().count() {
        n if n + 2 <= FITS => format!("…/{end}"),
        _ => format!("{}…", end.chars().take(FITS - 1).collect::<String>()),
    }
}

/// The edges between the run's projects (`at`: graph index → index in the run), each project
/// to the nearest of the run's that come after it, through any left out of the run.
fn edges(graph: &ExecutionGraph, at: &BTreeMap<usize, usize>) -> Vec<(usize, usize)> {
    let mut edges = BTreeSet::new();
    for (&i, &from) in at {
        let mut seen = BTreeSet::new();
        let mut next: Vec<usize> = graph.successors(i).into_iter().map(|(j, _)| j).collect();
        while let Some(j) = next.pop() {
            if !seen.insert(j) {
                continue;
            }
            match at.get(&j) {
                Some(&to) => {
                    edges.insert((from, to));
                }
                None => next.extend(graph.successors(j).into_iter().map(|(n, _)| n)),
            }
        }
    }
    edges.into_iter().collect()
}

/// How many times the drawn edges cross: `paths` are the edges as drawn (SVG path data of
/// absolute `M`, `L` and `C` commands, as `Drawing::curves` holds and the page shows), each
/// flattened into short segments; every point where two edges cross counts once (points closer
/// than a pixel are one), but not where they meet at a box they both start or end at. The
/// measure of docs/commands.md ("serve"), applied by the browser test to the page's own edges.
pub fn crossings(paths: &[&str]) -> usize {
    let lines: Vec<Vec<(f64, f64)>> = paths.iter().map(|d| flattened(d)).collect();
    let mut count = 0;
    for (a, first) in lines.iter().enumerate() {
        for second in &lines[a + 1..] {
            let ends: Vec<(f64, f64)> = [first, second]
                .iter()
                .flat_map(|l| [l.first(), l.last()])
                .flatten()
                .copied()
                .collect();
            let near = |p: (f64, f64), q: &(f64, f64), by: f64| (q.0 - p.0).hypot(q.1 - p.1) < by;
            let mut found: Vec<(f64, f64)> = Vec::new();
            for s in first.windows(2) {
                for t in second.windows(2) {
                    if let Some(p) = intersection((s[0], s[1]), (t[0], t[1]))
                        && !ends.iter().any(|e| near(p, e, 1.5))
                        && !found.iter().any(|f| near(p, f, 1.0))
                    {
                        found.push(p);
                    }
                }
            }
            count += found.len();
        }
    }
    count
}

/// An SVG path of absolute `M`, `L` and `C` commands as points along it (each cubic curve in
/// 24 straight steps).
fn flattened(d: &str) -> Vec<(f64, f64)> {
    const STEPS: u32 = 24;
    let mut points = Vec::new();
    let mut numbers = Vec::new();
    let mut command = ' ';
    let mut words = d
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| !w.is_empty());
    let flush = |command: char, numbers: &mut Vec<f64>, points: &mut Vec<(f64, f64)>| {
        let pairs: Vec<(f64, f64)> = numbers.chunks_exact(2).map(|p| (p[0], p[1])).collect();
        numbers.clear();
        match command {
            'M' | 'L' => points.extend(pairs),
            'C' => {
                for c in pairs.chunks_exact(3) {
                    let p0 = points.last().copied().unwrap_or(c[0]);
                    points
                        .extend((1..=STEPS).map(|i| {
                            bezier(p0, c[0], c[1], c[2], f64::from(i) / f64::from(STEPS))
                        }));
                }
            }
            _ => {}
        }
    };
    for word in words.by_ref() {
        match word.parse::<f64>() {
            Ok(n) => numbers.push(n),
            Err(_) => {
                flush(command, &mut numbers, &mut points);
                command = word.chars().next().unwrap_or(' ');
            }
        }
    }
    flush(command, &mut numbers, &mut points);
    points
}

/// The point at `t` of the cubic Bézier curve from `a` to `d` with controls `b` and `c`.
fn bezier(a: (f64, f64), b: (f64, f64), c: (f64, f64), d: (f64, f64), t: f64) -> (f64, f64) {
    let u = 1.0 - t;
    let (wa, wb, wc, wd) = (u * u * u, 3.0 * u * u * t, 3.0 * u * t * t, t * t * t);
    (
        wa * a.0 + wb * b.0 + wc * c.0 + wd * d.0,
        wa * a.1 + wb * b.1 + wc * c.1 + wd * d.1,
    )
}

/// Where segment `s` crosses segment `t` (each taken with its start and without its end, so
/// that a crossing at the joint of two steps counts once), if they do and are not parallel.
fn intersection(s: ((f64, f64), (f64, f64)), t: ((f64, f64), (f64, f64))) -> Option<(f64, f64)> {
    let (p, r) = (s.0, (s.1.0 - s.0.0, s.1.1 - s.0.1));
    let (q, e) = (t.0, (t.1.0 - t.0.0, t.1.1 - t.0.1));
    let cross = r.0 * e.1 - r.1 * e.0;
    if cross.abs() < 1e-9 {
        return None;
    }
    let (w0, w1) = (q.0 - p.0, q.1 - p.1);
    let a = (w0 * e.1 - w1 * e.0) / cross;
    let b = (w0 * r.1 - w1 * r.0) / cross;
    ((0.0..1.0).contains(&a) && (0.0..1.0).contains(&b)).then_some((p.0 + a * r.0, p.1 + a * r.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crossings_count_where_drawn_edges_cross_not_where_they_meet() {
        // An X of two straight edges, a line across both of its arms, and a wave that crosses
        // a line twice.
        assert_eq!(crossings(&["M 0 0 L 10 10", "M 0 10 L 10 0"]), 1);
        let across = "M -5 2 L 15 2";
        assert_eq!(crossings(&["M 0 0 L 10 10", "M 0 10 L 10 0", across]), 3);
        assert_eq!(
            crossings(&["M 0 5 C 3 -10, 7 20, 10 5", "M -5 6 L 15 6"]),
            2
        );
        // Two edges from one box to two others, and two into one: they meet, they do not cross.
        let fan = ["M 0 5 C 20 5, 30 0, 50 0", "M 0 5 C 20 5, 30 40, 50 40"];
        assert_eq!(crossings(&fan), 0);
        let into = ["M 0 0 C 20 0, 30 20, 50 20", "M 0 40 C 20 40, 30 20, 50 20"];
        assert_eq!(crossings(&into), 0);
        // Parallel edges, and two curves whose ends swap sides.
        assert_eq!(crossings(&["M 0 0 L 10 0", "M 0 5 L 10 5"]), 0);
        let swap = ["M 0 0 C 20 0, 30 40, 50 40", "M 0 40 C 20 40, 30 0, 50 0"];
        assert_eq!(crossings(&swap), 1);
    }
}
