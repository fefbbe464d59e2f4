//! Writing files that people and other tools read: atomically (a reader sees the old file or the
//! new one, never a part), with the mode they need. A user's files (kubeconfig, stack
//! configuration) are only ever written this way (docs/decisions.md, "Workspace and files").

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Writes `text` to `path` atomically with mode 0600 (a kubeconfig, an environment file).
pub fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    write_atomic(path, text, 0o600)
}

/// Replaces a person's file (the shared stack configuration) with `text` atomically, keeping its
/// mode; a new file gets 0644.
pub fn rewrite(path: &Path, text: &str) -> std::io::Result<()> {
    let mode = std::fs::metadata(path).map_or(0o644, |m| {
        std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777
    });
    write_atomic(path, text, mode)
}

/// Writes `text` to `path` atomically with `mode`: a temporary file beside it, synced, then
/// renamed over it.
pub fn write_atomic(path: &Path, text: &str, mode: u32) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    // Unique to this write: parallel hooks of one run may write beside each other.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let temp = dir.join(format!(
        ".{}.mara-{}-{}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id(),
        WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&temp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_files_are_0600_and_whole() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kube/dev.yaml");
        write_private(&path, "x").unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "x");
        write_private(&path, "y").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "y");
        assert_eq!(
            std::fs::read_dir(dir.path().join("kube")).unwrap().count(),
            1
        );
    }
}
