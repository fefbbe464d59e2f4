//! A project's `Pulumi.yaml`: its Pulumi name (what stack references use) and where it says its
//! stack configuration lives.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::{Error, Location, Problem, Result};
use crate::workspace::yaml;

/// The project file names Pulumi accepts, in the order it looks for them.
pub const PROJECT_FILES: &[&str] = &["Pulumi.yaml", "Pulumi.yml"];

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
                // Not there — unless it is a symlink to nothing, which is said.
                Err(error)
                    if error.kind() == std::io::ErrorKind::NotFound
                        && std::fs::symlink_metadata(&file).is_err() =>
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
        let document = yaml::parse_value(file, &text)?;
        let Value::Object(top) = document else {
            return Err(Error::config(
                Problem::new("a Pulumi project file must be a YAML mapping").in_file(file),
            ));
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
}
