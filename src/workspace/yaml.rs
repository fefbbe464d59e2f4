//! YAML reading for Pulumi's files, through serde-saphyr (panic-free, errors with line and column;
//! serde_yaml is deprecated upstream). Every error becomes a `Problem` naming the file and line.

use std::path::Path;

use serde::de::DeserializeOwned;

use crate::error::{Error, Location, Problem, Result};

/// Parses `text` (the content of `path`) into `T`.
pub fn parse<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T> {
    serde_saphyr::from_str(text).map_err(|e| Error::config(problem(path, &e)))
}

/// Parses `text` into a generic value as Pulumi reads it (Go's yaml.v3, docs/decisions.md, "An
/// edit never changes a value it was not asked to"): YAML 1.2's `true`/`false` are the only
/// booleans (`yes`, `no`, `on`, `off`, `y` are strings), `0755` is octal as in YAML 1.1 (and
/// `0o755`), `.inf` and `.nan` are kept as they are written; an empty document is `null`.
pub fn parse_value(path: &Path, text: &str) -> Result<serde_json::Value> {
    if text.trim().is_empty() {
        return Ok(serde_json::Value::Null);
    }
    serde_saphyr::from_str_with_options::<Option<serde_json::Value>>(text, options())
        .map(Option::unwrap_or_default)
        .map_err(|e| Error::config(problem(path, &e)))
}

/// `text` up to the end of its first document — what Go's yaml.v3 `Unmarshal` reads of Pulumi's
/// project file, what follows not at all: a `---` line after the document began, or a `...`
/// line. Either marker at a line's start ends a document wherever it stands (YAML 1.2,
/// "c-forbidden"), inside a block or quoted scalar too.
pub fn first_document(text: &str) -> &str {
    let marker = |line: &str, marker: &str| {
        line.strip_prefix(marker)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
    };
    let (mut began, mut offset) = (false, 0);
    for line in text.split_inclusive('\n') {
        if marker(line, "...") || began && marker(line, "---") {
            return &text[..offset];
        }
        let content = line.trim_start();
        // A directive (`%YAML`) or comment does not begin it; `---` or content does.
        began |= !(content.is_empty() || content.starts_with('#') || line.starts_with('%'));
        offset += line.len();
    }
    text
}

/// A YAML mapping read into `T` as `parse_value` reads it, the keys `T` does not name skipped;
/// `None` when it does not read so (an error, not a mapping, empty), which `parse_value` then
/// says.
pub fn parse_keys<T: serde::de::DeserializeOwned>(text: &str) -> Option<T> {
    serde_saphyr::from_str_with_options::<Option<T>>(text, options())
        .ok()
        .flatten()
}

/// The `wanted` keys of a YAML mapping written in the plainest YAML there is, read without a
/// parser (most `Pulumi.yaml` files are a few such lines, and a plan of thousands reads them all:
/// docs/benchmarks.md). Each line is blank, a comment, `key: word` or `key:` at the top, or under
/// a `key:` that is not wanted one level of `key: word` or `- word` lines; a wanted key's value is
/// a word, which is a string however YAML reads it (no number, boolean or null looks so). The
/// file is printable ASCII, at most 64 KiB, its keys short (so no limit of the parser's is near).
/// `None` for anything else — the parser then reads it, and says what is wrong.
pub fn plain_keys(
    text: &str,
    wanted: &[&str],
) -> Option<serde_json::Map<String, serde_json::Value>> {
    let printable = |b: &u8| (b' '..=b'~').contains(b) || *b == b'\n';
    if text.len() > 64 << 10 || !text.as_bytes().iter().all(printable) {
        return None;
    }
    let mut found = serde_json::Map::new();
    let mut top: std::collections::HashSet<&str> = Default::default();
    // The block under the last top-level key without a value: its indentation, its keys, and
    // whether it is a list.
    let mut block: Option<(usize, std::collections::HashSet<&str>, bool)> = None;
    let mut open = false;
    for line in text.split('\n') {
        let content = line.trim_start_matches(' ');
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        if line.ends_with(' ') {
            return None;
        }
        let indent = line.len() - content.len();
        if indent == 0 {
            let (key, value) = entry(content)?;
            if !top.insert(key) {
                return None;
            }
            let is_wanted = wanted.contains(&key);
            match value {
                Some(value) if is_wanted => {
                    found.insert(key.to_string(), serde_json::Value::String(value.into()));
                }
                Some(_) => {}
                None if is_wanted => return None,
                None => {}
            }
            open = value.is_none();
            block = None;
            continue;
        }
        if !open {
            return None;
        }
        let list = content.starts_with("- ");
        let (at, keys, is_list) = block.get_or_insert_with(|| (indent, Default::default(), list));
        if indent != *at || list != *is_list {
            return None;
        }
        match list {
            true => word(&content[2..])?,
            false => match entry(content)? {
                (key, Some(_)) if keys.insert(key) => key,
                _ => return None,
            },
        };
    }
    (!top.is_empty()).then_some(found)
}

/// `key: word` or `key:`, for a key that is a plain name.
fn entry(content: &str) -> Option<(&str, Option<&str>)> {
    let (key, rest) = content.split_once(':')?;
    let name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if key.len() > 128
        || !key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        || !key.chars().all(name)
    {
        return None;
    }
    word(key)?;
    match rest {
        "" => Some((key, None)),
        _ => Some((key, Some(word(rest.strip_prefix(' ')?)?))),
    }
}

/// A plain scalar that every YAML reading takes for a string: a letter, `_` or `/` first, then
/// letters, digits, spaces and `_ . / - +`, and no word a YAML schema reads as a boolean, null or
/// number.
fn word(text: &str) -> Option<&str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || " _./-+".contains(c);
    let reserved = [
        "true", "false", "null", "yes", "no", "on", "off", "y", "n", "nan", "inf", "infinity",
    ];
    (text.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '/')
        && text.chars().all(plain)
        && !reserved.iter().any(|r| text.eq_ignore_ascii_case(r)))
    .then_some(text)
}

fn options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.legacy_octal_numbers = true;
    options.strict_booleans = true;
    options.non_finite_float_policy = serde_saphyr::NonFiniteFloatPolicy::AsString;
    options
}

fn problem(path: &Path, error: &serde_saphyr::Error) -> Problem {
    let location = match error.location() {
        Some(at) if at.line() > 0 => Location {
            file: path.to_path_buf(),
            line: Some(at.line() as usize),
            column: Some(at.column() as usize),
        },
        _ => Location::file(path),
    };
    Problem::new(plain_message(error)).at(location)
}

/// The error's message in mara's words, without serde-saphyr's source snippet and location
/// suffix (mara prints the location itself, in the same `file:line:` form as every other error).
pub fn plain_message(error: &serde_saphyr::Error) -> String {
    let rendered = error.without_snippet().to_string();
    let first = rendered.lines().next().unwrap_or_default().trim();
    let message = match first.rfind(" at line ") {
        Some(at) => &first[..at],
        None => first,
    };
    in_our_words(message.trim_end_matches(':'))
}

/// The library's message as mara says it: its advice to the library's user ("set … in Options")
/// is not for a person editing a file.
fn in_our_words(message: &str) -> String {
    if let Some(rest) = message.strip_prefix("duplicate mapping key") {
        let key = rest
            .strip_prefix(": ")
            .and_then(|r| r.split(", set ").next())
            .filter(|k| !k.is_empty());
        return match key {
            Some(key) => format!("the key `{key}` appears twice in the same mapping"),
            None => "a key appears twice in the same mapping".to_string(),
        };
    }
    let too_much = [
        "budget breached",
        "limit exceeded",
        "exceeds limit",
        "too large or too complex",
    ];
    if too_much.iter().any(|m| message.contains(m)) {
        return "the document is too large or too complex to read: its aliases expand, or it nests, past mara's limits".to_string();
    }
    if message.contains("from_str_multiple") || message.contains("multiple documents") {
        return "the file holds several YAML documents (`---`), where one is read".to_string();
    }
    if let Some(rest) = message.strip_prefix("unexpected character: `") {
        let written = rest.trim_end_matches('\'');
        return unexpected(written);
    }
    // Rust's types, and the advice to use another, are the library's user's business.
    if message.contains("cannot deserialize null into string") {
        return "the value is empty (null) where text is expected: write it, or quote it".into();
    }
    if message.contains("cannot deserialize null") {
        return "the value is empty (null) where one is expected".into();
    }
    if let Some(at) = message.find(" rejected by the configured policy") {
        let what = message[..at].trim_start_matches("non-finite float ");
        return format!("{what} is not a finite number, which this value must be");
    }
    // Sentences addressed to the library's user are dropped.
    message
        .split(". ")
        .filter(|sentence| !sentence.contains(" in Options"))
        .collect::<Vec<_>>()
        .join(". ")
}

/// The parser's "unexpected character" in words: a control character by its code point (not a
/// Rust escape), a reserved indicator with what to do.
fn unexpected(written: &str) -> String {
    let decoded: Option<char> = match written
        .strip_prefix("\\u{")
        .and_then(|r| r.strip_suffix('}'))
    {
        Some(hex) => u32::from_str_radix(hex, 16).ok().and_then(char::from_u32),
        None => written
            .chars()
            .next()
            .filter(|_| written.chars().count() == 1),
    };
    match decoded {
        Some('@') => "`@` is reserved in YAML and cannot start a value: quote the value".into(),
        Some('`') => {
            "a backquote is reserved in YAML and cannot start a value: quote the value".into()
        }
        Some(c) if c.is_control() || c == '\u{feff}' || c.is_whitespace() => format!(
            "a control character (U+{:04X}) that YAML does not allow here: save the file without it",
            c as u32
        ),
        Some(c) => format!("the character `{c}` is not allowed here"),
        None => "a character that is not allowed here".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_null_where_text_is_expected_is_said_without_rust_words() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Named {
            name: String,
        }
        let error = parse::<Named>(Path::new("Pulumi.yaml"), "name:\n").unwrap_err();
        let said = error.to_string();
        assert!(
            said.contains("empty (null) where text is expected"),
            "{said}"
        );
        assert!(!said.contains("Option<"), "{said}");
    }

    #[test]
    fn a_character_yaml_does_not_allow_is_named_in_words() {
        for (text, said) in [
            ("a: [x\u{1a}]\n", "a control character (U+001A)"),
            ("a: @x\n", "`@` is reserved in YAML"),
            ("a: `x\n", "a backquote is reserved in YAML"),
        ] {
            let err = parse_value(Path::new("x.yaml"), text).unwrap_err();
            let message = &err.problems()[0].message;
            assert!(message.contains(said), "{text:?}: {message}");
            assert!(!message.contains("\\u{"), "{message}");
        }
    }

    #[test]
    fn errors_name_the_line() {
        let err = parse_value(Path::new("x.yaml"), "a: 1\nb: [1, 2\n").unwrap_err();
        let problem = &err.problems()[0];
        assert!(
            problem.location.as_ref().unwrap().line.is_some(),
            "{problem:?}"
        );
        assert!(
            !problem.message.is_empty() && !problem.message.contains('\n'),
            "{problem:?}"
        );
    }

    #[test]
    fn errors_are_in_our_words_not_the_librarys() {
        let message = |text: &str| {
            parse_value(Path::new("x.yaml"), text)
                .unwrap_err()
                .problems()[0]
                .message
                .clone()
        };
        assert_eq!(
            message("a: 1\nb: 2\na: 3\n"),
            "the key `a` appears twice in the same mapping"
        );
        let bomb = "a: &a [1,2,3,4,5,6,7,8,9]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n";
        let said = message(bomb);
        assert!(said.contains("too large or too complex"), "{said}");
        assert_eq!(
            in_our_words("x is wrong. If so, set y in Options"),
            "x is wrong"
        );
        for text in ["a: 1\na: 2\n", bomb, "a: !!binary xx\n", "a: [1\n"] {
            let said = message(text);
            assert!(
                !said.contains("Options") && !said.contains("Policy"),
                "{said}"
            );
        }
    }

    #[test]
    fn the_first_document_ends_at_the_next_marker() {
        for (text, first) in [
            ("a: 1\n---\nb: [\n", "a: 1\n"),
            ("---\na: 1\n---\nb: 2\n", "---\na: 1\n"),
            ("# c\n%YAML 1.2\n---\na: 1\n", "# c\n%YAML 1.2\n---\na: 1\n"),
            ("a: 1\n...\n", "a: 1\n"),
            ("a: |\n  x\n---\n", "a: |\n  x\n"),
            ("a: 1\n---x: 2\n", "a: 1\n---x: 2\n"),
            ("a: 1\r\n--- \r\nb\r\n", "a: 1\r\n"),
        ] {
            assert_eq!(first_document(text), first, "{text:?}");
        }
    }

    #[test]
    fn empty_documents_are_null() {
        assert_eq!(
            parse_value(Path::new("x.yaml"), "  \n").unwrap(),
            serde_json::Value::Null
        );
        assert_eq!(
            parse_value(Path::new("x.yaml"), "# c\n").unwrap(),
            serde_json::Value::Null
        );
    }
}
