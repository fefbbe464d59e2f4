//! Projects' own hashes kept between runs, as git's index keeps files' (docs/decisions.md, "Per
//! task no dearer than make"): a project whose files have the same paths, sizes, modification
//! and change times, inodes and devices as when its hash was made — and the same shared inputs
//! and provider entry — has the same hash, found with one `stat` a file instead of reading and
//! hashing each. A file changed less than two seconds before the hash was made is not trusted to
//! show a later change in its times (a file system's clock ticks coarsely): such a project is
//! hashed from its files every time until it is older.
//!
//! Kept in `.mara/fingerprints` (one line a project: its signature, its hash, its directory),
//! written whole and renamed into place; a cache that cannot be read is an empty one.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

/// The file, in the state directory.
pub const FILE: &str = "fingerprints";

/// How recently a file may have changed for its times to be trusted.
const SETTLED: Duration = Duration::from_secs(2);

/// The hashes found last time, and those made now.
pub struct Cache {
    path: PathBuf,
    kept: HashMap<String, (String, String)>,
    made: Mutex<HashMap<String, (String, String)>>,
}

impl Cache {
    /// The cache of the workspace whose state directory is `state_dir`.
    pub fn open(state_dir: &Path) -> Cache {
        let path = state_dir.join(FILE);
        let text = crate::files::read(&path).unwrap_or_default();
        let kept = String::from_utf8_lossy(&text)
            .lines()
            .filter_map(|line| {
                let mut fields = line.splitn(3, ' ');
                let (signature, hash, dir) = (fields.next()?, fields.next()?, fields.next()?);
                Some((dir.to_string(), (signature.to_string(), hash.to_string())))
            })
            .collect();
        Cache {
            path,
            kept,
            made: Mutex::new(HashMap::new()),
        }
    }

    /// The hash of the project in `dir` whose inputs sign as `signature`, if kept.
    pub fn get(&self, dir: &Path, signature: &str) -> Option<String> {
        let (kept, hash) = self.kept.get(dir.to_str()?)?;
        (kept == signature).then(|| hash.clone())
    }

    /// Keeps `hash` for the project in `dir` whose inputs sign as `signature`.
    pub fn put(&self, dir: &Path, signature: String, hash: String) {
        if let (Some(dir), Ok(mut made)) = (dir.to_str(), self.made.lock()) {
            made.insert(dir.to_string(), (signature, hash));
        }
    }

    /// Writes what changed since it was read, if anything (a failure is no error: it is a
    /// cache).
    pub fn save(self) {
        let made = self.made.into_inner().unwrap_or_default();
        if made
            .iter()
            .all(|(dir, entry)| self.kept.get(dir) == Some(entry))
        {
            return;
        }
        let mut all = self.kept;
        all.extend(made);
        let mut lines: Vec<String> = (all.iter())
            .map(|(dir, (signature, hash))| format!("{signature} {hash} {dir}\n"))
            .collect();
        lines.sort();
        let _ = crate::files::write_atomic(&self.path, &lines.concat(), 0o600);
    }
}

/// The cache of the last fingerprints made, until a run keeps it (`keep_hashes`).
static HELD: Mutex<Option<Cache>> = Mutex::new(None);

pub fn hold(cache: Cache) {
    if let Ok(mut held) = HELD.lock() {
        *held = Some(cache);
    }
}

pub fn save_held() {
    let held = HELD.lock().ok().and_then(|mut held| held.take());
    if let Some(cache) = held {
        cache.save();
    }
}

/// What a project's hash depends on besides its files' contents (`common`: the shared inputs,
/// its provider entry, the stack), and each file's path and times: one `stat` a file. `None`
/// when a file changed too recently for its times to be trusted, or cannot be looked at.
pub fn signature(common: &[u8], dir: &Path, files: &[PathBuf]) -> Option<String> {
    let mut hasher = Sha256::new();
    hasher.update(b"mara-signature-1\0");
    hasher.update(common);
    let settled = SystemTime::now().checked_sub(SETTLED)?;
    for path in files {
        let meta = std::fs::symlink_metadata(path).ok()?;
        if meta.modified().ok()? > settled || changed(&meta)? > settled {
            return None;
        }
        hasher.update(
            path.strip_prefix(dir)
                .unwrap_or(path)
                .as_os_str()
                .as_encoded_bytes(),
        );
        let times = [
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime(),
            meta.ctime_nsec(),
        ];
        for n in times
            .into_iter()
            .chain([meta.size() as i64, meta.ino() as i64, meta.dev() as i64])
        {
            hasher.update(n.to_le_bytes());
        }
    }
    Some(super::hex(&hasher.finalize()))
}

/// When a file's inode last changed (its ctime).
fn changed(meta: &std::fs::Metadata) -> Option<SystemTime> {
    let seconds = u64::try_from(meta.ctime()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::new(seconds, meta.ctime_nsec() as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_is_found_again_while_its_files_are_as_they_were_and_settled() {
        let dir = tempfile::tempdir().unwrap();
        let files = [dir.path().join("Pulumi.yaml"), dir.path().join("main.py")];
        for file in &files {
            std::fs::write(file, "one\n").unwrap();
        }
        assert_eq!(signature(b"c", dir.path(), &files), None, "just written");
        std::thread::sleep(SETTLED + Duration::from_millis(100));
        let signed = signature(b"c", dir.path(), &files).unwrap();
        assert_eq!(signature(b"c", dir.path(), &files).as_ref(), Some(&signed));
        assert_ne!(
            signature(b"other", dir.path(), &files).as_ref(),
            Some(&signed)
        );
        let state = dir.path().join(".mara");
        std::fs::create_dir(&state).unwrap();
        let cache = Cache::open(&state);
        assert_eq!(cache.get(dir.path(), &signed), None);
        cache.put(dir.path(), signed.clone(), "h1".into());
        cache.save();
        assert_eq!(
            Cache::open(&state).get(dir.path(), &signed).as_deref(),
            Some("h1")
        );
        // The same size, the same modification time: its change time still tells.
        let mtime = std::fs::metadata(&files[1]).unwrap().modified().unwrap();
        std::fs::write(&files[1], "two\n").unwrap();
        let file = std::fs::File::options()
            .write(true)
            .open(&files[1])
            .unwrap();
        file.set_modified(mtime).unwrap();
        assert_ne!(signature(b"c", dir.path(), &files).as_ref(), Some(&signed));
    }
}
