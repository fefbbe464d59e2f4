//! mara decides as OPA does (docs/commands.md, "Policies"): every policy of the corpus
//! (`tests/policy-corpus`) evaluated on every input of it — hand-written plans and deployments,
//! and a plan the real Terraform makes and shows — by mara (`mara policy eval`, regorus) and by
//! OPA's own Go engine (PyPI `opa-golib-python-bindings`, installed by `.ci/test`), each side
//! finding the rules by its own means; the same messages, or the test fails. The policies'
//! tests too: `mara policy test` passes and fails what OPA evaluates true and not.

mod common;

use std::path::{Path, PathBuf};

use serde_json::Value;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/policy-corpus")
}

/// The Python with OPA's bindings, as `.ci/test` installs it.
fn opa_python() -> Option<PathBuf> {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ci-tools/opa/bin/python");
    let works = std::process::Command::new(&python)
        .args(["-c", "import opa_bindings"])
        .output()
        .is_ok_and(|o| o.status.success());
    match works {
        true => Some(python),
        false => common::tools::missing(&format!(
            "OPA's engine (PyPI opa-golib-python-bindings) is not in {}",
            python.display()
        )),
    }
}

/// The corpus's packages of each kind, as its mara.toml names them.
const PROJECT_PACKAGES: &str = "main,terraform.tags";
const DEPLOYMENT_PACKAGES: &str = "deployment";

/// mara's messages over `input`, as `[level, rule, text, details]`, sorted.
fn mara_decides(input: &Path, deployment: bool) -> Vec<Value> {
    let mut cmd = common::mara(&corpus());
    cmd.args(["--output", "json", "policy", "eval"]).arg(input);
    if deployment {
        cmd.arg("--deployment");
    }
    let output = cmd.output().unwrap();
    let code = output.status.code();
    assert!(
        matches!(code, Some(0 | 4)),
        "mara policy eval {}: {code:?}\n{}",
        input.display(),
        common::stderr(&output)
    );
    let decision: Value = serde_json::from_slice(&output.stdout).unwrap();
    let denies = decision["messages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["level"] == "deny");
    assert_eq!(code == Some(4), denies, "exit 4 exactly when it denies");
    let mut found: Vec<Value> = (decision["messages"].as_array().unwrap().iter())
        .map(|m| {
            serde_json::json!([
                m["level"],
                m["rule"],
                m["text"],
                m.get("details").cloned().unwrap_or(Value::Null)
            ])
        })
        .collect();
    found.sort_by_key(canonical);
    found
}

/// OPA's messages over `input`, as `opa_decide.py` finds them.
fn opa_decides(python: &Path, input: &Path, packages: &str) -> Vec<Value> {
    let output = std::process::Command::new(python)
        .arg(corpus().join("opa_decide.py"))
        .arg(corpus())
        .arg(input)
        .arg(packages)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "OPA on {}: {}",
        input.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let mut found: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    found.sort_by_key(canonical);
    found
}

/// JSON with its keys sorted, to compare and order by.
fn canonical(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<_> = map.iter().collect();
            keys.sort_by_key(|(k, _)| k.as_str());
            let inner: Vec<String> = keys
                .iter()
                .map(|(k, v)| format!("{k:?}:{}", canonical(v)))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// A plan the real Terraform makes of a module with `terraform_data` resources (no provider to
/// download), shown as JSON: what conftest's policies read.
fn real_plan(dir: &Path) -> Option<PathBuf> {
    let terraform = common::terraform()?;
    std::fs::write(
        dir.join("main.tf"),
        "resource \"terraform_data\" \"route\" {\n  input = \"0.0.0.0/0\"\n}\n\
         resource \"terraform_data\" \"unnamed\" {\n  input = \"\"\n}\n\
         resource \"terraform_data\" \"quiet\" {\n  input = \"10.0.0.0/16\"\n}\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let output = std::process::Command::new(&terraform)
            .args(args)
            .current_dir(dir)
            .env("TF_IN_AUTOMATION", "1")
            .env("HOME", dir)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "terraform {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        output.stdout
    };
    run(&["init", "-input=false"]);
    run(&["plan", "-input=false", "-out=plan.tfplan"]);
    let shown = run(&["show", "-json", "plan.tfplan"]);
    let mut plan: Value = serde_json::from_slice(&shown).unwrap();
    plan["mara"] = serde_json::json!({"project": "network", "engine": "terraform", "stack": "prod",
        "operation": "up", "provider": "local-tf", "run_id": "r1", "who": "a@b", "fanned_out": false});
    let file = dir.join("real-plan.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&plan).unwrap()).unwrap();
    Some(file)
}

#[test]
fn mara_decides_every_input_of_the_corpus_as_opa_does() {
    let Some(python) = opa_python() else { return };
    let scratch = tempfile::tempdir().unwrap();
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(corpus().join("inputs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    inputs.sort();
    let Some(plan) = real_plan(scratch.path()) else {
        return;
    };
    inputs.push(plan.clone());
    let (mut denied, mut warned) = (0, 0);
    for input in &inputs {
        let name = input.file_name().unwrap().to_string_lossy();
        let deployment = name.starts_with("deployment");
        let packages = match deployment {
            true => DEPLOYMENT_PACKAGES,
            false => PROJECT_PACKAGES,
        };
        let by_mara = mara_decides(input, deployment);
        let by_opa = opa_decides(&python, input, packages);
        assert_eq!(
            by_mara, by_opa,
            "{name}: mara (left) and OPA (right) decide differently"
        );
        denied += by_mara.iter().filter(|m| m[0] == "deny").count();
        warned += by_mara.iter().filter(|m| m[0] == "warn").count();
    }
    // The corpus says something: a corpus on which both said nothing would prove nothing.
    assert!(
        denied >= 10 && warned >= 5,
        "{denied} denials, {warned} warnings"
    );
    // The real plan: conftest's forms read it unchanged.
    let on_plan: Vec<String> = mara_decides(&plan, false)
        .iter()
        .map(|m| format!("{} {}", m[1].as_str().unwrap(), m[2].as_str().unwrap()))
        .collect();
    assert!(
        on_plan
            .contains(&"data.main.violation terraform_data.route routes to everywhere".to_string()),
        "{on_plan:?}"
    );
    assert!(
        on_plan.contains(
            &"data.main.deny_unnamed_data terraform_data.unnamed has an empty input".to_string()
        ),
        "{on_plan:?}"
    );
}

#[test]
fn the_policies_tests_pass_and_fail_as_opa_evaluates_them() {
    let Some(python) = opa_python() else { return };
    let output = common::mara(&corpus())
        .args(["--output", "json", "policy", "test"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
    let tested: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(tested.len(), 2, "{tested:?}");
    // OPA evaluates each test rule true.
    let script = "import json, sys, glob, os\n\
        from opa_bindings import OpaEngine\n\
        e = OpaEngine()\n\
        ws = sys.argv[1]\n\
        for p in sorted(glob.glob(os.path.join(ws, 'policy', '*.rego'))):\n    e.add_policy(os.path.relpath(p, ws), open(p).read())\n\
        doc = e.eval_document('main', {})\n\
        print(json.dumps({k: v for k, v in doc.items() if k.startswith('test_')}))\n";
    let opa = std::process::Command::new(&python)
        .args(["-c", script])
        .arg(corpus())
        .output()
        .unwrap();
    assert!(
        opa.status.success(),
        "{}",
        String::from_utf8_lossy(&opa.stderr)
    );
    let by_opa: Value = serde_json::from_slice(&opa.stdout).unwrap();
    for test in &tested {
        let name = test["test"].as_str().unwrap().rsplit('.').next().unwrap();
        assert_eq!(test["outcome"], "pass", "{test}");
        assert_eq!(by_opa[name], true, "OPA: {name} in {by_opa}");
    }
}
