//! The fast paths, kept honest at small scale by counting — input files read, provider files
//! parsed, graph visits, engine calls — never by timing (docs/benchmarks.md has the timings).
//! Each count is taken on two sizes of the same synthetic workspace: what must not grow with the
//! number of projects must be equal on both.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use assert_cmd::Command;

/// A layered workspace of `n` Pulumi projects, each after one to three projects of the layer
/// before it (a fixed pattern: the same `n` gives the same workspace).
struct Synthetic {
    dir: tempfile::TempDir,
    bin: tempfile::TempDir,
    n: usize,
    edges: usize,
}

impl Synthetic {
    fn new(n: usize) -> Synthetic {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let width = 4;
        let mut provider =
            String::from("description = \"Synthetic\"\ninfra_type = \"synthetic\"\n");
        let mut edges = 0;
        for i in 0..n {
            let (layer, slot) = (i / width, i % width);
            let path = format!("layer{layer:02}/p{i:03}");
            provider.push_str(&format!("\n[[project]]\npath = \"{path}\"\n"));
            if layer > 0 {
                let before =
                    |s: usize| format!("\"layer{:02}/p{:03}\"", layer - 1, (layer - 1) * width + s);
                let after: Vec<String> =
                    (0..=(i % 3)).map(|k| before((slot + k) % width)).collect();
                edges += after.len();
                provider.push_str(&format!("after = [{}]\n", after.join(", ")));
            }
            let project = root.join(&path);
            std::fs::create_dir_all(&project).unwrap();
            std::fs::write(
                project.join("Pulumi.yaml"),
                format!("name: p{i:03}\nruntime: yaml\noutputs:\n  name: p{i:03}\n"),
            )
            .unwrap();
        }
        let write = |path: &str, text: &str| {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write("mara.toml", "provider = \"synthetic\"\n");
        write("providers/synthetic.toml", &provider);
        write(
            "config/pulumi/environment",
            "PULUMI_STACK=dev\nPULUMI_BACKEND_URL=file://.mara/pulumi-state\nPULUMI_CONFIG_PASSPHRASE=scale\n",
        );
        write(
            "config/pulumi/Pulumi.dev.yaml",
            "config:\n  kubernetes:infra_type: synthetic\n",
        );
        Synthetic {
            dir,
            bin: common::stand_in_bin(),
            n,
            edges,
        }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn mara(&self) -> Command {
        let mut cmd = common::mara(self.root());
        cmd.env("PATH", common::path_with(self.bin.path()))
            .env("HOME", self.root().join("home"))
            .env("PULUMI_STAND_IN_LOG", self.root().join("stand-in.jsonl"))
            .env("MARA_LOG", "mara::reads=debug,mara::graph=debug");
        cmd
    }

    /// Runs mara; its exit code and what it counted.
    fn count(&self, args: &[&str]) -> (i32, Counts) {
        let output = self.mara().args(args).output().unwrap();
        let stderr = common::stderr(&output);
        (
            output.status.code().unwrap(),
            Counts::of(&stderr, self.root()),
        )
    }

    fn engine_calls(&self) -> usize {
        std::fs::read_to_string(self.root().join("stand-in.jsonl"))
            .map(|log| log.lines().count())
            .unwrap_or(0)
    }
}

/// What one run of mara counted, from its `mara::reads` and `mara::graph` debug lines.
#[derive(Debug, Default)]
struct Counts {
    /// Input files read, by path relative to the workspace (every `Pulumi.yaml` as one key).
    reads: BTreeMap<String, usize>,
    parses: usize,
    /// `topological order` lines: (nodes, edges, visits).
    orders: Vec<(usize, usize, usize)>,
    /// `scheduled` lines: (projects, unblocked).
    scheduled: Vec<(usize, usize)>,
}

impl Counts {
    fn of(stderr: &str, root: &Path) -> Counts {
        let root = root.canonicalize().unwrap();
        let mut counts = Counts::default();
        let field = |line: &str, name: &str| -> usize {
            let start = line
                .find(&format!("{name}="))
                .unwrap_or_else(|| panic!("{name} in {line}"));
            line[start + name.len() + 1..]
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        for line in stderr.lines() {
            if let Some(file) = line.strip_prefix("DEBUG read file=") {
                let file = Path::new(file);
                let relative = file
                    .strip_prefix(&root)
                    .or_else(|_| file.strip_prefix(root.to_str().unwrap()))
                    .unwrap_or(file)
                    .to_string_lossy()
                    .trim_start_matches("./")
                    .to_string();
                let key = if relative.ends_with("/Pulumi.yaml") {
                    "every Pulumi.yaml".to_string()
                } else {
                    relative
                };
                *counts.reads.entry(key).or_default() += 1;
            } else if line.starts_with("DEBUG parse provider=") {
                counts.parses += 1;
            } else if line.starts_with("DEBUG topological order") {
                counts.orders.push((
                    field(line, "nodes"),
                    field(line, "edges"),
                    field(line, "visits"),
                ));
            } else if line.starts_with("DEBUG scheduled") {
                counts
                    .scheduled
                    .push((field(line, "projects"), field(line, "unblocked")));
            }
        }
        counts
    }

    /// The reads of every file but the projects' own.
    fn shared_reads(&self) -> BTreeMap<String, usize> {
        let mut shared = self.reads.clone();
        shared.remove("every Pulumi.yaml");
        shared
    }

    fn project_file_reads(&self) -> usize {
        self.reads.get("every Pulumi.yaml").copied().unwrap_or(0)
    }
}

#[test]
fn planning_reads_each_file_once_and_visits_each_project_and_edge_once() {
    let (small, large) = (Synthetic::new(12), Synthetic::new(48));
    let mut shared = Vec::new();
    for s in [&small, &large] {
        let (code, counts) = s.count(&["show-execution", "--format", "list"]);
        assert_eq!(code, 0, "{counts:?}");
        assert_eq!(
            counts.parses, 1,
            "the provider file is parsed once: {counts:?}"
        );
        assert_eq!(counts.project_file_reads(), 0, "no Pulumi.yaml for a list");
        assert!(
            counts.shared_reads().values().all(|&n| n == 1),
            "{counts:?}"
        );
        let [(nodes, edges, visits)] = counts.orders[..] else {
            panic!("one topological order: {counts:?}");
        };
        assert_eq!((nodes, edges), (s.n, s.edges));
        assert_eq!(visits, nodes + edges, "each project and edge once");
        shared.push(counts.shared_reads());

        let (code, counts) = s.count(&["show-execution", "--format", "json"]);
        assert_eq!(code, 0);
        assert_eq!(
            counts.project_file_reads(),
            s.n,
            "the JSON names each project once"
        );
    }
    assert_eq!(
        shared[0], shared[1],
        "shared files are read as often at 12 projects as at 48"
    );
}

#[test]
fn validate_reads_each_project_file_once() {
    let (small, large) = (Synthetic::new(12), Synthetic::new(48));
    let mut shared = Vec::new();
    for s in [&small, &large] {
        let (code, counts) = s.count(&["validate"]);
        assert_eq!(code, 0, "{counts:?}");
        assert_eq!(counts.project_file_reads(), s.n, "{counts:?}");
        assert_eq!(counts.parses, 1, "{counts:?}");
        shared.push(counts.shared_reads());
    }
    assert_eq!(shared[0], shared[1]);
}

#[test]
fn a_run_makes_two_engine_calls_per_project_and_an_unchanged_one_makes_none() {
    let (small, large) = (Synthetic::new(12), Synthetic::new(48));
    let mut shared = Vec::new();
    for s in [&small, &large] {
        let (code, counts) = s.count(&["up", "--yes"]);
        assert_eq!(code, 0, "{counts:?}");
        assert_eq!(counts.parses, 1, "{counts:?}");
        assert_eq!(
            counts.project_file_reads(),
            s.n,
            "an up reads each Pulumi.yaml once, for what Pulumi would refuse"
        );
        assert_eq!(
            counts.scheduled,
            [(s.n, s.edges)],
            "each edge unblocks once"
        );
        // stack select and up (no hook reads the outputs); plus mara's one read of the stored
        // secrets.
        let calls = s.engine_calls();
        assert!(
            (2 * s.n..=2 * s.n + 1).contains(&calls),
            "{calls} engine calls for {} projects",
            s.n
        );
        shared.push(counts.shared_reads());

        let (code, counts) = s.count(&["up", "--yes", "--changed"]);
        assert_eq!(code, 0, "{counts:?}");
        assert_eq!(s.engine_calls(), calls, "nothing changed: no engine call");
        assert!(counts.scheduled.is_empty(), "nothing scheduled");
    }
    assert_eq!(
        shared[0], shared[1],
        "shared files are read as often at 12 projects as at 48"
    );
}

#[test]
fn an_up_reads_the_stack_configuration_and_the_environment_file_once() {
    // The example: secrets to store on the first up and to read back on the second, hooks, a
    // shared configuration and an environment file.
    let d = common::Deployment::of("mara-local");
    for round in ["first", "second"] {
        let output = d
            .mara()
            .args(["up", "--yes"])
            .env("MARA_LOG", "mara::reads=debug")
            .output()
            .unwrap();
        let stderr = common::stderr(&output);
        assert!(output.status.success(), "{stderr}");
        let counts = Counts::of(&stderr, d.root());
        for file in ["config/pulumi/Pulumi.dev.yaml", "config/pulumi/environment"] {
            assert_eq!(
                counts.reads.get(file),
                Some(&1),
                "the {round} up read {file} once: {counts:?}"
            );
        }
        assert!(
            counts.shared_reads().values().all(|&n| n == 1),
            "the {round} up read every file once: {counts:?}"
        );
    }
}

impl Synthetic {
    /// The stand-in's calls since `from`, each as (project, words of its command).
    fn calls_since(&self, from: usize) -> Vec<(String, String)> {
        std::fs::read_to_string(self.root().join("stand-in.jsonl"))
            .unwrap_or_default()
            .lines()
            .skip(from)
            .map(|l| {
                let call: serde_json::Value = serde_json::from_str(l).unwrap();
                let words: Vec<&str> = call["argv"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|a| a.as_str())
                    .skip_while(|a| a.starts_with('-'))
                    .take_while(|a| !a.starts_with('-'))
                    .take(2)
                    .collect();
                (
                    call["project"].as_str().unwrap_or_default().to_string(),
                    words.join(" "),
                )
            })
            .collect()
    }
}

#[test]
fn in_steady_state_every_operation_makes_one_engine_call_per_project() {
    let s = Synthetic::new(12);
    let (code, _) = s.count(&["up", "--yes"]);
    assert_eq!(code, 0);
    let first = s.calls_since(0);
    let selects = first.iter().filter(|(_, c)| c == "stack select").count();
    assert_eq!(
        selects, s.n,
        "the first up selects (creates) each stack: {first:?}"
    );
    for operation in [
        ["up", "--yes"].as_slice(),
        ["preview"].as_slice(),
        ["refresh"].as_slice(),
        ["destroy", "--yes"].as_slice(),
    ] {
        let before = s.engine_calls();
        let (code, _) = s.count(operation);
        assert_eq!(code, 0);
        let calls = s.calls_since(before);
        assert_eq!(
            calls.len(),
            s.n,
            "{operation:?}: one call per project, the operation alone: {calls:?}"
        );
        assert!(calls.iter().all(|(_, c)| c == operation[0]), "{calls:?}");
    }
}

#[test]
fn a_stack_removed_outside_mara_is_selected_again_when_the_operation_finds_it_gone() {
    let s = Synthetic::new(4);
    assert_eq!(s.count(&["up", "--yes"]).0, 0);
    // Removed behind mara's back, with the stand-in as a person would with pulumi.
    let project = s.root().join("layer00/p001");
    let removed = std::process::Command::new(common::stand_in())
        .args(["stack", "rm", "--yes", "--force", "--stack", "dev"])
        .current_dir(&project)
        .env(
            "PULUMI_BACKEND_URL",
            format!("file://{}", s.root().join(".mara/pulumi-state").display()),
        )
        .env("PULUMI_CONFIG_PASSPHRASE", "scale")
        .output()
        .unwrap();
    assert!(
        removed.status.success(),
        "{}",
        String::from_utf8_lossy(&removed.stderr)
    );
    let before = s.engine_calls();
    let (code, _) = s.count(&["up", "--yes"]);
    assert_eq!(code, 0);
    let calls = s.calls_since(before);
    let of = |p: &str| -> Vec<String> {
        calls
            .iter()
            .filter(|(project, _)| project == p)
            .map(|(_, c)| c.clone())
            .collect()
    };
    assert_eq!(of("p001"), ["up", "stack select", "up"], "{calls:?}");
    assert_eq!(of("p000"), ["up"], "{calls:?}");
    assert_eq!(calls.len(), s.n + 2);
}

#[test]
fn preview_and_refresh_take_changed_too() {
    let s = Synthetic::new(8);
    assert_eq!(s.count(&["up", "--yes"]).0, 0);
    // Nothing changed: no engine call.
    for operation in ["preview", "refresh"] {
        let before = s.engine_calls();
        let output = s.mara().args([operation, "--changed"]).output().unwrap();
        assert!(output.status.success(), "{}", common::stderr(&output));
        assert_eq!(
            s.engine_calls(),
            before,
            "{operation} --changed, nothing changed"
        );
    }
    // One project of the last layer changed: only it runs.
    let file = s.root().join("layer01/p007/Pulumi.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, format!("{text}  extra: x\n")).unwrap();
    for operation in ["preview", "refresh"] {
        let before = s.engine_calls();
        let output = s.mara().args([operation, "--changed"]).output().unwrap();
        assert!(output.status.success(), "{}", common::stderr(&output));
        let calls = s.calls_since(before);
        assert!(
            !calls.is_empty() && calls.iter().all(|(project, _)| project == "p007"),
            "{operation}: {calls:?}"
        );
    }
}

#[test]
fn a_preview_alone_learns_its_stacks_too() {
    let s = Synthetic::new(4);
    assert_eq!(s.count(&["preview"]).0, 0);
    let before = s.engine_calls();
    assert_eq!(s.count(&["preview"]).0, 0);
    let calls = s.calls_since(before);
    assert_eq!(
        calls.len(),
        s.n,
        "the second preview makes one call each: {calls:?}"
    );
}

/// A workspace whose ledger is filled through the ledger's own API (`Ledger::import`: one
/// transaction for thousands of runs), on this machine's SQLite file or on a PostgreSQL server.
struct Ledgered {
    ws: common::Workspace,
    /// The server's ledger, when it is one.
    url: Option<String>,
}

/// What a command, or a page of `mara serve`, read of the ledger: queries, rows, and SQLite's
/// steps (`MARA_LOG=mara::ledger=debug`).
type Reads = (u64, u64, u64);

impl Ledgered {
    fn new(url: Option<String>) -> Ledgered {
        let ws = common::Workspace::new(&[
            ("mara.toml", "provider = \"p\"\n"),
            (
                "providers/p.toml",
                "description = \"p\"\ninfra_type = \"p\"\n\n[[project]]\npath = \"net\"\nup = \"true\"\n\n[[project]]\npath = \"app\"\nafter = [\"net\"]\nup = \"true\"\n",
            ),
            // No stack named: `status` shows every stack.
            ("config/pulumi/environment", "PULUMI_CONFIG_PASSPHRASE=x\n"),
        ]);
        Ledgered { ws, url }
    }

    fn place(&self) -> mara::ledger::Place {
        match &self.url {
            Some(url) => mara::ledger::Place::Server(url.clone()),
            None => mara::ledger::Place::File(self.ws.path().join(".mara/ledger.db")),
        }
    }

    /// Records runs `ks` of the history (`recorded`).
    fn import(&self, ks: std::ops::Range<usize>) {
        self.import_runs(ks.map(recorded));
    }

    fn import_runs(&self, runs: impl Iterator<Item = Recorded>) {
        let mut history = mara::ledger::History::default();
        for (run, previews) in runs {
            history.runs.push(run);
            history.previews.extend(previews);
        }
        let mut ledger = mara::ledger::open(&self.place()).unwrap();
        ledger.import(&history).unwrap();
    }

    fn mara(&self) -> Command {
        let mut cmd = common::mara(self.ws.path());
        cmd.env("MARA_LOG", "mara::ledger=debug");
        if let Some(url) = &self.url {
            cmd.env("MARA_LEDGER_URL", url);
        }
        cmd
    }

    /// What `mara <args>` read of the ledger, and what it wrote on stdout.
    fn reads(&self, args: &[&str]) -> (Reads, String) {
        let output = self.mara().args(args).output().unwrap();
        let stderr = common::stderr(&output);
        assert!(output.status.success(), "{args:?}: {stderr}");
        (summed(&stderr, "ledger read"), common::stdout(&output))
    }

    /// What `mara serve` read of the ledger to answer `GET path`, and the answer.
    fn served(&self, path: &str) -> (Reads, String) {
        let mut env = vec![("MARA_LOG", "mara::ledger=debug")];
        if let Some(url) = &self.url {
            env.push(("MARA_LEDGER_URL", url));
        }
        let serve = common::web::Serve::start(self.ws.path(), &env);
        let reply = serve.get(path);
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        let (_, said) = serve.stop();
        (summed(&said, "request read"), reply.body)
    }
}

/// The reads the `what` debug lines of `stderr` count, summed.
fn summed(stderr: &str, what: &str) -> Reads {
    let field = |line: &str, name: &str| -> u64 {
        let start = line.find(&format!(" {name}=")).unwrap() + name.len() + 2;
        let digits = line[start..].split(|c: char| !c.is_ascii_digit()).next();
        digits.unwrap().parse().unwrap()
    };
    let lines: Vec<&str> = (stderr.lines())
        .filter(|l| l.starts_with(&format!("DEBUG {what} ")))
        .collect();
    lines.iter().fold((0, 0, 0), |(q, r, s), line| {
        (
            q + field(line, "queries"),
            r + field(line, "rows"),
            s + field(line, "steps"),
        )
    })
}

/// A run as recorded, with its projects' previews: (run, project, what it showed).
type Recorded = (mara::ledger::RunRecord, Vec<(String, String, String)>);

/// Run `k` of a history, started `k` seconds after the first: of stack dev or qa in turn, each
/// operation in turn (so that any ten in a row hold every stack's last run of each), two
/// projects (`app` failed in every seventh), a drift check's previews with it, and a cancel
/// done to every 25th.
fn recorded(k: usize) -> Recorded {
    use mara::engine::Operation;
    use mara::ledger::access::{Act, Action, Via};
    use mara::ledger::{ProjectRecord, RunRecord};
    use mara::status::{ProjectStatus, RunStatus};
    let at = |s: usize| {
        let (days, s) = (s / 86_400, s % 86_400);
        format!(
            "2026-{:02}-{:02}T{:02}:{:02}:{:02}.000Z",
            1 + days / 28,
            1 + days % 28,
            s / 3600,
            s / 60 % 60,
            s % 60
        )
    };
    let (run_id, stack) = (format!("r{k:05}"), ["dev", "qa"][k % 2].to_string());
    let operation = Operation::ALL[(k / 2) % 5];
    let project = |path: &str, status| ProjectRecord {
        path: path.into(),
        status,
        started: Some(at(k * 60)),
        finished: Some(at(k * 60 + 30)),
        exit_code: Some(i32::from(status == ProjectStatus::Failed)),
        changes: Some([("update".to_string(), (k % 3) as u64)].into()),
        reason: None,
        log: Some(format!(".mara/logs/{run_id}/{path}.log")),
        fingerprint: Some(format!("{path}-{k}")),
    };
    let app = match k % 7 {
        0 => ProjectStatus::Failed,
        _ => ProjectStatus::Succeeded,
    };
    let actions = match k % 25 {
        0 => vec![Action {
            at: at(k * 60 + 10),
            act: Act::Cancel,
            stack: stack.clone(),
            run_id: run_id.clone(),
            by: "ana".into(),
            via: Via::Page,
        }],
        _ => Vec::new(),
    };
    let previews = match operation {
        Operation::Drift => vec![(
            run_id.clone(),
            "net".to_string(),
            r#"{"changed_outputs":["url"]}"#.to_string(),
        )],
        _ => Vec::new(),
    };
    let run = RunRecord {
        run_id: run_id.clone(),
        operation,
        provider: "p".into(),
        stack,
        user: "ana".into(),
        host: "ci-runner".into(),
        pid: 4242,
        command: format!("mara {operation}"),
        started: at(k * 60),
        finished: Some(at(k * 60 + 40)),
        status: RunStatus::Succeeded,
        projects: vec![
            project("net", ProjectStatus::Succeeded),
            project("app", app),
        ],
        selected: Some(2),
        graph: Some(vec![("net".into(), "app".into())]),
        policy: None,
        leased: false,
        actions,
    };
    (run, previews)
}

/// SQLite, then PostgreSQL when it can be started here (a skip, counted, elsewhere).
fn ledgers(server: &Option<common::postgres::Server>) -> Vec<Ledgered> {
    let mut all = vec![Ledgered::new(None)];
    if let Some(server) = server {
        all.push(Ledgered::new(Some(server.url("scale"))));
    }
    all
}

#[test]
fn status_history_and_the_pages_read_as_much_at_10_runs_as_at_5000() {
    let server = common::postgres::Server::start();
    for ledger in ledgers(&server) {
        let name = if ledger.url.is_some() {
            "postgres"
        } else {
            "sqlite"
        };
        // The newest ten runs (every stack's last of each operation among them), then 4,990
        // older ones under them.
        ledger.import(4990..5000);
        let measure = || -> BTreeMap<&str, Reads> {
            let mut reads = BTreeMap::new();
            for (what, args) in [
                (
                    "history",
                    ["history", "--all-stacks", "--limit", "10"].as_slice(),
                ),
                (
                    "history --output json",
                    &[
                        "--output",
                        "json",
                        "history",
                        "--all-stacks",
                        "--limit",
                        "10",
                    ],
                ),
                ("history -s dev", &["-s", "dev", "history", "--limit", "5"]),
                ("status", &["status"]),
                ("status --output json", &["--output", "json", "status"]),
            ] {
                reads.insert(what, ledger.reads(args).0);
            }
            for page in ["/?limit=10", "/stacks", "/api/runs?limit=10", "/api/stacks"] {
                reads.insert(page, ledger.served(page).0);
            }
            reads
        };
        let small = measure();
        assert!(
            small.values().all(|&(queries, ..)| queries > 0),
            "{small:?}"
        );
        ledger.import(0..4990);
        let large = measure();
        eprintln!("{name}: at 10 runs {small:?}\n{name}: at 5,000 runs {large:?}");
        assert_eq!(
            small, large,
            "{name}: what each command and page reads of the ledger grows with its history"
        );
        // Every stack, however old its runs: one whose only run is the oldest of all.
        let (mut legacy, _) = recorded(5000);
        (legacy.stack, legacy.started) = ("legacy".into(), "2025-01-01T00:00:00.000Z".into());
        ledger.import_runs([(legacy, Vec::new())].into_iter());
        let (_, said) = ledger.reads(&["--output", "json", "status"]);
        assert!(said.contains("\"stack\": \"legacy\""), "{name}: {said}");
        let (_, stacks) = ledger.served("/api/stacks");
        let stacks: serde_json::Value = serde_json::from_str(&stacks).unwrap();
        let names: Vec<&str> = (stacks.as_array().unwrap().iter())
            .map(|s| s["stack"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["dev", "legacy", "qa"], "{name}");
    }
}

#[test]
fn history_s_json_written_run_by_run_is_what_it_was_written_whole() {
    use mara::ledger::RunRecord;
    use mara::status::{ProjectStatus, RunStatus};
    let server = common::postgres::Server::start();
    for ledger in ledgers(&server) {
        // 130 runs (pages of 50 are read), some running — one of a process gone from this
        // machine, shown abandoned with its projects — and one recorded abandoned.
        let host = mara::ledger::whoami().1;
        ledger.import_runs((0..130).map(recorded).map(|(mut run, previews)| {
            match run.run_id.as_str() {
                "r00100" | "r00120" => {
                    (run.status, run.host, run.pid, run.finished) =
                        (RunStatus::Running, host.clone(), 999_999_999, None);
                    run.projects[1].status = ProjectStatus::Running;
                }
                "r00110" => {
                    run.status = RunStatus::Abandoned;
                    run.projects[1].status = ProjectStatus::Waiting;
                    run.projects[1].finished = None;
                }
                _ => {}
            }
            (run, previews)
        }));
        // What it wrote before: every run read whole again, as seen, in one array.
        let opened = mara::ledger::open(&ledger.place()).unwrap();
        let whole: Vec<RunRecord> = (opened.runs(None, 120).unwrap().into_iter())
            .map(|r| opened.run(&r.run_id).unwrap().unwrap().as_seen())
            .collect();
        let before = format!("{}\n", serde_json::to_string_pretty(&whole).unwrap());
        let (_, now) = ledger.reads(&[
            "--output",
            "json",
            "history",
            "--all-stacks",
            "--limit",
            "120",
        ]);
        assert!(now == before, "the JSON changed:\n{now}");
        assert!(now.contains("\"status\": \"abandoned\""), "{now}");
        // A stack's, and none.
        let (_, dev) = ledger.reads(&["-s", "dev", "--output", "json", "history", "--limit", "70"]);
        let dev: Vec<serde_json::Value> = serde_json::from_str(&dev).unwrap();
        assert_eq!(dev.len(), 65);
        assert!(dev.iter().all(|r| r["stack"] == "dev"));
        let empty = Ledgered::new(None);
        let (_, none) = empty.reads(&["--output", "json", "history"]);
        assert_eq!(none, "[]\n");
    }
}
