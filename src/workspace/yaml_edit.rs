//! Setting one value in a stack configuration's text and changing nothing else: comments, order,
//! quoting and indentation stay as the person wrote them (docs/decisions.md, "Typed, nested
//! configuration"). Works on block-style YAML line by line; the caller reads the result back and
//! keeps it only when it holds exactly the values expected, so a layout this does not understand
//! ends in "cannot edit in place", never in a changed value.

use serde_json::Value;

use super::config_path::{ConfigPath, Step};

/// The text with `value` at `path` under the top-level `config:` mapping, or `None` when the
/// file is not laid out so that a line edit can do it.
pub fn set(text: &str, path: &ConfigPath, value: &Value) -> Option<String> {
    let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_string).collect();
    if lines.last().is_some_and(|l| !l.ends_with('\n')) {
        lines.last_mut().expect("a last line").push('\n');
    }
    if lines
        .iter()
        .any(|l| l.starts_with('\t') || l.contains("\t "))
    {
        return None;
    }
    let mut keys = vec![path.key.clone()];
    for step in &path.steps {
        match step {
            Step::Key(name) => keys.push(name.clone()),
            // Lists are rewritten whole, below.
            Step::Index(_) => return set_whole_key(lines, path, value),
        }
    }
    let Some(config) = lines.iter().position(|l| key_of(l, "config").is_some()) else {
        // No `config:` at all: add it at the end.
        if lines
            .iter()
            .any(|l| l.starts_with("config") || l.trim_start().starts_with('{'))
        {
            return None;
        }
        lines.push("config:\n".into());
        let at = lines.len();
        insert(&mut lines, at, 2, 2, &keys, value);
        return Some(lines.concat());
    };
    match inline_value(&lines[config], "config").as_deref() {
        None => {}
        Some("{}") => lines[config] = "config:\n".into(),
        Some(_) => return None,
    }
    let unit = child_indent(&lines, config, 0).unwrap_or(2);
    let mut parent = config;
    let mut parent_indent = 0;
    for (depth, key) in keys.iter().enumerate() {
        let end = block_end(&lines, parent, parent_indent);
        let indent = child_indent(&lines, parent, parent_indent)
            .filter(|&i| i > parent_indent)
            .unwrap_or(parent_indent + unit);
        let found = (parent + 1..end).find(|&i| {
            indent_of(&lines[i]) == indent && key_of(&lines[i][indent..], key).is_some()
        });
        let Some(at) = found else {
            if parent != config && inline_value(&lines[parent], &keys[depth - 1]).is_some() {
                // `key: value` where a mapping must go.
                return set_whole_key(lines, path, value);
            }
            insert(&mut lines, end, indent, unit, &keys[depth..], value);
            return Some(lines.concat());
        };
        let last = depth + 1 == keys.len();
        let inline = inline_value(&lines[at][indent..], key);
        match (last, inline) {
            (true, Some(_)) if block_end(&lines, at, indent) == at + 1 => {
                lines[at] = replace_inline(&lines[at], indent, key, value)?;
                return Some(lines.concat());
            }
            (false, None) => {
                parent = at;
                parent_indent = indent;
            }
            _ => return set_whole_key(lines, path, value),
        }
    }
    None
}

/// The 1-based line of the deepest of `path`'s keys that the text has.
pub fn line_of(text: &str, path: &ConfigPath) -> Option<usize> {
    let lines: Vec<String> = text.split_inclusive('\n').map(str::to_string).collect();
    let config = lines.iter().position(|l| key_of(l, "config").is_some())?;
    let mut keys = vec![path.key.as_str()];
    keys.extend(path.steps.iter().map_while(|step| match step {
        Step::Key(name) => Some(name.as_str()),
        Step::Index(_) => None,
    }));
    let (mut parent, mut parent_indent, mut found) = (config, 0, None);
    for key in keys {
        let Some(indent) = child_indent(&lines, parent, parent_indent) else {
            break;
        };
        let end = block_end(&lines, parent, parent_indent);
        let Some(at) = (parent + 1..end).find(|&i| {
            indent_of(&lines[i]) == indent && key_of(&lines[i][indent..], key).is_some()
        }) else {
            break;
        };
        (parent, parent_indent, found) = (at, indent, Some(at + 1));
    }
    found
}

/// The top-level key's whole block written anew, when nothing in it is a comment: what a path
/// into a list, or a scalar becoming a mapping, needs.
fn set_whole_key(lines: Vec<String>, path: &ConfigPath, value: &Value) -> Option<String> {
    let text = lines.concat();
    let mut values = super::stack_config::StackConfig::parse(std::path::Path::new(""), &text)
        .ok()?
        .values;
    path.set(&mut values, value.clone()).ok()?;
    let whole = values.get(&path.key)?;
    let config = lines.iter().position(|l| key_of(l, "config").is_some())?;
    let indent = child_indent(&lines, config, 0)?;
    let end = block_end(&lines, config, 0);
    let at = (config + 1..end).find(|&i| {
        indent_of(&lines[i]) == indent && key_of(&lines[i][indent..], &path.key).is_some()
    })?;
    let key_end = block_end(&lines, at, indent);
    if lines[at..key_end].iter().any(|l| l.contains('#')) {
        return None;
    }
    let mut rendered = Vec::new();
    render_entry(&mut rendered, indent, indent.max(2), &path.key, whole);
    let mut out = lines[..at].to_vec();
    out.extend(rendered);
    out.extend_from_slice(&lines[key_end..]);
    Some(out.concat())
}

/// `keys` (a mapping in a mapping…) ending in `value`, inserted at line `at`.
fn insert(
    lines: &mut Vec<String>,
    at: usize,
    indent: usize,
    unit: usize,
    keys: &[String],
    value: &Value,
) {
    let mut new = Vec::new();
    for (depth, key) in keys.iter().enumerate() {
        let pad = " ".repeat(indent + unit * depth);
        if depth + 1 == keys.len() {
            render_entry(&mut new, indent + unit * depth, unit, key, value);
        } else {
            new.push(format!("{pad}{}:\n", render_key(key)));
        }
    }
    lines.splice(at..at, new);
}

/// `key: value` at `indent`, a mapping as a block below it (each level `unit` deeper), a list
/// in flow style.
fn render_entry(out: &mut Vec<String>, indent: usize, unit: usize, key: &str, value: &Value) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push(format!("{pad}{}:\n", render_key(key)));
            for (k, v) in map {
                render_entry(out, indent + unit, unit, k, v);
            }
        }
        other => out.push(format!("{pad}{}: {}\n", render_key(key), scalar(other))),
    }
}

fn render_key(key: &str) -> String {
    if is_plain(key) || (key.contains(':') && key.split(':').all(is_plain)) {
        key.to_string()
    } else {
        serde_json::to_string(key).expect("a string serializes")
    }
}

/// A value on one line: a plain word where YAML reads it back as the same string, else JSON
/// (which YAML reads as the same value).
pub fn scalar(value: &Value) -> String {
    match value {
        Value::String(s) if is_plain(s) => s.clone(),
        other => serde_json::to_string(other).expect("a value serializes"),
    }
}

fn is_plain(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
        && !text.starts_with(['-', '.', '+'])
        && !text.starts_with(|c: char| c.is_ascii_digit())
        && text.parse::<f64>().is_err()
        && !matches!(
            text.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "y" | "n" | "~"
        )
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn is_content(line: &str) -> bool {
    let t = line.trim();
    !t.is_empty() && !t.starts_with('#')
}

/// The rest of the line after `key:` when `line` (from its key on) is that key's entry.
fn key_of<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let forms = [key.to_string(), format!("\"{key}\""), format!("'{key}'")];
    forms.iter().find_map(|form| {
        let rest = line.strip_prefix(form.as_str())?.strip_prefix(':')?;
        (rest.is_empty() || rest.starts_with([' ', '\n', '\r'])).then_some(rest)
    })
}

/// The value written on the key's own line, without a comment; `None` when there is none (a
/// block follows, or nothing).
fn inline_value(line: &str, key: &str) -> Option<String> {
    let rest = key_of(line.trim_start(), key)?.trim();
    if rest.is_empty() || rest.starts_with('#') {
        return None;
    }
    let (value, _) = split_comment(rest);
    Some(value.trim_end().to_string())
}

/// A one-line value and what follows it (a comment, with the spaces before it).
fn split_comment(rest: &str) -> (&str, &str) {
    let end = match rest.chars().next() {
        Some(q @ ('"' | '\'')) => {
            let mut escaped = false;
            rest.char_indices()
                .skip(1)
                .find(|&(_, c)| {
                    let close = c == q && !escaped;
                    escaped = q == '"' && c == '\\' && !escaped;
                    close
                })
                .map_or(rest.len(), |(i, _)| i + 1)
        }
        _ => rest.find(" #").unwrap_or(rest.len()),
    };
    rest.split_at(end)
}

/// The key's line with its one-line value replaced, any comment after it kept.
fn replace_inline(line: &str, indent: usize, key: &str, value: &Value) -> Option<String> {
    let body = &line[indent..];
    let rest = key_of(body, key)?;
    let head = &line[..line.len() - rest.len()];
    let trimmed = rest.trim_start();
    let (_, comment) = split_comment(trimmed.trim_end_matches(['\n', '\r']));
    Some(format!("{head} {}{comment}\n", scalar(value)))
}

/// The indentation of the first entry below line `at` (whose own indentation is `indent`).
fn child_indent(lines: &[String], at: usize, indent: usize) -> Option<usize> {
    lines[at + 1..]
        .iter()
        .find(|l| is_content(l))
        .map(|l| indent_of(l))
        .filter(|&i| i > indent)
}

/// The line after the last one that belongs to the entry at line `at`: its block, up to the next
/// entry at its indentation or less (a list at the same indentation belongs to it), without the
/// comments and blank lines that end it.
fn block_end(lines: &[String], at: usize, indent: usize) -> usize {
    let mut end = at + 1;
    for (i, line) in lines.iter().enumerate().skip(at + 1) {
        if !is_content(line) {
            continue;
        }
        let own = indent_of(line);
        let item = own == indent && line[own..].starts_with('-');
        if own <= indent && !item {
            break;
        }
        end = i + 1;
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set_in(text: &str, path: &str, value: Value) -> Option<String> {
        set(text, &ConfigPath::parse(path).unwrap(), &value)
    }

    #[test]
    fn a_value_is_replaced_on_its_line_keeping_its_comment() {
        let text = "# top\nconfig:\n  aws:region: us-west-2 # near\n  eks:min_size: \"3\"\n";
        assert_eq!(
            set_in(text, "aws:region", json!("eu-west-1")).unwrap(),
            "# top\nconfig:\n  aws:region: eu-west-1 # near\n  eks:min_size: \"3\"\n"
        );
        assert_eq!(
            set_in(text, "eks:min_size", json!(4)).unwrap(),
            "# top\nconfig:\n  aws:region: us-west-2 # near\n  eks:min_size: 4\n"
        );
    }

    #[test]
    fn a_nested_key_is_added_where_it_belongs() {
        let text = "config:\n    aip:aip_config:\n        # the service's environment\n        required_env:\n            PORT: 8080\n        replicas: 2\n    aws:region: x # r\n";
        assert_eq!(
            set_in(
                text,
                "aip:aip_config.required_env.DATABASE_URL",
                json!("postgres://db")
            )
            .unwrap(),
            "config:\n    aip:aip_config:\n        # the service's environment\n        required_env:\n            PORT: 8080\n            DATABASE_URL: \"postgres://db\"\n        replicas: 2\n    aws:region: x # r\n"
        );
        assert_eq!(
            set_in(text, "aip:aip_config.limits.cpu", json!("500m")).unwrap(),
            "config:\n    aip:aip_config:\n        # the service's environment\n        required_env:\n            PORT: 8080\n        replicas: 2\n        limits:\n            cpu: \"500m\"\n    aws:region: x # r\n"
        );
        assert_eq!(
            set_in(text, "new:key.a", json!(true)).unwrap(),
            "config:\n    aip:aip_config:\n        # the service's environment\n        required_env:\n            PORT: 8080\n        replicas: 2\n    aws:region: x # r\n    new:key:\n        a: true\n"
        );
    }

    #[test]
    fn a_path_has_a_line() {
        let text = "# c\nconfig:\n  a:cfg:\n    env:\n      URL: x\n  a:other: 1\n";
        let line = |p: &str| line_of(text, &ConfigPath::parse(p).unwrap());
        assert_eq!(line("a:cfg.env.URL"), Some(5));
        assert_eq!(line("a:cfg.env.NOPE"), Some(4));
        assert_eq!(line("a:other"), Some(6));
        assert_eq!(line("a:none"), None);
    }

    #[test]
    fn a_file_without_config_gets_one() {
        assert_eq!(
            set_in("encryptionsalt: v1:abc\n", "a:b", json!("c")).unwrap(),
            "encryptionsalt: v1:abc\nconfig:\n  a:b: c\n"
        );
        assert_eq!(
            set_in("", "a:b.c", json!(1)).unwrap(),
            "config:\n  a:b:\n    c: 1\n"
        );
        assert_eq!(
            set_in("config: {}\n", "a:b", json!("c")).unwrap(),
            "config:\n  a:b: c\n"
        );
    }

    #[test]
    fn lists_and_changed_shapes_rewrite_the_key_unless_it_has_comments() {
        let text = "config:\n  a:hosts:\n  - x\n  - y\n  a:other: 1 # kept\n";
        assert_eq!(
            set_in(text, "a:hosts[1]", json!("z")).unwrap(),
            "config:\n  a:hosts: [\"x\",\"z\"]\n  a:other: 1 # kept\n"
        );
        let commented = "config:\n  a:hosts:\n  - x # first\n";
        assert_eq!(set_in(commented, "a:hosts[0]", json!("z")), None);
        assert_eq!(
            set_in("config:\n  a:b:\n  a:c: 2\n", "a:b.c", json!(1)).unwrap(),
            "config:\n  a:b:\n    c: 1\n  a:c: 2\n"
        );
        assert_eq!(
            set_in("config:\n  a:b: text\n", "a:b.c", json!(1)),
            None,
            "a string is not made a mapping: the caller says why"
        );
    }
}
