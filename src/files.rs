//! Writing files that people and other tools read: atomically (a reader sees the old file or the
//! new one, never a part), with the mode they need. A user's files (kubeconfig, stack
//! configuration) are only ever written this way (docs/decisions.md, "Workspace and files").

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Reads a file mara did not make itself, or that something else may have replaced (a command's
/// outputs, a log, a record): only a regular file (following symlinks) is read — a FIFO is opened
/// without waiting for a writer and refused, a device refused before it is read without end
/// (`read_regular`).
pub fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    read_regular(path, u64::MAX)
}

/// What the first read of a file asks for: every file mara reads as input fits.
const FIRST_READ: usize = 64 << 10;

thread_local! {
    /// The first read's buffer, one per thread (the planning reads files on every core).
    static BUFFER: std::cell::RefCell<Box<[u8]>> =
        std::cell::RefCell::new(vec![0; FIRST_READ].into_boxed_slice());
}

/// Reads the regular file at `path` (following symlinks), of at most `limit` bytes (more is
/// `FileTooLarge`), in as few system calls as a read can take: a file that fits the first read is
/// opened, read once and closed (docs/benchmarks.md: 10,000 `Pulumi.yaml` files are most of a
/// plan's time). It is opened without blocking, so a FIFO does not wait for a writer; what it is
/// is asked only when the read says something is off — nothing read, the buffer filled (a device
/// never ends), an error (a directory) — and then anything but a regular file is refused, named.
pub fn read_regular(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
    {
        Ok(file) => file,
        // A socket is not opened at all.
        Err(error) if error.raw_os_error() == Some(libc::ENXIO) => return Err(not_regular(false)),
        Err(error) => return Err(error),
    };
    let mut bytes = Vec::new();
    let first = BUFFER.with_borrow_mut(|buffer| {
        let read = loop {
            match file.read(buffer) {
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                read => break read,
            }
        };
        if let Ok(n) = read {
            bytes.extend_from_slice(&buffer[..n]);
        }
        read
    });
    // Something, and less than asked: a regular file's end (POSIX: a read of a regular file
    // returns less only at its end). A FIFO that something is writing to at this moment is read
    // as what it holds (docs/decisions.md).
    if let Ok(n) = first
        && n > 0
        && n < FIRST_READ
        && n as u64 <= limit
    {
        return Ok(bytes);
    }
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(not_regular(metadata.is_dir()));
    }
    first?;
    file.take(limit.saturating_sub(bytes.len() as u64).saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("it is larger than {limit} bytes"),
        ));
    }
    Ok(bytes)
}

/// A file mara reads that is no regular file.
fn not_regular(is_dir: bool) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        match is_dir {
            true => "it is a directory, where a file belongs",
            false => "it is not a regular file (a FIFO, socket or device), where a file belongs",
        },
    )
}

/// `read`, as UTF-8 text.
pub fn read_to_string(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read(path)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Writes `text` to `path` atomically with mode 0600 (a kubeconfig, an environment file).
pub fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    write_atomic(path, text, 0o600)
}

/// Replaces a person's file (the shared stack configuration) with `text` atomically, keeping what
/// the file was (docs/decisions.md, "Edits keep the user's file what it was"): a symlink is
/// written through (the file it points to is replaced, the link stays), its mode and owner are
/// kept whatever the umask, a byte order mark it starts with is kept, and a file that cannot stay
/// what it was is refused, not replaced (`kept`: read-only, hard-linked, another user's). A new
/// file is as the umask makes it.
pub fn rewrite(path: &Path, text: &str) -> std::io::Result<()> {
    // A new file is as the user's umask makes it (0644 under 022, 0600 under 077).
    replace(path, text, 0o644 & !umask())
}

/// `rewrite`, a new file made with `new_mode` (a kubeconfig: 0600, as kubectl makes one).
pub fn replace(path: &Path, text: &str, new_mode: u32) -> std::io::Result<()> {
    let target = through_symlink(path)?;
    let Some(kept) = kept(&target)? else {
        return write_new(&target, text, new_mode, None);
    };
    match kept.bom && !text.starts_with('\u{feff}') {
        true => write_new(
            &target,
            &format!("\u{feff}{text}"),
            kept.mode,
            Some(kept.owner),
        ),
        false => write_new(&target, text, kept.mode, Some(kept.owner)),
    }
}

/// Whether `rewrite` or `replace` would replace the file at `path` (through a symlink) and keep
/// it what it was: asked before a run whose hook merges into the user's kubeconfig, so that the
/// refusal comes before anything is deployed.
pub fn replaceable(path: &Path) -> std::io::Result<()> {
    match through_symlink(path) {
        Ok(target) => kept(&target).map(drop),
        // A symlink to a file not there yet: the file is made where it points.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// The file a symlink at `path` points to (`path` itself when it is none).
fn through_symlink(path: &Path) -> std::io::Result<std::path::PathBuf> {
    match std::fs::symlink_metadata(path) {
        Ok(link) if link.file_type().is_symlink() => std::fs::canonicalize(path).map_err(|e| {
            let points = std::fs::read_link(path).unwrap_or_default();
            std::io::Error::new(
                e.kind(),
                format!(
                    "it is a symlink to {}, which cannot be reached ({e})",
                    points.display()
                ),
            )
        }),
        _ => Ok(path.to_path_buf()),
    }
}

/// What a person's file keeps when mara writes it anew beside itself and renames it over.
struct Kept {
    /// Its permission bits (setuid, setgid and sticky included).
    mode: u32,
    /// Its user and group.
    owner: (u32, u32),
    bom: bool,
}

/// What the file at `target` (no symlink) keeps, `None` when there is none. Refused, saying why,
/// when a new file renamed over it could not be what it was (docs/decisions.md, "Edits that
/// change only what was asked (issue 45)"): one its owner may not write (0444; the directory
/// would allow the rename), one with more than one hard link (the rename would leave the other
/// names holding the old text), one of another user's that mara cannot give the new file.
fn kept(target: &Path) -> std::io::Result<Option<Kept>> {
    use std::os::unix::fs::MetadataExt;
    let metadata = match std::fs::metadata(target) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mode = metadata.mode() & 0o7777;
    let refused = |kind, why: String| Err(std::io::Error::new(kind, why));
    if mode & 0o200 == 0 {
        return refused(
            std::io::ErrorKind::PermissionDenied,
            "it is read-only (make it writable to let mara change it)".into(),
        );
    }
    if metadata.is_file() && metadata.nlink() > 1 {
        return refused(
            std::io::ErrorKind::InvalidInput,
            format!(
                "it has {} hard links: mara writes a file anew and renames it over the old one, which would leave the other names with the old text (make the others symlinks, or edit it by hand)",
                metadata.nlink()
            ),
        );
    }
    // SAFETY: geteuid only reads this process's effective user id.
    let me = unsafe { libc::geteuid() };
    if me != 0 && metadata.uid() != me {
        return refused(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "it belongs to user {}: the file mara writes in its place would be yours (edit it as its owner)",
                metadata.uid()
            ),
        );
    }
    Ok(Some(Kept {
        mode,
        owner: (metadata.uid(), metadata.gid()),
        bom: starts_with_bom(target),
    }))
}

/// The process's umask, as Linux reports it (`/proc/self/status`; 022 where it cannot be read:
/// setting it to read it would change it for every thread at once).
fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("Umask:"))?;
            u32::from_str_radix(line.trim_start_matches("Umask:").trim(), 8).ok()
        })
        .unwrap_or(0o022)
}

/// Whether the file starts with a UTF-8 byte order mark.
fn starts_with_bom(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 3];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| head == [0xEF, 0xBB, 0xBF])
}

/// An open file under an exclusive lock (`File::lock`: `flock` on Linux, which waits for the
/// lock), released when dropped, before the file is closed.
pub struct Flock(std::fs::File);

impl Flock {
    pub fn exclusive(file: std::fs::File) -> std::io::Result<Flock> {
        file.lock()?;
        Ok(Flock(file))
    }
}

impl std::ops::Deref for Flock {
    type Target = std::fs::File;

    fn deref(&self) -> &std::fs::File {
        &self.0
    }
}

impl std::ops::DerefMut for Flock {
    fn deref_mut(&mut self) -> &mut std::fs::File {
        &mut self.0
    }
}

impl Drop for Flock {
    fn drop(&mut self) {
        // An unlock that fails leaves the lock to the file's closing, which follows.
        let _ = self.0.unlock();
    }
}

/// An exclusive lock on a directory, held until dropped: the editors of the files in it (mara's
/// processes) take turns, each reading what the one before wrote.
pub struct DirLock {
    _turn: Flock,
}

impl DirLock {
    pub fn take(dir: &Path) -> std::io::Result<DirLock> {
        std::fs::create_dir_all(dir)?;
        Ok(DirLock {
            _turn: Flock::exclusive(std::fs::File::open(dir)?)?,
        })
    }
}

/// Makes mara's own directory `dir` (the workspace's `.mara/`), ignored by git: a `.gitignore`
/// holding `*` is written in it when it has none (and never rewritten), as cargo and pytest do for
/// theirs — it holds kubeconfigs, the ledger, logs and plans, none of which belongs in a commit.
/// Only in a directory mara makes, or one named `.mara`: a `state_dir` set to a directory of the
/// repository's own (`.`) must not hide the repository.
pub fn own_dir(dir: &Path) -> std::io::Result<()> {
    let made = !dir.exists();
    std::fs::create_dir_all(dir)?;
    let named = dir.file_name().is_some_and(|n| n == ".mara");
    if !made && !named {
        return Ok(());
    }
    let ignore = dir.join(".gitignore");
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&ignore)
    {
        Ok(mut file) => {
            use std::io::Write as _;
            file.write_all(b"# mara's own files: kubeconfigs, the run ledger, logs, plans.\n*\n")
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Makes directory `dir` (and those above it) readable by its owner alone: what it holds (a
/// saved plan) may hold secrets.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    // One that was there already is made private too.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Makes the directories of `dir` that are missing, each readable by its owner alone; one that
/// is there keeps its mode (it may be a person's: mara changes no mode it did not set).
pub fn new_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Makes the file a process is about to write (`path`: a saved plan) readable by its owner
/// alone before it writes it, whatever the umask: a program that truncates a file it writes
/// keeps the file's mode (Terraform's `plan -out` does).
pub fn private_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
}

/// Sets `path`'s mode (a file mara wrote).
pub fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Whether `path` is a regular file (following symlinks): the only kind mara opens to read
/// what something else may have put there.
pub fn is_regular(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

/// Writes `text` to `path` atomically with `mode` (whatever the umask): a temporary file beside
/// it, synced, then renamed over it.
pub fn write_atomic(path: &Path, text: &str, mode: u32) -> std::io::Result<()> {
    write_new(path, text, mode, None)
}

/// `write_atomic`, the new file given `owner` (user, group) before it is renamed into place —
/// where it differs from what the new file got — so that no reader sees it otherwise owned.
fn write_new(path: &Path, text: &str, mode: u32, owner: Option<(u32, u32)>) -> std::io::Result<()> {
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
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&temp)?;
        if let Some(owner) = owner {
            give(&file, owner)?;
        }
        // The umask took bits off the mode the file was created with (and a change of owner
        // the setuid and setgid bits): they are put back.
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temp, path)
    })();
    written.inspect_err(|_| {
        let _ = std::fs::remove_file(&temp);
    })
}

/// Gives the open `file` the user and group `owner`, where they are not already its.
fn give(file: &std::fs::File, (uid, gid): (u32, u32)) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let now = file.metadata()?;
    if (now.uid(), now.gid()) == (uid, gid) {
        return Ok(());
    }
    std::os::unix::fs::fchown(file, Some(uid), Some(gid)).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!(
                "it belongs to user {uid} and group {gid}, which the file mara writes in its place cannot be given ({e}): edit it as its owner"
            ),
        )
    })
}

/// What `file` holds past `offset` (whole lines only), moving `offset` on.
pub fn read_from(file: &Path, offset: &mut u64) -> Option<String> {
    // A log replaced by a FIFO is not waited on.
    if !is_regular(file) {
        return None;
    }
    use std::io::{Read, Seek, SeekFrom};
    let mut handle = std::fs::File::open(file).ok()?;
    handle.seek(SeekFrom::Start(*offset)).ok()?;
    // A line that is not UTF-8 (a program's raw bytes) is shown as it can be, not lost.
    let mut bytes = Vec::new();
    handle.read_to_end(&mut bytes).ok()?;
    let whole = bytes.iter().rposition(|b| *b == b'\n').map(|i| i + 1)?;
    *offset += whole as u64;
    Some(String::from_utf8_lossy(&bytes[..whole]).into_owned())
}

/// `a/./b/../c` → `a/c`, without touching the file system.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_lock_is_exclusive_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let locked = dir.path().join("kube");
        let other = || std::fs::File::open(&locked).unwrap();
        let turn = DirLock::take(&locked).unwrap();
        // Another open of the directory (as another process's) does not get it meanwhile.
        assert!(matches!(
            other().try_lock(),
            Err(std::fs::TryLockError::WouldBlock)
        ));
        drop(turn);
        other().try_lock().unwrap();
        // A blocking take waits for the holder to let go.
        let held = Flock::exclusive(other()).unwrap();
        let waiting = std::thread::spawn(move || DirLock::take(&locked).map(drop));
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!waiting.is_finished());
        drop(held);
        waiting.join().unwrap().unwrap();
    }

    #[test]
    fn a_rewrite_keeps_the_file_what_it_was() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("shared/Pulumi.dev.yaml");
        std::fs::create_dir_all(real.parent().unwrap()).unwrap();
        std::fs::write(&real, "\u{feff}config:\n  a:b: 1\n").unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).unwrap();
        let link = dir.path().join("Pulumi.dev.yaml");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        // SAFETY: umask only sets this process's mask; the test restores it.
        let before = unsafe { libc::umask(0o077) };
        rewrite(&link, "config:\n  a:b: 2\n").unwrap();
        unsafe { libc::umask(before) };
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(
            std::fs::read_to_string(&real).unwrap(),
            "\u{feff}config:\n  a:b: 2\n",
            "written through the link, its byte order mark kept"
        );
        assert_eq!(
            std::fs::metadata(&real).unwrap().permissions().mode() & 0o777,
            0o640,
            "its mode, whatever the umask"
        );
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o444)).unwrap();
        let refused = rewrite(&link, "config: {}\n").unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(std::fs::read_to_string(&real).unwrap().contains("a:b: 2"));
    }

    #[test]
    fn a_file_that_cannot_stay_what_it_was_is_refused_and_its_owner_is_kept() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("Pulumi.dev.yaml");
        std::fs::write(&file, "config: {}\n").unwrap();
        // As root (where the tests run in CI), another user's file stays theirs.
        // SAFETY: geteuid only reads this process's user id.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&file, Some(4321), Some(4322)).unwrap();
            rewrite(&file, "config:\n  a:b: 1\n").unwrap();
            let metadata = std::fs::metadata(&file).unwrap();
            assert_eq!((metadata.uid(), metadata.gid()), (4321, 4322));
        }
        let other = dir.path().join("other.yaml");
        std::fs::hard_link(&file, &other).unwrap();
        let before = std::fs::read(&file).unwrap();
        let refused = rewrite(&file, "config: {}\n").unwrap_err();
        assert!(
            refused.to_string().starts_with("it has 2 hard links"),
            "{refused}"
        );
        assert_eq!(replaceable(&file).unwrap_err().kind(), refused.kind());
        assert_eq!(std::fs::read(&file).unwrap(), before);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            2,
            "no file left beside"
        );
        // A symlink to a file not made yet is one to make, with the mode a new one gets.
        let dangling = dir.path().join("kubeconfig");
        std::os::unix::fs::symlink(dir.path().join("kube/config"), &dangling).unwrap();
        replaceable(&dangling).unwrap();
        replace(&dir.path().join("kube/config"), "x", 0o600).unwrap();
        let made = std::fs::metadata(dir.path().join("kube/config")).unwrap();
        assert_eq!(made.mode() & 0o777, 0o600);
    }

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
