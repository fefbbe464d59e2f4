//! The layers and orders of a run's graph as its page draws it (docs/commands.md, "serve";
//! docs/decisions.md, "A graph people can read"): Sugiyama's method, small enough to read.
//!
//! Each project goes one layer past the furthest of those before it (the longest path), then
//! down toward what it leads to while more of its edges leave it than reach it (fewer long
//! edges); an edge longer than one layer passes through a bend in each layer between; each
//! layer's order is swept by barycentre, down and up, every sweep followed by swaps of
//! neighbours that cross less, and the orders with the fewest crossings are kept. Also the
//! critical path: the chain whose projects took longest, else the longest chain.

use std::collections::BTreeSet;

/// Sweeps of the orders (down and up alternately) before the best found is kept: as many as
/// `SWEEPS`, fewer for a graph of many items (projects and bends), so that a sweep's items add
/// up to `SWEPT` at most (a run's page lays its graph out again at every look), but at least
/// `FEWEST_SWEEPS`.
const SWEEPS: usize = 24;
const SWEPT: usize = 200_000;
const FEWEST_SWEEPS: usize = 4;
/// Rounds of swaps after a sweep, at most.
const SWAPS: usize = 4;

/// A graph laid in layers. Its items are the projects `0..nodes`, then the bends of long edges.
#[derive(Debug, Clone)]
pub struct Layers {
    pub nodes: usize,
    /// Each item's layer.
    pub layer: Vec<usize>,
    /// Each layer's items, in their order across it.
    pub order: Vec<Vec<usize>>,
    /// Each edge as drawn: the items it passes, from its project to its project.
    pub chains: Vec<Vec<usize>>,
}

impl Layers {
    /// `nodes` projects with `edges` (`from` before `to`) in layers, ordered to cross little.
    pub fn of(nodes: usize, edges: &[(usize, usize)]) -> Layers {
        Layers::new(nodes, edges, layered(nodes, edges)).ordered()
    }

    /// The projects in the layers `layer` gives them, each project's edges through a bend in
    /// every layer it passes, the items of each layer in their order of making.
    pub fn new(nodes: usize, edges: &[(usize, usize)], mut layer: Vec<usize>) -> Layers {
        let mut chains = Vec::with_capacity(edges.len());
        for &(from, to) in edges {
            let mut chain = vec![from];
            for between in layer[from] + 1..layer[to] {
                layer.push(between);
                chain.push(layer.len() - 1);
            }
            chain.push(to);
            chains.push(chain);
        }
        let depth = layer.iter().max().map_or(0, |deepest| deepest + 1);
        let mut order = vec![Vec::new(); depth];
        for (item, &l) in layer.iter().enumerate() {
            order[l].push(item);
        }
        Layers {
            nodes,
            layer,
            order,
            chains,
        }
    }

    /// Each item's neighbours in the layer above it and in the layer below it.
    pub fn neighbours(&self) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
        let mut up = vec![Vec::new(); self.layer.len()];
        let mut down = vec![Vec::new(); self.layer.len()];
        for chain in &self.chains {
            for step in chain.windows(2) {
                if self.layer[step[1]] == self.layer[step[0]] + 1 {
                    down[step[0]].push(step[1]);
                    up[step[1]].push(step[0]);
                }
            }
        }
        (up, down)
    }

    /// How many times the edges cross between neighbouring layers, as ordered.
    #[cfg(test)]
    pub fn crossings(&self) -> usize {
        let (_, down) = self.neighbours();
        crossings(&self.order, &down)
    }

    /// The orders swept and swapped, the best kept.
    fn ordered(mut self) -> Layers {
        let (up, down) = self.neighbours();
        let mut best = self.order.clone();
        let mut fewest = crossings(&best, &down);
        let depth = self.order.len();
        let sweeps = (SWEPT / self.layer.len().max(1)).clamp(FEWEST_SWEEPS, SWEEPS);
        for sweep in 0..sweeps {
            if fewest == 0 {
                break;
            }
            match sweep % 2 {
                0 => barycentres(&mut self.order, &up, 1..depth),
                _ => barycentres(&mut self.order, &down, (0..depth).rev().skip(1)),
            }
            transpose(&mut self.order, &up, &down);
            let now = crossings(&self.order, &down);
            if now < fewest {
                (fewest, best) = (now, self.order.clone());
            }
        }
        self.order = best;
        self
    }
}

/// Each project's layer: one past the furthest of those before it, then as far down toward
/// those after it as they allow while it has more edges out than in.
pub fn layered(nodes: usize, edges: &[(usize, usize)]) -> Vec<usize> {
    let (before, after) = adjacency(nodes, edges);
    let order = topological(nodes, edges);
    let mut layer = vec![0; nodes];
    for &k in &order {
        for &next in &after[k] {
            layer[next] = layer[next].max(layer[k] + 1);
        }
    }
    for &k in order.iter().rev() {
        if after[k].len() > before[k].len() {
            let room = after[k].iter().map(|&next| layer[next]).min();
            layer[k] = layer[k].max(room.map_or(0, |r| r - 1));
        }
    }
    layer
}

/// The projects before and after each project.
fn adjacency(nodes: usize, edges: &[(usize, usize)]) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
    let mut before = vec![Vec::new(); nodes];
    let mut after = vec![Vec::new(); nodes];
    for &(from, to) in edges {
        after[from].push(to);
        before[to].push(from);
    }
    (before, after)
}

/// The projects in an order where each comes after those before it, the lowest index first
/// among those ready. (A circle cannot come from the provider's graph; its projects would
/// come last, in index order.)
fn topological(nodes: usize, edges: &[(usize, usize)]) -> Vec<usize> {
    let (before, after) = adjacency(nodes, edges);
    let mut waiting: Vec<usize> = before.iter().map(Vec::len).collect();
    let mut ready: BTreeSet<usize> = (0..nodes).filter(|&k| waiting[k] == 0).collect();
    let mut order = Vec::with_capacity(nodes);
    while let Some(k) = ready.pop_first() {
        order.push(k);
        for &next in &after[k] {
            waiting[next] -= 1;
            if waiting[next] == 0 {
                ready.insert(next);
            }
        }
    }
    let placed: BTreeSet<usize> = order.iter().copied().collect();
    order.extend((0..nodes).filter(|k| !placed.contains(k)));
    order
}

/// Each layer of `layers` (in that sequence) ordered by the mean place of its items'
/// neighbours in the layer just done; an item with none keeps its place.
fn barycentres(
    order: &mut [Vec<usize>],
    neighbours: &[Vec<usize>],
    layers: impl Iterator<Item = usize>,
) {
    let mut place = places(order, neighbours.len());
    for l in layers {
        let key = |item: usize, at: usize| match neighbours[item].len() {
            0 => at as f64,
            n => {
                neighbours[item]
                    .iter()
                    .map(|&o| place[o] as f64)
                    .sum::<f64>()
                    / n as f64
            }
        };
        let mut keyed: Vec<(f64, usize)> = (order[l].iter().enumerate())
            .map(|(at, &item)| (key(item, at), item))
            .collect();
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
        order[l] = keyed.into_iter().map(|(_, item)| item).collect();
        for (at, &item) in order[l].iter().enumerate() {
            place[item] = at;
        }
    }
}

/// Neighbours in a layer swapped wherever that makes their edges cross less, until no swap
/// does (or for `SWAPS` rounds).
fn transpose(order: &mut [Vec<usize>], up: &[Vec<usize>], down: &[Vec<usize>]) {
    let mut place = places(order, up.len());
    for _ in 0..SWAPS {
        let mut better = false;
        for layer in order.iter_mut() {
            for i in 1..layer.len() {
                let (u, v) = (layer[i - 1], layer[i]);
                let now = between(u, v, up, &place) + between(u, v, down, &place);
                let swapped = between(v, u, up, &place) + between(v, u, down, &place);
                if swapped < now {
                    layer.swap(i - 1, i);
                    (place[u], place[v]) = (place[v], place[u]);
                    better = true;
                }
            }
        }
        if !better {
            break;
        }
    }
}

/// How many of `left`'s edges to `neighbours` cross `right`'s, `left` placed first.
fn between(left: usize, right: usize, neighbours: &[Vec<usize>], place: &[usize]) -> usize {
    let mut count = 0;
    for &a in &neighbours[left] {
        count += (neighbours[right].iter())
            .filter(|&&b| place[b] < place[a])
            .count();
    }
    count
}

/// Each item's place in its layer.
fn places(order: &[Vec<usize>], items: usize) -> Vec<usize> {
    let mut place = vec![0; items];
    for layer in order {
        for (at, &item) in layer.iter().enumerate() {
            place[item] = at;
        }
    }
    place
}

/// How many pairs of edges cross between each layer and the next: the edges sorted by their
/// upper end then their lower, every pair whose lower ends come the other way round (counted
/// with a Fenwick tree, so that a layer of thousands costs little).
pub fn crossings(order: &[Vec<usize>], down: &[Vec<usize>]) -> usize {
    let place = places(order, down.len());
    let mut count = 0;
    for pair in order.windows(2) {
        let mut ends: Vec<(usize, usize)> = (pair[0].iter())
            .flat_map(|&a| down[a].iter().map(move |&b| (a, b)))
            .map(|(a, b)| (place[a], place[b]))
            .collect();
        ends.sort_unstable();
        let mut tree = vec![0usize; pair[1].len() + 1];
        for (seen, &(_, lower)) in ends.iter().enumerate() {
            let mut at_most = 0;
            let mut i = lower + 1;
            while i > 0 {
                at_most += tree[i];
                i &= i - 1;
            }
            count += seen - at_most;
            let mut i = lower + 1;
            while i < tree.len() {
                tree[i] += 1;
                i += i & i.wrapping_neg();
            }
        }
    }
    count
}

/// The critical path: the chain of projects (each an edge after the one before) whose
/// `weights` (their durations where known, else 0) add up to most, of more projects when two
/// are level (so with no duration known, the longest chain); none when no chain has two.
pub fn critical(nodes: usize, edges: &[(usize, usize)], weights: &[u64]) -> Vec<usize> {
    let (before, _) = adjacency(nodes, edges);
    let mut best: Vec<((u64, usize), Option<usize>)> = vec![((0, 0), None); nodes];
    for k in topological(nodes, edges) {
        let from = (before[k].iter()).max_by_key(|&&p| (best[p].0, std::cmp::Reverse(p)));
        let (sum, count) = from.map_or((0, 0), |&p| best[p].0);
        best[k] = ((sum + weights[k], count + 1), from.copied());
    }
    let end = (0..nodes).max_by_key(|&k| (best[k].0, std::cmp::Reverse(k)));
    let mut path: Vec<usize> = std::iter::successors(end, |&k| best[k].1).collect();
    path.reverse();
    if path.len() < 2 {
        path.clear();
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crossings_are_counted_between_neighbouring_layers() {
        // K(3,3) on two layers crosses 3·3 times whatever the order; a ladder none; a ladder
        // with its lower rungs the other way round crosses C(3, 2) times.
        let k33: Vec<(usize, usize)> = (0..3).flat_map(|a| (3..6).map(move |b| (a, b))).collect();
        let layers = Layers::new(6, &k33, vec![0, 0, 0, 1, 1, 1]);
        assert_eq!(layers.crossings(), 9);
        assert_eq!(Layers::of(6, &k33).crossings(), 9);
        let ladder = [(0, 3), (1, 4), (2, 5)];
        assert_eq!(
            Layers::new(6, &ladder, vec![0, 0, 0, 1, 1, 1]).crossings(),
            0
        );
        let mut twisted = Layers::new(6, &ladder, vec![0, 0, 0, 1, 1, 1]);
        twisted.order[1] = vec![5, 4, 3];
        assert_eq!(twisted.crossings(), 3);
    }

    #[test]
    fn a_graph_that_can_be_drawn_without_crossings_is() {
        // Two chains whose second layers start the wrong way round, and a long edge that
        // passes a layer through a bend.
        let edges = [(0, 3), (1, 2), (2, 4), (3, 5), (0, 5)];
        let layers = Layers::new(6, &edges, layered(6, &edges));
        assert!(layers.crossings() > 0, "{layers:?}");
        let layers = Layers::of(6, &edges);
        assert_eq!(layers.crossings(), 0, "{layers:?}");
        assert_eq!(layers.chains[4].len(), 3, "one bend: {layers:?}");
        assert_eq!(layers.layer.len(), 7);
        // K(3,3) with a fourth project under each side, each pair crossing at least once.
        let mut edges: Vec<(usize, usize)> =
            (0..3).flat_map(|a| (3..6).map(move |b| (a, b))).collect();
        edges.extend([(3, 6), (5, 7)]);
        assert_eq!(Layers::of(8, &edges).crossings(), 9);
    }

    #[test]
    fn projects_sit_one_layer_past_those_before_them_and_close_to_those_after() {
        // 0 → 1 → 2 → 3, and 4 → 3 alone: 4 goes down next to 3, not at the top.
        let edges = [(0, 1), (1, 2), (2, 3), (4, 3)];
        assert_eq!(layered(5, &edges), vec![0, 1, 2, 3, 2]);
        // 5 has two after it and none before: it goes just above the nearer of them.
        let edges = [(0, 1), (1, 2), (5, 1), (5, 2)];
        assert_eq!(layered(6, &edges), vec![0, 1, 2, 0, 0, 0]);
        let edges = [(0, 1), (1, 2), (2, 3), (5, 2), (5, 3)];
        assert_eq!(layered(6, &edges)[5], 1);
    }

    #[test]
    fn the_critical_path_is_the_chain_that_took_longest_else_the_longest() {
        // 0 → 1 → 3 and 0 → 2 → 3: by count, the first found; by duration, the slower middle.
        let edges = [(0, 1), (0, 2), (1, 3), (2, 3)];
        assert_eq!(critical(4, &edges, &[0; 4]), vec![0, 1, 3]);
        assert_eq!(critical(4, &edges, &[5, 1, 9, 5]), vec![0, 2, 3]);
        // A long chain of quick projects against a short one of a slow project.
        let edges = [(0, 1), (1, 2), (2, 3), (4, 5)];
        assert_eq!(critical(6, &edges, &[1, 1, 1, 1, 60, 1]), vec![4, 5]);
        assert_eq!(critical(6, &edges, &[0; 6]), vec![0, 1, 2, 3]);
        // No edge: no chain.
        assert_eq!(critical(3, &[], &[4, 5, 6]), Vec::<usize>::new());
    }

    /// The example workspace's graph (examples/mara-local, as `mara show-execution` lists its
    /// projects): main's layout drew it with 15 crossings; these layers cross 5 times.
    #[test]
    fn the_example_workspaces_graph_crosses_five_times() {
        let edges = [
            (0, 2),
            (0, 4),
            (1, 2),
            (1, 4),
            (1, 5),
            (2, 3),
            (2, 6),
            (2, 8),
            (2, 10),
            (2, 12),
            (3, 11),
            (3, 13),
            (4, 5),
            (5, 7),
            (6, 7),
            (6, 11),
            (7, 13),
            (8, 9),
            (10, 12),
            (10, 13),
            (11, 13),
        ];
        let layers = Layers::of(14, &edges);
        assert_eq!(layers.crossings(), 5, "{layers:?}");
    }
}
