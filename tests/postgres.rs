//! A team's ledger on a real PostgreSQL server (docs/commands.md, "A team's ledger"): copies of
//! the example workspace stand for machines that share nothing but the server, through
//! `MARA_LEDGER_URL`.

mod common;

use std::process::{Command, Stdio};

use common::Deployment;
use common::postgres::Server;

/// `mara` of a copy, as a plain process (to run several at once), with the ledger's URL.
fn mara(copy: &Deployment, url: &str, args: &[&str]) -> Command {
    common::mara_on(copy, Some(url), args)
}

fn output(command: &mut Command) -> (i32, String, String) {
    let output = command.output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn many_runners_starting_at_once_migrate_the_schema_once() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("fresh");
    let copy = Deployment::of("mara-local");
    let children: Vec<_> = (0..8)
        .map(|_| {
            mara(&copy, &url, &["history"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert_eq!(
        server.sql("fresh", "SELECT count(*), max(version) FROM mara_schema"),
        format!("1|{}\n", mara::ledger::postgres::schema_version()),
        "one version row, at the last version"
    );
}

#[test]
fn a_run_on_one_machine_is_seen_from_another() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("team");
    let (here, there) = (Deployment::of("mara-local"), Deployment::of("mara-local"));
    let (code, _, err) = output(&mut mara(&here, &url, &["up", "--yes"]));
    assert_eq!(code, 0, "{err}");
    // The other machine has no ledger of its own: what it knows is on the server.
    let (code, history, err) = output(&mut mara(&there, &url, &["--output", "json", "history"]));
    assert_eq!(code, 0, "{err}");
    let runs: serde_json::Value = serde_json::from_str(&history).unwrap();
    assert_eq!(runs[0]["operation"], "up", "{runs:#}");
    assert_eq!(runs[0]["status"], "succeeded", "{runs:#}");
    assert!(!there.root().join(".mara/ledger.db").exists());
    // --changed on a fresh clone: nothing changed since the last successful run anywhere.
    let (code, out, err) = output(&mut mara(&there, &url, &["up", "--changed", "--dry-run"]));
    assert_eq!(code, 0, "{err}");
    let skipped = out
        .lines()
        .filter(|l| {
            l.starts_with("skip ") && l.ends_with(": unchanged since its last successful up")
        })
        .count();
    assert_eq!(skipped, 14, "every project is unchanged: {out}");
}

#[test]
fn of_eight_runs_on_one_stack_exactly_one_proceeds() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("contended");
    let copies: Vec<Deployment> = (0..8).map(|_| Deployment::of("mara-local")).collect();
    let children: Vec<_> = copies
        .iter()
        .map(|copy| {
            mara(copy, &url, &["up", "--yes"])
                .env("PULUMI_STAND_IN_DELAY_MS", "300")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut codes = Vec::new();
    for child in children {
        let output = child.wait_with_output().unwrap();
        let code = output.status.code().unwrap_or(-1);
        if code == 5 {
            let err = String::from_utf8_lossy(&output.stderr);
            assert!(err.contains("is locked by another run: run "), "{err}");
        }
        codes.push(code);
    }
    codes.sort();
    assert_eq!(codes, [0, 5, 5, 5, 5, 5, 5, 5], "{codes:?}");
    assert_eq!(
        server.sql("contended", "SELECT count(*) FROM mara_runs"),
        "1\n",
        "a refused run is not recorded"
    );
}

#[test]
fn no_secret_is_stored_on_the_server() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("secrets");
    let copy = Deployment::of("mara-local");
    let (code, _, err) = output(&mut mara(&copy, &url, &["up", "--yes"]));
    assert_eq!(code, 0, "{err}");
    let secrets: Vec<String> =
        std::fs::read_to_string(copy.root().join("config/pulumi/environment"))
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("MARA_SECRET_"))
            .filter_map(|l| l.split_once('=').map(|(_, v)| v.to_string()))
            .collect();
    assert!(!secrets.is_empty());
    let dump = server.dump("secrets");
    assert!(dump.contains("mara_runs"), "the dump has the tables");
    for secret in &secrets {
        assert!(
            !dump.contains(secret.as_str()),
            "a secret is in the database"
        );
    }
}

#[test]
fn a_workspace_history_moves_to_the_server() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("moved");
    let here = Deployment::of("mara-local");
    let own = |args: &[&str]| {
        let mut command = mara(&here, &url, args);
        command.env_remove("MARA_LEDGER_URL");
        output(&mut command)
    };
    assert_eq!(own(&["up", "--yes"]).0, 0);
    let (code, out, _) = own(&["ledger"]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "Ledger: .mara/ledger.db (this workspace's own), 1 run recorded\n"
    );
    let (code, out, err) = own(&["ledger", "migrate", "--to", &url]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("Copied 1 of 1 run from .mara/ledger.db to postgres://mara@127.0.0.1:"),
        "{out}"
    );
    assert!(out.contains("Use it from now on"), "{out}");
    // Again, to the server the workspace is pointed at: nothing twice.
    let (code, out, err) = output(&mut mara(&here, &url, &["ledger", "migrate"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("Copied 0 of 1 run") && out.contains("This workspace uses it already."),
        "again, nothing twice: {out}"
    );
    let (code, out, _) = output(&mut mara(&here, &url, &["ledger"]));
    assert_eq!(code, 0);
    assert!(
        out.ends_with("(from MARA_LEDGER_URL), 1 run recorded\n"),
        "{out}"
    );
    // Another machine knows what is deployed, and reads the copied run's logs.
    let there = Deployment::of("mara-local");
    let (code, logs, err) = output(&mut mara(&there, &url, &["logs", "sirius"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        !logs.contains("(no log)") && !logs.trim().is_empty(),
        "{logs}"
    );
    let (code, out, err) = output(&mut mara(&there, &url, &["up", "--changed", "--dry-run"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("skip ")).count(),
        14,
        "{out}"
    );
}

#[test]
fn cancel_and_resume_work_from_another_machine() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("remote");
    let (here, there) = (Deployment::of("mara-local"), Deployment::of("mara-local"));
    // A slow run here, cancelled from there.
    let run = mara(&here, &url, &["up", "--yes", "--parallel", "1"])
        .env("PULUMI_STAND_IN_DELAY_MS", "400")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, out, _) = output(&mut mara(&there, &url, &["--output", "json", "status"]));
        // Running, with a project done: the resume has something to leave out.
        if out.contains("\"running\"") && out.contains("\"succeeded\"") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run never showed: {out}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (code, out, err) = output(&mut mara(&there, &url, &["cancel"]));
    assert_eq!(code, 0, "{out}{err}");
    let finished = run.wait_with_output().unwrap();
    assert_eq!(finished.status.code(), Some(130));
    let (_, history, _) = output(&mut mara(&there, &url, &["--output", "json", "history"]));
    let runs: serde_json::Value = serde_json::from_str(&history).unwrap();
    assert_eq!(runs[0]["status"], "cancelled", "{runs:#}");
    // There, --resume picks up what the cancelled run did not complete.
    let (code, out, err) = output(&mut mara(&there, &url, &["up", "--resume", "--dry-run"]));
    assert_eq!(code, 0, "{err}");
    let resumed = out.lines().filter(|l| l.starts_with("# ")).count();
    assert!(resumed > 0 && resumed < 14, "{out}");
}

#[test]
fn tls_is_checked_against_the_system_roots() {
    let Some((server, authority)) = Server::start_tls() else {
        return;
    };
    let url = server
        .url("tls")
        .replace("sslmode=disable", "sslmode=require");
    let copy = Deployment::of("mara-local");
    // The authority trusted (as the system's roots, through SSL_CERT_FILE): connected over TLS.
    let (code, out, err) = output(mara(&copy, &url, &["ledger"]).env("SSL_CERT_FILE", &authority));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("(from MARA_LEDGER_URL), 0 runs recorded"),
        "{out}"
    );
    // Not trusted: refused before anything, saying why.
    let (code, _, err) = output(
        mara(&copy, &url, &["ledger"])
            .env("SSL_CERT_FILE", copy.root().join("none.pem"))
            .env("SSL_CERT_DIR", copy.root().join("none")),
    );
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("certificate") && err.contains("point SSL_CERT_FILE at the CA certificate"),
        "{err}"
    );
    assert!(
        !err.contains("sslmode=disable"),
        "TLS is not talked out of: {err}"
    );
}

/// Waits until `copy` sees a run of the stack running, with `projects` of its projects done.
fn wait_for_running(copy: &Deployment, url: &str, done: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, out, _) = output(&mut mara(copy, url, &["--output", "json", "status"]));
        if out.contains("\"running\"") && out.matches("\"succeeded\"").count() >= done {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run never showed: {out}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn a_holder_that_died_is_taken_over_once_its_lease_runs_out() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("lease");
    let (here, there) = (Deployment::of("mara-local"), Deployment::of("mara-local"));
    let mut run = mara(&here, &url, &["up", "--yes", "--parallel", "1"])
        .env("PULUMI_STAND_IN_DELAY_MS", "1000")
        .env("MARA_LEASE_SECONDS", "3")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_running(&there, &url, 0);
    run.kill().unwrap();
    run.wait().unwrap();
    let killed = std::time::Instant::now();
    // Within its lease the dead holder still holds the stack, wherever it ran.
    let (code, _, err) = output(
        mara(&there, &url, &["up", "--yes", "--only", "cluster"]).env("MARA_LEASE_SECONDS", "3"),
    );
    if killed.elapsed() < std::time::Duration::from_secs(3) {
        assert_eq!(code, 5, "{err}");
    }
    std::thread::sleep(std::time::Duration::from_millis(3500));
    // Any machine sees that its lease lapsed: abandoned, not running.
    let (_, status, _) = output(&mut mara(&there, &url, &["--output", "json", "status"]));
    assert!(
        status.contains("\"abandoned\"") && !status.contains("\"running\""),
        "{status}"
    );
    let (code, _, err) = output(
        mara(&there, &url, &["up", "--yes", "--only", "cluster"]).env("MARA_LEASE_SECONDS", "3"),
    );
    assert_eq!(code, 0, "taken over after the lease: {err}");
    let (_, history, _) = output(&mut mara(&there, &url, &["--output", "json", "history"]));
    let runs: serde_json::Value = serde_json::from_str(&history).unwrap();
    let statuses: Vec<&str> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["succeeded", "abandoned"], "{runs:#}");
}

/// An `up` of `copy`, one project at a time, each taking `delay_ms`, under a lease of
/// `lease` seconds: a run to act on while it goes.
fn started_slowly(copy: &Deployment, url: &str, delay_ms: u64, lease: u64) -> std::process::Child {
    mara(copy, url, &["up", "--yes", "--parallel", "1"])
        .env("PULUMI_STAND_IN_DELAY_MS", delay_ms.to_string())
        .env("MARA_LEASE_SECONDS", lease.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_run_that_loses_its_server_starts_nothing_more_and_says_so() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let url = server.url("outage");
    let (here, there) = (Deployment::of("mara-local"), Deployment::of("mara-local"));
    let run = started_slowly(&here, &url, 1500, 2);
    wait_for_running(&there, &url, 1);
    server.stop();
    let finished = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&finished.stderr);
    let out = String::from_utf8_lossy(&finished.stdout);
    assert_eq!(finished.status.code(), Some(5), "{out}{err}");
    assert!(
        err.contains("the stack's lease (2 s) could not be confirmed in time")
            && err.contains("no project was started after that"),
        "{err}"
    );
    // The projects not started say why.
    assert!(
        out.contains("not started: the stack's lease (2 s) could not be confirmed in time"),
        "{out}"
    );
    let started = here
        .calls()
        .iter()
        .filter(|c| c["argv"].as_array().unwrap().iter().any(|a| a == "up"))
        .count();
    assert!(
        started < 14,
        "no project started once the lease was lost: {started}"
    );
    // Back again, the records say what the server saw: nothing is lost, and the run that
    // could not finish its record is not shown running.
    server.resume();
    let (code, status, err) = output(&mut mara(&there, &url, &["--output", "json", "status"]));
    assert_eq!(code, 0, "{err}");
    assert!(!status.contains("\"status\": \"running\""), "{status}");
    assert!(status.matches("\"succeeded\"").count() >= 1, "{status}");
}

#[test]
fn logs_and_follow_work_from_another_machine() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("logs");
    let (here, there) = (Deployment::of("mara-local"), Deployment::of("mara-local"));
    let run = mara(&here, &url, &["up", "--yes", "--parallel", "1"])
        .env("PULUMI_STAND_IN_DELAY_MS", "300")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_running(&there, &url, 0);
    // Its lease says it is alive: no pid says otherwise, even one of this host's that is gone
    // (machines may share a host name).
    server.sql("logs", "UPDATE mara_runs SET pid = 999999");
    let (_, status, _) = output(&mut mara(&there, &url, &["--output", "json", "status"]));
    assert!(status.contains("\"status\": \"running\""), "{status}");
    // Followed from there: every project's lines as they come, until the run ends.
    let (code, followed, err) = output(&mut mara(&there, &url, &["logs", "--follow"]));
    assert_eq!(code, 0, "{err}");
    assert!(run.wait_with_output().unwrap().status.success());
    for project in [
        "infrastructure/local/cluster",
        "kubernetes/applications/sirius",
    ] {
        assert!(
            followed.contains(&format!("[{project}] ")),
            "{project} followed: {followed}"
        );
    }
    // Read afterwards from there, where no log file exists: the same lines.
    assert!(!there.root().join(".mara/logs").exists());
    let (code, one, err) = output(&mut mara(&there, &url, &["logs", "sirius"]));
    assert_eq!(code, 0, "{err}");
    let here_file = std::fs::read_dir(here.root().join(".mara/logs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("kubernetes/applications/sirius.log");
    let file = std::fs::read_to_string(here_file).unwrap();
    let first = one.lines().next().unwrap();
    assert!(
        file.contains(first),
        "the file holds the stored lines: {one}\n---\n{file}"
    );
    // For programs: the same lines, in JSON.
    let (code, json, err) = output(&mut mara(
        &there,
        &url,
        &["--output", "json", "logs", "sirius"],
    ));
    assert_eq!(code, 0, "{err}");
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        json["projects"][0]["path"],
        "kubernetes/applications/sirius"
    );
    assert_eq!(json["projects"][0]["lines"][0], first, "{json:#}");
}

/// A workspace whose one project prints its environment, as a careless hook would.
fn printing_environment() -> common::Workspace {
    common::Workspace::new(&[
        ("mara.toml", "provider = \"cmd\"\nengine = \"command\"\n"),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        ("config/pulumi/Pulumi.dev.yaml", "config: {}\n"),
        (
            "providers/cmd.toml",
            "description = \"One command\"\n\n[[project]]\npath = \"envdump\"\nup = \"env; echo {} > \\\"$MARA_OUTPUTS\\\"\"\ndestroy = \"true\"\n",
        ),
    ])
}

/// Everything a run left in the workspace and on the server, as text.
fn everything(ws: &common::Workspace, server: &Server, database: &str, out: &str) -> String {
    let mut all = format!("{out}\n{}", server.dump(database));
    for (_, content) in common::tree(ws.path()) {
        if let Some(bytes) = content {
            all.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    all
}

#[test]
fn the_ledgers_password_reaches_no_engine_output_file_or_table() {
    let Some(server) = Server::start() else {
        return;
    };
    // The test server trusts its users: a password given is accepted, and ignored.
    let url = server
        .url("password")
        .replace("postgres://mara@", "postgres://mara:Ledger-pw-7Zq81@");
    let ws = printing_environment();
    let output = ws
        .mara()
        .env("MARA_LEDGER_URL", &url)
        .args(["up", "--yes"])
        .output()
        .unwrap();
    let out = common::stdout(&output) + &common::stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{out}");
    assert!(
        out.contains("PULUMI_STACK=dev"),
        "the environment printed: {out}"
    );
    let all = everything(&ws, &server, "password", &out);
    assert!(!all.contains("Ledger-pw-7Zq81"), "the password leaked");
    assert!(
        !all.contains("MARA_LEDGER_URL="),
        "the URL reached the engine"
    );

    // The password in PGPASSWORD, the URL in mara.toml: PGPASSWORD is the ledger's, and no
    // engine gets it either.
    let bare = server.url("password");
    ws.write(
        "mara.toml",
        &format!("provider = \"cmd\"\nengine = \"command\"\nledger = \"{bare}\"\n"),
    );
    let output = ws
        .mara()
        .env("PGPASSWORD", "Pg-pw-3Xk55")
        .args(["up", "--yes"])
        .output()
        .unwrap();
    let out = common::stdout(&output) + &common::stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{out}");
    let all = everything(&ws, &server, "password", &out);
    assert!(
        !all.contains("Pg-pw-3Xk55") && !all.contains("PGPASSWORD="),
        "{out}"
    );

    // Shown without the password whatever form it takes, and refused in mara.toml in any.
    for given in [
        url.clone(),
        format!("{bare}&password=Ledger-pw-7Zq81"),
        bare.replace("postgres://mara@", "postgres://mara:Ledger/pw+7Zq81==@"),
    ] {
        let output = ws
            .mara()
            .env("MARA_LEDGER_URL", &given)
            .args(["ledger", "--output", "json"])
            .output()
            .unwrap();
        let out = common::stdout(&output) + &common::stderr(&output);
        assert!(!out.contains("7Zq81"), "{given}: {out}");
        ws.write(
            "mara.toml",
            &format!("provider = \"cmd\"\nengine = \"command\"\nledger = \"{given}\"\n"),
        );
        let output = ws.mara().arg("ledger").output().unwrap();
        let err = common::stderr(&output);
        assert_eq!(output.status.code(), Some(3), "{given}: {err}");
        assert!(
            err.contains("holds a password") && !err.contains("7Zq81"),
            "{err}"
        );
    }
}

#[test]
fn what_the_ledger_is_told_is_checked_before_anything_runs() {
    let Some(server) = Server::start() else {
        return;
    };
    let copy = Deployment::of("mara-local");
    let url = server.url("checked");
    for (url, lease, expected) in [
        ("", None, "MARA_LEDGER_URL is set, but empty"),
        ("mysql://h/d", None, "it must start with `postgres://`"),
        ("host=h dbname=d", None, "it must start with `postgres://`"),
        (url.as_str(), Some("abc"), "MARA_LEASE_SECONDS is `abc`"),
        (url.as_str(), Some("99999"), "from 2 to 3600"),
    ] {
        let mut command = mara(&copy, url, &["up", "--yes"]);
        if let Some(lease) = lease {
            command.env("MARA_LEASE_SECONDS", lease);
        }
        let (code, _, err) = output(&mut command);
        assert_eq!(code, 3, "{url} {lease:?}: {err}");
        assert!(err.contains(expected), "{url} {lease:?}: {err}");
        assert!(copy.calls().is_empty(), "nothing ran: {err}");
    }
    // A server that is not there, for every operation: what to check, before any engine call.
    for operation in [
        &["up", "--yes"][..],
        &["preview"],
        &["destroy", "--yes"],
        &["refresh", "--yes"],
    ] {
        let (code, _, err) = output(&mut mara(
            &copy,
            "postgres://mara@127.0.0.1:1/nowhere?sslmode=disable",
            operation,
        ));
        assert_eq!(code, 3, "{operation:?}: {err}");
        assert!(
            err.contains("cannot connect") && err.contains("that the server is running"),
            "{err}"
        );
        assert!(copy.calls().is_empty(), "{operation:?}: nothing ran");
    }
}

#[test]
fn a_run_whose_lock_is_cleared_elsewhere_stops_starting_projects() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("cleared");
    let (here, there) = (Deployment::of("mara-local"), Deployment::of("mara-local"));
    let run = started_slowly(&here, &url, 1000, 60);
    wait_for_running(&there, &url, 1);
    // On a server --force clears the lock whatever the pid (machines may share a host name).
    let (code, out, err) = output(&mut mara(&there, &url, &["unlock", "--force"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("Cleared the lock of run "), "{out}");
    let cleared = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let finished = run.wait_with_output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&finished.stdout),
        String::from_utf8_lossy(&finished.stderr),
    );
    assert_eq!(finished.status.code(), Some(5), "{out}{err}");
    assert!(
        err.contains("the stack's lock was taken from this run"),
        "{err}"
    );
    assert!(
        out.contains("✗ up on stack dev failed"),
        "no success: {out}"
    );
    // Noticed within a poll (a quarter of a second), not at the next renewal (twenty seconds
    // on): no project started later than that, by when each engine began, whenever it ended.
    let starts: Vec<f64> = (here.calls().iter())
        .filter(|c| c["argv"].as_array().unwrap().iter().any(|a| a == "up"))
        .map(|c| c["start"].as_f64().unwrap())
        .collect();
    let late: Vec<f64> = (starts.iter())
        .map(|start| start - cleared)
        .filter(|after| *after > 1.0)
        .collect();
    assert!(
        late.is_empty(),
        "started {late:?} s after the lock was cleared"
    );
    assert!(
        starts.len() < 14,
        "the run stopped starting projects: {starts:?}"
    );
}

#[test]
fn a_short_outage_of_the_server_costs_the_run_nothing() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let url = server.url("restart");
    let (here, there) = (Deployment::of("mara-local"), Deployment::of("mara-local"));
    let run = started_slowly(&here, &url, 700, 8);
    wait_for_running(&there, &url, 1);
    server.stop();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    server.resume();
    let finished = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&finished.stderr);
    assert_eq!(finished.status.code(), Some(0), "{err}");
    assert!(
        !err.contains("incomplete") && !err.contains("not recorded"),
        "{err}"
    );
    // Every project and the run's end are recorded, as seen from another machine.
    let (_, status, _) = output(&mut mara(&there, &url, &["--output", "json", "status"]));
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    let run = &status.as_array().unwrap()[0];
    assert_eq!(run["status"], "succeeded", "{run:#}");
    assert_eq!(run["projects"].as_array().unwrap().len(), 14, "{run:#}");
}
