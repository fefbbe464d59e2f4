//! The run's writes go to the ledger in batches, off the engines' path (docs/commands.md,
//! "status, history, logs"): nothing shown is lost, and nothing is out of order. On both
//! backends — the workspace's SQLite file and a PostgreSQL server of the test's own. (A server
//! lost during a batch is retried: `postgres.rs`, `a_short_outage_of_the_server_costs_the_run_nothing`.)

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::Deployment;
use common::postgres::Server;

fn mara(copy: &Deployment, url: Option<&str>, args: &[&str]) -> Command {
    common::mara_on(copy, url, args)
}

/// The ledgers: the workspace's own, and a server's (when PostgreSQL runs here).
fn ledgers() -> Vec<Option<Server>> {
    let mut ledgers = vec![None];
    ledgers.extend(Server::start().map(Some));
    ledgers
}

/// The project of a line that shows a project's end (`[path] succeeded in 0.1s`).
fn ended(line: &str) -> Option<String> {
    let (path, said) = line.strip_prefix('[')?.split_once("] ")?;
    (said.starts_with("succeeded in ") || said.starts_with("unchanged")).then(|| path.to_string())
}

/// The last run's projects, as `status` shows them: path and status.
fn recorded(copy: &Deployment, url: Option<&str>) -> Vec<(String, String)> {
    let output = mara(copy, url, &["--output", "json", "status"])
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
    let run = if status.is_array() {
        status[0].clone()
    } else {
        status
    };
    run["projects"]
        .as_array()
        .unwrap_or_else(|| panic!("{run:#}"))
        .iter()
        .map(|p| {
            (
                p["path"].as_str().unwrap().to_string(),
                p["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_project_s_end_once_shown_survives_kill_9() {
    for server in ledgers() {
        // Killed right after the first end, then the second, then the third is shown.
        for ends in 1..=3 {
            // A database each: a killed run holds its lock until its lease runs out.
            let url = server.as_ref().map(|s| s.url(&format!("kill{ends}")));
            let url = url.as_deref();
            let copy = Deployment::of("mara-local");
            let mut run = mara(&copy, url, &["up", "--yes", "--parallel", "1"])
                .env("PULUMI_STAND_IN_DELAY_MS", "100")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut shown = Vec::new();
            for line in BufReader::new(run.stdout.take().unwrap()).lines() {
                let line = line.unwrap();
                if let Some(project) = ended(&line) {
                    shown.push(project);
                    if shown.len() == ends {
                        run.kill().unwrap();
                        break;
                    }
                }
            }
            let err = run.wait_with_output().unwrap().stderr;
            let err = String::from_utf8_lossy(&err);
            assert_eq!(shown.len(), ends, "the run ended before {ends} ends: {err}");
            let recorded = recorded(&copy, url);
            for project in &shown {
                let status = recorded.iter().find(|(path, _)| path == project);
                assert!(
                    status.is_some_and(|(_, s)| s == "succeeded"),
                    "{project} was shown ended, on {}, and is recorded {status:?}: {recorded:?}",
                    url.unwrap_or("SQLite")
                );
            }
        }
    }
}

#[test]
fn a_run_s_projects_and_lines_are_recorded_in_order() {
    for server in ledgers() {
        let url = server.as_ref().map(|s| s.url("order"));
        let url = url.as_deref();
        let copy = Deployment::of("mara-local");
        let output = mara(&copy, url, &["up", "--yes", "--parallel", "4"])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let shown = String::from_utf8_lossy(&output.stdout);
        // Every project that started, in the run's order (recorded as it began), whatever
        // order they started in.
        let mut started: Vec<&str> = shown
            .lines()
            .filter_map(|l| l.strip_prefix('[')?.strip_suffix("] up started"))
            .collect();
        let order = mara(&copy, url, &["show-execution", "--format", "list"])
            .output()
            .unwrap();
        let order = String::from_utf8_lossy(&order.stdout).into_owned();
        let recorded = recorded(&copy, url);
        let paths: Vec<&str> = recorded.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            order.lines().collect::<Vec<_>>(),
            "on {}",
            url.unwrap_or("SQLite")
        );
        started.sort();
        let mut all = paths.clone();
        all.sort();
        assert_eq!(all, started);
        assert!(
            recorded.iter().all(|(_, s)| s == "succeeded"),
            "{recorded:?}"
        );
        // Nothing changed since: the deployed fingerprints were recorded, batch after batch.
        let output = mara(&copy, url, &["up", "--changed", "--dry-run"])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&output.stdout);
        let skipped = out
            .lines()
            .filter(|l| l.ends_with(": unchanged since its last successful up"))
            .count();
        assert_eq!(skipped, paths.len(), "{out}");
        // A server keeps each project's lines in the order the engine printed them.
        let Some(url) = url else { continue };
        let logs = copy.root().join(".mara/logs");
        let run_dir = std::fs::read_dir(&logs)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        for project in &paths {
            let file = std::fs::read_to_string(run_dir.join(format!("{project}.log"))).unwrap();
            let output = mara(&copy, Some(url), &["--output", "json", "logs", project])
                .output()
                .unwrap();
            let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
            let stored: Vec<&str> = json["projects"][0]["lines"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l.as_str().unwrap())
                .collect();
            assert!(!stored.is_empty(), "{project}: {json:#}");
            let in_file: Vec<&str> = file.lines().filter(|l| stored.contains(l)).collect();
            assert_eq!(stored, in_file, "{project}'s lines, in order");
        }
    }
}
