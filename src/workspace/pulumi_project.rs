//! A project's `Pulumi.yaml`: its Pulumi name (what stack references use) and where it says its
//! stack configuration lives.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::{Error, Location, Problem, Result};
use crate::workspace::yaml;

/// The project file names Pulumi accepts, in the order it looks for them.
pub const PROJECT_FILES: &[&str] = &["Pulumi.yaml", "Pulumi.yml"];

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
    fn into_map(self) -> serde_json::Map<String, Value> {
        [
            ("name", self.name),
            ("runtime", self.runtime),
            ("stackConfigDir", self.stack_config_dir),
            ("config", self.config),
        ]
        .into_iter()
        .filter_map(|(key, value)| Some((key.to_string(), value?)))
        .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulumiProject {
    pub file: PathBuf,
    pub name: String,
    pub runtime: Option<String>,
    /// `stackConfigDir`, or the legacy `config: <dir>` string, relative to the project directory.
    pub stack_config_dir: Option<String>,
    /// `runtime.options.virtualenv` (Python), relative to the project directory.
    pub virtualenv: Option<String>,
}

impl PulumiProject {
    /// The project file in `dir`, if there is one — whatever it is: one that is no regular file
    /// (a FIFO, a directory) is found, and `load` says what is wrong with it, rather than
    /// "no Pulumi.yaml".
    pub fn find(dir: &Path) -> Option<PathBuf> {
        PROJECT_FILES
            .iter()
            .map(|name| dir.join(name))
            .find(|path| std::fs::symlink_metadata(path).is_ok())
    }

    /// The project in each of `dirs` (`None`: no project file there), read on every core: a plan
    /// of thousands of projects is mostly this.
    pub fn load_each(dirs: &[PathBuf]) -> Vec<Option<Result<PulumiProject>>> {
        crate::parallel::map(dirs.len(), |i| PulumiProject::load_in(&dirs[i]))
    }

    /// The project in `dir`, `None` without a project file: each name is opened in turn, with
    /// nothing looked up first (a plan of thousands of projects counts every call).
    fn load_in(dir: &Path) -> Option<Result<PulumiProject>> {
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
                read => return Some(PulumiProject::parse(&file, read)),
            }
        }
        None
    }

    pub fn load(file: &Path) -> Result<PulumiProject> {
        PulumiProject::parse(file, super::read_input(file))
    }

    fn parse(file: &Path, read: std::io::Result<String>) -> Result<PulumiProject> {
        let text = read.map_err(|e| Error::read(file, e))?;
        // The keys mara reads, the rest skipped as it is parsed (most of a plan of thousands
        // of projects); a file that does not read so is parsed whole, for the error it makes.
        let top = match yaml::parse_keys::<Keys>(&text) {
            Some(keys) => keys.into_map(),
            None => match yaml::parse_value(file, &text)? {
                Value::Object(top) => top,
                _ => {
                    return Err(Error::config(
                        Problem::new("a Pulumi project file must be a YAML mapping").in_file(file),
                    ));
                }
            },
        };
        let name = match top.get("name") {
            Some(Value::String(name)) if !name.trim().is_empty() => name.clone(),
            _ => {
                return Err(Error::config(
                    Problem::new("has no `name:`; stack references need the project's name")
                        .at(Location::file(file))
                        .hint("add `name: <project-name>`"),
                ));
            }
        };
        let runtime = match top.get("runtime") {
            Some(Value::String(runtime)) => Some(runtime.clone()),
            Some(Value::Object(runtime)) => runtime
                .get("name")
                .and_then(Value::as_str)
                .map(str::to_string),
            _ => None,
        };
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
        Ok(PulumiProject {
            file: file.to_path_buf(),
            name,
            runtime,
            stack_config_dir,
            virtualenv,
        })
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
        let p = load("name: x\nruntime: yaml\nconfig:\n  region:\n    type: string\n").unwrap();
        assert_eq!(p.stack_config_dir, None);
        let p = load("name: x\nruntime: yaml\nstackConfigDir: cfg\n").unwrap();
        assert_eq!(p.stack_config_dir.as_deref(), Some("cfg"));
    }

    #[test]
    fn a_missing_name_is_an_error() {
        let err = load("runtime: yaml\n").unwrap_err();
        assert!(err.to_string().contains("has no `name:`"), "{err}");
    }

    /// Read for its keys alone, a file is refused for what the whole parse refuses, anywhere.
    #[test]
    fn the_keys_are_read_as_the_whole_file_is() {
        let whole = |text: &str| {
            let value = yaml::parse_value(Path::new("Pulumi.yaml"), text);
            match value {
                Ok(Value::Object(_)) => Ok(()),
                Ok(_) => Err("not a mapping".to_string()),
                Err(e) => Err(e.to_string()),
            }
        };
        for text in [
            "name: x\noutputs:\n  a: 1\n  a: 2\n",
            "name: x\nname: y\n",
            "name: x\n---\nname: y\n",
            "- name: x\n",
            "",
            "name: x\nruntime: {name: python, options: {virtualenv: v}}\noutputs: [1, 2]\n",
            "name: &n x\nother: *n\n",
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
}
