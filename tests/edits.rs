//! In-place edits of a stack configuration never change a value they were not asked to
//! (docs/decisions.md, "An edit never changes a value it was not asked to"). For random valid
//! YAML — flow collections, anchors and aliases, YAML 1.1 words (`no`, `on`, `y`), octal- and
//! hex-looking numbers, quoted strings, comments, CRLF line endings, a byte order mark — and a
//! random path and value, `with_value` either gives a text that every reader reads as the old
//! one plus exactly the edit (read as YAML 1.2's core schema, as Pulumi's yaml.v3, and as YAML
//! 1.1), with every other value and every key written byte for byte, or refuses. The cases that
//! found such changes are kept below (`what_the_fault_sweep_found_is_kept`,
//! `keys_are_never_quoted_anew`).

use std::path::Path;

use mara::workspace::config_path::ConfigPath;
use mara::workspace::stack_config::StackConfigFile;
use mara::workspace::yaml_nodes::{self, Edit, Seg};
use proptest::prelude::*;
use serde_json::{Map, Value};

/// A scalar as written: the words and numbers that YAML readers read differently included.
fn scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "yes",
            "no",
            "on",
            "off",
            "y",
            "n",
            "Y",
            "NO",
            "true",
            "False",
            "~",
            "null",
            "0644",
            "0755",
            "-0755",
            "08",
            "0o17",
            "0x1F",
            "1_000",
            "1e3",
            "1.5",
            ".5",
            ".inf",
            "-.inf",
            "2001-12-14",
            "12",
            "-3",
            "0",
            "'it''s'",
            "\"a\\tb\"",
            "'0644'",
            "\"no\"",
            "'y'",
            "http://x/y",
            "a b",
            "word",
        ])
        .prop_map(String::from),
        "[a-z]{1,6}",
        (0i64..100_000).prop_map(|n| n.to_string()),
    ]
}

/// A value as written on its key's line (`None`: a block collection below it).
#[derive(Debug, Clone)]
enum Written {
    Inline(String),
    BlockMap(Vec<(String, Written)>),
    BlockSeq(Vec<Written>),
}

/// A mapping's key as written: YAML 1.1 readers read some of them as other keys than the same
/// text quoted (`0644`, `on`, `yes`, `1e3`), and an edit must not quote them anew.
fn key(letters: &'static str, words: &[&'static str]) -> impl Strategy<Value = String> {
    prop_oneof![
        3 => letters.prop_map(String::from),
        1 => prop::sample::select(words.to_vec()).prop_map(String::from),
    ]
}

fn inline() -> impl Strategy<Value = String> {
    let keys = key("[a-d]", &["0644", "on", "yes", "1e3", "'q'"]);
    let flow_map = prop::collection::vec((keys, scalar()), 1..4).prop_map(|entries| {
        let mut seen = std::collections::BTreeSet::new();
        let entries: Vec<String> = entries
            .into_iter()
            .filter(|(k, _)| seen.insert(k.clone()))
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        format!("{{{}}}", entries.join(", "))
    });
    let flow_seq =
        prop::collection::vec(scalar(), 1..4).prop_map(|items| format!("[{}]", items.join(", ")));
    prop_oneof![4 => scalar(), 1 => flow_map, 1 => flow_seq]
}

fn written() -> impl Strategy<Value = Written> {
    let leaf = inline().prop_map(Written::Inline);
    leaf.prop_recursive(2, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(
                (
                    key("[e-h]", &["0755", "off", "2e1", "\"s\""]),
                    inner.clone()
                ),
                1..3
            )
            .prop_map(|entries| {
                let mut seen = std::collections::BTreeSet::new();
                Written::BlockMap(
                    entries
                        .into_iter()
                        .filter(|(k, _)| seen.insert(k.clone()))
                        .collect(),
                )
            }),
            prop::collection::vec(inner, 1..3).prop_map(Written::BlockSeq),
        ]
    })
}

fn render(out: &mut Vec<String>, indent: usize, lead: &str, value: &Written, comment: &str) {
    let pad = " ".repeat(indent);
    match value {
        Written::Inline(text) => out.push(format!("{pad}{lead} {text}{comment}")),
        Written::BlockMap(entries) => {
            out.push(format!("{pad}{lead}{comment}"));
            for (key, value) in entries {
                render(out, indent + 2, &format!("{key}:"), value, "");
            }
        }
        Written::BlockSeq(items) => {
            out.push(format!("{pad}{lead}{comment}"));
            for item in items {
                match item {
                    Written::Inline(text) => out.push(format!("{pad}  - {text}")),
                    // A collection as a list item goes on the lines below `-`, as a mapping.
                    other => render(
                        out,
                        indent + 2,
                        "-",
                        &Written::BlockMap(vec![("e".into(), other.clone())]),
                        "",
                    ),
                }
            }
        }
    }
}

/// A whole stack configuration, and its keys.
fn document() -> impl Strategy<Value = (String, Vec<String>)> {
    (
        prop::collection::vec((written(), any::<bool>(), any::<bool>()), 1..5),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(values, crlf, bom, alias)| {
            let mut lines = vec!["encryptionsalt: v1:abc".to_string(), "config:".to_string()];
            let mut keys = Vec::new();
            for (i, (value, commented, anchored)) in values.iter().enumerate() {
                let key = format!("app:k{i}");
                let comment = if *commented { "  # keep" } else { "" };
                let value = match (value, *anchored && i == 0) {
                    (Written::Inline(text), true) => Written::Inline(format!("&x {text}")),
                    (value, _) => value.clone(),
                };
                render(&mut lines, 2, &format!("{key}:"), &value, comment);
                keys.push(key);
            }
            if alias && matches!(values[0].0, Written::Inline(_)) && values[0].2 {
                lines.push("  app:alias: *x".into());
                keys.push("app:alias".into());
            }
            let eol = if crlf { "\r\n" } else { "\n" };
            let text = format!(
                "{}{}{eol}",
                if bom { "\u{feff}" } else { "" },
                lines.join(eol)
            );
            (text, keys)
        })
}

/// The document read with serde-saphyr's options (`legacy_octal`, `strict_booleans`): the
/// reader of a schema.
fn read(text: &str, legacy_octal: bool, strict_booleans: bool) -> Option<Value> {
    let mut options = serde_saphyr::Options::default();
    options.legacy_octal_numbers = legacy_octal;
    options.strict_booleans = strict_booleans;
    options.non_finite_float_policy = serde_saphyr::NonFiniteFloatPolicy::AsString;
    serde_saphyr::from_str_with_options::<Value>(text.trim_start_matches('\u{feff}'), options).ok()
}

/// Every path the document has below `config:` (a key, then keys and indexes), for an edit.
fn paths(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let next = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                out.push(next.clone());
                paths(v, next, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let next = format!("{at}[{i}]");
                out.push(next.clone());
                paths(v, next, out);
            }
        }
        _ => {}
    }
}

/// The edit as `yaml_nodes` names its path.
fn segs(path: &ConfigPath) -> Vec<Seg> {
    let mut segs = vec![Seg::Key("config".into()), Seg::Key(path.key.clone())];
    segs.extend(path.steps.iter().map(|s| match s {
        mara::workspace::config_path::Step::Key(k) => Seg::Key(k.clone()),
        mara::workspace::config_path::Step::Index(i) => Seg::Index(*i),
    }));
    segs
}

/// Checks one edit: refused, or exactly the edit under every reader, every other value as
/// written.
fn check(text: &str, path: &str, value: Value) -> Result<bool, TestCaseError> {
    let file = StackConfigFile::from_text(Path::new("/w/Pulumi.dev.yaml"), text.to_string())
        .map_err(|e| TestCaseError::reject(e.to_string()))?;
    let Ok(path) = ConfigPath::parse(path) else {
        return Ok(false);
    };
    let Ok(new) = file.with_value(&path, &value) else {
        return Ok(false);
    };
    prop_assert_eq!(
        new.starts_with('\u{feff}'),
        text.starts_with('\u{feff}'),
        "the byte order mark is kept"
    );
    for (legacy_octal, strict_booleans) in [(false, true), (true, true), (false, false)] {
        let (Some(before), Some(after)) = (
            read(text, legacy_octal, strict_booleans),
            read(&new, legacy_octal, strict_booleans),
        ) else {
            prop_assert!(false, "unreadable after the edit:\n{new}");
            unreachable!();
        };
        let mut expected = before.clone();
        let mut config: Map<String, Value> =
            expected["config"].as_object().cloned().unwrap_or_default();
        // The edited value is the one asked for, as every reader reads mara's writing of it.
        path.set(&mut config, value.clone())
            .map_err(TestCaseError::fail)?;
        expected["config"] = Value::Object(config);
        let as_read = {
            let mut a = after.clone();
            let mut b = expected.clone();
            // The edited value itself is compared as the readers read it (`1e3` is a number).
            let _ = path.remove(a["config"].as_object_mut().unwrap());
            let _ = path.remove(b["config"].as_object_mut().unwrap());
            a == b
        };
        prop_assert!(
            as_read,
            "schema (octal {legacy_octal}, strict {strict_booleans}): not exactly the edit\n--- before\n{text}\n--- after\n{new}"
        );
    }
    let edit = Edit {
        path: segs(&path),
        removes_item: false,
    };
    prop_assert_eq!(
        yaml_nodes::preserved(text, &new, &edit),
        Ok(()),
        "{}\n{}",
        text,
        new
    );
    Ok(true)
}

fn new_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0i64..1000).prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        prop::sample::select(vec!["no", "0644", "a b", "x", "y", "#x", "1e3"])
            .prop_map(Value::from),
    ]
}

/// Random documents and edits: each is exactly the edit, or refused; and most are made (an
/// implementation that refused every edit would pass the first half).
#[test]
fn an_edit_is_exactly_the_edit_or_refused() {
    let config = ProptestConfig {
        cases: 1000,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let made = std::cell::Cell::new(0u32);
    let tried = std::cell::Cell::new(0u32);
    let strategy = (
        document(),
        any::<prop::sample::Index>(),
        any::<bool>(),
        new_value(),
    );
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let outcome = runner.run(&strategy, |((text, keys), choice, new_key, value)| {
        let Some(parsed) = read(&text, true, true) else {
            return Err(TestCaseError::reject("not YAML"));
        };
        let mut all = Vec::new();
        paths(&parsed["config"], String::new(), &mut all);
        let path = match new_key || all.is_empty() {
            true => format!("{}.zz", keys[choice.index(keys.len())]),
            false => all[choice.index(all.len())].clone(),
        };
        tried.set(tried.get() + 1);
        if check(&text, &path, value)? {
            made.set(made.get() + 1);
        }
        Ok(())
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
    assert!(
        made.get() * 3 >= tried.get(),
        "only {} of {} edits were made: refusing is safe, not the point",
        made.get(),
        tried.get()
    );
}

#[test]
fn what_the_fault_sweep_found_is_kept() {
    // Each of the kinds of change the sweep found, as a fixture: a flow mapping with an octal-
    // looking number and a YAML 1.1 word, values reached through an alias, a list with YAML 1.1
    // words, CRLF and a byte order mark.
    let cases: &[(&str, &str, Value)] = &[
        (
            "config:\n  app:settings: {mode: 0644, debug: no, replicas: 2}\n",
            "app:settings.replicas",
            Value::from(3),
        ),
        (
            "config:\n  app:base: &b {debug: no, mode: 0755}\n  app:other: *b\n",
            "app:base.mode",
            Value::from("0700"),
        ),
        (
            "config:\n  app:l:\n    - yes\n    - 0755\n    - on\n",
            "app:l[1]",
            Value::from(1),
        ),
        (
            "\u{feff}config:\r\n  app:f: {y: y, n: 08}\r\n  app:g: off\r\n",
            "app:f.y",
            Value::from("z"),
        ),
        (
            "config:\n  app:s:\n    a: 0o17\n    b: 1_000\n    c: .inf\n",
            "app:s.d",
            Value::from(true),
        ),
    ];
    // Made in place, but for the anchored mapping an alias shares: changing it would change the
    // alias's value too, which was not asked.
    let expected = [true, false, true, true, true];
    for ((text, path, value), made) in cases.iter().zip(expected) {
        let outcome = check(text, path, value.clone()).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(outcome, made, "{text}");
    }
    // The first is now made over its own text, nothing else touched.
    let file = StackConfigFile::from_text(Path::new("/w/P.yaml"), cases[0].0.to_string()).unwrap();
    assert_eq!(
        file.with_value(&ConfigPath::parse(cases[0].1).unwrap(), &cases[0].2)
            .unwrap(),
        "config:\n  app:settings: {mode: 0644, debug: no, replicas: 3}\n"
    );
}

/// An edit that writes a flow or block collection anew writes the keys it had as they were
/// written: `0644:`, `on:`, `yes:` and `1e3:` quoted would be other keys to a YAML 1.1 reader
/// (issue 45: 6 of 10,718 edits of a sweep did so).
#[test]
fn keys_are_never_quoted_anew() {
    let cases: &[(&str, &str, Value, &str)] = &[
        // A flow mapping that a new key makes a block one.
        (
            "config:\n  app:s: {0644: a, on: b, yes: c, 1e3: d, 'q': e}\n",
            "app:s.zz",
            Value::from("x"),
            "config:\n  app:s:\n    0644: a\n    on: b\n    yes: c\n    1e3: d\n    'q': e\n    zz: x\n",
        ),
        // A flow mapping inside a block one.
        (
            "config:\n  app:s:\n    yes: {1e3: a, \"off\": b}\n",
            "app:s.yes.zz",
            Value::from(true),
            "config:\n  app:s:\n    yes:\n      1e3: a\n      \"off\": b\n      zz: true\n",
        ),
        // A block list of mappings written anew for an item added.
        (
            "config:\n  app:l:\n    - on: 1\n      'q': 2\n",
            "app:l[1]",
            Value::from("x"),
            "config:\n  app:l: [{on: 1, 'q': 2}, x]\n",
        ),
    ];
    for (text, path, value, expected) in cases {
        assert!(
            check(text, path, value.clone()).unwrap_or_else(|e| panic!("{text}: {e}")),
            "refused: {text}"
        );
        let file = StackConfigFile::from_text(Path::new("/w/P.yaml"), text.to_string()).unwrap();
        let edited = file.with_value(&ConfigPath::parse(path).unwrap(), value);
        assert_eq!(edited.as_deref(), Ok(*expected), "{text}");
    }
    // A key quoted anew is refused by the check every edit passes, naming its line.
    let edit = Edit {
        path: vec![
            Seg::Key("config".into()),
            Seg::Key("app:s".into()),
            Seg::Key("zz".into()),
        ],
        removes_item: false,
    };
    assert_eq!(
        yaml_nodes::preserved(
            "config:\n  app:s: {on: 1}\n",
            "config:\n  app:s:\n    \"on\": 1\n    zz: 2\n",
            &edit
        ),
        Err("line 2's key `on` would be written `\"on\"`".into())
    );
}
