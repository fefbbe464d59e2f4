//! The real tools the tests run, found or missing. A test that needs one it cannot find fails
//! under the README's test command (`.ci/test`, which installs them and sets
//! `MARA_TEST_TOOLS=required`) and under CI; under a plain `cargo test` it is skipped — said at
//! once on the terminal, past the test harness's capture, and counted again by the last test
//! binary (`tests/zz_skipped.rs`), so that a skip is never a pass in silence.

use std::io::Write;
use std::path::PathBuf;

/// Whether a missing tool fails the test (`.ci/test`, CI) rather than skipping it.
pub fn required() -> bool {
    std::env::var("MARA_TEST_TOOLS").is_ok_and(|v| v == "required")
        || std::env::var_os("CI").is_some()
}

/// Where this `cargo test`'s skips are written: `MARA_TEST_SKIP_LOG` when set (`.ci/test` sets
/// it, emptied, for each of its runs), else one file per run of cargo (the test binaries' parent
/// process) under cargo's own temporary directory.
pub fn skip_log() -> PathBuf {
    if let Some(log) = std::env::var_os("MARA_TEST_SKIP_LOG").filter(|l| !l.is_empty()) {
        return PathBuf::from(log);
    }
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("skips")
        .join(format!("{}.log", std::os::unix::process::parent_id()))
}

/// Records that the running test did not run what it is for, and why.
pub fn skip(why: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let line = format!("{}::{test}: {why}", env!("CARGO_CRATE_NAME"));
    // Straight to the terminal: the harness captures only what print! and eprint! write.
    let _ = writeln!(std::io::stderr(), "skipped: {line}");
    let log = skip_log();
    if let Some(dir) = log.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
    {
        let _ = writeln!(file, "{line}");
    }
}

/// The program `name` on PATH; without it, the test fails where tools are required, and is
/// skipped (`None`) elsewhere. `why` says what the test runs it for.
pub fn tool(name: &str, why: &str) -> Option<PathBuf> {
    match which::which(name) {
        Ok(path) => Some(path),
        Err(_) => missing(&format!("{name} is not on PATH ({why})")),
    }
}

/// Something a test needs is not here (`what`): a failure where tools are required, else a skip.
pub fn missing<T>(what: &str) -> Option<T> {
    if required() {
        panic!("{what}: `.ci/test` installs it");
    }
    skip(&format!("{what}; `.ci/test` installs it"));
    None
}
