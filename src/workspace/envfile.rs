//! The environment file `<config_dir>/environment` (docs/formats.md, "Environment file") and the environment every engine
//! process gets.
//!
//! The format is deliberately small and predictable, unlike the original's ConfigParser: one
//! `KEY=VALUE` per line, `#` comments and blank lines ignored, an optional `export `, a value
//! optionally wrapped in single or double quotes, and everything else literal — `%`, `=`, `#` and
//! `$` included (no interpolation, no escapes).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Location, Problem, Result};

/// Variables mara adds to every engine's environment unless already set.
pub const DEFAULTS: &[(&str, &str)] = &[("PULUMI_SKIP_UPDATE_CHECK", "true")];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvEntry {
    pub key: String,
    pub value: String,
    pub line: usize,
}

/// A parsed environment file, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvFile {
    pub path: PathBuf,
    pub entries: Vec<EnvEntry>,
    /// The file as read: what a fingerprint hashes.
    pub text: String,
}

impl EnvFile {
    /// Reads the file at `path`; `Ok(None)` when there is none.
    pub fn load(path: &Path) -> Result<Option<EnvFile>> {
        match super::read_input(path) {
            Ok(text) => parse(path, &text).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::read(path, e)),
        }
    }

    pub fn get(&self, key: &str) -> Option<&EnvEntry> {
        self.entries.iter().find(|entry| entry.key == key)
    }
}

/// Parses the file's text, reporting every malformed line and duplicate key at once.
pub fn parse(path: &Path, text: &str) -> Result<EnvFile> {
    let mut entries: Vec<EnvEntry> = Vec::new();
    // Each key's first line: the duplicate check stays linear in the file's length.
    let mut first_lines: std::collections::HashMap<String, usize> = Default::default();
    let mut problems = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let at = || Location::line(path, line);
        match parse_line(raw) {
            Ok(None) => {}
            Ok(Some((key, value))) => {
                if let Some(first) = first_lines.get(&key) {
                    problems.push(
                        Problem::new(format!("duplicate key (first set on line {first})"))
                            .at(at())
                            .subject(format!("`{key}`"))
                            .hint("keep one of the two lines"),
                    );
                } else {
                    first_lines.insert(key.clone(), line);
                    entries.push(EnvEntry { key, value, line });
                }
            }
            Err(message) => problems.push(
                Problem::new(message)
                    .at(at())
                    .hint("each line is KEY=VALUE, a # comment, or blank"),
            ),
        }
    }
    if problems.is_empty() {
        Ok(EnvFile {
            path: path.to_path_buf(),
            entries,
            text: text.to_string(),
        })
    } else {
        Err(Error::Problems(problems))
    }
}

/// One line: `Ok(None)` for a blank or comment line.
fn parse_line(raw: &str) -> std::result::Result<Option<(String, String)>, String> {
    let line = raw.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let line = line
        .strip_prefix("export ")
        .map(str::trim_start)
        .unwrap_or(line);
    // A line of this file may hold a secret (or be a key file's, through a symlink): errors
    // name the key and the position, never the text (docs/formats.md, "Environment file").
    let Some((key, value)) = line.split_once('=') else {
        return Err(no_equals(line));
    };
    let key = key.trim();
    if !is_valid_key(key) {
        return Err(
            match key
                .chars()
                .position(|c| !(c.is_ascii_alphanumeric() || c == '_'))
            {
                Some(at) => format!(
                    "the name before `=` is not a valid variable name: its character {} is `{}` (letters, digits and `_` only)",
                    at + 1,
                    key.chars().nth(at).unwrap_or_default().escape_default()
                ),
                None if key.is_empty() => "nothing before `=`: a variable needs a name".to_string(),
                None => "the name before `=` starts with a digit, which a variable name may not"
                    .to_string(),
            },
        );
    }
    let value = unquote(value.trim())?;
    // Every value but a MARA_SECRET_* (which mara sends on standard input) reaches every process
    // as a variable.
    let sent = !key.starts_with(SECRET_PREFIX);
    if let Some(why) = unsendable(key, &value, sent) {
        return Err(why);
    }
    Ok(Some((key.to_string(), value)))
}

/// The prefix of the variables that supply secrets to mara (never passed on to a process).
pub const SECRET_PREFIX: &str = "MARA_SECRET_";

/// Whether a variable holds a secret, by its name: mara's secrets, the ledger's URL (it may hold
/// a password), any name that says pass (password, passphrase), pwd, token, secret, credential,
/// private, access key or API key, or ends in `_KEY`; or by its value: a URL with a password in
/// it. An environment file has no other mark of a secret. What `ci open` keeps out of the
/// ledger, and what a run redacts of a Terraform module's variables (docs/commands.md, "First
/// run and secrets").
pub fn says_secret(name: &str, value: &str) -> bool {
    let name = name.trim().to_ascii_uppercase();
    const SAYS: [&str; 9] = [
        "PASS",
        "PWD",
        "TOKEN",
        "SECRET",
        "CREDENTIAL",
        "PRIVATE",
        "ACCESS_KEY",
        "API_KEY",
        "APIKEY",
    ];
    name.starts_with(SECRET_PREFIX)
        || name == "MARA_LEDGER_URL"
        || name.ends_with("_KEY")
        || SAYS.iter().any(|word| name.contains(word))
        || holds_a_password(value)
}

/// Whether a value is a URL with a password in it (`scheme://user:password@host`).
fn holds_a_password(value: &str) -> bool {
    let Some((_, rest)) = value.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    authority
        .rsplit_once('@')
        .is_some_and(|(user, _)| user.contains(':'))
}

/// The secrets a run's engines are given as Terraform variables (`TF_VAR_*` whose name or value
/// says secret, `says_secret`), from the environment file or the shell (a CI's secret store),
/// for the redactor: a module prints its variables, in its plan and its outputs. A flag is none,
/// whatever its name says (`TF_VAR_private_endpoint=true`): hiding every `true` would hide
/// nothing and mangle every line.
pub fn terraform_secrets(env: &BTreeMap<String, String>) -> Vec<String> {
    let flag =
        |value: &str| ["true", "false"].contains(&value.trim().to_ascii_lowercase().as_str());
    (env.iter())
        .filter(|(name, value)| name.starts_with("TF_VAR_") && says_secret(name, value))
        .filter(|(_, value)| !flag(value))
        .map(|(_, value)| value.clone())
        .collect()
}

/// The longest `NAME=value` a process can be given as a variable or argument, with its
/// terminating NUL (Linux's `MAX_ARG_STRLEN`, 32 pages).
pub const VARIABLE_LIMIT: usize = 128 * 1024;

/// Why `value` cannot reach a process as `name`'s value, if it cannot: a NUL byte, which ends
/// a C string (never), or — when `as_variable` — a length past `VARIABLE_LIMIT`. Said without
/// the value.
pub fn unsendable(name: &str, value: &str, as_variable: bool) -> Option<String> {
    if let Some(at) = value.find('\0') {
        return Some(format!(
            "the value of `{name}` holds a NUL byte (at byte {}), which no process can receive",
            at + 1
        ));
    }
    let size = name.len() + value.len() + 2;
    (as_variable && size > VARIABLE_LIMIT).then(|| {
        format!(
            "`{name}=…` is {} bytes, past the {} KiB a process can receive as one variable",
            size - 1,
            VARIABLE_LIMIT / 1024
        )
    })
}

/// A line without `=`, said without its text: `KEY: value` (YAML's habit) names its key.
fn no_equals(line: &str) -> String {
    let name: String = line
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let rest = line[name.len()..].trim_start();
    if is_valid_key(&name) && rest.starts_with(':') {
        format!("expected KEY=VALUE, found `{name}:` (write `{name}=…`)")
    } else {
        "expected KEY=VALUE, found a line without `=` (its text is not shown: it may be a secret)"
            .to_string()
    }
}

fn unquote(value: &str) -> std::result::Result<String, String> {
    for quote in ['"', '\''] {
        if let Some(rest) = value.strip_prefix(quote) {
            return match rest.strip_suffix(quote) {
                Some(inner) if !rest.is_empty() => Ok(inner.to_string()),
                _ => Err(format!(
                    "the value opens a {quote} quote that is not closed at the end of the line"
                )),
            };
        }
    }
    Ok(value.to_string())
}

pub fn is_valid_key(key: &str) -> bool {
    let mut chars = key.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The environment of every engine process: the process environment, overlaid by the file (the
/// file wins, as in the original), with `DEFAULTS` added unless set.
pub fn merged_environment(
    process: &BTreeMap<String, String>,
    file: Option<&EnvFile>,
) -> BTreeMap<String, String> {
    let mut env = process.clone();
    for entry in file.map(|f| f.entries.as_slice()).unwrap_or_default() {
        env.insert(entry.key.clone(), entry.value.clone());
    }
    for (key, value) in DEFAULTS {
        env.entry((*key).to_string())
            .or_insert_with(|| (*value).to_string());
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terraform_variable_whose_name_says_secret_is_one() {
        let env: BTreeMap<String, String> = [
            ("TF_VAR_db_password", "Sup3rS3cretDbPw"),
            ("TF_VAR_api_token", "t0k3n-value"),
            ("TF_VAR_dsn", "postgres://app:hunter22@db/app"),
            ("TF_VAR_region", "eu-west-1"),
            ("TF_VAR_private_endpoint", "true"),
            ("AWS_SECRET_ACCESS_KEY", "not a module's"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
        let mut found = terraform_secrets(&env);
        found.sort();
        assert_eq!(
            found,
            [
                "Sup3rS3cretDbPw",
                "postgres://app:hunter22@db/app",
                "t0k3n-value"
            ]
        );
    }

    fn parse_ok(text: &str) -> Vec<(String, String)> {
        parse(Path::new("environment"), text)
            .unwrap()
            .entries
            .into_iter()
            .map(|e| (e.key, e.value))
            .collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn values_are_literal() {
        let text = "# comment\n\nA=1\nexport B = two words \nC=\"quoted # not a comment\"\nD='100%=x'\nE=a=b#c\nF=\nG=$HOME\n";
        assert_eq!(
            parse_ok(text),
            pairs(&[
                ("A", "1"),
                ("B", "two words"),
                ("C", "quoted # not a comment"),
                ("D", "100%=x"),
                ("E", "a=b#c"),
                ("F", ""),
                ("G", "$HOME"),
            ])
        );
    }

    #[test]
    fn a_lone_quote_is_unclosed() {
        let err = parse(Path::new("environment"), "A=\"\nB='x\n").unwrap_err();
        assert_eq!(err.problems().len(), 2);
        assert!(err.problems()[0].message.contains("not closed"));
    }

    #[test]
    fn a_long_file_s_duplicates_name_their_first_line() {
        let mut text: String = (0..100_000).map(|i| format!("K{i}=v\n")).collect();
        text.push_str("K99999=again\nK7=again\n");
        let err = parse(Path::new("environment"), &text).unwrap_err();
        let lines: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains(":100001: `K99999`: duplicate key (first set on line 100000)"));
        assert!(lines[1].contains(":100002: `K7`: duplicate key (first set on line 8)"));
    }

    #[test]
    fn every_bad_line_is_reported_with_its_number() {
        let err = parse(
            Path::new("config/pulumi/environment"),
            "A=1\nnot a pair\nA=2\n1X=3\nMARA_SECRET_DB: s3cr3t-value\nab+/s3cr3t==\n",
        )
        .unwrap_err();
        let lines: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        assert_eq!(lines.len(), 5, "{lines:?}");
        assert!(
            lines[0].starts_with("config/pulumi/environment:2: expected KEY=VALUE"),
            "{}",
            lines[0]
        );
        // Never a value: a line without `=` is named by its key at most.
        assert!(
            lines[3].starts_with(
                "config/pulumi/environment:5: expected KEY=VALUE, found `MARA_SECRET_DB:`"
            ),
            "{}",
            lines[3]
        );
        assert!(lines[4].contains("character 3 is `+`"), "{}", lines[4]);
        for line in &lines {
            assert!(
                !line.contains("s3cr3t") && !line.contains("not a pair"),
                "{line}"
            );
        }
        assert!(
            lines[1].starts_with(
                "config/pulumi/environment:3: `A`: duplicate key (first set on line 1)"
            )
        );
        assert!(
            lines[2].starts_with(
                "config/pulumi/environment:4: the name before `=` starts with a digit"
            ),
            "{}",
            lines[2]
        );
    }

    #[test]
    fn the_file_wins_and_defaults_fill_in() {
        let process = BTreeMap::from([
            ("A".to_string(), "process".to_string()),
            ("B".to_string(), "kept".to_string()),
        ]);
        let file = parse(Path::new("environment"), "A=file\n").unwrap();
        let env = merged_environment(&process, Some(&file));
        assert_eq!(env["A"], "file");
        assert_eq!(env["B"], "kept");
        assert_eq!(env["PULUMI_SKIP_UPDATE_CHECK"], "true");

        let process =
            BTreeMap::from([("PULUMI_SKIP_UPDATE_CHECK".to_string(), "false".to_string())]);
        assert_eq!(
            merged_environment(&process, None)["PULUMI_SKIP_UPDATE_CHECK"],
            "false"
        );
    }
}
