//! State in the ledger (docs/commands.md, "State in the ledger"): `state = "ledger"` with the
//! real Terraform and a real PostgreSQL server of the test's own — the modules' state in the
//! server and nowhere else, a fresh clone that finds it, `mara state migrate`, and what is
//! refused before anything runs.

mod common;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use common::postgres::Server;

/// A copy of `examples/terraform-local` with `state = "ledger"`, its own HOME, on the server's
/// database `db`.
struct Clone {
    dir: tempfile::TempDir,
    url: String,
}

impl Clone {
    fn new(url: &str, ledger: bool) -> Clone {
        let dir = tempfile::tempdir().unwrap();
        common::copy_example(&common::example("terraform-local"), dir.path());
        let clone = Clone {
            dir,
            url: url.to_string(),
        };
        if ledger {
            clone.keep_state_in_the_ledger();
        }
        clone
    }

    fn keep_state_in_the_ledger(&self) {
        let toml = self.root().join("mara.toml");
        let text = std::fs::read_to_string(&toml).unwrap();
        std::fs::write(&toml, format!("{text}state = \"ledger\"\n")).unwrap();
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn mara(&self) -> Command {
        let mut cmd = common::mara(self.root());
        cmd.env("HOME", self.root().join("home"))
            .env("MARA_LEDGER_URL", &self.url)
            .env_remove("TF_WORKSPACE")
            .env_remove("PG_CONN_STR")
            .env_remove("TF_DATA_DIR");
        cmd
    }

    /// `mara <args>`: its exit code, stdout and stderr.
    fn run(&self, args: &[&str]) -> (i32, String, String) {
        let output = self.mara().args(args).output().unwrap();
        (
            output.status.code().unwrap_or(-1),
            common::stdout(&output),
            common::stderr(&output),
        )
    }

    /// Every file under the workspace that holds a Terraform state.
    fn local_states(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let mut dirs = vec![self.root().to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                let name = entry.file_name().to_string_lossy().into_owned();
                // `.terraform/terraform.tfstate` records the backend, not a state.
                if path.is_dir() && name != ".terraform" {
                    dirs.push(path);
                } else if name == "terraform.tfstate" && std::fs::metadata(&path).unwrap().len() > 0
                {
                    found.push(path);
                }
            }
        }
        found
    }
}

/// The states the server holds: `schema workspace` for each row of the pg backend's tables.
fn states_in(server: &Server, db: &str) -> Vec<String> {
    let tables = server.sql(
        db,
        "SELECT table_schema FROM information_schema.tables WHERE table_name = 'states' ORDER BY 1",
    );
    let mut states = Vec::new();
    for schema in tables.lines() {
        let rows = server.sql(
            db,
            &format!("SELECT name FROM \"{schema}\".states ORDER BY 1"),
        );
        states.extend(rows.lines().map(|name| format!("{schema} {name}")));
    }
    states
}

#[test]
fn a_chain_kept_in_the_ledger_leaves_no_local_state_and_a_fresh_clone_finds_it() {
    if common::terraform().is_none() {
        return;
    }
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("chain");
    let first = Clone::new(&url, true);
    let (code, _, err) = first.run(&["up", "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        first.local_states().is_empty(),
        "{:?}",
        first.local_states()
    );
    assert_eq!(
        states_in(&server, "chain"),
        ["terraform/app dev", "terraform/network dev"]
    );
    // The override file mara wrote holds the schema and nothing of the connection.
    let written =
        std::fs::read_to_string(first.root().join("network/mara_state_override.tf")).unwrap();
    assert!(
        written.contains("schema_name = \"terraform/network\""),
        "{written}"
    );
    assert!(!written.contains("127.0.0.1"), "{written}");
    // Terraform records the backend's configuration; the connection it got is not in it.
    let recorded =
        std::fs::read_to_string(first.root().join("network/.terraform/terraform.tfstate")).unwrap();
    assert!(recorded.contains("\"conn_str\": null"), "{recorded}");

    // A fresh clone (no .terraform, no .mara, nothing local) previews no change and no drift.
    let second = Clone::new(&url, true);
    let (code, out, err) = second.run(&["preview", "--expect-no-changes"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = second.run(&["drift"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = second.run(&["output"]);
    assert_eq!(code, 0, "{err}");
    let outputs: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(outputs["network"]["cidr"], "10.20.0.0/16", "{out}");
    assert!(second.local_states().is_empty());

    // A change from the fresh clone is seen by the first: one state.
    let config = second.root().join("config/pulumi/Pulumi.dev.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("replicas: 2", "replicas: 3")).unwrap();
    let (code, _, err) = second.run(&["up", "--yes"]);
    assert_eq!(code, 0, "{err}");
    std::fs::write(
        first.root().join("config/pulumi/Pulumi.dev.yaml"),
        text.replace("replicas: 2", "replicas: 3"),
    )
    .unwrap();
    let (code, out, err) = first.run(&["preview", "--expect-no-changes"]);
    assert_eq!(code, 0, "{out}{err}");

    // A clean runner without the stack configuration (git ignores it in many repositories) is
    // not a first run: it is told where the configuration comes from, and nothing is asked.
    let runner = Clone::new(&url, true);
    std::fs::remove_file(runner.root().join("config/pulumi/Pulumi.dev.yaml")).unwrap();
    let before = common::tree(runner.root());
    let (code, _, err) = runner.run(&["ci", "open", "--run", "gl-1"]);
    assert_eq!(code, 3, "{err}");
    insta::assert_snapshot!(stable(&err), @r"
    error: config/pulumi/Pulumi.dev.yaml is not here, but stack dev is not new: the ledger has its runs (the last, RUN, on HOST); this checkout lacks the stack's configuration, and a first run's questions would write it anew
      hint: give the run the stack's configuration: `mara ci open --run gl-1 --config FILE` with FILE a CI secret file, or write the pipeline that way with `mara ci generate … --config-secret NAME`
    ");
    let (code, _, err) = runner.run(&["up", "--yes"]);
    assert_eq!(code, 3, "{err}");
    insta::assert_snapshot!(stable(&err), @r"
    error: config/pulumi/Pulumi.dev.yaml is not here, but stack dev is not new: the ledger has its runs (the last, RUN, on HOST); this checkout lacks the stack's configuration, and a first run's questions would write it anew
      hint: put the stack's configuration back in config/pulumi/Pulumi.dev.yaml (from where the team keeps it: git ignores it in many repositories)
    ");
    assert_eq!(common::tree(runner.root()), before, "nothing written");
}

/// `text` with run ids and host names made stable.
fn stable(text: &str) -> String {
    let ids = regex::Regex::new(r"\d{8}-\d{6}-[0-9a-f]{6}").unwrap();
    ids.replace_all(&text.replace(&hostname(), "HOST"), "RUN")
        .into_owned()
}

fn hostname() -> String {
    let output = std::process::Command::new("hostname").output().unwrap();
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

#[test]
fn local_state_is_moved_in_by_state_migrate_and_never_over_a_state_the_server_holds() {
    if common::terraform().is_none() {
        return;
    }
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("moving");
    let local = Clone::new(&url, false);
    let (code, _, err) = local.run(&["up", "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(local.local_states().len(), 2);
    local.keep_state_in_the_ledger();

    // Nothing runs while the state is left behind: no engine call, nothing in the server.
    let (code, _, err) = local.run(&["up", "--yes"]);
    assert_eq!(code, 3, "{err}");
    insta::assert_snapshot!(err, @r#"
    error: network (network/terraform.tfstate.d/dev/terraform.tfstate), app (app/terraform.tfstate.d/dev/terraform.tfstate) keep stack dev's state in files beside them, which `state = "ledger"` leaves behind: the run would start them anew in the ledger's server, beside the resources those files hold
      hint: `mara state migrate` moves it into the server first (docs/commands.md, "State in the ledger")
    "#);
    assert!(states_in(&server, "moving").is_empty());
    assert!(!local.root().join("network/mara_state_override.tf").exists());
    // Another machine, which has no such file, is told where the ledger last saw the stack.
    let elsewhere = Clone::new(&url, true);
    let (code, _, err) = elsewhere.run(&["up", "--yes"]);
    assert_eq!(code, 3, "{err}");
    insta::assert_snapshot!(err, @r#"
    error: the ledger records stack dev of network, app (on their engines' default: Pulumi's login, a module's local files) elsewhere, and not in the ledger's server where `state = "ledger"` keeps them: the run would start them anew there, beside what those stacks hold
      hint: `mara state migrate` moves a stack in from where it is: `--from URL` names a Pulumi backend; a module's local files move from the machine that has them (docs/commands.md, "State in the ledger")
    "#);
    assert!(states_in(&server, "moving").is_empty());

    let (code, out, err) = local.run(&["state", "migrate"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("network: moved terraform.tfstate.d/dev/terraform.tfstate into postgres://mara@127.0.0.1:"), "{out}");
    assert!(
        local.local_states().is_empty(),
        "{:?}",
        local.local_states()
    );
    assert_eq!(
        states_in(&server, "moving"),
        ["terraform/app dev", "terraform/network dev"]
    );
    // What moved is what was deployed: nothing to change.
    let (code, out, err) = local.run(&["preview", "--expect-no-changes"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = local.run(&["state", "migrate"]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "No project keeps state outside the ledger's server: nothing to move.\n"
    );

    // Another copy deployed locally: its move would replace the server's states. Nothing moves.
    let other = Clone::new(&url, false);
    let (code, _, err) = other.run(&["up", "--yes"]);
    assert_eq!(code, 0, "{err}");
    other.keep_state_in_the_ledger();
    let before = states_in(&server, "moving");
    let (code, _, err) = other.run(&["state", "migrate"]);
    assert_eq!(code, 3, "{err}");
    insta::assert_snapshot!(err, @r"
    error: network: the ledger's server holds workspace dev of it already: moving terraform.tfstate.d/dev/terraform.tfstate there would replace it
    error: app: the ledger's server holds workspace dev of it already: moving terraform.tfstate.d/dev/terraform.tfstate there would replace it
      hint: nothing was moved: compare the two (the engine's own commands read both), and remove the one not wanted
    ");
    assert_eq!(other.local_states().len(), 2);
    assert_eq!(states_in(&server, "moving"), before);
    assert!(!other.root().join(".mara/migrating").exists());
}

#[test]
fn state_in_the_ledger_needs_a_ledger_server() {
    let dir = tempfile::tempdir().unwrap();
    common::copy_example(&common::example("terraform-local"), dir.path());
    let toml = dir.path().join("mara.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("{text}state = \"ledger\"\n")).unwrap();
    let before = common::tree(dir.path());
    insta::allow_duplicates! {
    for args in [&["up", "--yes"][..], &["preview"], &["up", "--dry-run"], &["state", "migrate"]] {
        let output = common::mara(dir.path())
            .env("HOME", dir.path().join("home"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(3), "{args:?}");
        insta::assert_snapshot!(common::stderr(&output), @r#"
        error: mara.toml:5: `state = "ledger"`: keeps the engines' state in the ledger's PostgreSQL server, but this workspace's ledger is its own file (.mara/ledger.db): the state would stay on this machine, where it already is
          hint: point the workspace at the team's server (MARA_LEDGER_URL, or `ledger` in mara.toml: docs/commands.md, "A team's ledger"), or remove `state`
        "#);
    }
    }
    assert_eq!(common::tree(dir.path()), before, "nothing written");
    // Without `state = "ledger"`, there is nothing to migrate into.
    std::fs::write(&toml, text).unwrap();
    let output = common::mara(dir.path())
        .args(["state", "migrate"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    insta::assert_snapshot!(common::stderr(&output), @r#"
    error: mara.toml does not say `state = "ledger"`: the state has nowhere to move to
      hint: add `state = "ledger"` to mara.toml first (docs/commands.md, "State in the ledger")
    "#);
}

/// Every file under `root` whose bytes hold `secret`.
fn files_holding(root: &Path, secret: &str) -> Vec<PathBuf> {
    common::tree(root)
        .into_iter()
        .filter_map(|(path, bytes)| {
            let bytes = bytes?;
            String::from_utf8_lossy(&bytes)
                .contains(secret)
                .then_some(path)
        })
        .collect()
}

#[test]
fn pulumi_stacks_move_from_the_file_backend_into_the_ledger_with_a_password_only_in_pgpassword() {
    let Some(server) = Server::start() else {
        return;
    };
    server.url("platform");
    let password = "s3cret-ledger-pw";
    server.role_with_password("alice", password);
    server.sql("postgres", "ALTER DATABASE platform OWNER TO alice");
    let url = format!(
        "postgres://alice:{password}@127.0.0.1:{}/platform?sslmode=disable",
        server.port
    );
    let copy = common::Deployment::of("mara-local");
    let run = |args: &[&str]| {
        let output = copy
            .mara()
            .env("MARA_LEDGER_URL", &url)
            .args(args)
            .output()
            .unwrap();
        let code = output.status.code().unwrap_or(-1);
        (code, common::stdout(&output), common::stderr(&output))
    };
    // Deployed with the example's file backend, the team's ledger recording it.
    let (code, _, err) = run(&["up", "--yes"]);
    assert_eq!(code, 0, "{err}");
    let toml = copy.root().join("mara.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("{text}state = \"ledger\"\n")).unwrap();
    let env_file = copy.root().join("config/pulumi/environment");
    let with_backend = std::fs::read_to_string(&env_file).unwrap();
    let without: String = (with_backend.lines())
        .filter(|l| !l.starts_with("PULUMI_BACKEND_URL="))
        .map(|l| format!("{l}\n"))
        .collect();

    // Without the environment's backend and before a migration, nothing runs: the ledger saw
    // the stacks in the file backend.
    std::fs::write(&env_file, &without).unwrap();
    let (code, _, err) = run(&["up", "--yes"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("the ledger records stack dev of infrastructure/local/cluster, infrastructure/local/registry"), "{err}");
    assert!(err.contains(".mara/pulumi-state"), "{err}");

    // The migration reads them where the environment file says.
    std::fs::write(&env_file, &with_backend).unwrap();
    let (code, out, err) = run(&["state", "migrate"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.matches(": moved stack dev in file://").count(),
        14,
        "{out}"
    );
    assert!(out.contains("PULUMI_BACKEND_URL is set"), "{out}");
    let stacks = server.sql(
        "platform",
        "SELECT count(*) FROM pulumi_state WHERE key LIKE '%/.pulumi/stacks/%/dev.json'",
    );
    assert_eq!(stacks.trim(), "14");
    // While the environment file still names the file backend, every run says so.
    let (code, _, err) = run(&["preview"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("warning: `state = \"ledger\"`, but the run's environment names another backend for 14 projects (infrastructure/local/cluster, infrastructure/local/registry, "),
        "{err}"
    );

    // Kept in the server from now on: nothing changes, the file backend is not read.
    std::fs::write(&env_file, &without).unwrap();
    let state_dir = copy.root().join(".mara/pulumi-state");
    std::fs::rename(&state_dir, copy.root().join("old-state")).unwrap();
    let (code, out, err) = run(&["preview", "--expect-no-changes"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) = run(&["up", "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(!state_dir.exists());

    // The password went to the engines in PGPASSWORD: no file holds it, no argv.
    assert_eq!(files_holding(copy.root(), password), Vec::<PathBuf>::new());
    for call in copy.calls() {
        assert!(!call["argv"].to_string().contains(password), "{call}");
    }
}

/// A workspace deployed with its own ledger and the example's file backend, switched to
/// `state = "ledger"` on a server that knows nothing of it yet: its own ledger still says where
/// the stacks are, so nothing starts anew; `state migrate` with no source it can read fails
/// rather than finding "nothing to move"; a relative `--from` means the workspace's directory;
/// and once moved, a teammate with a role of their own finds the same stacks.
#[test]
fn a_switch_to_the_ledger_s_server_is_refused_until_the_workspace_s_own_stacks_are_moved() {
    let Some(server) = Server::start() else {
        return;
    };
    let url = server.url("fresh");
    let copy = common::Deployment::of("mara-local");
    let run = |url: Option<&str>, args: &[&str]| {
        let mut cmd = copy.mara();
        if let Some(url) = url {
            cmd.env("MARA_LEDGER_URL", url);
        }
        let output = cmd.args(args).output().unwrap();
        let code = output.status.code().unwrap_or(-1);
        (code, common::stdout(&output), common::stderr(&output))
    };
    let (code, _, err) = run(None, &["up", "--yes"]);
    assert_eq!(code, 0, "{err}");
    let toml = copy.root().join("mara.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("{text}state = \"ledger\"\n")).unwrap();
    let env_file = copy.root().join("config/pulumi/environment");
    let without: String = (std::fs::read_to_string(&env_file).unwrap().lines())
        .filter(|l| !l.starts_with("PULUMI_BACKEND_URL="))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&env_file, &without).unwrap();

    let (code, _, err) = run(Some(&url), &["up", "--yes"]);
    assert_eq!(code, 3, "{err}");
    let backend = format!("file://{}/.mara/pulumi-state", copy.root().display());
    assert!(
        err.contains("this workspace's own ledger (.mara/ledger.db) records stack dev of infrastructure/local/cluster"),
        "{err}"
    );
    assert!(
        err.contains(&format!("`mara state migrate --from {backend}` moves them in from there; `mara ledger migrate` brings its runs along")),
        "{err}"
    );
    let (code, _, err) = run(Some(&url), &["preview"]);
    assert_eq!(code, 3, "{err}");

    // No source it can read: an error, not "nothing to move".
    let (code, out, err) = run(Some(&url), &["state", "migrate"]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        err.contains("`pulumi ") && err.contains("failed: "),
        "{err}"
    );
    assert!(err.contains("nothing was moved"), "{err}");
    assert!(!out.contains("nothing to move"), "{out}");

    // Relative to the workspace, as in the environment file: no directory made in a project.
    let (code, out, err) = run(
        Some(&url),
        &["state", "migrate", "--from", "file://.mara/pulumi-state"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.matches(": moved stack dev in file://").count(),
        14,
        "{out}"
    );
    let strays: Vec<PathBuf> = (common::tree(copy.root()).into_keys())
        .filter(|p| {
            p.components().count() > 2 && p.to_string_lossy().contains(".mara/pulumi-state")
        })
        .filter(|p| !p.starts_with(".mara"))
        .collect();
    assert!(strays.is_empty(), "{strays:?}");
    let (code, out, err) = run(Some(&url), &["preview", "--expect-no-changes"]);
    assert_eq!(code, 0, "{out}{err}");

    // A teammate's own role (a member of the one that owns what the backends made).
    server.role_with_password("bob", "bob-pw-41");
    server.sql("postgres", "GRANT mara TO bob");
    let bob = format!(
        "postgres://bob:bob-pw-41@127.0.0.1:{}/fresh?sslmode=disable",
        server.port
    );
    let (code, out, err) = run(Some(&bob), &["preview", "--expect-no-changes"]);
    assert_eq!(code, 0, "{out}{err}");
}
