//! Setting one value in a stack configuration's text and changing nothing else: comments, order,
//! quoting, alignment, indentation and line endings stay as the person wrote them
//! (docs/decisions.md, "Typed, nested configuration"). Works on block-style YAML line by line;
//! the caller reads the result back and keeps it only when it holds exactly the values expected,
//! so a layout this does not understand ends in "cannot edit in place", never in a changed value.

use serde_json::Value;

use super::config_path::{ConfigPath, Step};
use super::yaml_nodes::Seg;

/// The text with the value at `path` under the top-level `config:` mapping, as `updated` (the
/// file's `config:` values with it set) holds it; `Err` says why the file is not laid out so
/// that a line edit can do it. The caller parses the file: this module only edits its lines.
pub fn set(
    text: &str,
    path: &ConfigPath,
    updated: &serde_json::Map<String, Value>,
) -> Result<String, String> {
    if let Some(text) = scalar_in_place(text, path, updated) {
        return Ok(text);
    }
    let mut doc = Doc::new(text)?;
    let (keys, through_list) = walked_keys(path);
    let config = doc.config()?;
    let unit = child_indent(&doc.lines, config, 0).unwrap_or(2);
    let (mut parent, mut parent_indent) = (config, 0);
    for depth in 0..keys.len() {
        let key = &keys[depth];
        let end = block_end(&doc.lines, parent, parent_indent);
        let indent =
            child_indent(&doc.lines, parent, parent_indent).unwrap_or(parent_indent + unit);
        let wanted = sub_value(updated, &keys[..=depth]);
        let Some(at) = find_key(&doc.lines, parent + 1..end, indent, key) else {
            if depth > 0 && inline_value(&doc.lines[parent], &keys[depth - 1]).is_some() {
                // `key: value` where a mapping must go: that entry, written anew.
                let above = sub_value(updated, &keys[..depth]);
                doc.rewrite(parent, parent_indent, &keys[depth - 1], unit, above)?;
                return Ok(doc.text());
            }
            let mut new = Vec::new();
            let new_keys = AsWritten::default();
            render_entry(
                &mut new,
                indent,
                unit,
                &render_key(key),
                wanted,
                &new_keys,
                &[],
            );
            doc.insert(end, new)?;
            return Ok(doc.text());
        };
        let last = depth + 1 == keys.len();
        let inline = inline_value(&doc.lines[at], key);
        match (last, inline) {
            (true, Some(old))
                if !through_list
                    && is_one_line_scalar(&old)
                    && block_end(&doc.lines, at, indent) == at + 1 =>
            {
                doc.lines[at] = replace_inline(&doc.lines[at], indent, key, wanted, doc.eol)
                    .ok_or_else(|| format!("the line of `{key}` is not `{key}: value`"))?;
                return Ok(doc.text());
            }
            (false, None) => (parent, parent_indent) = (at, indent),
            (true, None) if through_list && path.steps.len() == keys.len() => {
                // `key[i]`, the last step, in a block list of one-line items: that item's
                // line alone, or a new item after the last.
                let Some(Step::Index(index)) = path.steps.last() else {
                    unreachable!("a path through a list ends in an index here")
                };
                let value = wanted.get(*index).unwrap_or(&Value::Null);
                if doc.set_item(at, indent, *index, value)? {
                    return Ok(doc.text());
                }
                doc.rewrite(at, indent, key, unit, wanted)?;
                return Ok(doc.text());
            }
            _ => {
                doc.rewrite(at, indent, key, unit, wanted)?;
                return Ok(doc.text());
            }
        }
    }
    Err("the path is empty".into())
}

/// The keys a line edit of `path` walks: up to the first list index, below which the list is
/// written anew; and whether the path goes on through a list.
fn walked_keys(path: &ConfigPath) -> (Vec<String>, bool) {
    let mut keys = vec![path.key.clone()];
    keys.extend(path.steps.iter().map_while(|step| match step {
        Step::Key(name) => Some(name.clone()),
        Step::Index(_) => None,
    }));
    let through_list = keys.len() <= path.steps.len();
    (keys, through_list)
}

/// A scalar that becomes another, written over its own text wherever it is (inside a flow
/// collection too), in the quoting it had where it can: everything else stays byte for byte.
/// `None` when the path is not a plain or quoted scalar in the text (a block scalar, an alias),
/// or the new value is not a scalar.
fn scalar_in_place(
    text: &str,
    path: &ConfigPath,
    updated: &serde_json::Map<String, Value>,
) -> Option<String> {
    let mut wanted = updated.get(&path.key)?;
    let mut segs = vec![Seg::Key("config".into()), Seg::Key(path.key.clone())];
    for step in &path.steps {
        (wanted, segs) = match step {
            Step::Key(key) => (
                wanted.get(key)?,
                [segs, vec![Seg::Key(key.clone())]].concat(),
            ),
            Step::Index(i) => (wanted.get(*i)?, [segs, vec![Seg::Index(*i)]].concat()),
        };
    }
    if wanted.is_object() || wanted.is_array() {
        return None;
    }
    let (bom, body) = match text.strip_prefix('\u{feff}') {
        Some(rest) => ("\u{feff}", rest),
        None => ("", text),
    };
    let nodes = crate::workspace::yaml_nodes::nodes(body).ok()?;
    let node = nodes.iter().find(|n| n.path == segs)?;
    if node.raw.starts_with(['|', '>', '*', '&', '!']) || node.raw.contains('\n') {
        return None;
    }
    let written = scalar_like(wanted, &node.raw);
    // A comment aligned after it stays in its column where the spaces before it allow.
    let after = &body[node.span.end..];
    let spaces = after.len() - after.trim_start_matches(' ').len();
    let longer = written.len() as isize - node.raw.len() as isize;
    let after = match after[spaces..].starts_with('#') && spaces > 1 {
        true => {
            let padding = (spaces as isize - longer).clamp(1, isize::MAX) as usize;
            format!("{}{}", " ".repeat(padding), &after[spaces..])
        }
        false => after.to_string(),
    };
    Some(format!("{bom}{}{written}{after}", &body[..node.span.start]))
}

/// The value at `keys` (a top-level key, then keys into it) of the updated configuration.
fn sub_value<'a>(values: &'a serde_json::Map<String, Value>, keys: &[String]) -> &'a Value {
    static NULL: Value = Value::Null;
    let mut node = values.get(&keys[0]).unwrap_or(&NULL);
    for key in &keys[1..] {
        node = node.get(key).unwrap_or(&NULL);
    }
    node
}

/// A value written on its key's line that a line edit may replace: a plain or quoted scalar,
/// not a flow collection, an anchor, an alias, a tag or a block scalar.
fn is_one_line_scalar(old: &str) -> bool {
    !old.starts_with(['[', '{', '&', '*', '!', '|', '>', '%', '@', '`'])
}

/// The text without the entry at `path` under the top-level `config:` mapping — its line and the
/// block below it — and the lines taken out; `Err` says why a line edit cannot do it. A mapping
/// the entry was the only child of is left `{}`, as it then is. A list item is not removed this
/// way (what follows it would move), nor a key that is not in the file.
pub fn remove(text: &str, path: &ConfigPath) -> Result<(String, Vec<String>), String> {
    let mut doc = Doc::new(text)?;
    let mut keys = vec![path.key.clone()];
    for step in &path.steps {
        match step {
            Step::Key(name) => keys.push(name.clone()),
            Step::Index(_) => return Err("a list item is not removed in place".into()),
        }
    }
    let config = (doc.lines.iter())
        .position(|l| key_of(l, "config").is_some())
        .ok_or("the file has no `config:` mapping")?;
    // (line, indent, key) of each entry on the way.
    let mut way: Vec<(usize, usize, String)> = vec![(config, 0, "config".into())];
    for key in &keys {
        let (parent, parent_indent, parent_key) =
            way.last().cloned().expect("config is on the way");
        // A value written inline (`{…}`, `[…]`) has no lines of its own to take out.
        let inline = || {
            inline_value(&doc.lines[parent], &parent_key)
                .filter(|v| v.starts_with(['{', '[']))
                .map(|_| {
                    format!(
                        "`{key}` is inside the flow collection of line {}, which mara does not take entries out of",
                        parent + 1
                    )
                })
        };
        let indent = child_indent(&doc.lines, parent, parent_indent)
            .ok_or_else(|| inline().unwrap_or_else(|| format!("`{key}` is not in the file")))?;
        let end = block_end(&doc.lines, parent, parent_indent);
        let at = find_key(&doc.lines, parent + 1..end, indent, key)
            .ok_or_else(|| format!("`{key}` is not in the file"))?;
        way.push((at, indent, key.clone()));
    }
    let (at, indent, _) = way.pop().expect("a key");
    let end = block_end(&doc.lines, at, indent);
    let removed: Vec<String> = doc.lines.drain(at..end).collect();
    let (parent, parent_indent, parent_key) = way.pop().expect("its parent");
    if !way.is_empty() && child_indent(&doc.lines, parent, parent_indent).is_none() {
        // Its mapping is empty now: `key: {}`, as a reader would read a key left without one.
        let unit = child_indent(&doc.lines, config, 0).unwrap_or(2);
        let empty = Value::Object(Default::default());
        doc.rewrite(parent, parent_indent, &parent_key, unit, &empty)?;
    }
    Ok((doc.text(), removed))
}

/// The 1-based line of the deepest of `path`'s keys that the text has; the `config:` line when
/// it has none of them.
pub fn line_of(text: &str, path: &ConfigPath) -> Option<usize> {
    let lines = Doc::new(text).ok()?.lines;
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

/// Every comment of a text, as written (a line's `# …` part): what an edit must keep.
pub fn comments(text: &str) -> Vec<String> {
    let mut found: Vec<String> = text.lines().filter_map(comment_of).collect();
    found.sort();
    found
}

/// The comment on a line, if it has one outside quotes.
fn comment_of(line: &str) -> Option<String> {
    let mut body = line.trim();
    if body.starts_with('#') {
        return Some(body.to_string());
    }
    while let Some(rest) = body.strip_prefix("- ") {
        body = rest.trim_start();
    }
    // After a key's colon, or the whole item.
    let value = match body.find(": ") {
        Some(at) if !body.starts_with(['"', '\'']) => body[at + 1..].trim_start(),
        _ => body,
    };
    let (_, after) = split_comment(value);
    let comment = after.trim_start();
    comment.starts_with('#').then(|| comment.to_string())
}

/// The text as lines, each with its line ending.
struct Doc {
    lines: Vec<String>,
    /// The file's own line ending, for the lines added.
    eol: &'static str,
    /// A byte order mark the text starts with, kept.
    bom: bool,
    /// Whether the text ends with a line ending (kept as it was).
    final_eol: bool,
}

impl Doc {
    fn new(text: &str) -> Result<Doc, String> {
        let (bom, text) = match text.strip_prefix('\u{feff}') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let eol = if text.contains("\r\n") { "\r\n" } else { "\n" };
        let final_eol = text.is_empty() || text.ends_with('\n');
        let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_string).collect();
        if let Some(last) = lines.last_mut()
            && !last.ends_with('\n')
        {
            last.push_str(eol);
        }
        if lines
            .iter()
            .any(|l| l[..l.len() - l.trim_start().len()].contains('\t'))
        {
            return Err("the file indents with tabs".into());
        }
        Ok(Doc {
            lines,
            eol,
            bom,
            final_eol,
        })
    }

    fn text(&self) -> String {
        let mut text = self.lines.concat();
        if !self.final_eol {
            text.truncate(text.trim_end_matches(['\r', '\n']).len());
        }
        if self.bom {
            text.insert(0, '\u{feff}');
        }
        text
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
            self.insert(self.lines.len(), vec!["config:".into()])?;
            return Ok(self.lines.len() - 1);
        };
        match inline_value(&self.lines[config], "config").as_deref() {
            None => Ok(config),
            Some("{}") => {
                // `config: {}  # …`: the mapping goes, the comment stays.
                let rest = key_of(&self.lines[config], "config").unwrap_or_default();
                let after = rest.trim().trim_start_matches("{}").trim_start();
                let comment = match after.starts_with('#') {
                    true => format!(" {after}"),
                    false => String::new(),
                };
                self.lines[config] = format!("config:{comment}{}", self.eol);
                Ok(config)
            }
            Some(_) => {
                Err("its `config:` is not a block mapping (flow style, an anchor or a tag)".into())
            }
        }
    }

    /// The entry at line `at` (its key `key`, at `indent`) written anew with `value`, when
    /// nothing in it is a comment: a list, or a scalar that becomes a mapping.
    fn rewrite(
        &mut self,
        at: usize,
        indent: usize,
        key: &str,
        unit: usize,
        value: &Value,
    ) -> Result<(), String> {
        let end = block_end(&self.lines, at, indent);
        // Any `#` in what is replaced may be a comment (a comment's syntax has too many forms
        // to be sure it is not), and a plain value that YAML readers read differently (`y`,
        // `012`) would be written back as one reader's reading of it.
        if self.lines[at..end].iter().any(|l| l.contains('#')) {
            return Err(format!(
                "`{key}` must be written anew for this, and the comments in it would be lost"
            ));
        }
        if let Some(word) = self.lines[at..end].iter().find_map(|l| ambiguous_value(l)) {
            return Err(format!(
                "`{key}` must be written anew for this, and it holds `{word}`, which YAML readers read differently"
            ));
        }
        // The key as it was written (quoted or not), and so every key below it.
        let rest = key_of(&self.lines[at][indent..], key).ok_or("a key moved")?;
        let written = &self.lines[at][indent..self.lines[at].len() - rest.len() - 1];
        let keys = AsWritten::below(&self.lines.concat(), at, key)?;
        let mut new = Vec::new();
        render_entry(&mut new, indent, unit, written, value, &keys, &[]);
        let new: Vec<String> = new.into_iter().map(|l| l + self.eol).collect();
        self.lines.splice(at..end, new);
        Ok(())
    }

    /// Item `index` of the block list under the entry at line `at` set to `value` on its own
    /// line (its comment kept), or appended when it is one past the end; `Ok(false)` when the
    /// list is not one-line items.
    fn set_item(
        &mut self,
        at: usize,
        indent: usize,
        index: usize,
        value: &Value,
    ) -> Result<bool, String> {
        let end = block_end(&self.lines, at, indent);
        let items: Vec<usize> = (at + 1..end)
            .filter(|&i| is_content(&self.lines[i]))
            .collect();
        let Some(&first) = items.first() else {
            return Ok(false);
        };
        let item_indent = indent_of(&self.lines[first]);
        let one_line = items.iter().all(|&i| {
            let line = &self.lines[i];
            indent_of(line) == item_indent
                && line[item_indent..].starts_with("- ")
                && is_one_line_scalar(line[item_indent + 2..].trim_start())
        });
        if !one_line {
            return Ok(false);
        }
        if let Some(&line) = items.get(index) {
            let body = &self.lines[line];
            let head = &body[..item_indent + 2];
            let rest = body[item_indent + 2..].trim_end_matches(['\n', '\r']);
            let ending = &body[item_indent + 2 + rest.len()..];
            let lead = &rest[..rest.len() - rest.trim_start().len()];
            let new = in_place(value, rest.trim_start());
            self.lines[line] = format!("{head}{lead}{new}{ending}");
            return Ok(true);
        }
        if index == items.len() {
            let last = *items.last().expect("a first item");
            let new = format!("{}- {}", " ".repeat(item_indent), scalar(value));
            self.insert(last + 1, vec![new])?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Lines (without their ending) inserted before line `at`.
    fn insert(&mut self, at: usize, new: Vec<String>) -> Result<(), String> {
        // After a last line that had no line break: the break it gets must not change a block
        // scalar's value.
        if at == self.lines.len()
            && !self.final_eol
            && self.lines.iter().any(|l| opens_block_scalar(l))
        {
            return Err("it ends without a line break after a block scalar (`|`, `>`)".into());
        }
        let new: Vec<String> = new.into_iter().map(|l| l + self.eol).collect();
        self.lines.splice(at..at, new);
        Ok(())
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

/// How the keys of an entry written anew were written, by their path below it: each is written
/// as it was, never quoted anew — `0644:`, `on:`, `yes:` and `1e3:` are other keys than
/// `"0644":` to a YAML 1.1 reader (docs/decisions.md, "Edits that change only what was asked
/// (issue 45)"). A key the file did not have is written as `render_key` writes it.
#[derive(Debug, Default)]
struct AsWritten(std::collections::BTreeMap<Vec<Seg>, String>);

impl AsWritten {
    /// The keys below the entry of `key` on line `at` (0-based) of `text`, as the parser finds
    /// them; a key written over several lines is left out (`yaml_nodes::preserved` then refuses
    /// the edit that would write it otherwise).
    fn below(text: &str, at: usize, key: &str) -> Result<AsWritten, String> {
        let keys = super::yaml_nodes::keys(text)?;
        let own = Seg::Key(key.to_string());
        let Some(entry) = keys
            .iter()
            .find(|k| k.line == at + 1 && k.path.last() == Some(&own))
        else {
            return Ok(AsWritten::default());
        };
        let depth = entry.path.len();
        Ok(AsWritten(
            (keys.iter())
                .filter(|k| k.path.len() > depth && k.path.starts_with(&entry.path))
                .filter(|k| !k.raw.contains(['\n', '\r']))
                .map(|k| (k.path[depth..].to_vec(), k.raw.clone()))
                .collect(),
        ))
    }

    /// Key `key` of the mapping at `at`, as written; else as a block (`render_key`) or a flow
    /// mapping (double quoted) writes a new one.
    fn key(&self, at: &[Seg], key: &str, flow: bool) -> String {
        let path = [at, &[Seg::Key(key.to_string())]].concat();
        match self.0.get(&path) {
            Some(raw) => raw.clone(),
            None if flow => quoted(key),
            None => render_key(key),
        }
    }
}

/// `key: value` at `indent` (lines without their ending; `key` as it is written): a mapping as a
/// block below it, a list of single values as a block sequence, each level `unit` deeper; the
/// keys below it that `keys` knows (by their path below `at`) as they were written.
fn render_entry(
    out: &mut Vec<String>,
    indent: usize,
    unit: usize,
    key: &str,
    value: &Value,
    keys: &AsWritten,
    at: &[Seg],
) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push(format!("{pad}{key}:"));
            for (k, v) in map {
                let inner = [at, &[Seg::Key(k.clone())]].concat();
                let written = keys.key(at, k, false);
                render_entry(out, indent + unit, unit, &written, v, keys, &inner);
            }
        }
        Value::Array(items)
            if !items.is_empty() && items.iter().all(|i| !i.is_object() && !i.is_array()) =>
        {
            out.push(format!("{pad}{key}:"));
            let inner = " ".repeat(indent + unit);
            out.extend(items.iter().map(|i| format!("{inner}- {}", scalar(i))));
        }
        other => out.push(format!("{pad}{key}: {}", flow(other, keys, at))),
    }
}

/// The shared configuration `values` as a document of its own (a first run's answers): a
/// `config:` mapping, its keys plain where YAML reads them back as the same text
/// (`kubernetes:infra_type`, not `"kubernetes:infra_type"`), as `set` writes a new entry.
pub fn document(values: &serde_json::Map<String, Value>) -> String {
    let mut lines = vec!["config:".to_string()];
    if values.is_empty() {
        lines[0].push_str(" {}");
    }
    for (key, value) in values {
        render_entry(
            &mut lines,
            2,
            2,
            &render_key(key),
            value,
            &AsWritten::default(),
            &[],
        );
    }
    lines.iter().map(|line| format!("{line}\n")).collect()
}

fn render_key(key: &str) -> String {
    if is_plain(key) || (key.contains(':') && key.split(':').all(is_plain)) {
        key.to_string()
    } else {
        quoted(key)
    }
}

/// A value on one line: a plain word where YAML reads it back as the same string, else double
/// quoted (strings) or JSON (which YAML reads as the same value).
pub fn scalar(value: &Value) -> String {
    flow(value, &AsWritten::default(), &[])
}

/// `scalar`, the keys of the mappings in it that `keys` knows (by their path below `at`) as
/// they were written.
fn flow(value: &Value, keys: &AsWritten, at: &[Seg]) -> String {
    match value {
        Value::String(s) if is_plain(s) => s.clone(),
        Value::String(s) => quoted(s),
        Value::Array(items) => {
            let items: Vec<String> = (items.iter().enumerate())
                .map(|(i, item)| flow(item, keys, &[at, &[Seg::Index(i)]].concat()))
                .collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(map) => {
            let entries: Vec<String> = (map.iter())
                .map(|(k, v)| {
                    let inner = [at, &[Seg::Key(k.clone())]].concat();
                    format!("{}: {}", keys.key(at, k, true), flow(v, keys, &inner))
                })
                .collect();
            format!("{{{}}}", entries.join(", "))
        }
        other => serde_json::to_string(other).expect("a value serializes"),
    }
}

/// A plain value on the line that YAML 1.1 and 1.2 readers read differently (`y`, `no`, `012`,
/// `0o17`, `1_000`, `1e3`): rewriting it from one reader's reading would change it for another.
fn ambiguous_value(line: &str) -> Option<String> {
    let (value, _) = split_comment(value_part(line));
    let word = value.trim();
    let lower = word.to_ascii_lowercase();
    let numeric = word
        .starts_with(|c: char| c.is_ascii_digit() || c == '+' || c == '-' || c == '.')
        && word.chars().any(|c| c.is_ascii_digit());
    let unusual_number = numeric
        && (word.contains('_')
            || lower.starts_with("0o")
            || lower.starts_with("0x")
            || lower.starts_with("0b")
            || (word.len() > 1 && word.starts_with('0') && !word.starts_with("0.")))
        || (numeric && lower.contains('e') && !word.contains('.'));
    let word_bool = matches!(lower.as_str(), "y" | "n" | "yes" | "no" | "on" | "off");
    (unusual_number || word_bool)
        .then(|| word.to_string())
        .filter(|w| !w.is_empty() && !w.starts_with(['"', '\'']))
}

/// A YAML double-quoted string: every character a reader could take otherwise escaped — the
/// control characters, DEL, the C1 range (NEL is a line break to YAML 1.1), the line and
/// paragraph separators, the byte order mark and the non-characters.
fn quoted(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            ' '..='~' => out.push(c),
            c if printable(c) => out.push(c),
            c if (c as u32) <= 0xFFFF => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push_str(&format!("\\U{:08X}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// Characters every YAML reader keeps as they are inside quotes.
fn printable(c: char) -> bool {
    matches!(c as u32, 0xA0..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
        && !matches!(c as u32, 0x2028 | 0x2029 | 0xFEFF)
        && !matches!(c as u32 & 0xFFFF, 0xFFFE | 0xFFFF)
}

/// A string in the quoting its old value had: single quotes stay single quotes, double quotes
/// stay double quotes, a plain value stays plain where it can.
fn scalar_like(value: &Value, old: &str) -> String {
    match value {
        Value::String(s)
            if old.starts_with('\'')
                && s.chars().all(|c| (' '..='~').contains(&c) || printable(c)) =>
        {
            format!("'{}'", s.replace('\'', "''"))
        }
        Value::String(s) if old.starts_with('"') => quoted(s),
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
        Some('[' | '{') => flow_end(rest).unwrap_or(rest.len()),
        _ => [" #", "\t#"]
            .iter()
            .filter_map(|c| rest.find(c))
            .min()
            .map_or(rest.len(), |i| rest[..i].trim_end().len()),
    };
    rest.split_at(end)
}

/// Where a one-line flow collection (`[…]`, `{…}`) ends, quotes inside it skipped.
fn flow_end(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let (mut depth, mut i) = (0usize, 0);
    while i < bytes.len() {
        match bytes[i] {
            q @ (b'"' | b'\'') => {
                i += 1;
                while i < bytes.len() {
                    match bytes[i] {
                        b'\\' if q == b'"' => i += 1,
                        b'\'' if q == b'\'' && bytes.get(i + 1) == Some(&b'\'') => i += 1,
                        b if b == q => break,
                        _ => {}
                    }
                    i += 1;
                }
            }
            b'[' | b'{' => depth += 1,
            b']' | b'}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
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
    Some(format!(
        "{head}{lead}{}{ending}",
        in_place(value, body.trim_start())
    ))
}

/// A one-line value (`old`, and any comment after it) replaced by `value`, in the old value's
/// quoting, the comment kept at its column where the new value leaves room (or after the tab
/// that was before it).
fn in_place(value: &Value, text: &str) -> String {
    let (old, after) = split_comment(text);
    let new = scalar_like(value, old);
    let comment = after.trim_start();
    if comment.is_empty() {
        return new;
    }
    let blanks = match after.starts_with('\t') {
        true => "\t".to_string(),
        false => {
            let gap = (old.len() + after.len() - comment.len()).saturating_sub(new.len());
            " ".repeat(gap.max(1))
        }
    };
    format!("{new}{blanks}{comment}")
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
    // Inside a block scalar (`|`, `>`) every more indented line is its text, `#` or not.
    let mut scalar = opens_block_scalar(&lines[at]).then(|| indent_of(&lines[at]));
    for (i, line) in lines.iter().enumerate().skip(at + 1) {
        let own = indent_of(line);
        if let Some(from) = scalar {
            if line.trim().is_empty() {
                continue;
            }
            if own > from {
                end = i + 1;
                continue;
            }
            scalar = None;
        }
        if !is_content(line) {
            continue;
        }
        let item = own == indent && line[own..].starts_with('-');
        if own <= indent && !item {
            break;
        }
        end = i + 1;
        if opens_block_scalar(line) {
            scalar = Some(own);
        }
    }
    end
}

/// Whether the line's value is a block scalar's header (`key: |`, `- >-`).
fn opens_block_scalar(line: &str) -> bool {
    value_part(line).starts_with(['|', '>'])
}

/// What a line holds as a value: after its list dashes and its key's `: `, or all of it.
fn value_part(line: &str) -> &str {
    let mut body = line.trim();
    while let Some(rest) = body.strip_prefix("- ") {
        body = rest.trim_start();
    }
    match body.find(": ") {
        Some(at) => body[at + 1..].trim_start(),
        None => body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set_in(text: &str, path: &str, value: Value) -> Option<String> {
        let path = ConfigPath::parse(path).unwrap();
        let mut updated =
            crate::workspace::stack_config::StackConfig::parse(std::path::Path::new(""), text)
                .ok()?
                .values;
        path.set(&mut updated, value).ok()?;
        set(text, &path, &updated).ok()
    }

    #[test]
    fn an_entry_is_removed_with_its_block_and_nothing_else() {
        let remove_in = |text: &str, path: &str| {
            remove(text, &ConfigPath::parse(path).unwrap()).map(|(text, _)| text)
        };
        let text = "# top\nconfig:\n  a:b: 1 # one\n  a:c:\n    d: 2\n    e: 3 # three\n  a:f: x\n";
        assert_eq!(
            remove_in(text, "a:b").unwrap(),
            "# top\nconfig:\n  a:c:\n    d: 2\n    e: 3 # three\n  a:f: x\n"
        );
        assert_eq!(
            remove_in(text, "a:c").unwrap(),
            "# top\nconfig:\n  a:b: 1 # one\n  a:f: x\n"
        );
        assert_eq!(
            remove_in(text, "a:c.e").unwrap(),
            "# top\nconfig:\n  a:b: 1 # one\n  a:c:\n    d: 2\n  a:f: x\n"
        );
        // The last of a mapping leaves it empty, as it is.
        let one = "config:\n  a:c:\n    d: 2\n  a:f: x\n";
        assert_eq!(
            remove_in(one, "a:c.d").unwrap(),
            "config:\n  a:c: {}\n  a:f: x\n"
        );
        assert_eq!(
            remove_in(text, "a:nope").unwrap_err(),
            "`a:nope` is not in the file"
        );
        assert_eq!(
            remove_in("config:\n  a:l:\n    - 1\n", "a:l[0]").unwrap_err(),
            "a list item is not removed in place"
        );
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
                json!({"a:b": 2}).as_object().unwrap()
            )
            .unwrap_err(),
            "the file indents with tabs"
        );
    }

    #[test]
    fn what_a_fuzzer_found_is_kept() {
        // NEL, DEL and a non-character are escaped: readers would fold or refuse them.
        assert_eq!(
            set_in(
                "config:\n  a:b: 1\n",
                "a:b",
                json!("x\u{85}y\u{7f}\u{ffff}")
            )
            .unwrap(),
            "config:\n  a:b: \"x\\u0085y\\u007F\\uFFFF\"\n"
        );
        // A flow value with a `#` inside is not taken apart: the `#` may be a comment.
        assert_eq!(
            set_in(
                "config:\n  a:b: ['x #y', z]\n  a:c: 1 # real\n",
                "a:b",
                json!("new")
            ),
            None
        );
        assert_eq!(
            set_in(
                "config:\n  a:b: [x, z]\n  a:c: 1 # real\n",
                "a:b",
                json!("new")
            )
            .unwrap(),
            "config:\n  a:b: new\n  a:c: 1 # real\n"
        );
        assert_eq!(
            set_in("config:\n  a:b: ['x #y', z]  # real\n", "a:b", json!("new")),
            None
        );
        // No line break is added at the end of a file that had none.
        assert_eq!(
            set_in("config:\n  a:b: 1", "a:b", json!(2)).unwrap(),
            "config:\n  a:b: 2"
        );
        assert_eq!(
            set_in("config:\n  a:b: 1", "a:c", json!(2)).unwrap(),
            "config:\n  a:b: 1\n  a:c: 2"
        );
        // …but after a block scalar, that break would change its value.
        assert_eq!(
            set_in("config:\n  a:s: |\n    echo hi", "a:c", json!(2)),
            None
        );
        // A block scalar's `#` lines are its text: a new key goes after them.
        assert_eq!(
            set_in(
                "config:\n  a:s: |\n    echo hi\n    # done\n",
                "a:c",
                json!(2)
            )
            .unwrap(),
            "config:\n  a:s: |\n    echo hi\n    # done\n  a:c: 2\n"
        );
        // The comment on `config: {}` stays.
        assert_eq!(
            set_in("config: {}   # filled in by mara\n", "a:b", json!("x")).unwrap(),
            "config: # filled in by mara\n  a:b: x\n"
        );
        // An item of a flow list, over its own text.
        assert_eq!(
            set_in(
                "config:\n  a:cfg:\n    url: 'http://x/#frag'\n    port: 0x1F\n    hosts: [a, b]\n",
                "a:cfg.hosts[1]",
                json!("c")
            )
            .unwrap(),
            "config:\n  a:cfg:\n    url: 'http://x/#frag'\n    port: 0x1F\n    hosts: [a, c]\n"
        );
    }

    #[test]
    fn what_a_second_fuzz_run_found_is_kept() {
        let base = "config:\n  k:i: local\n";
        // Comments a rewrite would lose, in the forms the first check missed: refused.
        for (text, path) in [
            ("'app:k': [a]  # keep\n", "app:k"),
            ("app:l:  # keep\n  - a\n", "app:l"),
            ("app:l:\n  - true # a: b\n", "app:l"),
        ] {
            let text = format!("{base}  {text}");
            assert_eq!(set_in(&text, path, json!("v")), None, "{text}");
        }
        // A scalar, anchored or in a flow list, over its own text: the comment stays.
        for (text, path, now) in [
            ("app:k: &x 1  # keep\n", "app:k", "app:k: &x v  # keep\n"),
            (
                "app:r: [it's]  # keep\n",
                "app:r[0]",
                "app:r: [v]  # keep\n",
            ),
        ] {
            let text = format!("{base}  {text}");
            assert_eq!(
                set_in(&text, path, json!("v")).as_deref(),
                Some(format!("{base}  {now}").as_str())
            );
        }
        // One item of a list of one-line items: its line alone, comments and siblings kept.
        assert_eq!(
            set_in(
                "config:\n  app:l:\n  - y  # yes\n  - n\n  - b\n",
                "app:l[2]",
                json!("z")
            )
            .unwrap(),
            "config:\n  app:l:\n  - y  # yes\n  - n\n  - z\n"
        );
        assert_eq!(
            set_in(
                "config:\n  app:l:\n  - a  # c\n  - b\n",
                "app:l[2]",
                json!("c")
            )
            .unwrap(),
            "config:\n  app:l:\n  - a  # c\n  - b\n  - c\n"
        );
        // A scalar inside a flow mapping in a list: over its own text, nothing else touched.
        assert_eq!(
            set_in(
                "config:\n  app:l:\n  - {a: 1}\n  - y\n",
                "app:l[0].a",
                json!(2)
            )
            .unwrap(),
            "config:\n  app:l:\n  - {a: 2}\n  - y\n"
        );
        // Written in place, strings are escaped too.
        assert_eq!(
            set_in(
                "config:\n  app:l:\n  - {a: 1}\n",
                "app:l[0].a",
                json!("\u{85}")
            )
            .unwrap(),
            "config:\n  app:l:\n  - {a: \"\\u0085\"}\n"
        );
        // A new key inside a flow mapping is no scalar over its text: the rewrite is refused
        // where it would write `y` anew.
        assert_eq!(
            set_in(
                "config:\n  app:l:\n  - {a: 1}\n  - y\n",
                "app:l[0].b",
                json!(2)
            ),
            None
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
            "config:\n  a:hosts:\n  - x\n  - z\n  a:other: 1 # kept\n"
        );
        assert_eq!(
            set_in(text, "a:new[0]", json!("first")).unwrap(),
            "config:\n  a:hosts:\n  - x\n  - y\n  a:other: 1 # kept\n  a:new:\n    - first\n",
            "a new list"
        );
        let commented = "config:\n  a:hosts:\n  - x # first\n";
        assert_eq!(
            set_in(commented, "a:hosts[0]", json!("z")).unwrap(),
            "config:\n  a:hosts:\n  - z # first\n",
            "one item's line, its comment kept"
        );
        assert_eq!(
            set_in(commented, "a:hosts", json!("z")),
            None,
            "the list replaced"
        );
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
