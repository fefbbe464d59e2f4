//! Configuration files through the binary: every mistake exits 3 (or 2 for the command line)
//! and names the file, the line and the key or project.

mod common;

use common::{Workspace, stderr, stdout};

/// A workspace whose provider file is `text`.
fn with_provider(text: &str) -> Workspace {
    Workspace::new(&[("providers/mine.toml", text)])
}

fn show(ws: &Workspace) -> std::process::Output {
    ws.mara()
        .args(["show-execution", "--provider", "mine", "--format", "list"])
        .output()
        .unwrap()
}

#[test]
fn a_cycle_is_printed() {
    let ws = with_provider(
        r#"description = "cycle"
[[project]]
path = "a"
after = ["c"]
[[project]]
path = "b"
after = ["a"]
[[project]]
path = "c"
after = ["b"]
"#,
    );
    let output = show(&ws);
    assert_eq!(output.status.code(), Some(3));
    let err = stderr(&output);
    assert!(err.contains("providers/mine.toml:3:"), "{err}");
    assert!(err.contains("a -> b -> c -> a"), "{err}");
}

#[test]
fn an_unknown_after_names_file_line_and_suggests() {
    let ws = with_provider(
        "description = \"typo\"\n[[project]]\npath = \"kubernetes/logstore\"\n[[project]]\npath = \"kubernetes/logagent\"\nafter = [\"kubernetes/logstor\"]\n",
    );
    let output = show(&ws);
    assert_eq!(output.status.code(), Some(3));
    insta::assert_snapshot!("unknown_after", stderr(&output));
}

#[test]
fn a_duplicate_path_is_refused() {
    let ws = with_provider(
        "description = \"dup\"\n[[project]]\npath = \"a\"\n[[project]]\npath = \"b\"\n[[project]]\npath = \"a\"\n",
    );
    let output = show(&ws);
    assert_eq!(output.status.code(), Some(3));
    let err = stderr(&output);
    assert!(
        err.contains(
            "providers/mine.toml:7: `a`: duplicate project path (first declared at line 3)"
        ),
        "{err}"
    );
}

#[test]
fn an_unknown_key_in_a_provider_file_is_refused() {
    let ws =
        with_provider("description = \"x\"\n[[project]]\npath = \"a\"\ndepends_on = [\"b\"]\n");
    let output = show(&ws);
    assert_eq!(output.status.code(), Some(3));
    let err = stderr(&output);
    assert!(
        err.contains("providers/mine.toml:4:") && err.contains("depends_on"),
        "{err}"
    );
}

#[test]
fn an_unknown_key_in_mara_toml_is_refused() {
    let ws = Workspace::new(&[("mara.toml", "parallel = 2\nprovder = \"aws\"\n")]);
    let output = ws
        .mara()
        .args(["show-execution", "-p", "aws"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    insta::assert_snapshot!("unknown_mara_toml_key", stderr(&output));
}

#[test]
fn a_bad_id_in_mara_toml_is_refused_with_its_line_among_the_others() {
    let long = "x".repeat(201);
    let ws = Workspace::new(&[("mara.toml", "id = \"\"\nparallel = 0\n")]);
    let output = ws
        .mara()
        .args(["show-execution", "-p", "aws"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    insta::assert_snapshot!("bad_mara_toml_id", stderr(&output));
    for (id, said) in [
        (
            long.as_str(),
            "`id`: is 201 characters long, and an id has at most 200",
        ),
        (
            "a\\tb",
            "`id`: must be printable text on one line, and it holds \\t",
        ),
    ] {
        let ws = Workspace::new(&[("mara.toml", &format!("parallel = 2\nid = \"{id}\"\n"))]);
        let output = ws
            .mara()
            .args(["show-execution", "-p", "aws"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(3));
        let err = stderr(&output);
        assert!(err.contains(&format!("mara.toml:2: {said}")), "{err}");
    }
}

#[test]
fn several_mistakes_in_one_provider_file_are_reported_together() {
    let ws = with_provider(
        r#"description = "several"
[[config]]
key = "region"
prompt = "Region"
kind = "int"
default = "us-east-1"

[[project]]
path = "/abs"

[[project]]
path = "b"
[[project.on_success]]
kind = "command"

[[project.secret]]
key = "b:pw"
prompt = "pw"
default = ""
"#,
    );
    let output = show(&ws);
    assert_eq!(output.status.code(), Some(3));
    insta::assert_snapshot!("several_provider_mistakes", stderr(&output));
}

#[test]
fn an_unknown_provider_gets_a_suggestion() {
    let ws = Workspace::new(&[]);
    let output = ws
        .mara()
        .args(["show-execution", "-p", "lineode"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(
        err.contains("no provider named `lineode`") && err.contains("did you mean `linode`?"),
        "{err}"
    );
    let output = ws
        .mara()
        .args(["show-execution", "-p", "AWS"])
        .output()
        .unwrap();
    assert!(stderr(&output).contains("did you mean `aws`?"));
}

#[test]
fn a_workspace_provider_overrides_a_built_in() {
    let ws = Workspace::new(&[(
        "providers/aws.toml",
        "description = \"Our own AWS\"\ninfra_type = \"AWS\"\n[[project]]\npath = \"only/this\"\nstage = \"infrastructure\"\n",
    )]);
    let output = ws
        .mara()
        .args(["show-execution", "-p", "aws", "--format", "list"])
        .output()
        .unwrap();
    assert_eq!(stdout(&output), "only/this\n");
    let output = ws
        .mara()
        .args(["list-providers", "--output", "json"])
        .output()
        .unwrap();
    let list: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let aws = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "aws")
        .unwrap();
    assert_eq!(aws["description"], "Our own AWS");
    assert!(
        aws["source"]
            .as_str()
            .unwrap()
            .ends_with("providers/aws.toml"),
        "{aws}"
    );
}

#[test]
fn extends_inserts_and_removes_projects() {
    let ws = Workspace::new(&[(
        "providers/aws-lean.toml",
        r#"description = "AWS without logging, with a DNS step"
extends = "aws"
remove = ["kubernetes/logstore", "kubernetes/logagent"]

[[project]]
path = "kubernetes/dns"
description = "DNS"
after = ["kubernetes/nginx/ingress-controller"]

[[project]]
path = "infrastructure/aws/iam"
stage = "infrastructure"
before = ["infrastructure/aws/eks"]
"#,
    )]);
    let output = ws
        .mara()
        .args(["show-execution", "-p", "aws-lean", "--format", "list"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let order: Vec<String> = stdout(&output).lines().map(str::to_string).collect();
    assert_eq!(
        order,
        [
            "infrastructure/aws/vpc",
            "infrastructure/aws/iam",
            "infrastructure/aws/eks",
            "infrastructure/aws/ecr",
            "infrastructure/kubeconfig",
            "kubernetes/secrets",
            "utility/kic-image-build",
            "utility/kic-image-push",
            "kubernetes/nginx/ingress-controller-namespace",
            "kubernetes/nginx/ingress-controller",
            "kubernetes/dns",
            "kubernetes/certmgr",
            "kubernetes/prometheus",
            "kubernetes/observability",
            "kubernetes/applications/sirius",
        ]
    );
    // It keeps the base's infra_type and config, and names its own source.
    let output = ws
        .mara()
        .args(["show-execution", "-p", "aws-lean", "--format", "json"])
        .output()
        .unwrap();
    let plan: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(plan["infra_type"], "AWS");
}

#[test]
fn a_redefined_project_keeps_its_order_unless_it_says_its_own() {
    // Prometheus after the secrets and the ingress namespace, as the base says; redefined with
    // only a description, it keeps that; with an `after` of its own, it has that alone.
    let json = |ws: &Workspace| -> serde_json::Value {
        let output = (ws.mara())
            .args(["show-execution", "-p", "mine", "--format", "json"])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        serde_json::from_str(&stdout(&output)).unwrap()
    };
    let after = |plan: &serde_json::Value| {
        (plan["projects"].as_array().unwrap().iter())
            .find(|p| p["path"] == "kubernetes/prometheus")
            .map(|p| p["after"].clone())
            .unwrap()
    };
    let ws = Workspace::new(&[(
        "providers/mine.toml",
        "description = \"x\"\nextends = \"aws\"\n\n[[project]]\npath = \"kubernetes/prometheus\"\ndescription = \"Metrics\"\n",
    )]);
    assert_eq!(
        after(&json(&ws)),
        serde_json::json!([
            "kubernetes/secrets",
            "kubernetes/nginx/ingress-controller-namespace"
        ])
    );
    ws.write(
        "providers/mine.toml",
        "description = \"x\"\nextends = \"aws\"\n\n[[project]]\npath = \"kubernetes/prometheus\"\nafter = [\"kubernetes/secrets\"]\n",
    );
    assert_eq!(after(&json(&ws)), serde_json::json!(["kubernetes/secrets"]));
}

#[test]
fn a_workspace_file_may_extend_the_built_in_it_replaces() {
    let ws = Workspace::new(&[(
        "providers/do.toml",
        "description = \"DO without DNS\"\nextends = \"do\"\nremove = [\"infrastructure/digitalocean/dns-record\"]\n",
    )]);
    let output = ws
        .mara()
        .args(["show-execution", "-p", "do", "--format", "list"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert_eq!(text.lines().count(), 15);
    assert!(!text.contains("dns-record"));
}

#[test]
fn removing_an_unknown_project_is_an_error() {
    let ws = Workspace::new(&[(
        "providers/x.toml",
        "description = \"x\"\nextends = \"aws\"\nremove = [\"kubernetes/logstor\"]\n",
    )]);
    let output = ws
        .mara()
        .args(["show-execution", "-p", "x"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let err = stderr(&output);
    assert!(
        err.contains("providers/x.toml:3:") && err.contains("did you mean `kubernetes/logstore`?"),
        "{err}"
    );
}

#[test]
fn a_path_declared_twice_in_an_extending_provider_is_an_error() {
    let ws = Workspace::new(&[(
        "providers/x.toml",
        "description = \"x\"\nextends = \"aws\"\n\
         [[project]]\npath = \"tools/a\"\n\
         [[project]]\npath = \"tools/a\"\n",
    )]);
    let output = ws
        .mara()
        .args(["show-execution", "-p", "x"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let err = stderr(&output);
    assert!(
        err.contains("providers/x.toml:6:")
            && err.contains("`tools/a`: duplicate project path (first declared at line 4)"),
        "{err}"
    );
}

#[test]
fn providers_that_extend_each_other_are_a_cycle() {
    let ws = Workspace::new(&[
        ("providers/a.toml", "description = \"a\"\nextends = \"b\"\n"),
        ("providers/b.toml", "description = \"b\"\nextends = \"a\"\n"),
    ]);
    let output = ws
        .mara()
        .args(["show-execution", "-p", "a"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(
        stderr(&output).contains("a -> b -> a"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn abstract_providers_cannot_run() {
    let ws = Workspace::new(&[]);
    let output = ws
        .mara()
        .args(["show-execution", "-p", "mara-kubernetes"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("abstract"));
}

#[test]
fn the_provider_comes_from_the_stack_when_not_given() {
    let ws = Workspace::new(&[
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        (
            "config/pulumi/Pulumi.dev.yaml",
            "config:\n  kubernetes:infra_type: LKE\n",
        ),
    ]);
    let output = ws
        .mara()
        .args(["show-execution", "--format", "list"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).starts_with("infrastructure/linode/lke\n"));

    // A directory that is no workspace says so, once, whatever the command.
    let empty = Workspace::new(&[]);
    for command in [
        &["show-execution"][..],
        &["up", "--yes"],
        &["validate"],
        &["config", "get", "aws:region"],
    ] {
        let output = empty.mara().args(command).output().unwrap();
        assert_eq!(output.status.code(), Some(3), "{command:?}");
        let said = stderr(&output);
        assert!(
            said.starts_with("error: not a mara workspace: ") && said.contains("`mara init`"),
            "{command:?}: {said}"
        );
        assert_eq!(said.matches("error:").count(), 1, "{said}");
    }
    // A provider named explicitly is shown anywhere.
    let output = (empty.mara())
        .args(["show-execution", "--provider", "do", "--format", "list"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    // A workspace (its configuration's directory is there) that names no provider.
    let bare = Workspace::new(&[("config/pulumi/environment", "")]);
    let output = bare.mara().args(["show-execution"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("no provider given"));
}

#[test]
fn the_stack_on_the_command_line_wins_over_the_environment_file() {
    let ws = Workspace::new(&[
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        (
            "config/pulumi/Pulumi.prod.yaml",
            "config:\n  aws:region: eu-west-1\n",
        ),
    ]);
    let output = ws
        .mara()
        .args([
            "validate", "-p", "aws", "--stack", "prod", "--output", "json",
        ])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["stack"], "prod", "{}", stderr(&output));
    let output = ws
        .mara()
        .args(["validate", "-p", "aws", "--output", "json"])
        .env("MARA_STACK", "prod")
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["stack"], "prod");
    let output = ws
        .mara()
        .args(["validate", "--stack", "dev/x", "-p", "aws"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
}

/// Every command's path (`["serve", "token", "add"]`), the root's empty, from clap's own tree.
fn command_paths() -> Vec<Vec<String>> {
    fn walk(command: &clap::Command, path: Vec<String>, out: &mut Vec<Vec<String>>) {
        for sub in command.get_subcommands().filter(|c| c.get_name() != "help") {
            let mut inner = path.clone();
            inner.push(sub.get_name().to_string());
            walk(sub, inner, out);
        }
        out.push(path);
    }
    let mut out = Vec::new();
    walk(
        &<mara::cli::Cli as clap::CommandFactory>::command(),
        Vec::new(),
        &mut out,
    );
    out.sort();
    out
}

/// The sections of a help text, by heading (`Options`, `Global options`, …), each with the
/// flags listed under it.
fn help_sections(help: &str) -> Vec<(String, Vec<String>)> {
    let mut sections: Vec<(String, Vec<String>)> = Vec::new();
    for line in help.lines() {
        if let Some(heading) = line.strip_suffix(':').filter(|h| !h.starts_with(' ')) {
            sections.push((heading.to_string(), Vec::new()));
        } else if let (Some(flag), Some(section)) = (
            line.trim_start()
                .split([',', ' '])
                .next()
                .filter(|w| w.starts_with('-')),
            sections.last_mut(),
        ) && line.starts_with("  ")
            && !line.starts_with("          ")
        {
            section.1.push(flag.to_string());
        }
    }
    sections
}

#[test]
fn every_commands_help_is_stable_with_the_global_options_apart() {
    const GLOBAL: [&str; 10] = [
        "-C",
        "-s",
        "-p",
        "-v",
        "-q",
        "--color",
        "--non-interactive",
        "--output",
        "-h",
        "-V",
    ];
    let ws = Workspace::new(&[]);
    let paths = command_paths();
    assert!(paths.len() > 40, "{paths:?}");
    for path in paths {
        let output = ws.mara().args(&path).arg("--help").output().unwrap();
        assert!(output.status.success(), "{path:?}: {}", stderr(&output));
        let help = stdout(&output);
        let sections = help_sections(&help);
        let global: Vec<&str> = (sections.iter())
            .filter(|(heading, _)| heading == "Global options")
            .flat_map(|(_, flags)| flags.iter().map(String::as_str))
            .collect();
        assert_eq!(
            global, GLOBAL,
            "{path:?}: the global options, under their heading:\n{help}"
        );
        for (heading, flags) in sections.iter().filter(|(h, _)| h != "Global options") {
            let strays: Vec<&String> = flags
                .iter()
                .filter(|f| GLOBAL.contains(&f.as_str()))
                .collect();
            assert!(
                strays.is_empty(),
                "{path:?}: {strays:?} under {heading}:\n{help}"
            );
        }
        let name = match path.is_empty() {
            true => "help".to_string(),
            false => format!("help_{}", path.join("_").replace('-', "_")),
        };
        insta::assert_snapshot!(name, help);
    }
}

#[test]
fn the_exit_codes_are_the_same_everywhere_and_complete() {
    use mara::error::exit;
    let codes = [
        exit::SUCCESS,
        exit::PROJECT_FAILED,
        exit::USAGE,
        exit::CONFIG,
        exit::DRIFT,
        exit::LOCKED,
        exit::DECLINED,
        exit::SKIPPED,
        exit::INTERRUPTED,
    ];
    // Each list: the lines after its heading, up to the next heading, that start with a code.
    let listed = |text: &str, heading: &str| -> Vec<i32> {
        let after = text.split(heading).nth(1).unwrap_or_default();
        (after.lines().skip(1))
            .take_while(|l| !l.starts_with('#') && !l.starts_with("Errors are"))
            .filter_map(|l| {
                let l = l.trim_start_matches(['|', ' ', '-', '*']);
                l.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
            })
            .collect()
    };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |file: &str| std::fs::read_to_string(root.join(file)).unwrap();
    let help = stdout(&Workspace::new(&[]).mara().arg("--help").output().unwrap());
    assert_eq!(listed(&help, "Exit codes:"), codes, "{help}");
    assert_eq!(listed(&read("README.md"), "## Exit codes"), codes);
    assert_eq!(listed(&read("docs/commands.md"), "## Exit codes"), codes);
    // The help and the README say each code in the same words.
    let words = |text: &str, heading: &str| -> Vec<String> {
        let after = text.split(heading).nth(1).unwrap_or_default();
        let block: Vec<&str> = (after.lines().skip(1))
            .take_while(|l| !l.starts_with('#'))
            .filter(|l| !l.starts_with("```"))
            .collect();
        block
            .join(" ")
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        words(&read("README.md"), "## Exit codes"),
        words(&help, "Exit codes:"),
        "the README's exit codes are the help's, word for word"
    );
}

#[test]
fn a_global_flag_a_command_does_not_use_is_refused() {
    let ws = Workspace::new(&[]);
    for (args, says) in [
        (
            &["completions", "bash", "--provider", "nope"][..],
            "`mara completions` does not use -p/--provider",
        ),
        (&["-C", ".", "completions", "bash"], "does not use -C/--cwd"),
        (
            &["completions", "bash", "--output", "json"],
            "does not use --output json",
        ),
        (
            &["list-providers", "-s", "dev"],
            "`mara list-providers` does not use -s/--stack",
        ),
        (
            &["show-execution", "--all", "-p", "aws"],
            "--all shows the plan of every provider",
        ),
        (
            &["history", "--all-stacks", "-s", "dev"],
            "--all-stacks lists the runs of every stack",
        ),
        (
            &["status", "-p", "aws"],
            "`mara status` does not use -p/--provider",
        ),
        (
            &["kubectl", "--output", "json", "get", "pods"],
            "`mara kubectl` does not use --output json",
        ),
        (
            &["unlock", "-p", "aws"],
            "only `unlock --engine` reads the provider",
        ),
        (
            &["config", "set", "a:b", "1", "--output", "json"],
            "`mara config set` does not use --output json",
        ),
        (
            &["serve", "token", "list", "-s", "dev"],
            "`mara serve token list` does not use -s/--stack",
        ),
    ] {
        let output = ws.mara().args(args).output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(says),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(output.stdout.is_empty(), "{args:?}");
    }
    // Every flag refused is said, each on its line.
    let output = ws
        .mara()
        .args(["-C", ".", "-s", "x", "completions", "bash"])
        .output()
        .unwrap();
    assert_eq!(
        stderr(&output).matches("error:").count(),
        2,
        "{}",
        stderr(&output)
    );
    // How mara speaks is every command's to take; and a flag a command uses is never refused.
    for args in [
        &[
            "-v",
            "--color",
            "never",
            "--non-interactive",
            "completions",
            "bash",
        ][..],
        &["-q", "--output", "human", "completions", "bash"],
        &["list-providers", "--output", "json"],
        &["-p", "aws", "show-execution", "--format", "list"],
    ] {
        let output = ws.mara().args(args).output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {}",
            stderr(&output)
        );
    }
}

#[test]
fn quiet_leaves_the_notes_out_and_the_output_asked_for_in() {
    let ws = Workspace::new(&[("config/pulumi/environment", "")]);
    let plan = |quiet: bool| {
        let mut command = ws.mara();
        command.args(["-p", "aws", "show-execution"]);
        if quiet {
            command.arg("-q");
        }
        stdout(&command.output().unwrap())
    };
    let (loud, quiet) = (plan(false), plan(true));
    assert!(loud.starts_with("Provider aws:"), "{loud}");
    assert!(quiet.starts_with("infrastructure stage\n"), "{quiet}");
    assert!(
        loud.ends_with(&quiet),
        "the same tree, without its heading:\n{quiet}"
    );
    for args in [
        &["history"][..],
        &["status"],
        &["-s", "dev", "cancel"],
        &["serve", "token", "list"],
    ] {
        let output = ws.mara().args(args).output().unwrap();
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        assert!(!output.stdout.is_empty(), "{args:?}");
        let output = ws.mara().arg("-q").args(args).output().unwrap();
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        assert_eq!(stdout(&output), "", "{args:?}");
    }
}

#[test]
fn cancel_and_status_answer_in_json_when_nothing_runs() {
    let ws = Workspace::new(&[("config/pulumi/environment", "")]);
    let output = ws
        .mara()
        .args(["-s", "dev", "cancel", "--output", "json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let said: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(said, serde_json::json!({"stack": "dev", "cancelled": null}));
    let output = ws
        .mara()
        .args(["status", "--output", "json"])
        .output()
        .unwrap();
    let said: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(said, serde_json::json!([]));
}

#[test]
fn bounds_and_defaults_from_other_questions_name_earlier_int_questions() {
    let ws = with_provider(
        r#"description = "bounds"
[[config]]
key = "a:max"
prompt = "Max"
kind = "int"
at_least = "a:min"

[[config]]
key = "a:min"
prompt = "Min"
kind = "int"
default_from = "a:max"

[[config]]
key = "a:name"
prompt = "Name"
at_most = "a:max"

[[config]]
key = "a:count"
prompt = "Count"
kind = "int"
default_from = "a:later"

[[project]]
path = "p"
"#,
    );
    let output = show(&ws);
    assert_eq!(output.status.code(), Some(3));
    let err = stderr(&output);
    for said in [
        "providers/mine.toml:17: config `a:name`: `at_most` is only for kind \"int\"",
        "providers/mine.toml:20: config `a:count`: `default_from` names `a:later`, which is not an earlier `[[config]]` of kind \"int\" in this file",
    ] {
        assert!(err.contains(said), "{said}\n{err}");
    }
    // A later question may bound an earlier one, and an earlier one give a later its default.
    assert!(
        !err.contains("config `a:max`") && !err.contains("config `a:min`"),
        "{err}"
    );
}

#[test]
fn a_value_of_the_wrong_kind_in_mara_toml_is_said_in_words() {
    let ws = Workspace::new(&[("mara.toml", "# ours\nparallel = \"four\"\n")]);
    let output = ws
        .mara()
        .args(["show-execution", "-p", "k3d"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(
        stderr(&output).contains(
            "mara.toml:2: `parallel`: invalid type: string \"four\", expected a whole number"
        ),
        "{}",
        stderr(&output)
    );
}

#[test]
fn concurrent_edits_of_the_configuration_lose_nothing() {
    let ws = Workspace::new(&[
        ("mara.toml", "provider = \"kubeconfig\"\n"),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        ("config/pulumi/Pulumi.dev.yaml", "config:\n  a:b: 1\n"),
    ]);
    std::thread::scope(|scope| {
        let sets: Vec<_> = (0..20)
            .map(|i| {
                let ws = &ws;
                scope.spawn(move || {
                    ws.mara()
                        .args(["config", "set", &format!("app:k{i}"), &i.to_string()])
                        .output()
                        .unwrap()
                })
            })
            .collect();
        for set in sets {
            let output = set.join().unwrap();
            assert!(output.status.success(), "{}", stderr(&output));
        }
    });
    let text = std::fs::read_to_string(ws.path().join("config/pulumi/Pulumi.dev.yaml")).unwrap();
    for i in 0..20 {
        assert!(
            text.contains(&format!("app:k{i}: \"{i}\"")),
            "app:k{i} lost:\n{text}"
        );
    }
    assert!(text.starts_with("config:\n  a:b: 1\n"), "{text}");
}

#[test]
fn an_edit_keeps_the_file_what_it_was() {
    use std::os::unix::fs::PermissionsExt;
    let ws = Workspace::new(&[
        ("mara.toml", "provider = \"kubeconfig\"\n"),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        ("shared/dev.yaml", "config:\n  a:b: 1\n"),
    ]);
    let file = ws.path().join("config/pulumi/Pulumi.dev.yaml");
    std::os::unix::fs::symlink("../../shared/dev.yaml", &file).unwrap();
    let shared = ws.path().join("shared/dev.yaml");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o664)).unwrap();
    let output = ws
        .mara()
        .args(["config", "set", "a:b", "2"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        std::fs::symlink_metadata(&file)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // Set back where the file has a number, it stays a number (issue 45).
    assert_eq!(
        std::fs::read_to_string(&shared).unwrap(),
        "config:\n  a:b: 2\n"
    );
    assert_eq!(
        std::fs::metadata(&shared).unwrap().permissions().mode() & 0o777,
        0o664
    );
    // A read-only file is refused, as it is.
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o444)).unwrap();
    let output = ws
        .mara()
        .args(["config", "set", "a:b", "3"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("it is read-only"),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        std::fs::read_to_string(&shared).unwrap(),
        "config:\n  a:b: 2\n"
    );
}

/// A Terraform workspace (examples/terraform-local's shape): module `app` reads `app:replicas`;
/// beside it a Pulumi project `web` that declares `web:colour`.
fn terraform_workspace() -> Workspace {
    Workspace::new(&[
        ("mara.toml", "provider = \"tf\"\nengine = \"terraform\"\n"),
        (
            "providers/tf.toml",
            "description = \"tf\"\n[[project]]\npath = \"app\"\n[[project]]\npath = \"web\"\nengine = \"pulumi\"\n",
        ),
        (
            "web/Pulumi.yaml",
            "name: web\nruntime: yaml\nconfig:\n  colour:\n    type: string\n",
        ),
        (
            "app/main.tf",
            "variable \"replicas\" {\n  type = number\n}\nvariable \"image\" {}\n",
        ),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        (
            "config/pulumi/Pulumi.dev.yaml",
            "# the app\nconfig:\n  app:replicas: 2 # how many\n  app:image: \"nginx\"\n",
        ),
    ])
}

#[test]
fn a_value_set_back_leaves_the_file_as_it_was() {
    let ws = terraform_workspace();
    let file = ws.path().join("config/pulumi/Pulumi.dev.yaml");
    let before = std::fs::read(&file).unwrap();
    let set = |key: &str, value: &str| {
        let output = ws
            .mara()
            .args(["config", "set", key, value])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        output
    };
    set("app:replicas", "4");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "# the app\nconfig:\n  app:replicas: 4 # how many\n  app:image: \"nginx\"\n",
        "a number where the file has one"
    );
    set("app:replicas", "2");
    assert_eq!(std::fs::read(&file).unwrap(), before, "byte for byte");
    // Text stays text, in its quotes.
    set("app:image", "2");
    set("app:image", "nginx");
    assert_eq!(std::fs::read(&file).unwrap(), before);
}

#[test]
fn a_key_no_project_reads_is_said_with_the_one_it_is_spelled_like() {
    let ws = terraform_workspace();
    let output = ws
        .mara()
        .args(["config", "set", "app:replica", "3"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(
            "warning: no project declares or reads `app:replica`: did you mean `app:replicas`? (set as given)"
        ),
        "{}",
        stderr(&output)
    );
    // Nothing like it: the module reads only its variables.
    let output = ws
        .mara()
        .args(["config", "set", "app:zone", "a"])
        .output()
        .unwrap();
    assert!(
        stderr(&output).contains(
            "no project reads `app:zone`: app, which reads namespace `app`, has no variable `zone`"
        ),
        "{}",
        stderr(&output)
    );
    // A key a Pulumi project declares, misspelt.
    let output = ws
        .mara()
        .args(["config", "set", "web:color", "red"])
        .output()
        .unwrap();
    assert!(
        stderr(&output).contains("did you mean `web:colour`?"),
        "{}",
        stderr(&output)
    );
    // A variable of the module, set anew, and keys a program may read undeclared: no warning.
    for key in ["app:image", "other:thing", "web:size"] {
        ws.mara().args(["config", "rm", key]).output().unwrap();
        let output = ws
            .mara()
            .args(["config", "set", key, "b"])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        assert!(
            !stderr(&output).contains("warning"),
            "{key}: {}",
            stderr(&output)
        );
    }
}

#[test]
fn an_edit_keeps_the_owner_and_refuses_a_file_with_other_names() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let ws = terraform_workspace();
    let file = ws.path().join("config/pulumi/Pulumi.dev.yaml");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    // SAFETY: geteuid only reads this process's user id.
    let root = unsafe { libc::geteuid() } == 0;
    // As root, another user's file (as `sudo mara` would find it) stays theirs.
    let owner = match root {
        true => (4321, 4322),
        false => (
            std::fs::metadata(&file).unwrap().uid(),
            std::fs::metadata(&file).unwrap().gid(),
        ),
    };
    std::os::unix::fs::chown(&file, Some(owner.0), Some(owner.1)).unwrap();
    let output = ws
        .mara()
        .args(["config", "set", "app:replicas", "3"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let metadata = std::fs::metadata(&file).unwrap();
    assert_eq!((metadata.uid(), metadata.gid()), owner);
    assert_eq!(metadata.mode() & 0o7777, 0o640);
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains("app:replicas: 3 #")
    );
    // A hard link: replaced, the other name would keep the old text; refused, nothing written.
    let other = ws.path().join("Pulumi.dev.yaml.link");
    std::fs::hard_link(&file, &other).unwrap();
    let before = std::fs::read(&file).unwrap();
    let output = ws
        .mara()
        .args(["config", "set", "app:replicas", "5"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("config/pulumi/Pulumi.dev.yaml")
            && stderr(&output).contains("it has 2 hard links"),
        "{}",
        stderr(&output)
    );
    assert_eq!(std::fs::read(&file).unwrap(), before);
    assert_eq!(std::fs::read(&other).unwrap(), before);
    let left: Vec<_> = std::fs::read_dir(ws.path().join("config/pulumi"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "no temporary file left: {left:?}");
}

#[test]
fn workspaces_sharing_one_configuration_through_symlinks_take_turns() {
    let shared = tempfile::tempdir().unwrap();
    let file = shared.path().join("dev.yaml");
    std::fs::write(&file, "config:\n  a:b: 1\n").unwrap();
    let workspaces: Vec<Workspace> = (0..2)
        .map(|_| {
            let ws = Workspace::new(&[
                ("mara.toml", "provider = \"kubeconfig\"\n"),
                ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
            ]);
            std::os::unix::fs::symlink(&file, ws.path().join("config/pulumi/Pulumi.dev.yaml"))
                .unwrap();
            ws
        })
        .collect();
    std::thread::scope(|scope| {
        let sets: Vec<_> = (0..16)
            .map(|i| {
                let ws = &workspaces[i % 2];
                scope.spawn(move || {
                    ws.mara()
                        .args(["config", "set", &format!("app:k{i}"), "v"])
                        .output()
                        .unwrap()
                })
            })
            .collect();
        for set in sets {
            let output = set.join().unwrap();
            assert!(output.status.success(), "{}", stderr(&output));
        }
    });
    let text = std::fs::read_to_string(&file).unwrap();
    for i in 0..16 {
        assert!(
            text.contains(&format!("app:k{i}: v")),
            "app:k{i} lost:\n{text}"
        );
    }
}

#[test]
fn a_huge_invalid_value_is_not_echoed_whole() {
    let ws = Workspace::new(&[
        ("mara.toml", "provider = \"aws\"\n"),
        ("config/pulumi/environment", "PULUMI_STACK=dev\n"),
        ("config/pulumi/Pulumi.dev.yaml", "config:\n  a:b: 1\n"),
    ]);
    let huge = "x".repeat(1_000_000);
    let output = ws
        .mara()
        .args(["config", "set", "eks:min_size"])
        .write_stdin(huge)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let said = stderr(&output);
    assert!(said.len() < 1000, "{} bytes", said.len());
    assert!(said.contains("(1000000 characters)"), "{said}");
}
