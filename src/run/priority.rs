//! Which ready project a free slot goes to, and when a slot waits for one about to be ready
//! (docs/decisions.md, "The longest chain first, and a slot held for it").
//!
//! Each project's rank is the time from its start to the end of the longest chain of projects
//! that wait for it, itself included — by the durations the ledger recorded of the operation's
//! last run on the stack, else counting each project as one. A free slot goes to the ready
//! project of the highest rank (the earliest in the plan among equals). With recorded durations,
//! a slot is also held: when the projects that will be ready before the best ready one would end
//! — their dependencies all running, due to end by then — rank above it, and starting it would
//! leave one of them without a slot when it is ready, it waits. Without `parallel > 1` the plan's
//! order is kept as it is.
//!
//! Pure: the scheduler asks, and does.

use std::time::Duration;

use super::plan::RunPlan;

/// How late a running project may be on its recorded duration and still be counted on to end
/// soon (as a share of that duration): later than that, nothing is held for what waits on it.
const LATE: f64 = 0.5;

/// How much later than it is ready a project may get its slot and still count as served.
const SLACK: Duration = Duration::from_millis(5);

/// The projects' ranks and costs, for the scheduler.
#[derive(Debug, Clone)]
pub struct Priorities {
    /// Each project's recorded (or counted) duration.
    cost: Vec<Duration>,
    rank: Vec<Duration>,
    /// Whether the costs are recorded: only then is a slot ever held.
    recorded: bool,
}

/// What the scheduler knows of a running project.
#[derive(Debug, Clone, Copy)]
pub struct Running {
    pub index: usize,
    /// How long it has been running.
    pub for_: Duration,
}

impl Priorities {
    /// The ranks of `plan`'s projects, from `plan.estimates` (one per project, when recorded).
    pub fn new(plan: &RunPlan) -> Priorities {
        let n = plan.projects.len();
        let known: Vec<Duration> = plan.estimates.iter().flatten().copied().collect();
        let recorded = !known.is_empty();
        // A project the last run did not run costs what its projects' median did.
        let typical = match recorded {
            true => {
                let mut known = known;
                known.sort();
                known[known.len() / 2]
            }
            false => Duration::from_secs(1),
        };
        let cost: Vec<Duration> = (0..n)
            .map(|i| plan.estimates.get(i).copied().flatten().unwrap_or(typical))
            .collect();
        let mut rank = cost.clone();
        // The plan's order puts every dependency first: from the end, each project's rank is
        // its cost plus the highest rank of those that wait for it.
        let mut longest_after = vec![Duration::ZERO; n];
        for i in (0..n).rev() {
            rank[i] = cost[i] + longest_after[i];
            for &j in &plan.projects[i].waits_for {
                longest_after[j] = longest_after[j].max(rank[i]);
            }
        }
        Priorities {
            cost,
            rank,
            recorded,
        }
    }

    pub fn rank(&self, i: usize) -> Duration {
        self.rank[i]
    }

    /// Whether a slot may ever be held: only on recorded durations.
    pub fn holds(&self) -> bool {
        self.recorded
    }

    /// Whether the slot that `best` (the highest ranked ready project) would take is better held
    /// for a project about to be ready. `free` slots are free, `running` run, and `imminent`
    /// are the projects whose dependencies not ended yet all run, each with them.
    pub fn hold(
        &self,
        best: usize,
        free: usize,
        running: &[Running],
        imminent: &[(usize, Vec<usize>)],
    ) -> bool {
        if !self.recorded || free == 0 {
            return false;
        }
        let horizon = self.cost[best];
        // When each running project is due to end from now; `None` when it is too late to say.
        let due = |r: &Running| {
            let cost = self.cost[r.index];
            let late = r.for_.saturating_sub(cost);
            (late.as_secs_f64() <= cost.as_secs_f64() * LATE).then(|| cost.saturating_sub(r.for_))
        };
        let ends: Vec<(usize, Option<Duration>)> =
            running.iter().map(|r| (r.index, due(r))).collect();
        let due_of = |i: usize| ends.iter().find(|(j, _)| *j == i).and_then(|(_, d)| *d);
        // The projects that outrank `best` and will be ready before it would end, by when.
        let mut claims: Vec<Duration> = imminent
            .iter()
            .filter(|(w, _)| self.rank[*w] > self.rank[best])
            .filter_map(|(_, on)| {
                on.iter()
                    .map(|&j| due_of(j))
                    .try_fold(Duration::ZERO, |at, d| d.map(|d| at.max(d)))
            })
            .filter(|&at| at < horizon)
            .collect();
        if claims.is_empty() {
            return false;
        }
        claims.sort();
        let slots: Vec<Duration> = ends.iter().filter_map(|(_, d)| *d).collect();
        // Started, `best` gives its slot back when it ends.
        let mut with_best = slots.clone();
        with_best.push(horizon);
        served(&claims, free, &slots) > served(&claims, free - 1, &with_best)
    }
}

/// How many of `claims` (when each is ready, sorted) get a slot by then: `free` slots are free
/// now, and one more frees at each of `ends`.
fn served(claims: &[Duration], free: usize, ends: &[Duration]) -> usize {
    let mut slots: Vec<Duration> = std::iter::repeat_n(Duration::ZERO, free)
        .chain(ends.iter().copied())
        .collect();
    slots.sort();
    let mut next = 0;
    claims
        .iter()
        .filter(|&&at| {
            let ok = slots.get(next).is_some_and(|&slot| slot <= at + SLACK);
            next += usize::from(ok);
            ok
        })
        .count()
}

/// Each project's duration in a recorded run, by path, for the plan's `estimates`: the time
/// between its start and its end, for those that ran to an end.
pub fn durations(record: &crate::ledger::RunRecord) -> std::collections::HashMap<&str, Duration> {
    use crate::clock::parse_rfc3339;
    (record.projects.iter())
        .filter_map(|p| {
            let started = parse_rfc3339(p.started.as_deref()?)?;
            let finished = parse_rfc3339(p.finished.as_deref()?)?;
            Some((p.path.as_str(), finished.duration_since(started).ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_slot_is_held_only_when_starting_the_best_leaves_one_about_to_be_ready_without() {
        // a (1 s) -> c (1 s) -> d (1 s); b (1 s) alone: four projects of the aws plan, their
        // dependencies made these.
        let mut plan = crate::run::plan::fixtures::plan(crate::engine::Operation::Up, &[]);
        plan.projects.truncate(4);
        for (project, waits_for) in plan
            .projects
            .iter_mut()
            .zip([vec![], vec![], vec![0], vec![2]])
        {
            project.waits_for = waits_for;
        }
        plan.estimates = vec![Some(Duration::from_secs(1)); 4];
        let p = Priorities::new(&plan);
        assert!(p.rank(0) > p.rank(1), "a leads the longest chain");
        let a_nearly_done = [Running {
            index: 0,
            for_: ms(999),
        }];
        let c_waits_on_a = [(2, vec![0])];
        // One slot free: c takes a's slot when a ends, in 1 ms; b may start.
        assert!(!p.hold(1, 1, &a_nearly_done, &c_waits_on_a));
        // No slot frees when a ends (its release is not counted as one here: it ends later
        // than it is due by half again): b would leave c waiting for b's end — held.
        let a_late = [Running {
            index: 0,
            for_: ms(1600),
        }];
        assert!(
            !p.hold(1, 1, &a_late, &c_waits_on_a),
            "too late to count on"
        );
        // Two about to be ready, one slot freeing: starting b leaves one of them a second.
        let two = [(2, vec![0]), (2, vec![0])];
        assert!(p.hold(1, 1, &a_nearly_done, &two));
        // Nothing recorded: never held.
        plan.estimates.clear();
        assert!(!Priorities::new(&plan).hold(1, 1, &a_nearly_done, &two));
    }

    #[test]
    fn a_claim_is_served_by_a_free_slot_or_one_that_frees_in_time() {
        // Two will be ready in 1 ms; one slot is free and one frees in 1 ms.
        assert_eq!(served(&[ms(1), ms(1)], 1, &[ms(1)]), 2);
        // Without the free slot, one of them waits for a slot that frees only in 200 ms.
        assert_eq!(served(&[ms(1), ms(1)], 0, &[ms(1), ms(200)]), 1);
    }
}
