//! A project's `Pulumi.yaml`: its Pulumi name (what stack references use) and where it says its
//! stack configuration lives.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::{Error, Location, Problem, Result};
use crate::workspace::yaml;

/// The project file names Pulumi accepts, in the order it looks for them.
pub const PROJECT_FILES: &[&str] = &["Pulumi.yaml", "Pulumi.yml"];

/// The virtualenv `venv` (as a project file in `dir` names it) when it is not there — no
/// `bin/` in it — without `.`/`..` components.
pub fn missing_virtualenv(dir: &Path, venv: &str) -> Option<PathBuf> {
    (!dir.join(venv).join("bin").is_dir()).then(|| crate::files::normalize(&dir.join(venv)))
}

/// The keys of a project file mara reads.
#[derive(serde::Deserialize)]
struct Keys {
    name: Option<Value>,
    runtime: Option<Value>,
    #[serde(rename = "stackConfigDir")]
    stack_config_dir: Option<Value>,
    config: Option<Value>,
}

impl Keys {
    const NAMES: &[&str] = &["name", "runtime", "stackConfigDir", "config"];

    fn into_map(self) -> serde_json::Map<String, Value> {
        let values = [self.name, self.runtime, self.stack_config_dir, self.config];
        (Keys::NAMES.iter().zip(values))
            .filter_map(|(key, value)| Some((key.to_string(), value?)))
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulumiProject {
    pub file: PathBuf,
    pub name: String,
    /// `runtime:`, or its `name:` when it is a mapping; `None` without one (Pulumi runs no
    /// program then, but reads the project: docs/commands.md).
    pub runtime: Option<String>,
    /// `stackConfigDir`, or the legacy `config: <dir>` string, relative to the project directory.
    pub stack_config_dir: Option<String>,
    /// `runtime.options.virtualenv` (Python), relative to the project directory.
    pub virtualenv: Option<String>,
    /// The keys its `config:` mapping declares, each `namespace:key` (a key without one is the
    /// project's own, `<name>:key`, as Pulumi reads it).
    pub config_keys: Vec<String>,
}

impl PulumiProject {
    /// The project in each of `dirs` (`None`: no project file there), read on every core: a plan
    /// of thousands of projects is mostly this.
    pub fn load_each(dirs: &[PathBuf]) -> Vec<Option<Result<PulumiProject>>> {
        crate::parallel::map(dirs.len(), |i| PulumiProject::load_in(&dirs[i]))
    }

    /// The project in `dir`, `None` without a project file: each name is opened in turn, with
    /// nothing looked up first (a plan of thousands of projects counts every call).
    pub fn load_in(dir: &Path) -> Option<Result<PulumiProject>> {
        // A link to nothing is passed over for the next name, as Pulumi passes it over.
        let mut dangling = None;
        for name in PROJECT_FILES {
            let file = dir.join(name);
            match super::read_input(&file) {
                // Not there (nor its directory) — unless it is a symlink to nothing, which is
                // said.
                Err(error)
                    if matches!(
                        error.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                    ) && std::fs::symlink_metadata(&file).is_err() =>
                {
                    continue;
                }
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    let to = std::fs::read_link(&file).unwrap_or_default();
                    dangling.get_or_insert(Err(Error::config(
                        Problem::new(format!(
                            "it is a symbolic link to {}, which does not exist",
                            to.display()
                        ))
                        .in_file(&file)
                        .hint("point it at the project's file, or make it one"),
                    )));
                }
                read => return Some(PulumiProject::parse(&file, read)),
            }
        }
        dangling
    }

    pub fn load(file: &Path) -> Result<PulumiProject> {
        PulumiProject::parse(file, super::read_input(file))
    }

    fn parse(file: &Path, read: std::io::Result<String>) -> Result<PulumiProject> {
        let text = read.map_err(|e| Error::read(file, e))?;
        // Its first YAML document, as Pulumi reads it: what follows is not read at all.
        let text = yaml::first_document(&text);
        // The keys mara reads, the rest skipped as it is parsed (most of a plan of thousands
        // of projects); a file that does not read so is parsed whole, for the error it makes.
        let plain = || yaml::plain_keys(text, Keys::NAMES);
        let top = match plain().or_else(|| yaml::parse_keys::<Keys>(text).map(Keys::into_map)) {
            Some(top) => top,
            None => match yaml::parse_value(file, text)? {
                Value::Object(top) => top,
                _ => {
                    return Err(Error::config(
                        Problem::new("a Pulumi project file must be a YAML mapping").in_file(file),
                    ));
                }
            },
        };
        let name = name_of(file, text, &top)?;
        let runtime = runtime_of(file, &top)?;
        let virtualenv = top
            .get("runtime")
            .and_then(|r| r.get("options"))
            .and_then(|o| o.get("virtualenv"))
            .and_then(Value::as_str)
            .map(str::to_string);
        let stack_config_dir = match (top.get("stackConfigDir"), top.get("config")) {
            (Some(Value::String(dir)), _) | (None, Some(Value::String(dir))) => Some(dir.clone()),
            _ => None,
        };
        let config_keys = match top.get("config") {
            Some(Value::Object(declared)) => (declared.keys())
                .map(|key| match key.contains(':') {
                    true => key.clone(),
                    false => format!("{name}:{key}"),
                })
                .collect(),
            _ => Vec::new(),
        };
        Ok(PulumiProject {
            file: file.to_path_buf(),
            name,
            runtime,
            stack_config_dir,
            virtualenv,
            config_keys,
        })
    }
}

/// What a value that is not the text it should be is: "a number", "a list", ….
fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
        _ => "empty",
    }
}

/// The project's `name:`, which Pulumi needs (non-empty text); a key written for it (`nmae:`)
/// is looked for among all of the file's.
fn name_of(file: &Path, text: &str, top: &serde_json::Map<String, Value>) -> Result<String> {
    match top.get("name") {
        Some(Value::String(name)) if !name.trim().is_empty() => Ok(name.clone()),
        None | Some(Value::Null) => {
            let keys = match yaml::parse_value(file, text) {
                Ok(Value::Object(all)) => all.keys().cloned().collect(),
                _ => Vec::new(),
            };
            let hint = match crate::error::did_you_mean("name", keys.iter().map(String::as_str)) {
                Some(typo) if typo != "name" => {
                    format!("`{typo}:` is no key of Pulumi's: did you mean `name:`?")
                }
                _ => "add `name: <project-name>`".to_string(),
            };
            Err(Error::config(
                Problem::new("has no `name:`; Pulumi and stack references need the project's name")
                    .at(Location::file(file))
                    .hint(hint),
            ))
        }
        Some(other) => Err(Error::config(
            Problem::new(format!(
                "its `name:` is {}, where Pulumi needs the project's name (a string)",
                kind_of(other)
            ))
            .at(Location::file(file))
            .hint("write the name as text; quote one YAML reads otherwise (`name: \"123\"`)"),
        )),
    }
}

/// `runtime: python`, or `runtime:` with `name: python` under it; `None` without one. Pulumi
/// reads a project without a runtime (a refresh or destroy runs no program: it is the checks' to
/// refuse where one runs), and refuses one that is not text, as its project schema does.
fn runtime_of(file: &Path, top: &serde_json::Map<String, Value>) -> Result<Option<String>> {
    let runtime = match top.get("runtime") {
        Some(Value::Object(runtime)) => runtime.get("name"),
        runtime => runtime,
    };
    match runtime {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(runtime)) if !runtime.trim().is_empty() => Ok(Some(runtime.clone())),
        Some(other) => Err(Error::config(
            Problem::new(format!(
                "its `runtime:` is {}, where Pulumi needs the language the program is written in (a string)",
                kind_of(other)
            ))
            .at(Location::file(file))
            .hint("write it as text: `runtime: <language>` (yaml, nodejs, python, go, dotnet or java)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<PulumiProject> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("Pulumi.yaml");
        std::fs::write(&file, text).unwrap();
        PulumiProject::load(&file)
    }

    #[test]
    fn reads_name_runtime_and_config_dir() {
        let p = load("name: aws-vpc\nruntime:\n  name: python\n  options:\n    virtualenv: ../venv\nconfig: ../../../config/pulumi\n").unwrap();
        assert_eq!(p.name, "aws-vpc");
        assert_eq!(p.runtime.as_deref(), Some("python"));
        assert_eq!(p.virtualenv.as_deref(), Some("../venv"));
        assert_eq!(
            p.stack_config_dir.as_deref(),
            Some("../../../config/pulumi")
        );
        let p = load(
            "name: x\nruntime: yaml\nconfig:\n  region:\n    type: string\n  aws:profile: p\n",
        )
        .unwrap();
        assert_eq!(p.stack_config_dir, None);
        assert_eq!(p.config_keys, ["x:region", "aws:profile"]);
        let p = load("name: x\nruntime: yaml\nstackConfigDir: cfg\n").unwrap();
        assert_eq!(p.stack_config_dir.as_deref(), Some("cfg"));
    }

    #[test]
    fn a_missing_name_is_an_error() {
        let err = load("runtime: yaml\n").unwrap_err();
        assert!(err.to_string().contains("has no `name:`"), "{err}");
        let hint = |err: Error| err.problems()[0].hint.clone().unwrap_or_default();
        assert_eq!(hint(err), "add `name: <project-name>`");
        let err = load("nmae: x\nruntime: yaml\n").unwrap_err();
        assert_eq!(
            hint(err),
            "`nmae:` is no key of Pulumi's: did you mean `name:`?"
        );
        for (text, what) in [
            ("name: 123\n", "a number"),
            ("name: true\n", "a boolean"),
            ("name: [a]\n", "a list"),
            ("name:\n  a: b\n", "a mapping"),
            ("name: ''\n", "empty"),
        ] {
            let err = load(text).unwrap_err();
            assert!(
                err.to_string().contains(&format!("its `name:` is {what}")),
                "{text:?}: {err}"
            );
        }
    }

    /// A runtime is read written either way; without one there is none, which the checks refuse
    /// where a program runs; one that is not text is refused, as Pulumi refuses it.
    #[test]
    fn the_runtime_is_read_either_way() {
        for text in [
            "name: x\n",
            "name: x\nruntime:\n",
            "name: x\nruntime:\n  options:\n    virtualenv: v\n",
        ] {
            assert_eq!(load(text).unwrap().runtime, None, "{text:?}");
        }
        for (text, what) in [
            ("name: x\nruntime: ''\n", "empty"),
            ("name: x\nruntime: 3\n", "a number"),
            ("name: x\nruntime: [go]\n", "a list"),
            ("name: x\nruntime:\n  name: true\n", "a boolean"),
        ] {
            let err = load(text).unwrap_err();
            assert!(
                err.to_string()
                    .contains(&format!("its `runtime:` is {what}")),
                "{text:?}: {err}"
            );
        }
        let runtime = |text| load(text).unwrap().runtime.unwrap();
        assert_eq!(runtime("name: x\nruntime: {name: go}\n"), "go");
        assert_eq!(runtime("name: x\nruntime: go\n"), "go");
    }

    /// A link to nothing and UTF-16 text are said as what they are.
    #[test]
    fn a_file_mara_cannot_read_is_said_as_what_it_is() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("gone.yaml", dir.path().join("Pulumi.yaml")).unwrap();
        let found = PulumiProject::load_each(&[dir.path().to_path_buf()]);
        let err = found.into_iter().next().flatten().unwrap().unwrap_err();
        assert!(
            err.to_string()
                .contains("a symbolic link to gone.yaml, which does not exist"),
            "{err}"
        );
        // Beside a file of the next name, a link to nothing is passed over.
        std::fs::write(dir.path().join("Pulumi.yml"), "name: x\nruntime: go\n").unwrap();
        let found = PulumiProject::load_each(&[dir.path().to_path_buf()]);
        assert_eq!(found[0].as_ref().unwrap().as_ref().unwrap().name, "x");
        let file = dir.path().join("Pulumi.yml");
        let utf16: Vec<u8> = [0xFF, 0xFE]
            .into_iter()
            .chain("name: x\n".bytes().flat_map(|b| [b, 0]))
            .collect();
        std::fs::write(&file, utf16).unwrap();
        let err = PulumiProject::load(&file).unwrap_err();
        assert!(err.to_string().contains("UTF-16"), "{err}");
    }

    /// A file of several documents is read as Pulumi reads it: its first document.
    #[test]
    fn the_first_document_is_the_project() {
        let p = load("name: x\nruntime: yaml\n---\nname: y\n").unwrap();
        assert_eq!((p.name.as_str(), p.runtime.as_deref()), ("x", Some("yaml")));
        let p = load("---\nname: x\nruntime: yaml\n...\n---\nother: 1\n").unwrap();
        assert_eq!(p.name, "x");
        // An empty first document is no project, whatever follows.
        assert!(load("...\nname: x\nruntime: yaml\n").is_err());
        // What follows it is not read, as Pulumi does not read it; a mistake in the first is
        // said with its line.
        assert!(load("name: x\nruntime: yaml\n---\na: [\n").is_ok());
        let err = load("name: x\nruntime: [yaml\n---\na: 1\n").unwrap_err();
        assert!(err.to_string().contains("Pulumi.yaml:2"), "{err}");
    }

    /// Read for its keys alone, a file is refused for what the whole parse refuses, anywhere.
    #[test]
    fn the_keys_are_read_as_the_whole_file_is() {
        let whole = |text: &str| {
            let value = yaml::parse_value(Path::new("Pulumi.yaml"), yaml::first_document(text));
            match value {
                Ok(Value::Object(_)) => Ok(()),
                Ok(_) => Err("not a mapping".to_string()),
                Err(e) => Err(e.to_string()),
            }
        };
        for text in [
            "name: x\nruntime: yaml\noutputs:\n  a: 1\n  a: 2\n",
            "name: x\nruntime: yaml\nname: y\n",
            "name: x\nruntime: yaml\n---\nname: y\n",
            "name: x\nruntime: yaml\n---\nname: [\n",
            "- name: x\n",
            "",
            "name: x\nruntime: {name: python, options: {virtualenv: v}}\noutputs: [1, 2]\n",
            "name: &n x\nruntime: yaml\nother: *n\n",
        ] {
            let keys = load(text);
            match whole(text) {
                Ok(()) => assert!(keys.is_ok(), "{text:?}: {keys:?}"),
                Err(why) => assert!(
                    keys.is_err(),
                    "{text:?} is refused whole ({why}), not alone"
                ),
            }
        }
        let p = load("name: x\nruntime: {name: python, options: {virtualenv: v}}\n").unwrap();
        assert_eq!(
            (p.runtime.as_deref(), p.virtualenv.as_deref()),
            (Some("python"), Some("v"))
        );
        let err = load("- name: x\n").unwrap_err();
        assert!(err.to_string().contains("must be a YAML mapping"), "{err}");
    }

    /// What the plain reading finds is what the parser finds, for any lines made of what a
    /// `Pulumi.yaml` holds and of what YAML reads otherwise (numbers, booleans, quotes, anchors,
    /// flow collections, tabs, continuation lines, several documents).
    #[test]
    fn the_plain_reading_finds_what_the_parser_finds() {
        use proptest::prelude::*;
        let keys = || {
            prop::sample::select(vec![
                "name",
                "runtime",
                "stackConfigDir",
                "config",
                "description",
                "outputs",
                "k",
                "a-b",
                "_x",
                "true",
                "y",
                "No",
                "1a",
                "null",
            ])
        };
        let words = || {
            prop::sample::select(vec![
                "p1", "yaml", "python", "/abs/dir", "dir/sub", "a b", "a  b", "x.y", "a+b", "_",
            ])
        };
        let others = prop::sample::select(vec![
            "123", "1e5", "true", "True", "yes", "NULL", "~", "-x", ".inf", "\"q\"", "'q'", "a: b",
            "a #c", "&x", "*x", "!t x", "[a]", "{a: b}", "a,b", "|", ">", "0o7", "Off", "nan",
        ]);
        let form = |(form, k, v): (usize, &str, &str)| match form {
            0..=2 => format!("{k}: {v}"),
            3 => format!("{k}:"),
            4 => format!("  {k}: {v}"),
            5 => format!("    {k}: {v}"),
            6 => format!("  - {v}"),
            7 => "# a comment".to_string(),
            8 => String::new(),
            9 => "---".to_string(),
            10 => format!("\t{k}: {v}"),
            11 => format!("{k}: {v} "),
            12 => format!("  {k}:"),
            13 => "# a control character \u{1} in a comment".to_string(),
            14 => format!("{}{k}: {v}", "k".repeat(1100)),
            15 => "# a comment\rname: hidden".to_string(),
            _ => format!("{k}: {v} # é"),
        };
        // Mostly lines of the plain kind, some of anything.
        let line = prop_oneof![
            4 => (0..9usize, keys(), words()).prop_map(form),
            1 => (0..17usize, keys(), prop_oneof![words(), others]).prop_map(form),
        ];
        let texts = prop::collection::vec(line, 1..8).prop_map(|lines| lines.join("\n") + "\n");
        let config = proptest::test_runner::Config::with_cases(2000);
        let mut runner = proptest::test_runner::TestRunner::new(config);
        let read_plainly = std::cell::Cell::new(0);
        runner
            .run(&texts, |text| {
                if let Some(plain) = yaml::plain_keys(&text, Keys::NAMES) {
                    read_plainly.set(read_plainly.get() + 1);
                    let parsed = yaml::parse_keys::<Keys>(&text).map(Keys::into_map);
                    prop_assert_eq!(Some(plain), parsed, "{:?}", text);
                }
                Ok(())
            })
            .unwrap();
        // Enough of the texts were read plainly for the comparison to say something.
        assert!(read_plainly.get() >= 100, "{}", read_plainly.get());
        let mut read_plainly = 0;
        for text in [
            "name: p00601\nruntime: yaml\noutputs:\n  name: p00601\n",
            "# the network\nname: aws-vpc\nruntime: python\ndescription: the VPC\n",
            "name: app\nruntime: nodejs\ntemplate:\n  - one\n  - two\n",
        ] {
            let plain = yaml::plain_keys(text, Keys::NAMES);
            assert!(plain.is_some(), "{text:?} is read plainly");
            assert_eq!(plain, yaml::parse_keys::<Keys>(text).map(Keys::into_map));
            read_plainly += 1;
        }
        assert_eq!(read_plainly, 3);
    }
}
