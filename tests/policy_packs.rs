//! Pulumi's own policy packs (docs/commands.md, "Policies"): `[policy] pulumi_packs` passes
//! `--policy-pack` to Pulumi's previews and updates (the stand-in runs packs of Pulumi's OPA
//! bridge and checks the flag), previews stream their events so that the packs' violations are
//! read, and each violation is in the same report as the workspace's Rego policies': a mandatory
//! one denies (exit 4), an advisory one is said.

mod common;

use std::path::Path;

use common::Deployment;
use serde_json::Value;

/// The pack, in `policy/refs` (beside where the workspace's Rego policies would be: mara's
/// policies leave a pack's directory to Pulumi).
const PACK: &str = r#"package refs

warn_kubeconfig[msg] {
    input.type == "pulumi:pulumi:StackReference"
    contains(input.name, "/kubeconfig/")
    msg := sprintf("%s reads the kubeconfig stack", [input.__name])
}

deny_logstore[msg] {
    input.type == "pulumi:pulumi:StackReference"
    contains(input.name, "/logstore/")
    msg := sprintf("%s reads the log store directly", [input.__name])
}
"#;

/// The example with the pack, named in mara.toml by `packs`.
fn with_pack(packs: &str) -> Deployment {
    let d = Deployment::of("mara-local");
    add_pack(&d, packs);
    d
}

fn add_pack(d: &Deployment, packs: &str) {
    let pack = d.root().join("policy/refs");
    std::fs::create_dir_all(&pack).unwrap();
    std::fs::write(
        pack.join("PulumiPolicy.yaml"),
        "description: stack references\nruntime: opa\n",
    )
    .unwrap();
    std::fs::write(pack.join("refs.rego"), PACK).unwrap();
    let toml = d.root().join("mara.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("{text}\n[policy]\npulumi_packs = {packs}\n")).unwrap();
}

fn report(d: &Deployment, args: &[&str]) -> (i32, Value) {
    let mut args = args.to_vec();
    args.extend(["--output", "json"]);
    let out = d.mara().args(&args).output().unwrap();
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", common::stdout(&out), common::stderr(&out)));
    (out.status.code().unwrap(), report)
}

/// The policy messages of `project` in a report, as `level rule: text`.
fn said(report: &Value, project: &str) -> Vec<String> {
    (common::project(report, project)["policy"]
        .as_array()
        .into_iter()
        .flatten())
    .map(|m| {
        format!(
            "{} {}: {}",
            m["level"].as_str().unwrap(),
            m["rule"].as_str().unwrap(),
            m["text"].as_str().unwrap()
        )
    })
    .collect()
}

fn deployed(root: &Path, project: &str) -> bool {
    std::fs::read_to_string(root.join(format!(
        ".mara/pulumi-state/.pulumi/stacks/{project}/dev.json"
    )))
    .is_ok_and(|state| state.contains("pulumi:pulumi:Stack"))
}

/// The packs each call of `command` was given (`--policy-pack` values).
fn packs_of(calls: &[Value], command: &str) -> Vec<Vec<String>> {
    (calls.iter())
        .filter(|c| common::command_of(c) == command)
        .map(|c| {
            let argv: Vec<&str> = c["argv"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_str().unwrap())
                .collect();
            common::assert_valid_for_the_real_cli(&argv);
            (argv.windows(2))
                .filter(|w| w[0] == "--policy-pack")
                .map(|w| w[1].to_string())
                .collect()
        })
        .collect()
}

#[test]
fn a_pack_judges_every_preview_and_update_and_its_denial_is_exit_4() {
    let d = with_pack(r#"["policy/refs"]"#);
    let pack = d.root().join("policy/refs").display().to_string();

    // `up --yes`: Pulumi's update of each project runs the pack; the log agent's is refused,
    // nothing of it applied, the rest deployed; the warnings said where they are.
    // (`--keep-going`: every project not after the refused one runs, whatever the timing.)
    let (code, up) = report(&d, &["up", "--yes", "--keep-going"]);
    assert_eq!(code, 4, "{up:#}");
    let agent = common::project(&up, "kubernetes/logagent");
    assert_eq!(agent["status"], "failed");
    assert_eq!(
        agent["reason"],
        "policy pack refs: logstore reads the log store directly"
    );
    assert_eq!(
        said(&up, "kubernetes/logagent"),
        ["deny pulumi:refs/deny_logstore: logstore reads the log store directly"]
    );
    assert_eq!(
        agent["policy"][0]["details"]["resource"],
        "urn:pulumi:dev::logagent::pulumi:pulumi:StackReference::logstore"
    );
    assert_eq!(
        said(&up, "kubernetes/certmgr"),
        ["warn pulumi:refs/warn_kubeconfig: kubeconfig reads the kubeconfig stack"]
    );
    assert!(!deployed(d.root(), "logagent"));
    assert!(deployed(d.root(), "certmgr") && deployed(d.root(), "logstore"));
    let run_messages = up["policy"]["messages"].as_array().unwrap();
    assert_eq!(
        run_messages[0]["level"], "deny",
        "denials first: {run_messages:?}"
    );
    assert!(run_messages.len() >= 6, "{run_messages:?}");
    let calls = d.calls();
    let ups = packs_of(&calls, "up");
    assert_eq!(ups.len(), 14);
    assert!(ups.iter().all(|p| *p == [pack.clone()]), "{ups:?}");

    // `preview`: streamed, so that the warnings of unchanged projects are read too; the denial
    // fails the log agent's preview.
    let start = d.calls().len();
    let (code, preview) = report(&d, &["preview", "--keep-going"]);
    assert_eq!(code, 4, "{preview:#}");
    assert_eq!(preview["exit_code"], 4);
    assert_eq!(
        said(&preview, "kubernetes/secrets"),
        ["warn pulumi:refs/warn_kubeconfig: kubeconfig reads the kubeconfig stack"]
    );
    assert_eq!(
        common::project(&preview, "kubernetes/secrets")["status"],
        "unchanged"
    );
    assert_eq!(
        common::project(&preview, "kubernetes/logagent")["status"],
        "failed"
    );
    let previews = packs_of(&d.calls()[start..], "preview");
    assert_eq!(previews.len(), 14);
    assert!(
        previews.iter().all(|p| *p == [pack.clone()]),
        "{previews:?}"
    );

    // The table says it too.
    let out = d.mara().arg("preview").output().unwrap();
    let table = common::stdout(&out);
    assert!(table.contains("deny  kubernetes/logagent: logstore reads the log store directly (pulumi:refs/deny_logstore)"), "{table}");
    assert!(
        common::stderr(&out).contains("error: the policies deny the plan (1 denial)"),
        "{}",
        common::stderr(&out)
    );

    // `-q`: the denial, not the warnings.
    let out = d.mara().args(["preview", "-q"]).output().unwrap();
    let said = common::stdout(&out);
    assert!(said.contains("deny  kubernetes/logagent"), "{said}");
    assert!(!said.contains("warn "), "{said}");

    // A drift check runs no pack (a refusal would fail it and hide the drift it found), nor
    // does a destroy (Pulumi's destroy takes none).
    let start = d.calls().len();
    d.mara().arg("drift").output().unwrap();
    d.mara().args(["destroy", "--yes"]).output().unwrap();
    let calls = &d.calls()[start..];
    assert!(!calls.is_empty());
    for call in calls {
        let argv = call["argv"].to_string();
        assert!(!argv.contains("--policy-pack"), "{argv}");
    }
}

#[test]
fn an_advisory_pack_blocks_nothing_and_the_stream_reads_as_the_digest() {
    let d = with_pack(r#"["policy/refs"]"#);
    let rego = d.root().join("policy/refs/refs.rego");
    let text = std::fs::read_to_string(&rego).unwrap();
    std::fs::write(&rego, text.replace("deny_logstore", "warn_logstore")).unwrap();
    let (code, preview) = report(&d, &["preview"]);
    assert_eq!(code, 0, "{preview:#}");
    // What the streamed preview planned reads as a digest's: the creations, with the counts.
    let cluster = common::project(&preview, "infrastructure/local/cluster");
    assert_eq!(cluster["changes"]["create"], 1, "{cluster:#}");
    let (code, up) = report(&d, &["up", "--yes"]);
    assert_eq!(code, 0, "{up:#}");
    assert_eq!(
        said(&up, "kubernetes/logagent"),
        ["warn pulumi:refs/warn_logstore: logstore reads the log store directly"]
    );
    assert!(deployed(d.root(), "logagent"));
    // The dependents took the outputs of a streamed preview's plan: planned inputs flow.
    let (code, again) = report(&d, &["preview"]);
    assert_eq!(code, 0, "{again:#}");
    assert_eq!(
        common::project(&again, "kubernetes/logagent")["status"],
        "unchanged"
    );
}

#[test]
fn a_pack_that_is_not_one_is_refused_before_anything_runs() {
    for (packs, said) in [
        (
            r#"["policy/none"]"#,
            "`policy/none` is not a Pulumi policy pack: it has no PulumiPolicy.yaml",
        ),
        (
            r#"["policy/refs,more"]"#,
            "`policy/refs,more` has a comma, which Pulumi reads as two packs",
        ),
        (r#"["../refs"]"#, "`../refs` must stay inside the workspace"),
        (
            r#"["policy/refs/PulumiPolicy.yaml"]"#,
            "`policy/refs/PulumiPolicy.yaml` is a file: name the pack's directory",
        ),
        (
            r#"["policy/bare"]"#,
            "`policy/bare` has a PulumiPolicy.yaml without its `runtime`",
        ),
        (
            r#"["policy/out"]"#,
            "`policy/out` leads out of the workspace (to ",
        ),
    ] {
        let d = with_pack(packs);
        let bare = d.root().join("policy/bare");
        std::fs::create_dir_all(&bare).unwrap();
        std::fs::write(bare.join("PulumiPolicy.yaml"), "description: no runtime\n").unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("PulumiPolicy.yaml"), "runtime: opa\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), d.root().join("policy/out")).unwrap();
        let out = d.mara().arg("preview").output().unwrap();
        assert_eq!(out.status.code(), Some(3), "{}", common::stderr(&out));
        let stderr = common::stderr(&out);
        let line = std::fs::read_to_string(d.root().join("mara.toml"))
            .unwrap()
            .lines()
            .count();
        assert!(
            stderr.contains(&format!("mara.toml:{line}: `policy.pulumi_packs`: {said}")),
            "{stderr}"
        );
        assert!(d.calls().is_empty(), "no engine call");
        let validate = d.mara().arg("validate").output().unwrap();
        assert_eq!(
            validate.status.code(),
            Some(3),
            "{}",
            common::stderr(&validate)
        );
    }
    // Named twice: passed once.
    let d = with_pack(r#"["policy/refs", "./policy/refs/"]"#);
    d.mara()
        .args(["preview", "--only", "cluster"])
        .output()
        .unwrap();
    let previews = packs_of(&d.calls(), "preview");
    assert_eq!(previews.len(), 1);
    assert_eq!(
        previews[0],
        [d.root().join("policy/refs").display().to_string()]
    );
}

/// An `up` that asks first: the preview its question shows runs the packs; a denial there is
/// said before anything is asked or applied.
#[test]
fn an_up_that_asks_stops_at_a_denied_preview() {
    let d = Deployment::of("mara-local");
    d.mara().args(["up", "--yes"]).assert().success();
    add_pack(&d, r#"["policy/refs"]"#);
    let start = d.calls().len();
    let log = d.log().display().to_string();
    let env = [("PULUMI_STAND_IN_LOG", log.as_str())];
    let terminal = common::Terminal::start_with(d.root(), d.bin.path(), "up", &env);
    let (code, screen) = terminal.finish();
    assert_eq!(code, 4, "{screen}");
    assert!(
        screen.contains("logstore reads the log store directly"),
        "{screen}"
    );
    assert!(
        !screen.contains("Do you want to perform this update?"),
        "{screen}"
    );
    let calls = &d.calls()[start..];
    assert_eq!(common::counted(calls).get("up"), None, "nothing applied");
}

/// A pack's message that quotes a secret is redacted wherever mara says or keeps it, as every
/// line of an engine's output is.
#[test]
fn a_packs_message_never_carries_a_secret() {
    let d = with_pack(r#"["policy/refs"]"#);
    std::fs::write(
        d.root().join("policy/refs/refs.rego"),
        "package refs\n\nwarn_quote[msg] {\n    input.type == \"pulumi:pulumi:Stack\"\n    msg := \"the admin password is example-prometheus-admin\"\n}\n",
    )
    .unwrap();
    let out = d
        .mara()
        .args(["up", "--yes", "--output", "json", "--report", "report.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        said(&report, "kubernetes/secrets")[0].ends_with("the admin password is [secret]"),
        "{report:#}"
    );
    let history = d
        .mara()
        .args(["history", "--output", "json"])
        .output()
        .unwrap();
    let mut everything = vec![
        common::stdout(&out),
        common::stderr(&out),
        common::stdout(&history),
    ];
    everything.push(std::fs::read_to_string(d.root().join("report.json")).unwrap());
    for file in walk(&d.root().join(".mara")) {
        everything.push(String::from_utf8_lossy(&std::fs::read(file).unwrap()).into_owned());
    }
    for text in everything {
        assert!(
            !text.contains("example-prometheus-admin"),
            "a secret leaked: {text}"
        );
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        match path.is_dir() {
            true if !path.ends_with("pulumi-state") => files.extend(walk(&path)),
            true => {}
            false => files.push(path),
        }
    }
    files
}
