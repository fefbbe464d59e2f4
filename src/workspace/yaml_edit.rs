//! Setting one value in a stack configuration's text and changing nothing else: comments, order,
//! quoting, alignment, indentation and line endings stay as the person wrote them
//! (docs/decisions.md, "Typed, nested configuration"). Works on block-style YAML line by line;
//! the caller reads the result back and keeps it only when it holds exactly the values expected,
//! so a layout this does not understand ends in "cannot edit in place", never in a changed value.

use serde_json::Value;

use super::config_path::{ConfigPath, Step};

/// The text with `value` at `path` under the top-level `config:` mapping; `Err` says why the
/// file is not laid out so that a line edit can do it.
pub fn set(text: &str, path: &ConfigPath, value: &Value) -> Result<String, String> {
    let mut doc = Doc::new(text);
    if doc
        .lines
        .iter()
        .any(|l| l[..l.len() - l.trim_start().len()].contains('\t'))
    {
        return Err("the file indents with tabs".into());
    }
    let mut keys = vec![path.key.clone()];
    for step in &path.steps {
        match step {
            Step::Key(name) => keys.push(name.clone()),
            // Lists are rewritten whole, below.
            Step::Index(_) => return doc.set_whole_key(path, value),
        }
    }
    let config = doc.config()?;
    let unit = child_indent(&doc.lines, config, 0).unwrap_or(2);
    let mut parent = config;
    let mut parent_indent = 0;
    for (depth, key) in keys.iter().enumerate() {
        let end = block_end(&doc.lines, parent, parent_indent);
        let indent =
            child_indent(&doc.lines, parent, parent_indent).unwrap_or(parent_indent + unit);
        let Some(at) = find_key(&doc.lines, parent + 1..end, indent, key) else {
            if parent != config && inline_value(&doc.lines[parent], &keys[depth - 1]).is_some() {
                // `key: value` where a mapping must go.
                return doc.set_whole_key(path, value);
            }
            doc.insert(end, indent, unit, &keys[depth..], value);
            return Ok(doc.text());
        };
        let last = depth + 1 == keys.len();
        match (last, inline_value(&doc.lines[at], key)) {
            (true, Some(_)) if block_end(&doc.lines, at, indent) == at + 1 => {
                let line = replace_inline(&doc.lines[at], indent, key, value, doc.eol)
                    .ok_or_else(|| format!("the line of `{key}` is not `{key}: value`"))?;
                doc.lines[at] = line;
                return Ok(doc.text());
            }
            (false, None) => {
                parent = at;
                parent_indent = indent;
            }
            _ => return doc.set_whole_key(path, value),
        }
    }
    Err("the path is empty".into())
}

/// The 1-based line of the deepest of `path`'s keys that the text has; the `config:` line when
/// it has none of them.
pub fn line_of(text: &str, path: &ConfigPath) -> Option<usize> {
    let lines = Doc::new(text).lines;
    let config = lines.iter().position(|l| key_of(l, "config").is_some())?;
    let mut keys = vec![path.key.as_str()];
    keys.extend(path.steps.iter().map_while(|step| match step {
        Step::Key(name) => Some(name.as_str()),
        Step::Index(_) => None,
    }));
    let (mut parent, mut parent_indent, mut found) = (config, 0, config + 1);
    for key in keys {
        let Some(indent) = child_indent(&lines, parent, parent_indent) else {
            break;
        };
        let end = block_end(&lines, parent, parent_indent);
        let Some(at) = find_key(&lines, parent + 1..end, indent, key) else {
            break;
        };
        (parent, parent_indent, found) = (at, indent, at + 1);
    }
    Some(found)
}

/// The text as lines, each with its line ending.
struct Doc {
    lines: Vec<String>,
    /// The file's own line ending, for the lines added.
    eol: &'static str,
}

impl Doc {
    fn new(text: &str) -> Doc {
        let eol = if text.contains("\r\n") { "\r\n" } else { "\n" };
        let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_string).collect();
        if let Some(last) = lines.last_mut()
            && !last.ends_with('\n')
        {
            last.push_str(eol);
        }
        Doc { lines, eol }
    }

    fn text(&self) -> String {
        self.lines.concat()
    }

    /// The line of the top-level `config:` mapping, made when the file has none.
    fn config(&mut self) -> Result<usize, String> {
        let Some(config) = self
            .lines
            .iter()
            .position(|l| key_of(l, "config").is_some())
        else {
            if self.lines.iter().any(|l| l.trim_start().starts_with('{')) {
                return Err("the file is written in flow style (`{…}`)".into());
            }
            self.lines.push(format!("config:{}", self.eol));
            return Ok(self.lines.len() - 1);
        };
        match inline_value(&self.lines[config], "config").as_deref() {
            None => Ok(config),
            Some("{}") => {
                self.lines[config] = format!("config:{}", self.eol);
                Ok(config)
            }
            Some(_) => Err("its `config:` is written in flow style (`{…}`)".into()),
        }
    }

    /// The top-level key's whole block written anew, when nothing in it is a comment: what a
    /// path into a list, or a scalar becoming a mapping, needs.
    fn set_whole_key(&mut self, path: &ConfigPath, value: &Value) -> Result<String, String> {
        let unreadable = || "the file does not read as YAML".to_string();
        let mut values =
            super::stack_config::StackConfig::parse(std::path::Path::new(""), &self.text())
                .map_err(|_| unreadable())?
                .values;
        path.set(&mut values, value.clone())?;
        let whole = values.get(&path.key).ok_or_else(unreadable)?;
        let config = self.config()?;
        let unit = child_indent(&self.lines, config, 0).unwrap_or(2);
        let end = block_end(&self.lines, config, 0);
        let Some(at) = find_key(&self.lines, config + 1..end, unit, &path.key) else {
            self.insert(end, unit, unit, std::slice::from_ref(&path.key), whole);
            return Ok(self.text());
        };
        let key_end = block_end(&self.lines, at, unit);
        if self.lines[at..key_end].iter().any(|l| l.contains('#')) {
            return Err(format!(
                "`{}` must be written anew for this, and the comments in it would be lost",
                path.key
            ));
        }
        let mut rendered = Vec::new();
        render_entry(&mut rendered, unit, unit, &path.key, whole);
        let rendered = rendered.into_iter().map(|l| l + self.eol);
        self.lines.splice(at..key_end, rendered);
        Ok(self.text())
    }

    /// `keys` (a mapping in a mapping…) ending in `value`, inserted at line `at`.
    fn insert(&mut self, at: usize, indent: usize, unit: usize, keys: &[String], value: &Value) {
        let mut new = Vec::new();
        for (depth, key) in keys.iter().enumerate() {
            let at_depth = indent + unit * depth;
            if depth + 1 == keys.len() {
                render_entry(&mut new, at_depth, unit, key, value);
            } else {
                new.push(format!("{}{}:", " ".repeat(at_depth), render_key(key)));
            }
        }
        let new: Vec<String> = new.into_iter().map(|l| l + self.eol).collect();
        self.lines.splice(at..at, new);
    }
}

/// The entry of `key` among `lines[range]` at `indent`.
fn find_key(
    lines: &[String],
    range: std::ops::Range<usize>,
    indent: usize,
    key: &str,
) -> Option<usize> {
    range
        .into_iter()
        .find(|&i| indent_of(&lines[i]) == indent && key_of(&lines[i][indent..], key).is_some())
}

/// `key: value` at `indent` (lines without their ending): a mapping as a block below it, a list
/// of single values as a block sequence, each level `unit` deeper.
fn render_entry(out: &mut Vec<String>, indent: usize, unit: usize, key: &str, value: &Value) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push(format!("{pad}{}:", render_key(key)));
            for (k, v) in map {
                render_entry(out, indent + unit, unit, k, v);
            }
        }
        Value::Array(items)
            if !items.is_empty() && items.iter().all(|i| !i.is_object() && !i.is_array()) =>
        {
            out.push(format!("{pad}{}:", render_key(key)));
            let inner = " ".repeat(indent + unit);
            out.extend(items.iter().map(|i| format!("{inner}- {}", scalar(i))));
        }
        other => out.push(format!("{pad}{}: {}", render_key(key), scalar(other))),
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

/// A string in the quoting its old value had: single quotes stay single quotes, double quotes
/// stay double quotes, a plain value stays plain where it can.
fn scalar_like(value: &Value, old: &str) -> String {
    match value {
        Value::String(s) if old.starts_with('\'') && !s.chars().any(char::is_control) => {
            format!("'{}'", s.replace('\'', "''"))
        }
        Value::String(s) if old.starts_with('"') => {
            serde_json::to_string(s).expect("a string serializes")
        }
        other => scalar(other),
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
        (rest.is_empty() || rest.starts_with([' ', '\t', '\n', '\r'])).then_some(rest)
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

/// A one-line value and what follows it (the blanks before a comment, and the comment).
fn split_comment(rest: &str) -> (&str, &str) {
    let end = match rest.chars().next() {
        Some(q @ ('"' | '\'')) => {
            // The closing quote: `\"` is escaped in double quotes, `''` in single ones.
            let bytes = rest.as_bytes();
            let mut i = 1;
            loop {
                match bytes.get(i) {
                    None => break rest.len(),
                    Some(b'\\') if q == '"' => i += 2,
                    Some(b'\'') if q == '\'' && bytes.get(i + 1) == Some(&b'\'') => i += 2,
                    Some(&b) if b == q as u8 => break i + 1,
                    Some(_) => i += 1,
                }
            }
        }
        _ => [" #", "\t#"]
            .iter()
            .filter_map(|c| rest.find(c))
            .min()
            .map_or(rest.len(), |i| rest[..i].trim_end().len()),
    };
    rest.split_at(end)
}

/// The key's line with its one-line value replaced: the blanks after the colon, the column of a
/// comment after it (where the new value leaves room), the quoting and the line ending kept.
fn replace_inline(
    line: &str,
    indent: usize,
    key: &str,
    value: &Value,
    eol: &str,
) -> Option<String> {
    let rest = key_of(&line[indent..], key)?;
    let head = &line[..line.len() - rest.len()];
    let body = rest.trim_end_matches(['\n', '\r']);
    let ending = if rest.ends_with("\r\n") {
        "\r\n"
    } else if rest.ends_with('\n') {
        "\n"
    } else {
        eol
    };
    let lead = &body[..body.len() - body.trim_start().len()];
    let (old, after) = split_comment(body.trim_start());
    let new = scalar_like(value, old);
    let comment = after.trim_start();
    if comment.is_empty() {
        return Some(format!("{head}{lead}{new}{ending}"));
    }
    let gap = (old.len() + after.len() - comment.len())
        .saturating_sub(new.len())
        .max(1);
    let blanks = if after.starts_with('\t') {
        "\t".to_string()
    } else {
        " ".repeat(gap)
    };
    Some(format!("{head}{lead}{new}{blanks}{comment}{ending}"))
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
        set(text, &ConfigPath::parse(path).unwrap(), &value).ok()
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
    fn line_endings_alignment_and_quoting_are_kept() {
        let crlf = "config:\r\n  a:n: 3      # aligned\r\n  a:s: 'it''s'\r\n";
        assert_eq!(
            set_in(crlf, "a:n", json!(42)).unwrap(),
            "config:\r\n  a:n: 42     # aligned\r\n  a:s: 'it''s'\r\n"
        );
        assert_eq!(
            set_in(crlf, "a:s", json!("o'brien")).unwrap(),
            "config:\r\n  a:n: 3      # aligned\r\n  a:s: 'o''brien'\r\n"
        );
        assert_eq!(
            set_in(crlf, "a:t.u", json!("v")).unwrap(),
            "config:\r\n  a:n: 3      # aligned\r\n  a:s: 'it''s'\r\n  a:t:\r\n    u: v\r\n"
        );
        assert_eq!(
            set_in("config:\n  a:q: \"x\"\n", "a:q", json!("y")).unwrap(),
            "config:\n  a:q: \"y\"\n"
        );
        assert_eq!(
            set_in("config:\n  a:b:\t1\t# c\n", "a:b", json!(2)).unwrap(),
            "config:\n  a:b:\t2\t# c\n",
            "tabs between a key, its value and a comment"
        );
        assert_eq!(
            set(
                "config:\n\ta:b: 1\n",
                &ConfigPath::parse("a:b").unwrap(),
                &json!(2)
            )
            .unwrap_err(),
            "the file indents with tabs"
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
        assert_eq!(line("a:none"), Some(2), "where it would go");
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
            "config:\n  a:hosts:\n    - x\n    - z\n  a:other: 1 # kept\n"
        );
        assert_eq!(
            set_in(text, "a:new[0]", json!("first")).unwrap(),
            "config:\n  a:hosts:\n  - x\n  - y\n  a:other: 1 # kept\n  a:new:\n    - first\n",
            "a new list"
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
