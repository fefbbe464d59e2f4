//! The workspace (docs/formats.md): finding its root, its settings, and the paths of its files.
//!
//! The root is the nearest ancestor of the starting directory that holds `mara.toml`; with none,
//! the starting directory itself, with every setting at its default. Nothing here writes.

pub mod budgets;
pub mod config_path;
pub mod envfile;
pub mod identity;
pub mod kubeconfig;
pub mod ledger_url;
pub mod mara_toml;
pub mod policy_settings;
pub mod pulumi_project;
pub mod stack;
pub mod stack_config;
pub mod survey;
pub mod yaml;
pub mod yaml_edit;
pub mod yaml_nodes;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
pub use mara_toml::WorkspaceSettings;
use stack::StackName;

pub const MARA_TOML: &str = "mara.toml";

/// The nearest ancestor of `start` (itself included) that holds `mara.toml`.
pub fn find_root(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        // Whatever is there: a directory or a FIFO named mara.toml is an error, not ignored.
        .find(|dir| std::fs::symlink_metadata(dir.join(MARA_TOML)).is_ok())
        .map(Path::to_path_buf)
}

#[derive(Debug, Clone)]
pub struct Workspace {
    pub root: PathBuf,
    /// The `mara.toml` the settings came from, if any.
    pub settings_file: Option<PathBuf>,
    pub settings: WorkspaceSettings,
}

impl Workspace {
    /// Finds the workspace that contains `start` and reads its settings.
    pub fn discover(start: &Path) -> Result<Workspace> {
        let start = std::path::absolute(start).map_err(|e| Error::read(start, e))?;
        if !start.is_dir() {
            return Err(Error::read(
                &start,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such directory"),
            ));
        }
        match Workspace::discover_leniently(&start) {
            (_, Some(error)) => Err(error),
            (workspace, None) => Ok(workspace),
        }
    }

    /// As `discover`, but a `mara.toml` that cannot be read leaves every setting at its default,
    /// its error returned beside the workspace (`validate` reports it and checks the rest).
    pub fn discover_leniently(start: &Path) -> (Workspace, Option<Error>) {
        let Some(root) = find_root(start) else {
            let workspace = Workspace {
                root: start.to_path_buf(),
                settings_file: None,
                settings: WorkspaceSettings::default(),
            };
            return (workspace, None);
        };
        let file = root.join(MARA_TOML);
        tracing::debug!(root = %root.display(), "workspace settings from mara.toml");
        let parsed = read_input(&file)
            .map_err(|e| Error::read(&file, e))
            .and_then(|text| mara_toml::parse(&file, &text));
        let (settings, error) = match parsed {
            Ok(settings) => (settings, None),
            Err(error) => (WorkspaceSettings::default(), Some(error)),
        };
        let workspace = Workspace {
            root,
            settings_file: Some(file),
            settings,
        };
        (workspace, error)
    }

    /// Whether this is a mara workspace: its root holds `mara.toml`, the stack configuration's
    /// directory (`config/pulumi/`) or the providers' (`providers/`). The root is found as
    /// always (the nearest `mara.toml` above, else the starting directory); one holding none of
    /// them is not a workspace, and a command that needs one says so (`require`).
    pub fn is_recognized(&self) -> bool {
        self.settings_file.is_some() || self.config_dir().is_dir() || self.providers_dir().is_dir()
    }

    /// This workspace, when it is one (`is_recognized`); else the one error that says where
    /// mara looked and how to make one (docs/commands.md, "Outside a workspace"): exit 3.
    pub fn require(self) -> Result<Workspace> {
        if self.is_recognized() {
            return Ok(self);
        }
        let problem = crate::error::Problem::new(format!(
            "not a mara workspace: {} (no mara.toml here or above; no {}/ or {}/ here)",
            self.root.display(),
            self.settings.config_dir,
            self.settings.providers_dir,
        ))
        .hint("`mara init` makes one here (in a repository of projects, it finds them); or run mara in the workspace, or name it with `-C DIR`");
        Err(Error::config(problem))
    }

    /// Which workspace this is, as every copy of it says it (`identity`): mara.toml's `id`,
    /// else its git remote and path inside the repository, else its directory.
    pub fn identity(&self) -> std::result::Result<identity::Identity, String> {
        identity::identify(&self.root, self.settings.id.as_deref())
    }

    /// `relative` (a setting of mara.toml) under the root, without `.` components: paths in logs
    /// and messages read `/w/kubernetes/logstore`, not `/w/./kubernetes/logstore`.
    fn under_root(&self, relative: &str) -> PathBuf {
        let mut path = self.root.clone();
        path.extend(
            Path::new(relative)
                .components()
                .filter(|c| !matches!(c, std::path::Component::CurDir)),
        );
        path
    }

    pub fn projects_dir(&self) -> PathBuf {
        self.under_root(&self.settings.projects_dir)
    }

    pub fn project_dir(&self, project_path: &str) -> PathBuf {
        self.projects_dir().join(project_path)
    }

    pub fn config_dir(&self) -> PathBuf {
        self.under_root(&self.settings.config_dir)
    }

    pub fn env_file(&self) -> PathBuf {
        self.config_dir().join("environment")
    }

    pub fn stack_config_file(&self, stack: &StackName) -> PathBuf {
        self.config_dir().join(format!("Pulumi.{stack}.yaml"))
    }

    pub fn providers_dir(&self) -> PathBuf {
        self.under_root(&self.settings.providers_dir)
    }

    pub fn state_dir(&self) -> PathBuf {
        self.under_root(&self.settings.state_dir)
    }

    /// Where an `engine = "command"` project's `up` leaves its outputs (`MARA_OUTPUTS`):
    /// `<state_dir>/outputs/<stack>/<project path>.json`.
    pub fn command_outputs_file(&self, stack: &str, project: &str) -> PathBuf {
        self.state_dir()
            .join("outputs")
            .join(stack)
            .join(format!("{project}.json"))
    }

    /// What `terraform init` last ran on in a module (`<state_dir>/init/<project path>.stamp`,
    /// so that `network` and `network/edge` do not collide): the same for every stack, as a
    /// module's working directory is.
    pub fn init_stamp_file(&self, project: &str) -> PathBuf {
        self.state_dir()
            .join("init")
            .join(format!("{project}.stamp"))
    }

    /// The kubeconfig mara writes for a stack: `<state_dir>/kube/<stack>.yaml`.
    pub fn kubeconfig_file(&self, stack: &StackName) -> PathBuf {
        self.state_dir().join("kube").join(format!("{stack}.yaml"))
    }

    /// The secrets project keeps its own stack configuration, beside its `Pulumi.yaml`.
    pub fn secrets_config_file(&self, stack: &StackName) -> PathBuf {
        self.project_dir(&self.settings.secrets_project)
            .join(format!("Pulumi.{stack}.yaml"))
    }

    /// `path` relative to the workspace root when it lies inside it, for shorter messages.
    pub fn display<'a>(&self, path: &'a Path) -> std::borrow::Cow<'a, Path> {
        match path.strip_prefix(&self.root) {
            Ok(relative) if relative.as_os_str().is_empty() => Path::new(".").into(),
            Ok(relative) => relative.to_path_buf().into(),
            Err(_) => path.into(),
        }
    }
}

/// Reads one of mara's input files (configuration, provider, project files). Every read is
/// logged at debug level under the target `mara::reads`, so that the tests can count them
/// (`MARA_LOG=mara::reads=debug`): a shared file read once per run, not once per project.
pub fn read_input(path: &Path) -> std::io::Result<String> {
    tracing::debug!(target: "mara::reads", file = %path.display(), "read");
    // A FIFO is not waited on, a device (a symlink to /dev/zero) not read until memory runs
    // out: `files::read_regular` refuses both.
    let bytes =
        crate::files::read_regular(path, INPUT_LIMIT).map_err(|error| match error.kind() {
            std::io::ErrorKind::FileTooLarge => std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "it is larger than {} MiB, more than any input of mara's should be",
                    INPUT_LIMIT >> 20
                ),
            ),
            _ => error,
        })?;
    text_of(bytes).map_err(|bad| std::io::Error::new(std::io::ErrorKind::InvalidData, bad))
}

pub use crate::error::NotText;

/// An input's bytes as text, the same way for every file: a UTF-8 byte-order mark is dropped;
/// bytes that are not UTF-8 and line endings that are a lone CR are errors that say where.
fn text_of(mut bytes: Vec<u8>) -> std::result::Result<String, NotText> {
    if bytes.starts_with(&[0xEF, 0xBB, 0xBF]) {
        bytes.drain(..3);
    }
    // What Windows PowerShell's `>` writes.
    if bytes.starts_with(&[0xFF, 0xFE]) || bytes.starts_with(&[0xFE, 0xFF]) {
        return Err(NotText {
            line: 1,
            column: None,
            message: "it is UTF-16 text, where mara reads UTF-8 (save it as UTF-8)".to_string(),
        });
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
        let column = valid.len() - valid.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1) + 1;
        NotText {
            line,
            column: Some(column),
            message: format!(
                "column {column} holds a byte that is not UTF-8: mara reads its files as UTF-8 text (save it as UTF-8)"
            ),
        }
    })?;
    let bytes = text.as_bytes();
    if let Some(at) =
        (0..bytes.len()).find(|&i| bytes[i] == b'\r' && bytes.get(i + 1) != Some(&b'\n'))
    {
        let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        return Err(NotText {
            line,
            column: None,
            message: "the line ends with a lone carriage return (CR): save the file with LF or CRLF line endings".into(),
        });
    }
    Ok(text)
}

/// The largest input file mara reads (docs/formats.md).
pub const INPUT_LIMIT: u64 = 16 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_must_be_a_regular_file_of_bounded_size() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_input(dir.path()).unwrap_err();
        assert!(err.to_string().contains("a directory"), "{err}");
        let fifo = dir.path().join("fifo");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let err = read_input(&fifo).unwrap_err();
        assert!(err.to_string().contains("FIFO"), "{err}");
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert!(
            read_input(&zero)
                .unwrap_err()
                .to_string()
                .contains("device")
        );
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'#'; INPUT_LIMIT as usize + 1]).unwrap();
        assert!(
            read_input(&big)
                .unwrap_err()
                .to_string()
                .contains("larger than 16 MiB")
        );
    }

    #[test]
    fn every_input_is_read_as_text_the_same_way() {
        assert_eq!(
            text_of(b"\xEF\xBB\xBFa=1\r\nb=2\n".to_vec()).unwrap(),
            "a=1\r\nb=2\n"
        );
        let err = text_of(b"a=1\nb=\xFF\n".to_vec()).unwrap_err();
        assert_eq!((err.line, err.column), (2, Some(3)), "{err}");
        let err = text_of(b"a=1\rb=2\r".to_vec()).unwrap_err();
        assert_eq!((err.line, err.column), (1, None));
        assert!(err.message.contains("lone carriage return"), "{err}");
        // Through `Error::read`, it is a problem located in its file.
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, err);
        let error = crate::error::Error::read(Path::new("env"), io);
        assert_eq!(error.exit_code(), 3);
        assert!(
            error.problems()[0]
                .to_string()
                .starts_with("env:1: the line ends"),
            "{:?}",
            error.problems()
        );
    }

    #[test]
    fn a_mara_toml_that_is_not_a_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(MARA_TOML)).unwrap();
        let err = Workspace::discover(dir.path()).unwrap_err();
        let cause = std::error::Error::source(&err).unwrap().to_string();
        assert!(err.to_string().contains("mara.toml"), "{err}");
        assert!(cause.contains("a directory"), "{cause}");
    }

    #[test]
    fn the_nearest_mara_toml_is_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join(MARA_TOML), "projects_dir = \"pulumi/python\"\n").unwrap();
        let deep = root.join("pulumi/python/kubernetes/logstore");
        std::fs::create_dir_all(&deep).unwrap();
        let ws = Workspace::discover(&deep).unwrap();
        assert_eq!(ws.root, root);
        assert_eq!(ws.project_dir("kubernetes/logstore"), deep);
        assert_eq!(ws.env_file(), root.join("config/pulumi/environment"));
    }

    #[test]
    fn without_mara_toml_the_start_is_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::discover(dir.path()).unwrap();
        assert!(ws.settings_file.is_none());
        assert_eq!(ws.settings, WorkspaceSettings::default());
        let stack = StackName::parse("dev").unwrap();
        assert_eq!(
            ws.display(&ws.stack_config_file(&stack)),
            Path::new("config/pulumi/Pulumi.dev.yaml")
        );
        assert_eq!(
            ws.display(&ws.kubeconfig_file(&stack)),
            Path::new(".mara/kube/dev.yaml")
        );
    }
}
