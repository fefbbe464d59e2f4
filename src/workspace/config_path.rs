//! A configuration path, as Pulumi's `config set --path` reads one (docs/formats.md, "Stack
//! configuration"): `namespace:key` followed by `.name`, `[0]` or `["name with.dots"]` steps into
//! the key's structured value. The namespace belongs to the first segment only.

use std::fmt;

use serde_json::{Map, Value};

use crate::engine::pulumi::is_secure;

/// `aip:aip_config.required_env.DATABASE_URL`: the stack configuration key `aip:aip_config` and the
/// steps `required_env`, `DATABASE_URL` into its value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConfigPath {
    pub key: String,
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Step {
    Key(String),
    Index(usize),
}

/// What a path finds in a configuration.
#[derive(Debug, Clone, PartialEq)]
pub enum Found<'a> {
    Missing,
    /// The value, or a value on the way to it, is encrypted.
    Secret,
    Value(&'a Value),
}

impl ConfigPath {
    /// A key taken as it is, dots and all (`config set` without `--path`).
    pub fn literal(key: &str) -> ConfigPath {
        ConfigPath {
            key: key.to_string(),
            steps: Vec::new(),
        }
    }

    /// Parses Pulumi's path syntax; `Err` says what is wrong with it.
    pub fn parse(text: &str) -> Result<ConfigPath, String> {
        let chars: Vec<char> = text.chars().collect();
        let mut segments = Vec::new();
        let mut i = 0;
        let mut after_dot = false;
        while i < chars.len() {
            let first = segments.is_empty();
            let (step, next) = match chars[i] {
                '[' => bracketed(&chars, i, after_dot, first)?,
                _ => named(&chars, i, after_dot, first)?,
            };
            segments.push(step);
            i = next;
            after_dot = false;
            if chars.get(i) == Some(&'.') {
                after_dot = true;
                i += 1;
            }
        }
        if after_dot {
            return Err("a path must not end with `.`".into());
        }
        let mut segments = segments.into_iter();
        match segments.next() {
            Some(Step::Key(key)) => Ok(ConfigPath {
                key,
                steps: segments.collect(),
            }),
            _ => Err("the path is empty".into()),
        }
    }

    pub fn is_nested(&self) -> bool {
        !self.steps.is_empty()
    }

    /// What the path finds in a configuration's `config:` values.
    pub fn find<'a>(&self, values: &'a Map<String, Value>) -> Found<'a> {
        let Some(mut node) = values.get(&self.key) else {
            return Found::Missing;
        };
        for step in &self.steps {
            if is_secure(node) {
                return Found::Secret;
            }
            let next = match step {
                Step::Key(name) => node.as_object().and_then(|m| m.get(name)),
                Step::Index(index) => node.as_array().and_then(|a| a.get(*index)),
            };
            match next {
                Some(next) => node = next,
                None => return Found::Missing,
            }
        }
        if is_secure(node) {
            Found::Secret
        } else {
            Found::Value(node)
        }
    }

    /// `values` without what is at the path (a key, or a key inside mappings); whether there was
    /// anything. A path through a list removes nothing.
    pub fn remove(&self, values: &mut Map<String, Value>) -> bool {
        let Some((last, way)) = self.steps.split_last() else {
            return values.remove(&self.key).is_some();
        };
        let mut node = match values.get_mut(&self.key) {
            Some(node) => node,
            None => return false,
        };
        for step in way {
            node = match (step, node) {
                (Step::Key(name), Value::Object(map)) => match map.get_mut(name) {
                    Some(next) => next,
                    None => return false,
                },
                (Step::Index(i), Value::Array(list)) => match list.get_mut(*i) {
                    Some(next) => next,
                    None => return false,
                },
                _ => return false,
            };
        }
        match (last, node) {
            (Step::Key(name), Value::Object(map)) => map.remove(name).is_some(),
            // The items after it move up, as Pulumi's `config rm --path` leaves them.
            (Step::Index(i), Value::Array(list)) if *i < list.len() => {
                list.remove(*i);
                true
            }
            _ => false,
        }
    }

    /// `values` with `value` at the path, the mappings and lists on the way made as needed. `Err`
    /// names the value in the way: a path does not turn a string into a mapping.
    pub fn set(&self, values: &mut Map<String, Value>, value: Value) -> Result<(), String> {
        let mut node = values.entry(self.key.clone()).or_insert(Value::Null);
        let mut walked = ConfigPath::literal(&self.key);
        for step in &self.steps {
            if node.is_null() {
                *node = match step {
                    Step::Key(_) => Value::Object(Map::new()),
                    Step::Index(_) => Value::Array(Vec::new()),
                };
            }
            let fits = match (step, &*node) {
                (Step::Key(_), Value::Object(map)) => !is_secure_map(map),
                (Step::Index(index), Value::Array(items)) => {
                    if *index > items.len() {
                        return Err(format!(
                            "`{walked}` has {} {}: `[{index}]` would leave a gap",
                            items.len(),
                            if items.len() == 1 { "item" } else { "items" }
                        ));
                    }
                    true
                }
                _ => false,
            };
            if !fits {
                let wanted = match step {
                    Step::Key(_) => "a mapping",
                    Step::Index(_) => "a list",
                };
                return Err(format!("`{walked}` is {}, not {wanted}", describe(node)));
            }
            node = match (step, node) {
                (Step::Key(name), Value::Object(map)) => {
                    map.entry(name.clone()).or_insert(Value::Null)
                }
                (Step::Index(index), Value::Array(items)) => {
                    if *index == items.len() {
                        items.push(Value::Null);
                    }
                    &mut items[*index]
                }
                _ => unreachable!("checked above"),
            };
            walked.steps.push(step.clone());
        }
        *node = value;
        Ok(())
    }
}

/// The step of a path that starts with the `[` at `i` (`[0]` or `["a.b"]`), and where the path
/// goes on. `after_dot`: a `.` came just before; `first`: no step came before.
fn bracketed(
    chars: &[char],
    i: usize,
    after_dot: bool,
    first: bool,
) -> Result<(Step, usize), String> {
    if after_dot {
        return Err("`.` must be followed by a name, not `[`".into());
    }
    let close = chars[i..]
        .iter()
        .position(|&c| c == ']')
        .map(|n| i + n)
        .ok_or("a `[` is not closed")?;
    if chars.get(i + 1) == Some(&'"') {
        let (name, end_quote) = quoted(chars, i + 2)?;
        if chars.get(end_quote + 1) != Some(&']') {
            return Err("a quoted name must be followed by `]`".into());
        }
        return Ok((Step::Key(name), end_quote + 2));
    }
    let digits: String = chars[i + 1..close].iter().collect();
    let index = digits.parse::<usize>().map_err(|_| {
        format!("`[{digits}]` is neither an index (`[0]`) nor a quoted name (`[\"a.b\"]`)")
    })?;
    if first {
        return Err("a path starts with a key, not an index".into());
    }
    Ok((Step::Index(index), close + 1))
}

/// `["a.b"]`'s name, from `start` (just after the opening quote): everything up to the closing
/// quote, `\"` and `\\` escaped; and where that quote is.
fn quoted(chars: &[char], start: usize) -> Result<(String, usize), String> {
    let mut name = String::new();
    let mut j = start;
    loop {
        match chars.get(j) {
            None => return Err("a `\"` is not closed".into()),
            Some('\\') if j + 1 < chars.len() => {
                name.push(chars[j + 1]);
                j += 2;
            }
            Some('"') => return Ok((name, j)),
            Some(&c) => {
                name.push(c);
                j += 1;
            }
        }
    }
}

/// The name step that starts at `i` (up to the next `.`, `[` or `]`), and where the path goes
/// on. `after_dot`: a `.` came just before; `first`: no step came before.
fn named(chars: &[char], i: usize, after_dot: bool, first: bool) -> Result<(Step, usize), String> {
    if !first && !after_dot {
        return Err(format!(
            "`{}` must be preceded by `.`",
            chars[i..].iter().collect::<String>()
        ));
    }
    let end = chars[i..]
        .iter()
        .position(|&c| c == '.' || c == '[' || c == ']')
        .map_or(chars.len(), |n| i + n);
    if chars.get(end) == Some(&']') {
        return Err("a `]` without its `[`".into());
    }
    let name: String = chars[i..end].iter().collect();
    if name.is_empty() {
        return Err("a name is empty (two dots, or a dot at the start)".into());
    }
    Ok((Step::Key(name), end))
}

fn is_secure_map(map: &Map<String, Value>) -> bool {
    map.len() == 1 && map.contains_key("secure")
}

/// A value's kind, for messages.
fn describe(value: &Value) -> &'static str {
    match value {
        v if is_secure(v) => "a secret",
        Value::Object(_) => "a mapping",
        Value::Array(_) => "a list",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "true or false",
        Value::Null => "empty",
    }
}

impl fmt::Display for ConfigPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key)?;
        for step in &self.steps {
            match step {
                Step::Key(name) if plain_name(name) => write!(f, ".{name}")?,
                Step::Key(name) => write!(
                    f,
                    "[\"{}\"]",
                    name.replace('\\', "\\\\").replace('"', "\\\"")
                )?,
                Step::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

fn plain_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['.', '[', ']', '"'])
}

/// Every secure value inside `value` shown as `[secret]`: what `config get` and `config list` print
/// for a structured value that holds secrets.
pub fn redacted(value: &Value) -> Value {
    match value {
        v if is_secure(v) => Value::String("[secret]".into()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), redacted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(redacted).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_parse_as_pulumi_reads_them() {
        let path = ConfigPath::parse("aip:aip_config.required_env.DATABASE_URL").unwrap();
        assert_eq!(path.key, "aip:aip_config");
        assert_eq!(
            path.steps,
            [
                Step::Key("required_env".into()),
                Step::Key("DATABASE_URL".into())
            ]
        );
        let path = ConfigPath::parse("a:list[2][\"x.y\"].z").unwrap();
        assert_eq!(path.key, "a:list");
        assert_eq!(
            path.steps,
            [
                Step::Index(2),
                Step::Key("x.y".into()),
                Step::Key("z".into())
            ]
        );
        assert_eq!(path.to_string(), "a:list[2][\"x.y\"].z");
        assert_eq!(
            ConfigPath::parse("[\"a:b.c\"].d").unwrap().key,
            "a:b.c",
            "a quoted first segment keeps its dots"
        );
        for (bad, says) in [
            ("", "empty"),
            ("a:b..c", "empty"),
            ("a:b.", "end"),
            ("a:b[x]", "neither an index"),
            ("a:b[0", "not closed"),
            ("a:b]", "without its"),
            ("[0].a", "starts with a key"),
            ("a:b[0]c", "preceded by `.`"),
            ("a:b.[0]", "followed by a name"),
            ("a:b[\"c]", "not closed"),
        ] {
            let error = ConfigPath::parse(bad).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }

    #[test]
    fn a_path_finds_values_secrets_and_gaps() {
        let values = json!({
            "aip:aip_config": {"required_env": {"DATABASE_URL": {"secure": "v1:x"}, "PORT": 8080},
                               "hosts": ["a", "b"]},
            "aip:whole": {"secure": "v1:y"}
        });
        let values = values.as_object().unwrap();
        let find = |p: &str| ConfigPath::parse(p).unwrap().find(values).clone();
        assert_eq!(
            find("aip:aip_config.required_env.DATABASE_URL"),
            Found::Secret
        );
        assert_eq!(
            find("aip:aip_config.required_env.PORT"),
            Found::Value(&json!(8080))
        );
        assert_eq!(find("aip:aip_config.hosts[1]"), Found::Value(&json!("b")));
        assert_eq!(find("aip:aip_config.hosts[2]"), Found::Missing);
        assert_eq!(find("aip:aip_config.required_env.NOPE"), Found::Missing);
        assert_eq!(find("aip:whole.inner"), Found::Secret);
        assert_eq!(find("aip:nope"), Found::Missing);
        assert_eq!(
            redacted(&values["aip:aip_config"])["required_env"]["DATABASE_URL"],
            "[secret]"
        );
    }

    #[test]
    fn setting_makes_the_way_and_refuses_to_overwrite_a_value_in_it() {
        let mut values = Map::new();
        let set = |values: &mut Map<String, Value>, p: &str, v: Value| {
            ConfigPath::parse(p).unwrap().set(values, v)
        };
        set(&mut values, "a:cfg.env.URL", json!("x")).unwrap();
        set(&mut values, "a:cfg.hosts[0]", json!("h")).unwrap();
        set(&mut values, "a:cfg.hosts[1]", json!("i")).unwrap();
        assert_eq!(
            Value::Object(values.clone()),
            json!({"a:cfg": {"env": {"URL": "x"}, "hosts": ["h", "i"]}})
        );
        assert_eq!(
            set(&mut values, "a:cfg.env.URL.deeper", json!(1)).unwrap_err(),
            "`a:cfg.env.URL` is a string, not a mapping"
        );
        assert!(
            set(&mut values, "a:cfg.hosts[5]", json!(1))
                .unwrap_err()
                .contains("gap")
        );
    }
}
