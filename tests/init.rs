//! `mara init` (docs/commands.md, "init"): in an empty directory, a workspace that validates and
//! deploys with the real Terraform; on the original MARA's layout, `projects_dir =
//! "pulumi/python"` and the virtualenv step; in a repository of its own projects, a provider
//! that lists them. No file is ever overwritten. And outside a workspace, `validate` says where
//! the projects are, once.

mod common;

use std::path::Path;

use common::{Workspace, stderr, stdout};

fn init(dir: &Path) -> (i32, String) {
    let output = common::mara(dir).arg("init").output().unwrap();
    let said = stdout(&output) + &stderr(&output);
    (output.status.code().unwrap_or(-1), said)
}

#[test]
fn in_an_empty_directory_it_makes_a_workspace_that_validates_and_deploys() {
    let Some(_) = common::terraform() else {
        return;
    };
    let w = Workspace::new(&[]);
    let (code, said) = init(w.path());
    assert_eq!(code, 0, "{said}");
    for file in [
        "mara.toml",
        "providers/starter.toml",
        "network/main.tf",
        "config/pulumi/environment",
        "config/pulumi/Pulumi.dev.yaml",
        ".gitignore",
    ] {
        assert!(w.path().join(file).is_file(), "{file}: {said}");
        assert!(said.contains(&format!("wrote {file}\n")), "{said}");
    }
    let validate = w.mara().arg("validate").output().unwrap();
    assert!(validate.status.success(), "{}", stdout(&validate));
    let up = w.mara().args(["up", "--yes"]).output().unwrap();
    let out = stdout(&up);
    assert!(up.status.success(), "{out}{}", stderr(&up));
    assert!(
        out.contains("[app] deploying the application onto network-dev"),
        "{out}"
    );

    // Again: refused, nothing written.
    let before = common::tree(w.path());
    let (code, said) = init(w.path());
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("a mara workspace already"), "{said}");
    assert_eq!(common::tree(w.path()), before);
}

#[test]
fn a_file_already_there_is_kept_as_it_is() {
    let w = Workspace::new(&[
        (".gitignore", "mine\n"),
        ("config/pulumi/environment", "PULUMI_STACK=prod\n"),
    ]);
    let (code, said) = init(w.path());
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains("kept  .gitignore (there already: not overwritten)"),
        "{said}"
    );
    assert!(said.contains("kept  config/pulumi/environment"), "{said}");
    let read = |f: &str| std::fs::read_to_string(w.path().join(f)).unwrap();
    assert_eq!(read(".gitignore"), "mine\n");
    assert_eq!(read("config/pulumi/environment"), "PULUMI_STACK=prod\n");
    assert!(w.path().join("mara.toml").is_file());
}

/// The original MARA repository's layout for the aws provider's projects: each under
/// `pulumi/python`, its `Pulumi.yaml` naming the shared configuration and the virtualenv
/// `pulumi/python/venv` (not made: a fresh clone has none), and the example configuration.
fn original_layout() -> Workspace {
    let w = Workspace::new(&[
        (
            "config/pulumi/Pulumi.stackname.yaml.example",
            "config:\n  aws:region: us-west-2\n",
        ),
        ("pulumi/python/runner", "#!/usr/bin/env bash\n"),
    ]);
    let listed = common::mara(w.path())
        .args(["show-execution", "-p", "aws", "--format", "list"])
        .output()
        .unwrap();
    assert!(listed.status.success(), "{}", stderr(&listed));
    for path in stdout(&listed).lines() {
        let up = "../".repeat(path.split('/').count());
        w.write(
            &format!("pulumi/python/{path}/Pulumi.yaml"),
            &format!(
                "name: {}\nruntime:\n  name: python\n  options:\n    virtualenv: {up}venv\nconfig: ../../{up}config/pulumi\n",
                path.replace('/', "-")
            ),
        );
        w.write(
            &format!("pulumi/python/{path}/__main__.py"),
            "import pulumi\n",
        );
    }
    w
}

#[test]
fn on_the_original_layout_it_says_where_the_projects_are_and_the_virtualenv_step() {
    let w = original_layout();
    // Before: validate names the directory, once, not one problem a project.
    let output = w
        .mara()
        .args(["validate", "-p", "aws", "-s", "dev"])
        .output()
        .unwrap();
    let out = stdout(&output);
    assert_eq!(out.matches("no directory").count(), 1, "{out}");
    assert!(
        out.contains(
            "they are under pulumi/python: set `projects_dir = \"pulumi/python\"` in mara.toml"
        ),
        "{out}"
    );

    let (code, said) = init(w.path());
    assert_eq!(code, 0, "{said}");
    let toml = std::fs::read_to_string(w.path().join("mara.toml")).unwrap();
    assert!(
        toml.contains("projects_dir = \"pulumi/python\"\n"),
        "{toml}"
    );
    assert!(toml.contains("aws ("), "{toml}");
    assert_eq!(said.matches("wrote ").count(), 1, "only mara.toml: {said}");
    assert!(
        said.contains("python3 -m venv pulumi/python/venv"),
        "{said}"
    );

    // After: the directories are found; the one virtualenv missing is said once.
    let output = w
        .mara()
        .args(["validate", "-p", "aws", "-s", "dev"])
        .output()
        .unwrap();
    let out = stdout(&output);
    assert!(!out.contains("no directory"), "{out}");
    assert_eq!(out.matches("virtualenv").count(), 1, "{out}");
    assert!(
        out.contains("projects' Pulumi.yaml files run") && out.contains("pulumi/python/venv"),
        "{out}"
    );
}

#[test]
fn in_a_repository_of_its_own_projects_it_writes_a_provider_that_lists_them() {
    let w = Workspace::new(&[
        ("infra/net/main.tf", "output \"x\" { value = 1 }\n"),
        ("infra/net/modules/sub/main.tf", "variable \"y\" {}\n"),
        ("apps/web/Pulumi.yaml", "name: web\nruntime: yaml\n"),
        ("docs/README.md", "docs\n"),
    ]);
    let (code, said) = init(w.path());
    assert_eq!(code, 0, "{said}");
    let name = (w.path().file_name().unwrap().to_string_lossy())
        .to_lowercase()
        .replace(|c: char| !c.is_ascii_alphanumeric(), "-");
    let name = name.trim_matches('-');
    let provider =
        std::fs::read_to_string(w.path().join(format!("providers/{name}.toml"))).unwrap();
    assert!(
        provider.contains("path = \"infra/net\"\nengine = \"terraform\""),
        "{provider}"
    );
    assert!(
        provider.contains("path = \"apps/web\"\nengine = \"pulumi\""),
        "{provider}"
    );
    assert!(
        !provider.contains("modules/sub"),
        "a module's own modules are its: {provider}"
    );
    let listed = w
        .mara()
        .args(["show-execution", "--format", "list"])
        .output()
        .unwrap();
    assert!(listed.status.success(), "{}", stderr(&listed));
    let mut paths: Vec<String> = stdout(&listed).lines().map(String::from).collect();
    paths.sort();
    assert_eq!(paths, ["apps/web", "infra/net"]);
}

#[test]
fn the_first_hours_small_mistakes_are_said_in_mara_s_words() {
    let w = Workspace::new(&[]);
    assert_eq!(init(w.path()).0, 0);
    // A stack spelt like the one there is.
    let output = w.mara().args(["-s", "dve", "validate"]).output().unwrap();
    let out = stdout(&output);
    assert!(
        out.contains("did you mean stack `dev`, which has its configuration?"),
        "{out}"
    );
    // A secret in a workspace without the secrets project: said before anything is asked.
    let output = (w.mara())
        .args(["config", "set", "--secret", "network:token"])
        .write_stdin("x\n")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let said = stderr(&output);
    assert!(
        said.contains("`--secret` keeps the value in the secrets project `kubernetes/secrets`")
            && said.contains("TF_VAR_"),
        "{said}"
    );
    // No runs at all is no listing.
    let output = w.mara().args(["history", "--limit", "0"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
}

#[test]
fn a_repository_that_is_one_project_is_refused_and_nothing_written() {
    let w = Workspace::new(&[("main.tf", "output \"x\" { value = 1 }\n")]);
    let before = common::tree(w.path());
    let (code, said) = init(w.path());
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("is a project itself"), "{said}");
    assert_eq!(common::tree(w.path()), before);
}
