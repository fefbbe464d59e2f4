//! A team's ledger under faults (docs/decisions.md, "A lease is never held twice"): two machines
//! share one PostgreSQL server; one of them loses it for longer than its lease — the network to
//! it stalls, or its process is stopped — and the other takes the stack over. Whatever happens,
//! no two machines' engine operations on the stack overlap: judged from the intervals the Pulumi
//! stand-in records for each call.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Deployment;
use common::postgres::Server;
use common::proxy::Proxy;

fn mara(copy: &Deployment, url: &str, args: &[&str]) -> Command {
    common::mara_on(copy, Some(url), args)
}

/// The `[start, end]` of every `up` the stand-in ran in `copy`, with its project.
fn operations(copy: &Deployment) -> Vec<(f64, f64, String)> {
    copy.calls()
        .iter()
        .filter(|c| c["argv"].as_array().unwrap().iter().any(|a| a == "up"))
        .map(|c| {
            (
                c["start"].as_f64().unwrap(),
                c["end"].as_f64().unwrap(),
                c["project"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Asserts that no operation of `here` overlaps one of `there`.
fn never_overlap(here: &Deployment, there: &Deployment) {
    let (mine, theirs) = (operations(here), operations(there));
    assert!(!theirs.is_empty(), "the other machine ran nothing");
    for (a_start, a_end, a) in &mine {
        for (b_start, b_end, b) in &theirs {
            assert!(
                a_end <= b_start || b_end <= a_start,
                "{a} [{a_start}, {a_end}] on one machine overlaps {b} [{b_start}, {b_end}] on the other"
            );
        }
    }
}

/// An `up` of every project, one at a time, each `delay_ms` long, under a lease of `lease` s.
fn slow_up(copy: &Deployment, url: &str, delay_ms: u64, lease: u64) -> Child {
    mara(copy, url, &["up", "--yes", "--parallel", "1"])
        .env("PULUMI_STAND_IN_DELAY_MS", delay_ms.to_string())
        .env("MARA_LEASE_SECONDS", lease.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until `copy`'s stand-in has finished `done` operations.
fn wait_for_operations(copy: &Deployment, done: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while operations(copy).len() < done {
        assert!(Instant::now() < deadline, "the run did not get going");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The other machine's `up`, tried until the stack's lock is free to take over (exit 5 before):
/// its exit code and stderr.
fn take_over(there: &Deployment, url: &str) -> (i32, String) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let output = mara(there, url, &["up", "--yes", "--parallel", "1"])
            .env("PULUMI_STAND_IN_DELAY_MS", "500")
            .env("MARA_LEASE_SECONDS", "6")
            .output()
            .unwrap();
        let code = output.status.code().unwrap_or(-1);
        let err = String::from_utf8_lossy(&output.stderr).into_owned();
        if code != 5 {
            return (code, err);
        }
        assert!(Instant::now() < deadline, "never taken over: {err}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// How many writes the journals in `dir` keep (one JSON line each).
fn kept(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    std::fs::read_to_string(e.path())
                        .unwrap_or_default()
                        .lines()
                        .count()
                })
                .sum()
        })
        .unwrap_or(0)
}

/// What the machine that lost its lease said, once it ended: its exit code and stderr.
fn ended(run: Child) -> (i32, String) {
    let output = run.wait_with_output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_machine_cut_off_from_its_server_starts_nothing_once_its_lease_may_be_gone() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("stalled");
    let proxy = Proxy::to(server.port);
    let through = url.replace(
        &format!(":{}/", server.port),
        &format!(":{}/", proxy.port()),
    );
    let (here, there) = (Deployment::of("mara-local"), Deployment::of("mara-local"));
    let run = slow_up(&here, &through, 1500, 6);
    wait_for_operations(&here, 2);
    // Its server out of reach for longer than three leases; meanwhile the other machine takes
    // the stack over and deploys it.
    proxy.stall();
    let stalled = Instant::now();
    std::thread::sleep(Duration::from_secs(8));
    let (code, err) = take_over(&there, &url);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("took over the lock"), "{err}");
    std::thread::sleep(Duration::from_secs(19).saturating_sub(stalled.elapsed()));
    proxy.resume();
    let (code, err) = ended(run);
    never_overlap(&here, &there);
    assert!(operations(&here).len() < 14, "it stopped short");
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("the stack's lease (6 s) could not be confirmed in time")
            && err.contains("no project was started after that"),
        "{err}"
    );
}

#[test]
fn a_machine_stopped_past_its_lease_starts_nothing_when_it_is_continued() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("stopped");
    let (here, there) = (Deployment::of("mara-local"), Deployment::of("mara-local"));
    let run = slow_up(&here, &url, 1500, 6);
    wait_for_operations(&here, 2);
    // A laptop's lid closed for the lease and three seconds more: its engine runs on, mara
    // does not.
    let pid = run.id() as i32;
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let stopped = Instant::now();
    let other = std::thread::scope(|scope| {
        let other = scope.spawn(|| take_over(&there, &url));
        std::thread::sleep(Duration::from_secs(9).saturating_sub(stopped.elapsed()));
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };
        other.join().unwrap()
    });
    assert_eq!(other.0, 0, "{}", other.1);
    let (code, err) = ended(run);
    never_overlap(&here, &there);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("no project was started after that"), "{err}");
}

#[test]
fn a_server_that_does_not_answer_fails_the_run_before_it_starts_and_signals_still_work() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("frozen");
    let copy = Deployment::of("mara-local");
    server.freeze();
    // Unreachable at the start: exit 3, within the bound on connecting.
    let started = Instant::now();
    let output = mara(&copy, &url, &["up", "--yes"]).output().unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{err}");
    assert!(
        err.contains("cannot connect: the server did not answer within 10 s"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert!(copy.calls().is_empty(), "nothing ran");
    // A Ctrl-C (or SIGTERM) while it waits ends it at once.
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let child = mara(&copy, &url, &["up", "--yes"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        let signalled = Instant::now();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, signal) };
        let output = child.wait_with_output().unwrap();
        assert!(
            signalled.elapsed() < Duration::from_secs(3),
            "signal {signal} took {:?}",
            signalled.elapsed()
        );
        assert_eq!(
            output.status.code(),
            Some(130),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    server.thaw();
    let output = mara(&copy, &url, &["up", "--yes", "--only", "cluster"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn an_outage_longer_than_the_lease_loses_no_record() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let url = server.url("outage");
    let (here, there) = (Deployment::of("mara-local"), Deployment::of("mara-local"));
    let run = slow_up(&here, &url, 1000, 6);
    wait_for_operations(&here, 1);
    // Down for longer than the run can wait for it: it drains, and keeps what the server did
    // not take.
    server.stop();
    let stopped = Instant::now();
    std::thread::sleep(Duration::from_secs(15));
    let (code, err) = ended(run);
    assert_eq!(code, 5, "{err}");
    assert!(
        stopped.elapsed() < Duration::from_secs(30),
        "the run ended in time"
    );
    server.resume();
    let journal = here.root().join(".mara/journal");
    assert!(kept(&journal) > 0, "kept in {}", journal.display());
    // The machine's next command reaches the server: what ran is recorded, and the run's end.
    let (_, history, err) = {
        let output = mara(&here, &url, &["--output", "json", "history"])
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    assert!(history.contains("\"run_id\""), "{history}{err}");
    assert_eq!(kept(&journal), 0, "the journal was made, and emptied");
    // Seen from the other machine: each project that ran, as it ended; none running.
    let output = mara(&there, &url, &["--output", "json", "status"])
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let run = &status[0];
    assert_eq!(run["status"], "failed", "{run:#}");
    let projects = run["projects"].as_array().unwrap();
    let ran: Vec<String> = operations(&here).into_iter().map(|(_, _, p)| p).collect();
    for project in projects {
        assert_ne!(project["status"], "running", "{run:#}");
    }
    let recorded = projects
        .iter()
        .filter(|p| p["status"] == "succeeded" || p["status"] == "unchanged")
        .count();
    assert_eq!(
        recorded,
        ran.len(),
        "every project that ran: {ran:?}\n{run:#}"
    );
}

#[test]
fn a_run_whose_server_stalls_ends_at_once_on_sigterm_keeping_its_writes() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("sigterm");
    let proxy = Proxy::to(server.port);
    let through = url.replace(
        &format!(":{}/", server.port),
        &format!(":{}/", proxy.port()),
    );
    let here = Deployment::of("mara-local");
    let run = slow_up(&here, &through, 1000, 6);
    wait_for_operations(&here, 1);
    // Stalled while projects still run (before the lease could run out): the run's writes
    // wait on the server when SIGTERM comes.
    proxy.stall();
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
    let signalled = Instant::now();
    let (code, err) = ended(run);
    assert!(
        signalled.elapsed() < Duration::from_secs(4),
        "it waited {:?} after SIGTERM: {err}",
        signalled.elapsed()
    );
    assert_eq!(code, 130, "{err}");
    // What the server did not take is kept, and made once it answers again.
    let journal = here.root().join(".mara/journal");
    assert!(kept(&journal) > 0, "{err}");
    proxy.resume();
    let output = mara(&here, &through, &["--output", "json", "history"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let history: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(history[0]["status"], "cancelled", "{history:#}");
}
