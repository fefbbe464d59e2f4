//! First runs and secrets: the guided conversation on a real terminal, the precise error without
//! one, a provider switch refused, and no secret value anywhere — not in mara's output, its logs
//! and reports, the workspace's files, nor any command line the stand-in recorded; a secret split
//! by a CR, a CRLF or an LF in no log file, `mara logs` or served page, on either ledger.

mod common;

use common::Deployment as Case;
use common::Terminal;
use common::web::{BROKEN, holds_no_broken_secret, leaky_workspace};

const SECRETS: [(&str, &str); 5] = [
    (
        "MARA_SECRET_PROMETHEUS_ADMINPASS",
        "Zq7-prom-admin-leak-check",
    ),
    ("MARA_SECRET_SIRIUS_ACCOUNTS_PWD", "Zq7-accounts-leak-check"),
    ("MARA_SECRET_SIRIUS_LEDGER_PWD", "Zq7-ledger-leak-check"),
    ("MARA_SECRET_SIRIUS_DEMO_LOGIN_USER", "Zq7-user-leak-check"),
    ("MARA_SECRET_SIRIUS_DEMO_LOGIN_PWD", "Zq7-login-leak-check"),
];

impl Case {
    /// A copy of the example without its demo secrets (and, with `first_run`, without its
    /// configuration), the stand-in as `pulumi`, and a log of its calls.
    fn new(first_run: bool) -> Case {
        let case = Case::of("mara-local");
        let env_file = case.root().join("config/pulumi/environment");
        let text: String = std::fs::read_to_string(&env_file)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with("MARA_SECRET_"))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&env_file, text).unwrap();
        if first_run {
            std::fs::remove_file(case.root().join("config/pulumi/Pulumi.dev.yaml")).unwrap();
        }
        case
    }

    /// The stand-in, in a project directory, with the example's backend and passphrase.
    fn pulumi(&self, project: &str, args: &[&str]) -> String {
        let output = std::process::Command::new(common::stand_in())
            .args(args)
            .current_dir(self.root().join(project))
            .env(
                "PULUMI_BACKEND_URL",
                format!(
                    "file://{}",
                    self.root().join(".mara/pulumi-state").display()
                ),
            )
            .env("PULUMI_CONFIG_PASSPHRASE", "mara-local-example")
            .output()
            .unwrap();
        String::from_utf8(output.stdout).unwrap()
    }

    /// A secret as the secrets project stores it for stack `dev`.
    fn stored(&self, key: &str) -> String {
        self.pulumi(
            "kubernetes/secrets",
            &["--non-interactive", "config", "get", key, "--stack", "dev"],
        )
        .trim()
        .to_string()
    }

    /// The stand-in's log as it is written.
    fn calls_text(&self) -> String {
        std::fs::read_to_string(self.log()).unwrap_or_default()
    }
}

#[test]
fn ctrl_c_at_a_hidden_secret_prompt_is_an_interruption() {
    let case = Case::new(true);
    let mut terminal = Terminal::start(case.root(), case.bin.path(), "up --yes");
    terminal.wait_for("Name of the simulated cluster");
    terminal.type_keys("\r");
    terminal.wait_for("Number of simulated nodes");
    terminal.type_keys("\r");
    terminal.wait_for("Prometheus administrator password");
    terminal.type_keys("Zq7-half");
    terminal.type_keys("\x03");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 130, "{screen}");
    assert!(!screen.contains("Zq7-half"), "never echoed: {screen}");
    assert!(!screen.contains("cannot"), "{screen}");
    let history = case
        .mara()
        .args(["--output", "json", "history"])
        .output()
        .unwrap();
    let history: serde_json::Value = serde_json::from_slice(&history.stdout).unwrap();
    assert_eq!(history, serde_json::json!([]), "nothing recorded");
}

#[test]
fn the_first_run_and_the_secrets_are_asked_on_a_terminal() {
    let case = Case::new(true);
    let log = case.log().display().to_string();
    let mut terminal = Terminal::start_with(
        case.root(),
        case.bin.path(),
        "up --yes",
        &[("PULUMI_STAND_IN_LOG", &log)],
    );
    terminal.wait_for("Name of the simulated cluster");
    terminal.type_keys("\r"); // the default: mara-dev
    terminal.wait_for("Number of simulated nodes");
    terminal.type_keys("many\r");
    terminal.wait_for("is not a whole number");
    terminal.type_keys("5\r");
    let answers = [
        ("Prometheus administrator password", "Zq7-typed-prom"),
        (
            "Bank of Sirius Accounts Database password",
            "Zq7-typed-accounts",
        ),
        (
            "Bank of Sirius Ledger Database password",
            "Zq7-typed-ledger",
        ),
    ];
    for (prompt, answer) in answers {
        terminal.wait_for(prompt);
        terminal.type_keys(&format!("{answer}\r"));
        terminal.wait_for("Repeat it");
        terminal.type_keys(&format!("{answer}\r"));
    }
    // A default: an empty answer takes it, and is not asked again.
    terminal.wait_for("Bank of Sirius demo site login username (it has a default: Enter keeps it)");
    let repeats = terminal.screen.lock().unwrap().matches("Repeat it").count();
    terminal.type_keys("\r");
    // Two different entries are asked again.
    terminal.wait_for("Bank of Sirius demo site login password");
    let repeated = terminal.screen.lock().unwrap().matches("Repeat it").count();
    assert_eq!(
        repeated, repeats,
        "Enter kept the default: nothing to repeat"
    );
    terminal.type_keys("Zq7-one\r");
    terminal.wait_for("Repeat it");
    terminal.type_keys("Zq7-two\r");
    terminal.wait_for("The two entries differ");
    terminal.type_keys("Zq7-typed-login\r");
    terminal.wait_for("Repeat it");
    terminal.type_keys("Zq7-typed-login\r");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 0, "{screen}");
    assert!(
        !screen.contains("Zq7-typed"),
        "hidden input is never echoed: {screen}"
    );

    // The configuration, written as Pulumi reads it, with the provider recorded.
    let written =
        std::fs::read_to_string(case.root().join("config/pulumi/Pulumi.dev.yaml")).unwrap();
    let config: serde_json::Value = serde_saphyr::from_str(&written).unwrap();
    assert_eq!(
        config["config"]["kubernetes:infra_type"], "local",
        "{written}"
    );
    assert_eq!(config["config"]["local-cluster:cluster_name"], "mara-dev");
    assert_eq!(config["config"]["local-cluster:node_count"], 5);
    let nodes = case.pulumi(
        "infrastructure/local/cluster",
        &[
            "--non-interactive",
            "stack",
            "output",
            "node_count",
            "--stack",
            "dev",
        ],
    );
    assert_eq!(nodes.trim(), "5", "Pulumi read the answer back");

    // The secrets, stored encrypted in the secrets project, read back by Pulumi.
    let stored =
        std::fs::read_to_string(case.root().join("kubernetes/secrets/Pulumi.dev.yaml")).unwrap();
    assert!(
        stored.contains("prometheus:adminpass")
            && stored.contains("secure:")
            && !stored.contains("Zq7"),
        "{stored}"
    );
    let get = |key: &str| {
        case.pulumi(
            "kubernetes/secrets",
            &["--non-interactive", "config", "get", key, "--stack", "dev"],
        )
    };
    assert_eq!(get("prometheus:adminpass").trim(), "Zq7-typed-prom");
    assert_eq!(get("sirius:demo_login_user").trim(), "testuser");
    assert_eq!(get("sirius:demo_login_pwd").trim(), "Zq7-typed-login");
    assert!(
        !case.calls_text().contains("Zq7"),
        "a secret was on a command line"
    );

    // A second up asks nothing.
    case.mara().args(["up", "--yes"]).assert().success();
}

#[test]
fn without_a_terminal_one_error_lists_everything_missing_and_nothing_runs() {
    let case = Case::new(true);
    let output = case.mara().args(["up", "--yes"]).output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    let err = common::stderr(&output);
    for key in [
        "local-cluster:cluster_name",
        "local-cluster:node_count",
        "MARA_SECRET_PROMETHEUS_ADMINPASS",
        "MARA_SECRET_SIRIUS_ACCOUNTS_PWD",
        "MARA_SECRET_SIRIUS_LEDGER_PWD",
        "MARA_SECRET_SIRIUS_DEMO_LOGIN_USER",
        "MARA_SECRET_SIRIUS_DEMO_LOGIN_PWD",
    ] {
        assert!(err.contains(key), "{key} missing from:\n{err}");
    }
    assert!(err.contains("config/pulumi/Pulumi.dev.yaml"), "{err}");
    assert!(case.calls().is_empty(), "no engine call before the error");
    assert!(
        !case.root().join("config/pulumi/Pulumi.dev.yaml").exists(),
        "no file written"
    );

    // With the configuration there and the secrets in the environment, it runs.
    let case = Case::new(false);
    let mut cmd = case.mara();
    cmd.args(["up", "--yes", "--report", "report.json"]);
    for (key, value) in SECRETS {
        cmd.env(key, value);
    }
    let output = cmd.output().unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert_eq!(case.stored("prometheus:adminpass"), SECRETS[0].1);
}

#[test]
fn a_provider_switch_on_an_existing_stack_is_refused() {
    let case = Case::new(false);
    let config = case.root().join("config/pulumi/Pulumi.dev.yaml");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("kubernetes:infra_type: local", "kubernetes:infra_type: AWS");
    std::fs::write(&config, text).unwrap();
    let mut cmd = case.mara();
    cmd.args(["up", "--yes", "--provider", "local"]);
    for (key, value) in SECRETS {
        cmd.env(key, value);
    }
    let output = cmd.output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    let err = common::stderr(&output);
    assert!(
        err.contains("config/pulumi/Pulumi.dev.yaml:2")
            && err.contains("`AWS`")
            && err.contains("provider local"),
        "{err}"
    );
    assert!(err.contains("destroy it"), "the remedy: {err}");
    assert!(case.calls().is_empty());
}

#[test]
fn no_secret_value_appears_anywhere() {
    let case = Case::new(false);
    // A hook that prints a stored secret, as a careless script would: mara must hide it.
    let provider = case.root().join("providers/local.toml");
    let mut text = std::fs::read_to_string(&provider).unwrap();
    text.push_str(
        "\n[[project]]\npath = \"kubernetes/secrets\"\ndescription = \"Secrets\"\nafter = [\"infrastructure/kubeconfig\"]\n\n[[project.on_success]]\nkind = \"command\"\nrun = \"echo leaked: $(pulumi --non-interactive config get prometheus:adminpass --stack dev)\"\n",
    );
    std::fs::write(&provider, text).unwrap();
    let mut cmd = case.mara();
    cmd.args([
        "up",
        "--yes",
        "--report",
        "report.json",
        "--junit",
        "junit.xml",
        "--output",
        "json",
    ])
    .env("GITHUB_STEP_SUMMARY", case.root().join("summary.md"));
    for (key, value) in SECRETS {
        cmd.env(key, value);
    }
    let output = cmd.output().unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let stdout = common::stdout(&output);
    let stderr = common::stderr(&output);
    assert!(
        stderr.contains("leaked: [secret]"),
        "the hook ran and its output was redacted: {stderr}"
    );
    let mut places: Vec<(String, String)> =
        vec![("stdout".into(), stdout), ("stderr".into(), stderr)];
    for (path, content) in common::tree(case.root()) {
        if let Some(content) = content {
            places.push((
                path.display().to_string(),
                String::from_utf8_lossy(&content).into_owned(),
            ));
        }
    }
    let logs = places
        .iter()
        .filter(|(p, _)| p.starts_with(".mara/logs/"))
        .count();
    assert!(logs >= 14, "every project has its log: {logs}");
    for (_, secret) in SECRETS {
        for (place, content) in &places {
            assert!(!content.contains(secret), "{secret} appears in {place}");
        }
    }
}

#[test]
fn config_get_set_and_list() {
    let case = Case::new(false);
    case.mara()
        .args(["config", "set", "local-cluster:node_count", "4"])
        .assert()
        .success();
    case.mara()
        .args(["config", "set", "--secret", "prometheus:adminpass"])
        .write_stdin("Zq7-from-stdin\n")
        .assert()
        .success();
    case.mara()
        .args([
            "config",
            "set",
            "--path",
            "local-cluster:labels.team",
            "platform",
        ])
        .assert()
        .success();

    let get =
        |args: &[&str]| common::stdout(&case.mara().arg("config").args(args).output().unwrap());
    assert_eq!(get(&["get", "local-cluster:node_count"]), "4\n");
    assert_eq!(
        get(&["get", "local-cluster:labels"]),
        "{\"team\":\"platform\"}\n"
    );
    assert_eq!(get(&["get", "prometheus:adminpass"]), "[secret]\n");
    assert_eq!(
        get(&["get", "prometheus:adminpass", "--show-secrets"]),
        "Zq7-from-stdin\n"
    );

    let list: serde_json::Value =
        serde_json::from_str(&get(&["--output", "json", "list"])).unwrap();
    assert_eq!(
        list["prometheus:adminpass"],
        serde_json::json!({"value": "[secret]", "secret": true, "file": "kubernetes/secrets/Pulumi.dev.yaml"})
    );
    assert_eq!(list["kubernetes:infra_type"]["value"], "local");
    let table = get(&["list"]);
    assert!(
        table.contains("prometheus:adminpass")
            && table.contains("[secret]")
            && !table.contains("Zq7"),
        "{table}"
    );

    // The secret was on no command line, and is in no file in plain text.
    assert!(!case.calls_text().contains("Zq7"));
    for (path, content) in common::tree(case.root()) {
        if let Some(content) = content {
            assert!(
                !String::from_utf8_lossy(&content).contains("Zq7"),
                "{}",
                path.display()
            );
        }
    }

    let output = case
        .mara()
        .args(["config", "get", "nope:key"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(
        common::stderr(&output)
            .contains("`nope:key` is set neither in config/pulumi/Pulumi.dev.yaml")
    );
    let output = case
        .mara()
        .args(["config", "set", "bare", "x"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));

    // A secret on mara's own command line is refused; an empty input sets nothing.
    let output = case
        .mara()
        .args([
            "config",
            "set",
            "--secret",
            "prometheus:adminpass",
            "Zq7-argv",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        common::stderr(&output).contains("a secret is never given on the command line"),
        "{}",
        common::stderr(&output)
    );
    let output = case
        .mara()
        .args(["config", "set", "--secret", "prometheus:adminpass"])
        .write_stdin("")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        get(&["get", "prometheus:adminpass", "--show-secrets"]),
        "Zq7-from-stdin\n",
        "nothing was set"
    );
}

#[test]
fn a_first_run_token_is_kept_in_the_secrets_project_and_reaches_every_engine() {
    // A provider whose first run asks for a token (as do's and linode's do): answered by
    // MARA_SECRET_DEMO_TOKEN, it is stored in the secrets project, never in the shared file, and
    // each project's processes get it as DEMO_TOKEN.
    let ws = common::Workspace::new(&[
        ("mara.toml", "provider = \"p\"\n"),
        (
            "config/pulumi/environment",
            "PULUMI_STACK=dev\nPULUMI_BACKEND_URL=file://.mara/state\nPULUMI_CONFIG_PASSPHRASE=x\n",
        ),
        (
            "providers/p.toml",
            "description = \"p\"\ninfra_type = \"p\"\n\
             [[config]]\nkey = \"demo:token\"\nprompt = \"API token\"\nkind = \"secret\"\nenv = \"DEMO_TOKEN\"\n\
             [[project]]\npath = \"kubernetes/secrets\"\n\
             [[project]]\npath = \"a\"\nup = \"test \\\"$DEMO_TOKEN\\\" = Zq7-token && echo token reached a\"\ndestroy = \"true\"\n",
        ),
    ]);
    ws.project("kubernetes/secrets", "secrets");
    let bin = common::stand_in_bin();
    let mara = || {
        let mut cmd = ws.mara();
        cmd.env("PATH", common::path_with(bin.path()))
            .env("HOME", ws.path().join("home"));
        cmd
    };
    let output = mara()
        .args(["up", "--yes"])
        .env("MARA_SECRET_DEMO_TOKEN", "Zq7-token")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert!(common::stdout(&output).contains("token reached a"));
    let shared = std::fs::read_to_string(ws.path().join("config/pulumi/Pulumi.dev.yaml")).unwrap();
    assert!(!shared.contains("demo:token"), "{shared}");
    let stored =
        std::fs::read_to_string(ws.path().join("kubernetes/secrets/Pulumi.dev.yaml")).unwrap();
    assert!(
        stored.contains("demo:token") && stored.contains("secure"),
        "{stored}"
    );
    // The next run, with nothing in the environment, reads it back for the engines.
    let output = mara().args(["up", "--yes"]).output().unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert!(common::stdout(&output).contains("token reached a"));
    assert!(!common::stdout(&output).contains("Zq7"));
}

#[test]
fn a_first_run_that_leaves_a_required_key_unset_stops_before_anything_runs() {
    // An optional question answered with nothing leaves unset a key a project requires.
    let ws = common::Workspace::new(&[
        ("mara.toml", "provider = \"p\"\n"),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        (
            "providers/p.toml",
            "description = \"p\"\n\
             [[config]]\nkey = \"demo:name\"\nprompt = \"A name, if you like\"\noptional = true\n\
             [[project]]\npath = \"a\"\nrequired_config = [\"demo:name\"]\nup = \"touch ran\"\ndestroy = \"true\"\n",
        ),
    ]);
    let bin = tempfile::tempdir().unwrap();
    let mut terminal = Terminal::start(ws.path(), bin.path(), "up --yes");
    terminal.wait_for("A name, if you like");
    terminal.type_keys("\r");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 3, "{screen}");
    assert!(
        screen.contains("`demo:name`: required by a but not set"),
        "{screen}"
    );
    assert!(!ws.path().join("ran").exists(), "the project ran");
}

#[test]
fn secret_outputs_a_hook_prints_are_redacted() {
    let case = Case::new(false);
    let dir = case.root().join("utility/vault");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("Pulumi.yaml"),
        "name: vault\nruntime: yaml\noutputs:\n  token: ${token}\n  url: https://vault.example\n\
         variables:\n  token:\n    fn::secret: Zq7-output-secret-${pulumi.stack}\n",
    )
    .unwrap();
    let provider = case.root().join("providers/local.toml");
    let mut text = std::fs::read_to_string(&provider).unwrap();
    text.push_str(
        "\n[[project]]\npath = \"utility/vault\"\ndescription = \"Vault\"\n\n\
         [[project.on_success]]\nkind = \"command\"\n\
         run = 'echo \"token=$MARA_OUTPUT_TOKEN url=$MARA_OUTPUT_URL\"'\n",
    );
    std::fs::write(&provider, text).unwrap();
    let mut cmd = case.mara();
    cmd.args(["up", "--yes", "--only", "utility/vault"]);
    for (key, value) in SECRETS {
        cmd.env(key, value);
    }
    let output = cmd.output().unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let shown = format!("{}{}", common::stdout(&output), common::stderr(&output));
    assert!(
        shown.contains("token=[secret] url=https://vault.example"),
        "the secret output is redacted, the plain one shown: {shown}"
    );
    let logs: String = common::tree(&case.root().join(".mara/logs"))
        .into_values()
        .flatten()
        .map(|c| String::from_utf8_lossy(&c).into_owned())
        .collect();
    assert!(logs.contains("token=[secret]"), "{logs}");
    assert!(!logs.contains("Zq7-output-secret") && !shown.contains("Zq7-output-secret"));
}

/// Typed, nested configuration (issue 14, item 3): `config set --path` writes the value where it
/// belongs and nothing else changes; a `[[config]]` entry types and checks it before anything is
/// written; a nested `required_config` path holds `validate` and `up` until it is set, here as
/// a secret with `--path --secret`, whose value then appears on no command line, in no output,
/// file or report.
#[test]
fn typed_nested_configuration() {
    let case = Case::new(false);
    let provider = case.root().join("providers/local.toml");
    let text = std::fs::read_to_string(&provider)
        .unwrap()
        .replace(
            "path = \"infrastructure/local/registry\"\n",
            "path = \"infrastructure/local/registry\"\nrequired_config = [\"local-registry:registry_config.required_env.DATABASE_URL\"]\n",
        )
        .replace(
            "[[project]]\npath = \"infrastructure/local/cluster\"",
            "[[config]]\nkey = \"local-cluster:limits.max_pods\"\nprompt = \"Pods per node\"\nkind = \"int\"\nchoices = [110, 250]\ndefault = 110\n\n[[project]]\npath = \"infrastructure/local/cluster\"",
        );
    std::fs::write(&provider, text).unwrap();
    let shared = case.root().join("config/pulumi/Pulumi.dev.yaml");
    let original = std::fs::read_to_string(&shared)
        .unwrap()
        .replace("config:\n", "# the team's notes stay\nconfig:\n")
        .replace(
            "local-cluster:cluster_name: mara-dev\n",
            "local-cluster:cluster_name: mara-dev # named after the stack\n",
        );
    std::fs::write(&shared, &original).unwrap();
    let mara = |args: &[&str]| case.mara().args(args).output().unwrap();

    // A value that does not fit its kind or choices is refused, and nothing is written.
    for (args, says) in [
        (
            vec!["config", "set", "local-cluster:node_count", "four"],
            "must be a whole number, not `four`",
        ),
        (
            vec![
                "config",
                "set",
                "--path",
                "local-cluster:limits.max_pods",
                "120",
            ],
            "must be one of 110, 250, not `120`",
        ),
        (
            vec!["config", "set", "local-cluster:limits.max_pods", "250"],
            "without --path it would be a key of its own",
        ),
        (
            vec![
                "config",
                "set",
                "--path",
                "local-cluster:cluster_name.x",
                "y",
            ],
            "`local-cluster:cluster_name` is a string, not a mapping",
        ),
        (
            vec!["config", "set", "--path", "local-cluster:limits..x", "y"],
            "not a configuration path",
        ),
    ] {
        let output = mara(&args);
        let err = common::stderr(&output);
        assert!(!output.status.success(), "{args:?}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(std::fs::read_to_string(&shared).unwrap(), original);
    }
    let err = common::stderr(&mara(&[
        "config",
        "set",
        "local-cluster:limits.max_pods",
        "250",
    ]));
    assert!(
        err.contains("mara config set --path local-cluster:limits.max_pods"),
        "{err}"
    );

    // Typed values, written in place: the comments and the other lines stay as they were.
    for args in [
        vec!["config", "set", "local-cluster:node_count", "5"],
        vec![
            "config",
            "set",
            "--path",
            "local-cluster:limits.max_pods",
            "250",
        ],
        vec![
            "config",
            "set",
            "--path",
            "local-cluster:labels.team",
            "platform",
        ],
    ] {
        let output = mara(&args);
        assert!(
            output.status.success(),
            "{args:?}: {}",
            common::stderr(&output)
        );
    }
    let written = std::fs::read_to_string(&shared).unwrap();
    assert_eq!(
        written,
        original.replace(
            "local-cluster:node_count: 3\n",
            "local-cluster:node_count: 5\n"
        ) + "  local-cluster:limits:\n    max_pods: 250\n  local-cluster:labels:\n    team: platform\n",
    );
    let get = |args: &[&str]| common::stdout(&mara(&[&["config", "get"], args].concat()));
    assert_eq!(get(&["--path", "local-cluster:limits.max_pods"]), "250\n");
    assert_eq!(get(&["local-cluster:limits"]), "{\"max_pods\":250}\n");
    let json: serde_json::Value = serde_json::from_slice(
        &mara(&[
            "--output",
            "json",
            "config",
            "get",
            "--path",
            "local-cluster:limits.max_pods",
        ])
        .stdout,
    )
    .unwrap();
    assert_eq!(
        json,
        serde_json::json!({"key": "local-cluster:limits.max_pods", "value": 250, "secret": false,
                           "file": "config/pulumi/Pulumi.dev.yaml"})
    );

    // The nested required key holds validate and up, before any engine call.
    let key = "local-registry:registry_config.required_env.DATABASE_URL";
    let output = mara(&["validate"]);
    assert_eq!(output.status.code(), Some(3));
    let out = common::stdout(&output);
    assert!(
        out.contains(&format!(
            "`{key}`: required by infrastructure/local/registry but not set"
        )) && out.contains(&format!("mara config set --path {key} VALUE")),
        "{out}"
    );
    let mut up = case.mara();
    up.args(["up", "--yes"]);
    for (name, value) in SECRETS {
        up.env(name, value);
    }
    let output = up.output().unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", common::stderr(&output));
    let output = mara(&["preview"]);
    assert_eq!(
        output.status.code(),
        Some(3),
        "a preview runs the same programs"
    );
    assert!(
        case.calls().is_empty(),
        "no engine call before the checks pass"
    );

    // Set as a secret at its path: encrypted in the secrets project, shown as [secret]; the
    // same key's plain parts stay in the shared file.
    let output = mara(&[
        "config",
        "set",
        "--path",
        "local-registry:registry_config.replicas",
        "2",
    ]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    let output = case
        .mara()
        .args(["config", "set", "--path", "--secret", key])
        .write_stdin("Zq7-postgres://app:pw@db/app\n")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let stored =
        std::fs::read_to_string(case.root().join("kubernetes/secrets/Pulumi.dev.yaml")).unwrap();
    assert!(
        stored.contains("registry_config") && stored.contains("DATABASE_URL:\n        secure: v1:"),
        "{stored}"
    );
    assert_eq!(get(&["--path", key]), "[secret]\n");
    assert_eq!(
        get(&["local-registry:registry_config"]),
        "{\"replicas\":2,\"required_env\":{\"DATABASE_URL\":\"[secret]\"}}\n",
        "both files' parts"
    );
    assert_eq!(
        get(&["local-registry:registry_config", "--show-secrets"]),
        "{\"replicas\":2,\"required_env\":{\"DATABASE_URL\":\"Zq7-postgres://app:pw@db/app\"}}\n"
    );
    assert_eq!(
        get(&["--path", key, "--show-secrets"]),
        "Zq7-postgres://app:pw@db/app\n"
    );
    let list: serde_json::Value =
        serde_json::from_slice(&mara(&["--output", "json", "config", "list"]).stdout).unwrap();
    assert_eq!(
        list["local-registry:registry_config"],
        serde_json::json!({
            "value": {"replicas": 2, "required_env": {"DATABASE_URL": "[secret]"}},
            "secret": true,
            "file": "config/pulumi/Pulumi.dev.yaml",
            "secrets_file": "kubernetes/secrets/Pulumi.dev.yaml"
        })
    );
    // One path in both files is refused, either way round.
    let output = mara(&["config", "set", "--path", key, "plain"]);
    assert_eq!(output.status.code(), Some(3));
    assert!(
        common::stderr(&output)
            .contains("is set as a secret in kubernetes/secrets/Pulumi.dev.yaml"),
        "{}",
        common::stderr(&output)
    );
    let output = case
        .mara()
        .args([
            "config",
            "set",
            "--path",
            "--secret",
            "local-registry:registry_config.replicas",
        ])
        .write_stdin("3\n")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(
        common::stderr(&output).contains("is set in plain text in config/pulumi/Pulumi.dev.yaml"),
        "{}",
        common::stderr(&output)
    );

    // Now it holds; a hook that prints the secret, as a careless script would, shows
    // [secret]; a value edited by hand to the wrong kind is named by its line.
    let mut text = std::fs::read_to_string(&provider).unwrap();
    text.push_str(&format!(
        "\n[[project]]\npath = \"kubernetes/secrets\"\ndescription = \"Secrets\"\nafter = [\"infrastructure/kubeconfig\"]\n\n[[project.on_success]]\nkind = \"command\"\nrun = \"echo leaked: $(pulumi --non-interactive config get --path {key} --stack dev)\"\n",
    ));
    std::fs::write(&provider, text).unwrap();
    let output = mara(&["validate"]);
    assert!(
        !common::stdout(&output).contains("but not set"),
        "{}",
        common::stdout(&output)
    );
    let mut up = case.mara();
    up.args(["up", "--yes", "--report", "report.json", "--output", "json"]);
    for (name, value) in SECRETS {
        up.env(name, value);
    }
    let output = up.output().unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert!(
        common::stderr(&output).contains("leaked: [secret]"),
        "the hook ran and its output was redacted: {}",
        common::stderr(&output)
    );
    let mut places = vec![
        common::stdout(&output),
        common::stderr(&output),
        case.calls_text(),
    ];
    for (_, content) in common::tree(case.root()) {
        places.extend(content.map(|c| String::from_utf8_lossy(&c).into_owned()));
    }
    assert!(
        places.iter().all(|p| !p.contains("Zq7-postgres")),
        "the secret leaked"
    );

    std::fs::write(&shared, written.replace("max_pods: 250", "max_pods: lots")).unwrap();
    let output = mara(&["validate"]);
    assert_eq!(output.status.code(), Some(3));
    let out = common::stdout(&output);
    assert!(
        out.contains("config/pulumi/Pulumi.dev.yaml:7: `local-cluster:limits.max_pods` must be a whole number, not `lots`"),
        "{out}"
    );

    // A stack without configuration: a first value says what its first run will no longer ask.
    let first = Case::new(true);
    let output = first
        .mara()
        .args(["config", "set", "local-cluster:node_count", "4"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let err = common::stderr(&output);
    assert!(
        err.contains("note: config/pulumi/Pulumi.dev.yaml had no configuration")
            && err.contains("set local-cluster:cluster_name as well"),
        "{err}"
    );
}

#[test]
fn the_secrets_project_alone_is_deployed_with_every_secret_stored() {
    // What it follows needs no secret: deployed alone, it asks for none.
    let case = Case::new(false);
    let output = case
        .mara()
        .args([
            "up",
            "--yes",
            "--only",
            "infrastructure/kubeconfig",
            "--with-dependencies",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    // The secrets project reads every project's secrets from its own configuration: deployed
    // alone (as a CI job of a fanned-out run is, on a runner of its own), it needs them all.
    let calls = case.calls().len();
    let output = case
        .mara()
        .args(["up", "--yes", "--only", "kubernetes/secrets"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let err = common::stderr(&output);
    for (key, _) in SECRETS {
        assert!(err.contains(key), "{key} missing from:\n{err}");
    }
    assert_eq!(case.calls().len(), calls, "no engine call before the error");

    let mut cmd = case.mara();
    cmd.args(["up", "--yes", "--only", "kubernetes/secrets"]);
    for (key, value) in SECRETS {
        cmd.env(key, value);
    }
    let output = cmd.output().unwrap();
    assert!(
        output.status.success(),
        "{}\n{}",
        common::stdout(&output),
        common::stderr(&output)
    );
    assert_eq!(case.stored("sirius:ledger_pwd"), SECRETS[2].1);
}

#[test]
fn an_interactive_first_up_selects_each_stack_once() {
    let case = Case::new(true);
    let log = case.log().display().to_string();
    let mut terminal = Terminal::start_with(
        case.root(),
        case.bin.path(),
        "up",
        &[("PULUMI_STAND_IN_LOG", &log)],
    );
    terminal.wait_for("Name of the simulated cluster");
    terminal.type_keys("\r");
    terminal.wait_for("Number of simulated nodes");
    terminal.type_keys("3\r");
    for prompt in [
        "Prometheus administrator password",
        "Bank of Sirius Accounts Database password",
        "Bank of Sirius Ledger Database password",
        "Bank of Sirius demo site login username",
        "Bank of Sirius demo site login password",
    ] {
        terminal.wait_for(prompt);
        terminal.type_keys("Zq7-once\r");
        terminal.wait_for("Repeat it");
        terminal.type_keys("Zq7-once\r");
    }
    terminal.wait_for("Do you want to perform this update?");
    terminal.type_keys("\x1b[A\r"); // up once from "no": yes
    let (code, screen) = terminal.finish();
    assert_eq!(code, 0, "{screen}");
    // Each project's stack is selected (and made) once in the run: before its preview, which
    // the update then needs not repeat; the secrets project's before its first secret only.
    let mut selects: std::collections::BTreeMap<String, usize> = Default::default();
    for call in case.calls() {
        let argv: Vec<&str> = (call["argv"].as_array().unwrap().iter())
            .map(|a| a.as_str().unwrap())
            .collect();
        if argv.windows(2).any(|w| w == ["stack", "select"]) {
            *selects
                .entry(call["cwd"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
    }
    assert_eq!(
        selects.len(),
        14,
        "every project of the example: {selects:#?}"
    );
    assert!(selects.values().all(|&n| n == 1), "{selects:#?}");

    // What the first run wrote (its answers, the environment file) is what it recorded: the
    // next `--changed` finds nothing changed.
    let output = case
        .mara()
        .args(["up", "--changed", "--yes"])
        .output()
        .unwrap();
    let said = common::stdout(&output);
    assert!(output.status.success(), "{said}{}", common::stderr(&output));
    assert!(
        said.contains("Nothing changed since the last successful up on stack dev"),
        "{said}"
    );
}

#[test]
fn config_catches_mistakes_and_removes_keys() {
    let case = Case::new(false);
    let config = case.root().join("config/pulumi/Pulumi.dev.yaml");
    let run = |args: &[&str]| case.mara().arg("config").args(args).output().unwrap();

    // A key spelled like one the provider declares: a warning, and set as given.
    let output = run(&["set", "local-cluster:node_cout", "5"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert!(
        common::stderr(&output).contains(
            "warning: no project declares or reads `local-cluster:node_cout`: did you mean `local-cluster:node_count`? (set as given)"
        ),
        "{}",
        common::stderr(&output)
    );
    // A key no provider declares, and like none, is a project's own business: no warning.
    let output = run(&["set", "app:colour", "blue"]);
    assert!(
        output.status.success() && common::stderr(&output).is_empty(),
        "{}",
        common::stderr(&output)
    );
    // Setting a declared key, or one already there, says nothing either.
    let output = run(&["set", "local-cluster:node_cout", "6"]);
    assert!(
        common::stderr(&output).is_empty(),
        "{}",
        common::stderr(&output)
    );

    // A dotted key beside a structured value is a path written without --path.
    run(&["set", "--path", "app:labels.team", "platform"]);
    let output = run(&["set", "app:labels.owner", "me"]);
    assert_eq!(output.status.code(), Some(2), "{}", common::stderr(&output));
    assert!(
        common::stderr(&output).contains("`app:labels` is a structured value in config/pulumi/Pulumi.dev.yaml: without --path this would be a key of its own beside it")
            && common::stderr(&output).contains("mara config set --path app:labels.owner"),
        "{}",
        common::stderr(&output)
    );

    // rm takes a key out in place, nothing else changed; a path, with --path.
    let before = std::fs::read_to_string(&config).unwrap();
    let output = run(&["rm", "local-cluster:node_cout"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert_eq!(
        common::stdout(&output),
        "Removed `local-cluster:node_cout` from config/pulumi/Pulumi.dev.yaml.\n"
    );
    let after = std::fs::read_to_string(&config).unwrap();
    assert_eq!(
        after,
        before.replace("  local-cluster:node_cout: \"6\"\n", ""),
        "only its line went"
    );
    run(&["set", "--path", "app:labels.owner", "me"]);
    let output = run(&["rm", "--path", "app:labels.team"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert_eq!(
        common::stdout(&run(&["get", "app:labels"])),
        "{\"owner\":\"me\"}\n"
    );
    // A secret goes from the secrets project, through Pulumi.
    case.mara()
        .args(["config", "set", "--secret", "prometheus:adminpass"])
        .write_stdin("Zq7-rm\n")
        .assert()
        .success();
    let output = run(&["rm", "prometheus:adminpass"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert_eq!(
        common::stdout(&output),
        "Removed `prometheus:adminpass` from kubernetes/secrets/Pulumi.dev.yaml.\n"
    );
    assert!(
        !std::fs::read_to_string(case.root().join("kubernetes/secrets/Pulumi.dev.yaml"))
            .unwrap()
            .contains("prometheus:adminpass")
    );
    let output = run(&["rm", "prometheus:adminpass"]);
    assert_eq!(output.status.code(), Some(3));
    assert!(common::stderr(&output).contains("`prometheus:adminpass` is set neither in"));

    // A value split between the files is listed once.
    case.mara()
        .args(["config", "set", "--secret", "--path", "app:labels.token"])
        .write_stdin("Zq7-split\n")
        .assert()
        .success();
    let table = common::stdout(&run(&["list"]));
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with("app:labels"))
        .collect();
    assert_eq!(rows.len(), 1, "{table}");
    assert!(
        rows[0].contains("[secret]")
            && rows[0]
                .contains("config/pulumi/Pulumi.dev.yaml, kubernetes/secrets/Pulumi.dev.yaml"),
        "{table}"
    );

    // A key in both files: without Pulumi to take it out of the secrets project's, it is taken
    // out of neither.
    let shared = std::fs::read_to_string(&config).unwrap();
    let output = case
        .mara()
        .args(["config", "rm", "app:labels"])
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", common::stderr(&output));
    assert!(
        common::stderr(&output).contains("cannot run `pulumi config rm`"),
        "{}",
        common::stderr(&output)
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), shared);
    let output = run(&["rm", "app:labels"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert_eq!(
        common::stdout(&output),
        "Removed `app:labels` from kubernetes/secrets/Pulumi.dev.yaml.\n\
         Removed `app:labels` from config/pulumi/Pulumi.dev.yaml.\n"
    );
    assert!(
        !std::fs::read_to_string(&config)
            .unwrap()
            .contains("app:labels")
    );

    // A plain value set in both files is listed with the shared file's value (what every project
    // but the secrets one reads), and is no secret.
    run(&["set", "app:both", "1"]);
    let secrets_file = case.root().join("kubernetes/secrets/Pulumi.dev.yaml");
    let text = std::fs::read_to_string(&secrets_file).unwrap();
    assert!(text.contains("config: {}\n"), "{text}");
    let text = text.replacen("config: {}\n", "config:\n  app:both: \"2\"\n", 1);
    std::fs::write(&secrets_file, text).unwrap();
    let listed = case
        .mara()
        .args(["--output", "json", "config", "list"])
        .output()
        .unwrap();
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed["app:both"]["value"], "1", "{listed:#}");
    assert_eq!(listed["app:both"]["secret"], false, "{listed:#}");
    assert_eq!(listed["app:both"]["file"], "config/pulumi/Pulumi.dev.yaml");
    assert_eq!(
        listed["app:both"]["secrets_file"],
        "kubernetes/secrets/Pulumi.dev.yaml"
    );

    // A value out of its bounds is set, with a warning naming the bound (the next key set may
    // mend it); a declared secret is never set in plain text.
    run(&["set", "-p", "aws", "eks:max_size", "2"]);
    let output = run(&["set", "-p", "aws", "eks:desired_capacity", "50"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert!(
        common::stderr(&output).contains(
            "warning: `eks:desired_capacity` is 50, more than `eks:max_size` (2): `mara -p aws up` and `mara -p aws validate` refuse it"
        ),
        "{}",
        common::stderr(&output)
    );
    let output = run(&["set", "-p", "aws", "eks:desired_capacity", "2"]);
    assert_eq!(common::stderr(&output), "");
    let output = run(&["set", "sirius:ledger_pwd", "plaintext"]);
    assert_eq!(output.status.code(), Some(2), "{}", common::stderr(&output));
    assert!(
        common::stderr(&output).contains("is a secret: it is never stored in plain text")
            && common::stderr(&output).contains("`mara config set --secret sirius:ledger_pwd`"),
        "{}",
        common::stderr(&output)
    );
    assert!(
        !std::fs::read_to_string(&config)
            .unwrap()
            .contains("plaintext")
    );

    // Values are read as Pulumi reads them, and an edit touches nothing else, even inside a flow
    // mapping: `0755` stays `0755`, `no` stays `no`.
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replacen(
        "config:\n",
        "config:\n  app:mode: 0755\n  app:obj: {mode: 0755, debug: no}  # as written\n",
        1,
    );
    std::fs::write(&config, &text).unwrap();
    assert_eq!(common::stdout(&run(&["get", "app:mode"])), "0755\n");
    assert_eq!(
        common::stdout(&run(&["get", "app:obj"])),
        "{\"mode\":493,\"debug\":\"no\"}\n"
    );
    let output = run(&["set", "--path", "app:obj.debug", "yes"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        text.replace("debug: no}", "debug: \"yes\"}")
    );
    // A number with a leading zero stays text, as Pulumi's `config set --path` keeps it.
    let output = run(&["set", "--path", "app:lz.mode", "0644"]);
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert!(
        std::fs::read_to_string(&config)
            .unwrap()
            .contains("mode: \"0644\""),
        "{}",
        std::fs::read_to_string(&config).unwrap()
    );
    // A new key inside it would mean writing it anew: refused, naming the line, nothing written.
    let before = std::fs::read_to_string(&config).unwrap();
    let output = run(&["set", "--path", "app:obj.replicas", "3"]);
    assert_eq!(output.status.code(), Some(3), "{}", common::stderr(&output));
    assert!(
        common::stderr(&output).contains("config/pulumi/Pulumi.dev.yaml:"),
        "{}",
        common::stderr(&output)
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), before);
}

#[test]
fn mara_output_never_prints_a_stored_secret_even_in_an_output_not_marked_secret() {
    let case = Case::new(false);
    // A program that hands a stored secret on as a plain output (a mistake mara still covers).
    let program = case.root().join("kubernetes/prometheus/Pulumi.yaml");
    let text = std::fs::read_to_string(&program).unwrap();
    let leaked = format!(
        "  leaked: \"{}\"\n  count: 7\n  keyed:\n    \"{}\": x\n",
        SECRETS[0].1, SECRETS[1].1
    );
    std::fs::write(&program, format!("{text}{leaked}")).unwrap();
    let mut up = case.mara();
    up.args(["up", "--yes"]);
    for (key, value) in SECRETS {
        up.env(key, value);
    }
    let output = up.output().unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    // Without MARA_SECRET_* in the environment: the secret is known as Pulumi stores it.
    let output = case
        .mara()
        .args(["output", "kubernetes/prometheus"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    let shown: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(shown["leaked"], "[secret]", "{shown:#}");
    assert_eq!(shown["count"], 7);
    assert_eq!(
        shown["keyed"],
        serde_json::json!({"[secret]": "x"}),
        "a key too"
    );
    assert!(!common::stdout(&output).contains(SECRETS[0].1));
    assert!(!common::stdout(&output).contains(SECRETS[1].1));
    let output = case
        .mara()
        .args(["output", "kubernetes/prometheus", "--show-secrets"])
        .output()
        .unwrap();
    assert!(common::stdout(&output).contains(SECRETS[0].1), "asked for");
}

#[test]
fn a_secret_split_by_cr_crlf_or_lf_is_redacted_in_logs_and_on_the_web_page() {
    let w = leaky_workspace();
    let bin = common::stand_in_bin();
    let server = common::postgres::Server::start();
    let urls: Vec<Option<String>> = [None]
        .into_iter()
        .chain(server.as_ref().map(|s| Some(s.url("broken"))))
        .collect();
    for (n, url) in urls.iter().enumerate() {
        let ledger: Vec<(&str, &str)> = url
            .iter()
            .map(|u| ("MARA_LEDGER_URL", u.as_str()))
            .collect();
        let mara = || {
            let mut cmd = w.mara();
            cmd.env("PATH", common::path_with(bin.path()))
                .env("HOME", w.path().join("home"))
                .envs(ledger.iter().copied());
            cmd
        };
        // Stored at the first run; read back from the secrets project at the second.
        let mut up = mara();
        up.args(["up", "--yes"]);
        if n == 0 {
            up.envs(BROKEN.map(|(key, value, _)| (key, value)));
        }
        let output = up.output().unwrap();
        let said = common::stderr(&output) + &common::stdout(&output);
        assert!(output.status.success(), "{said}");
        // Every way it was printed is there, redacted.
        for shown in [
            "raw cr: [secret].",
            "[secret]_end",
            "json lf: \"[secret]\"",
            "twice crlf: \"[secret]\"",
        ] {
            assert!(said.contains(shown), "{shown}: {said}");
        }
        holds_no_broken_secret("the terminal", &said);
        let logs = common::tree(&w.path().join(".mara/logs"));
        assert!(!logs.is_empty());
        for (path, text) in logs {
            let text = String::from_utf8_lossy(&text.unwrap_or_default()).into_owned();
            holds_no_broken_secret(&path.display().to_string(), &text);
        }
        // `mara logs` reads this machine's files, or the server's rows.
        let output = mara().args(["logs"]).output().unwrap();
        let said = common::stdout(&output);
        assert!(
            output.status.success() && said.contains("[secret]_end"),
            "{said}"
        );
        holds_no_broken_secret("mara logs", &said);
        // The web page, as served.
        let serve = common::web::Serve::start(w.path(), &ledger);
        let run = common::web::runs(&serve)[0]["run_id"]
            .as_str()
            .unwrap()
            .to_string();
        for path in [
            format!("/runs/{run}"),
            format!("/runs/{run}/log?project=app"),
        ] {
            let page = serve.get(&path);
            assert!(
                page.status == 200 && page.body.contains("[secret]_end"),
                "{}",
                page.body
            );
            holds_no_broken_secret(&path, &page.body);
        }
    }
}
