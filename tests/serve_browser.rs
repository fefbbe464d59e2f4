//! `mara serve` in a real browser (docs/commands.md, "serve"): Debian's chromium, driven by its
//! chromedriver over WebDriver, opens the page of a running run and sees its projects go from
//! running to succeeded with no reload, and a hostile log line shown as text with no alert; and
//! follows a run that prints secrets split by a CR, a CRLF and an LF, none of which reaches the
//! page; and, on an address beyond loopback, asks for a token once, keeps it for the tab, follows
//! a running run with it and cancels it, recorded with the token's name. The page's screenshot is
//! kept under target/test-artifacts/. And the graph of a run of
//! the example workspace's 14 projects: whole names, a legend, fewer crossings than before issue
//! 44; its screenshot is docs/images/serve-graph.png.

mod common;

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

use common::web::{
    BROKEN, Serve, holds_no_broken_secret, leaky_workspace, run_running, slow_up, workspace,
};

/// chromedriver on a free port, stopped with the test.
struct Driver {
    child: Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    /// chromedriver, and the browsers it starts, in time zone `zone` (`TZ`) when given.
    fn start_in(program: &PathBuf, zone: Option<&str>) -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut command = Command::new(program);
        if let Some(zone) = zone {
            command.env("TZ", zone);
        }
        let child = command
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "chromedriver did not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Driver { child, port }
    }
}

/// Chromium, and chromedriver started (its browsers in time zone `zone` when given); `None`,
/// said, where either is missing (a failure where the tools are required).
fn browser_in(zone: Option<&str>) -> Option<(PathBuf, Driver)> {
    let why = "the browser test of mara serve";
    let browser = common::tools::tool("chromium", why)?;
    let chromedriver = common::tools::tool("chromedriver", why)?;
    Some((browser, Driver::start_in(&chromedriver, zone)))
}

/// The browser itself: Debian's binary behind its wrapper script, where it is.
fn chromium(wrapper: PathBuf) -> PathBuf {
    let binary = PathBuf::from("/usr/lib/chromium/chromium");
    if binary.is_file() { binary } else { wrapper }
}

/// Where the screenshot goes: target/test-artifacts/.
fn artifacts() -> PathBuf {
    let mara = assert_cmd::cargo::cargo_bin("mara");
    let target = mara
        .parent()
        .and_then(|debug| debug.parent())
        .expect("target/");
    let dir = target.join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_running_runs_page_follows_it_in_a_real_browser() {
    let Some((browser, driver)) = browser_in(None) else {
        return;
    };
    let w = workspace();
    let serve = Serve::start(w.path(), &[]);
    let mut up = slow_up(&w, "3");
    let run = run_running(&serve, "app");
    let page = serve.url(&format!("/runs/{run}"));

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let shot = runtime.block_on(async {
        let client = session(&driver, browser).await;
        let shot = follow(&client, &page).await;
        client.close().await.unwrap();
        shot
    });
    assert!(up.wait().unwrap().success());
    let file = artifacts().join("serve-run-page.png");
    std::fs::write(&file, shot).unwrap();
    eprintln!("screenshot: {}", file.display());
}

/// A headless session of `browser`, through `driver`.
async fn session(driver: &Driver, browser: PathBuf) -> Client {
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium(browser),
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1280,1100"],
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a browser session")
}

#[test]
fn a_secret_split_by_cr_crlf_or_lf_is_not_on_the_page_a_browser_follows() {
    let Some((browser, driver)) = browser_in(None) else {
        return;
    };
    let w = leaky_workspace();
    let bin = common::stand_in_bin();
    let serve = Serve::start(w.path(), &[]);
    // Its lines come once the page is open: through the stream and the page's script.
    let mut up = Command::new(assert_cmd::cargo::cargo_bin("mara"));
    up.current_dir(w.path())
        .args(["up", "--yes"])
        .env("NO_COLOR", "1")
        .env("MARA_TEST_SLEEP", "2")
        .env("PATH", common::path_with(bin.path()))
        .env("HOME", w.path().join("home"))
        .env_remove("MARA_LEDGER_URL")
        .envs(BROKEN.map(|(key, value, _)| (key, value)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut up = up.spawn().unwrap();
    let run = run_running(&serve, "app");
    let page = serve.url(&format!("/runs/{run}"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (log, whole) = runtime.block_on(async {
        let client = session(&driver, browser).await;
        client.goto(&page).await.unwrap();
        wait_for_text(&client, "#run-status", "succeeded").await;
        let read = |script: &'static str| {
            let client = client.clone();
            async move {
                let text = client.execute(script, vec![]).await.unwrap();
                text.as_str().unwrap_or_default().to_string()
            }
        };
        let log =
            read("return document.querySelector(\"pre.log[data-project='app']\").textContent;")
                .await;
        let whole = read("return document.documentElement.outerHTML;").await;
        client.close().await.unwrap();
        (log, whole)
    });
    assert!(up.wait().unwrap().success());
    assert!(log.contains("glued cr: [secret]\n[secret]_end"), "{log}");
    holds_no_broken_secret("the page's log", &log);
    holds_no_broken_secret("the page", &whole);
}

/// The text of the first element `css` finds.
async fn text(client: &Client, css: &str) -> String {
    match client.find(Locator::Css(css)).await {
        Ok(element) => element.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// Waits, up to 30 s, for `css`'s text to be `want`.
async fn wait_for_text(client: &Client, css: &str, want: &str) {
    let start = Instant::now();
    loop {
        let now = text(client, css).await;
        if now == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{css} says {now:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Opens the running run's page and watches it follow the run; its screenshot.
async fn follow(client: &Client, page: &str) -> Vec<u8> {
    client.goto(page).await.unwrap();
    // A mark that a reload would wipe out.
    client
        .execute("window.maraTestMark = 'kept'; return true;", vec![])
        .await
        .unwrap();
    assert_eq!(
        text(client, "tr[data-project='app'] .status-cell").await,
        "running"
    );
    // The web front has not started: listed, and drawn, as waiting.
    assert_eq!(
        text(client, "tr[data-project='web'] .status-cell").await,
        "waiting"
    );
    let web = client
        .find(Locator::Css("g.node[data-project='web']"))
        .await
        .unwrap();
    assert_eq!(
        web.attr("class").await.unwrap().as_deref(),
        Some("node waiting")
    );

    // The application, then the web front (its folded log opens as it starts), succeed; then
    // the run does.
    wait_for_text(client, "tr[data-project='app'] .status-cell", "succeeded").await;
    wait_for_text(client, "tr[data-project='web'] .status-cell", "running").await;
    wait_for_text(client, "tr[data-project='web'] .status-cell", "succeeded").await;
    wait_for_text(client, "#run-status", "succeeded").await;
    let web = client
        .find(Locator::Css("g.node[data-project='web']"))
        .await
        .unwrap();
    assert_eq!(
        web.attr("class").await.unwrap().as_deref(),
        Some("node succeeded")
    );
    // The graph as the script draws it again from the stream's drawing: each box its whole
    // path, the critical path (net, app, web: the one chain) marked.
    assert_eq!(text(client, "g.node[data-project='web'] text").await, "web");
    let marked = "return document.querySelectorAll('svg.graph rect.critical, svg.graph path.edge.critical').length;";
    assert_eq!(client.execute(marked, vec![]).await.unwrap(), json!(5));
    let duration = text(client, "tr[data-project='app'] .duration").await;
    assert!(
        duration.ends_with('s') && duration != "0.0s",
        "{duration:?}"
    );
    let mark = client
        .execute("return window.maraTestMark;", vec![])
        .await
        .unwrap();
    assert_eq!(mark, json!("kept"), "the page was reloaded");

    // The log line that is HTML is shown as text: no element made of it, no alert.
    // (Its project's log is folded, as a succeeded project's is: read what it holds.)
    let log = client
        .execute(
            "return document.querySelector(\"pre.log[data-project='net']\").textContent;",
            vec![],
        )
        .await
        .unwrap();
    let log = log.as_str().unwrap_or_default().to_string();
    assert!(log.contains("<script>alert(1)</script>"), "{log}");
    let made = "return document.querySelectorAll('main script').length;";
    assert_eq!(client.execute(made, vec![]).await.unwrap(), json!(0));
    assert!(client.get_alert_text().await.is_err(), "an alert is open");
    // The web front's lines came through the stream and the script: one of them is HTML too.
    let web_log = text(client, "pre.log[data-project='web']").await;
    assert!(
        web_log.contains("web up"),
        "the new project's log came too: {web_log}"
    );
    assert!(
        web_log.contains("<img src=x onerror=alert(2)>"),
        "{web_log}"
    );
    let made = "return document.querySelectorAll('main img').length;";
    assert_eq!(client.execute(made, vec![]).await.unwrap(), json!(0));
    // Each line once, though the stream sends a page every line from the start.
    let app = "return document.querySelector(\"pre.log[data-project='app']\").textContent;";
    let app = client.execute(app, vec![]).await.unwrap();
    let app = app.as_str().unwrap_or_default();
    assert_eq!(
        app.lines().filter(|l| *l == "application up").count(),
        1,
        "{app}"
    );
    client.screenshot().await.unwrap()
}

/// An IPv4 address of this machine other than loopback (`hostname -I`), else every address.
fn listen_beyond_loopback() -> String {
    let output = Command::new("hostname").arg("-I").output().unwrap();
    let found = String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .filter_map(|a| a.parse::<std::net::Ipv4Addr>().ok())
        .find(|a| !a.is_loopback());
    match found {
        Some(ip) => format!("{ip}:0"),
        None => "0.0.0.0:0".into(),
    }
}

#[test]
fn beyond_loopback_the_page_asks_for_a_token_once_and_acts_with_it() {
    let Some((browser, driver)) = browser_in(None) else {
        return;
    };
    let w = workspace();
    let added = w
        .mara()
        .args(["serve", "token", "add", "ana", "--role", "operator"])
        .output()
        .unwrap();
    assert!(added.status.success());
    let token = String::from_utf8_lossy(&added.stdout)
        .lines()
        .last()
        .unwrap()
        .to_string();
    let serve = Serve::start_on(w.path(), &[], &listen_beyond_loopback(), &[]);
    let mut up = slow_up(&w, "30");
    let bearer = format!("Bearer {token}");
    let run = {
        // The server's own API, read with the token, until `app` runs.
        let start = Instant::now();
        loop {
            let listed = serve.request("GET", "/api/runs", &[("Authorization", &bearer)]);
            let running = (listed
                .json()
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter())
            .find(|r| r["status"] == "running");
            if let Some(run) = running {
                break run["run_id"].as_str().unwrap().to_string();
            }
            assert!(start.elapsed() < Duration::from_secs(30), "no run running");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let page = serve.url(&format!("/runs/{run}"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = session(&driver, browser).await;
        client.goto(&page).await.unwrap();
        // Asked for a token: a wrong one is said so, then the right one opens the page.
        let input = "#token-form input[name=token]";
        let typed = client.find(Locator::Css(input)).await.unwrap();
        typed.send_keys("mara_wrong").await.unwrap();
        typed.send_keys("\n").await.unwrap();
        wait_for_text(
            &client,
            "#token-said",
            "Wrong token: this server has no such token (mistyped, or revoked).",
        )
        .await;
        let typed = client.find(Locator::Css(input)).await.unwrap();
        typed.send_keys(&token).await.unwrap();
        typed.send_keys("\n").await.unwrap();
        wait_for_text(&client, "tr[data-project='app'] .status-cell", "running").await;
        // Kept for the tab: a link followed, and back, without asking again.
        client
            .find(Locator::Css("nav a[href='/stacks']"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        wait_for_text(&client, "h1", "Stacks").await;
        client.back().await.unwrap();
        wait_for_text(&client, "tr[data-project='app'] .status-cell", "running").await;
        // The button acts with the kept token: no field to type it in.
        let form = "form.action[data-url$='/cancel']";
        let field = client
            .find(Locator::Css(&format!("{form} input")))
            .await
            .unwrap();
        assert!(
            !field.is_displayed().await.unwrap(),
            "the token is asked for again"
        );
        client
            .find(Locator::Css(&format!("{form} button")))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        wait_for_text(&client, "#run-status", "cancelled").await;
        // Said at the top of the page, the run's id as code; the action listed at once.
        let said = text(&client, "#said").await;
        assert!(
            said.starts_with(&format!("Cancel run {run}: Asked run {run}")),
            "{said}"
        );
        assert!(!said.contains('`'), "{said}");
        assert_eq!(text(&client, "#said code").await, run);
        let action = text(&client, "#actions p.action").await;
        assert!(
            action.starts_with("cancelled by ana via the web page at "),
            "{action}"
        );
        let kept = client
            .execute(
                "return document.cookie + '|' + sessionStorage.length;",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(kept, json!("|1"), "no cookie; the tab's storage only");
        client.close().await.unwrap();
    });
    assert_eq!(up.wait().unwrap().code(), Some(130));
    let history = w.mara().args(["history"]).output().unwrap();
    let said = String::from_utf8_lossy(&history.stdout);
    assert!(
        said.contains("cancelled by ana via the web page at "),
        "{said}"
    );
}

#[test]
fn an_unlock_is_said_at_the_top_its_row_shows_it_at_once_and_times_are_the_viewers() {
    // A zone five and a half hours from UTC, with no summer time.
    let Some((browser, driver)) = browser_in(Some("Asia/Kolkata")) else {
        return;
    };
    let w = workspace();
    let serve = Serve::start(w.path(), &[("MARA_SERVE_TOKEN", "operator-token")]);
    // A run killed mid-way leaves its lock, held by a process that is gone.
    let mut up = slow_up(&w, "8");
    run_running(&serve, "app");
    up.kill().unwrap();
    up.wait().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = session(&driver, browser).await;
        client.goto(&serve.url("/stacks")).await.unwrap();
        // The lock's time in the viewer's zone, which is said.
        let time = client
            .find(Locator::Css("table.stacks td time"))
            .await
            .unwrap();
        let instant = time.attr("datetime").await.unwrap().unwrap();
        let at =
            mara::clock::parse_rfc3339(&instant).unwrap() + Duration::from_secs(5 * 3600 + 1800);
        let local = mara::clock::rfc3339(at)[..19].replace('T', " ");
        assert_eq!(time.text().await.unwrap(), format!("{local} GMT+5:30"));
        let mark = "window.maraTestMark = 'kept'; return true;";
        client.execute(mark, vec![]).await.unwrap();
        // Unlocked from its row: said at the top, the row says so with no reload.
        let form = "table.stacks form.action";
        let field = client
            .find(Locator::Css(&format!("{form} input")))
            .await
            .unwrap();
        field.send_keys("operator-token").await.unwrap();
        client
            .find(Locator::Css(&format!("{form} button")))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        wait_for_text(&client, "table.stacks tbody td:nth-child(2)", "not locked").await;
        let said = text(&client, "#said").await;
        assert!(
            said.starts_with("Unlock stack dev: Cleared the lock of run "),
            "{said}"
        );
        assert!(!said.contains('`'), "{said}");
        let class = client.find(Locator::Css("#said")).await.unwrap();
        assert_eq!(class.attr("class").await.unwrap().as_deref(), Some("done"));
        let kept = client.execute("return window.maraTestMark;", vec![]).await;
        assert_eq!(kept.unwrap(), json!("kept"), "the page was reloaded");
        client.close().await.unwrap();
    });
}

/// How many times the edges of the example's graph crossed as main drew it before issue 44
/// (projects in columns by how many come before them, in the graph's order), by the same measure
/// (`mara::commands::serve::crossings`, docs/commands.md "serve").
const CROSSINGS_BEFORE: usize = 15;

#[test]
fn the_example_workspaces_graph_shows_full_names_a_legend_and_few_crossings() {
    let Some((browser, driver)) = browser_in(None) else {
        return;
    };
    let d = common::Deployment::of("mara-local");
    let output = d.mara().args(["up", "--yes"]).output().unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let environment = d.environment();
    let env: Vec<(&str, &str)> = (environment.iter())
        .map(|(key, value)| (*key, value.as_str()))
        .collect();
    let serve = Serve::start(d.root(), &env);
    let run = common::web::runs(&serve)[0]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let detail = serve.get(&format!("/api/runs/{run}")).json();
    let mut paths: Vec<String> = (detail["projects"].as_array().unwrap().iter())
        .map(|p| p["path"].as_str().unwrap().to_string())
        .collect();
    paths.sort();
    assert_eq!(paths.len(), 14, "{paths:?}");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (shot, names, curves, legend) = runtime.block_on(async {
        let client = session(&driver, browser).await;
        client.goto(&serve.url(&format!("/runs/{run}"))).await.unwrap();
        let read = |script: &'static str| {
            let client = client.clone();
            async move {
                let value = client.execute(script, vec![]).await.unwrap();
                serde_json::from_value::<Vec<String>>(value).unwrap()
            }
        };
        let names = read(
            "return [...document.querySelectorAll('svg.graph g.node text')].map(t => t.textContent);",
        )
        .await;
        let curves = read(
            "return [...document.querySelectorAll('svg.graph path.edge')].map(p => p.getAttribute('d'));",
        )
        .await;
        let legend = read("return [...document.querySelectorAll('.legend li')].map(l => l.textContent.trim());").await;
        // The legend's colour is the boxes': a succeeded box's border, its swatch's.
        let colours = read(
            "const style = (css, key) => getComputedStyle(document.querySelector(css))[key];
             return [style('g.node.succeeded rect', 'stroke'),
                     style('.legend .swatch.succeeded', 'borderTopColor')];",
        )
        .await;
        assert_eq!(colours[0], colours[1], "{colours:?}");
        let graph = client.find(Locator::Css("#graph")).await.unwrap();
        let shot = graph.screenshot().await.unwrap();
        client.close().await.unwrap();
        (shot, names, curves, legend)
    });
    let file = artifacts().join("serve-graph.png");
    std::fs::write(&file, &shot).unwrap();
    eprintln!("screenshot: {}", file.display());
    let curves: Vec<&str> = curves.iter().map(String::as_str).collect();
    let crossings = mara::commands::serve::crossings(&curves);
    eprintln!("crossings: {crossings} (before: {CROSSINGS_BEFORE})");

    // Each box says its project's whole path (wrapped over lines, every character kept).
    let mut names = names;
    names.sort();
    assert_eq!(names, paths);
    for status in ["succeeded", "failed", "running", "waiting", "critical path"] {
        assert!(legend.iter().any(|l| l == status), "{status}: {legend:?}");
    }
    assert!(
        crossings < CROSSINGS_BEFORE,
        "{crossings} crossings, {CROSSINGS_BEFORE} before"
    );
}
