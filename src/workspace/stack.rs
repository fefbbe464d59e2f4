//! Stack names (docs/formats.md, "Stack names"): one name for every project, where it comes from, and its validation.

use std::collections::BTreeMap;
use std::fmt;

use crate::error::{Error, Location, Problem, Result};
use crate::workspace::envfile::EnvFile;

/// A valid Pulumi stack name: `[A-Za-z0-9_.-]+`, kept exactly as given (never lower-cased).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StackName(String);

impl StackName {
    pub fn parse(name: &str) -> std::result::Result<StackName, String> {
        let shown = crate::error::quoted(name);
        if name.is_empty() {
            Err("a stack name cannot be empty".into())
        } else if name.chars().count() > 100 {
            // Pulumi's own limit; it also names files, which have one.
            Err(format!(
                "{shown} is not a valid stack name: it is {} characters long, and a stack name has at most 100",
                name.chars().count()
            ))
        } else if name == "." || name == ".." {
            // It names files (`Pulumi.<stack>.yaml`, `.mara/kube/<stack>.yaml`): `..` would
            // lead out of their directory.
            Err(format!(
                "`{name}` is not a valid stack name: it must contain a letter, digit, `_` or `-`"
            ))
        } else if name.starts_with('-') {
            // It is an argument of the engines' commands (`terraform workspace new <stack>`),
            // where a leading `-` reads as a flag.
            Err(format!(
                "`{name}` is not a valid stack name: it cannot start with `-`"
            ))
        } else if let Some(bad) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
        {
            Err(format!(
                "{shown} is not a valid stack name: `{bad}` is not allowed (use letters, digits, `_`, `.` and `-`)"
            ))
        } else {
            Ok(StackName(name.to_string()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for StackName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a stack name came from, for messages that explain a conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackSource {
    Flag,
    MaraStackVariable,
    EnvironmentFile,
    ProcessEnvironment,
}

impl fmt::Display for StackSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StackSource::Flag => "--stack",
            StackSource::MaraStackVariable => "MARA_STACK",
            StackSource::EnvironmentFile => "PULUMI_STACK in the environment file",
            StackSource::ProcessEnvironment => "PULUMI_STACK in the environment",
        })
    }
}

/// The stack of this invocation and where its name came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedStack {
    pub name: StackName,
    pub source: StackSource,
}

/// `--stack`, else `MARA_STACK`, else `PULUMI_STACK` (environment file, then process environment).
///
/// `Ok(None)` when no source names one. The environment file's `PULUMI_STACK` is the default: a
/// stack chosen on the command line (or by `MARA_STACK`) wins, as Pulumi users expect, and mara
/// passes it to every engine explicitly (`PULUMI_STACK` in their environment included), so the
/// file's value never leaks into a run.
pub fn resolve(
    flag: Option<&str>,
    process_env: &BTreeMap<String, String>,
    env_file: Option<&EnvFile>,
) -> Result<Option<ResolvedStack>> {
    let file_entry = env_file.and_then(|f| f.get("PULUMI_STACK").map(|entry| (f, entry)));
    let explicit = flag
        .map(|name| (name.to_string(), StackSource::Flag))
        .or_else(|| {
            process_env
                .get("MARA_STACK")
                .filter(|v| !v.is_empty())
                .map(|v| (v.clone(), StackSource::MaraStackVariable))
        });
    let (raw, source) = match (explicit, file_entry) {
        (Some(explicit), _) => explicit,
        (None, Some((_, entry))) => (entry.value.clone(), StackSource::EnvironmentFile),
        (None, None) => match process_env.get("PULUMI_STACK").filter(|v| !v.is_empty()) {
            Some(name) => (name.clone(), StackSource::ProcessEnvironment),
            None => return Ok(None),
        },
    };
    let name = StackName::parse(&raw).map_err(|message| {
        let problem = Problem::new(message).subject(source.to_string());
        // A flag is a usage error (2); a name from a file or a variable, configuration (3).
        match (source, file_entry) {
            (StackSource::EnvironmentFile, Some((file, entry))) => {
                Error::config(problem.at(Location::line(&file.path, entry.line)))
            }
            (StackSource::Flag, _) => Error::usage(problem),
            _ => Error::config(problem),
        }
    })?;
    Ok(Some(ResolvedStack { name, source }))
}

/// The stack whose configuration `config_dir` holds (`Pulumi.<stack>.yaml`) and whose name is
/// spelt like `name`'s, when `name` has none: `-s dve` is most likely `dev`.
pub fn near_stack(config_dir: &std::path::Path, name: &str) -> Option<String> {
    let Ok(entries) = std::fs::read_dir(config_dir) else {
        return None;
    };
    let names: Vec<String> = (entries.flatten())
        .filter_map(|e| {
            let file = e.file_name().to_string_lossy().into_owned();
            let stack = file
                .strip_prefix("Pulumi.")?
                .strip_suffix(".yaml")?
                .to_string();
            (StackName::parse(&stack).is_ok() && stack != name).then_some(stack)
        })
        .collect();
    // Stack names are short (`dev`, `qa`): a slip of a key or two, transpositions counted as
    // one (`dve`), is what is near.
    let most = if name.chars().count() <= 5 { 1 } else { 2 };
    (names.into_iter())
        .map(|stack| (strsim::osa_distance(name, &stack), stack))
        .filter(|(distance, _)| *distance <= most)
        .min()
        .map(|(_, stack)| stack)
}

/// The error for a command that needs a stack when no source names one.
pub fn missing_stack_problem(env_file_path: &std::path::Path) -> Problem {
    Problem::new("no stack name given").hint(format!(
        "pass --stack NAME, set MARA_STACK, or put PULUMI_STACK=NAME in {}",
        env_file_path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::envfile;
    use std::path::Path;

    fn file(text: &str) -> EnvFile {
        envfile::parse(Path::new("config/pulumi/environment"), text).unwrap()
    }

    #[test]
    fn names_are_validated_not_lowercased() {
        assert_eq!(
            StackName::parse("Dev.eu-1_a").unwrap().as_str(),
            "Dev.eu-1_a"
        );
        assert!(
            StackName::parse("dev/prod")
                .unwrap_err()
                .contains("`/` is not allowed")
        );
        assert!(StackName::parse("").is_err());
        assert!(StackName::parse(".").is_err());
        assert!(
            StackName::parse("..")
                .unwrap_err()
                .contains("must contain a letter")
        );
        assert!(StackName::parse("...").is_ok(), "a file name of its own");
        assert_eq!(
            StackName::parse("-or-create").unwrap_err(),
            "`-or-create` is not a valid stack name: it cannot start with `-`"
        );
        assert!(StackName::parse("eu-1").is_ok());
    }

    #[test]
    fn precedence_is_flag_then_mara_stack_then_file_then_process() {
        let empty = BTreeMap::new();
        let env = BTreeMap::from([("PULUMI_STACK".to_string(), "proc".to_string())]);
        assert_eq!(resolve(None, &empty, None).unwrap(), None);
        assert_eq!(
            resolve(None, &env, None).unwrap().unwrap().source,
            StackSource::ProcessEnvironment
        );
        let f = file("PULUMI_STACK=dev\n");
        let r = resolve(None, &env, Some(&f)).unwrap().unwrap();
        assert_eq!(
            (r.name.as_str(), r.source),
            ("dev", StackSource::EnvironmentFile)
        );
        let r = resolve(Some("dev"), &env, Some(&f)).unwrap().unwrap();
        assert_eq!(r.source, StackSource::Flag);
        let mara = BTreeMap::from([("MARA_STACK".to_string(), "ci".to_string())]);
        let r = resolve(None, &mara, None).unwrap().unwrap();
        assert_eq!(
            (r.name.as_str(), r.source),
            ("ci", StackSource::MaraStackVariable)
        );
    }

    #[test]
    fn the_command_line_wins_over_the_file() {
        let f = file("# x\nPULUMI_STACK=dev\n");
        let r = resolve(Some("prod"), &BTreeMap::new(), Some(&f))
            .unwrap()
            .unwrap();
        assert_eq!((r.name.as_str(), r.source), ("prod", StackSource::Flag));
        let mara = BTreeMap::from([("MARA_STACK".to_string(), "ci".to_string())]);
        let r = resolve(None, &mara, Some(&f)).unwrap().unwrap();
        assert_eq!(
            (r.name.as_str(), r.source),
            ("ci", StackSource::MaraStackVariable)
        );
    }
}

#[cfg(test)]
mod near_tests {
    #[test]
    fn a_new_stack_spelt_like_one_there_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("Pulumi.dev.yaml"), "config: {}\n").unwrap();
        std::fs::write(dir.path().join("environment"), "").unwrap();
        assert_eq!(super::near_stack(dir.path(), "dve").as_deref(), Some("dev"));
        assert_eq!(super::near_stack(dir.path(), "production"), None);
    }
}
