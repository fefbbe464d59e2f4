//! The scheduler (docs/commands.md, "up, preview, refresh, destroy"): a ready-queue walk over the
//! run plan. A project starts when every project it waits for has succeeded, at most `parallel`
//! at once, the earliest in the plan's order first; a slot no ready project needs prepares a
//! waiting one (selects its stack, initializes its module) ahead of its turn. What a failure
//! means is one value, `FailurePolicy`: stop starting projects (the default), or go on with
//! everything that does not depend on the failed one. A project's task that panics is a failed
//! project, never a lost one.
//!
//! It never prints: it sends `Event`s, and returns one `ProjectReport` per project of the plan.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::events::{Event, Finished, Outcome, ProjectReport};
use super::interrupt::{Interrupt, Stop};
use super::plan::{Budgets, RunPlan};
use super::priority::{Priorities, Running};
use crate::clock::Clock;
use crate::engine::EngineKind;

pub use crate::settings::run::FailurePolicy;

pub type ProjectFuture = Pin<Box<dyn Future<Output = Finished> + Send>>;
pub type PrepareFuture<S> = Pin<Box<dyn Future<Output = S> + Send>>;

/// Lets a project's dependents start before its task ends (all it has left is cleaning up).
pub struct Release {
    index: usize,
    to: mpsc::UnboundedSender<usize>,
}

impl Release {
    pub fn send(self) {
        let _ = self.to.send(self.index);
    }
}

/// What a task of the walk ended with.
enum Done<S> {
    Prepared(S),
    Finished(Finished),
}

/// Runs the plan. `start(index, prepared, release)` makes the future that runs one project (its
/// position in the plan), given what `prepare(index, stop)` made of it ahead of its turn, if
/// anything; `stop` says when a failure stopped the run, and the preparation is not needed.
///
/// A free slot goes first to a project whose dependencies all succeeded, the earliest in the
/// plan first; a slot nothing ready needs goes to the preparation (`PlannedProject::
/// prepares_first`) of the earliest project still waiting, so that selecting its stack or
/// initializing its module is done before its turn comes, not on the critical path.
pub async fn run<S: Send + 'static>(
    plan: &RunPlan,
    parallel: usize,
    policy: FailurePolicy,
    (interrupt, clock): (&Interrupt, &dyn Clock),
    events: &mpsc::UnboundedSender<Event>,
    prepare: impl FnMut(usize, Stop) -> PrepareFuture<S>,
    start: impl FnMut(usize, Option<S>, Release) -> ProjectFuture,
) -> Vec<ProjectReport> {
    let mut walk = Walk::new(
        plan,
        parallel,
        policy,
        (interrupt, clock),
        events,
        prepare,
        start,
    );
    loop {
        walk.fill();
        match walk.next().await {
            Next::Ended(i, finished) => walk.ended(i, finished),
            Next::Again => continue,
            Next::Done => break,
        }
    }
    tracing::debug!(
        target: "mara::graph",
        projects = walk.reports.len(),
        unblocked = walk.unblocked,
        held = walk.held_slots,
        "scheduled"
    );
    walk.not_run()
}

/// The ready projects, earliest in the plan first within each budget class (a pool and an
/// engine), and how many of each pool and engine run: a project starts only when its pool and
/// its engine have room (docs/formats.md, "Budgets and retries").
struct Ready {
    budgets: Budgets,
    /// Each project's class, and each class's pool and engine.
    class_of: Vec<usize>,
    classes: Vec<(Option<String>, EngineKind)>,
    /// Each class's ready projects, the highest ranked first, then the earliest.
    queues: Vec<BinaryHeap<(Duration, Reverse<usize>)>>,
    /// Each project's rank (`run::priority`): all alike when one project runs at a time, so
    /// that the plan's order is kept.
    rank: Vec<Duration>,
    pools: BTreeMap<String, usize>,
    engines: BTreeMap<EngineKind, usize>,
}

impl Ready {
    fn new(plan: &RunPlan, priorities: Option<&Priorities>) -> Ready {
        let mut classes: Vec<(Option<String>, EngineKind)> = Vec::new();
        let class_of = (plan.projects.iter())
            .map(|p| {
                let class = (p.pool.clone(), p.engine);
                match classes.iter().position(|c| *c == class) {
                    Some(at) => at,
                    None => {
                        classes.push(class);
                        classes.len() - 1
                    }
                }
            })
            .collect();
        let rank = (0..plan.projects.len())
            .map(|i| priorities.map_or(Duration::ZERO, |p| p.rank(i)))
            .collect();
        Ready {
            budgets: plan.budgets.clone(),
            queues: vec![BinaryHeap::new(); classes.len()],
            rank,
            class_of,
            classes,
            pools: BTreeMap::new(),
            engines: BTreeMap::new(),
        }
    }

    fn push(&mut self, i: usize) {
        self.queues[self.class_of[i]].push((self.rank[i], Reverse(i)));
    }

    /// Whether class `c` can start one more now.
    fn has_room(&self, c: usize) -> bool {
        let (pool, engine) = &self.classes[c];
        let room = |running: Option<&usize>, limit: Option<&usize>| {
            running.copied().unwrap_or(0) < limit.copied().unwrap_or(usize::MAX)
        };
        let pool_room = pool
            .as_ref()
            .is_none_or(|pool| room(self.pools.get(pool), self.budgets.pools.get(pool)));
        pool_room && room(self.engines.get(engine), self.budgets.engines.get(engine))
    }

    /// Why class `c` cannot start one more now, if it cannot.
    fn held_by(&self, c: usize) -> Option<String> {
        let (pool, engine) = &self.classes[c];
        if let Some(pool) = pool {
            let limit = self.budgets.pools.get(pool).copied().unwrap_or(usize::MAX);
            let running = self.pools.get(pool).copied().unwrap_or(0);
            if running >= limit {
                return Some(format!(
                    "waits for pool {pool} ({running} of {limit} running)"
                ));
            }
        }
        let limit = self
            .budgets
            .engines
            .get(engine)
            .copied()
            .unwrap_or(usize::MAX);
        let running = self.engines.get(engine).copied().unwrap_or(0);
        (running >= limit).then(|| {
            format!(
                "waits for the {} limit ({running} of {limit} running)",
                engine.as_str()
            )
        })
    }

    /// The best ready project whose budgets have room: the highest ranked, then the earliest.
    fn best(&self) -> Option<usize> {
        (0..self.queues.len())
            .filter(|&c| self.has_room(c))
            .filter_map(|c| self.queues[c].peek().copied())
            .max()
            .map(|(_, Reverse(i))| i)
    }

    /// Takes `i`, which `best` named, out of the ready projects.
    fn take(&mut self, i: usize) {
        let taken = self.queues[self.class_of[i]].pop();
        debug_assert_eq!(taken.map(|(_, Reverse(j))| j), Some(i));
    }

    /// The first ready project of each class its budget holds back, with why.
    fn held(&self) -> Vec<(usize, String)> {
        (0..self.queues.len())
            .filter_map(|c| {
                let (_, Reverse(i)) = self.queues[c].peek()?;
                self.held_by(c).map(|why| (*i, why))
            })
            .collect()
    }

    /// Project `i` started (`1`) or ended (`-1`): its pool and engine count it.
    fn count(&mut self, i: usize, by: isize) {
        let (pool, engine) = &self.classes[self.class_of[i]];
        let add = |n: &mut usize| {
            debug_assert!(by > 0 || *n > 0, "a budget counts what started");
            *n = n.saturating_add_signed(by)
        };
        if let Some(pool) = pool {
            add(self.pools.entry(pool.clone()).or_default());
        }
        add(self.engines.entry(*engine).or_default());
    }
}

/// What the walk waits for next.
enum Next {
    /// A project ended.
    Ended(usize, Finished),
    /// Something else happened (a preparation ended, a project let its dependents go, an
    /// interruption came): fill the slots again.
    Again,
    /// Nothing runs and nothing more can start.
    Done,
}

/// The walk's state: what waits, what is ready, what runs, and what ended.
struct Walk<'a, S, P, St> {
    plan: &'a RunPlan,
    parallel: usize,
    policy: FailurePolicy,
    interrupt: &'a Interrupt,
    /// What stamps when each project started and ended.
    clock: &'a dyn Clock,
    events: &'a mpsc::UnboundedSender<Event>,
    prepare: P,
    start: St,
    /// How many of its dependencies each project still waits for, and whom each one's end lets
    /// go.
    waiting: Vec<usize>,
    unblocks: Vec<Vec<usize>>,
    /// Ready projects, the highest ranked first, within their budgets.
    ready: Ready,
    /// The projects' ranks, and whether a slot waits for one about to be ready: only when
    /// more than one project runs at a time.
    priorities: Option<Priorities>,
    /// Counted by the tests: how many times a free slot waited for a project about to be ready.
    held_slots: usize,
    /// The projects a budget held back, said once each (`Event::Held`).
    held: BTreeSet<usize>,
    /// Waiting projects that can prepare ahead of their turn, those preparing, and what that
    /// made.
    early: BTreeSet<usize>,
    preparing: BTreeSet<usize>,
    prepared: BTreeMap<usize, S>,
    stop_preparing: tokio::sync::watch::Sender<bool>,
    stop: Stop,
    /// At most half the slots prepare, so that a preparation that takes long (a provider
    /// download) never holds back more than half of what becomes ready meanwhile.
    preparers: usize,
    releases: mpsc::UnboundedSender<usize>,
    released_rx: mpsc::UnboundedReceiver<usize>,
    released: BTreeSet<usize>,
    reports: BTreeMap<usize, ProjectReport>,
    started_at: BTreeMap<usize, SystemTime>,
    /// The projects running now (started, not ended nor released), with when they started.
    running_now: BTreeMap<usize, SystemTime>,
    running: JoinSet<Done<S>>,
    task_of: BTreeMap<tokio::task::Id, usize>,
    first_failure: Option<String>,
    /// A project whose dependency failed: why it will not run.
    blocked: BTreeMap<usize, String>,
    /// Counted by the tests: each dependency edge of the plan is followed once.
    unblocked: usize,
    /// Projects that end as they come up, without a task (a preview waiting on another).
    instant: Vec<(usize, Finished)>,
}

impl<'a, S, P, St> Walk<'a, S, P, St>
where
    S: Send + 'static,
    P: FnMut(usize, Stop) -> PrepareFuture<S>,
    St: FnMut(usize, Option<S>, Release) -> ProjectFuture,
{
    fn new(
        plan: &'a RunPlan,
        parallel: usize,
        policy: FailurePolicy,
        (interrupt, clock): (&'a Interrupt, &'a dyn Clock),
        events: &'a mpsc::UnboundedSender<Event>,
        prepare: P,
        start: St,
    ) -> Self {
        let projects = &plan.projects;
        let waiting: Vec<usize> = projects.iter().map(|p| p.waits_for.len()).collect();
        let mut unblocks: Vec<Vec<usize>> = vec![Vec::new(); projects.len()];
        for (i, project) in projects.iter().enumerate() {
            for &j in &project.waits_for {
                unblocks[j].push(i);
            }
        }
        let priorities = (parallel > 1).then(|| Priorities::new(plan));
        let mut ready = Ready::new(plan, priorities.as_ref());
        for i in (0..projects.len()).filter(|&i| waiting[i] == 0) {
            ready.push(i);
        }
        // Not for a preview: a project that turns out to wait on one not deployed yet is not
        // previewed, and preparing it would have created its stack for nothing. (A preview
        // prepares only stacks the ledger does not know, so steady state loses nothing.)
        let early = (0..projects.len())
            .filter(|&i| waiting[i] > 0 && projects[i].prepares_first())
            .filter(|_| plan.operation != crate::engine::Operation::Preview)
            .collect();
        let (stop_preparing, stop) = Stop::new();
        let (releases, released_rx) = mpsc::unbounded_channel::<usize>();
        Walk {
            plan,
            parallel,
            policy,
            interrupt,
            clock,
            events,
            prepare,
            start,
            waiting,
            unblocks,
            ready,
            priorities,
            held_slots: 0,
            held: BTreeSet::new(),
            early,
            preparing: BTreeSet::new(),
            prepared: BTreeMap::new(),
            stop_preparing,
            stop,
            preparers: parallel / 2,
            releases,
            released_rx,
            released: BTreeSet::new(),
            reports: BTreeMap::new(),
            started_at: BTreeMap::new(),
            running_now: BTreeMap::new(),
            running: JoinSet::new(),
            task_of: BTreeMap::new(),
            first_failure: None,
            blocked: BTreeMap::new(),
            unblocked: 0,
            instant: Vec::new(),
        }
    }

    /// Whether nothing more starts. Asked before each start: a lease may run out by the clock
    /// between two (`run::drain`).
    fn stopping(&self) -> bool {
        self.interrupt.is_interrupted()
            || self.interrupt.draining().is_some()
            || (self.policy == FailurePolicy::StopAll
                && self.first_failure.is_some()
                && !self.checks_only())
    }

    /// Whether the run only reads (a drift check): a check that failed (an expired token) holds
    /// back no other, nor what follows it.
    fn checks_only(&self) -> bool {
        self.plan.operation == crate::engine::Operation::Drift
    }

    /// Fills the free slots: ready projects first, then preparations.
    fn fill(&mut self) {
        while !self.stopping() && self.running.len() < self.parallel.max(1) {
            if let Some(i) = self.ready.best() {
                if self.holds_for_imminent(i) {
                    self.held_slots += 1;
                    break;
                }
                self.ready.take(i);
                self.start_project(i);
                continue;
            }
            self.say_held();
            if self.preparing.len() >= self.preparers {
                break;
            }
            // Only what still waits for its dependencies: a ready project a budget holds back is
            // in the ready queue, and is not prepared beside it.
            let (blocked, waiting) = (&self.blocked, &self.waiting);
            let early = self.early.iter().copied();
            let Some(i) = early
                .filter(|&i| waiting[i] > 0)
                .find(|i| !blocked.contains_key(i))
            else {
                break;
            };
            self.early.remove(&i);
            let preparation = (self.prepare)(i, self.stop.clone());
            let handle = self
                .running
                .spawn(async move { Done::Prepared(preparation.await) });
            self.task_of.insert(handle.id(), i);
            self.preparing.insert(i);
        }
        // Stopped by a failure: what is being prepared will not be used. Its processes are
        // asked to stop as Ctrl-C would (an interruption has reached them already).
        if self.stopping() && !self.interrupt.is_interrupted() && !self.preparing.is_empty() {
            let _ = self.stop_preparing.send(true);
        }
    }

    /// Whether the slot `best` would take waits for projects about to be ready that outrank it
    /// (`Priorities::hold`).
    fn holds_for_imminent(&self, best: usize) -> bool {
        let Some(priorities) = self.priorities.as_ref().filter(|p| p.holds()) else {
            return false;
        };
        let now = self.clock.now();
        let is_running = |j: usize| self.running_now.contains_key(&j);
        let running: Vec<Running> = (self.running_now.iter())
            .map(|(&index, &at)| Running {
                index,
                for_: now.duration_since(at).unwrap_or_default(),
            })
            .collect();
        let mut imminent: Vec<(usize, Vec<usize>)> = Vec::new();
        for r in &running {
            for &w in &self.unblocks[r.index] {
                if self.started_at.contains_key(&w) || imminent.iter().any(|(v, _)| *v == w) {
                    continue;
                }
                let on: Vec<usize> = (self.plan.projects[w].waits_for.iter().copied())
                    .filter(|&j| is_running(j))
                    .collect();
                if on.len() == self.waiting[w] && !self.blocked.contains_key(&w) {
                    imminent.push((w, on));
                }
            }
        }
        let free = self.parallel.max(1) - self.running.len();
        priorities.hold(best, free, &running, &imminent)
    }

    /// A ready project that a free slot would start but for its pool's or engine's budget says
    /// so, once.
    fn say_held(&mut self) {
        for (i, why) in self.ready.held() {
            if self.held.insert(i) {
                let path = self.plan.projects[i].path.clone();
                let _ = (self.events).send(Event::Held {
                    index: i,
                    path,
                    why,
                });
            }
        }
    }

    fn start_project(&mut self, i: usize) {
        debug_assert!(!self.started_at.contains_key(&i), "a project starts once");
        self.early.remove(&i);
        // A preview that would read a project not deployed yet has nothing to read.
        if let Some(waits) = waits_on(self.plan, i, &self.reports) {
            self.prepared.remove(&i);
            self.instant.push((i, waits));
            return;
        }
        let path = self.plan.projects[i].path.clone();
        let at = self.clock.now();
        self.started_at.insert(i, at);
        self.running_now.insert(i, at);
        self.ready.count(i, 1);
        let _ = self
            .events
            .send(Event::ProjectStarted { index: i, path, at });
        let release = Release {
            index: i,
            to: self.releases.clone(),
        };
        let project = (self.start)(i, self.prepared.remove(&i), release);
        let handle = self
            .running
            .spawn(async move { Done::Finished(project.await) });
        self.task_of.insert(handle.id(), i);
    }

    /// Waits for what comes next.
    async fn next(&mut self) -> Next {
        if let Some((i, finished)) = self.instant.pop() {
            return Next::Ended(i, finished);
        }
        if self.running.is_empty() {
            return Next::Done;
        }
        let joined = tokio::select! {
            joined = self.running.join_next_with_id() => joined,
            Some(i) = self.released_rx.recv() => {
                // Its end may have been taken first, and its dependents released with it.
                if !self.reports.contains_key(&i) && self.released.insert(i) {
                    self.running_now.remove(&i);
                    self.let_go(i);
                }
                return Next::Again;
            }
            () = self.interrupt.requested(), if !self.interrupt.is_interrupted() => {
                return Next::Again;
            }
        };
        match joined {
            Some(Ok((id, Done::Prepared(state)))) => {
                let i = self.task_of[&id];
                self.preparing.remove(&i);
                self.prepared.insert(i, state);
                self.ready_if_free(i);
                Next::Again
            }
            Some(Ok((id, Done::Finished(finished)))) => Next::Ended(self.task_of[&id], finished),
            Some(Err(error)) => {
                let i = self.task_of[&error.id()];
                // A preparation that panicked: the project's turn, if it comes, starts from its
                // first step.
                if self.preparing.remove(&i) {
                    self.ready_if_free(i);
                    return Next::Again;
                }
                Next::Ended(i, panicked(error))
            }
            None => Next::Again,
        }
    }

    /// Project `i` is ready if it waits for nothing and nothing it depends on failed.
    fn ready_if_free(&mut self, i: usize) {
        if self.waiting[i] == 0 && !self.blocked.contains_key(&i) {
            self.ready.push(i);
        }
    }

    /// Project `i`'s dependents no longer wait for it.
    fn let_go(&mut self, i: usize) {
        self.unblocked += let_go(
            &self.unblocks[i],
            &mut self.waiting,
            &self.blocked,
            &self.preparing,
            &mut self.ready,
        );
    }

    /// Project `i` ended: its dependents go on, or are blocked, and its report is sent.
    fn ended(&mut self, i: usize, finished: Finished) {
        let path = self.plan.projects[i].path.clone();
        self.running_now.remove(&i);
        // Its budget is free again (a project that waited without a task never took it).
        if self.started_at.contains_key(&i) {
            self.ready.count(i, -1);
        }
        // Started before the drain began and ended after (stopped before its operation, or let
        // finish): running when the drain began.
        if self.started_at.contains_key(&i)
            && (self.interrupt.lease()).began_before(crate::run::drain::Moment::now())
        {
            self.interrupt.lease().ran_through(&path);
        }
        if !finished.outcome.lets_dependents_run() {
            self.first_failure.get_or_insert_with(|| path.clone());
        }
        if !finished.outcome.lets_dependents_run() && !self.checks_only() {
            // Released before it failed (cleaning up): its dependents already went on.
            let mut stack = match self.released.contains(&i) {
                true => Vec::new(),
                false => vec![i],
            };
            while let Some(j) = stack.pop() {
                for &k in &self.unblocks[j] {
                    if let std::collections::btree_map::Entry::Vacant(entry) = self.blocked.entry(k)
                    {
                        entry.insert(path.clone());
                        stack.push(k);
                    }
                }
            }
        } else if !self.released.contains(&i) {
            self.let_go(i);
        }
        let ran = (self.started_at.get(&i)).map(|&started| (started, self.clock.now()));
        let report = ProjectReport::new(path, ran, finished);
        let _ = self.events.send(Event::ProjectFinished {
            index: i,
            report: Box::new(report.clone()),
        });
        self.reports.insert(i, report);
    }

    /// Every project's report: those that did not run, with the reason.
    fn not_run(mut self) -> Vec<ProjectReport> {
        for (i, project) in self.plan.projects.iter().enumerate() {
            if self.reports.contains_key(&i) {
                continue;
            }
            let reason = self.not_run_because(i);
            let finished = Finished::without_running(Outcome::Skipped { reason });
            let report = ProjectReport::new(project.path.clone(), None, finished);
            let _ = self.events.send(Event::ProjectFinished {
                index: i,
                report: Box::new(report.clone()),
            });
            self.reports.insert(i, report);
        }
        self.reports.into_values().collect()
    }

    fn not_run_because(&self, i: usize) -> String {
        // A dependency stopped by the interruption did not fail: the interruption is the reason.
        let stopped = |path: &String| {
            (self.reports.values())
                .any(|r| r.path == *path && r.status == crate::status::ProjectStatus::Cancelled)
        };
        if let Some(failed) = self.blocked.get(&i).filter(|f| !stopped(f)) {
            format!("depends on {failed}, which did not succeed")
        } else if self.interrupt.is_interrupted() {
            "not started: the run was interrupted".to_string()
        } else if let Some(reason) = self.interrupt.draining() {
            format!("not started: {reason}")
        } else if let Some(failed) = &self.first_failure {
            format!("not started: the run stopped after {failed} failed")
        } else {
            "not started".to_string()
        }
    }
}

/// A project's dependents (`dependents`) no longer wait for it: each one whose last dependency
/// this was, not blocked and not being prepared, is ready. Returns how many edges were followed.
fn let_go(
    dependents: &[usize],
    waiting: &mut [usize],
    blocked: &BTreeMap<usize, String>,
    preparing: &BTreeSet<usize>,
    ready: &mut Ready,
) -> usize {
    for &k in dependents {
        waiting[k] -= 1;
        if waiting[k] == 0 && !blocked.contains_key(&k) && !preparing.contains(&k) {
            ready.push(k);
        }
    }
    dependents.len()
}

/// Why project `i`'s preview has nothing to read, when it has not: the projects not deployed yet
/// that it would read — a dependency whose preview creates its stack, or what a waiting
/// dependency waits on — and the reason said in the table. Only for a preview.
fn waits_on(
    plan: &RunPlan,
    i: usize,
    reports: &BTreeMap<usize, ProjectReport>,
) -> Option<Finished> {
    if plan.operation != crate::engine::Operation::Preview {
        return None;
    }
    let (mut on, mut direct, mut through) = (Vec::new(), Vec::new(), Vec::new());
    let project = &plan.projects[i];
    for report in project.waits_for.iter().filter_map(|j| reports.get(j)) {
        // What it takes as inputs from a project not deployed yet is what that project's
        // preview plans: its inputs decide (`run::inputs`).
        let takes_inputs = project.inputs.iter().any(|input| input.from == report.path);
        if report.new_stack && !takes_inputs {
            on.push(report.path.clone());
            direct.push(report.path.as_str());
        } else if !report.waits_on.is_empty() {
            on.extend(report.waits_on.iter().cloned());
            through.push(report.path.as_str());
        }
    }
    if on.is_empty() {
        return None;
    }
    on.sort();
    on.dedup();
    // The table names what the project itself reads; the report, what is not deployed.
    let mut said = Vec::new();
    if !direct.is_empty() {
        said.push(format!("{} (not deployed yet)", direct.join(", ")));
    }
    if !through.is_empty() {
        let waiting = crate::error::plural(through.len(), "itself waiting", "themselves waiting");
        said.push(format!("{} ({waiting})", through.join(", ")));
    }
    let reason = format!("waits on {}", said.join(" and "));
    Some(Finished::without_running(Outcome::Waits { on, reason }))
}

/// A project's task that ended without finishing: a panic (a bug in mara, said as such), or a
/// cancellation of the task itself.
fn panicked(error: tokio::task::JoinError) -> Finished {
    let reason = if error.is_panic() {
        let payload = error.into_panic();
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_string());
        format!("mara failed while running it (a bug in mara; please report it): {message}")
    } else {
        "mara's task for it was cancelled".to_string()
    };
    Finished::without_running(Outcome::Failed { code: None, reason })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Operation;
    use crate::run::plan::fixtures;
    use crate::status::ProjectStatus;
    use std::sync::{Arc, Mutex};

    /// Runs the aws plan with projects that succeed (or fail, or panic, when named), recording the
    /// start order.
    async fn simulate(
        operation: Operation,
        parallel: usize,
        policy: FailurePolicy,
        failing: &[&str],
        panicking: &[&str],
    ) -> (Vec<String>, Vec<ProjectReport>) {
        let plan = fixtures::plan(operation, &[]);
        let (tx, _rx) = mpsc::unbounded_channel();
        let started = Arc::new(Mutex::new(Vec::new()));
        let prepare = |_, _| -> PrepareFuture<()> { Box::pin(async {}) };
        let reports = run(
            &plan,
            parallel,
            policy,
            (&Interrupt::default(), &crate::clock::SystemClock),
            &tx,
            prepare,
            |i, _, _| {
                let path = plan.projects[i].path.clone();
                started.lock().unwrap().push(path.clone());
                let fail = failing.iter().any(|f| path.ends_with(f));
                let panic = panicking.iter().any(|f| path.ends_with(f));
                Box::pin(async move {
                    tokio::task::yield_now().await;
                    assert!(!panic, "a bug in {path}");
                    let outcome = if fail {
                        Outcome::Failed {
                            code: Some(1),
                            reason: "boom".into(),
                        }
                    } else {
                        Outcome::Succeeded
                    };
                    done(outcome)
                })
            },
        )
        .await;
        let started = started.lock().unwrap().clone();
        (started, reports)
    }

    #[tokio::test]
    async fn parallel_one_is_the_execution_order_and_destroy_its_reverse() {
        let up = fixtures::plan(Operation::Up, &[]);
        let order: Vec<String> = up.projects.iter().map(|p| p.path.clone()).collect();
        let (started, reports) = simulate(Operation::Up, 1, FailurePolicy::StopAll, &[], &[]).await;
        assert_eq!(started, order);
        assert!(reports.iter().all(|r| r.status == ProjectStatus::Succeeded));
        let (started, _) = simulate(Operation::Destroy, 1, FailurePolicy::StopAll, &[], &[]).await;
        let mut reversed = order.clone();
        reversed.reverse();
        assert_eq!(started, reversed);
    }

    #[tokio::test]
    async fn a_failure_stops_the_run_and_skips_with_reasons() {
        let (started, reports) =
            simulate(Operation::Up, 1, FailurePolicy::StopAll, &["logstore"], &[]).await;
        assert_eq!(started.last().unwrap(), "kubernetes/logstore");
        let logagent = reports
            .iter()
            .find(|r| r.path == "kubernetes/logagent")
            .unwrap();
        assert_eq!(logagent.status, ProjectStatus::Skipped);
        assert_eq!(
            logagent.reason.as_deref(),
            Some("depends on kubernetes/logstore, which did not succeed")
        );
        let certmgr = reports
            .iter()
            .find(|r| r.path == "kubernetes/certmgr")
            .unwrap();
        assert_eq!(
            certmgr.reason.as_deref(),
            Some("not started: the run stopped after kubernetes/logstore failed")
        );
    }

    #[tokio::test]
    async fn keep_going_runs_every_independent_project() {
        let (started, reports) = simulate(
            Operation::Up,
            2,
            FailurePolicy::SkipDependents,
            &["logstore"],
            &[],
        )
        .await;
        assert!(!started.contains(&"kubernetes/logagent".to_string()));
        assert!(started.contains(&"kubernetes/applications/sirius".to_string()));
        let statuses: Vec<(&str, ProjectStatus)> = reports
            .iter()
            .map(|r| (r.path.as_str(), r.status))
            .collect();
        assert!(statuses.contains(&("kubernetes/logagent", ProjectStatus::Skipped)));
        assert!(statuses.contains(&("kubernetes/applications/sirius", ProjectStatus::Succeeded)));
        assert_eq!(reports.len(), 15);
    }

    #[tokio::test]
    async fn a_task_that_panics_is_a_failed_project_and_its_dependents_skip() {
        let (_, reports) = simulate(
            Operation::Up,
            2,
            FailurePolicy::SkipDependents,
            &[],
            &["logstore"],
        )
        .await;
        let logstore = reports
            .iter()
            .find(|r| r.path == "kubernetes/logstore")
            .unwrap();
        assert_eq!(logstore.status, ProjectStatus::Failed);
        let reason = logstore.reason.as_deref().unwrap();
        assert!(
            reason.contains("a bug in mara") && reason.contains("a bug in kubernetes/logstore"),
            "{reason}"
        );
        let logagent = reports
            .iter()
            .find(|r| r.path == "kubernetes/logagent")
            .unwrap();
        assert_eq!(logagent.status, ProjectStatus::Skipped);
        assert_eq!(reports.len(), 15, "every project is reported");
    }

    /// A project's end with `outcome`.
    fn done(outcome: Outcome) -> Finished {
        let failed = matches!(outcome, Outcome::Failed { .. });
        Finished {
            exit_code: Some(i32::from(failed)),
            ..Finished::without_running(outcome)
        }
    }

    /// What the walk did, in order: `prepare P`, `start P` (`start P (prepared)` when its
    /// preparation ran ahead), `end P`.
    /// The first project of the plan takes long.
    async fn timeline(plan: &RunPlan, parallel: usize, cleanup: &[&str]) -> Vec<String> {
        let (tx, _rx) = mpsc::unbounded_channel();
        let said = Arc::new(Mutex::new(Vec::new()));
        let prepare = |i: usize, _: Stop| -> PrepareFuture<usize> {
            let path = plan.projects[i].path.clone();
            said.lock().unwrap().push(format!("prepare {path}"));
            Box::pin(async move {
                tokio::task::yield_now().await;
                i
            })
        };
        let start = |i: usize, prepared: Option<usize>, release: Release| -> ProjectFuture {
            let path = plan.projects[i].path.clone();
            let ahead = match prepared {
                Some(p) if p == i => " (prepared)",
                Some(_) => " (prepared for another)",
                None => "",
            };
            said.lock().unwrap().push(format!("start {path}{ahead}"));
            let said = said.clone();
            let cleans_up = cleanup.iter().any(|c| path.ends_with(c));
            let turns = if i == 0 { 300 } else { 3 };
            Box::pin(async move {
                for _ in 0..turns {
                    tokio::task::yield_now().await;
                }
                if cleans_up {
                    release.send();
                    for _ in 0..50 {
                        tokio::task::yield_now().await;
                    }
                }
                said.lock().unwrap().push(format!("end {path}"));
                done(Outcome::Succeeded)
            })
        };
        let reports = run(
            plan,
            parallel,
            FailurePolicy::StopAll,
            (&Interrupt::default(), &crate::clock::SystemClock),
            &tx,
            prepare,
            start,
        )
        .await;
        assert!(reports.iter().all(|r| r.status == ProjectStatus::Succeeded));
        said.lock().unwrap().clone()
    }

    #[tokio::test]
    async fn the_head_of_the_longest_chain_starts_first_when_more_than_one_runs() {
        // Three projects ready at once; the third leads a chain of three.
        let mut plan = fixtures::plan(Operation::Up, &[]);
        plan.projects.truncate(5);
        let edges = [vec![], vec![], vec![], vec![2], vec![3]];
        for (project, waits_for) in plan.projects.iter_mut().zip(edges) {
            project.waits_for = waits_for;
            project.steps.clear();
        }
        let path = |i: usize| format!("start {}", plan.projects[i].path);
        let started = |said: Vec<String>| -> Vec<String> {
            said.into_iter()
                .filter(|s| s.starts_with("start"))
                .take(2)
                .collect()
        };
        assert_eq!(started(timeline(&plan, 2, &[]).await), [path(2), path(0)]);
        // One at a time: the plan's order, as the original runner's.
        assert_eq!(started(timeline(&plan, 1, &[]).await), [path(0), path(1)]);
    }

    #[tokio::test]
    async fn a_free_slot_prepares_a_waiting_project_ahead_of_its_turn() {
        let plan = fixtures::plan(Operation::Up, &[]);
        let said = timeline(&plan, 4, &[]).await;
        let position = |line: &str| {
            said.iter()
                .position(|s| s == line)
                .unwrap_or_else(|| panic!("no `{line}` in {said:#?}"))
        };
        // Projects ready at once are not prepared ahead; they start first.
        let first_preparation = said.iter().position(|s| s.starts_with("prepare")).unwrap();
        for root in plan.projects.iter().filter(|p| p.waits_for.is_empty()) {
            assert!(position(&format!("start {}", root.path)) < first_preparation);
        }
        // While the first runs, the free slots prepare every project still waiting, which then
        // starts with what that made.
        for project in plan.projects.iter().filter(|p| !p.waits_for.is_empty()) {
            let path = &project.path;
            assert!(
                position(&format!("prepare {path}"))
                    < position(&format!("start {path} (prepared)"))
            );
        }
    }

    #[tokio::test]
    async fn one_slot_prepares_nothing_ahead() {
        let plan = fixtures::plan(Operation::Up, &[]);
        let said = timeline(&plan, 1, &[]).await;
        assert!(said.iter().all(|s| !s.starts_with("prepare")), "{said:#?}");
        let order: Vec<String> = plan
            .projects
            .iter()
            .map(|p| format!("start {}", p.path))
            .collect();
        let starts: Vec<&String> = said.iter().filter(|s| s.starts_with("start")).collect();
        assert_eq!(starts, order.iter().collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_project_cleaning_up_lets_its_dependents_start() {
        let plan = fixtures::plan(Operation::Destroy, &[]);
        let first = plan.projects[0].path.clone();
        let second = plan
            .projects
            .iter()
            .position(|p| p.waits_for == [0])
            .map(|i| plan.projects[i].path.clone())
            .unwrap();
        let said = timeline(&plan, 2, &[&first]).await;
        let position = |line: &str| said.iter().position(|s| s == line).unwrap();
        let started = said
            .iter()
            .position(|s| s.starts_with(&format!("start {second}")))
            .unwrap();
        assert!(started < position(&format!("end {first}")), "{said:#?}");
    }

    #[tokio::test]
    async fn a_release_taken_after_its_end_releases_nothing_twice() {
        // Every project releases, then ends at once: its end and its release race.
        let plan = fixtures::plan(Operation::Destroy, &[]);
        for _ in 0..20 {
            let (tx, _rx) = mpsc::unbounded_channel();
            let prepare =
                |i: usize, _: Stop| -> PrepareFuture<usize> { Box::pin(async move { i }) };
            let start = |_: usize, _: Option<usize>, release: Release| -> ProjectFuture {
                Box::pin(async move {
                    release.send();
                    done(Outcome::Succeeded)
                })
            };
            let policy = FailurePolicy::StopAll;
            let reports = run(
                &plan,
                4,
                policy,
                (&Interrupt::default(), &crate::clock::SystemClock),
                &tx,
                prepare,
                start,
            )
            .await;
            assert!(reports.iter().all(|r| r.status == ProjectStatus::Succeeded));
        }
    }

    #[tokio::test]
    async fn a_failure_tells_the_preparations_to_stop() {
        // The first project fails at once; the preparations end only when told to stop.
        let plan = fixtures::plan(Operation::Up, &[]);
        let (tx, _rx) = mpsc::unbounded_channel();
        let prepare = |i: usize, mut stop: Stop| -> PrepareFuture<usize> {
            Box::pin(async move {
                stop.stopped().await;
                i
            })
        };
        let start = |i: usize, _: Option<usize>, _: Release| -> ProjectFuture {
            Box::pin(async move {
                // The roots run side by side; the second ends after the preparations started.
                for _ in 0..(i * 10) {
                    tokio::task::yield_now().await;
                }
                done(Outcome::Failed {
                    code: Some(1),
                    reason: "boom".into(),
                })
            })
        };
        let policy = FailurePolicy::StopAll;
        let interrupt = Interrupt::default();
        let walk = run(
            &plan,
            8,
            policy,
            (&interrupt, &crate::clock::SystemClock),
            &tx,
            prepare,
            start,
        );
        let reports = tokio::time::timeout(std::time::Duration::from_secs(10), walk)
            .await
            .expect("the preparations are told to stop");
        let skipped = reports
            .iter()
            .filter(|r| r.status == ProjectStatus::Skipped)
            .count();
        assert_eq!(skipped, plan.len() - 2, "{reports:#?}");
    }
}
