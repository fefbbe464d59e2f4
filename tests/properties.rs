//! Properties that must hold for any input (issue 12, "Keep it found"), bounded so that the suite
//! stays fast (proptest's default of 256 cases each; `PROPTEST_CASES` raises it for a longer hunt):
//! the parsers and the engine-output readers never panic; an environment-file error never
//! quotes a value; the kubeconfig merge never loses or changes an entry it did not write, and
//! unmerging gives the file back; redaction never lets a secret through, whatever the line breaks.

use std::collections::BTreeMap;
use std::path::Path;

use mara::engine::{EngineKind, Operation, Reader};
use mara::run::kubeconfig::{Owner, merge, unmerge};
use mara::run::redact::Redactor;
use mara::workspace::identity::{Identity, Source};
use proptest::prelude::*;
use serde_json::{Value, json};

fn config() -> ProptestConfig {
    ProptestConfig {
        // Nothing is written into the repository: a failure prints its input.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Text made of the pieces the file formats are built from, so that the parsers get past their
/// first character: keys, separators, quotes, brackets, anchors, line breaks, odd bytes.
fn structured_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("config:".to_string()),
        Just("\n".to_string()),
        Just("\r\n".to_string()),
        Just("\r".to_string()),
        Just("  ".to_string()),
        Just("- ".to_string()),
        Just(": ".to_string()),
        Just("=".to_string()),
        Just("\"".to_string()),
        Just("'".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just("{".to_string()),
        Just("}".to_string()),
        Just("&a ".to_string()),
        Just("*a".to_string()),
        Just("!!binary ".to_string()),
        Just("#".to_string()),
        Just("export ".to_string()),
        Just("[[project]]\npath = ".to_string()),
        Just("after = [".to_string()),
        Just("extends = ".to_string()),
        Just("\u{feff}".to_string()),
        Just("\0".to_string()),
        "[a-z:_.]{1,8}",
        "[ -~]{0,6}",
        any::<char>().prop_map(String::from),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
}

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![structured_text(), any::<String>()]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn no_file_parser_panics(text in any_text()) {
        let path = Path::new("input");
        let _ = mara::workspace::envfile::parse(path, &text);
        let _ = mara::workspace::stack_config::StackConfig::parse(path, &text);
        let _ = mara::workspace::yaml::parse_value(path, &text);
        let _ = mara::workspace::mara_toml::parse(path, &text);
        let _ = mara::provider::schema::parse(path, &text);
        let _ = mara::workspace::stack::StackName::parse(&text);
    }

    #[test]
    fn an_environment_file_error_never_quotes_the_value(
        key in "[A-Z][A-Z0-9_]{0,12}",
        value in "[a-zA-Z0-9]{6,20}",
        shape in 0..4usize,
    ) {
        let line = match shape {
            0 => format!("{key}: {value}"),
            1 => value.clone(),
            2 => format!("{key}=\"{value}"),
            _ => format!("{key}-x={value}"),
        };
        let text = format!("A=1\n{line}\n");
        let error = mara::workspace::envfile::parse(Path::new("environment"), &text)
            .expect_err("a malformed line");
        let said = format!("{error}: {:?}", error.problems());
        prop_assert!(!said.contains(&value), "{said}");
        prop_assert!(said.contains("environment:2"), "{said}");
    }

    #[test]
    fn no_engine_reader_panics(lines in prop::collection::vec(engine_line(), 0..20)) {
        for engine in [EngineKind::named("pulumi").unwrap(), EngineKind::named("terraform").unwrap(), EngineKind::named("tofu").unwrap(), EngineKind::named("command").unwrap()] {
            for operation in [Operation::Up, Operation::Preview, Operation::Refresh, Operation::Destroy] {
                let mut reader = Reader::new(engine, operation);
                for line in &lines {
                    let _ = reader.line(line);
                }
                let _ = reader.finish();
                let _ = reader.error();
                let _ = reader.changes();
            }
        }
    }

    #[test]
    fn the_merge_never_loses_an_entry_it_did_not_write(
        existing in kubeconfig("user", 0..5),
        new in kubeconfig("new", 1..4),
        stack in "[a-z]{1,6}",
        // Not `mara-…`: a context of mara's that is gone is not restored.
        current in proptest::option::of("[a-l][a-z-]{0,9}"),
    ) {
        let mut existing = existing;
        if let Some(current) = &current {
            existing["current-context"] = json!(current);
        }
        let owner = Owner::new(Identity::named("gitlab.example.com/g/p", Source::Remote), &stack);
        let Ok((merged, done)) = merge(Some(existing.clone()), &new, &owner) else {
            // Refused: it had an entry of mara's names that mara did not write.
            return Ok(());
        };
        for section in ["clusters", "contexts", "users"] {
            for entry in existing[section].as_array().into_iter().flatten() {
                let kept = merged[section].as_array().is_some_and(|list| list.contains(entry));
                prop_assert!(kept, "{section} lost {entry}");
            }
        }
        let (back, unmerged) = unmerge(merged, &owner, done.link().as_ref());
        prop_assert!(unmerged.kept.is_empty());
        for section in ["clusters", "contexts", "users"] {
            let before = existing[section].as_array().cloned().unwrap_or_default();
            let after = back[section].as_array().cloned().unwrap_or_default();
            prop_assert_eq!(before, after, "{}", section);
        }
        prop_assert_eq!(&back["current-context"], &existing["current-context"]);
    }

    #[test]
    fn redaction_lets_no_secret_through_whatever_the_line_breaks(
        secret in secret(),
        before in "[ -~]{0,12}",
        after in "[ -~]{0,12}",
        ending in prop_oneof![Just("\n"), Just("\r\n")],
    ) {
        let redactor = Redactor::new([secret.clone()]);
        // Output is read line by line, as the engines' lines come.
        let text = format!("{before}{secret}{after}").replace('\n', ending);
        // As the engines' lines are read (`run::process`: up to each LF, a CR before it taken
        // off), and as a reader that also breaks at a lone CR would see them.
        let shown: Vec<String> = text
            .split('\n')
            .map(|line| redactor.redact(line.trim_end_matches('\r')))
            .collect();
        let broken: Vec<String> = shown.iter().flat_map(|l| l.split('\r')).map(String::from).collect();
        let all = shown.join("\n");
        prop_assert!(!all.contains(&secret), "{all:?}");
        for part in secret.split(['\n', '\r']) {
            if part.trim().chars().count() >= 8 {
                prop_assert!(broken.iter().all(|l| !l.contains(part)), "{part:?} in {broken:?}");
            }
        }
        for part in secret.lines().map(|l| l.trim_end_matches('\r')) {
            if part.trim().chars().count() >= 8 {
                prop_assert!(shown.iter().all(|l| !l.contains(part)), "{part:?} in {shown:?}");
            }
        }
    }

    #[test]
    fn a_secret_split_by_cr_crlf_or_lf_is_found_whatever_its_breaks_became(
        (first, last) in ("[A-Z0-9]{8,14}", "[A-Z0-9-]{3,7}"),
        inside in prop_oneof![Just("\r"), Just("\r\n"), Just("\n")],
        shown_as in prop_oneof![
            Just("\r"), Just("\n"), Just("\r\n"),
            Just(r"\r"), Just(r"\n"), Just(r"\r\n"), Just(r"\\r"), Just(r"\\n"),
        ],
        before in "[a-z .:=]{0,8}",
        after in "[a-z_ .:;]{0,8}",
        prefix in prop_oneof![Just(""), Just("terraform_data.x: (local-exec): ")],
        at_cr in any::<bool>(),
    ) {
        // The secret as stored, and as a program or its engine printed it: its break as the
        // same or another one, raw or escaped (JSON, escaped again).
        let secret = format!("{first}{inside}{last}");
        let redactor = Redactor::new([secret.clone()]);
        let text = format!("{before}{first}{shown_as}{last}{after}\n");
        // Read as `run::process` reads lines (up to each LF, a CR before it taken off), or by an
        // engine that breaks its program's output at a CR too (Terraform's provisioners), with
        // its own prefix on every line.
        let lines: Vec<String> = match at_cr {
            false => text.split('\n').map(|l| l.trim_end_matches('\r').to_string()).collect(),
            true => text.split("\r\n").flat_map(|l| l.split(['\r', '\n'])).map(String::from).collect(),
        };
        let mut continued = mara::run::redact::Continued::default();
        let shown: Vec<String> = (lines.iter())
            .map(|line| redactor.redact_next(&mut continued, &format!("{prefix}{line}")))
            .collect();
        for part in [&first, &last] {
            prop_assert!(shown.iter().all(|l| !l.contains(part.as_str())), "{part:?} in {shown:?}");
        }
    }
}

/// A line an engine might print: JSON messages of the kinds the readers know, with their
/// payloads missing, of the wrong type or cut short, and plain text.
fn engine_line() -> impl Strategy<Value = String> {
    let kind = prop_oneof![
        Just("change_summary"),
        Just("outputs"),
        Just("diagnostic"),
        Just("planned_change"),
        Just("apply_complete"),
        Just("version"),
        Just("summaryEvent"),
        Just("diagnosticEvent"),
        Just("resourcePreEvent"),
    ];
    let payload = prop_oneof![
        Just(Value::Null),
        Just(json!(5)),
        Just(json!("text")),
        Just(json!([])),
        Just(json!({})),
        Just(json!({"add": "x", "change": -1, "remove": null})),
        Just(json!({"resourceChanges": {"create": "many"}, "result": 3})),
        Just(json!({"message": 7, "severity": ["error"]})),
        Just(json!({"summary": {"a": 1}, "detail": 2, "range": "r"})),
    ];
    prop_oneof![
        (kind, payload.clone()).prop_map(|(kind, payload)| {
            json!({"type": kind, "@message": payload, kind: payload, "changes": payload,
                   "diagnostic": payload, "outputs": payload})
            .to_string()
        }),
        payload.prop_map(|p| p.to_string()),
        "[ -~]{0,40}",
        "\\{\"[a-z@_]{1,12}\":[ -~]{0,20}",
    ]
}

/// A kubeconfig with `n` entries in each section, named from `prefix`.
fn kubeconfig(prefix: &'static str, n: std::ops::Range<usize>) -> impl Strategy<Value = Value> {
    prop::collection::btree_set("[a-z]{1,4}", n).prop_map(move |names| {
        let names: Vec<String> = names.into_iter().map(|n| format!("{prefix}-{n}")).collect();
        let section = |make: &dyn Fn(&str) -> Value| -> Vec<Value> {
            names.iter().map(|n| make(n)).collect()
        };
        json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": section(&|n| json!({"name": n, "cluster": {"server": format!("https://{n}")}})),
            "users": section(&|n| json!({"name": n, "user": {"token": format!("t-{n}")}})),
            "contexts": section(&|n| json!({"name": n, "context": {"cluster": n, "user": n}})),
            "preferences": BTreeMap::<String, String>::new(),
        })
    })
}

/// A secret of 8 characters or more (what the docs promise to redact everywhere), possibly of
/// several lines.
fn secret() -> impl Strategy<Value = String> {
    prop_oneof![
        "[!-~]{8,24}",
        ("[!-~]{8,16}", "[!-~]{8,16}").prop_map(|(a, b)| format!("{a}\n{b}")),
        ("[!-~]{8,16}", "[!-~]{1,6}", "[!-~]{8,16}").prop_map(|(a, b, c)| format!("{a}\n{b}\n{c}")),
        // A lone CR inside, or at the end (a value from a file saved on Windows).
        ("[!-~]{8,16}", "[!-~]{8,16}").prop_map(|(a, b)| format!("{a}\r{b}")),
        "[!-~]{8,24}".prop_map(|a| format!("{a}\r")),
    ]
}
