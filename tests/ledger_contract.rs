//! One ledger contract, two backends (docs/ARCHITECTURE.md, "Modules": `ledger/`): every test
//! here runs the same calls against this machine's SQLite ledger and a real PostgreSQL server's
//! (started by the test, as `tests/postgres.rs` does), and asserts the same answers, so that the
//! backends cannot drift apart. What differs by design — a server's locks are leases, a file's
//! are held by live processes — is said where a test meets it. The schema both migrate to is
//! described once, as data (`SCHEMA`), with what is one backend's alone and why.
//!
//! Without PostgreSQL a test runs the SQLite half and says the other was skipped (and counted);
//! under `.ci/test`, which installs it, its absence is a failure.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::postgres::Server;
use mara::engine::Operation;
use mara::error::Error;
use mara::ledger::access::{self, Act, Actor, Role, Token, Via};
use mara::ledger::{self, Begun, History, ImageRecord, Ledger, Place, ProjectRecord, RunStart};
use mara::status::{ProjectStatus, RunStatus};

/// A fresh ledger of each backend, as often as a test opens it (each open is a new connection,
/// as a new process would make).
struct Backend {
    name: &'static str,
    place: Place,
    _dir: Option<tempfile::TempDir>,
    _server: Option<Server>,
}

impl Backend {
    fn open(&self) -> Box<dyn Ledger> {
        ledger::open(&self.place).unwrap_or_else(|e| panic!("{}: {e}", self.name))
    }

    fn leases(&self) -> bool {
        matches!(self.place, Place::Server(_))
    }
}

/// SQLite, then PostgreSQL (when it can be started here).
fn backends() -> Vec<Backend> {
    let dir = tempfile::tempdir().unwrap();
    let mut all = vec![Backend {
        name: "sqlite",
        place: Place::File(dir.path().join("ledger.db")),
        _dir: Some(dir),
        _server: None,
    }];
    if let Some(server) = Server::start() {
        all.push(Backend {
            name: "postgres",
            place: Place::Server(server.url("contract")),
            _dir: None,
            _server: Some(server),
        });
    }
    all
}

/// Run `id` as it starts, after every run started before it.
fn start(id: &str, stack: &str, operation: Operation) -> RunStart {
    static SECONDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let second = SECONDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    RunStart {
        run_id: id.into(),
        operation,
        provider: "aws".into(),
        stack: stack.into(),
        command: format!("mara {operation}"),
        started: format!(
            "2026-11-25T{:02}:{:02}:{:02}.000Z",
            second / 3600,
            second / 60 % 60,
            second % 60
        ),
        projects: Vec::new(),
        graph: Vec::new(),
    }
}

/// Whether run `id` is recorded as it begins (rather than held back by another's lock).
fn started(
    ledger: &mut dyn Ledger,
    id: &str,
    stack: &str,
    operation: Operation,
    lock: bool,
) -> bool {
    let begun = ledger.begin(&start(id, stack, operation), lock).unwrap();
    matches!(begun, Begun::Started { .. })
}

fn ended(path: &str, status: ProjectStatus) -> ProjectRecord {
    ProjectRecord {
        path: path.into(),
        status,
        started: None,
        finished: Some("2026-11-25T10:01:00.000Z".into()),
        exit_code: Some(if status.is_success() { 0 } else { 1 }),
        changes: None,
        reason: None,
        log: None,
        fingerprint: None,
    }
}

/// Who acts in these tests: the command line of this machine.
fn me() -> Actor {
    Actor::command_line()
}

fn statuses(ledger: &dyn Ledger, run_id: &str) -> Vec<(String, ProjectStatus)> {
    let run = ledger.run(run_id).unwrap().unwrap();
    run.projects
        .into_iter()
        .map(|p| (p.path, p.status))
        .collect()
}

#[test]
fn a_run_is_recorded_project_by_project_and_read_back_as_it_was() {
    for backend in backends() {
        let name = backend.name;
        let mut ledger = backend.open();
        let begun = ledger
            .begin(&start("r1", "dev", Operation::Up), true)
            .unwrap();
        assert_eq!(begun, Begun::Started { took_over: None }, "{name}");
        ledger
            .project_started("r1", "vpc", "t1", Some("fp-vpc"))
            .unwrap();
        ledger
            .project_finished(
                "r1",
                &ProjectRecord {
                    started: Some("t1".into()),
                    changes: Some(BTreeMap::from([("create".to_string(), 3)])),
                    log: Some(".mara/logs/r1/vpc.log".into()),
                    ..ended("vpc", ProjectStatus::Succeeded)
                },
            )
            .unwrap();
        ledger.project_started("r1", "eks", "t2", None).unwrap();
        ledger
            .project_finished(
                "r1",
                &ProjectRecord {
                    reason: Some("boom".into()),
                    ..ended("eks", ProjectStatus::Failed)
                },
            )
            .unwrap();
        ledger.finish("r1", RunStatus::Failed, "t3").unwrap();

        // Read back from another connection, as another process would.
        let reader = backend.open();
        let run = reader.run("r1").unwrap().unwrap();
        assert_eq!(
            (run.status, run.finished.as_deref()),
            (RunStatus::Failed, Some("t3")),
            "{name}"
        );
        assert_eq!(
            (run.operation, run.provider.as_str(), run.stack.as_str()),
            (Operation::Up, "aws", "dev")
        );
        assert_eq!(run.pid, std::process::id(), "{name}");
        let [vpc, eks] = &run.projects[..] else {
            panic!("{name}: {:?}", run.projects)
        };
        assert_eq!(vpc.path, "vpc", "{name}: in the order they were recorded");
        assert_eq!(vpc.started.as_deref(), Some("t1"));
        assert_eq!(
            vpc.fingerprint.as_deref(),
            Some("fp-vpc"),
            "{name}: kept from the start"
        );
        assert_eq!(vpc.changes.as_ref().unwrap()["create"], 3, "{name}");
        assert_eq!(vpc.log.as_deref(), Some(".mara/logs/r1/vpc.log"));
        assert_eq!(
            (eks.status, eks.exit_code, eks.reason.as_deref()),
            (ProjectStatus::Failed, Some(1), Some("boom")),
            "{name}"
        );
        assert_eq!(
            eks.started.as_deref(),
            Some("t2"),
            "{name}: the start's time, when the end gives none"
        );
        assert!(
            reader.holder("dev").unwrap().is_none(),
            "{name}: the lock is released"
        );

        ledger
            .begin(&start("r22", "dev", Operation::Destroy), true)
            .unwrap();
        ledger.finish("r22", RunStatus::Succeeded, "t9").unwrap();
        let runs: Vec<String> = reader
            .runs(None, 10)
            .unwrap()
            .into_iter()
            .map(|r| r.run_id)
            .collect();
        assert_eq!(runs, ["r22", "r1"], "{name}: newest first");
        assert!(reader.runs(Some("prod"), 10).unwrap().is_empty(), "{name}");
        assert_eq!(reader.runs(Some("dev"), 1).unwrap().len(), 1, "{name}");
        assert_eq!(
            reader
                .last_run("dev", Operation::Up)
                .unwrap()
                .unwrap()
                .run_id,
            "r1",
            "{name}"
        );
        assert!(
            reader
                .last_run("dev", Operation::Refresh)
                .unwrap()
                .is_none(),
            "{name}"
        );
        assert!(reader.run("nope").unwrap().is_none(), "{name}");
    }
}

#[test]
fn a_second_run_is_refused_while_the_first_holds_its_stack() {
    for backend in backends() {
        let name = backend.name;
        let mut first = backend.open();
        first
            .begin(&start("r1", "dev", Operation::Up), true)
            .unwrap();
        let mut second = backend.open();
        let Begun::Held(holder) = second
            .begin(&start("r2", "dev", Operation::Destroy), true)
            .unwrap()
        else {
            panic!("{name}: not held")
        };
        assert_eq!(
            (holder.run_id.as_str(), holder.pid, holder.command.as_str()),
            ("r1", std::process::id(), "mara up"),
            "{name}"
        );
        assert_eq!(
            holder.lease_left.is_some(),
            backend.leases(),
            "{name}: a server's lock is a lease"
        );
        assert!(
            second.run("r2").unwrap().is_none(),
            "{name}: a refused run is not recorded"
        );
        // Another stack is free, and a run that takes no lock (a preview) is never held.
        assert!(
            started(second.as_mut(), "r3", "prod", Operation::Up, true),
            "{name}"
        );
        assert!(
            started(second.as_mut(), "r4", "dev", Operation::Preview, false),
            "{name}"
        );
        assert_eq!(
            second.holder("dev").unwrap().unwrap().run_id,
            "r1",
            "{name}"
        );
        assert!(
            second.holds_lock("r1").unwrap() && !second.holds_lock("r4").unwrap(),
            "{name}"
        );
        first.finish("r1", RunStatus::Succeeded, "t").unwrap();
        assert!(!second.holds_lock("r1").unwrap(), "{name}");
        assert!(
            matches!(
                second
                    .begin(&start("r5", "dev", Operation::Up), true)
                    .unwrap(),
                Begun::Started { took_over: None }
            ),
            "{name}"
        );
    }
}

/// The lease of the lock the dying holder takes (on a server).
const LEASE: Duration = Duration::from_secs(3);

/// Set in the process a takeover test starts to hold a lock and die.
const HOLDER: &str = "MARA_CONTRACT_HOLDER";

/// In that process: takes `dev`'s lock for run `dead` (on a server, for a lease of a second),
/// starts a project, and ends without a word to the ledger, as a killed run does.
fn hold_and_die(place: &str) {
    let place = match place.strip_prefix("file:") {
        Some(path) => Place::File(path.into()),
        None => Place::Server(place.to_string()),
    };
    let mut ledger = ledger::open(&place).unwrap();
    ledger.set_lease(LEASE);
    ledger
        .begin(&start("dead", "dev", Operation::Up), true)
        .unwrap();
    ledger
        .project_started("dead", "vpc", "t1", Some("f"))
        .unwrap();
    std::process::exit(0);
}

#[test]
fn a_lock_whose_holder_is_gone_is_taken_over_and_its_run_abandoned() {
    if let Ok(place) = std::env::var(HOLDER) {
        return hold_and_die(&place);
    }
    for backend in backends() {
        let name = backend.name;
        let place = match &backend.place {
            Place::File(path) => format!("file:{}", path.display()),
            Place::Server(url) => url.clone(),
        };
        // The holder's lease starts before its process ends, so before this.
        let spawned = std::time::Instant::now();
        let held = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_lock_whose_holder_is_gone_is_taken_over_and_its_run_abandoned",
            ])
            .env(HOLDER, &place)
            .output()
            .unwrap();
        // Its lease was last renewed before its process ended, so before this: it has run out
        // a lease from now (a slow start of the holder would make one counted from the spawn
        // too early).
        let ended = std::time::Instant::now();
        assert!(
            held.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&held.stderr)
        );
        let mut ledger = backend.open();
        assert_eq!(
            ledger.holder("dev").unwrap().unwrap().run_id,
            "dead",
            "{name}"
        );
        if backend.leases() {
            // Gone is a lease that ran out: until then, a server cannot tell (asked while a
            // second of it is surely left; a slow machine skips the question).
            if spawned.elapsed() + Duration::from_secs(1) < LEASE {
                let early = ledger.begin(&start("early", "dev", Operation::Up), true);
                assert!(matches!(early.unwrap(), Begun::Held(_)), "{name}");
            }
            std::thread::sleep(
                (LEASE + Duration::from_millis(200)).saturating_sub(ended.elapsed()),
            );
        }
        let Begun::Started {
            took_over: Some(old),
        } = ledger
            .begin(&start("r2", "dev", Operation::Up), true)
            .unwrap()
        else {
            panic!("{name}: not taken over")
        };
        assert_eq!(old.run_id, "dead", "{name}");
        let dead = ledger.run("dead").unwrap().unwrap();
        assert_eq!(dead.status, RunStatus::Abandoned, "{name}");
        assert!(dead.finished.is_some(), "{name}: abandoned when taken over");
        assert_eq!(
            statuses(ledger.as_ref(), "dead"),
            [("vpc".to_string(), ProjectStatus::Abandoned)],
            "{name}"
        );
        // The run taken over, finishing after all, changes neither its record nor the lock.
        ledger.finish("dead", RunStatus::Succeeded, "late").unwrap();
        assert_eq!(
            ledger.run("dead").unwrap().unwrap().status,
            RunStatus::Abandoned,
            "{name}"
        );
        assert_eq!(
            ledger.holder("dev").unwrap().unwrap().run_id,
            "r2",
            "{name}"
        );
    }
}

#[test]
fn a_run_records_every_project_it_selected_as_it_starts() {
    for backend in backends() {
        let name = backend.name;
        let mut ledger = backend.open();
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        let graph = vec![pair("vpc", "eks"), pair("vpc", "ecr")];
        let selected = |id| RunStart {
            projects: ["vpc", "eks", "ecr"].map(String::from).to_vec(),
            graph: graph.clone(),
            ..start(id, "dev", Operation::Up)
        };
        ledger.begin(&selected("r1"), true).unwrap();
        let waiting = |p: &str| (p.to_string(), ProjectStatus::Waiting);
        assert_eq!(
            statuses(ledger.as_ref(), "r1"),
            [waiting("vpc"), waiting("eks"), waiting("ecr")],
            "{name}: in the run's order, before any starts"
        );
        let run = ledger.run("r1").unwrap().unwrap();
        assert_eq!(run.selected, Some(3), "{name}");
        assert_eq!(
            run.graph.as_ref(),
            Some(&graph),
            "{name}: its graph as it started"
        );
        // Listed in the run's order whatever order they start in.
        ledger.project_started("r1", "eks", "t1", None).unwrap();
        ledger
            .project_finished("r1", &ended("eks", ProjectStatus::Succeeded))
            .unwrap();
        ledger.project_started("r1", "vpc", "t2", None).unwrap();
        // Ended, the run leaves none waiting: what it never started was skipped.
        ledger.finish("r1", RunStatus::Failed, "t3").unwrap();
        let run = ledger.run("r1").unwrap().unwrap();
        let ended: Vec<(&str, ProjectStatus, Option<&str>)> = (run.projects.iter())
            .map(|p| (p.path.as_str(), p.status, p.reason.as_deref()))
            .collect();
        assert_eq!(
            ended,
            [
                ("vpc", ProjectStatus::Abandoned, None),
                ("eks", ProjectStatus::Succeeded, None),
                (
                    "ecr",
                    ProjectStatus::Skipped,
                    Some("not started: the run ended before it")
                ),
            ],
            "{name}"
        );
        // Abandoned (its lock cleared), its running projects are abandoned, the others skipped.
        ledger.begin(&selected("r2"), true).unwrap();
        ledger.project_started("r2", "vpc", "t4", None).unwrap();
        backend.open().unlock("dev", &me()).unwrap();
        let run = backend.open().run("r2").unwrap().unwrap();
        let abandoned: Vec<(&str, ProjectStatus)> = (run.projects.iter())
            .map(|p| (p.path.as_str(), p.status))
            .collect();
        assert_eq!(
            abandoned,
            [
                ("vpc", ProjectStatus::Abandoned),
                ("eks", ProjectStatus::Skipped),
                ("ecr", ProjectStatus::Skipped),
            ],
            "{name}"
        );
        assert_eq!(
            run.projects[1].reason.as_deref(),
            Some("not started: its run was abandoned"),
            "{name}"
        );
    }
}

#[test]
fn a_forced_unlock_abandons_the_run_and_its_running_projects() {
    for backend in backends() {
        let name = backend.name;
        let mut ledger = backend.open();
        ledger
            .begin(&start("r1", "dev", Operation::Up), true)
            .unwrap();
        ledger.project_started("r1", "vpc", "t1", None).unwrap();
        ledger
            .project_finished("r1", &ended("ecr", ProjectStatus::Succeeded))
            .unwrap();
        let mut other = backend.open();
        assert_eq!(
            other.unlock("dev", &me()).unwrap().unwrap().run_id,
            "r1",
            "{name}"
        );
        let run = other.run("r1").unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Abandoned, "{name}");
        assert!(run.finished.is_some(), "{name}");
        assert_eq!(
            statuses(other.as_ref(), "r1"),
            [
                ("vpc".to_string(), ProjectStatus::Abandoned),
                ("ecr".to_string(), ProjectStatus::Succeeded)
            ],
            "{name}: only what was running"
        );
        assert!(
            other.holder("dev").unwrap().is_none() && !other.holds_lock("r1").unwrap(),
            "{name}"
        );
        assert!(
            other.unlock("dev", &me()).unwrap().is_none(),
            "{name}: nothing left to clear"
        );
        // The holder learns it: where locks are leases, it can no longer renew one.
        assert_eq!(ledger.renew("r1").unwrap(), !backend.leases(), "{name}");
    }
}

#[test]
fn what_is_deployed_follows_the_ups_and_destroys_that_succeed() {
    for backend in backends() {
        let name = backend.name;
        let mut ledger = backend.open();
        ledger
            .begin(&start("r1", "dev", Operation::Up), true)
            .unwrap();
        for (path, status, fingerprint) in [
            ("a", ProjectStatus::Succeeded, Some("a1")),
            ("b", ProjectStatus::Unchanged, Some("b1")),
            ("c", ProjectStatus::Failed, Some("c1")),
            ("d", ProjectStatus::Succeeded, None),
            ("e", ProjectStatus::Succeeded, Some("e1")),
        ] {
            ledger
                .project_started("r1", path, "t", fingerprint)
                .unwrap();
            ledger.project_finished("r1", &ended(path, status)).unwrap();
        }
        ledger.finish("r1", RunStatus::Failed, "t").unwrap();
        let deployed = |ledger: &dyn Ledger| ledger.last_fingerprints("dev").unwrap();
        let expected = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(
            deployed(ledger.as_ref()),
            expected(&[("a", "a1"), ("b", "b1"), ("e", "e1")]),
            "{name}"
        );
        // A preview and a refresh change no deployment; an up without a fingerprint clears it.
        for (id, operation) in [("r2", Operation::Preview), ("r3", Operation::Refresh)] {
            ledger.begin(&start(id, "dev", operation), false).unwrap();
            ledger.project_started(id, "a", "t", Some("a2")).unwrap();
            ledger
                .project_finished(id, &ended("a", ProjectStatus::Succeeded))
                .unwrap();
            ledger.finish(id, RunStatus::Succeeded, "t").unwrap();
        }
        ledger
            .begin(&start("r4", "dev", Operation::Up), true)
            .unwrap();
        ledger.project_started("r4", "e", "t", None).unwrap();
        ledger
            .project_finished("r4", &ended("e", ProjectStatus::Succeeded))
            .unwrap();
        ledger.finish("r4", RunStatus::Succeeded, "t").unwrap();
        ledger
            .begin(&start("r5", "dev", Operation::Destroy), true)
            .unwrap();
        ledger
            .project_finished("r5", &ended("b", ProjectStatus::Succeeded))
            .unwrap();
        ledger
            .project_finished("r5", &ended("a", ProjectStatus::Failed))
            .unwrap();
        ledger.finish("r5", RunStatus::Failed, "t").unwrap();
        assert_eq!(
            deployed(ledger.as_ref()),
            expected(&[("a", "a1")]),
            "{name}"
        );
        assert!(
            ledger.last_fingerprints("prod").unwrap().is_empty(),
            "{name}"
        );
    }
}

#[test]
fn a_project_started_again_loses_the_reason_it_had() {
    for backend in backends() {
        let name = backend.name;
        let mut ledger = backend.open();
        ledger
            .begin(&start("r1", "dev", Operation::Up), true)
            .unwrap();
        // An opened run's project waits for its job; the job starts it.
        ledger
            .project_finished(
                "r1",
                &ProjectRecord {
                    finished: None,
                    exit_code: None,
                    reason: Some("waits for its job".into()),
                    ..ended("vpc", ProjectStatus::Waiting)
                },
            )
            .unwrap();
        ledger
            .project_started("r1", "vpc", "t1", Some("f"))
            .unwrap();
        let vpc = &ledger.run("r1").unwrap().unwrap().projects[0];
        assert_eq!(
            (vpc.status, vpc.reason.as_deref()),
            (ProjectStatus::Running, None),
            "{name}"
        );
        assert_eq!(
            (vpc.started.as_deref(), vpc.fingerprint.as_deref()),
            (Some("t1"), Some("f")),
            "{name}"
        );
    }
}

#[test]
fn a_forgotten_run_leaves_nothing_behind() {
    for backend in backends() {
        let name = backend.name;
        let mut ledger = backend.open();
        ledger
            .begin(&start("r1", "dev", Operation::Up), true)
            .unwrap();
        ledger.project_started("r1", "vpc", "t1", None).unwrap();
        ledger
            .append_logs("r1", &[("vpc".into(), "a line".into())])
            .unwrap();
        assert_eq!(
            ledger.logs("r1", None, 0).unwrap().len(),
            usize::from(ledger.stores_logs()),
            "{name}"
        );
        ledger.forget("r1").unwrap();
        assert!(ledger.run("r1").unwrap().is_none(), "{name}");
        assert!(ledger.runs(None, 10).unwrap().is_empty(), "{name}");
        assert!(ledger.holder("dev").unwrap().is_none(), "{name}");
        assert!(ledger.logs("r1", None, 0).unwrap().is_empty(), "{name}");
        assert!(
            started(ledger.as_mut(), "r1", "dev", Operation::Up, true),
            "{name}: its id is free again"
        );
    }
}

#[test]
fn a_cancel_request_reaches_the_run_holding_the_stack() {
    for backend in backends() {
        let name = backend.name;
        let mut ledger = backend.open();
        assert!(
            ledger.request_cancel("dev", &me()).unwrap().is_none(),
            "{name}: no run to ask"
        );
        ledger
            .begin(&start("r1", "dev", Operation::Up), true)
            .unwrap();
        ledger
            .begin(&start("r2", "prod", Operation::Up), true)
            .unwrap();
        assert!(!ledger.cancel_requested("r1").unwrap(), "{name}");
        let mut other = backend.open();
        assert_eq!(
            other.request_cancel("dev", &me()).unwrap().unwrap().run_id,
            "r1",
            "{name}"
        );
        assert!(ledger.cancel_requested("r1").unwrap(), "{name}");
        assert!(
            !ledger.cancel_requested("r2").unwrap() && !ledger.cancel_requested("nope").unwrap(),
            "{name}"
        );
    }
}

#[test]
fn tokens_are_kept_as_digests_and_every_cancel_and_unlock_is_audited() {
    for backend in backends() {
        let name = backend.name;
        let mut ledger = backend.open();
        assert!(ledger.tokens().unwrap().is_empty(), "{name}");
        let value = access::new_value().unwrap();
        let token = |n: &str, role, value: &str| Token {
            name: n.into(),
            role,
            digest: access::digest(value),
            created: "2026-11-25T10:00:00.000Z".into(),
            created_by: "ana@laptop".into(),
            last_used: None,
        };
        assert!(
            ledger
                .add_token(&token("ana", Role::Operator, &value))
                .unwrap(),
            "{name}"
        );
        assert!(
            ledger
                .add_token(&token("bo", Role::Viewer, "other"))
                .unwrap(),
            "{name}"
        );
        assert!(
            !ledger
                .add_token(&token("ana", Role::Viewer, "third"))
                .unwrap(),
            "{name}: one token a name"
        );
        // Another connection (another machine) sees the same set, and finds a value by its
        // digest; the value itself is nowhere.
        let mut other = backend.open();
        let tokens = other.tokens().unwrap();
        let names: Vec<(&str, Role)> = tokens.iter().map(|t| (t.name.as_str(), t.role)).collect();
        assert_eq!(
            names,
            [("ana", Role::Operator), ("bo", Role::Viewer)],
            "{name}"
        );
        assert_eq!(access::find(&tokens, &value).unwrap().name, "ana", "{name}");
        assert!(tokens.iter().all(|t| !t.digest.contains(&value)), "{name}");
        // Its last use, to the minute: a second use within it writes nothing.
        other.token_used("ana", "2026-11-25T10:05:01.000Z").unwrap();
        other.token_used("ana", "2026-11-25T10:05:40.000Z").unwrap();
        let used = |l: &dyn Ledger| l.tokens().unwrap()[0].last_used.clone();
        assert_eq!(
            used(ledger.as_ref()).as_deref(),
            Some("2026-11-25T10:05:01.000Z"),
            "{name}"
        );
        other.token_used("ana", "2026-11-25T10:06:00.000Z").unwrap();
        assert_eq!(
            used(ledger.as_ref()).as_deref(),
            Some("2026-11-25T10:06:00.000Z"),
            "{name}"
        );
        assert!(other.revoke_token("ana").unwrap(), "{name}");
        assert!(!other.revoke_token("ana").unwrap(), "{name}: gone");
        assert!(
            access::find(&ledger.tokens().unwrap(), &value).is_none(),
            "{name}"
        );

        // A cancel and an unlock, each recorded with who asked, from where.
        ledger
            .begin(&start("r1", "dev", Operation::Up), true)
            .unwrap();
        let ana = Actor {
            name: "ana".into(),
            via: Via::Page,
        };
        assert_eq!(
            other.request_cancel("dev", &ana).unwrap().unwrap().run_id,
            "r1"
        );
        assert_eq!(other.unlock("dev", &me()).unwrap().unwrap().run_id, "r1");
        assert!(
            other.unlock("dev", &me()).unwrap().is_none(),
            "{name}: nothing, not audited"
        );
        let run = ledger.run("r1").unwrap().unwrap();
        let acts: Vec<(Act, &str, Via, &str)> = (run.actions.iter())
            .map(|a| (a.act, a.by.as_str(), a.via, a.stack.as_str()))
            .collect();
        let (user, host) = ledger::whoami();
        let cli = format!("{user}@{host}");
        assert_eq!(
            acts,
            [
                (Act::Cancel, "ana", Via::Page, "dev"),
                (Act::Unlock, cli.as_str(), Via::Cli, "dev")
            ],
            "{name}"
        );
        assert!(
            run.actions[0]
                .said()
                .starts_with("cancelled by ana via the web page at ")
        );
        // The list of runs carries them too, and a migration copies them with their run.
        let listed = ledger.runs(None, 10).unwrap();
        assert_eq!(listed[0].actions, run.actions, "{name}");
        let history = ledger.export().unwrap();
        assert_eq!(history.runs[0].actions, run.actions, "{name}");
        let copy = tempfile::tempdir().unwrap();
        let place = match &backend._server {
            None => Place::File(copy.path().join("ledger.db")),
            Some(server) => Place::Server(server.url("contract_audit")),
        };
        let mut moved = ledger::open(&place).unwrap();
        moved.import(&history).unwrap();
        assert_eq!(
            moved.run("r1").unwrap().unwrap().actions,
            run.actions,
            "{name}"
        );
        assert!(
            moved.tokens().unwrap().is_empty(),
            "{name}: tokens are not moved"
        );
    }
}

#[test]
fn a_job_joins_only_an_open_run_of_its_stack_and_operation() {
    for backend in backends() {
        let name = backend.name;
        let mut opener = backend.open();
        opener.set_lease(Duration::from_secs(600));
        opener
            .begin(&start("r1", "dev", Operation::Up), true)
            .unwrap();
        let mut job = backend.open();
        job.join("r1", "dev", Operation::Up).unwrap();
        let refused = |result: mara::error::Result<()>| result.unwrap_err().to_string();
        assert_eq!(
            refused(job.join("r1", "prod", Operation::Up)),
            "run `r1` is an up of stack dev, not an up of stack prod",
            "{name}"
        );
        assert_eq!(
            refused(job.join("r1", "dev", Operation::Destroy)),
            "run `r1` is an up of stack dev, not a destroy of stack dev",
            "{name}"
        );
        assert_eq!(
            refused(job.join("nope", "dev", Operation::Up)),
            "there is no run `nope` to join",
            "{name}"
        );
        opener.request_cancel("dev", &me()).unwrap();
        assert!(
            matches!(
                job.join("r1", "dev", Operation::Up),
                Err(Error::Interrupted)
            ),
            "{name}"
        );
        opener.finish("r1", RunStatus::Cancelled, "t").unwrap();
        assert_eq!(
            refused(job.join("r1", "dev", Operation::Up)),
            "run `r1` is closed (cancelled): it takes no more projects",
            "{name}"
        );
    }
}

#[test]
fn the_stacks_known_to_exist_and_the_images_imported() {
    for backend in backends() {
        let name = backend.name;
        let mut ledger = backend.open();
        let owned = |paths: &[&str]| paths.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        ledger
            .stacks_changed("file:///s", "dev", &owned(&["a", "b", "c"]), &[])
            .unwrap();
        ledger
            .stacks_changed("file:///s", "dev", &owned(&["a"]), &owned(&["b", "z"]))
            .unwrap();
        ledger
            .stacks_changed("file:///other", "dev", &owned(&["x"]), &[])
            .unwrap();
        let known: Vec<String> = ledger
            .known_stacks("file:///s", "dev")
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(known, ["a", "c"], "{name}");
        assert!(
            ledger.known_stacks("file:///s", "prod").unwrap().is_empty(),
            "{name}"
        );

        let (_, host) = ledger::whoami();
        let image = |name: &str, id: &str| ImageRecord {
            host: host.clone(),
            stack: "dev".into(),
            image: name.into(),
            image_id: id.into(),
            cluster: "c1".into(),
            imported: "t".into(),
        };
        ledger
            .record_images(&[image("app:dev", "sha256:1"), image("web:dev", "sha256:2")])
            .unwrap();
        ledger
            .record_images(&[image("app:dev", "sha256:3")])
            .unwrap();
        let ids: Vec<(String, String)> = ledger
            .images("dev")
            .unwrap()
            .into_iter()
            .map(|i| (i.image, i.image_id))
            .collect();
        assert_eq!(
            ids,
            [
                ("app:dev".to_string(), "sha256:3".to_string()),
                ("web:dev".to_string(), "sha256:2".to_string())
            ],
            "{name}"
        );
        assert_eq!(
            ledger
                .forget_images("dev", &owned(&["web:dev", "none:x"]))
                .unwrap(),
            1,
            "{name}"
        );
        assert_eq!(ledger.images("dev").unwrap().len(), 1, "{name}");
        assert!(ledger.images("prod").unwrap().is_empty(), "{name}");
    }
}

/// The same calls, made of each backend, leave the same records: what `ledger migrate` copies.
#[test]
fn both_backends_hold_the_same_history_after_the_same_calls() {
    let mut histories: Vec<(&str, String)> = Vec::new();
    for backend in backends() {
        let mut ledger = backend.open();
        let at = |id, operation, started: &str| RunStart {
            started: started.into(),
            graph: vec![("vpc".into(), "eks".into())],
            ..start(id, "dev", operation)
        };
        ledger.begin(&at("r1", Operation::Up, "t0"), true).unwrap();
        ledger
            .project_started("r1", "vpc", "t1", Some("f1"))
            .unwrap();
        ledger
            .project_finished("r1", &ended("vpc", ProjectStatus::Succeeded))
            .unwrap();
        ledger
            .project_finished(
                "r1",
                &ProjectRecord {
                    reason: Some("depends on vpc".into()),
                    ..ended("eks", ProjectStatus::Skipped)
                },
            )
            .unwrap();
        ledger.finish("r1", RunStatus::Failed, "t2").unwrap();
        ledger
            .begin(&at("r2", Operation::Destroy, "t2"), true)
            .unwrap();
        ledger.project_started("r2", "vpc", "t3", None).unwrap();
        ledger.unlock("dev", &me()).unwrap();
        ledger
            .stacks_changed("(login)", "dev", &["vpc".into()], &[])
            .unwrap();
        let mut history = ledger.export().unwrap();
        // The moment of an unlock is the machine's own.
        for run in &mut history.runs {
            if run.status == RunStatus::Abandoned {
                run.finished = Some("unlocked".into());
            }
            for action in &mut run.actions {
                action.at = "unlocked".into();
            }
        }
        histories.push((backend.name, render(&history)));

        // Moved to a new ledger of the same kind, it adds what it did not hold, once.
        let copy = tempfile::tempdir().unwrap();
        let other = match &backend._server {
            None => Place::File(copy.path().join("ledger.db")),
            Some(server) => Place::Server(server.url("contract_copy")),
        };
        let mut other = ledger::open(&other).unwrap();
        assert_eq!(
            other.import(&ledger.export().unwrap()).unwrap(),
            ["r1", "r2"],
            "{}",
            backend.name
        );
        assert!(
            other.import(&ledger.export().unwrap()).unwrap().is_empty(),
            "{}",
            backend.name
        );
        assert_eq!(
            render(&other.export().unwrap()),
            render(&ledger.export().unwrap()),
            "{}",
            backend.name
        );
    }
    if let [(_, sqlite), (_, postgres)] = &histories[..] {
        assert_eq!(sqlite, postgres, "the backends differ");
    }
}

/// A history as text, to compare.
fn render(history: &History) -> String {
    format!(
        "{}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
        serde_json::to_string_pretty(&history.runs).unwrap(),
        history.deployed,
        history.stacks,
        history.images,
        history.outputs,
        history.run_inputs,
        history.previews
    )
}

#[test]
fn a_server_keeps_the_runs_log_lines_in_order_and_a_file_keeps_none() {
    for backend in backends() {
        let name = backend.name;
        let mut ledger = backend.open();
        ledger
            .begin(&start("r1", "dev", Operation::Up), true)
            .unwrap();
        let line = |p: &str, l: &str| (p.to_string(), l.to_string());
        ledger
            .append_logs("r1", &[line("vpc", "one"), line("eks", "two")])
            .unwrap();
        ledger.append_logs("r1", &[line("vpc", "three")]).unwrap();
        let read = |project: Option<&str>, after: i64| -> Vec<String> {
            (ledger.logs("r1", project, after).unwrap().into_iter())
                .map(|(_, p, l)| format!("{p}: {l}"))
                .collect()
        };
        if !backend.leases() {
            assert!(
                !ledger.stores_logs() && read(None, 0).is_empty(),
                "{name}: in log files"
            );
            continue;
        }
        assert!(ledger.stores_logs(), "{name}");
        assert_eq!(
            read(None, 0),
            ["vpc: one", "eks: two", "vpc: three"],
            "{name}"
        );
        assert_eq!(read(Some("vpc"), 0), ["vpc: one", "vpc: three"], "{name}");
        let first = ledger.logs("r1", None, 0).unwrap()[0].0;
        assert_eq!(
            read(None, first),
            ["eks: two", "vpc: three"],
            "{name}: after a position"
        );
    }
}

/// A batch of a run's writes is one transaction, whatever it holds: a project that starts and
/// ends twice in it (a job retried) is one row, and what it deploys is its last end's.
#[test]
fn a_batch_holding_a_project_twice_is_made_as_its_last_writes_say() {
    use mara::ledger::writes::{Entry, RunOf};
    for backend in backends() {
        let name = backend.name;
        let mut ledger = backend.open();
        assert!(started(ledger.as_mut(), "b1", "dev", Operation::Up, true));
        let of = Some(RunOf {
            stack: "dev".into(),
            operation: Operation::Up,
        });
        let start = |fingerprint: &str| Entry::ProjectStarted {
            run_id: "b1".into(),
            path: "vpc".into(),
            started: "2026-11-25T10:00:00.000Z".into(),
            fingerprint: Some(fingerprint.into()),
        };
        let end = |status, fingerprint: &str| Entry::ProjectFinished {
            run_id: "b1".into(),
            project: ProjectRecord {
                fingerprint: Some(fingerprint.into()),
                ..ended("vpc", status)
            },
            of: of.clone(),
            outputs: None,
            preview: None,
        };
        let lines = Entry::Logs {
            run_id: "b1".into(),
            lines: vec![("vpc".into(), "one".into()), ("vpc".into(), "two".into())],
        };
        ledger
            .write(&[
                start("f1"),
                lines.clone(),
                end(ProjectStatus::Succeeded, "f1"),
                start("f2"),
                lines,
                end(ProjectStatus::Succeeded, "f2"),
            ])
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            statuses(ledger.as_ref(), "b1"),
            [("vpc".to_string(), ProjectStatus::Succeeded)],
            "{name}"
        );
        assert_eq!(
            ledger.last_fingerprints("dev").unwrap().get("vpc"),
            Some(&"f2".to_string()),
            "{name}"
        );
        if ledger.stores_logs() {
            let logged: Vec<String> = (ledger.logs("b1", None, 0).unwrap().into_iter())
                .map(|(_, _, line)| line)
                .collect();
            assert_eq!(logged, ["one", "two", "one", "two"], "{name}");
        }
    }
}

/// The outputs a project's dependents take are recorded by its successful `up` (the secret ones
/// by name only), replaced by its next, said destroyed by its destroy, read per stack and
/// project, and moved with the history.
#[test]
fn the_outputs_dependents_take_are_recorded_by_an_up_and_said_destroyed_by_a_destroy() {
    use mara::ledger::Outputs;
    use mara::ledger::writes::{Entry, RunOf};
    for backend in backends() {
        let name = backend.name;
        let mut ledger = backend.open();
        let end = |run: &str, operation, outputs: Option<Outputs>| Entry::ProjectFinished {
            run_id: run.into(),
            project: ended("network", ProjectStatus::Succeeded),
            of: Some(RunOf {
                stack: "dev".into(),
                operation,
            }),
            outputs: outputs.map(Box::new),
            preview: None,
        };
        let outputs = |subnet: &str| {
            let values = serde_json::json!({"subnet_id": subnet, "token": "t0k3n"});
            let secret = ["token".to_string()].into();
            Outputs::recorded(values.as_object().unwrap(), &secret)
        };
        assert!(started(ledger.as_mut(), "o1", "dev", Operation::Up, true));
        ledger
            .write(&[end("o1", Operation::Up, Some(outputs("subnet-1")))])
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        ledger.finish("o1", RunStatus::Succeeded, "t1").unwrap();
        let read = |ledger: &dyn Ledger, stack: &str| {
            ledger
                .outputs(stack, &["network".into(), "other".into()])
                .unwrap_or_else(|e| panic!("{name}: {e}"))
        };
        let recorded = read(ledger.as_ref(), "dev");
        assert_eq!(recorded["network"].run_id, "o1", "{name}");
        assert_eq!(
            recorded["network"].outputs.values["subnet_id"], "subnet-1",
            "{name}"
        );
        assert!(
            !recorded["network"].outputs.values.contains_key("token"),
            "{name}"
        );
        assert_eq!(
            recorded["network"].outputs.secret,
            ["token".to_string()].into(),
            "{name}"
        );
        assert!(read(ledger.as_ref(), "prod").is_empty(), "{name}");
        let history = ledger.export().unwrap();
        assert!(
            !format!("{:?}", history.outputs).contains("t0k3n"),
            "{name}"
        );

        assert!(started(ledger.as_mut(), "o2", "dev", Operation::Up, true));
        ledger
            .write(&[end("o2", Operation::Up, Some(outputs("subnet-2")))])
            .unwrap();
        ledger.finish("o2", RunStatus::Succeeded, "t2").unwrap();
        let recorded = read(ledger.as_ref(), "dev");
        assert_eq!(
            recorded["network"].outputs.values["subnet_id"], "subnet-2",
            "{name}"
        );

        // Moved with the history.
        let copy = tempfile::tempdir().unwrap();
        let other = match &backend._server {
            None => Place::File(copy.path().join("ledger.db")),
            Some(server) => Place::Server(server.url("contract_outputs_copy")),
        };
        let mut other = ledger::open(&other).unwrap();
        other.import(&ledger.export().unwrap()).unwrap();
        assert_eq!(read(other.as_ref(), "dev"), recorded, "{name}");

        // Destroyed, they are kept, said destroyed, for what still stands on the project; its
        // next up records them afresh.
        assert_eq!(recorded["network"].destroyed, None, "{name}");
        assert!(started(
            ledger.as_mut(),
            "o3",
            "dev",
            Operation::Destroy,
            true
        ));
        ledger
            .write(&[end("o3", Operation::Destroy, None)])
            .unwrap();
        ledger.finish("o3", RunStatus::Succeeded, "t3").unwrap();
        let destroyed = read(ledger.as_ref(), "dev");
        assert_eq!(
            destroyed["network"].destroyed.as_deref(),
            Some("o3"),
            "{name}"
        );
        assert_eq!(
            destroyed["network"].outputs, recorded["network"].outputs,
            "{name}"
        );
        assert!(started(ledger.as_mut(), "o4", "dev", Operation::Up, true));
        ledger
            .write(&[end("o4", Operation::Up, Some(outputs("subnet-4")))])
            .unwrap();
        ledger.finish("o4", RunStatus::Succeeded, "t4").unwrap();
        assert_eq!(
            read(ledger.as_ref(), "dev")["network"].destroyed,
            None,
            "{name}"
        );
    }
}

/// What a fanned-out run was opened with is kept with it, read by its jobs, moved with the
/// history, and forgotten with the run.
#[test]
fn a_run_carries_what_it_was_opened_with() {
    use mara::ledger::RunInputs;
    for backend in backends() {
        let name = backend.name;
        let mut ledger = backend.open();
        assert!(started(ledger.as_mut(), "c1", "dev", Operation::Up, true));
        assert_eq!(ledger.run_inputs("c1").unwrap(), None, "{name}");
        let inputs = RunInputs {
            config: Some("config:\n  aws:region: eu-west-1\n".into()),
            environment: Some("PULUMI_STACK=dev\n".into()),
        };
        ledger
            .set_run_inputs("c1", &inputs)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            ledger.run_inputs("c1").unwrap(),
            Some(inputs.clone()),
            "{name}"
        );
        let copy = tempfile::tempdir().unwrap();
        let other = match &backend._server {
            None => Place::File(copy.path().join("ledger.db")),
            Some(server) => Place::Server(server.url("contract_inputs_copy")),
        };
        let mut other = ledger::open(&other).unwrap();
        other.import(&ledger.export().unwrap()).unwrap();
        assert_eq!(other.run_inputs("c1").unwrap(), Some(inputs), "{name}");
        ledger.forget("c1").unwrap();
        assert_eq!(ledger.run_inputs("c1").unwrap(), None, "{name}");
    }
}

/// What a project's preview showed is kept with its end (a later job of the project replaces
/// it), read by the run's close, moved with the history, and forgotten with the run.
#[test]
fn a_preview_keeps_what_it_showed_for_the_run_s_close() {
    use mara::engine::{PropertyDiff, ResourceDiff};
    use mara::ledger::Previewed;
    use mara::ledger::writes::{Entry, RunOf};
    for backend in backends() {
        let name = backend.name;
        let mut ledger = backend.open();
        assert!(started(
            ledger.as_mut(),
            "p1",
            "dev",
            Operation::Preview,
            false
        ));
        let shown = |subnet: &str| Previewed {
            changed_outputs: Some(vec!["subnet_id".into()]),
            diff: vec![ResourceDiff {
                op: "update".into(),
                resource: "aws:ec2/subnet:Subnet (main)".into(),
                properties: vec![PropertyDiff {
                    path: "cidrBlock".into(),
                    kind: "update".into(),
                    old: Some("\"10.0.0.0/24\"".into()),
                    new: Some(format!("\"{subnet}\"")),
                }],
            }],
            ..Previewed::default()
        };
        let end = |preview: Option<Previewed>| Entry::ProjectFinished {
            run_id: "p1".into(),
            project: ended("network", ProjectStatus::Succeeded),
            of: Some(RunOf {
                stack: "dev".into(),
                operation: Operation::Preview,
            }),
            outputs: None,
            preview: preview.map(Box::new),
        };
        ledger.write(&[end(Some(shown("10.0.1.0/24")))]).unwrap();
        ledger.write(&[end(Some(shown("10.0.2.0/24")))]).unwrap();
        let previews = ledger.previews("p1").unwrap();
        assert_eq!(previews.len(), 1, "{name}");
        assert_eq!(previews["network"], shown("10.0.2.0/24"), "{name}");
        let copy = tempfile::tempdir().unwrap();
        let other = match &backend._server {
            None => Place::File(copy.path().join("ledger.db")),
            Some(server) => Place::Server(server.url("contract_previews_copy")),
        };
        let mut other = ledger::open(&other).unwrap();
        other.import(&ledger.export().unwrap()).unwrap();
        assert_eq!(other.previews("p1").unwrap(), previews, "{name}");
        ledger.forget("p1").unwrap();
        assert!(ledger.previews("p1").unwrap().is_empty(), "{name}");
    }
}

/// The two dialects a schema is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Sqlite,
    Postgres,
}

/// A column's type, whatever its dialect calls it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Type {
    Text,
    Integer,
    Boolean,
    /// A moment the server's clock keeps (`now()`); the runs' own times are RFC 3339 text.
    Timestamp,
    Real,
}

impl Type {
    /// The type a declared one is, in `dialect`: SQLite's as a table declares it, PostgreSQL's as
    /// `information_schema.columns` spells it.
    fn of(dialect: Dialect, declared: &str) -> Type {
        match (dialect, declared.to_ascii_lowercase().as_str()) {
            (_, "text") => Type::Text,
            (Dialect::Sqlite, "integer") => Type::Integer,
            (Dialect::Sqlite, "real") => Type::Real,
            (Dialect::Postgres, "integer" | "bigint") => Type::Integer,
            (Dialect::Postgres, "boolean") => Type::Boolean,
            (Dialect::Postgres, "timestamp with time zone") => Type::Timestamp,
            (Dialect::Postgres, "double precision") => Type::Real,
            (_, other) => panic!("{dialect:?}: type `{other}` is not in the schema's description"),
        }
    }

    /// How `dialect` stores it: SQLite has no boolean, and keeps one as an integer, 0 or 1.
    fn stored(self, dialect: Dialect) -> Type {
        match (self, dialect) {
            (Type::Boolean, Dialect::Sqlite) => Type::Integer,
            (ty, _) => ty,
        }
    }
}

/// A column of the ledger's schema.
#[derive(Debug, Clone, Copy)]
struct Column {
    name: &'static str,
    ty: Type,
    /// It may hold NULL.
    null: bool,
    /// Its name on a server where it is not `name`, and why.
    on_server: Option<(&'static str, &'static str)>,
    /// The one dialect that has it, and why.
    only: Option<(Dialect, &'static str)>,
}

/// A column that always holds a value.
const fn value(name: &'static str, ty: Type) -> Column {
    Column {
        name,
        ty,
        null: false,
        on_server: None,
        only: None,
    }
}

/// A column that may hold NULL.
const fn maybe(name: &'static str, ty: Type) -> Column {
    Column {
        null: true,
        ..value(name, ty)
    }
}

impl Column {
    const fn only(self, dialect: Dialect, why: &'static str) -> Column {
        Column {
            only: Some((dialect, why)),
            ..self
        }
    }

    const fn on_server(self, name: &'static str, why: &'static str) -> Column {
        Column {
            on_server: Some((name, why)),
            ..self
        }
    }
}

/// A table of the ledger's schema, by its SQLite name (a server's is `mara_` and the same).
struct Table {
    name: &'static str,
    columns: &'static [Column],
    /// The one dialect that has it, and why.
    only: Option<(Dialect, &'static str)>,
}

const fn table(name: &'static str, columns: &'static [Column]) -> Table {
    Table {
        name,
        columns,
        only: None,
    }
}

const fn server_table(name: &'static str, why: &'static str, columns: &'static [Column]) -> Table {
    Table {
        name,
        columns,
        only: Some((Dialect::Postgres, why)),
    }
}

use Type::{Boolean, Integer, Real, Text, Timestamp};

/// The ledger's schema once for both backends: what `MIGRATIONS` in `src/ledger/sqlite.rs` and
/// in `src/ledger/postgres/mod.rs` each make, in their own dialect. A table or column added to
/// one is added here, and to the other, or said to be one backend's and why.
const SCHEMA: &[Table] = &[
    table(
        "runs",
        &[
            value("run_id", Text),
            value("operation", Text),
            value("provider", Text),
            value("stack", Text),
            value("user", Text).on_server("username", "`user` is a reserved word on a server"),
            value("host", Text),
            value("pid", Integer),
            value("command", Text),
            value("started", Text),
            maybe("finished", Text),
            value("status", Text),
            value("cancel_requested", Boolean),
            // None for a run recorded before mara recorded its selection.
            maybe("selected", Integer),
            // Its graph as it started, JSON; none for a run recorded before mara recorded it.
            maybe("graph", Text),
            // What the policies said of it, JSON; none where they said nothing.
            maybe("policy", Text),
        ],
    ),
    table(
        "projects",
        &[
            value("seq", Integer).only(
                Dialect::Postgres,
                "the order a run's projects were recorded in, which SQLite's rowid keeps",
            ),
            value("run_id", Text),
            value("path", Text),
            value("status", Text),
            maybe("started", Text),
            maybe("finished", Text),
            maybe("exit_code", Integer),
            maybe("changes", Text),
            maybe("reason", Text),
            maybe("log", Text),
            maybe("fingerprint", Text),
        ],
    ),
    table(
        "locks",
        &[
            value("stack", Text),
            value("run_id", Text),
            value("lease_until", Timestamp).only(
                Dialect::Postgres,
                "a server's lock is a lease its holder renews, taken over from any machine once \
                 it runs out; a file's is held while its run's process lives",
            ),
            value("lease_seconds", Real).only(
                Dialect::Postgres,
                "each lease's length, kept with it (a fanned-out run's is long)",
            ),
        ],
    ),
    table(
        "stacks",
        &[
            value("backend", Text),
            value("stack", Text),
            value("project", Text),
        ],
    ),
    table(
        "deployed",
        &[
            value("stack", Text),
            value("project", Text),
            value("fingerprint", Text),
        ],
    ),
    table(
        "images",
        &[
            value("host", Text),
            value("stack", Text),
            value("image", Text),
            value("image_id", Text),
            value("cluster", Text),
            value("imported", Text),
        ],
    ),
    table(
        "outputs",
        &[
            value("stack", Text),
            value("project", Text),
            value("run_id", Text),
            value("outputs", Text),
            maybe("destroyed", Text),
        ],
    ),
    table(
        "run_inputs",
        &[value("run_id", Text), value("inputs", Text)],
    ),
    table(
        "previews",
        &[
            value("run_id", Text),
            value("path", Text),
            value("preview", Text),
        ],
    ),
    table(
        "tokens",
        &[
            value("name", Text),
            value("role", Text),
            // SHA-256 of the value, in hex: the value is kept nowhere.
            value("digest", Text),
            value("created", Text),
            value("created_by", Text),
            maybe("last_used", Text),
        ],
    ),
    table(
        "audit",
        &[
            value("at", Text),
            value("action", Text),
            value("stack", Text),
            value("run_id", Text),
            value("actor", Text),
            value("via", Text),
        ],
    ),
    server_table(
        "log_lines",
        "a server keeps the runs' log lines, for `logs` on any machine; a file's ledger leaves \
         them in the workspace's log files",
        &[
            value("seq", Integer),
            value("run_id", Text),
            value("path", Text),
            value("line", Text),
        ],
    ),
    server_table(
        "claims",
        "the projects a job of a fanned-out run claims, and a run fans out over CI jobs only \
         with a team's ledger",
        &[
            value("run_id", Text),
            value("path", Text),
            value("claimer", Text),
            value("claimed_until", Timestamp),
        ],
    ),
    server_table(
        "schema",
        "the schema's version, which a file keeps in its header (`PRAGMA user_version`)",
        &[value("version", Integer)],
    ),
];

/// A column as a schema has it: table, column, type, whether it may hold NULL.
type Described = (String, String, Type, bool);

/// What `SCHEMA` says `dialect`'s tables hold, in its names.
fn described(dialect: Dialect) -> std::collections::BTreeSet<Described> {
    let has = |only: Option<(Dialect, &str)>| only.is_none_or(|(one, _)| one == dialect);
    let prefix = match dialect {
        Dialect::Sqlite => "",
        Dialect::Postgres => "mara_",
    };
    let mut columns = std::collections::BTreeSet::new();
    for table in SCHEMA.iter().filter(|t| has(t.only)) {
        for column in table.columns.iter().filter(|c| has(c.only)) {
            let name = match (dialect, column.on_server) {
                (Dialect::Postgres, Some((name, _))) => name,
                _ => column.name,
            };
            let (ty, null) = (column.ty.stored(dialect), column.null);
            columns.insert((format!("{prefix}{}", table.name), name.into(), ty, null));
        }
    }
    columns
}

/// The columns `backend`'s ledger has once migrated, as its catalogue says. SQLite lets a
/// primary key of text hold NULL (an old quirk of its own) where PostgreSQL does not: mara never
/// writes one, and a key's column is read as one that always holds a value.
fn migrated(backend: &Backend) -> (Dialect, std::collections::BTreeSet<Described>) {
    // Opened once, as a command would: migrated to the newest version.
    drop(backend.open());
    match (&backend.place, &backend._server) {
        (Place::File(file), _) => {
            let connection = rusqlite::Connection::open(file).unwrap();
            let mut statement = connection
                .prepare(
                    "SELECT m.name, c.name, c.type, c.\"notnull\", c.pk
                     FROM sqlite_master m JOIN pragma_table_info(m.name) c
                     WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
                )
                .unwrap();
            let rows = statement.query_map([], |row| {
                let (not_null, key): (bool, i64) = (row.get(3)?, row.get(4)?);
                let declared: String = row.get(2)?;
                let ty = Type::of(Dialect::Sqlite, &declared);
                Ok((row.get(0)?, row.get(1)?, ty, !not_null && key == 0))
            });
            let columns = rows.unwrap().map(Result::unwrap).collect();
            (Dialect::Sqlite, columns)
        }
        (Place::Server(_), Some(server)) => {
            let said = server.sql(
                "contract",
                "SELECT table_name, column_name, data_type, is_nullable
                 FROM information_schema.columns
                 WHERE table_schema = current_schema() AND table_name LIKE 'mara\\_%'",
            );
            let columns = said
                .lines()
                .map(|line| {
                    let [table, column, declared, null] = line.split('|').collect::<Vec<_>>()[..]
                    else {
                        panic!("psql said `{line}`")
                    };
                    let ty = Type::of(Dialect::Postgres, declared);
                    (table.into(), column.into(), ty, null == "YES")
                })
                .collect();
            (Dialect::Postgres, columns)
        }
        (Place::Server(_), None) => unreachable!("a server backend has its server"),
    }
}

#[test]
fn both_backends_migrate_to_the_one_schema_described() {
    for reason in (SCHEMA.iter().filter_map(|t| t.only))
        .chain(SCHEMA.iter().flat_map(|t| t.columns).filter_map(|c| c.only))
        .map(|(_, why)| why)
    {
        assert!(!reason.is_empty(), "what is one backend's says why");
    }
    for backend in backends() {
        let (dialect, has) = migrated(&backend);
        let described = described(dialect);
        let undescribed: Vec<_> = has.difference(&described).collect();
        let missing: Vec<_> = described.difference(&has).collect();
        assert!(
            undescribed.is_empty() && missing.is_empty(),
            "{}: the ledger's schema is not the one described (SCHEMA, in this file)\n\
             in the ledger, not described: {undescribed:#?}\n\
             described, not in the ledger: {missing:#?}\n\
             a column added to one backend is added to the other, or said to be its own and why",
            backend.name
        );
    }
}

/// The indexes both backends make beyond their tables' keys, by their SQLite names (a server's
/// are `mara_` and the same), with the columns they order by: what keeps `status`, `history`,
/// `mara serve`'s pages and a retention flat in the history (`tests/scale.rs` counts it).
const INDEXES: &[(&str, &str, &[&str], Option<Dialect>)] = &[
    (
        "runs_by_stack",
        "runs",
        &["stack", "started", "run_id"],
        None,
    ),
    ("runs_by_start", "runs", &["started", "run_id"], None),
    (
        "runs_by_operation",
        "runs",
        &["stack", "operation", "started", "run_id"],
        None,
    ),
    ("projects_by_path", "projects", &["path"], None),
    ("audit_by_run", "audit", &["run_id", "at"], None),
    // The log lines a server keeps.
    (
        "log_lines_by_run",
        "log_lines",
        &["run_id", "seq"],
        Some(Dialect::Postgres),
    ),
];

/// (index, table, columns) of the indexes `backend`'s ledger has beyond its keys, as its
/// catalogue says.
fn indexes(
    backend: &Backend,
) -> (
    Dialect,
    std::collections::BTreeSet<(String, String, String)>,
) {
    drop(backend.open());
    match (&backend.place, &backend._server) {
        (Place::File(file), _) => {
            let connection = rusqlite::Connection::open(file).unwrap();
            let mut statement = connection
                .prepare(
                    "SELECT m.name, m.tbl_name, group_concat(i.name, ', ')
                     FROM sqlite_master m JOIN pragma_index_info(m.name) i
                     WHERE m.type = 'index' AND m.sql IS NOT NULL GROUP BY m.name",
                )
                .unwrap();
            let rows = statement.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)));
            (Dialect::Sqlite, rows.unwrap().map(Result::unwrap).collect())
        }
        (Place::Server(_), Some(server)) => {
            let said = server.sql(
                "contract",
                "SELECT indexname, tablename, indexdef FROM pg_indexes
                 WHERE schemaname = current_schema() AND tablename LIKE 'mara\\_%'
                   AND indexname NOT LIKE '%\\_pkey' AND indexname NOT LIKE '%\\_key'",
            );
            let found = (said.lines())
                .map(|line| {
                    let [name, table, def] = line.split('|').collect::<Vec<_>>()[..] else {
                        panic!("psql said `{line}`")
                    };
                    let columns = def.rsplit_once('(').unwrap().1.trim_end_matches(')');
                    (name.into(), table.into(), columns.into())
                })
                .collect();
            (Dialect::Postgres, found)
        }
        (Place::Server(_), None) => unreachable!("a server backend has its server"),
    }
}

#[test]
fn both_backends_migrate_to_the_one_set_of_indexes_described() {
    for backend in backends() {
        let (dialect, has) = indexes(&backend);
        let prefix = match dialect {
            Dialect::Sqlite => "",
            Dialect::Postgres => "mara_",
        };
        let described: std::collections::BTreeSet<(String, String, String)> = (INDEXES.iter())
            .filter(|(.., only)| only.is_none_or(|d| d == dialect))
            .map(|(name, table, columns, _)| {
                (
                    format!("{prefix}{name}"),
                    format!("{prefix}{table}"),
                    columns.join(", "),
                )
            })
            .collect();
        assert_eq!(
            has, described,
            "{}: the ledger's indexes are not those described (INDEXES, in this file)",
            backend.name
        );
    }
}

#[test]
fn prune_removes_what_the_retention_does_not_keep_and_never_a_running_run() {
    for backend in backends() {
        let name = backend.name;
        let mut ledger = backend.open();
        let at = |id: &str, stack: &str, started: &str| RunStart {
            started: started.into(),
            projects: vec!["vpc".into()],
            ..start(id, stack, Operation::Up)
        };
        for (id, stack, started) in [
            ("r1", "dev", "2026-01-01T00:00:00.000Z"),
            ("r2", "dev", "2026-02-01T00:00:00.000Z"),
            ("q1", "qa", "2026-02-02T00:00:00.000Z"),
            ("r3", "dev", "2026-09-01T00:00:00.000Z"),
        ] {
            ledger.begin(&at(id, stack, started), true).unwrap();
            ledger.finish(id, RunStatus::Succeeded, started).unwrap();
        }
        // A run still running, started long ago and holding its lock.
        ledger
            .begin(&at("r0", "prod", "2025-01-01T00:00:00.000Z"), true)
            .unwrap();
        let since = Some("2026-06-01T00:00:00.000Z");
        // Said, not done.
        assert_eq!(
            ledger.prune(since, None, true).unwrap(),
            ["r1", "r2"],
            "{name}"
        );
        assert!(
            ledger.run("r1").unwrap().is_some(),
            "{name}: a dry run removes nothing"
        );
        // Done: the old runs of dev; qa's only run (its newest) and the running one kept.
        assert_eq!(
            ledger.prune(since, None, false).unwrap(),
            ["r1", "r2"],
            "{name}"
        );
        assert!(ledger.run("r1").unwrap().is_none(), "{name}");
        assert!(ledger.run("q1").unwrap().is_some(), "{name}");
        assert!(ledger.run("r0").unwrap().is_some(), "{name}");
        assert_eq!(ledger.stacks().unwrap(), ["dev", "prod", "qa"], "{name}");
        assert_eq!(ledger.count_runs().unwrap(), 3, "{name}");
        // By count: the newest one kept; each stack's newest kept anyway.
        assert!(
            ledger.prune(None, Some(1), false).unwrap().is_empty(),
            "{name}"
        );
        assert_eq!(ledger.runs(None, 10).unwrap().len(), 3, "{name}");
    }
}

/// Each operation on two stacks, in turn, and an up of a third; the last up of dev left running
/// and locked, drift checks with what their previews showed, prod's run cleared by `unlock
/// --force`. The runs' ids.
fn every_operation_on_two_stacks(ledger: &mut dyn Ledger) -> Vec<String> {
    use mara::ledger::Previewed;
    use mara::ledger::writes::{Entry, RunOf};
    let mut ids = Vec::new();
    for k in 0..14 {
        let (id, stack) = (format!("r{k:02}"), ["dev", "qa"][k % 2]);
        let operation = Operation::ALL[(k / 2) % 5];
        let start = RunStart {
            projects: vec!["network".into(), "cluster".into()],
            ..start(&id, stack, operation)
        };
        ledger.begin(&start, operation.mutates()).unwrap();
        let preview = (operation == Operation::Drift).then(|| {
            Box::new(Previewed {
                changed_outputs: Some(vec!["url".into()]),
                ..Previewed::default()
            })
        });
        let end = Entry::ProjectFinished {
            run_id: id.clone(),
            project: ended("network", ProjectStatus::Succeeded),
            of: Some(RunOf {
                stack: stack.into(),
                operation,
            }),
            outputs: None,
            preview,
        };
        ledger.write(&[end]).unwrap();
        if id != "r10" {
            let at = "2026-11-25T11:00:00.000Z";
            ledger.finish(&id, RunStatus::Succeeded, at).unwrap();
        }
        ids.push(id);
    }
    ledger
        .begin(&start("u1", "prod", Operation::Up), true)
        .unwrap();
    ledger.unlock("prod", &me()).unwrap();
    ids.push("u1".into());
    ids
}

#[test]
fn the_reads_made_at_once_say_what_the_reads_one_by_one_say() {
    use mara::ledger::RunRecord;
    let json = |runs: &[RunRecord]| serde_json::to_string(runs).unwrap();
    for backend in backends() {
        let name = backend.name;
        let mut ledger = backend.open();
        let ids = every_operation_on_two_stacks(ledger.as_mut());
        // Page by page, as `history --output json` reads them: what one read of them all says.
        for stack in [None, Some("dev")] {
            let all = ledger.runs(stack, 100).unwrap();
            let mut paged = ledger.runs(stack, 4).unwrap();
            while let Some(last) = paged.last().cloned() {
                let next = ledger.runs_after(stack, &last, 4).unwrap();
                if next.is_empty() {
                    break;
                }
                paged.extend(next);
            }
            assert_eq!(json(&paged), json(&all), "{name}: {stack:?}");
            let one_by_one: Vec<RunRecord> = (all.iter())
                .map(|r| ledger.run(&r.run_id).unwrap().unwrap())
                .collect();
            let at_once = ledger.with_projects(all.clone()).unwrap();
            assert_eq!(json(&at_once), json(&one_by_one), "{name}: {stack:?}");
        }
        // The last run of each operation on each stack; the locks; the previews.
        let stacks = ledger.stacks().unwrap();
        assert_eq!(stacks, ["dev", "prod", "qa"], "{name}");
        let last = ledger.last_runs(&stacks, &Operation::ALL).unwrap();
        let mut each: Vec<RunRecord> = (stacks.iter())
            .flat_map(|s| Operation::ALL.map(|o| (s.clone(), o)))
            .filter_map(|(s, o)| ledger.last_run(&s, o).unwrap())
            .map(|mut r| {
                r.projects.clear();
                r
            })
            .collect();
        each.sort_by(|a, b| (&b.started, &b.run_id).cmp(&(&a.started, &a.run_id)));
        assert_eq!(last.len(), 11, "{name}: {last:?}");
        assert_eq!(json(&last), json(&each), "{name}");
        let holders = ledger.holders().unwrap();
        assert_eq!(holders.keys().collect::<Vec<_>>(), ["dev"], "{name}");
        assert_eq!(
            Some(&holders["dev"]),
            ledger.holder("dev").unwrap().as_ref()
        );
        let previews = ledger.previews_of(&ids).unwrap();
        for id in &ids {
            let one = ledger.previews(id).unwrap();
            assert_eq!(
                previews.get(id).cloned().unwrap_or_default(),
                one,
                "{name}: {id}"
            );
        }
        assert_eq!(previews.len(), 2, "{name}: the two drift checks'");
        let asked = vec!["r03".to_string(), "gone".to_string()];
        assert_eq!(ledger.recorded(&asked).unwrap(), ["r03".to_string()].into());
    }
}
