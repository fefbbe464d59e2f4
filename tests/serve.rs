//! `mara serve` (docs/commands.md, "serve"): every page and JSON route against a ledger the
//! tests fill by running mara — this machine's SQLite one and a real PostgreSQL server's —, the
//! answers to what is not there or makes no sense, the token rules of the two actions, named
//! tokens and their roles (`mara serve token`), the audit of every cancel and unlock, reading
//! beyond loopback with a token only, the listen address it refuses, a hostile log line shown as
//! text, and a clean stop on Ctrl-C.

mod common;

use std::time::{Duration, Instant};

use common::Workspace;
use common::web::{Serve, run_running, runs, slow_up, workspace};
use serde_json::Value;

/// `mara ARGS` in `w` (its ledger on `url`, if given), to its end.
fn mara(w: &Workspace, url: Option<&str>, env: &[(&str, &str)], args: &[&str]) -> (i32, String) {
    let mut cmd = w.mara();
    cmd.env_remove("MARA_LEDGER_URL").envs(env.iter().copied());
    if let Some(url) = url {
        cmd.env("MARA_LEDGER_URL", url);
    }
    let output = cmd.args(args).output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        common::stderr(&output) + &common::stdout(&output),
    )
}

fn ledger_env(url: Option<&str>) -> Vec<(&str, &str)> {
    url.map(|u| vec![("MARA_LEDGER_URL", u)])
        .unwrap_or_default()
}

/// Every page and its JSON, on a ledger with one run that succeeded and one that failed.
fn pages_and_json(url: Option<&str>) {
    let w = workspace();
    assert_eq!(mara(&w, url, &[], &["up", "--yes"]).0, 0);
    let (code, said) = mara(&w, url, &[("MARA_TEST_WEB_EXIT", "3")], &["up", "--yes"]);
    assert_eq!(code, 1, "{said}");
    // A run of the network alone: not one of the web front's.
    let (code, said) = mara(&w, url, &[], &["drift", "--only", "net"]);
    assert_eq!(code, 0, "{said}");
    let serve = Serve::start(w.path(), &ledger_env(url));

    // The list: newest first, counted, filtered.
    let listed: Vec<Value> = (runs(&serve).into_iter())
        .filter(|r| r["operation"] == "up")
        .collect();
    assert_eq!(listed.len(), 2, "{listed:#?}");
    assert_eq!(listed[0]["status"], "failed");
    assert_eq!(listed[0]["counts"]["failed"], 1);
    // Which failed, for the list's column.
    assert_eq!(
        listed[0]["failed"],
        serde_json::json!(["web"]),
        "{listed:#?}"
    );
    assert_eq!(
        listed[0]["counts"]["unchanged"].as_u64().unwrap_or(0)
            + listed[0]["counts"]["succeeded"].as_u64().unwrap_or(0),
        2
    );
    assert_eq!(listed[1]["status"], "succeeded");
    let (failed, succeeded) = (
        listed[0]["run_id"].as_str().unwrap().to_string(),
        listed[1]["run_id"].as_str().unwrap().to_string(),
    );
    let only = serve.get("/api/runs?status=succeeded&stack=dev").json();
    let ids: Vec<&str> = (only.as_array().unwrap().iter())
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&succeeded.as_str()) && !ids.contains(&failed.as_str()),
        "{ids:?}"
    );
    assert_eq!(
        serve.get("/api/runs?stack=prod").json(),
        serde_json::json!([])
    );
    let page = serve.get("/?status=failed");
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains(&failed) && !page.body.contains(&succeeded),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(r#"<option value="failed" selected>"#),
        "{}",
        page.body
    );

    // A run: its graph, its projects, its reason, its logs, the hostile line as text.
    let run = serve.get(&format!("/api/runs/{failed}")).json();
    let paths: Vec<&str> = (run["projects"].as_array().unwrap().iter())
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["net", "app", "web"]);
    assert_eq!(run["projects"][2]["status"], "failed");
    assert_eq!(run["projects"][2]["exit_code"], 3);
    assert_eq!(run["graph"]["edges"], serde_json::json!([[0, 1], [1, 2]]));
    let page = serve.get(&format!("/runs/{failed}"));
    assert_eq!(page.status, 200);
    assert!(page.body.contains(r#"<svg class="graph""#), "{}", page.body);
    // Both edges, each on the critical path (the longest chain) and marked so.
    assert_eq!(page.body.matches(r#"class="edge"#).count(), 2);
    assert_eq!(page.body.matches(r#"class="edge critical""#).count(), 2);
    assert!(
        page.body
            .contains(r#"<g class="node failed" data-project="web">"#)
    );
    assert!(page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(!page.body.contains("<script>alert"), "{}", page.body);
    // The page's only script is the server's own file.
    assert_eq!(page.body.matches("<script").count(), 1);
    assert!(
        page.body
            .contains(r#"<script src="/assets/serve.js" defer>"#)
    );

    // One project's log, as a page and as JSON.
    let log = serve.get(&format!("/runs/{failed}/log?project=net"));
    assert_eq!(log.status, 200);
    assert!(
        log.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;\n"),
        "{}",
        log.body
    );
    let lines = serve
        .get(&format!("/api/runs/{failed}/log?project=net"))
        .json();
    assert!((lines["lines"].as_array().unwrap().iter()).any(|l| l == "<script>alert(1)</script>"));

    // A project's page: its runs, newest first, with its own status in each; its durations;
    // the last run that changed it (the failed one did not).
    let web = serve.get("/api/projects/web").json();
    let statuses: Vec<(&str, &str)> = (web["runs"].as_array().unwrap().iter())
        .map(|r| {
            let id = r["run"]["run_id"].as_str().unwrap();
            (id, r["project"]["status"].as_str().unwrap())
        })
        .collect();
    assert_eq!(
        statuses,
        [
            (failed.as_str(), "failed"),
            (succeeded.as_str(), "succeeded")
        ]
    );
    assert_eq!(web["last_change"]["run"]["run_id"], succeeded.as_str());
    let page = serve.get("/projects/web");
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(
        page.body.matches("<rect class=").count(),
        2,
        "{}",
        page.body
    );
    assert!(page.body.contains("Last changed by"), "{}", page.body);
    let run_page = serve.get(&format!("/runs/{failed}")).body;
    assert!(run_page.contains(r#"href="/projects/web""#), "{run_page}");
    // The network's: the drift check of it alone too, which changed nothing.
    let net = serve.get("/api/projects/net").json();
    assert_eq!(net["runs"].as_array().unwrap().len(), 3, "{net}");
    assert_eq!(net["runs"][0]["run"]["operation"], "drift");
    assert_eq!(net["last_change"]["run"]["run_id"], failed.as_str());

    // The stacks: no lock, the last up.
    let stacks = serve.get("/api/stacks").json();
    assert_eq!(stacks[0]["stack"], "dev");
    assert_eq!(stacks[0]["lock"], Value::Null);
    assert_eq!(stacks[0]["last"]["up"]["run_id"], failed.as_str());
    let page = serve.get("/stacks");
    assert!(
        page.status == 200 && page.body.contains("not locked"),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("Unlock"),
        "no token, no button: {}",
        page.body
    );

    // What is not there, and what makes no sense.
    for (path, status) in [
        ("/runs/nope", 404),
        ("/api/runs/nope", 404),
        ("/projects/nope", 404),
        ("/api/projects/nope", 404),
        ("/api/projects/web?limit=2", 400),
        ("/api/runs/nope/events", 404),
        (&format!("/runs/{failed}/log?project=nope") as &str, 404),
        (&format!("/runs/{failed}/log") as &str, 400),
        ("/nowhere", 404),
        ("/api/nowhere", 404),
        ("/?status=sideways", 400),
        ("/api/runs?limit=0", 400),
        ("/api/runs?limit=many", 400),
        ("/api/runs?colour=blue", 400),
        ("/api/runs?stack=a&stack=b", 400),
        ("/assets/nothing.js", 404),
    ] {
        let reply = serve.get(path);
        assert_eq!(reply.status, status, "{path}: {}", reply.body);
        match path.starts_with("/api/") {
            true => assert!(reply.json()["error"].is_string(), "{path}: {}", reply.body),
            false => assert!(
                reply.body.contains("<!DOCTYPE html>"),
                "{path}: {}",
                reply.body
            ),
        }
    }
    let said = serve.get("/?status=sideways").body;
    assert!(
        said.contains("Unknown status <code>sideways</code>"),
        "{said}"
    );

    // Every answer forbids inline script and other origins; a page for another host is refused.
    let reply = serve.get("/");
    let policy = reply.header("content-security-policy").unwrap();
    assert!(policy.contains("script-src 'self'") && !policy.contains("unsafe-inline"));
    assert_eq!(reply.header("x-content-type-options"), Some("nosniff"));
    let rebound = serve.request("GET", "/api/runs", &[("Host", "evil.example:7300")]);
    assert_eq!(rebound.status, 421, "{}", rebound.body);
    assert!(
        rebound.json()["error"]
            .as_str()
            .unwrap()
            .contains("--allow-host")
    );
    assert_eq!(
        serve
            .request("GET", "/", &[("Host", "localhost:7300")])
            .status,
        200
    );
    let twice = [("Host", "localhost"), ("Host", "evil.example")];
    assert_eq!(serve.request("GET", "/", &twice).status, 421);
    // A method an address does not take: said as the rest.
    let wrong = serve.request("DELETE", "/api/runs", &[]);
    assert_eq!(wrong.status, 405);
    assert_eq!(
        wrong.json()["error"],
        "This address does not take that method."
    );

    // The assets are in the binary.
    let script = serve.get("/assets/serve.js");
    assert_eq!(
        script.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    assert!(script.body.contains("EventSource"));

    let (code, said) = serve.stop();
    assert_eq!(code, Some(0), "{said}");
}

#[test]
fn the_pages_as_people_see_them() {
    let w = workspace();
    assert_eq!(
        mara(&w, None, &[("MARA_TEST_WEB_EXIT", "3")], &["up", "--yes"]).0,
        1
    );
    let serve = Serve::start(w.path(), &[("MARA_SERVE_TOKEN", "t")]);
    let id = runs(&serve)[0]["run_id"].as_str().unwrap().to_string();
    let snap = |name: &str, path: &str| {
        let reply = serve.get(path);
        let mut settings = insta::Settings::clone_current();
        for (pattern, with) in FILTERS {
            settings.add_filter(pattern, *with);
        }
        let who = runs(&serve)[0]["user"].as_str().unwrap().to_string()
            + "@"
            + runs(&serve)[0]["host"].as_str().unwrap();
        settings.add_filter(&regex_escape(&who), "[user]@[host]");
        settings.bind(|| {
            insta::assert_snapshot!(
                name,
                format!("{}\n{}", reply.status, reply.body.replace("><", ">\n<"))
            )
        });
    };
    snap("page_runs", "/");
    snap("page_run", &format!("/runs/{id}"));
    snap("page_log", &format!("/runs/{id}/log?project=web"));
    snap("page_stacks", "/stacks");
    snap("page_project", "/projects/web");
    snap("page_missing_run", "/runs/20990101-000000-abcdef");
}

/// What differs from one run of the tests to the next: ids, instants, durations, directories.
const FILTERS: &[(&str, &str)] = &[
    (r"\d{8}-\d{6}-[0-9a-f]{6}", "[run]"),
    (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", "[instant]"),
    (r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "[time]"),
    (r"\b\d+\.\ds\b", "[duration]"),
    (r"/tmp/[^/\s<\x22']+", "[workspace]"),
    (r"[^\s>]+/mara up", "mara up"),
];

fn regex_escape(text: &str) -> String {
    text.chars()
        .map(|c| match c.is_ascii_alphanumeric() || c == '@' {
            true => c.to_string(),
            false => format!("\\{c}"),
        })
        .collect()
}

#[test]
fn pages_and_json_of_this_machines_ledger() {
    pages_and_json(None);
}

#[test]
fn pages_and_json_of_a_team_ledger_on_postgresql_which_it_does_not_write() {
    let Some(server) = common::postgres::Server::start() else {
        return;
    };
    let url = server.url("serve");
    pages_and_json(Some(&url));
    // Served, then read again: the ledger is as the runs left it.
    // (pg_dump's `\restrict` key differs from one dump to the next.)
    let dump = || -> String {
        (server.dump("serve").lines())
            .filter(|l| !l.starts_with("\\restrict") && !l.starts_with("\\unrestrict"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let before = dump();
    let w = workspace();
    // With a password in the URL (the test's server trusts every local user): shown nowhere.
    let password = "Zq7-ledger-password-leak-check";
    let with_password = url.replacen("mara@", &format!("mara:{password}@"), 1);
    let serve = Serve::start(w.path(), &[("MARA_LEDGER_URL", &with_password)]);
    for path in ["/", "/stacks", "/api/runs", "/api/stacks", "/nowhere"] {
        let reply = serve.get(path);
        assert!(!reply.body.contains(password), "{path}: {}", reply.body);
        if ["/", "/stacks"].contains(&path) {
            assert!(
                reply.body.contains("127.0.0.1"),
                "the ledger named: {}",
                reply.body
            );
        }
    }
    for run in runs(&serve) {
        let id = run["run_id"].as_str().unwrap();
        assert_eq!(serve.get(&format!("/runs/{id}")).status, 200);
        assert_eq!(
            serve.get(&format!("/runs/{id}/log?project=net")).status,
            200
        );
    }
    assert_eq!(serve.get("/stacks").status, 200);
    let (_, said) = serve.stop();
    assert!(!said.contains(password), "{said}");
    assert!(dump() == before, "serving changed the ledger");
}

#[test]
fn the_event_stream_follows_a_running_run_to_its_end() {
    let w = workspace();
    let serve = Serve::start(w.path(), &[]);
    let mut up = slow_up(&w, "1");
    let id = run_running(&serve, "app");
    let text = serve.events(
        &format!("/api/runs/{id}/events"),
        |text| text.contains("event: run\ndata: {\"status\":\"succeeded\""),
        Duration::from_secs(30),
    );
    assert!(up.wait().unwrap().success());
    // The rows as they change, the lines as they come, the run's end; then the stream ends.
    assert!(
        text.contains("event: project\ndata: {\"path\":\"app\",\"status\":\"running\""),
        "{text}"
    );
    assert!(
        text.contains("event: project\ndata: {\"path\":\"app\",\"status\":\"succeeded\""),
        "{text}"
    );
    assert!(
        text.contains("event: project\ndata: {\"path\":\"web\""),
        "{text}"
    );
    assert!(text.contains("event: graph\n"), "{text}");
    assert!(
        text.contains(r#"{"project":"app","n":"#) && text.contains(r#""line":"application up"}"#),
        "{text}"
    );
    assert!(
        text.contains(r#""line":"<script>alert(1)</script>""#),
        "{text}"
    );
    assert!(
        text.contains("event: run\ndata: {\"status\":\"succeeded\""),
        "{text}"
    );
    // A finished run's stream says its state once, and ends.
    let start = Instant::now();
    let again = serve.events(
        &format!("/api/runs/{id}/events"),
        |_| false,
        Duration::from_secs(20),
    );
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "the stream did not end"
    );
    assert_eq!(again.matches("event: run\n").count(), 1, "{again}");
    assert!(
        again.contains("event: run\ndata: {\"status\":\"succeeded\""),
        "{again}"
    );
}

/// The edges `/api/runs/ID` draws, as (from, to) paths.
fn drawn_edges(page: &serde_json::Value) -> Vec<(String, String)> {
    let nodes = page["graph"]["nodes"].as_array().unwrap();
    let path = |k: &serde_json::Value| nodes[k.as_u64().unwrap() as usize]["path"].to_string();
    let mut edges: Vec<(String, String)> = (page["graph"]["edges"].as_array().unwrap().iter())
        .map(|e| (path(&e[0]), path(&e[1])))
        .collect();
    edges.sort();
    edges
}

#[test]
fn a_running_runs_page_shows_every_project_and_the_graph_it_started_with() {
    let w = workspace();
    let serve = Serve::start(w.path(), &[]);
    let mut up = slow_up(&w, "2");
    let id = run_running(&serve, "app");
    // The provider changes under the run: the web front no longer needs the application, and a
    // project is added.
    let provider = std::fs::read_to_string(w.path().join("providers/web.toml")).unwrap();
    let changed = provider.replace("after = [\"app\"]", "after = [\"net\"]")
        + "\n[[project]]\npath = \"extra\"\nengine = \"command\"\nup = \"true\"\ndestroy = \"true\"\n";
    assert_ne!(changed, provider);
    w.write("providers/web.toml", &changed);
    let page = serve.get(&format!("/api/runs/{id}")).json();
    let statuses: Vec<(String, String)> = (page["projects"].as_array().unwrap().iter())
        .map(|p| (p["path"].to_string(), p["status"].to_string()))
        .collect();
    let said = |p: &str, s: &str| (format!("{p:?}"), format!("{s:?}"));
    assert_eq!(
        statuses,
        [
            said("net", "succeeded"),
            said("app", "running"),
            said("web", "waiting")
        ],
        "the pending project is listed, and nothing the run did not select"
    );
    let pair = |a: &str, b: &str| (format!("{a:?}"), format!("{b:?}"));
    assert_eq!(
        drawn_edges(&page),
        [pair("app", "web"), pair("net", "app")],
        "the graph as the run had it"
    );
    assert!(page["graph"].get("note").is_none(), "{page}");
    let html = serve.get(&format!("/runs/{id}")).body;
    assert!(
        row_says(&html, r#"data-project="web""#, "waiting"),
        "the page lists the web front waiting"
    );
    assert!(up.wait().unwrap().success());

    // A run an earlier mara recorded (no graph) is drawn on the provider as it is now, and says so.
    let ledger = rusqlite::Connection::open(w.path().join(".mara/ledger.db")).unwrap();
    ledger
        .execute_batch("UPDATE runs SET graph = NULL;")
        .unwrap();
    drop(ledger);
    let page = serve.get(&format!("/api/runs/{id}")).json();
    assert_eq!(
        drawn_edges(&page),
        [pair("net", "app"), pair("net", "web")],
        "the provider's edges now"
    );
    let note = page["graph"]["note"].as_str().unwrap_or_default();
    assert!(note.contains("recorded no graph"), "{page}");
}

/// Whether `html` says `status` in a table row that holds `marker`.
fn row_says(html: &str, marker: &str, status: &str) -> bool {
    html.split("<tr ")
        .filter(|row| row.contains(marker))
        .any(|row| {
            row.split("</tr>")
                .next()
                .unwrap_or_default()
                .contains(status)
        })
}

#[test]
fn the_actions_need_the_servers_token() {
    let w = workspace();
    mara(&w, None, &[], &["up", "--yes"]);
    let id = runs_of(&w)[0].clone();

    // No token set: no action at all, and no button.
    let serve = Serve::start(w.path(), &[]);
    let reply = serve.post(&format!("/api/runs/{id}/cancel"), Some("anything"));
    assert_eq!(reply.status, 403, "{}", reply.body);
    assert!(
        reply.json()["error"]
            .as_str()
            .unwrap()
            .contains("MARA_SERVE_TOKEN")
    );
    assert_eq!(serve.post("/api/stacks/dev/unlock", None).status, 403);
    drop(serve);

    let token = "s3cret-token-of-the-team";
    let serve = Serve::start(w.path(), &[("MARA_SERVE_TOKEN", token)]);
    // A missing or wrong token.
    let reply = serve.post(&format!("/api/runs/{id}/cancel"), None);
    assert_eq!(reply.status, 401);
    assert_eq!(reply.header("www-authenticate"), Some("Bearer"));
    assert_eq!(
        serve
            .post(&format!("/api/runs/{id}/cancel"), Some("s3cret"))
            .status,
        401
    );
    assert_eq!(
        serve.post("/api/stacks/dev/unlock", Some("wrong")).status,
        401
    );
    // The scheme's name in any case.
    let lower = serve.request(
        "POST",
        &format!("/api/runs/{id}/cancel"),
        &[("Authorization", &format!("bearer {token}"))],
    );
    assert_eq!(lower.status, 409, "{}", lower.body);
    // The right one, on a run that ended and a stack nobody holds.
    let reply = serve.post(&format!("/api/runs/{id}/cancel"), Some(token));
    assert_eq!(reply.status, 409, "{}", reply.body);
    assert!(
        reply.json()["error"]
            .as_str()
            .unwrap()
            .contains("is not running: it succeeded")
    );
    assert_eq!(serve.post("/api/runs/nope/cancel", Some(token)).status, 404);
    assert_eq!(
        serve.post("/api/stacks/dev/unlock", Some(token)).status,
        409
    );
    // A GET is no action.
    assert_eq!(serve.get(&format!("/api/runs/{id}/cancel")).status, 405);

    // A running run: the page offers the button, and the right token cancels it as `mara
    // cancel` does.
    let mut up = slow_up(&w, "20");
    let running = run_running(&serve, "app");
    let page = serve.get(&format!("/runs/{running}"));
    assert!(
        page.body
            .contains(&format!(r#"data-url="/api/runs/{running}/cancel""#)),
        "{}",
        page.body
    );
    let unlock = serve.post("/api/stacks/dev/unlock", Some(token));
    assert_eq!(
        unlock.status, 409,
        "a live run's lock is not cleared: {}",
        unlock.body
    );
    assert!(
        unlock.body.contains("alive on this host"),
        "{}",
        unlock.body
    );
    let reply = serve.post(&format!("/api/runs/{running}/cancel"), Some(token));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["cancelled"]["run_id"], running.as_str());
    let code = wait_for(&mut up, Duration::from_secs(30));
    assert_eq!(code, Some(130), "the run stops as Ctrl-C would stop it");
    let run = serve.get(&format!("/api/runs/{running}")).json();
    assert_eq!(run["status"], "cancelled", "{run:#}");
    assert_eq!(token_count(&w, token), 0, "the token is written nowhere");
    // A run started where the token is set: its engines never get it.
    let (code, said) = mara(&w, None, &[("MARA_SERVE_TOKEN", token)], &["up", "--yes"]);
    assert_eq!(code, 0, "{said}");
    let latest = runs(&serve)[0]["run_id"].as_str().unwrap().to_string();
    let log = serve
        .get(&format!("/api/runs/{latest}/log?project=net"))
        .json();
    assert!(
        (log["lines"].as_array().unwrap().iter())
            .any(|l| l == "network up; the serve token: not given"),
        "{log:#}"
    );
    assert_eq!(token_count(&w, token), 0, "the token is written nowhere");

    // A run killed holding the lock: unlock clears it, and the run is recorded abandoned.
    let mut up = slow_up(&w, "20");
    let killed = run_running(&serve, "app");
    up.kill().unwrap();
    up.wait().unwrap();
    let stacks = serve.get("/api/stacks").json();
    assert_eq!(stacks[0]["lock"]["run_id"], killed.as_str());
    let page = serve.get("/stacks");
    let unlock = format!("/api/stacks/dev/unlock?run={killed}");
    assert!(
        page.body.contains(&format!(r#"data-url="{unlock}""#)),
        "{}",
        page.body
    );
    // The lock the page showed, not another's.
    let stale = serve.post(
        "/api/stacks/dev/unlock?run=20000101-000000-000000",
        Some(token),
    );
    assert_eq!(stale.status, 409, "{}", stale.body);
    assert!(stale.body.contains("look again"), "{}", stale.body);
    let reply = serve.post(&unlock, Some(token));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["cleared"]["run_id"], killed.as_str());
    assert_eq!(serve.get("/api/stacks").json()[0]["lock"], Value::Null);
    assert_eq!(
        serve.get(&format!("/api/runs/{killed}")).json()["status"],
        "abandoned"
    );
}

/// The run ids `mara history` lists, newest first.
fn runs_of(w: &Workspace) -> Vec<String> {
    let output = w
        .mara()
        .args(["history", "--output", "json"])
        .output()
        .unwrap();
    let runs: Value = serde_json::from_slice(&output.stdout).unwrap();
    (runs.as_array().unwrap().iter())
        .map(|r| r["run_id"].as_str().unwrap().to_string())
        .collect()
}

/// How many files under the workspace hold `token`.
fn token_count(w: &Workspace, token: &str) -> usize {
    (common::tree(w.path()).values().flatten())
        .filter(|bytes| String::from_utf8_lossy(bytes).contains(token))
        .count()
}

fn wait_for(child: &mut std::process::Child, limit: Duration) -> Option<i32> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    None
}

#[test]
fn an_address_other_machines_reach_needs_a_token() {
    let w = workspace();
    let output = w
        .mara()
        .args(["serve", "--listen", "0.0.0.0:0"])
        .env_remove("MARA_SERVE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    insta::assert_snapshot!(common::stderr(&output), @r"
    error: refusing to serve on 0.0.0.0:0 with no token: it is not a loopback address, so other machines could reach the page
      hint: make one (`mara serve token add NAME --role viewer|operator`: reading there needs a token too), or set MARA_SERVE_TOKEN (an operator's), or listen on 127.0.0.1
    ");
    let output = w
        .mara()
        .args(["serve", "--listen", "7300"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    insta::assert_snapshot!(common::stderr(&output), @r"
    error: --listen `7300` is not an address with a port
      hint: such as 127.0.0.1:7300, [::1]:7300, or 0.0.0.0:7300 (with a token)
    ");
}

#[test]
fn a_port_in_use_and_a_ledger_out_of_reach_are_said_before_serving() {
    let w = workspace();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let output = (w.mara())
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let said = common::stderr(&output).replace(&port.to_string(), "PORT");
    insta::assert_snapshot!(said, @r"
    error: cannot listen on 127.0.0.1:PORT: Address already in use (os error 98)
      hint: another port: `--listen 127.0.0.1:PORT` (port 0: any free one)
    ");
    // No server listens on port 1: the ledger cannot be reached, and nothing is served.
    let output = (w.mara())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env(
            "MARA_LEDGER_URL",
            "postgres://mara@127.0.0.1:1/mara?sslmode=disable",
        )
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", common::stderr(&output));
    let said = common::stderr(&output);
    assert!(
        said.contains("ledger") && !said.contains("Serving"),
        "{said}"
    );
}

#[test]
fn ctrl_c_stops_the_server_with_a_stream_open() {
    let w = workspace();
    let serve = Serve::start(w.path(), &[]);
    let mut up = slow_up(&w, "20");
    let id = run_running(&serve, "app");
    let port = serve.port;
    let reader = std::thread::spawn(move || {
        let serve_url = format!("/api/runs/{id}/events");
        let probe = common::web::Serve::probe(port);
        probe.events(&serve_url, |_| false, Duration::from_secs(60))
    });
    std::thread::sleep(Duration::from_millis(500));
    let start = Instant::now();
    let (code, said) = serve.stop();
    assert_eq!(code, Some(0), "{said}");
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );
    assert!(said.contains("Stopped."), "{said}");
    let text = reader.join().unwrap();
    assert!(text.contains("event: project"), "{text}");
    up.kill().unwrap();
    up.wait().unwrap();
}

#[test]
fn a_drift_check_that_found_drift_says_so_everywhere() {
    let w = workspace();
    assert_eq!(mara(&w, None, &[], &["up", "--yes"]).0, 0);
    let (code, said) = mara(&w, None, &[], &["drift"]);
    assert_eq!(code, 0, "{said}");
    let serve = Serve::start(w.path(), &[]);
    // A check that found nothing: as it ran.
    let clean = runs(&serve)[0].clone();
    assert_eq!(
        (clean["operation"].as_str(), clean["result"].as_str()),
        (Some("drift"), Some("nothing drifted"))
    );
    assert_eq!(clean["shown"], "succeeded");
    let (code, said) = mara(&w, None, &[("MARA_TEST_DRIFT", "2")], &["drift"]);
    assert_eq!(code, 4, "{said}");
    let check = runs(&serve)[0].clone();
    assert_eq!(check["operation"], "drift");
    assert_eq!(check["status"], "succeeded", "the check itself ran");
    assert_eq!(check["result"], "1 project drifted");
    assert_eq!(check["shown"], "drifted");
    let id = check["run_id"].as_str().unwrap();
    let list = serve.get("/").body;
    assert!(
        list.contains(r#"<span class="status drifted">1 project drifted</span>"#),
        "{list}"
    );
    let stacks = serve.get("/stacks").body;
    assert!(
        stacks.contains(r#"<span class="status drifted">1 project drifted</span>"#),
        "{stacks}"
    );
    let page = serve.get(&format!("/runs/{id}")).body;
    assert!(
        page.contains(r#"<g class="node drifted" data-project="app">"#),
        "{page}"
    );
    let app = serve.get(&format!("/api/runs/{id}")).json()["projects"][1].clone();
    assert_eq!(
        (app["path"].as_str(), app["shown"].as_str()),
        (Some("app"), Some("drifted"))
    );
}

#[test]
fn a_ledger_made_anew_is_the_one_read() {
    let w = workspace();
    assert_eq!(mara(&w, None, &[], &["up", "--yes"]).0, 0);
    let serve = Serve::start(w.path(), &[]);
    let first = runs(&serve)[0]["run_id"].clone();
    std::fs::remove_dir_all(w.path().join(".mara")).unwrap();
    assert_eq!(serve.get("/api/runs").json(), serde_json::json!([]));
    assert_eq!(mara(&w, None, &[], &["up", "--yes"]).0, 0);
    let now = runs(&serve);
    assert_eq!(now.len(), 1);
    assert_ne!(now[0]["run_id"], first);
}

#[test]
fn a_script_reads_where_the_server_listens_and_names_its_hosts() {
    let w = workspace();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("mara"))
        .current_dir(w.path())
        .args(["--output", "json", "serve", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let said: Value = serde_json::from_str(&line).unwrap();
    assert!(
        said["url"]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.1:"),
        "{said}"
    );
    assert_eq!(said["actions"], false);
    assert!(
        said["ledger"].as_str().unwrap().ends_with("ledger.db"),
        "{said}"
    );

    // A name of the server's own, given: served; another: refused.
    let serve = Serve::start_with(w.path(), &[], &["--allow-host", "mara.example"]);
    assert_eq!(
        serve
            .request("GET", "/", &[("Host", "mara.example:7300")])
            .status,
        200
    );
    assert_eq!(
        serve
            .request("GET", "/", &[("Host", "MARA.example")])
            .status,
        200
    );
    assert_eq!(
        serve
            .request("GET", "/", &[("Host", "other.example")])
            .status,
        421
    );
}

/// A connection that sends nothing is closed within 15 s (docs/commands.md, "serve"), and so is
/// one kept alive and left idle after its answer.
#[test]
fn an_idle_connection_is_closed() {
    use std::io::{Read, Write};
    let w = workspace();
    let serve = Serve::start(w.path(), &[]);
    let quiet = |stream: &mut std::net::TcpStream| {
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let start = Instant::now();
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
        start.elapsed()
    };
    let mut silent = std::net::TcpStream::connect(("127.0.0.1", serve.port)).unwrap();
    let waited = quiet(&mut silent);
    assert!(waited < Duration::from_secs(15), "{waited:?}");
    // Kept alive after an answer, then idle.
    let mut kept = std::net::TcpStream::connect(("127.0.0.1", serve.port)).unwrap();
    let request = format!(
        "GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n",
        serve.port
    );
    kept.write_all(request.as_bytes()).unwrap();
    let waited = quiet(&mut kept);
    assert!(waited < Duration::from_secs(15), "{waited:?}");
}

/// 300 connections that say nothing, to a server that may open 256 files, do not keep a real
/// request out: the server takes at most half its files in connections, the others wait in the
/// kernel's queue, and the idle ones are closed (docs/commands.md, "serve").
#[test]
fn three_hundred_idle_connections_do_not_keep_a_request_out() {
    let w = workspace();
    let serve = Serve::start_with_files(w.path(), 256);
    let idle: Vec<std::net::TcpStream> = (0..300)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", serve.port)).unwrap())
        .collect();
    let start = Instant::now();
    let reply = serve.get("/api/runs");
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(
        start.elapsed() < Duration::from_secs(25),
        "{:?}",
        start.elapsed()
    );
    drop(idle);
    // The server still serves, and says nothing of it.
    assert_eq!(serve.get("/").status, 200);
    let (code, said) = serve.stop();
    assert_eq!(code, Some(0), "{said}");
}

/// `mara serve token add NAME --role ROLE`: its output, and the token, alone on its last line.
fn token_add(w: &Workspace, url: Option<&str>, name: &str, role: &str) -> (String, String) {
    let (code, said) = mara(
        w,
        url,
        &[],
        &["serve", "token", "add", name, "--role", role],
    );
    assert_eq!(code, 0, "{said}");
    let token = said.lines().last().unwrap().to_string();
    assert!(token.starts_with("mara_") && token.len() == 48, "{said}");
    assert_eq!(said.matches(&token).count(), 1, "shown once: {said}");
    (said, token)
}

/// `POST path` with `token`, as the page's script sends it.
fn from_page(serve: &Serve, path: &str, token: &str) -> common::web::Reply {
    let bearer = format!("Bearer {token}");
    serve.request(
        "POST",
        path,
        &[("Authorization", &bearer), ("Mara-Via", "page")],
    )
}

/// Named tokens: a viewer's cannot cancel (403), an operator's does (200), and the cancel is
/// recorded with its name, which `history`, `status` and the run's page show; `token list` shows
/// no value; a revoked token is 401; a cancel and an unlock from the command line are recorded
/// with its user@host.
fn named_tokens_and_the_audit(url: Option<&str>) {
    let w = workspace();
    assert_eq!(mara(&w, url, &[], &["up", "--yes"]).0, 0);
    let (said, operator) = token_add(&w, url, "ana", "operator");
    assert!(said.contains("Added token `ana` (operator)"), "{said}");
    let (_, viewer) = token_add(&w, url, "viv", "viewer");
    let (code, said) = mara(
        &w,
        url,
        &[],
        &["serve", "token", "add", "ana", "--role", "viewer"],
    );
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("has a token `ana` already"), "{said}");
    let (code, said) = mara(
        &w,
        url,
        &[],
        &["serve", "token", "add", "a b", "--role", "viewer"],
    );
    assert_eq!(code, 2, "{said}");
    let (code, listed) = mara(&w, url, &[], &["serve", "token", "list"]);
    assert_eq!(code, 0, "{listed}");
    assert!(listed.contains("ana") && listed.contains("operator") && listed.contains("viv"));
    assert!(
        !listed.contains(&operator) && !listed.contains(&viewer),
        "{listed}"
    );
    let (_, json) = mara(
        &w,
        url,
        &[],
        &["--output", "json", "serve", "token", "list"],
    );
    assert!(
        !json.contains(&operator) && !json.contains("digest"),
        "{json}"
    );

    // Named tokens alone turn the actions on: no MARA_SERVE_TOKEN.
    let serve = Serve::start(w.path(), &ledger_env(url));
    let mut up = slow_up_on(&w, url, "20");
    let running = run_running(&serve, "app");
    let cancel = format!("/api/runs/{running}/cancel");
    let page = serve.get(&format!("/runs/{running}"));
    assert!(
        page.body.contains(&format!(r#"data-url="{cancel}""#)),
        "{}",
        page.body
    );
    let refused = from_page(&serve, &cancel, &viewer);
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(
        refused.body.contains("`viv` is a viewer's"),
        "{}",
        refused.body
    );
    let wrong = from_page(&serve, &cancel, "mara_not-a-token");
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    assert!(
        wrong.json()["error"]
            .as_str()
            .unwrap()
            .starts_with("Wrong token")
    );
    assert!(!wrong.body.contains("needs the server's token"));
    assert_eq!(serve.post(&cancel, None).status, 401);
    let done = from_page(&serve, &cancel, &operator);
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(done.json()["by"], "ana");
    assert_eq!(wait_for(&mut up, Duration::from_secs(30)), Some(130));

    // Recorded with the token's name: the run's page, its JSON, `history` and `status`.
    let said = "cancelled by ana via the web page at ";
    assert!(serve.get(&format!("/runs/{running}")).body.contains(said));
    let run = serve.get(&format!("/api/runs/{running}")).json();
    assert_eq!(run["status"], "cancelled", "{run:#}");
    assert_eq!(
        (
            run["actions"][0]["act"].as_str(),
            run["actions"][0]["by"].as_str()
        ),
        (Some("cancel"), Some("ana")),
        "{run:#}"
    );
    for command in [&["history"][..], &["status"]] {
        let (code, text) = mara(&w, url, &[], command);
        assert_eq!(code, 0, "{text}");
        assert!(text.contains(said), "{command:?}: {text}");
    }
    let (_, listed) = mara(&w, url, &[], &["serve", "token", "list"]);
    let ana = listed.lines().find(|l| l.starts_with("ana ")).unwrap();
    assert!(!ana.ends_with("never"), "ana's last use: {listed}");

    // Revoked: 401 from the next request on, on every server of the ledger.
    let (code, said) = mara(&w, url, &[], &["serve", "token", "revoke", "ana"]);
    assert_eq!(code, 0, "{said}");
    let revoked = from_page(&serve, "/api/stacks/dev/unlock", &operator);
    assert_eq!(revoked.status, 401, "{}", revoked.body);
    assert!(revoked.body.contains("Wrong token"), "{}", revoked.body);
    assert_eq!(
        mara(&w, url, &[], &["serve", "token", "revoke", "ana"]).0,
        2
    );

    // From the command line: user@host.
    let me = {
        let run = &runs(&serve)[0];
        format!(
            "{}@{}",
            run["user"].as_str().unwrap(),
            run["host"].as_str().unwrap()
        )
    };
    let mut up = slow_up_on(&w, url, "20");
    let cancelled = run_running(&serve, "app");
    assert_eq!(mara(&w, url, &[], &["cancel"]).0, 0);
    assert_eq!(wait_for(&mut up, Duration::from_secs(30)), Some(130));
    let mut up = slow_up_on(&w, url, "20");
    let killed = run_running(&serve, "app");
    up.kill().unwrap();
    up.wait().unwrap();
    let (code, said) = mara(&w, url, &[], &["unlock", "--force"]);
    assert_eq!(code, 0, "{said}");
    let (_, history) = mara(&w, url, &[], &["history"]);
    assert!(
        history.contains(&format!("cancelled by {me} via `mara cancel` at ")),
        "{history}"
    );
    assert!(
        history.contains(&format!("unlocked by {me} via `mara unlock` at ")),
        "{history}"
    );
    for (id, act) in [(&cancelled, "cancel"), (&killed, "unlock")] {
        let run = serve.get(&format!("/api/runs/{id}")).json();
        assert_eq!(run["actions"][0]["act"], act, "{run:#}");
        assert_eq!(run["actions"][0]["via"], "cli", "{run:#}");
    }
    // The values are nowhere: not in the workspace (its ledger keeps digests), not in what the
    // server said.
    for token in [&operator, &viewer] {
        assert_eq!(token_count(&w, token), 0);
        assert!(!serve.said().contains(token.as_str()));
    }
}

/// `slow_up`, its ledger on `url` when given.
fn slow_up_on(w: &Workspace, url: Option<&str>, seconds: &str) -> std::process::Child {
    match url {
        None => slow_up(w, seconds),
        Some(url) => {
            let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("mara"));
            cmd.current_dir(w.path())
                .args(["up", "--yes"])
                .env("NO_COLOR", "1")
                .env("MARA_TEST_SLEEP", seconds)
                .env("MARA_LEDGER_URL", url)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            cmd.spawn().unwrap()
        }
    }
}

#[test]
fn named_tokens_have_roles_and_every_action_is_audited() {
    named_tokens_and_the_audit(None);
}

#[test]
fn a_team_ledger_s_tokens_and_audit_are_every_machine_s() {
    let Some(server) = common::postgres::Server::start() else {
        return;
    };
    named_tokens_and_the_audit(Some(&server.url("tokens")));
}

/// An IPv4 address of this machine other than loopback (`hostname -I`), if it has one.
fn address_beyond_loopback() -> Option<String> {
    let output = std::process::Command::new("hostname")
        .arg("-I")
        .output()
        .ok()?;
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .filter_map(|a| a.parse::<std::net::Ipv4Addr>().ok())
        .find(|a| !a.is_loopback())
        .map(|a| a.to_string())
}

#[test]
fn beyond_loopback_reading_needs_a_token_too() {
    let w = workspace();
    assert_eq!(mara(&w, None, &[], &["up", "--yes"]).0, 0);
    let (_, viewer) = token_add(&w, None, "viv", "viewer");
    // The machine's own address, reached there; else every address, reached on loopback (the
    // address listened on decides).
    let listen = match address_beyond_loopback() {
        Some(ip) => format!("{ip}:0"),
        None => "0.0.0.0:0".to_string(),
    };
    let serve = Serve::start_on(w.path(), &[], &listen, &[]);
    assert!(
        serve.said().contains("reading needs a token"),
        "{}",
        serve.said()
    );
    let bearer = |token: &str| format!("Bearer {token}");

    // Without a token: 401, a page that asks for one (the stylesheet and script it needs are
    // served), JSON under /api.
    let page = serve.get("/");
    assert_eq!(page.status, 401, "{}", page.body);
    assert_eq!(page.header("www-authenticate"), Some("Bearer"));
    assert!(
        page.body.contains(r#"<form id="token-form""#),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("<table"),
        "nothing of the ledger: {}",
        page.body
    );
    assert_eq!(serve.get("/assets/serve.js").status, 200);
    assert_eq!(serve.get("/assets/serve.css").status, 200);
    for path in ["/api/runs", "/stacks", "/runs/nope", "/api/stacks"] {
        assert_eq!(serve.get(path).status, 401, "{path}");
    }
    let api = serve.get("/api/runs");
    assert!(
        api.json()["error"]
            .as_str()
            .unwrap()
            .contains("needs a token to read")
    );
    // A wrong one: said so.
    let wrong = serve.request("GET", "/", &[("Authorization", &bearer("mara_wrong"))]);
    assert_eq!(wrong.status, 401);
    assert!(wrong.body.contains("Wrong token"), "{}", wrong.body);
    // A viewer's reads every page, and its stream; it cannot act.
    let auth = bearer(&viewer);
    let headers = [("Authorization", auth.as_str())];
    let listed = serve.request("GET", "/api/runs", &headers);
    assert_eq!(listed.status, 200, "{}", listed.body);
    let id = listed.json()[0]["run_id"].as_str().unwrap().to_string();
    let page = serve.request("GET", "/", &headers);
    assert_eq!(page.status, 200);
    assert!(page.body.contains(r#"data-guarded="true""#) && page.body.contains(&id));
    assert_eq!(
        serve
            .request("GET", &format!("/runs/{id}"), &headers)
            .status,
        200
    );
    let events = serve.events_with(
        &format!("/api/runs/{id}/events"),
        &headers,
        |text| text.contains("event: run"),
        Duration::from_secs(10),
    );
    assert!(events.contains("event: run"), "{events}");
    let cancel = serve.request("POST", &format!("/api/runs/{id}/cancel"), &headers);
    assert_eq!(cancel.status, 403, "{}", cancel.body);
    assert_eq!(token_count(&w, &viewer), 0);
}
