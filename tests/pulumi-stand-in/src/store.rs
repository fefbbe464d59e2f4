//! Where the DIY backend's objects live, as the gocloud blob bucket under Pulumi's DIY backend
//! holds them: a tree of files under a directory (`file://`, [`Files`]) or the rows of one
//! PostgreSQL table (`postgres://`, `crate::postgres::Table`). An object is addressed by its key,
//! its path relative to the backend's root with `/` between the parts
//! (`.pulumi/stacks/<project>/<stack>.json`); the DIY logic in `backend.rs` is the same on both.

use std::path::{Path, PathBuf};

use crate::Failure;

/// A bucket of objects by key.
pub trait Store {
    /// The object's bytes; `None` when there is none.
    fn read(&self, key: &str) -> Result<Option<Vec<u8>>, Failure>;
    /// Writes (replaces) the object.
    fn write(&self, key: &str, data: &[u8]) -> Result<(), Failure>;
    /// Whether the object is there.
    fn exists(&self, key: &str) -> Result<bool, Failure>;
    /// Deletes the object; failing when it cannot (a missing one included).
    fn delete(&self, key: &str) -> Result<(), Failure>;
    /// Copies an object to another key, as the DIY backend backs a checkpoint up.
    fn copy(&self, from: &str, to: &str) -> Result<(), Failure>;
    /// Moves an object to another key (`stack rm` keeps the checkpoint as `.bak`).
    fn rename(&self, from: &str, to: &str) -> Result<(), Failure>;
    /// The keys of the objects directly in `dir` (a key without its trailing `/`), sorted.
    fn list(&self, dir: &str) -> Result<Vec<String>, Failure>;
    /// Deletes every object directly in `dir`, as far as it can.
    fn remove_dir(&self, dir: &str);
    /// How an error message names the object at `key` (a held lock's file).
    fn locator(&self, key: &str) -> String;
}

/// The `file://` backend: objects are files under `root`.
pub struct Files {
    pub root: PathBuf,
}

impl Files {
    fn path(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }
}

impl Store for Files {
    fn read(&self, key: &str) -> Result<Option<Vec<u8>>, Failure> {
        let path = self.path(key);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Failure::io(&path, e)),
        }
    }

    fn write(&self, key: &str, data: &[u8]) -> Result<(), Failure> {
        write_atomic(&self.path(key), data)
    }

    fn exists(&self, key: &str) -> Result<bool, Failure> {
        Ok(self.path(key).is_file())
    }

    fn delete(&self, key: &str) -> Result<(), Failure> {
        let path = self.path(key);
        std::fs::remove_file(&path).map_err(|e| Failure::io(&path, e))
    }

    fn copy(&self, from: &str, to: &str) -> Result<(), Failure> {
        let path = self.path(from);
        std::fs::copy(&path, self.path(to))
            .map(|_| ())
            .map_err(|e| Failure::io(&path, e))
    }

    fn rename(&self, from: &str, to: &str) -> Result<(), Failure> {
        let path = self.path(from);
        std::fs::rename(&path, self.path(to)).map_err(|e| Failure::io(&path, e))
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, Failure> {
        let mut keys: Vec<String> = std::fs::read_dir(self.path(dir))
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .filter_map(|e| e.file_name().to_str().map(|n| format!("{dir}/{n}")))
                    .collect()
            })
            .unwrap_or_default();
        keys.sort();
        Ok(keys)
    }

    fn remove_dir(&self, dir: &str) {
        let _ = std::fs::remove_dir_all(self.path(dir));
    }

    fn locator(&self, key: &str) -> String {
        format!("file://{}", self.path(key).display())
    }
}

/// Writes `path` whole or not at all: a temporary file beside it, renamed over it.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<(), Failure> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Failure::io(parent, e))?;
    }
    let temp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&temp, data).map_err(|e| Failure::io(&temp, e))?;
    std::fs::rename(&temp, path).map_err(|e| Failure::io(path, e))
}

/// An OS error as Go's syscall package words it (`no such file or directory`).
pub fn os_error(error: &std::io::Error) -> String {
    let text = match error.raw_os_error() {
        // SAFETY: strerror returns a pointer to a NUL-terminated message, read at once.
        Some(code) => unsafe { std::ffi::CStr::from_ptr(libc::strerror(code)) }
            .to_string_lossy()
            .into_owned(),
        None => error.to_string(),
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text,
    }
}
