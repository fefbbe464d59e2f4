//! Where each value of a YAML text is written, as written (docs/decisions.md, "An edit never
//! changes a value it was not asked to"): every scalar and alias with its path and its source
//! text, read by the YAML parser itself (flow collections, anchors, tags and block scalars
//! included). An in-place edit is kept only when every value it was not asked to change is
//! still written byte for byte (`preserved`): a YAML 1.1 `no` or an octal-looking `0644`
//! rewritten as another reader reads it would change what Pulumi reads.

use serde_saphyr::granit_parser::{Event, Parser};

/// A step of a path into the document: a mapping's key, a list's index.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// A scalar or alias, as written.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub path: Vec<Seg>,
    /// Its source text (an alias's `*name`; a quoted scalar with its quotes).
    pub raw: String,
    /// Its line (1-based).
    pub line: usize,
    /// Where its text is, in bytes.
    pub span: std::ops::Range<usize>,
}

/// What an edit changes: the value at `path` (and what is under it), and — for a list item
/// taken out — the items after it, which move up.
#[derive(Debug, Clone)]
pub struct Edit {
    pub path: Vec<Seg>,
    pub removes_item: bool,
}

/// The containers open around the parser's position.
enum Frame {
    /// A mapping at `path`; `key` is the key whose value comes next (`None`: a key comes).
    Map {
        path: Vec<Seg>,
        key: Option<String>,
    },
    Seq {
        path: Vec<Seg>,
        next: usize,
    },
}

/// Every scalar and alias of `text` that is a value (not a key), in order.
pub fn nodes(text: &str) -> Result<Vec<Node>, String> {
    scan(text).map(|(values, _)| values)
}

/// Every key of `text`'s mappings, as written, in order: each `Node`'s path is its entry's (the
/// mapping's path and the key as read), its text the key's own (`0644`, `"on"`, `'a'`).
pub fn keys(text: &str) -> Result<Vec<Node>, String> {
    scan(text).map(|(_, keys)| keys)
}

/// The values and the keys of `text`, each as written.
fn scan(text: &str) -> Result<(Vec<Node>, Vec<Node>), String> {
    let mut frames: Vec<Frame> = Vec::new();
    let (mut values, mut keys) = (Vec::new(), Vec::new());
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| e.to_string())?;
        let range = || match (span.start.byte_offset(), span.end.byte_offset()) {
            (Some(start), Some(end))
                if start <= end && end <= text.len() && text.is_char_boundary(start) =>
            {
                Ok(start..end)
            }
            _ => Err("a value's place in the text is not known".to_string()),
        };
        let node = |path: Vec<Seg>| -> Result<Node, String> {
            Ok(Node {
                path,
                raw: text[range()?].to_string(),
                line: span.start.line(),
                span: range()?,
            })
        };
        match event {
            Event::Scalar(..) | Event::Alias(..) => {
                if let Some(Frame::Map {
                    path,
                    key: key @ None,
                }) = frames.last_mut()
                {
                    let read = match &event {
                        Event::Scalar(value, ..) => value.to_string(),
                        _ => text[range()?].to_string(),
                    };
                    keys.push(node([path.clone(), vec![Seg::Key(read.clone())]].concat())?);
                    *key = Some(read);
                    continue;
                }
                values.push(node(next_path(&mut frames))?);
            }
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                if let Some(Frame::Map { key: None, .. }) = frames.last() {
                    return Err("a key that is a mapping or a list".into());
                }
                let path = next_path(&mut frames);
                frames.push(match event {
                    Event::MappingStart(..) => Frame::Map { path, key: None },
                    _ => Frame::Seq { path, next: 0 },
                });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                frames.pop();
            }
            _ => {}
        }
    }
    Ok((values, keys))
}

/// The path of the value that comes next in the innermost container.
fn next_path(frames: &mut [Frame]) -> Vec<Seg> {
    match frames.last_mut() {
        Some(Frame::Map { path, key }) => {
            let mut path = path.clone();
            path.push(Seg::Key(key.take().unwrap_or_default()));
            path
        }
        Some(Frame::Seq { path, next }) => {
            let mut path = path.clone();
            path.push(Seg::Index(*next));
            *next += 1;
            path
        }
        None => Vec::new(),
    }
}

/// Whether `old` became `new` by `edit` alone: every value of `old` that is neither the edited
/// one, under it, nor one the edit's path goes through is written in `new` byte for byte, at
/// its path (moved up, after a list item taken out), and `new` has no value `old` had not but
/// the edited ones; every key of `old` is written as it was (`keys_kept`). `Err` names the first
/// that is not kept, with its line.
pub fn preserved(old: &str, new: &str, edit: &Edit) -> Result<(), String> {
    let before = nodes(old)?;
    let after = nodes(new)?;
    let touched = |path: &[Seg]| path.starts_with(&edit.path) || edit.path.starts_with(path);
    // After a list item taken out, the items after it are at its place.
    let made = |path: &[Seg]| match edit.removes_item {
        true => edit.path.starts_with(path) && path.len() < edit.path.len(),
        false => touched(path),
    };
    let mut kept: std::collections::BTreeMap<Vec<Seg>, &Node> = after
        .iter()
        .filter(|n| !made(&n.path))
        .map(|n| (n.path.clone(), n))
        .collect();
    for node in before.iter().filter(|n| !touched(&n.path)) {
        match kept.remove(&moved(edit, &node.path)) {
            Some(now) if now.raw == node.raw => {}
            Some(now) => {
                return Err(format!(
                    "line {}'s `{}` would be written `{}`",
                    node.line,
                    shown(&node.raw),
                    shown(&now.raw)
                ));
            }
            None => {
                return Err(format!(
                    "line {}'s `{}` would not be kept",
                    node.line,
                    shown(&node.raw)
                ));
            }
        }
    }
    if let Some(extra) = kept.into_values().next() {
        return Err(format!(
            "`{}` would be written anew beside the value being set (an alias expanded, say)",
            shown(&extra.raw)
        ));
    }
    keys_kept(old, new, edit)
}

/// `path` in the text after `edit`: after a list item taken out, the items after it move up.
fn moved(edit: &Edit, path: &[Seg]) -> Vec<Seg> {
    let (Some(Seg::Index(gone)), true) = (edit.path.last(), edit.removes_item) else {
        return path.to_vec();
    };
    let list = &edit.path[..edit.path.len() - 1];
    match path.get(list.len()) {
        Some(Seg::Index(i)) if path.starts_with(list) && i > gone => {
            let mut path = path.to_vec();
            path[list.len()] = Seg::Index(i - 1);
            path
        }
        _ => path.to_vec(),
    }
}

/// Every key of `old` is in `new` written as it was — a key is never quoted anew, since `0644:`,
/// `on:` and `1e3:` are other keys to a YAML 1.1 reader than `"0644":` — but those of the entries
/// the edit takes out or replaces (docs/decisions.md, "Edits that change only what was asked
/// (issue 45)").
fn keys_kept(old: &str, new: &str, edit: &Edit) -> Result<(), String> {
    let after: std::collections::BTreeMap<Vec<Seg>, Node> = keys(new)?
        .into_iter()
        .map(|k| (k.path.clone(), k))
        .collect();
    for key in keys(old)? {
        // An item taken out: what was under it is gone, what is at its place now moved up.
        if edit.removes_item && key.path.starts_with(&edit.path) {
            continue;
        }
        match after.get(&moved(edit, &key.path)) {
            Some(now) if now.raw == key.raw => {}
            Some(now) => {
                return Err(format!(
                    "line {}'s key `{}` would be written `{}`",
                    key.line,
                    shown(&key.raw),
                    shown(&now.raw)
                ));
            }
            None if key.path.starts_with(&edit.path) => {}
            None => {
                return Err(format!(
                    "line {}'s key `{}` would not be kept",
                    key.line,
                    shown(&key.raw)
                ));
            }
        }
    }
    Ok(())
}

/// A value's text as a message shows it: on one line, and not too long.
fn shown(raw: &str) -> String {
    let line = raw.replace('\n', "\\n");
    match line.char_indices().nth(40) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Seg {
        Seg::Key(k.into())
    }

    #[test]
    fn each_value_is_found_with_its_path_and_text() {
        let text = "config:\n  app:s: {mode: 0644, debug: no, list: [a, 'b']}\n  x: &v 1\n  y: *v\n  z: |\n    text\n";
        let found = nodes(text).unwrap();
        let at = |path: Vec<Seg>| {
            found
                .iter()
                .find(|n| n.path == path)
                .map(|n| n.raw.as_str())
        };
        assert_eq!(
            at(vec![key("config"), key("app:s"), key("mode")]),
            Some("0644")
        );
        assert_eq!(
            at(vec![key("config"), key("app:s"), key("debug")]),
            Some("no")
        );
        assert_eq!(
            at(vec![
                key("config"),
                key("app:s"),
                key("list"),
                Seg::Index(1)
            ]),
            Some("'b'")
        );
        assert_eq!(at(vec![key("config"), key("y")]), Some("*v"));
        assert_eq!(found[0].line, 2);
    }

    #[test]
    fn an_edit_keeps_every_other_value_as_written_or_says_which_it_would_not() {
        let old = "config:\n  app:s: {mode: 0644, debug: no, replicas: 2}\n";
        let edit = Edit {
            path: vec![key("config"), key("app:s"), key("replicas")],
            removes_item: false,
        };
        let good = "config:\n  app:s: {mode: 0644, debug: no, replicas: 3}\n";
        assert_eq!(preserved(old, good, &edit), Ok(()));
        let bad = "config:\n  app:s:\n    mode: 420\n    debug: \"no\"\n    replicas: 3\n";
        assert_eq!(
            preserved(old, bad, &edit),
            Err("line 2's `0644` would be written `420`".into())
        );
        // A list item taken out: the items after it move up, as written.
        let old = "config:\n  l: [0755, x, 'y']\n";
        let edit = Edit {
            path: vec![key("config"), key("l"), Seg::Index(0)],
            removes_item: true,
        };
        assert_eq!(preserved(old, "config:\n  l: [x, 'y']\n", &edit), Ok(()));
        assert!(preserved(old, "config:\n  l: [x, y]\n", &edit).is_err());
    }
}
