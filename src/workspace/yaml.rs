//! YAML reading for Pulumi's files, through serde-saphyr (panic-free, errors with line and column;
//! serde_yaml is deprecated upstream). Every error becomes a `Problem` naming the file and line.

use std::path::Path;

use serde::de::DeserializeOwned;

use crate::error::{Error, Location, Problem, Result};

/// Parses `text` (the content of `path`) into `T`.
pub fn parse<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T> {
    serde_saphyr::from_str(text).map_err(|e| Error::config(problem(path, &e)))
}

/// Parses `text` into a generic value; an empty document is `null`.
pub fn parse_value(path: &Path, text: &str) -> Result<serde_json::Value> {
    if text.trim().is_empty() {
        return Ok(serde_json::Value::Null);
    }
    parse::<Option<serde_json::Value>>(path, text).map(Option::unwrap_or_default)
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

/// The error's message without serde-saphyr's source snippet and location suffix (mara prints
/// the location itself, in the same `file:line:` form as every other error).
fn plain_message(error: &serde_saphyr::Error) -> String {
    let rendered = error.without_snippet().to_string();
    let first = rendered.lines().next().unwrap_or_default().trim();
    let message = match first.rfind(" at line ") {
        Some(at) => &first[..at],
        None => first,
    };
    message.trim_end_matches(':').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

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
