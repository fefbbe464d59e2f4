//! A run's graph as the run's page draws it (docs/commands.md, "serve"; docs/decisions.md, "A
//! graph people can read"): its projects in layers from the top (`layout`: each below those it
//! comes after, ordered to cross little), each box coloured by its status and saying its
//! project's whole path over as many lines as it takes, the edges of the graph the run recorded
//! as it started between them (else, for a run an earlier mara recorded, its provider's graph
//! as it is now) — through the projects the run left out, so that a run of a selection still
//! shows what waited on what — and the critical path drawn heavier.

use std::collections::{BTreeMap, BTreeSet};

use maud::{Markup, html};
use serde::Serialize;

use crate::graph::ExecutionGraph;
use crate::status::ProjectStatus;

use super::layout::{self, Layers};

/// How wide a character of a box's text is (12px of a monospace font), with a little to spare.
const CHAR: f64 = 7.3;
/// The characters a line of a box holds (and room for this many at least), and how far apart
/// its lines are.
const WRAP: usize = 24;
const NARROWEST: usize = 10;
const LINE: u32 = 15;
/// From the top of a line to its baseline.
const ASCENT: u32 = 11;
/// A box's room around its text.
const PAD_X: u32 = 10;
const PAD_Y: u32 = 8;
/// Room between neighbours in a layer, and between layers.
const GAP: f64 = 20.0;
const LAYER_GAP: u32 = 52;
/// The room a long edge takes in a layer it passes.
const BEND: f64 = 10.0;
const MARGIN: u32 = 10;
/// How many projects a row holds when there are no edges to lay them by.
const ROW_OF_UNRELATED: usize = 4;

/// A project of the run as the graph shows it: its path, its status as the page shows it
/// (`views::ProjectRow::shown`), and how long it took, or has been running, when known.
pub type Shown = (String, String, Option<u64>);

/// A project as drawn: its box's place and size, and what it says.
#[derive(Debug, Clone, Serialize)]
pub struct Node {
    pub path: String,
    /// Its status as the page shows it (`views::ProjectRow::shown`).
    pub status: String,
    pub layer: usize,
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
    /// Its path over the box's lines: together, the whole path.
    pub lines: Vec<String>,
}

/// The graph of a run: its projects, the edges between them as indices into `nodes`, how each
/// edge is drawn (an SVG path, for the page's script to draw the graph again when a running
/// run starts a project), and the critical path.
#[derive(Debug, Clone, Serialize)]
pub struct Drawing {
    pub nodes: Vec<Node>,
    pub edges: Vec<(usize, usize)>,
    pub curves: Vec<String>,
    /// The chain of projects (indices into `nodes`) that took longest, by the durations known,
    /// else the longest; empty when no chain has two.
    pub critical: Vec<usize>,
    pub width: u32,
    pub height: u32,
    /// Why no edge is drawn, when the provider's graph could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What a run's edges are drawn from (docs/commands.md, "serve").
#[derive(Debug, Clone, Copy)]
pub enum Edges<'a> {
    /// The graph it recorded as it started: (needed, needing) pairs of its projects' paths.
    Recorded(&'a [(String, String)]),
    /// Its provider's graph as the workspace defines it now: a run an earlier mara recorded.
    Now(&'a ExecutionGraph),
    /// Why there are none: the run recorded none, and its provider's graph cannot be read.
    Unknown(&'a str),
}

/// Said under the drawing of a run that recorded no graph.
const DRAWN_AS_NOW: &str = "This run recorded no graph (an earlier mara ran it): its edges are \
     its provider's as the workspace defines them now.";

impl Drawing {
    /// `projects` (in the run's order) with the edges between them that `edges` gives.
    pub fn of(projects: &[Shown], edges: Edges<'_>) -> Drawing {
        let at: BTreeMap<&str, usize> = (projects.iter().enumerate())
            .map(|(k, (path, _, _))| (path.as_str(), k))
            .collect();
        match edges {
            Edges::Recorded(pairs) => {
                let edges = (pairs.iter())
                    .filter_map(|(a, b)| Some((*at.get(a.as_str())?, *at.get(b.as_str())?)))
                    .collect();
                Drawing::laid(projects, edges, None)
            }
            Edges::Now(graph) => {
                let mut among = vec![false; graph.len()];
                let mut index = BTreeMap::new();
                for (k, (path, _, _)) in projects.iter().enumerate() {
                    if let Some(i) = graph.lookup(path) {
                        among[i] = true;
                        index.insert(i, k);
                    }
                }
                let edges = (graph.edges_among(&among).into_iter())
                    .map(|(a, b)| (index[&a], index[&b]))
                    .collect();
                Drawing::laid(projects, edges, Some(DRAWN_AS_NOW.to_string()))
            }
            Edges::Unknown(why) => {
                let note = format!("The edges are not drawn: {why}");
                Drawing::laid(projects, Vec::new(), Some(note))
            }
        }
    }

    /// `projects` with `edges` between them (indices into `projects`, each edge's first
    /// before its second) in layers, placed; with no edge, in rows of a few, in their order.
    fn laid(projects: &[Shown], edges: Vec<(usize, usize)>, note: Option<String>) -> Drawing {
        let n = projects.len();
        let layers = match edges.is_empty() {
            true => Layers::new(n, &[], (0..n).map(|k| k / ROW_OF_UNRELATED).collect()),
            false => Layers::of(n, &edges),
        };
        let weights: Vec<u64> = projects.iter().map(|p| p.2.unwrap_or(0)).collect();
        let critical = layout::critical(n, &edges, &weights);
        Drawing::placed(projects, edges, &layers, critical, note)
    }

    /// The boxes and edges of `layers` given their places: each layer a row, as high as its
    /// highest box; each box as wide as the widest line of any.
    fn placed(
        projects: &[Shown],
        edges: Vec<(usize, usize)>,
        layers: &Layers,
        critical: Vec<usize>,
        note: Option<String>,
    ) -> Drawing {
        let lines: Vec<Vec<String>> = projects.iter().map(|p| wrapped(&p.0)).collect();
        let widest = (lines.iter().flatten()).map(|l| l.chars().count()).max();
        let widest = widest.unwrap_or(0).max(NARROWEST);
        let box_width = (widest as f64 * CHAR).ceil() as u32 + 2 * PAD_X;
        let heights: Vec<u32> = (lines.iter())
            .map(|l| l.len() as u32 * LINE + 2 * PAD_Y)
            .collect();
        let widths: Vec<f64> = (0..layers.layer.len())
            .map(|item| match item < layers.nodes {
                true => f64::from(box_width),
                false => BEND,
            })
            .collect();
        let centre = across(layers, &widths);
        let rows = Rows::of(layers, &heights);
        let nodes: Vec<Node> = (projects.iter().zip(lines).enumerate())
            .map(|(k, ((path, status, _), lines))| Node {
                path: path.clone(),
                status: status.clone(),
                layer: layers.layer[k],
                x: (centre[k] - f64::from(box_width) / 2.0).round() as u32,
                y: rows.top[layers.layer[k]] + (rows.height[layers.layer[k]] - heights[k]) / 2,
                width: box_width,
                height: heights[k],
                lines,
            })
            .collect();
        let curves = curves(layers, &nodes, &centre, &rows);
        let right = (0..widths.len()).map(|i| centre[i] + widths[i] / 2.0);
        Drawing {
            nodes,
            edges,
            curves,
            critical,
            width: right.fold(0.0, f64::max).ceil() as u32 + MARGIN,
            height: rows.bottom() + MARGIN,
            note,
        }
    }

    /// The critical path's edges, as indices into `edges`.
    fn critical_edges(&self) -> BTreeSet<usize> {
        let steps: BTreeSet<(usize, usize)> =
            self.critical.windows(2).map(|s| (s[0], s[1])).collect();
        (self.edges.iter().enumerate())
            .filter(|(_, e)| steps.contains(e))
            .map(|(i, _)| i)
            .collect()
    }

    /// The drawing as SVG: each project a box whose class names its status, for the
    /// stylesheet and for the page's script to change as the run goes; the critical path's
    /// boxes and edges marked `critical`, drawn over the others.
    pub fn svg(&self) -> Markup {
        let (width, height) = (self.width, self.height);
        let critical = self.critical_edges();
        let on_path: BTreeSet<usize> = self.critical.iter().copied().collect();
        let curves = (self.curves.iter().enumerate())
            .filter(|(i, _)| !critical.contains(i))
            .chain(critical.iter().map(|&i| (i, &self.curves[i])));
        html! {
            svg class="graph" xmlns="http://www.w3.org/2000/svg" role="img"
                width=(width) height=(height) viewBox={"0 0 " (width) " " (height)} {
                title { "The run's projects and the order between them" }
                defs {
                    // One size whatever the edge's width.
                    @for (id, class) in [("arrow", "arrowhead"), ("arrow-critical", "arrowhead critical")] {
                        marker id=(id) viewBox="0 0 10 10" refX="10" refY="5" markerUnits="userSpaceOnUse"
                            markerWidth="10" markerHeight="10" orient="auto-start-reverse" {
                            path d="M 0 0 L 10 5 L 0 10 z" class=(class) {}
                        }
                    }
                }
                @for (i, curve) in curves {
                    @if critical.contains(&i) {
                        path class="edge critical" marker-end="url(#arrow-critical)" d=(curve) {}
                    } @else {
                        path class="edge" marker-end="url(#arrow)" d=(curve) {}
                    }
                }
                @for (k, node) in self.nodes.iter().enumerate() {
                    (node.svg(on_path.contains(&k)))
                }
            }
        }
    }
}

impl Node {
    /// The box: its path in full over its lines, and again with its status on hover.
    fn svg(&self, critical: bool) -> Markup {
        let x = self.x + PAD_X;
        html! {
            g class={"node " (self.status)} data-project=(self.path) {
                title { (self.path) " — " (self.status) }
                rect class=[critical.then_some("critical")] x=(self.x) y=(self.y)
                    width=(self.width) height=(self.height) rx="5" {}
                text x=(x) y=(self.y + PAD_Y + ASCENT) {
                    @for (i, line) in self.lines.iter().enumerate() {
                        tspan x=(x) dy=(if i == 0 { 0 } else { LINE }) { (line) }
                    }
                }
            }
        }
    }
}

/// The legend of the graph's colours: each status a project can be shown in, and the
/// critical path.
pub fn legend() -> Markup {
    let shown = ProjectStatus::ALL
        .iter()
        .map(|s| s.as_str())
        .chain(["drifted"]);
    html! {
        ul.legend aria-label="What the graph's colours say" {
            @for status in shown {
                li { span class={"swatch " (status)} {} (status) }
            }
            li title="The chain of projects that took longest, by their durations where known, else the longest chain" {
                span.swatch.critical {} "critical path"
            }
        }
    }
}

/// Each item's centre across its layer: packed in its layer's order, then moved, a few times
/// over, as near the mean of its neighbours' centres as the order and the room between
/// neighbours allow (a long edge's bends pull hardest, so that it runs straight).
fn across(layers: &Layers, widths: &[f64]) -> Vec<f64> {
    const ROUNDS: usize = 8;
    let (up, down) = layers.neighbours();
    let mut centre = vec![0.0; widths.len()];
    for layer in &layers.order {
        let mut at = 0.0;
        for &item in layer {
            centre[item] = at + widths[item] / 2.0;
            at += widths[item] + GAP;
        }
    }
    for round in 0..ROUNDS {
        let depth = layers.order.len();
        let sweep: Vec<usize> = match round % 2 {
            0 => (0..depth).collect(),
            _ => (0..depth).rev().collect(),
        };
        for l in sweep {
            let items = &layers.order[l];
            let wanted: Vec<f64> = (items.iter())
                .map(|&i| {
                    let near: Vec<f64> = up[i].iter().chain(&down[i]).map(|&o| centre[o]).collect();
                    match near.len() {
                        0 => centre[i],
                        n => near.iter().sum::<f64>() / n as f64,
                    }
                })
                .collect();
            let pull: Vec<f64> = (items.iter())
                .map(|&i| if i >= layers.nodes { 4.0 } else { 1.0 })
                .collect();
            let room: Vec<f64> = (items.windows(2))
                .map(|p| (widths[p[0]] + widths[p[1]]) / 2.0 + GAP)
                .collect();
            for (&i, x) in items.iter().zip(packed(&wanted, &pull, &room)) {
                centre[i] = x;
            }
        }
    }
    let left = (0..widths.len())
        .map(|i| centre[i] - widths[i] / 2.0)
        .fold(f64::INFINITY, f64::min);
    for x in &mut centre {
        *x += f64::from(MARGIN) - left;
    }
    centre
}

/// Places in a row as near `wanted` as they can be (least squares, weighed by `pull`), in
/// their order and at least `room` apart: the pool-adjacent-violators algorithm, on the places
/// less the room before each.
fn packed(wanted: &[f64], pull: &[f64], room: &[f64]) -> Vec<f64> {
    let mut offset = vec![0.0; wanted.len()];
    for i in 1..wanted.len() {
        offset[i] = offset[i - 1] + room[i - 1];
    }
    // Blocks of neighbours placed together: their weighed sum, their weight, how many.
    let mut blocks: Vec<(f64, f64, usize)> = Vec::new();
    for i in 0..wanted.len() {
        blocks.push((pull[i] * (wanted[i] - offset[i]), pull[i], 1));
        while let [.., a, b] = blocks[..] {
            if a.0 / a.1 <= b.0 / b.1 {
                break;
            }
            blocks.pop();
            *blocks.last_mut().expect("two blocks") = (a.0 + b.0, a.1 + b.1, a.2 + b.2);
        }
    }
    let mut places = Vec::with_capacity(wanted.len());
    for (sum, weight, count) in blocks {
        places.extend(std::iter::repeat_n(sum / weight, count));
    }
    (places.iter().zip(&offset)).map(|(p, o)| p + o).collect()
}

/// Where each layer's row starts and how high it is (its highest box).
struct Rows {
    top: Vec<u32>,
    height: Vec<u32>,
}

impl Rows {
    fn of(layers: &Layers, heights: &[u32]) -> Rows {
        let mut height = vec![0; layers.order.len()];
        for (k, &h) in heights.iter().enumerate() {
            let l = layers.layer[k];
            height[l] = height[l].max(h);
        }
        let mut top = Vec::with_capacity(height.len());
        let mut y = MARGIN;
        for h in &height {
            top.push(y);
            y += h + LAYER_GAP;
        }
        Rows { top, height }
    }

    fn bottom(&self) -> u32 {
        match (self.top.last(), self.height.last()) {
            (Some(top), Some(height)) => top + height,
            _ => MARGIN,
        }
    }
}

/// Each edge as an SVG path: from the bottom of its project's box (the edges leaving a box
/// spread along it in the order of where they go) down through its bends, each a straight
/// run through its layer's row, to the top of the box it leads to (those reaching a box spread
/// along it in the order of where they come from). Between two rows every edge is a curve of
/// the same height, so that two edges cross there once if their ends come in opposite orders,
/// and otherwise not: the drawing crosses as often as its layers' orders do.
fn curves(layers: &Layers, nodes: &[Node], centre: &[f64], rows: &Rows) -> Vec<String> {
    let chains = &layers.chains;
    let mut ends = vec![(0.0, 0.0); chains.len()];
    let mut leaving: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut reaching: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (e, chain) in chains.iter().enumerate() {
        leaving.entry(chain[0]).or_default().push(e);
        reaching.entry(chain[chain.len() - 1]).or_default().push(e);
    }
    for (node, mut those) in leaving {
        those.sort_by(|&a, &b| centre[chains[a][1]].total_cmp(&centre[chains[b][1]]));
        for (&e, x) in those.iter().zip(ports(&nodes[node], those.len())) {
            ends[e].0 = x;
        }
    }
    for (node, mut those) in reaching {
        let before = |e: usize| centre[chains[e][chains[e].len() - 2]];
        those.sort_by(|&a, &b| before(a).total_cmp(&before(b)));
        for (&e, x) in those.iter().zip(ports(&nodes[node], those.len())) {
            ends[e].1 = x;
        }
    }
    let row = |item: usize| {
        let l = layers.layer[item];
        (
            f64::from(rows.top[l]),
            f64::from(rows.top[l] + rows.height[l]),
        )
    };
    (chains.iter().zip(ends))
        .map(|(chain, (start, end))| {
            let (from, to) = (&nodes[chain[0]], &nodes[chain[chain.len() - 1]]);
            let mut points = vec![(start, f64::from(from.y + from.height))];
            points.push((start, row(chain[0]).1));
            for &bend in &chain[1..chain.len() - 1] {
                let (top, bottom) = row(bend);
                points.extend([(centre[bend], top), (centre[bend], bottom)]);
            }
            points.push((end, row(chain[chain.len() - 1]).0));
            points.push((end, f64::from(to.y)));
            path(&points)
        })
        .collect()
}

/// `count` places along the middle of `node`'s box, left to right.
fn ports(node: &Node, count: usize) -> impl Iterator<Item = f64> {
    let span = f64::from(node.width) * 0.7;
    let left = f64::from(node.x) + (f64::from(node.width) - span) / 2.0;
    (1..=count).map(move |i| left + span * i as f64 / (count + 1) as f64)
}

/// The SVG path through `points`, which come in pairs, one pair a row: a straight line down
/// through each row (none where it has no length, so that the arrow's last step points
/// down), a curve from each row to the next.
fn path(points: &[(f64, f64)]) -> String {
    let mut d = format!("M {:.0} {:.0}", points[0].0, points[0].1);
    for (i, step) in points.windows(2).enumerate() {
        let ((x1, y1), (x2, y2)) = (step[0], step[1]);
        if i % 2 == 1 {
            let middle = (y1 + y2) / 2.0;
            d.push_str(&format!(
                " C {x1:.0} {middle:.0}, {x2:.0} {middle:.0}, {x2:.0} {y2:.0}"
            ));
        } else if (y2 - y1).abs() >= 0.5 {
            d.push_str(&format!(" L {x2:.0} {y2:.0}"));
        }
    }
    d
}

/// A project's path over the lines of its box: broken after a `/` where it can be, else after
/// a `-`, `_` or `.`, else where the line is full; nothing added or left out.
fn wrapped(path: &str) -> Vec<String> {
    let mut pieces: Vec<String> = Vec::new();
    for part in path.split_inclusive('/') {
        if part.chars().count() <= WRAP {
            pieces.push(part.to_string());
            continue;
        }
        for word in part.split_inclusive(['-', '_', '.']) {
            let chars: Vec<char> = word.chars().collect();
            pieces.extend(chars.chunks(WRAP).map(|c| c.iter().collect::<String>()));
        }
    }
    let mut lines: Vec<String> = Vec::new();
    for piece in pieces {
        match lines.last_mut() {
            Some(line) if line.chars().count() + piece.chars().count() <= WRAP => {
                line.push_str(&piece);
            }
            _ => lines.push(piece),
        }
    }
    if lines.is_empty() {
        lines.push(String::new());
    }
    lines
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
        let wave = "M 0 50 C 30 -100, 70 200, 100 50";
        assert_eq!(crossings(&[wave, "M -50 60 L 150 60"]), 2);
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

    fn shown(paths: &[&str]) -> Vec<Shown> {
        (paths.iter())
            .map(|p| (p.to_string(), "succeeded".to_string(), None))
            .collect()
    }

    #[test]
    fn a_path_is_wrapped_whole_after_its_slashes_else_its_dashes_else_where_full() {
        assert_eq!(wrapped("kubernetes/secrets"), ["kubernetes/secrets"]);
        assert_eq!(
            wrapped("kubernetes/nginx/ingress-controller-namespace"),
            ["kubernetes/nginx/", "ingress-controller-", "namespace"]
        );
        assert_eq!(
            wrapped("kubernetes/applications/sirius"),
            ["kubernetes/applications/", "sirius"]
        );
        let long = "x".repeat(WRAP * 2 + 3);
        let lines = wrapped(&long);
        assert_eq!(lines.len(), 3);
        assert_eq!(lines.concat(), long);
        assert_eq!(wrapped("é/".repeat(20).as_str()).concat(), "é/".repeat(20));
        assert!(
            wrapped(&"ab/".repeat(40))
                .iter()
                .all(|l| l.chars().count() <= WRAP)
        );
    }

    #[test]
    fn each_box_says_its_whole_path_escaped() {
        let hostile = "apps/<script>alert(1)</script>&\"quoted\"-and-a-very-long-name";
        let drawing = Drawing::laid(&shown(&["net", hostile]), vec![(0, 1)], None);
        assert_eq!(drawing.nodes[1].lines.concat(), hostile);
        let svg = drawing.svg().into_string();
        assert!(!svg.contains("<script>"), "{svg}");
        assert!(
            svg.contains("&lt;script&gt;alert(1)&lt;/script&gt;&amp;"),
            "{svg}"
        );
        assert!(svg.contains("<tspan"), "{svg}");
        // A box is wide enough for its longest line, high enough for its lines.
        let node = &drawing.nodes[1];
        let widest = node.lines.iter().map(|l| l.chars().count()).max().unwrap();
        assert!(f64::from(node.width) >= widest as f64 * CHAR, "{node:?}");
        assert_eq!(node.height, node.lines.len() as u32 * LINE + 2 * PAD_Y);
    }

    #[test]
    fn the_critical_path_is_drawn_over_the_rest_and_marked() {
        // a → b → d and a → c → d, c slow: a, c, d.
        let mut projects = shown(&["a", "b", "c", "d"]);
        projects[2].2 = Some(9_000);
        let edges = vec![(0, 1), (0, 2), (1, 3), (2, 3)];
        let drawing = Drawing::laid(&projects, edges, None);
        assert_eq!(drawing.critical, [0, 2, 3]);
        let svg = drawing.svg().into_string();
        assert_eq!(svg.matches(r#"class="edge critical""#).count(), 2, "{svg}");
        assert_eq!(svg.matches(r#"<rect class="critical""#).count(), 3, "{svg}");
        let last_plain = svg.rfind(r#"class="edge""#).unwrap();
        assert!(svg.find(r#"class="edge critical""#).unwrap() > last_plain);
        // With no edge, no path; projects in rows of a few.
        let why = Edges::Unknown("no provider");
        let alone = Drawing::of(&shown(&["a", "b", "c", "d", "e"]), why);
        assert!(alone.critical.is_empty());
        assert_eq!(alone.nodes[4].layer, 1);
        assert!(alone.note.as_deref().unwrap().contains("no provider"));
    }

    /// A few graphs that look like providers' (stages feeding later ones), made the same way
    /// each time: `nodes` projects, each after up to three earlier ones.
    fn graphs() -> Vec<(usize, Vec<(usize, usize)>)> {
        let mut seed: u64 = 44;
        let mut next = move |below: usize| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) as usize % below.max(1)
        };
        (0..12)
            .map(|g| {
                let nodes = 6 + g * 3;
                let mut edges = BTreeSet::new();
                for to in 1..nodes {
                    for _ in 0..next(4) {
                        edges.insert((next(to), to));
                    }
                }
                (nodes, edges.into_iter().collect())
            })
            .collect()
    }

    #[test]
    fn the_drawing_crosses_as_often_as_its_layers_do() {
        for (nodes, edges) in graphs() {
            let names: Vec<String> = (0..nodes).map(|k| format!("stage/project-{k}")).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let layers = Layers::of(nodes, &edges);
            let drawing = Drawing::laid(&shown(&names), edges.clone(), None);
            let curves: Vec<&str> = drawing.curves.iter().map(String::as_str).collect();
            assert_eq!(crossings(&curves), layers.crossings(), "{edges:?}");
            // No box overlaps another.
            for (i, a) in drawing.nodes.iter().enumerate() {
                for b in &drawing.nodes[i + 1..] {
                    let apart = a.x + a.width <= b.x
                        || b.x + b.width <= a.x
                        || a.y + a.height <= b.y
                        || b.y + b.height <= a.y;
                    assert!(apart, "{a:?} {b:?}");
                }
            }
        }
    }
}
