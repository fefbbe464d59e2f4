//! The last test binary of `cargo test` (cargo runs them in the order of their names): it says
//! how many tests of this run were skipped for a tool or a capability this machine lacks, and why,
//! so that a plain `cargo test` never passes in silence what it did not run. Under `.ci/test`
//! a missing tool is a failure instead (`tests/common/tools.rs`).

mod common;

use std::io::Write;

#[test]
fn the_tests_that_were_skipped_are_counted() {
    let log = common::tools::skip_log();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    let skipped: Vec<&str> = text.lines().collect();
    let mut said = std::io::stderr();
    let _ = match skipped.len() {
        0 => writeln!(said, "\nmara's tests: none was skipped."),
        n => writeln!(
            said,
            "\nmara's tests: {n} {} skipped, and counted as passed above (`.ci/test` installs what they need):\n  {}",
            if n == 1 { "was" } else { "were" },
            skipped.join("\n  ")
        ),
    };
}
