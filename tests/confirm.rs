//! Confirmation on a real terminal: `mara up` previews and asks yes / no / details, `mara destroy`
//! asks for the stack name. Driven through a pseudo-terminal made by `script` (util-linux), answering
//! each prompt once it appears.

mod common;

use std::path::Path;

use common::Deployment;

/// Whether `project`'s stack on `dev` holds resources.
fn deployed(workspace: &Path, project: &str) -> bool {
    std::fs::read_to_string(workspace.join(format!(
        ".mara/pulumi-state/.pulumi/stacks/{project}/dev.json"
    )))
    .is_ok_and(|state| state.contains("pulumi:pulumi:Stack"))
}

/// Whether `project` has the stack `stack` (the stand-in's local backend keeps a file a stack).
fn has_stack(workspace: &Path, project: &str, stack: &str) -> bool {
    workspace
        .join(format!(
            ".mara/pulumi-state/.pulumi/stacks/{project}/{stack}.json"
        ))
        .is_file()
}

#[test]
fn a_declined_first_up_leaves_nothing_behind() {
    let d = Deployment::of("mara-local");
    let first = |d: &Deployment| {
        let mut terminal = common::Terminal::start(
            d.root(),
            d.bin.path(),
            "-s qa up --only cluster --only registry",
        );
        terminal.wait_for("Name of the simulated cluster");
        terminal.type_keys("\r");
        terminal.wait_for("Number of simulated nodes");
        terminal.type_keys("\r");
        terminal
    };
    let mut terminal = first(&d);
    terminal.wait_for("Do you want to perform this update?");
    assert!(
        has_stack(d.root(), "local-cluster", "qa"),
        "the preview made it"
    );
    terminal.type_keys("\r");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 6, "{screen}");
    assert!(
        screen.contains("taken back: the empty stack of infrastructure/local/cluster; the empty stack of infrastructure/local/registry; the first run's answers in config/pulumi/Pulumi.qa.yaml"),
        "{screen}"
    );
    assert!(!screen.contains("could not be taken back"), "{screen}");
    assert!(!d.root().join("config/pulumi/Pulumi.qa.yaml").exists());
    assert!(!has_stack(d.root(), "local-cluster", "qa"));
    assert!(!has_stack(d.root(), "local-registry", "qa"));
    let history = (d.mara())
        .args(["-s", "qa", "--output", "json", "history"])
        .output()
        .unwrap();
    assert_eq!(common::stdout(&history).trim(), "[]", "nothing recorded");
    // With a secret: the secrets project's stack, made to store it, goes with it.
    let mut terminal =
        common::Terminal::start(d.root(), d.bin.path(), "-s qa up --only prometheus");
    terminal.wait_for("Name of the simulated cluster");
    terminal.type_keys("\r");
    terminal.wait_for("Number of simulated nodes");
    terminal.type_keys("\r");
    // The example's environment file gives the secret (MARA_SECRET_PROMETHEUS_ADMINPASS).
    terminal.wait_for("1 secret is not stored yet (given by its MARA_SECRET_* variable)");
    terminal.wait_for("Do you want to perform this update?");
    let secrets = d.root().join("kubernetes/secrets/Pulumi.qa.yaml");
    assert!(secrets.is_file(), "stored before the question");
    terminal.type_keys("\r");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 6, "{screen}");
    assert!(
        screen.contains("the secret `prometheus:adminpass`; the empty stack of kubernetes/secrets"),
        "{screen}"
    );
    assert!(!screen.contains("could not be taken back"), "{screen}");
    assert!(!secrets.exists());
    assert!(!has_stack(d.root(), "secrets", "qa"));
    assert!(!d.root().join("config/pulumi/Pulumi.qa.yaml").exists());

    // The next `up` is a first run again, asking the same questions.
    let mut terminal = first(&d);
    terminal.wait_for("Do you want to perform this update?");
    terminal.type_keys("\r");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 6, "{screen}");
}

#[test]
fn up_previews_shows_the_changes_and_asks() {
    let d = Deployment::of("mara-local");
    // "no" is the default: Enter changes nothing.
    let mut terminal =
        common::Terminal::start(d.root(), d.bin.path(), "up --only cluster --only registry");
    terminal.wait_for("Do you want to perform this update?");
    let screen = terminal.screen.lock().unwrap().clone();
    assert!(
        screen.contains("Previewing 2 projects on stack dev"),
        "{screen}"
    );
    assert!(
        screen.contains("infrastructure/local/cluster") && screen.contains("+1"),
        "{screen}"
    );
    terminal.type_keys("\r");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 6, "{screen}");
    assert!(
        screen.contains("not confirmed: nothing was deployed"),
        "{screen}"
    );
    // What the preview made is taken back: the empty stacks it created.
    assert!(
        screen.contains("taken back: the empty stack of infrastructure/local/cluster; the empty stack of infrastructure/local/registry"),
        "{screen}"
    );
    assert!(!deployed(d.root(), "local-cluster"));
    assert!(!has_stack(d.root(), "local-cluster", "dev"));
    let history = d
        .mara()
        .args(["--output", "json", "history"])
        .output()
        .unwrap();
    assert_eq!(
        common::stdout(&history).trim(),
        "[]",
        "a declined run is not in the history"
    );

    // details, then yes.
    let mut terminal =
        common::Terminal::start(d.root(), d.bin.path(), "up --only cluster --only registry");
    terminal.wait_for("Do you want to perform this update?");
    terminal.type_keys("\x1b[B\r"); // down: details
    terminal.wait_for("── infrastructure/local/registry");
    terminal.type_keys("\x1b[A\r"); // the menu is back at \"no\": up once is yes
    let (code, screen) = terminal.finish();
    assert_eq!(code, 0, "{screen}");
    assert!(
        screen.contains("create pulumi:pulumi:Stack"),
        "details show each project's preview: {screen}"
    );
    assert!(deployed(d.root(), "local-cluster") && deployed(d.root(), "local-registry"));
}

#[test]
fn destroy_asks_for_the_stack_name() {
    let d = Deployment::of("mara-local");
    d.mara()
        .args(["up", "--yes", "--only", "cluster"])
        .assert()
        .success();
    let mut terminal = common::Terminal::start(d.root(), d.bin.path(), "destroy --only cluster");
    terminal.wait_for("Type the stack name (dev) to confirm");
    terminal.type_keys("prod\r");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 6, "{screen}");
    assert!(
        screen.contains("not confirmed: nothing was destroyed"),
        "{screen}"
    );
    assert!(
        screen.contains("infrastructure/local/cluster"),
        "it lists what it would destroy: {screen}"
    );
    assert!(
        deployed(d.root(), "local-cluster"),
        "a wrong name destroys nothing"
    );

    let mut terminal = common::Terminal::start(d.root(), d.bin.path(), "destroy --only cluster");
    terminal.wait_for("Type the stack name (dev) to confirm");
    terminal.type_keys("dev\r");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 0, "{screen}");
    assert!(!deployed(d.root(), "local-cluster"));
}

#[test]
fn typing_yes_confirms_and_ctrl_c_at_a_prompt_is_an_interruption() {
    let d = Deployment::of("mara-local");
    // Pulumi's prompt filters as one types: `yes` and Enter is yes.
    let mut terminal = common::Terminal::start(d.root(), d.bin.path(), "up --only cluster");
    terminal.wait_for("Do you want to perform this update?");
    terminal.type_keys("yes\r");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 0, "{screen}");
    assert!(deployed(d.root(), "local-cluster"));

    // Ctrl-C at the question: exit 130, the cursor shown again, nothing recorded.
    for (args, question) in [
        ("up --only registry", "Do you want to perform this update?"),
        (
            "destroy --only cluster",
            "Type the stack name (dev) to confirm",
        ),
    ] {
        let mut terminal = common::Terminal::start(d.root(), d.bin.path(), args);
        terminal.wait_for(question);
        terminal.type_keys("\x03");
        let (code, screen) = terminal.finish();
        assert_eq!(code, 130, "{args}: {screen}");
        assert!(
            screen.contains("\x1b[?25h"),
            "the cursor is back: {screen:?}"
        );
        assert!(!screen.contains("cannot"), "{screen}");
    }
    assert!(deployed(d.root(), "local-cluster"), "nothing was destroyed");
    assert!(
        !deployed(d.root(), "local-registry"),
        "nothing was deployed"
    );
    let history = d
        .mara()
        .args(["--output", "json", "history"])
        .output()
        .unwrap();
    let history: serde_json::Value = serde_json::from_slice(&history.stdout).unwrap();
    assert_eq!(
        history.as_array().unwrap().len(),
        1,
        "only the up that ran is recorded: {history:#}"
    );
}

/// `up` on a terminal, answered yes: its exit code, its screen, and the stand-in's calls.
fn up_answered_yes(d: &Deployment) -> (i32, String, Vec<serde_json::Value>) {
    let start = d.calls().len();
    let log = d.log().display().to_string();
    let env = [("PULUMI_STAND_IN_LOG", log.as_str())];
    let mut terminal = common::Terminal::start_with(d.root(), d.bin.path(), "up", &env);
    terminal.wait_for("Do you want to perform this update?");
    terminal.type_keys("\x1b[A\r"); // up once is yes
    let (code, screen) = terminal.finish();
    (code, screen, d.calls()[start..].to_vec())
}

/// Of `calls`, how many of `command` each project's directory received, in the order of the
/// directories.
fn per_project(calls: &[serde_json::Value], command: &str) -> Vec<usize> {
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for call in calls.iter().filter(|c| common::command_of(c) == command) {
        *counts.entry(call["cwd"].as_str().unwrap()).or_default() += 1;
    }
    counts.into_values().collect()
}

/// With `[pulumi] update_plans`, what the confirmation's preview showed is held by Pulumi itself
/// (`up --plan`): each project is previewed once, for the question, and updated once.
#[test]
fn an_up_confirmed_with_update_plans_previews_each_project_once() {
    let d = Deployment::of("mara-local");
    d.mara().args(["up", "--yes"]).assert().success();
    let counts = |calls: &[serde_json::Value]| format!("{:?}", common::counted(calls));

    // Today: each project previewed for the question, then again before its up (no project's
    // preview is stale: nothing changes, so each is approved as shown).
    let (code, screen, calls) = up_answered_yes(&d);
    assert_eq!(code, 0, "{screen}");
    assert_eq!(calls.len(), 44, "{}", counts(&calls));
    assert_eq!(
        per_project(&calls, "preview"),
        [2; 14],
        "{}",
        counts(&calls)
    );
    assert_eq!(per_project(&calls, "up"), [1; 14]);

    // With update plans: once, and the up holds to the plan that preview saved.
    let toml = d.root().join("mara.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("{text}\n[pulumi]\nupdate_plans = true\n")).unwrap();
    let (code, screen, calls) = up_answered_yes(&d);
    assert_eq!(code, 0, "{screen}");
    assert_eq!(calls.len(), 30, "{}", counts(&calls));
    assert_eq!(
        per_project(&calls, "preview"),
        [1; 14],
        "{}",
        counts(&calls)
    );
    assert_eq!(per_project(&calls, "up"), [1; 14]);
    let held = (calls.iter())
        .filter(|c| common::command_of(c) == "up")
        .filter(|c| c["argv"].as_array().unwrap().iter().any(|w| w == "--plan"))
        .count();
    assert_eq!(held, 14, "every up applies its plan");
    assert!(screen.contains("(applied as approved)"), "{screen}");

    // A change: the cluster's update held to the plan its question showed (the projects that
    // read its outputs were stale, and are planned as their turn comes).
    let config = d.root().join("config/pulumi/Pulumi.dev.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("node_count: 3", "node_count: 5")).unwrap();
    let (code, screen, calls) = up_answered_yes(&d);
    assert_eq!(code, 0, "{screen}");
    assert_eq!(
        per_project(&calls, "preview"),
        [1; 14],
        "{}",
        counts(&calls)
    );
    let cluster = (calls.iter())
        .find(|c| common::command_of(c) == "up" && c["project"] == "local-cluster")
        .unwrap();
    assert!(
        cluster["argv"].to_string().contains("cluster.plan.json"),
        "{cluster}"
    );
    let outputs = (d.mara())
        .args(["output", "infrastructure/local/cluster"])
        .output()
        .unwrap();
    let outputs: serde_json::Value = serde_json::from_slice(&outputs.stdout).unwrap();
    assert_eq!(outputs["node_count"], 5);
    // The plans were the run's alone: gone with it.
    let plans = d.root().join(".mara/plans");
    assert!(std::fs::read_dir(&plans).map_or(true, |mut d| d.next().is_none()));
}
