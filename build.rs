//! `mara --version`: the package's version and the commit it was built from (docs/install.md).
//! The commit comes from git when built in a clone, from the `.cargo_vcs_info.json` cargo writes
//! into a published package (`cargo install mara-iac`), else from `MARA_COMMIT` (a packager's);
//! without any, the version alone. A build script, not a crate: it is thirty lines.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=MARA_COMMIT");
    let commit = std::env::var("MARA_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(from_package)
        .or_else(from_git);
    let version = env!("CARGO_PKG_VERSION");
    let line = match commit {
        Some(commit) => format!("{version} ({commit})"),
        None => version.to_string(),
    };
    println!("cargo:rustc-env=MARA_VERSION={line}");
}

/// The commit `cargo package` recorded: `{"git": {"sha1": "…"}}`.
fn from_package() -> Option<String> {
    println!("cargo:rerun-if-changed=.cargo_vcs_info.json");
    let text = std::fs::read_to_string(".cargo_vcs_info.json").ok()?;
    let at = text.find("\"sha1\"")?;
    let rest = &text[at + 6..];
    let start = rest.find('"')? + 1;
    let sha = &rest[start..start + rest[start..].find('"')?];
    Some(sha.chars().take(12).collect())
}

/// The clone's commit; the build script runs again when HEAD or its branch moves.
fn from_git() -> Option<String> {
    let git = |args: &[&str]| {
        let output = Command::new("git").args(args).output().ok()?;
        let text = String::from_utf8(output.stdout).ok()?;
        output.status.success().then(|| text.trim().to_string())
    };
    let dir = git(&["rev-parse", "--absolute-git-dir"])?;
    println!("cargo:rerun-if-changed={dir}/HEAD");
    // A branch's file is in the repository's common directory (a worktree's own has none).
    let common = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"])?;
    if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
        let file = Path::new(&common).join(&reference);
        let packed = Path::new(&common).join("packed-refs");
        for watched in [file, packed].iter().filter(|f| f.exists()) {
            println!("cargo:rerun-if-changed={}", watched.display());
        }
    }
    git(&["rev-parse", "--short=12", "HEAD"])
}
